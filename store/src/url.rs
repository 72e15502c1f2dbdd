//! Opening a session store by URL: `DIR` (the file store, feature `file`), `sqlite:PATH`
//! (feature `sqlite`), `postgres://…` / `postgresql://…` (feature `postgres`).
//! [`AnyStore`] is the store so opened, with one set of operations whatever the backend; the
//! CLI's `--store` takes these URLs.

use std::path::PathBuf;

use async_trait::async_trait;

#[cfg(feature = "file")]
use super::export::{list_sessions, SessionInfo};
#[cfg(feature = "file")]
use super::FileStore;
use super::{Durability, Entry, SessionLock, SessionStore, StoreError};

/// Where sessions live, parsed from a store URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StoreUrl {
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

impl StoreUrl {
    /// `$AGENTLOOP_STORE` when it holds a `sqlite:` or `postgres` URL, else the file store's
    /// default directory (which reads `$AGENTLOOP_STORE` as a directory).
    pub(crate) fn default_store() -> Self {
        let env = std::env::var(super::STORE_ENV).ok();
        match env.as_deref().map(str::parse::<StoreUrl>) {
            Some(Ok(url)) if !matches!(url, StoreUrl::Dir(_)) => url,
            _ => StoreUrl::Dir(super::default_dir()),
        }
    }

    /// Parses `url`; a value that is no store URL is [`StoreError::InvalidUrl`].
    pub(crate) fn parse(url: &str) -> Result<Self, StoreError> {
        url.parse().map_err(|reason| StoreError::InvalidUrl {
            url: url.to_string(),
            reason,
        })
    }
}

/// A session store opened by URL ([`AnyStore::open`]): `DIR` (the JSON Lines file store,
/// feature `file`), `sqlite:PATH` (one SQLite database, feature `sqlite`) or
/// `postgres://user@host:port/db` (feature `postgres`), with the operations a program
/// needs besides the [`SessionStore`] port: a session's lock, a load that reports (and, under
/// the lock, cuts) a torn last entry, listing, closing.
///
/// The SQLite store keeps its lock files in `<database>.locks/` and refuses a symbolic link
/// or other non-regular file as its database; the PostgreSQL store takes advisory locks and
/// connects unencrypted (`NoTls`: a trusted network or a local socket), with a 10 s connect
/// timeout unless the URL sets one.
///
/// ```no_run
/// use agentloop_store::{AnyStore, Durability};
///
/// # async fn demo() -> Result<(), agentloop_store::StoreError> {
/// let store = AnyStore::open("sqlite:sessions.db", Durability::Sync).await?;
/// let _lock = store.lock("session-1").await?;
/// let (entries, warnings) = store.load_report("session-1").await?;
/// # let _ = (entries, warnings);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct AnyStore(Backend);

/// The store behind an [`AnyStore`].
// One per process, never moved around in bulk: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Backend {
    /// The JSON Lines file store.
    #[cfg(feature = "file")]
    File(FileStore),
    /// The SQLite store.
    #[cfg(feature = "sqlite")]
    Sqlite(super::SqliteStore),
    /// The PostgreSQL store.
    #[cfg(feature = "postgres")]
    Postgres(super::PostgresStore),
}

/// A SQL store's sessions as [`SessionInfo`]s (`path` is the store's location).
#[cfg(all(feature = "file", any(feature = "sqlite", feature = "postgres")))]
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

#[cfg(not(all(feature = "file", feature = "sqlite", feature = "postgres")))]
fn not_built(url: &StoreUrl, feature: &str) -> StoreError {
    StoreError::Other(format!(
        "{url:?} needs the `{feature}` feature of agentloop (`{store_feature}` of agentloop-store), which this build does not have",
        store_feature = feature.trim_end_matches("-store")
    ))
}

impl AnyStore {
    /// Opens (creating it if needed) the store `url` names, with `durability`: a directory,
    /// `sqlite:PATH` (`sqlite://PATH` too), `postgres://…` / `postgresql://…` (or a
    /// `key=value` connection string after `postgres:`). A value that is no store URL is
    /// [`StoreError::InvalidUrl`]; a backend this build lacks the feature of is an error
    /// naming the feature.
    pub async fn open(url: &str, durability: Durability) -> Result<Self, StoreError> {
        Self::open_url(&StoreUrl::parse(url)?, durability).await
    }

    /// Opens the default store: `$AGENTLOOP_STORE` (a directory or a URL), else the file
    /// store in `./.agentloop/sessions`.
    pub async fn open_default(durability: Durability) -> Result<Self, StoreError> {
        Self::open_url(&StoreUrl::default_store(), durability).await
    }

    /// Opens the store `url` names.
    pub(crate) async fn open_url(
        url: &StoreUrl,
        durability: Durability,
    ) -> Result<Self, StoreError> {
        let backend = match url {
            #[cfg(feature = "file")]
            StoreUrl::Dir(dir) => Backend::File(FileStore::open(dir)?.with_durability(durability)),
            #[cfg(not(feature = "file"))]
            StoreUrl::Dir(_) => return Err(not_built(url, "file-store")),
            #[cfg(feature = "sqlite")]
            StoreUrl::Sqlite(path) => {
                Backend::Sqlite(super::SqliteStore::open(path)?.with_durability(durability))
            }
            #[cfg(not(feature = "sqlite"))]
            StoreUrl::Sqlite(_) => return Err(not_built(url, "sqlite-store")),
            #[cfg(feature = "postgres")]
            StoreUrl::Postgres(conninfo) => Backend::Postgres(
                super::PostgresStore::connect(conninfo)
                    .await?
                    .with_durability(durability),
            ),
            #[cfg(not(feature = "postgres"))]
            StoreUrl::Postgres(_) => return Err(not_built(url, "postgres-store")),
        };
        Ok(AnyStore(backend))
    }

    /// The file store, when this is one (its session files, its blocking operations).
    #[cfg(feature = "file")]
    pub fn as_file_store(&self) -> Option<&FileStore> {
        match &self.0 {
            Backend::File(s) => Some(s),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// Sets the entry size limit: the longest record written or read (default
    /// [`DEFAULT_MAX_ENTRY_BYTES`](super::DEFAULT_MAX_ENTRY_BYTES)).
    pub fn with_max_entry_bytes(self, limit: u64) -> Self {
        AnyStore(match self.0 {
            #[cfg(feature = "file")]
            Backend::File(s) => Backend::File(s.with_max_entry_bytes(limit)),
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(s) => Backend::Sqlite(s.with_max_entry_bytes(limit)),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => Backend::Postgres(s.with_max_entry_bytes(limit)),
        })
    }

    /// Names the store: its directory, `sqlite:PATH` or `postgres://host:port/db`.
    pub fn location(&self) -> String {
        match &self.0 {
            #[cfg(feature = "file")]
            Backend::File(s) => s.dir().display().to_string(),
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(s) => s.location(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.location(),
        }
    }

    /// Takes `session`'s lock ([`StoreError::Locked`] when another process, another store or
    /// a live [`SessionLock`] of this store holds it). Released when the lock is dropped.
    pub async fn lock(&self, session: &str) -> Result<SessionLock, StoreError> {
        match &self.0 {
            #[cfg(feature = "file")]
            Backend::File(s) => s.lock(session),
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(s) => s.lock(session).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.lock(session).await,
        }
    }

    /// Loads `session`, with warnings of a torn last entry (cut only under this store's lock).
    pub async fn load_report(
        &self,
        session: &str,
    ) -> Result<(Vec<Entry>, Vec<String>), StoreError> {
        match &self.0 {
            #[cfg(feature = "file")]
            Backend::File(s) => s.load_blocking(session),
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(s) => s.load_report(session).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.load_report(session).await,
        }
    }

    /// Whether anything is stored for `session` (a file, or at least one row; a session
    /// holding only a torn entry exists but has no entries).
    pub async fn exists(&self, session: &str) -> Result<bool, StoreError> {
        match &self.0 {
            // Not `is_file`, which follows a link: a link (or FIFO) is refused by the load.
            #[cfg(feature = "file")]
            Backend::File(s) => Ok(std::fs::symlink_metadata(s.session_path(session)?).is_ok()),
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(s) => Ok(!super::sql::SqlBackend::rows(s.0.backend(), session, 0)
                .await?
                .is_empty()),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => Ok(!super::sql::SqlBackend::rows(s.0.backend(), session, 0)
                .await?
                .is_empty()),
        }
    }

    /// Makes batched appends durable and releases the store's share of the session's lock
    /// (the lock itself goes once no [`SessionLock`] for it is alive).
    pub async fn close(&self, session: &str) -> Result<(), StoreError> {
        match &self.0 {
            #[cfg(feature = "file")]
            Backend::File(s) => s.close(session),
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(s) => s.close(session).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.close(session).await,
        }
    }

    /// The stored sessions, sorted by id (for a SQL store, `path` is the store's location
    /// and `torn_tail` is not computed: a load reports it).
    #[cfg(feature = "file")]
    pub async fn list(&self) -> Result<Vec<SessionInfo>, StoreError> {
        match &self.0 {
            Backend::File(s) => list_sessions(s.dir()),
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(s) => list_sql(&s.0).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => list_sql(&s.0).await,
        }
    }

    /// The store as the port.
    fn port(&self) -> &dyn SessionStore {
        match &self.0 {
            #[cfg(feature = "file")]
            Backend::File(s) => s,
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(s) => s,
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s,
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
    ) -> Result<(Vec<Entry>, Vec<String>), StoreError> {
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
