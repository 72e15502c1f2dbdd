//! Reading the files a person names on the command line (`--script`, a trace, a capture, a
//! sidecar): links are followed (the path a person gave), then anything but a regular file is
//! refused without blocking, and the size is capped.
//!
//! The resolved path is opened by the store's `regular_file::open_regular`: on Unix with
//! `O_NONBLOCK | O_NOFOLLOW`, and the *opened descriptor* is checked with `fstat`, so an input
//! like `/dev/zero` or a named pipe fails at once instead of blocking until a writer appears
//! (or reading forever); elsewhere the path is checked before it is opened.

use std::fs::{File, OpenOptions};
use std::path::Path;

use agentloop::store::regular_file::{open_regular, OpenError};
use agentloop::store::FileKind;

/// Why [`open_regular_file`] or [`read_regular_file`] did not return the file.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The path is not a regular file (a FIFO, a device, a directory): nothing was read.
    NotRegular(FileKind),
    /// The file is larger than the caller's limit (nothing past the limit was read).
    TooLarge {
        /// Its size (at least; it may be growing).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The file could not be opened or read (or is not UTF-8, for
    /// [`read_regular_to_string`]).
    Io(std::io::Error),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::NotRegular(kind) => write!(f, "{kind}, not a regular file"),
            ReadError::TooLarge { size, limit } => {
                write!(f, "{size} bytes, over the limit of {limit} bytes")
            }
            ReadError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ReadError {}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// Opens the file at `path` for reading when it is a regular file, following symbolic links
/// (the path is resolved first, then opened as the store opens its files,
/// [`open_regular`]): never blocks on a FIFO and never opens a device
/// ([`ReadError::NotRegular`]).
pub(crate) fn open_regular_file(path: &Path) -> Result<File, ReadError> {
    let resolved = std::fs::canonicalize(path)?;
    open_regular(&resolved, OpenOptions::new().read(true)).map_err(|e| match e {
        OpenError::NotRegular(kind) => ReadError::NotRegular(kind),
        OpenError::Io(e) => ReadError::Io(e),
    })
}

/// The bytes of the regular file at `path` (see [`open_regular_file`]), refused with
/// [`ReadError::TooLarge`] when there are more than `limit`: the size is checked before
/// reading, and at most one byte past the limit is read (the file may grow meanwhile).
pub(crate) fn read_regular_file(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    use std::io::Read as _;
    let file = open_regular_file(path)?;
    let size = file.metadata()?.len();
    if size > limit {
        return Err(ReadError::TooLarge { size, limit });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge {
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// [`read_regular_file`] as UTF-8 text.
pub(crate) fn read_regular_to_string(path: &Path, limit: u64) -> Result<String, ReadError> {
    String::from_utf8(read_regular_file(path, limit)?).map_err(|e| {
        ReadError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text: {}", e.utf8_error()),
        ))
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn inputs_refuse_fifos_and_devices_follow_links_and_are_capped() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        // Nobody opens the FIFO's other end: a blocking open would hang here.
        assert!(matches!(
            read_regular_file(&fifo, 10),
            Err(ReadError::NotRegular(FileKind::Fifo))
        ));
        assert!(matches!(
            read_regular_file(Path::new("/dev/zero"), 10),
            Err(ReadError::NotRegular(FileKind::CharDevice))
        ));
        let file = dir.path().join("in.json");
        std::fs::write(&file, "0123456789").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_regular_to_string(&link, 10).unwrap(), "0123456789");
        assert!(matches!(
            read_regular_file(&file, 9),
            Err(ReadError::TooLarge { size: 10, limit: 9 })
        ));
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        assert!(matches!(
            read_regular_to_string(&file, 10),
            Err(ReadError::Io(_))
        ));
    }
}
