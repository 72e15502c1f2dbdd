//! The `read_file` built-in tool, and the path confinement it shares with `append_line`.
//!
//! Every path is resolved against [`ToolContext::root`]: the root and the target are
//! canonicalized, and a path that leaves the root — through `..`, an absolute path, or a
//! symbolic link pointing outside — is refused with a clear error. Files larger than
//! [`MAX_READ_BYTES`] (1 MiB) are refused rather than truncated; non-UTF-8 files are refused.
//! Only regular files are read: a FIFO, socket, device or directory is refused without being
//! waited on (see [`agentloop_store::regular_file`]), so no path can make the tool block forever.
//!
//! A path inside a session store is refused too, whatever the root (see [`super::protected`]).
//!
//! The check happens before the file is opened, so a concurrent process that swaps a path
//! component for a symlink in between could still redirect the access (a time-of-check /
//! time-of-use gap); the confinement guards against model mistakes, not a hostile local user.

use std::path::{Component, Path, PathBuf};

use std::fs::OpenOptions;
use std::io::Read;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolContext, ToolError, TypedTool};
use agentloop_store::regular_file::{open_regular, OpenError};

/// Largest file `read_file` returns, in bytes (1 MiB).
pub(crate) const MAX_READ_BYTES: u64 = 1024 * 1024;

/// The `read_file` tool. Read-only, so it is safe to retry.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ReadFile;

/// Arguments of `read_file`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadFileArgs {
    /// Path of the file to read, relative to the tool root directory (it may not leave it).
    pub(crate) path: String,
}

#[async_trait]
impl TypedTool for ReadFile {
    type Args = ReadFileArgs;
    const NAME: &'static str = "read_file";
    const DESCRIPTION: &'static str =
        "Reads a UTF-8 text file (at most 1 MiB) under the root directory and returns its content.";

    fn retry_safe(&self) -> bool {
        true
    }

    async fn run(&self, ctx: ToolContext, args: ReadFileArgs) -> Result<String, ToolError> {
        read_confined(&ctx.root, &args.path, ctx.allow_instruction_writes)
            .await
            .map_err(ToolError::Failed)
    }
}

async fn read_confined(root: &Path, requested: &str, allowed: bool) -> Result<String, String> {
    // Blocking IO on a blocking thread: a timed-out call abandons it (the process does not wait
    // for it at exit), and `open_regular` never blocks on a FIFO or device anyway.
    let root = root.to_path_buf();
    let requested = requested.to_string();
    tokio::task::spawn_blocking(move || read_blocking(&root, &requested, allowed))
        .await
        .map_err(|e| format!("read_file did not finish: {e}"))?
}

fn read_blocking(root: &Path, requested: &str, allowed: bool) -> Result<String, String> {
    let target = resolve_existing(root, requested)?;
    super::protected::check_read(requested, &target, allowed)?;
    // `target` is canonical: a link in its last component now means it was swapped since.
    let file = open_regular(&target, OpenOptions::new().read(true))
        .map_err(|e| open_error(requested, e, "read"))?;
    let len = file
        .metadata()
        .map_err(|e| format!("cannot read `{requested}`: {e}"))?
        .len();
    if len > MAX_READ_BYTES {
        return Err(too_large(requested, len));
    }
    // Read one byte past the cap, so a file that grew after the metadata check is still refused.
    let mut bytes = Vec::new();
    file.take(MAX_READ_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read `{requested}`: {e}"))?;
    if bytes.len() as u64 > MAX_READ_BYTES {
        return Err(too_large(requested, bytes.len() as u64));
    }
    String::from_utf8(bytes)
        .map_err(|_| format!("`{requested}` is not UTF-8 text (binary files are not supported)"))
}

/// The tool error for a failed [`open_regular`]; `verb` says what the tool was doing (`read`).
pub(crate) fn open_error(requested: &str, e: OpenError, verb: &str) -> String {
    match e {
        OpenError::NotRegular(kind) => {
            format!("`{requested}` is {kind}, not a regular file: refused")
        }
        OpenError::Io(e) => format!("cannot {verb} `{requested}`: {e}"),
    }
}

fn too_large(requested: &str, len: u64) -> String {
    format!("`{requested}` is too large ({len} bytes; read_file returns at most {MAX_READ_BYTES} bytes)")
}

/// The canonical root directory.
fn canonical_root(root: &Path) -> Result<PathBuf, String> {
    std::fs::canonicalize(root)
        .map_err(|e| format!("the tool root `{}` is not accessible: {e}", root.display()))
}

/// Joins `requested` to the canonical root and removes `.` and `..` lexically, refusing a path
/// that leaves the root on the way. Returns (canonical root, normalized absolute path).
fn lexically_confined(root: &Path, requested: &str) -> Result<(PathBuf, PathBuf), String> {
    if requested.trim().is_empty() {
        return Err("the path is empty".into());
    }
    if requested.contains('\0') {
        return Err("the path contains a NUL character".into());
    }
    let root = canonical_root(root)?;
    let escape = || {
        format!(
            "`{requested}` is outside the root directory `{}`: paths may not leave it",
            root.display()
        )
    };
    let mut normalized = PathBuf::new();
    // An absolute `requested` replaces the root here; it must then lie inside the root.
    for component in root.join(requested).components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !normalized.pop() || !normalized.starts_with(&root) {
                    return Err(escape());
                }
            }
            other => normalized.push(other),
        }
    }
    if !normalized.starts_with(&root) {
        return Err(escape());
    }
    Ok((root, normalized))
}

/// Resolves an existing path under `root`, following symlinks, and refuses one whose real
/// location is outside the root.
pub(crate) fn resolve_existing(root: &Path, requested: &str) -> Result<PathBuf, String> {
    let (root, normalized) = lexically_confined(root, requested)?;
    let real = std::fs::canonicalize(&normalized).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("`{requested}` does not exist"),
        _ => format!("cannot resolve `{requested}`: {e}"),
    })?;
    if !real.starts_with(&root) {
        return Err(through_link(requested, &root));
    }
    super::protected::check(requested, &real)?;
    Ok(real)
}

/// The error for a path that a symbolic link takes outside `root`.
fn through_link(requested: &str, root: &Path) -> String {
    format!(
        "`{requested}` resolves outside the root directory `{}` (through a symbolic link): refused",
        root.display()
    )
}

/// Resolves a file path under `root` that may not exist yet (its directory must). An existing
/// path — including a symlink — must resolve inside the root; a dangling symlink is refused.
pub(crate) fn resolve_for_write(root: &Path, requested: &str) -> Result<PathBuf, String> {
    let (canon_root, normalized) = lexically_confined(root, requested)?;
    if std::fs::symlink_metadata(&normalized).is_ok() {
        return resolve_existing(root, requested).map_err(|e| {
            if std::fs::metadata(&normalized).is_err() {
                format!("`{requested}` is a symbolic link to a missing target: refused")
            } else {
                e
            }
        });
    }
    let (Some(parent), Some(name)) = (normalized.parent(), normalized.file_name()) else {
        return Err(format!("`{requested}` does not name a file"));
    };
    let real_parent = std::fs::canonicalize(parent).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            format!("the directory of `{requested}` does not exist (directories are not created)")
        }
        _ => format!("cannot resolve the directory of `{requested}`: {e}"),
    })?;
    if !real_parent.starts_with(&canon_root) {
        return Err(through_link(requested, &canon_root));
    }
    let target = real_parent.join(name);
    super::protected::check(requested, &target)?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Tool;
    use serde_json::json;

    fn ctx(root: &Path) -> ToolContext {
        ToolContext::for_test(root, "call_0_0")
    }

    async fn read(root: &Path, path: &str) -> Result<String, String> {
        ReadFile
            .call(ctx(root), json!({ "path": path }))
            .await
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn reads_files_under_the_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.txt"), "héllo\n").unwrap();
        assert_eq!(read(dir.path(), "sub/a.txt").await.unwrap(), "héllo\n");
        // `..` that stays inside the root is fine.
        assert_eq!(
            read(dir.path(), "sub/../sub/./a.txt").await.unwrap(),
            "héllo\n"
        );
        // An absolute path inside the root is fine too.
        let abs = dir.path().join("sub/a.txt");
        assert_eq!(
            read(dir.path(), abs.to_str().unwrap()).await.unwrap(),
            "héllo\n"
        );
        assert!(Tool::retry_safe(&ReadFile));
    }

    #[tokio::test]
    async fn refuses_dotdot_escapes_and_absolute_paths_outside() {
        let outer = tempfile::tempdir().unwrap();
        std::fs::write(outer.path().join("secret.txt"), "secret").unwrap();
        let root = outer.path().join("root");
        std::fs::create_dir(&root).unwrap();

        let e = read(&root, "../secret.txt").await.unwrap_err();
        assert!(e.contains("outside the root"), "{e}");
        let e = read(&root, "a/../../secret.txt").await.unwrap_err();
        assert!(e.contains("outside the root"), "{e}");
        let abs = outer.path().join("secret.txt");
        let e = read(&root, abs.to_str().unwrap()).await.unwrap_err();
        assert!(e.contains("outside the root"), "{e}");
        let e = read(&root, "/etc/passwd").await.unwrap_err();
        assert!(e.contains("outside the root"), "{e}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn refuses_symlinks_pointing_outside() {
        let outer = tempfile::tempdir().unwrap();
        std::fs::write(outer.path().join("secret.txt"), "secret").unwrap();
        let root = outer.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(outer.path().join("secret.txt"), root.join("link.txt")).unwrap();
        std::os::unix::fs::symlink(outer.path(), root.join("linkdir")).unwrap();
        std::fs::write(root.join("inside.txt"), "inside").unwrap();
        std::os::unix::fs::symlink(root.join("inside.txt"), root.join("ok_link.txt")).unwrap();

        let e = read(&root, "link.txt").await.unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        let e = read(&root, "linkdir/secret.txt").await.unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        // A symlink that stays inside the root is followed.
        assert_eq!(read(&root, "ok_link.txt").await.unwrap(), "inside");
    }

    /// R-TOOL-3: a FIFO is refused at once for reading and appending, never waited on.
    #[cfg(unix)]
    #[tokio::test]
    async fn r_tool_3_fifos_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mkfifo")
            .arg(dir.path().join("pipe"))
            .status()
            .unwrap();
        assert!(status.success());
        let limit = std::time::Duration::from_secs(10);
        let e = tokio::time::timeout(limit, read(dir.path(), "pipe"))
            .await
            .expect("read_file returned")
            .unwrap_err();
        assert!(
            e.contains("FIFO") && e.contains("not a regular file"),
            "{e}"
        );
        let append = crate::tools::append_line::AppendLine
            .call(ctx(dir.path()), json!({"path": "pipe", "line": "x"}));
        let e = tokio::time::timeout(limit, append)
            .await
            .expect("append_line returned")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("FIFO") && e.contains("not a regular file"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn clear_errors_for_missing_dirs_large_and_binary_files() {
        let dir = tempfile::tempdir().unwrap();
        let e = read(dir.path(), "nope.txt").await.unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
        let e = read(dir.path(), ".").await.unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        let e = read(dir.path(), "").await.unwrap_err();
        assert!(e.contains("empty"), "{e}");

        let big = vec![b'a'; (MAX_READ_BYTES + 1) as usize];
        std::fs::write(dir.path().join("big.txt"), big).unwrap();
        let e = read(dir.path(), "big.txt").await.unwrap_err();
        assert!(e.contains("too large"), "{e}");
        let exact = vec![b'a'; MAX_READ_BYTES as usize];
        std::fs::write(dir.path().join("exact.txt"), exact).unwrap();
        assert_eq!(
            read(dir.path(), "exact.txt").await.unwrap().len(),
            MAX_READ_BYTES as usize
        );

        std::fs::write(dir.path().join("bin"), [0xff, 0xfe, 0x00]).unwrap();
        let e = read(dir.path(), "bin").await.unwrap_err();
        assert!(e.contains("not UTF-8"), "{e}");

        let e = ReadFile.call(ctx(dir.path()), json!({})).await.unwrap_err();
        assert!(matches!(e, ToolError::InvalidArguments(_)));
    }
}
