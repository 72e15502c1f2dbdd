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
//! [`open_regular_file`] and [`read_regular_file`] (with a size cap) are the same for the
//! inputs a person names on a command line: they follow links, then refuse anything but a
//! regular file.

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

/// Why [`open_regular`] did not return a file.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The path is not a regular file (nothing was read or written).
    NotRegular(FileKind),
    /// The open (or the `fstat` after it) failed.
    Io(std::io::Error),
}

/// Opens `path` with `options`, refusing anything but a regular file — a symbolic link in
/// the last component included — without blocking (see the module docs).
pub(crate) fn open_regular(path: &Path, options: &mut OpenOptions) -> Result<File, OpenError> {
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

/// Why [`open_regular_file`] or [`read_regular_file`] did not return the file: what a
/// command line says about an input it was given (`--script`, a trace, a capture).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The path is not a regular file (a FIFO, a device, a directory): nothing was read.
    #[error("{0}, not a regular file")]
    NotRegular(FileKind),
    /// The file is larger than the caller's limit (nothing past the limit was read).
    #[error("{size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// Its size (at least; it may be growing).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The file could not be opened or read (or is not UTF-8, for
    /// [`read_regular_to_string`]).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Opens the file at `path` for reading when it is a regular file, following symbolic links
/// (the path a person gave): never blocks on a FIFO and never opens a device, so an input
/// like `/dev/zero` or a named pipe fails at once with [`ReadError::NotRegular`].
pub fn open_regular_file(path: &Path) -> Result<File, ReadError> {
    let resolved = std::fs::canonicalize(path)?;
    open_regular(&resolved, OpenOptions::new().read(true)).map_err(|e| match e {
        OpenError::NotRegular(kind) => ReadError::NotRegular(kind),
        OpenError::Io(e) => ReadError::Io(e),
    })
}

/// The bytes of the regular file at `path` (see [`open_regular_file`]), refused with
/// [`ReadError::TooLarge`] when there are more than `limit`: the size is checked before
/// reading, and at most one byte past the limit is read (the file may grow meanwhile).
pub fn read_regular_file(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
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
pub fn read_regular_to_string(path: &Path, limit: u64) -> Result<String, ReadError> {
    String::from_utf8(read_regular_file(path, limit)?).map_err(|e| {
        ReadError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text: {}", e.utf8_error()),
        ))
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
    fn inputs_refuse_fifos_and_devices_follow_links_and_are_capped() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        mkfifo(&fifo);
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
