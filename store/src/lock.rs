//! OS advisory locks on lock files (`flock` on Unix), shared by the file store and the
//! SQLite store: a lock is held by an open descriptor and released by the OS when the process
//! dies, so a crash never leaves a stale lock.

use std::fs::{File, OpenOptions};
use std::path::Path;

use super::StoreError;
use crate::regular_file::{open_regular, OpenError};

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.display().to_string(),
        source,
    }
}

pub(crate) fn open_err(path: &Path, e: OpenError) -> StoreError {
    match e {
        OpenError::NotRegular(kind) => StoreError::NotRegularFile {
            path: path.display().to_string(),
            kind,
        },
        OpenError::Io(source) => io_err(path)(source),
    }
}

/// An acquired OS lock on `<session>.lock`; released when the descriptor is closed.
#[derive(Debug)]
pub(crate) struct LockFile {
    file: File,
}

impl LockFile {
    pub(crate) fn acquire(session: &str, path: &Path) -> Result<Self, StoreError> {
        let file = open_regular(
            path,
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
        )
        .map_err(|e| open_err(path, e))?;
        // Fully qualified: newer std has inherent `File::try_lock`/`unlock` with other
        // signatures.
        match fs4::fs_std::FileExt::try_lock_exclusive(&file) {
            Ok(true) => Ok(LockFile { file }),
            Ok(false) => Err(StoreError::Locked {
                session: session.to_string(),
                path: path.display().to_string(),
            }),
            Err(e) => Err(io_err(path)(e)),
        }
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // Closing the descriptor releases the lock anyway; unlocking first is explicit.
        let _ = fs4::fs_std::FileExt::unlock(&self.file);
    }
}
