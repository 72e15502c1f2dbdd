//! Paths the built-in file tools never touch: the session stores' files.
//!
//! The registry is the store crate's ([`agentloop_store::protected`], where it is described):
//! every store that lives on disk registers its location there when it opens, and
//! `read_file` and `append_line` refuse a target inside a registered location (see
//! [`check`]). Its functions are re-exported here, beside the tools that call them.
//!
//! # Example
//!
//! ```
//! use agentloop::tools::protected;
//!
//! let secrets = std::env::temp_dir().join("agentloop-doc-protected");
//! std::fs::create_dir_all(&secrets)?;
//! protected::protect(&secrets);
//! let target = secrets.canonicalize()?.join("key.txt");
//! assert!(protected::check("key.txt", &target).is_err());
//! # Ok::<(), std::io::Error>(())
//! ```

#[cfg(any(
    feature = "file-store",
    feature = "sqlite-store",
    feature = "postgres-store"
))]
pub use agentloop_store::protected::protect_store;
pub use agentloop_store::protected::{check, protect, protect_file_family};

#[cfg(test)]
mod tests {
    /// A library user's `FileStore` is off limits to the built-in tools as soon as it opens,
    /// even when the tool root is the store directory itself.
    #[cfg(all(feature = "file-store", feature = "builtin-tools"))]
    #[tokio::test]
    async fn an_opened_file_store_is_refused_to_read_file_and_append_line() {
        use crate::tools::{append_line::AppendLine, read_file::ReadFile, Tool, ToolContext};
        use serde_json::json;
        let dir = tempfile::tempdir().unwrap();
        let _store = crate::store::FileStore::open(dir.path().join("store")).unwrap();
        std::fs::write(dir.path().join("store/s.jsonl"), "x\n").unwrap();
        std::fs::write(dir.path().join("free.txt"), "free").unwrap();
        for root in [dir.path().to_path_buf(), dir.path().join("store")] {
            let ctx = ToolContext {
                call_id: "c".into(),
                root: root.clone(),
                idempotency_key: None,
            };
            let e = ReadFile
                .call(
                    ctx.clone(),
                    json!({"path": dir.path().join("store/s.jsonl")}),
                )
                .await
                .unwrap_err()
                .to_string();
            assert!(e.contains("session store"), "{e}");
            let e = AppendLine
                .call(
                    ctx.clone(),
                    json!({"path": dir.path().join("store/t.jsonl"), "line": "y"}),
                )
                .await
                .unwrap_err()
                .to_string();
            assert!(e.contains("session store"), "{e}");
        }
        assert_eq!(
            std::fs::read_to_string(dir.path().join("store/s.jsonl")).unwrap(),
            "x\n"
        );
        assert!(!dir.path().join("store/t.jsonl").exists());
        let ctx = ToolContext {
            call_id: "c".into(),
            root: dir.path().to_path_buf(),
            idempotency_key: None,
        };
        let free = ReadFile.call(ctx, json!({"path": "free.txt"})).await;
        assert_eq!(free.unwrap(), "free");
    }
}
