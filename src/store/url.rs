//! Opening a session store by URL: `DIR` (the file store), `sqlite:PATH` (feature
//! `sqlite-store`), `postgres://…` / `postgresql://…` (feature `postgres-store`). The CLI's
//! `--store` takes these; [`AnyStore`] gives every command one set of operations whatever the
//! store.

use std::path::PathBuf;

use async_trait::async_trait;

use super::export::{list_sessions, SessionInfo};
use super::{Durability, Entry, FileStore, LoadReport, SessionLock, SessionStore, StoreError};

/// Where sessions live, parsed from a `--store` value.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// A directory of JSON Lines files (any value that is not one of the URLs below).
    Dir(PathBuf),
    /// `sqlite:PATH`: one SQLite database file.
    Sqlite(PathBuf),
    /// `postgres://…` or `postgresql://…` (also `key=value` strings after `postgres:`).
    Postgres(String),
}

impl std::str::FromStr for StoreUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(StoreUrl::Postgres(s.to_string()));
        }
        if let Some(conninfo) = s.strip_prefix("postgres:") {
            return Ok(StoreUrl::Postgres(conninfo.to_string()));
        }
        if let Some(path) = s.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err("`sqlite:` needs a database path, e.g. sqlite:sessions.db".into());
            }
            return Ok(StoreUrl::Sqlite(PathBuf::from(path)));
        }
        if s.is_empty() {
            return Err("empty store (a directory, sqlite:PATH or postgres://…)".into());
        }
        Ok(StoreUrl::Dir(PathBuf::from(s)))
    }
}

impl Default for StoreUrl {
    /// `$AGENTLOOP_STORE` when it holds a `sqlite:` or `postgres` URL, else the file store in
    /// [`FileStore::default_dir`] (which reads `$AGENTLOOP_STORE` as a directory).
    fn default() -> Self {
        let env = std::env::var(super::file::STORE_ENV).ok();
        match env.as_deref().map(str::parse::<StoreUrl>) {
            Some(Ok(url)) if !matches!(url, StoreUrl::Dir(_)) => url,
            _ => StoreUrl::Dir(FileStore::default_dir()),
        }
    }
}

/// Any session store the URL can name, with the operations the CLI needs.
// One per process, never moved around in bulk: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyStore {
    /// The JSON Lines file store.
    File(FileStore),
    /// The SQLite store.
    #[cfg(feature = "sqlite-store")]
    Sqlite(super::SqliteStore),
    /// The PostgreSQL store.
    #[cfg(feature = "postgres-store")]
    Postgres(super::PostgresStore),
}

/// A SQL store's sessions as [`SessionInfo`]s (`path` is the store's location).
#[cfg(any(feature = "sqlite-store", feature = "postgres-store"))]
async fn list_sql<B: super::sql::SqlBackend>(
    store: &super::sql::SqlStore<B>,
) -> Result<Vec<SessionInfo>, StoreError> {
    use std::time::{Duration, UNIX_EPOCH};
    let location = PathBuf::from(store.location());
    Ok(store
        .sessions()
        .await?
        .into_iter()
        .map(|info| SessionInfo {
            id: info.id,
            path: location.clone(),
            entries: usize::try_from(info.entries).unwrap_or(usize::MAX),
            bytes: info.bytes,
            modified: info
                .modified_unix
                .and_then(|s| u64::try_from(s).ok())
                .map(|s| UNIX_EPOCH + Duration::from_secs(s)),
            torn_tail: false,
            not_regular: None,
        })
        .collect())
}

#[cfg(not(all(feature = "sqlite-store", feature = "postgres-store")))]
fn not_built(url: &StoreUrl, feature: &str) -> StoreError {
    StoreError::Other(format!(
        "{url:?} needs the `{feature}` feature of agentloop, which this build does not have"
    ))
}

impl AnyStore {
    /// Opens (creating it if needed) the store `url` names, with `durability`.
    pub async fn open(url: &StoreUrl, durability: Durability) -> Result<Self, StoreError> {
        match url {
            StoreUrl::Dir(dir) => Ok(AnyStore::File(
                FileStore::open(dir)?.with_durability(durability),
            )),
            #[cfg(feature = "sqlite-store")]
            StoreUrl::Sqlite(path) => Ok(AnyStore::Sqlite(
                super::SqliteStore::open(path)?.with_durability(durability),
            )),
            #[cfg(not(feature = "sqlite-store"))]
            StoreUrl::Sqlite(_) => Err(not_built(url, "sqlite-store")),
            #[cfg(feature = "postgres-store")]
            StoreUrl::Postgres(conninfo) => Ok(AnyStore::Postgres(
                super::PostgresStore::connect(conninfo)
                    .await?
                    .with_durability(durability),
            )),
            #[cfg(not(feature = "postgres-store"))]
            StoreUrl::Postgres(_) => Err(not_built(url, "postgres-store")),
        }
    }

    /// Sets the entry size limit (the file store's
    /// [`with_max_entry_bytes`](FileStore::with_max_entry_bytes) rule, on every store).
    pub fn with_max_entry_bytes(self, limit: u64) -> Self {
        match self {
            AnyStore::File(s) => AnyStore::File(s.with_max_entry_bytes(limit)),
            #[cfg(feature = "sqlite-store")]
            AnyStore::Sqlite(s) => AnyStore::Sqlite(s.with_max_entry_bytes(limit)),
            #[cfg(feature = "postgres-store")]
            AnyStore::Postgres(s) => AnyStore::Postgres(s.with_max_entry_bytes(limit)),
        }
    }

    /// Names the store: its directory, `sqlite:PATH` or `postgres://host:port/db`.
    pub fn location(&self) -> String {
        match self {
            AnyStore::File(s) => s.dir().display().to_string(),
            #[cfg(feature = "sqlite-store")]
            AnyStore::Sqlite(s) => s.location(),
            #[cfg(feature = "postgres-store")]
            AnyStore::Postgres(s) => s.location(),
        }
    }

    /// Takes `session`'s lock ([`StoreError::Locked`] when someone else holds it).
    pub async fn lock(&self, session: &str) -> Result<SessionLock, StoreError> {
        match self {
            AnyStore::File(s) => s.lock(session),
            #[cfg(feature = "sqlite-store")]
            AnyStore::Sqlite(s) => s.lock(session).await,
            #[cfg(feature = "postgres-store")]
            AnyStore::Postgres(s) => s.lock(session).await,
        }
    }

    /// Loads `session` and reports a torn last entry (cut only under this store's lock).
    pub async fn load_report(&self, session: &str) -> Result<(Vec<Entry>, LoadReport), StoreError> {
        match self {
            AnyStore::File(s) => s.load_blocking(session),
            #[cfg(feature = "sqlite-store")]
            AnyStore::Sqlite(s) => s.load_report(session).await,
            #[cfg(feature = "postgres-store")]
            AnyStore::Postgres(s) => s.load_report(session).await,
        }
    }

    /// Whether anything is stored for `session` (a file, or at least one row; a session
    /// holding only a torn entry exists but has no entries).
    pub async fn exists(&self, session: &str) -> Result<bool, StoreError> {
        match self {
            // Not `is_file`, which follows a link: a link (or FIFO) is refused by the load.
            AnyStore::File(s) => Ok(std::fs::symlink_metadata(s.session_path(session)?).is_ok()),
            #[cfg(feature = "sqlite-store")]
            AnyStore::Sqlite(s) => Ok(!super::sql::SqlBackend::rows(s.0.backend(), session, 0)
                .await?
                .is_empty()),
            #[cfg(feature = "postgres-store")]
            AnyStore::Postgres(s) => Ok(!super::sql::SqlBackend::rows(s.0.backend(), session, 0)
                .await?
                .is_empty()),
        }
    }

    /// Makes batched appends durable and releases the store's share of the session's lock.
    pub async fn close(&self, session: &str) -> Result<(), StoreError> {
        match self {
            AnyStore::File(s) => s.close(session),
            #[cfg(feature = "sqlite-store")]
            AnyStore::Sqlite(s) => s.close(session).await,
            #[cfg(feature = "postgres-store")]
            AnyStore::Postgres(s) => s.close(session).await,
        }
    }

    /// The stored sessions, sorted by id (for a SQL store, `path` is the store's location
    /// and `torn_tail` is not computed: a load reports it).
    pub async fn list(&self) -> Result<Vec<SessionInfo>, StoreError> {
        match self {
            AnyStore::File(s) => list_sessions(s.dir()),
            #[cfg(feature = "sqlite-store")]
            AnyStore::Sqlite(s) => list_sql(&s.0).await,
            #[cfg(feature = "postgres-store")]
            AnyStore::Postgres(s) => list_sql(&s.0).await,
        }
    }

    /// The store as the port.
    fn port(&self) -> &dyn SessionStore {
        match self {
            AnyStore::File(s) => s,
            #[cfg(feature = "sqlite-store")]
            AnyStore::Sqlite(s) => s,
            #[cfg(feature = "postgres-store")]
            AnyStore::Postgres(s) => s,
        }
    }
}

#[async_trait]
impl SessionStore for AnyStore {
    async fn load(&self, session: &str) -> Result<Vec<Entry>, StoreError> {
        self.port().load(session).await
    }

    async fn append(&self, session: &str, entry: &Entry) -> Result<(), StoreError> {
        self.port().append(session, entry).await
    }

    async fn load_with_report(
        &self,
        session: &str,
    ) -> Result<(Vec<Entry>, LoadReport), StoreError> {
        self.port().load_with_report(session).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        let parse = |s: &str| s.parse::<StoreUrl>();
        assert_eq!(parse("dir/x"), Ok(StoreUrl::Dir("dir/x".into())));
        assert_eq!(parse("sqlite:a.db"), Ok(StoreUrl::Sqlite("a.db".into())));
        assert_eq!(
            parse("sqlite:///tmp/a.db"),
            Ok(StoreUrl::Sqlite("/tmp/a.db".into()))
        );
        assert_eq!(
            parse("postgres://u@h:5/db"),
            Ok(StoreUrl::Postgres("postgres://u@h:5/db".into()))
        );
        assert_eq!(
            parse("postgres:host=/tmp port=5"),
            Ok(StoreUrl::Postgres("host=/tmp port=5".into()))
        );
        assert!(parse("sqlite:").is_err());
        assert!(parse("").is_err());
    }
}
