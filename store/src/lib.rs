//! The session stores of [agentloop](https://docs.rs/agentloop): the [`SessionStore`] port
//! (append-only session entries) and its backends.
//!
//! The stores: [`MemoryStore`], [`FileStore`] (the embedded JSON Lines store, feature
//! `file`), and [`AnyStore`]: any durable store, opened by URL (a directory for the file
//! store, `sqlite:PATH` with feature `sqlite`, `postgres://…` with feature `postgres`).
//! [`export_jsonl`], [`export_markdown`] and [`list_sessions`] export and list a file store's
//! sessions. The session log's invariants over any backend's entries (pairing check, repair,
//! model context) are `agentloop_core::session_log`.
//!
//! `agentloop` re-exports this crate as `agentloop::store`, and its features `file-store`,
//! `sqlite-store`, `postgres-store` and `fault-injection` turn on this crate's `file`,
//! `sqlite`, `postgres` and `fault-injection`. A program that only reads or exports a session
//! directory can depend on this crate alone.
//!
//! Plugging in another backend means implementing [`SessionStore`]: `load` returns the
//! entries in append order, `append` persists one entry durably and treats an entry whose
//! [`Entry::idempotency_key`] is already stored as a no-op. (The SQLite and PostgreSQL stores
//! share one crate-internal implementation over a small backend each; it is not public.)
//!
//! Besides the stores: [`regular_file`] opens files that must be regular files (session and
//! lock files, and the files agentloop's built-in tools read and append to) without blocking
//! or following a link, and [`protected`] is the process-wide registry of the store locations
//! those tools refuse (every store on disk registers itself when it opens).
//!
//! # Example
//!
//! A session's entries in the in-memory store, appended and read back through the
//! [`SessionStore`] port:
//!
//! ```
//! use agentloop_store::{Entry, MemoryStore, SessionStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new();
//! let entry = Entry::Title {
//!     run_id: "run-1".into(),
//!     title: "Six times seven".into(),
//! };
//! store.append("session-1", &entry).await?;
//! let entries = store.load("session-1").await?;
//! assert_eq!(entries.len(), 1);
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]
#![warn(unreachable_pub)]

/// Declares a SQL store: a newtype of the crate's `SqlStore` over one backend, with the
/// store's methods and [`SessionStore`]. A program opens one through
/// [`AnyStore::open`](crate::AnyStore::open).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
macro_rules! sql_store {
    ($(#[$meta:meta])* $name:ident($backend:ty)) => {
        $(#[$meta])*
        #[derive(Debug)]
        pub(crate) struct $name(pub(crate) crate::sql::SqlStore<$backend>);

        impl $name {
            /// Sets the durability mode (default [`Durability::Sync`](crate::Durability::Sync)).
            pub(crate) fn with_durability(self, durability: crate::Durability) -> Self {
                $name(self.0.with_durability(durability))
            }

            /// Sets the entry size limit: the longest record written or read (default
            /// [`DEFAULT_MAX_ENTRY_BYTES`](crate::DEFAULT_MAX_ENTRY_BYTES)).
            pub(crate) fn with_max_entry_bytes(self, limit: u64) -> Self {
                $name(self.0.with_max_entry_bytes(limit))
            }

            /// Names the store (`sqlite:PATH`, `postgres://host:port/db`).
            pub(crate) fn location(&self) -> String {
                self.0.location()
            }

            /// Takes the session's lock: [`StoreError::Locked`](crate::StoreError::Locked)
            /// when another process, another store or a live
            /// [`SessionLock`](crate::SessionLock) of this store holds it.
            pub(crate) async fn lock(
                &self,
                session: &str,
            ) -> Result<crate::SessionLock, crate::StoreError> {
                self.0.lock(session).await
            }

            /// Loads all valid entries of `session` (empty when it has none) and reports a torn
            /// last row; deletes that row when this store holds the session's lock.
            pub(crate) async fn load_report(
                &self,
                session: &str,
            ) -> Result<(Vec<crate::Entry>, Vec<String>), crate::StoreError> {
                self.0.load_report(session).await
            }

            /// Makes batched appends of `session` durable and releases the store's share of the
            /// session's lock (the lock itself goes once no `SessionLock` for it is alive).
            pub(crate) async fn close(&self, session: &str) -> Result<(), crate::StoreError> {
                self.0.close(session).await
            }
        }

        #[async_trait::async_trait]
        impl crate::SessionStore for $name {
            async fn load(
                &self,
                session: &str,
            ) -> Result<Vec<crate::Entry>, crate::StoreError> {
                crate::SessionStore::load(&self.0, session).await
            }

            async fn append(
                &self,
                session: &str,
                entry: &crate::Entry,
            ) -> Result<(), crate::StoreError> {
                crate::SessionStore::append(&self.0, session, entry).await
            }

            async fn load_with_report(
                &self,
                session: &str,
            ) -> Result<(Vec<crate::Entry>, Vec<String>), crate::StoreError> {
                crate::SessionStore::load_with_report(&self.0, session).await
            }
        }
    };
}

pub mod corpus;
pub mod protected;
pub mod regular_file;

#[cfg(feature = "file")]
mod export;
#[cfg(feature = "fault-injection")]
mod fault;
#[cfg(feature = "file")]
mod file;
#[cfg(any(feature = "file", feature = "sqlite"))]
mod lock;
mod options;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "file", feature = "sqlite", feature = "postgres"))]
mod records;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(any(feature = "file", feature = "sqlite", feature = "postgres"))]
mod url;

#[cfg(feature = "file")]
pub use export::{export_jsonl, export_markdown, list_sessions, SessionInfo};
#[cfg(feature = "fault-injection")]
pub use fault::{FaultPoint, FaultyStore};
#[cfg(feature = "file")]
pub use file::FileStore;
pub use options::{validate_session_id, Durability, MAX_SESSION_ID_LEN};
#[cfg(feature = "postgres")]
pub(crate) use postgres::PostgresStore;
#[cfg(feature = "postgres")]
pub use postgres::LOCK_SEED as POSTGRES_LOCK_SEED;
#[cfg(any(feature = "file", feature = "sqlite", feature = "postgres"))]
pub use records::{DEFAULT_MAX_ENTRY_BYTES, RECORD_VERSION};
#[cfg(feature = "sqlite")]
pub(crate) use sqlite::SqliteStore;
#[cfg(any(feature = "file", feature = "sqlite", feature = "postgres"))]
pub use url::AnyStore;
#[cfg(any(feature = "file", feature = "sqlite", feature = "postgres"))]
pub(crate) use url::StoreUrl;

/// The environment variable naming the default store (a directory or a store URL).
#[cfg(any(feature = "file", feature = "sqlite", feature = "postgres"))]
pub(crate) const STORE_ENV: &str = "AGENTLOOP_STORE";

/// The default store directory: `$AGENTLOOP_STORE` if set, else `./.agentloop/sessions`.
#[cfg(any(feature = "file", feature = "sqlite", feature = "postgres"))]
pub(crate) fn default_dir() -> std::path::PathBuf {
    match std::env::var_os(STORE_ENV) {
        Some(dir) if !dir.is_empty() => std::path::PathBuf::from(dir),
        _ => std::path::PathBuf::from(".agentloop").join("sessions"),
    }
}

pub use regular_file::FileKind;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use async_trait::async_trait;

pub use agentloop_core::entry::Entry;
// Named by a store of its own: it keeps the key of each entry it appends (the SQL stores write
// it as text, `turn:<index>:<run>`, `started:<call>`, `result:<call>`).
pub use agentloop_core::entry::EntryKey;

/// Exclusive ownership of one session of a store, across processes: the lock file
/// `<session>.lock` of the file store, `<database>.locks/<session>.lock` of a SQLite store, an
/// advisory lock of a PostgreSQL store. Released on drop (the store's own writer may keep its
/// share of the lock until the store's `close`; see the file store's module docs).
#[cfg(any(feature = "file", feature = "sqlite", feature = "postgres"))]
pub struct SessionLock {
    session: String,
    location: String,
    _lock: std::sync::Arc<dyn Send + Sync>,
    _holder: std::sync::Arc<()>,
}

#[cfg(any(feature = "file", feature = "sqlite", feature = "postgres"))]
impl std::fmt::Debug for SessionLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLock")
            .field("session", &self.session)
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

#[cfg(any(feature = "file", feature = "sqlite", feature = "postgres"))]
impl SessionLock {
    /// `lock` is what the store holds (a lock file, a database lock); `holder` is alive
    /// exactly as long as this handle.
    pub(crate) fn new(
        session: &str,
        location: String,
        lock: std::sync::Arc<dyn Send + Sync>,
        holder: std::sync::Arc<()>,
    ) -> Self {
        SessionLock {
            session: session.to_string(),
            location,
            _lock: lock,
            _holder: holder,
        }
    }

    /// The locked session.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// Where the lock lives: the lock file of the file store, the store's location
    /// (`sqlite:PATH`, `postgres://host:port/db`) of a SQL store.
    pub fn location(&self) -> &str {
        &self.location
    }
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
        /// The lock file (for a PostgreSQL store: the advisory lock, `pg_advisory_lock(KEY)`).
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
    /// A stored row of a SQL store is not a valid record (a row whose JSON does not parse
    /// before the last one, a `seq` gap, an invalid entry, another record version).
    #[error("corrupt row in {store}: session {session}, seq {seq}: {detail}")]
    CorruptRow {
        /// The store (`sqlite:PATH`, `postgres://host:port/db`).
        store: String,
        /// The session.
        session: String,
        /// The row's `seq`.
        seq: i64,
        /// What is wrong.
        detail: String,
    },
    /// A stored row of a SQL store is longer than the store's entry size limit; it was not
    /// fetched (a store with a larger limit can read it).
    #[error("{store}: session {session}, seq {seq}: the record of {bytes} bytes is longer than the limit of {limit} bytes per entry; not loaded (a store with a larger limit can read it)")]
    RowTooLong {
        /// The store.
        store: String,
        /// The session.
        session: String,
        /// The row's `seq`.
        seq: i64,
        /// The record's size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// A SQL store's schema is newer than this build knows (or its version is unreadable).
    #[error("{store}: schema version {found}, this build knows versions up to {supported}; refusing to use it")]
    SchemaVersion {
        /// The store.
        store: String,
        /// The version found.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// The session id cannot name a session file.
    #[error("invalid session id {session:?}: {reason}")]
    InvalidSession {
        /// The rejected id.
        session: String,
        /// Why.
        reason: &'static str,
    },
    /// A database call of a SQL store failed.
    #[error("session store database error at {store}: {source}")]
    Database {
        /// The store (`sqlite:PATH`, `postgres://host:port/db`).
        store: String,
        /// The driver's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A store URL that names no store ([`AnyStore::open`]).
    #[error("invalid session store {url:?}: {reason}")]
    InvalidUrl {
        /// The value given.
        url: String,
        /// Why it names no store.
        reason: String,
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
    /// Like [`load`](Self::load), also returning human-readable warnings of what loading
    /// found (a torn last entry: cut off the file, with how many bytes, or left in place when
    /// the store does not hold the session's lock).
    async fn load_with_report(
        &self,
        session: &str,
    ) -> Result<(Vec<Entry>, Vec<String>), StoreError> {
        Ok((self.load(session).await?, Vec::new()))
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
