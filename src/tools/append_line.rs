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
//!
//! A runtime that does re-run a call after a crash (the Restate adapter re-runs the effect in
//! flight) passes [`ToolContext::idempotency_key`]. A keyed call records `<offset> <key>` in a
//! side index `<file>.agentloop-keys` next to the file *before* it appends, under an exclusive
//! lock of that index (`flock`, unix): a call whose key is recorded and whose line is at the
//! recorded offset does not append again (it returns `already appended ...`); a key recorded
//! by a call that died before its append (the file is still shorter, or holds something else
//! there) appends. The side index keeps the file itself exactly the lines written. Keyed
//! calls are serialized with each other, not with unkeyed writers of the same file. A call
//! without a key behaves as before and writes no index.

use std::io::Write;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::read_file::{open_error, resolve_for_write};
use super::{ToolContext, ToolError, TypedTool};
use agentloop_store::regular_file::open_regular;

/// Longest line accepted, in bytes.
pub(crate) const MAX_LINE_BYTES: usize = 64 * 1024;

/// The `append_line` tool. Side-effecting: killable, but not safe to retry.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AppendLine;

/// Arguments of `append_line`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AppendLineArgs {
    /// Path of the file, relative to the tool root directory (it may not leave it). The file is
    /// created if missing; its directory must already exist.
    pub(crate) path: String,
    /// The text to append as one line (without a newline; one is added).
    pub(crate) line: String,
}

#[async_trait]
impl TypedTool for AppendLine {
    type Args = AppendLineArgs;
    const NAME: &'static str = "append_line";
    const DESCRIPTION: &'static str =
        "Appends one line of text to a file under the root directory, creating the file if needed.";

    // Killable and not retry-safe: the defaults.
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
        let key = ctx.idempotency_key.clone();
        let allowed = ctx.allow_instruction_writes;
        if key.as_deref().is_some_and(|k| k.contains(['\n', '\r'])) {
            return Err(ToolError::Failed(
                "the idempotency key contains a line break".into(),
            ));
        }
        let appended = tokio::task::spawn_blocking(move || match key {
            Some(key) => append_keyed(&root, &path, allowed, record.as_bytes(), &key),
            None => append(&root, &path, allowed, record.as_bytes()).map(|()| true),
        })
        .await
        .map_err(|e| ToolError::Failed(format!("append_line did not finish: {e}")))?
        .map_err(ToolError::Failed)?;
        if appended {
            Ok(format!("appended 1 line (call {})", ctx.call_id))
        } else {
            Ok(format!(
                "already appended (call {}): its key is recorded, nothing appended again",
                ctx.call_id
            ))
        }
    }
}

/// Suffix of the side index of keyed appends (`log.txt` → `log.txt.agentloop-keys`).
pub(crate) const KEYS_SUFFIX: &str = ".agentloop-keys";

/// Appends `record` unless `key` is recorded in the side index with `record` at its offset.
/// Returns whether it appended.
fn append_keyed(
    root: &std::path::Path,
    requested: &str,
    allowed: bool,
    record: &[u8],
    key: &str,
) -> Result<bool, String> {
    use std::io::{Read, Seek, SeekFrom};
    let target = resolve_writable(root, requested, allowed)?;
    let mut index_name = target
        .file_name()
        .map(|n| n.to_os_string())
        .ok_or_else(|| format!("`{requested}` names no file"))?;
    index_name.push(KEYS_SUFFIX);
    let index_path = target.with_file_name(index_name);
    super::protected::check(requested, &index_path)?;
    let open = |path: &std::path::Path, doing: &str| {
        let mut options = std::fs::OpenOptions::new();
        options.create(true).read(true).append(true);
        open_regular(path, &mut options).map_err(|e| open_error(requested, e, doing))
    };
    let mut index = open(&index_path, "record a key for")?;
    let _lock = IndexLock::exclusive(&index)
        .map_err(|e| format!("cannot lock the key index of `{requested}`: {e}"))?;
    let mut recorded = String::new();
    index
        .read_to_string(&mut recorded)
        .map_err(|e| format!("cannot read the key index of `{requested}`: {e}"))?;
    let offsets = recorded.lines().filter_map(|l| {
        let (offset, k) = l.split_once(' ')?;
        (k == key).then(|| offset.parse::<u64>().ok()).flatten()
    });
    let mut file = open(&target, "append to")?;
    let len = file
        .metadata()
        .map_err(|e| format!("cannot read `{requested}`: {e}"))?
        .len();
    for offset in offsets {
        if offset.saturating_add(record.len() as u64) > len {
            continue;
        }
        let mut at = vec![0u8; record.len()];
        file.seek(SeekFrom::Start(offset))
            .and_then(|_| file.read_exact(&mut at))
            .map_err(|e| format!("cannot read `{requested}`: {e}"))?;
        if at == record {
            return Ok(false);
        }
    }
    // The intent first: a crash after it and before the append leaves a key whose line is
    // missing at its offset, so the retry appends.
    index
        .write_all(format!("{len} {key}\n").as_bytes())
        .and_then(|()| index.sync_data())
        .map_err(|e| format!("cannot record the key for `{requested}`: {e}"))?;
    file.write_all(record)
        .and_then(|()| file.sync_data())
        .map_err(|e| format!("cannot append to `{requested}`: {e}"))?;
    Ok(true)
}

/// An exclusive advisory lock of the key index, released when dropped (unix `flock`; a no-op
/// elsewhere). It holds the descriptor number: the caller keeps the file open while it lives.
struct IndexLock(#[cfg_attr(not(unix), allow(dead_code))] i32);

impl IndexLock {
    fn exclusive(file: &std::fs::File) -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use std::os::unix::io::AsRawFd;
            let fd = file.as_raw_fd();
            // SAFETY: `flock` on a descriptor of an open file.
            if unsafe { libc::flock(fd, libc::LOCK_EX) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(IndexLock(fd))
        }
        #[cfg(not(unix))]
        {
            let _ = file;
            Ok(IndexLock(-1))
        }
    }
}

impl Drop for IndexLock {
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: the caller drops the lock before the file (declared after it).
        unsafe {
            libc::flock(self.0, libc::LOCK_UN);
        }
    }
}

/// The file `requested` resolves to under `root` ([`resolve_for_write`]), when the tools may
/// write it: not an instruction, agent or rule file unless `allowed`
/// ([`super::protected::check_write`]).
fn resolve_writable(
    root: &std::path::Path,
    requested: &str,
    allowed: bool,
) -> Result<std::path::PathBuf, String> {
    let target = resolve_for_write(root, requested)?;
    super::protected::check_write(requested, &target, allowed)?;
    Ok(target)
}

fn append(
    root: &std::path::Path,
    requested: &str,
    allowed: bool,
    record: &[u8],
) -> Result<(), String> {
    let target = resolve_writable(root, requested, allowed)?;
    // `target`'s last component is not a link (it was resolved); refuse one swapped in since.
    // Never blocks: a FIFO or device is refused (see `agentloop_store::regular_file`).
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

    async fn append_via_tool(
        root: &Path,
        id: &str,
        path: &str,
        line: &str,
    ) -> Result<String, String> {
        AppendLine
            .call(
                ToolContext::for_test(root, id),
                json!({ "path": path, "line": line }),
            )
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

    fn keyed(root: &Path, id: &str) -> ToolContext {
        ToolContext {
            idempotency_key: Some(format!("s/{id}")),
            ..ToolContext::for_test(root, id)
        }
    }

    #[tokio::test]
    async fn a_recorded_key_does_not_append_again() {
        let dir = tempfile::tempdir().unwrap();
        let args = json!({"path": "k.txt", "line": "one"});
        let first = AppendLine
            .call(keyed(dir.path(), "c1"), args.clone())
            .await
            .unwrap();
        assert_eq!(first, "appended 1 line (call c1)");
        let again = AppendLine
            .call(keyed(dir.path(), "c1"), args.clone())
            .await
            .unwrap();
        assert!(again.starts_with("already appended"), "{again}");
        AppendLine
            .call(keyed(dir.path(), "c2"), args.clone())
            .await
            .unwrap();
        let content = std::fs::read_to_string(dir.path().join("k.txt")).unwrap();
        assert_eq!(content, "one\none\n");
        let index = std::fs::read_to_string(dir.path().join("k.txt.agentloop-keys")).unwrap();
        assert_eq!(index, "0 s/c1\n4 s/c2\n");
    }

    #[tokio::test]
    async fn a_key_recorded_by_a_call_that_died_before_its_append_appends() {
        let dir = tempfile::tempdir().unwrap();
        // The intent of `c1` at offset 0 was recorded; the process died before the append.
        std::fs::write(dir.path().join("k.txt.agentloop-keys"), "0 s/c1\n").unwrap();
        let out = AppendLine
            .call(
                keyed(dir.path(), "c1"),
                json!({"path": "k.txt", "line": "x"}),
            )
            .await
            .unwrap();
        assert_eq!(out, "appended 1 line (call c1)");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("k.txt")).unwrap(),
            "x\n"
        );
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
                    ToolContext::for_test(&root, &format!("c{i}")),
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
