//! The SQLite session store (cargo feature `sqlite`; `sqlite-store` of agentloop): many
//! sessions in one database file, rows judged, locked and appended by [`SqlStore`] (see
//! [`sql`](super::sql)).
//!
//! # Schema (version 1, in `PRAGMA user_version`)
//!
//! ```sql
//! CREATE TABLE entries (
//!     session    TEXT    NOT NULL,
//!     seq        INTEGER NOT NULL,            -- 1, 2, 3, … per session
//!     key        TEXT,                        -- idempotency key, NULL for keyless entries
//!     record     TEXT    NOT NULL,            -- the file store's line: {"v":1,"seq":N,…}
//!     written_at INTEGER NOT NULL DEFAULT (CAST(strftime('%s','now') AS INTEGER)),
//!     PRIMARY KEY (session, seq)
//! );
//! CREATE UNIQUE INDEX entries_key ON entries (session, key) WHERE key IS NOT NULL;
//! ```
//!
//! The database is in WAL mode (readers never block the writer). A database whose
//! `user_version` is newer than this build knows is refused ([`StoreError::SchemaVersion`]).
//!
//! # Durability
//!
//! [`Durability::Sync`](super::Durability::Sync): `PRAGMA synchronous = FULL`, so each
//! append's commit syncs the WAL before `append` returns. `Batched { every }`:
//! `synchronous = NORMAL` (a commit reaches the OS, surviving a killed process) and every
//! `every`-th append commits with `FULL`, which syncs the WAL and so every commit before it;
//! [`SqlStore::close`](super::SqlStore::close) checkpoints, which syncs the WAL as well.
//!
//! # Locking
//!
//! SQLite has no lock finer than the database, and `BEGIN IMMEDIATE` held for a whole run
//! would stop every other session's writer. So a session's lock is the file store's: an OS
//! advisory lock (`flock`) on `<database>.locks/<session>.lock`, held by an open descriptor
//! and released by the OS when the process dies (no stale lock after a crash, no lease to
//! tune). Like SQLite's WAL mode itself, this needs the database on a local file system.
//!
//! # Blocking
//!
//! Database calls run on [`tokio::task::spawn_blocking`] over one connection per store. A
//! dropped append future does not stop its call: the row is committed or not as a whole.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};

use super::lock::{io_err, LockFile};
use super::sql::{SqlBackend, SqlRow, SqlSessionInfo, SqlStore};
use super::{FileKind, StoreError};

/// The newest schema version this build knows.
pub(crate) const SCHEMA_VERSION: i64 = 1;

const SCHEMA_V1: &str = "
CREATE TABLE entries (
    session    TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    key        TEXT,
    record     TEXT    NOT NULL,
    written_at INTEGER NOT NULL DEFAULT (CAST(strftime('%s','now') AS INTEGER)),
    PRIMARY KEY (session, seq)
);
CREATE UNIQUE INDEX entries_key ON entries (session, key) WHERE key IS NOT NULL;
";

sql_store! {
    /// The SQLite session store: one database file (WAL journal, `synchronous = FULL` for
    /// [`Durability::Sync`](super::Durability::Sync)), the sessions' locks in
    /// `<database>.locks/`. Open it with [`SqliteStore::open`].
    SqliteStore(SqliteBackend)
}

/// The connection and its current `synchronous` setting.
struct Db {
    conn: Connection,
    /// `true` while `synchronous = FULL`.
    full_sync: bool,
}

/// One SQLite database file (see the module docs).
pub(crate) struct SqliteBackend {
    path: PathBuf,
    locks: PathBuf,
    db: Arc<Mutex<Db>>,
}

impl std::fmt::Debug for SqliteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteBackend")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Drop for SqliteBackend {
    /// Checkpoints, which syncs the WAL: batched appends not yet synced become durable when
    /// the store is dropped without `close`, as the file store syncs on drop.
    fn drop(&mut self) {
        if let Ok(db) = self.db.lock() {
            if let Err(e) = db
                .conn
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            {
                tracing::error!(target: "agentloop::store", "sqlite checkpoint on drop failed: {e}");
            }
        }
    }
}

fn db_err(store: &str) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
    move |e| StoreError::Database {
        store: store.to_string(),
        source: Box::new(e),
    }
}

impl SqliteBackend {
    /// Opens (creating it and its schema if needed) the database at `path`. A symbolic link
    /// or other non-regular file at `path` is refused, as the file store refuses one.
    pub(crate) fn open(path: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let path = path.into();
        let store = format!("sqlite:{}", path.display());
        // The built-in file tools may not touch the database, its journals or its locks.
        crate::protected::protect_file_family(&path);
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            if let Some(kind) = FileKind::of(&meta) {
                return Err(StoreError::NotRegularFile {
                    path: path.display().to_string(),
                    kind,
                });
            }
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        let mut locks = path.clone().into_os_string();
        locks.push(".locks");
        let locks = PathBuf::from(locks);
        std::fs::create_dir_all(&locks).map_err(io_err(&locks))?;
        let mut conn = Connection::open(&path).map_err(db_err(&store))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(db_err(&store))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(db_err(&store))?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(target: "agentloop::store", "{store}: journal mode {mode}, not WAL");
        }
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(db_err(&store))?;
        migrate(&mut conn, &store)?;
        Ok(SqliteBackend {
            path,
            locks,
            db: Arc::new(Mutex::new(Db {
                conn,
                full_sync: true,
            })),
        })
    }

    /// Runs `f` on the connection on a blocking thread.
    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Db) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let db = self.db.clone();
        let store = self.location();
        let joined = tokio::task::spawn_blocking(move || {
            let mut db = db
                .lock()
                .map_err(|_| StoreError::Other("sqlite store mutex poisoned".into()))?;
            f(&mut db).map_err(db_err(&store))
        })
        .await;
        match joined {
            Ok(result) => result,
            Err(e) => Err(StoreError::Other(format!("sqlite store task failed: {e}"))),
        }
    }
}

/// Creates or checks the schema in one `BEGIN IMMEDIATE` transaction (two processes opening
/// a new database at once do not both create it).
fn migrate(conn: &mut Connection, store: &str) -> Result<(), StoreError> {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(db_err(store))?;
    let version: i64 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(db_err(store))?;
    match version {
        0 => {
            tx.execute_batch(SCHEMA_V1).map_err(db_err(store))?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(db_err(store))?;
        }
        SCHEMA_VERSION => {}
        found => {
            return Err(StoreError::SchemaVersion {
                store: store.to_string(),
                found,
                supported: SCHEMA_VERSION,
            })
        }
    }
    tx.commit().map_err(db_err(store))
}

fn set_sync(db: &mut Db, full: bool) -> rusqlite::Result<()> {
    if db.full_sync != full {
        db.conn
            .pragma_update(None, "synchronous", if full { "FULL" } else { "NORMAL" })?;
        db.full_sync = full;
    }
    Ok(())
}

/// A session's lock in a SQLite store: the OS lock on `<database>.locks/<session>.lock`.
#[derive(Debug)]
pub(crate) struct SqliteLock {
    _file: LockFile,
}

impl SqliteStore {
    /// Opens (creating it and its schema if needed) the SQLite store at `path`, with
    /// [`Durability::Sync`](super::Durability::Sync) and the default entry size limit. A
    /// symbolic link or other non-regular file at `path` is refused, as the file store
    /// refuses one.
    pub(crate) fn open(path: impl Into<PathBuf>) -> Result<Self, StoreError> {
        Ok(SqliteStore(SqlStore::from_backend(SqliteBackend::open(
            path,
        )?)))
    }
}

#[async_trait]
impl SqlBackend for SqliteBackend {
    type Lock = SqliteLock;

    fn location(&self) -> String {
        format!("sqlite:{}", self.path.display())
    }

    async fn acquire(&self, session: &str) -> Result<SqliteLock, StoreError> {
        let path = self.locks.join(format!("{session}.lock"));
        LockFile::acquire(session, &path).map(|file| SqliteLock { _file: file })
    }

    async fn rows(&self, session: &str, limit: u64) -> Result<Vec<SqlRow>, StoreError> {
        let session = session.to_string();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.call(move |db| {
            let mut stmt = db.conn.prepare_cached(
                "SELECT seq, length(CAST(record AS BLOB)),
                        CASE WHEN length(CAST(record AS BLOB)) <= ?2
                             THEN CAST(record AS BLOB) END
                 FROM entries WHERE session = ?1 ORDER BY seq",
            )?;
            let rows = stmt.query_map(params![session, limit], |r| {
                Ok(SqlRow {
                    seq: r.get(0)?,
                    bytes: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                    record: r.get(2)?,
                })
            })?;
            rows.collect()
        })
        .await
    }

    async fn insert(
        &self,
        _lock: &SqliteLock,
        session: &str,
        seq: i64,
        key: Option<&str>,
        record: &[u8],
        durable: bool,
    ) -> Result<bool, StoreError> {
        let (session, key) = (session.to_string(), key.map(str::to_string));
        let record = String::from_utf8(record.to_vec())
            .map_err(|e| StoreError::Other(format!("record is not UTF-8: {e}")))?;
        self.call(move |db| {
            set_sync(db, durable)?;
            let n = db
                .conn
                .prepare_cached(
                    "INSERT INTO entries (session, seq, key, record) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (session, key) WHERE key IS NOT NULL DO NOTHING",
                )?
                .execute(params![session, seq, key, record])?;
            Ok(n == 1)
        })
        .await
    }

    async fn delete_from(
        &self,
        _lock: &SqliteLock,
        session: &str,
        from: i64,
    ) -> Result<(), StoreError> {
        let session = session.to_string();
        self.call(move |db| {
            set_sync(db, true)?;
            db.conn.execute(
                "DELETE FROM entries WHERE session = ?1 AND seq >= ?2",
                params![session, from],
            )?;
            Ok(())
        })
        .await
    }

    async fn flush(&self) -> Result<(), StoreError> {
        // With synchronous = NORMAL, SQLite syncs the WAL before each checkpoint.
        self.call(|db| {
            db.conn
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                .optional()
                .map(|_| ())
        })
        .await
    }

    async fn sessions(&self) -> Result<Vec<SqlSessionInfo>, StoreError> {
        self.call(|db| {
            let mut stmt = db.conn.prepare(
                "SELECT session, COUNT(*), SUM(length(CAST(record AS BLOB))), MAX(written_at)
                 FROM entries GROUP BY session ORDER BY session",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(SqlSessionInfo {
                    id: r.get(0)?,
                    entries: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                    bytes: u64::try_from(r.get::<_, Option<i64>>(2)?.unwrap_or(0)).unwrap_or(0),
                    modified_unix: r.get(3)?,
                })
            })?;
            rows.collect()
        })
        .await
    }
}
