//! Opening files that must be regular files — session files, lock files, the files the
//! built-in tools read and append to — without ever blocking on a FIFO or a device, and
//! without following a symbolic link in the last path component (callers that accept links
//! resolve them first, and check where they lead).
//!
//! On Unix the file is opened with `O_NONBLOCK | O_NOFOLLOW`,
//! then the *opened descriptor* is checked with `fstat`. Checking the path first
//! (`symlink_metadata`) and opening it afterwards would leave a window in which the path can
//! be swapped for a FIFO — and an `open` of a FIFO without `O_NONBLOCK` blocks until a peer
//! opens the other end, possibly forever. With `O_NONBLOCK` the open itself never waits: a
//! FIFO opened for reading returns at once (and `fstat` refuses it), one opened for writing
//! without a reader fails with `ENXIO`. `O_NONBLOCK` has no effect on reads and writes of
//! regular files, so the descriptor is used as is. When the open fails, the path is looked at
//! (`symlink_metadata`) only to name what is there in the error.
//!
//! Elsewhere the path is checked before it is opened (a best effort; such platforms have no
//! FIFOs that block on open in the same way).
//!
//! # Example
//!
//! ```
//! use std::fs::OpenOptions;
//!
//! use agentloop_store::regular_file::{open_regular, FileKind, OpenError};
//!
//! let dir = std::env::temp_dir();
//! match open_regular(&dir, OpenOptions::new().read(true)) {
//!     Err(OpenError::NotRegular(kind)) => assert_eq!(kind, FileKind::Directory),
//!     other => panic!("a directory opened as a regular file: {other:?}"),
//! }
//! ```

use std::fs::{File, Metadata, OpenOptions};
use std::path::Path;

/// What a path is when it is not a regular file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileKind {
    /// A symbolic link (refused where links are not followed).
    SymbolicLink,
    /// A directory.
    Directory,
    /// A FIFO (named pipe).
    Fifo,
    /// A Unix domain socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// Anything else that is not a regular file.
    Other,
}

impl std::fmt::Display for FileKind {
    /// With its article: `a FIFO (named pipe)`, `a symbolic link`, ...
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FileKind::SymbolicLink => "a symbolic link",
            FileKind::Directory => "a directory",
            FileKind::Fifo => "a FIFO (named pipe)",
            FileKind::Socket => "a socket",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Other => "a special file",
        })
    }
}

impl FileKind {
    /// The kind of a file that is not a regular file (`None` for a regular file).
    pub fn of(meta: &Metadata) -> Option<FileKind> {
        let t = meta.file_type();
        if t.is_file() {
            return None;
        }
        if t.is_symlink() {
            return Some(FileKind::SymbolicLink);
        }
        if t.is_dir() {
            return Some(FileKind::Directory);
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            if t.is_fifo() {
                return Some(FileKind::Fifo);
            }
            if t.is_socket() {
                return Some(FileKind::Socket);
            }
            if t.is_char_device() {
                return Some(FileKind::CharDevice);
            }
            if t.is_block_device() {
                return Some(FileKind::BlockDevice);
            }
        }
        Some(FileKind::Other)
    }
}

/// Why [`open_regular`] did not return a file. Its two cases are all there are (a caller maps
/// each to an error of its own), so it is not `#[non_exhaustive]`.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The path is not a regular file (nothing was read or written).
    #[error("not a regular file: {0}")]
    NotRegular(FileKind),
    /// The open (or the `fstat` after it) failed.
    #[error(transparent)]
    Io(std::io::Error),
}

/// Opens `path` with `options`, refusing anything but a regular file — a symbolic link in
/// the last component included — without blocking (see the module docs).
pub fn open_regular(path: &Path, options: &mut OpenOptions) -> Result<File, OpenError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
    }
    #[cfg(not(unix))]
    {
        if let Some(kind) = kind_at(path) {
            return Err(OpenError::NotRegular(kind));
        }
    }
    match options.open(path) {
        Ok(file) => {
            let meta = file.metadata().map_err(OpenError::Io)?;
            match FileKind::of(&meta) {
                None => Ok(file),
                Some(kind) => Err(OpenError::NotRegular(kind)),
            }
        }
        // ELOOP (a refused link), ENXIO (a FIFO without reader), EISDIR: name what is there.
        Err(e) => Err(match kind_at(path) {
            Some(kind) => OpenError::NotRegular(kind),
            None => OpenError::Io(e),
        }),
    }
}

/// The lines of `reader` (without their line ends, as [`BufRead::lines`](std::io::BufRead::lines) gives them), each
/// read up to `cap` bytes: a longer line is returned cut after `cap + 1` bytes, so the caller
/// sees it is over its cap, and nothing after it is read. A line that is not UTF-8 is an
/// [`std::io::ErrorKind::InvalidData`] error (a cut one is returned with replacement
/// characters instead).
pub fn capped_lines<R: std::io::BufRead>(
    mut reader: R,
    cap: u64,
) -> impl Iterator<Item = std::io::Result<String>> {
    use std::io::{BufRead as _, Read as _};
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        let limit = cap.saturating_add(1);
        let mut line = Vec::new();
        match (&mut reader).take(limit).read_until(b'\n', &mut line) {
            Err(e) => {
                done = true;
                Some(Err(e))
            }
            Ok(0) => None,
            Ok(_) if line.last() == Some(&b'\n') => {
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                Some(String::from_utf8(line).map_err(|e| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error())
                }))
            }
            Ok(_) if line.len() as u64 >= limit => {
                done = true;
                Some(Ok(String::from_utf8_lossy(&line).into_owned()))
            }
            Ok(_) => {
                Some(String::from_utf8(line).map_err(|e| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error())
                }))
            }
        }
    })
}

/// What is at `path` (not following a link) when it exists and is not a regular file.
fn kind_at(path: &Path) -> Option<FileKind> {
    std::fs::symlink_metadata(path)
        .ok()
        .and_then(|m| FileKind::of(&m))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn capped_lines_cut_an_overlong_line_and_stop() {
        let text = "ab\r\ncdef\nghijklmnop\nafter\n";
        let lines: Vec<String> = capped_lines(text.as_bytes(), 4)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(lines, ["ab", "cdef", "ghijk"]);
        let last: Vec<String> = capped_lines("x\nlast".as_bytes(), 4)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(last, ["x", "last"]);
        let bad: Vec<_> = capped_lines(&b"\xff\n"[..], 4).collect();
        assert!(matches!(&bad[..], [Err(e)] if e.kind() == std::io::ErrorKind::InvalidData));
    }

    fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn kind(result: Result<File, OpenError>) -> Option<FileKind> {
        match result {
            Err(OpenError::NotRegular(kind)) => Some(kind),
            Err(OpenError::Io(e)) => panic!("io error {e}"),
            Ok(_) => None,
        }
    }

    #[test]
    fn fifos_are_refused_without_blocking_for_reading_and_writing() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        mkfifo(&fifo);
        let read = open_regular(&fifo, OpenOptions::new().read(true));
        assert_eq!(kind(read), Some(FileKind::Fifo));
        let write = open_regular(&fifo, OpenOptions::new().append(true).create(true));
        assert_eq!(kind(write), Some(FileKind::Fifo));
    }

    #[test]
    fn links_and_directories_are_refused_and_regular_files_open() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target.txt");
        std::fs::write(&target, "x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let refused = open_regular(&link, OpenOptions::new().read(true));
        assert_eq!(kind(refused), Some(FileKind::SymbolicLink));
        let created = open_regular(&link, OpenOptions::new().append(true).create(true));
        assert_eq!(kind(created), Some(FileKind::SymbolicLink));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "x");
        let regular = open_regular(&target, OpenOptions::new().read(true));
        assert_eq!(kind(regular), None);
        let dir_open = open_regular(dir.path(), OpenOptions::new().read(true));
        assert_eq!(kind(dir_open), Some(FileKind::Directory));
        let dir_write = open_regular(dir.path(), OpenOptions::new().append(true));
        assert_eq!(kind(dir_write), Some(FileKind::Directory));
    }
}
