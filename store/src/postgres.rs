//! The PostgreSQL session store (cargo feature `postgres`; `postgres-store` of agentloop):
//! sessions in one table, rows judged, locked and appended by [`SqlStore`] (see
//! [`sql`](super::sql)).
//!
//! # Schema
//!
//! Created on first use, versioned in `agentloop_schema_migrations` (one row per applied
//! migration); migrations run in one transaction under `pg_advisory_xact_lock`, so workers
//! starting together apply each once. A database with a migration newer than this build knows
//! is refused ([`StoreError::SchemaVersion`]). Migration 1:
//!
//! ```sql
//! CREATE TABLE agentloop_entries (
//!     session    TEXT        NOT NULL,
//!     seq        BIGINT      NOT NULL,        -- 1, 2, 3, … per session
//!     key        TEXT,                        -- idempotency key, NULL for keyless entries
//!     record     TEXT        NOT NULL,        -- the file store's line: {"v":1,"seq":N,…}
//!     written_at TIMESTAMPTZ NOT NULL DEFAULT now(),
//!     PRIMARY KEY (session, seq)
//! );
//! CREATE UNIQUE INDEX agentloop_entries_key ON agentloop_entries (session, key)
//!     WHERE key IS NOT NULL;
//! ```
//!
//! `record` is `TEXT`, not `JSONB`: rows are byte for byte the file store's lines (JSONB
//! reorders keys), and a torn row stays representable so that it is reported, not hidden
//! (`record::jsonb` works in queries).
//!
//! # Locking
//!
//! A session's lock is `pg_try_advisory_lock(hashtextextended(session, SEED))` taken on a
//! connection of its own, opened for the lock and held as long as the lock. PostgreSQL
//! releases a session-level advisory lock when its connection ends, so a worker that dies or
//! loses its connection mid-run releases the session. The holder's appends go through that
//! same connection: a worker whose lock connection died cannot append any more (its run
//! fails, R-IDEM-4) while another worker may already drive the session. Two sessions whose
//! 64-bit hashes collide lock each other out (never silently share a lock).
//!
//! # Durability
//!
//! [`Durability::Sync`](super::Durability::Sync): `synchronous_commit = on` (the server's
//! default), so an append's commit is flushed to the server's WAL before `append` returns.
//! `Batched { every }`: `synchronous_commit = off` on the lock connection, except every
//! `every`-th append, which commits with `on` and so flushes every earlier commit too;
//! [`SqlStore::close`](super::SqlStore::close) flushes with a synchronous commit.
//! A server crash can lose the unflushed suffix; a killed *client* loses nothing
//! acknowledged in either mode.

use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use tokio_postgres::config::Host;
use tokio_postgres::{Client, Config, NoTls};

use super::sql::{SqlBackend, SqlRow, SqlSessionInfo, SqlStore};
use super::StoreError;

/// The newest migration this build knows.
pub(crate) const SCHEMA_VERSION: i64 = 1;

/// The seed of `hashtextextended` for advisory lock keys (keeps agentloop's keys apart from
/// other users of advisory locks on the same database).
pub const LOCK_SEED: i64 = 0x6167_656e_746c_6f6f; // "agentloo"

/// The migration lock (`pg_advisory_xact_lock`) key.
const MIGRATION_LOCK: i64 = 0x6167_656e_746d_6967; // "agentmig"

const MIGRATIONS: [&str; 1] = ["
CREATE TABLE agentloop_entries (
    session    TEXT        NOT NULL,
    seq        BIGINT      NOT NULL,
    key        TEXT,
    record     TEXT        NOT NULL,
    written_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (session, seq)
);
CREATE UNIQUE INDEX agentloop_entries_key ON agentloop_entries (session, key)
    WHERE key IS NOT NULL;
"];

sql_store! {
    /// The PostgreSQL session store: one table, the sessions' locks PostgreSQL advisory locks.
    /// Connect it with [`PostgresStore::connect`].
    PostgresStore(PostgresBackend)
}

/// A PostgreSQL database (see the module docs).
pub(crate) struct PostgresBackend {
    config: Config,
    location: String,
    client: Client,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A session's lock: its own connection, holding the advisory lock. Dropping it ends the
/// connection (the client sends `Terminate`), and the server releases the lock when it sees
/// the connection end — normally within a millisecond, but not before `drop` returns.
pub(crate) struct PgLock {
    client: Client,
    /// `true` while the connection has `synchronous_commit = on`.
    sync_on: AtomicBool,
}

fn db_err(store: &str) -> impl FnOnce(tokio_postgres::Error) -> StoreError + '_ {
    move |e| StoreError::Database {
        store: store.to_string(),
        source: Box::new(e),
    }
}

/// `postgres://host:port/db` of a config (no user, no password).
fn location_of(config: &Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        #[cfg(unix)]
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    format!("postgres://{host}:{port}/{db}")
}

/// Opens a connection and runs its IO on a task of the current runtime.
async fn connect(
    config: &Config,
    store: &str,
) -> Result<(Client, tokio::task::JoinHandle<()>), StoreError> {
    let (client, connection) = config.connect(NoTls).await.map_err(db_err(store))?;
    let store = store.to_string();
    let task = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(target: "agentloop::store", "{store}: connection ended: {e}");
        }
    });
    Ok((client, task))
}

/// Applies the migrations this database lacks, in one transaction.
async fn migrate(client: &mut Client, store: &str) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(db_err(store))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(db_err(store))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS agentloop_schema_migrations (
             version    INTEGER     PRIMARY KEY,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(db_err(store))?;
    let row = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0)::bigint FROM agentloop_schema_migrations",
            &[],
        )
        .await
        .map_err(db_err(store))?;
    let current: i64 = row.try_get(0).map_err(db_err(store))?;
    if !(0..=SCHEMA_VERSION).contains(&current) {
        return Err(StoreError::SchemaVersion {
            store: store.to_string(),
            found: current,
            supported: SCHEMA_VERSION,
        });
    }
    for (version, sql) in (1..).zip(MIGRATIONS.iter()) {
        if version <= current {
            continue;
        }
        tx.batch_execute(sql).await.map_err(db_err(store))?;
        tx.execute(
            "INSERT INTO agentloop_schema_migrations (version) VALUES ($1)",
            &[&(version as i32)],
        )
        .await
        .map_err(db_err(store))?;
    }
    tx.commit().await.map_err(db_err(store))
}

impl PostgresBackend {
    /// Connects to `url` (`postgres://user@host:port/db`, or a `key=value` string; a 10 s
    /// connect timeout unless it sets one) and creates or checks the schema. Connections are unencrypted (`NoTls`): use it on a trusted
    /// network or a local socket.
    pub(crate) async fn connect(url: &str) -> Result<Self, StoreError> {
        let mut config: Config = url.parse().map_err(|e| StoreError::Database {
            store: "postgres".into(),
            source: Box::new(e),
        })?;
        if config.get_connect_timeout().is_none() {
            // An unreachable host fails in seconds, not after the OS's TCP timeout.
            config.connect_timeout(std::time::Duration::from_secs(10));
        }
        let location = location_of(&config);
        let (mut client, task) = connect(&config, &location).await?;
        migrate(&mut client, &location).await?;
        Ok(PostgresBackend {
            config,
            location,
            client,
            task,
        })
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user@host:port/db`, or a `key=value` string; a 10 s
    /// connect timeout unless it sets one) and creates or checks the schema, with
    /// [`Durability::Sync`](super::Durability::Sync) and the default entry size limit.
    /// Connections are unencrypted (`NoTls`): use it on a trusted network or a local socket.
    pub(crate) async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(PostgresStore(SqlStore::from_backend(
            PostgresBackend::connect(url).await?,
        )))
    }
}

#[async_trait]
impl SqlBackend for PostgresBackend {
    type Lock = PgLock;

    fn location(&self) -> String {
        self.location.clone()
    }

    async fn acquire(&self, session: &str) -> Result<PgLock, StoreError> {
        let store = &self.location;
        // The connection task ends by itself once the lock's client is dropped.
        let (client, _task) = connect(&self.config, store).await?;
        let lock = PgLock {
            client,
            sync_on: AtomicBool::new(true),
        };
        let row = lock
            .client
            .query_one(
                "SELECT pg_try_advisory_lock(hashtextextended($1, $2))",
                &[&session, &LOCK_SEED],
            )
            .await
            .map_err(db_err(store))?;
        if row.try_get::<_, bool>(0).map_err(db_err(store))? {
            Ok(lock)
        } else {
            Err(StoreError::Locked {
                session: session.to_string(),
                path: format!(
                    "{store}: pg_advisory_lock(hashtextextended('{session}', {LOCK_SEED}))"
                ),
            })
        }
    }

    async fn rows(&self, session: &str, limit: u64) -> Result<Vec<SqlRow>, StoreError> {
        let store = &self.location;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .client
            .query(
                "SELECT seq, octet_length(record)::bigint,
                        CASE WHEN octet_length(record) <= $2::bigint THEN record END
                 FROM agentloop_entries WHERE session = $1 ORDER BY seq",
                &[&session, &limit],
            )
            .await
            .map_err(db_err(store))?;
        rows.iter()
            .map(|r| {
                Ok(SqlRow {
                    seq: r.try_get(0).map_err(db_err(store))?,
                    bytes: u64::try_from(r.try_get::<_, i64>(1).map_err(db_err(store))?)
                        .unwrap_or(0),
                    record: r
                        .try_get::<_, Option<String>>(2)
                        .map_err(db_err(store))?
                        .map(String::into_bytes),
                })
            })
            .collect()
    }

    async fn insert(
        &self,
        lock: &PgLock,
        session: &str,
        seq: i64,
        key: Option<&str>,
        record: &[u8],
        durable: bool,
    ) -> Result<bool, StoreError> {
        let store = &self.location;
        let record = std::str::from_utf8(record)
            .map_err(|e| StoreError::Other(format!("record is not UTF-8: {e}")))?;
        if lock.sync_on.load(Ordering::SeqCst) != durable {
            let set = if durable {
                "SET synchronous_commit = on"
            } else {
                "SET synchronous_commit = off"
            };
            lock.client
                .batch_execute(set)
                .await
                .map_err(db_err(store))?;
            lock.sync_on.store(durable, Ordering::SeqCst);
        }
        let n = lock
            .client
            .execute(
                "INSERT INTO agentloop_entries (session, seq, key, record)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (session, key) WHERE key IS NOT NULL DO NOTHING",
                &[&session, &seq, &key, &record],
            )
            .await
            .map_err(db_err(store))?;
        Ok(n == 1)
    }

    async fn delete_from(&self, lock: &PgLock, session: &str, from: i64) -> Result<(), StoreError> {
        lock.client
            .execute(
                "DELETE FROM agentloop_entries WHERE session = $1 AND seq >= $2",
                &[&session, &from],
            )
            .await
            .map_err(db_err(&self.location))?;
        Ok(())
    }

    async fn flush(&self) -> Result<(), StoreError> {
        // A transaction with an xid commits with a WAL record; committing it synchronously
        // flushes the WAL up to it, so every earlier (asynchronous) commit as well.
        self.client
            .batch_execute(
                "BEGIN; SET LOCAL synchronous_commit = on; SELECT txid_current(); COMMIT",
            )
            .await
            .map_err(db_err(&self.location))
    }

    async fn sessions(&self) -> Result<Vec<SqlSessionInfo>, StoreError> {
        let store = &self.location;
        let rows = self
            .client
            .query(
                "SELECT session, COUNT(*)::bigint,
                        COALESCE(SUM(octet_length(record)), 0)::bigint,
                        EXTRACT(EPOCH FROM MAX(written_at))::bigint
                 FROM agentloop_entries GROUP BY session ORDER BY session",
                &[],
            )
            .await
            .map_err(db_err(store))?;
        rows.iter()
            .map(|r| {
                Ok(SqlSessionInfo {
                    id: r.try_get(0).map_err(db_err(store))?,
                    entries: u64::try_from(r.try_get::<_, i64>(1).map_err(db_err(store))?)
                        .unwrap_or(0),
                    bytes: u64::try_from(r.try_get::<_, i64>(2).map_err(db_err(store))?)
                        .unwrap_or(0),
                    modified_unix: r.try_get(3).map_err(db_err(store))?,
                })
            })
            .collect()
    }
}
