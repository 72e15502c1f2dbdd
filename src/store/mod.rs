//! The session store port: append-only session entries, and the in-memory store.
//!
//! Submodules: [`file`](mod@file) (the embedded JSON Lines store), [`records`] (its line
//! format and bounded scan), [`fault`] (fault injection),
//! [`check`](mod@check) (pairing invariant), [`repair`](mod@repair) (its repair),
//! [`history`](mod@history) (model context from entries) and
//! [`export`] (JSONL / Markdown export, listing).
//!
//! Plugging in another backend (SQLite, PostgreSQL) means implementing [`SessionStore`]:
//! `load` returns the entries in append order, `append` persists one entry durably and
//! treats an entry whose [`Entry::idempotency_key`] is already stored as a no-op. A table
//! `(session, seq, entry_json)` with a unique index on `(session, idempotency_key)` and
//! `INSERT .. ON CONFLICT DO NOTHING` is the whole job.

#[cfg(feature = "file-store")]
pub mod export;
pub mod fault;
#[cfg(feature = "file-store")]
pub mod file;
#[cfg(feature = "file-store")]
pub mod records;

pub use agentloop_core::session_log::{check, history};
pub use agentloop_core::session_log::{
    committed_turns, duplicate_keys, next_model_call_index, pending, repair, repair_with,
    PendingCall, Repair, Repaired, Violation,
};

#[cfg(feature = "file-store")]
pub use export::{export_jsonl, export_markdown, list_sessions, SessionInfo};
pub use fault::{FaultPoint, FaultyStore};
#[cfg(feature = "file-store")]
pub use file::{validate_session_id, Durability, FileStore, SessionLock};
#[cfg(feature = "file-store")]
pub use records::{DEFAULT_MAX_ENTRY_BYTES, RECORD_VERSION};

pub use crate::regular_file::FileKind;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use async_trait::async_trait;

pub use agentloop_core::entry::{Entry, EntryKey};

/// What loading a session found besides its entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Bytes of a torn last entry that were cut off the file (0 when nothing was cut, also
    /// when a torn tail was found but the store did not hold the session's lock).
    pub truncated_bytes: u64,
    /// Human-readable warnings (torn tail found / truncated).
    pub warnings: Vec<String>,
}

/// A store failure. A failed write ends the run at once (R-IDEM-4).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// IO failure.
    #[error("session store io error at {path}: {source}")]
    Io {
        /// The file involved.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The session is locked by another process (or another holder in this process).
    #[error("session {session} is locked by another process or handle (lock file {path})")]
    Locked {
        /// The session id.
        session: String,
        /// The lock file.
        path: String,
    },
    /// A stored entry could not be read.
    #[error("corrupt session file {path} at byte offset {offset}: {detail}")]
    Corrupt {
        /// The file.
        path: String,
        /// Byte offset of the bad entry.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// A stored record has a format version this build cannot read.
    #[error("session file {path} at byte offset {offset}: unsupported record version {version} (this build reads version {supported})")]
    UnsupportedVersion {
        /// The file.
        path: String,
        /// Byte offset of the record.
        offset: u64,
        /// The version found (`null` when missing).
        version: String,
        /// The version this build reads.
        supported: u32,
    },
    /// A session or lock file is not a regular file (a symbolic link, a FIFO, a directory,
    /// ...). It is refused, never followed, read or written: a link could lead out of the
    /// store, a FIFO would block.
    #[error("{path} is {kind}, not a regular file: refused (session and lock files must be regular files; links are not followed)")]
    NotRegularFile {
        /// The file.
        path: String,
        /// What it is.
        kind: FileKind,
    },
    /// An entry is larger than the store's entry size limit; nothing was written.
    #[error("entry of {bytes} bytes for session {session} exceeds the limit of {limit} bytes per entry: not written")]
    EntryTooLarge {
        /// The session.
        session: String,
        /// The entry's encoded size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// A stored line is longer than the store's entry size limit. It was not read whole (a
    /// store with a larger limit can read it).
    #[error("session file {path}: line {line} (byte offset {offset}) is longer than the limit of {limit} bytes per entry; not loaded (a store with a larger limit can read it)")]
    LineTooLong {
        /// The file.
        path: String,
        /// The line number, from 1.
        line: u64,
        /// Byte offset of the line.
        offset: u64,
        /// The limit.
        limit: u64,
    },
    /// The session id cannot name a session file.
    #[error("invalid session id {session:?}: {reason}")]
    InvalidSession {
        /// The rejected id.
        session: String,
        /// Why.
        reason: &'static str,
    },
    /// Any other failure (injected faults, backends).
    #[error("session store error: {0}")]
    Other(String),
}

/// Where session entries live (R-ARCH-4). `append` must be durable when it returns `Ok`
/// (per the store's durability mode).
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// All entries of `session`, oldest first (empty for a new session).
    async fn load(&self, session: &str) -> Result<Vec<Entry>, StoreError>;
    /// Appends one entry. An entry whose [`Entry::idempotency_key`] is already stored is
    /// not written again and the call returns `Ok` (R-IDEM-1, R-IDEM-3).
    async fn append(&self, session: &str, entry: &Entry) -> Result<(), StoreError>;
    /// Like [`load`](Self::load), also reporting repairs and warnings (a torn last entry).
    async fn load_with_report(
        &self,
        session: &str,
    ) -> Result<(Vec<Entry>, LoadReport), StoreError> {
        Ok((self.load(session).await?, LoadReport::default()))
    }
}

/// A store that keeps sessions in memory (tests, one-shot runs).
#[derive(Debug, Default)]
pub struct MemoryStore {
    sessions: Mutex<HashMap<String, MemorySession>>,
}

/// One session of a [`MemoryStore`]: its entries and the idempotency keys they hold, so an
/// append costs O(1) whatever the session's length.
#[derive(Debug, Default)]
struct MemorySession {
    entries: Vec<Entry>,
    keys: HashSet<EntryKey>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn load(&self, session: &str) -> Result<Vec<Entry>, StoreError> {
        let map = self
            .sessions
            .lock()
            .map_err(|_| StoreError::Other("memory store poisoned".into()))?;
        Ok(map
            .get(session)
            .map(|s| s.entries.clone())
            .unwrap_or_default())
    }

    async fn append(&self, session: &str, entry: &Entry) -> Result<(), StoreError> {
        let mut map = self
            .sessions
            .lock()
            .map_err(|_| StoreError::Other("memory store poisoned".into()))?;
        let stored = map.entry(session.to_string()).or_default();
        if let Some(key) = entry.idempotency_key() {
            if !stored.keys.insert(key) {
                return Ok(());
            }
        }
        stored.entries.push(entry.clone());
        Ok(())
    }
}
