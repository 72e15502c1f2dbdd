//! The `append_line` built-in tool: appends one line to a text file under the root directory.
//!
//! It exists to make side effects visible in demos and crash tests: each successful call adds
//! exactly `line + "\n"` to the file (created if missing; its directory must exist), written
//! with a single append-mode write and flushed to disk before the tool returns. Paths are
//! confined to [`ToolContext::root`] exactly as `read_file` does, and only regular files are
//! appended to (a FIFO or device is refused without being waited on). The tool call id is the
//! idempotency key (R-IDEM-3, R-IDEM-6): the tool returns `appended 1 line (call <id>)`, so
//! the persisted result names the call that caused the write. The tool is *not* retry-safe:
//! after a crash between start and result, the runtime reports `outcome_unknown` instead of
//! appending a second copy.

use std::io::Write;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::read_file::{open_error, resolve_for_write};
use super::{ToolContext, ToolError, TypedTool};
use crate::regular_file::open_regular;

/// Longest line accepted, in bytes.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The `append_line` tool. Side-effecting: killable, but not safe to retry.
#[derive(Debug, Default, Clone, Copy)]
pub struct AppendLine;

/// Arguments of `append_line`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AppendLineArgs {
    /// Path of the file, relative to the tool root directory (it may not leave it). The file is
    /// created if missing; its directory must already exist.
    pub path: String,
    /// The text to append as one line (without a newline; one is added).
    pub line: String,
}

#[async_trait]
impl TypedTool for AppendLine {
    type Args = AppendLineArgs;
    const NAME: &'static str = "append_line";
    const DESCRIPTION: &'static str =
        "Appends one line of text to a file under the root directory, creating the file if needed.";

    fn killable(&self) -> bool {
        true
    }

    fn retry_safe(&self) -> bool {
        false
    }

    async fn run(&self, ctx: ToolContext, args: AppendLineArgs) -> Result<String, ToolError> {
        if args.line.contains(['\n', '\r']) {
            return Err(ToolError::Failed(
                "`line` must be a single line: it contains a line break".into(),
            ));
        }
        if args.line.len() > MAX_LINE_BYTES {
            return Err(ToolError::Failed(format!(
                "`line` is too long ({} bytes; the limit is {MAX_LINE_BYTES})",
                args.line.len()
            )));
        }
        let root = ctx.root.clone();
        let path = args.path.clone();
        let mut record = args.line;
        record.push('\n');
        tokio::task::spawn_blocking(move || append(&root, &path, record.as_bytes()))
            .await
            .map_err(|e| ToolError::Failed(format!("append_line did not finish: {e}")))?
            .map_err(ToolError::Failed)?;
        Ok(format!("appended 1 line (call {})", ctx.call_id))
    }
}

fn append(root: &std::path::Path, requested: &str, record: &[u8]) -> Result<(), String> {
    let target = resolve_for_write(root, requested)?;
    // `target`'s last component is not a link (it was resolved); refuse one swapped in since.
    // Never blocks: a FIFO or device is refused (see `crate::regular_file`).
    let mut file = open_regular(
        &target,
        std::fs::OpenOptions::new().create(true).append(true),
    )
    .map_err(|e| open_error(requested, e, "append to"))?;
    // One write of the whole record: O_APPEND keeps parallel appends from interleaving.
    file.write_all(record)
        .and_then(|()| file.sync_data())
        .map_err(|e| format!("cannot append to `{requested}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Tool;
    use serde_json::json;
    use std::path::Path;
    use std::sync::Arc;

    fn ctx(root: &Path, id: &str) -> ToolContext {
        ToolContext {
            call_id: id.into(),
            root: root.to_path_buf(),
        }
    }

    async fn append_via_tool(
        root: &Path,
        id: &str,
        path: &str,
        line: &str,
    ) -> Result<String, String> {
        AppendLine
            .call(ctx(root, id), json!({ "path": path, "line": line }))
            .await
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn appends_exactly_one_line_and_names_the_call() {
        let dir = tempfile::tempdir().unwrap();
        let out = append_via_tool(dir.path(), "call_3_1", "log.txt", "first").await;
        assert_eq!(out.as_deref(), Ok("appended 1 line (call call_3_1)"));
        append_via_tool(dir.path(), "call_3_2", "./log.txt", "second ünïcode")
            .await
            .unwrap();
        let content = std::fs::read_to_string(dir.path().join("log.txt")).unwrap();
        assert_eq!(content, "first\nsecond ünïcode\n");
        assert!(!Tool::retry_safe(&AppendLine));
        assert!(Tool::killable(&AppendLine));
        let schema = Tool::spec(&AppendLine).parameters;
        assert_eq!(schema["required"], json!(["path", "line"]));
    }

    #[tokio::test]
    async fn parallel_appends_do_not_interleave() {
        let dir = tempfile::tempdir().unwrap();
        let tool = Arc::new(AppendLine);
        let mut tasks = Vec::new();
        for i in 0..32 {
            let tool = tool.clone();
            let root = dir.path().to_path_buf();
            tasks.push(tokio::spawn(async move {
                let line = format!("line-{i}-{}", "x".repeat(200));
                tool.call(
                    ctx(&root, &format!("c{i}")),
                    json!({"path": "p.txt", "line": line}),
                )
                .await
                .map_err(|e| e.to_string())
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let content = std::fs::read_to_string(dir.path().join("p.txt")).unwrap();
        let mut lines: Vec<&str> = content.lines().collect();
        assert_eq!(lines.len(), 32);
        lines.sort();
        lines.dedup();
        assert_eq!(lines.len(), 32);
        assert!(lines.iter().all(|l| l.ends_with(&"x".repeat(200))));
    }

    #[tokio::test]
    async fn refuses_escapes_line_breaks_and_missing_directories() {
        let outer = tempfile::tempdir().unwrap();
        let root = outer.path().join("root");
        std::fs::create_dir(&root).unwrap();

        let e = append_via_tool(&root, "c", "../evil.txt", "x")
            .await
            .unwrap_err();
        assert!(e.contains("outside the root"), "{e}");
        assert!(!outer.path().join("evil.txt").exists());
        let abs = outer.path().join("evil.txt");
        let e = append_via_tool(&root, "c", abs.to_str().unwrap(), "x")
            .await
            .unwrap_err();
        assert!(e.contains("outside the root"), "{e}");
        assert!(!abs.exists());

        let e = append_via_tool(&root, "c", "a.txt", "two\nlines")
            .await
            .unwrap_err();
        assert!(e.contains("line break"), "{e}");
        assert!(!root.join("a.txt").exists());

        let e = append_via_tool(&root, "c", "nodir/a.txt", "x")
            .await
            .unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
        let e = append_via_tool(&root, "c", ".", "x").await.unwrap_err();
        assert!(e.contains("directory"), "{e}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn refuses_symlinks_pointing_outside() {
        let outer = tempfile::tempdir().unwrap();
        let root = outer.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(outer.path().join("victim.txt"), "").unwrap();
        std::os::unix::fs::symlink(outer.path().join("victim.txt"), root.join("link.txt")).unwrap();
        std::os::unix::fs::symlink(outer.path(), root.join("outdir")).unwrap();
        std::os::unix::fs::symlink(outer.path().join("ghost.txt"), root.join("dangling.txt"))
            .unwrap();

        let e = append_via_tool(&root, "c", "link.txt", "x")
            .await
            .unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        let e = append_via_tool(&root, "c", "outdir/new.txt", "x")
            .await
            .unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(!outer.path().join("new.txt").exists());
        let e = append_via_tool(&root, "c", "dangling.txt", "x")
            .await
            .unwrap_err();
        assert!(e.contains("missing target"), "{e}");
        assert!(!outer.path().join("ghost.txt").exists());
        assert_eq!(
            std::fs::read_to_string(outer.path().join("victim.txt")).unwrap(),
            ""
        );
    }
}
