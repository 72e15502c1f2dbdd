//! The SQL session stores' shared logic: one table of rows `(session, seq, key, record)`,
//! judged, locked and appended the same way whatever the database.
//!
//! A backend ([`SqlBackend`]: SQLite in [`sqlite`](super::sqlite), PostgreSQL in
//! [`postgres`](super::postgres)) only moves rows and takes a per-session lock; [`SqlStore`]
//! does the rest, so the two databases cannot drift apart:
//!
//! - **Records**: a row's `record` is exactly the file store's line without its newline,
//!   `{"v":1,"seq":N,"entry":…}`, encoded with the same entry size limit
//!   ([`DEFAULT_MAX_ENTRY_BYTES`] by default): a larger entry is refused with
//!   [`StoreError::EntryTooLarge`] before anything is written, a longer stored row is
//!   [`StoreError::RowTooLong`] (not fetched, only its length). Rows are judged by the file
//!   store's rule ([`records`](super::records)): the row `seq`s must count 1, 2, 3, …; a last
//!   row whose JSON does not parse is a torn write, reported among
//!   [`SessionStore::load_with_report`]'s warnings and deleted by the next lock holder that
//!   opens the session; anything else is
//!   [`StoreError::CorruptRow`] naming store, session and `seq`.
//! - **Idempotency**: `key` holds [`Entry::idempotency_key`] as text (`turn:<index>:<run>`,
//!   `started:<call>`, `result:<call>`) under a unique index on `(session, key)`; an insert
//!   that hits it is a no-op (`ON CONFLICT (session, key) DO NOTHING`), exactly like a
//!   re-append to the file store.
//! - **Locking**: writing a session requires its lock, taken by [`SqlStore::lock`] or by the
//!   first append (then held until [`SqlStore::close`] or drop), as in the file store. A second
//!   holder gets [`StoreError::Locked`]. A load by a lock holder deletes a torn last row; a
//!   reader without the lock leaves it in place.
//! - **Durability**: [`Durability::Sync`] commits durably before `append` returns;
//!   [`Durability::Batched`] makes every `every`-th commit (and [`SqlStore::close`]) durable,
//!   which makes the commits before it durable too (both databases write one log in order).

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use async_trait::async_trait;

use super::records::{encode_bounded, judge_record, Verdict, RECORD_VERSION};
use super::{
    validate_session_id, Durability, Entry, EntryKey, SessionLock, SessionStore, StoreError,
    DEFAULT_MAX_ENTRY_BYTES,
};

/// One stored row, as a backend fetched it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SqlRow {
    /// The row's `seq` column.
    pub(crate) seq: i64,
    /// The record's length in bytes.
    pub(crate) bytes: u64,
    /// The record; `None` when it is longer than the limit the rows were fetched with.
    pub(crate) record: Option<Vec<u8>>,
}

/// One session of a SQL store, as listed.
#[cfg_attr(not(feature = "file"), allow(dead_code))] // listing is `AnyStore::list`
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SqlSessionInfo {
    /// The session id.
    pub(crate) id: String,
    /// Its rows.
    pub(crate) entries: u64,
    /// The bytes of its records.
    pub(crate) bytes: u64,
    /// When its last row was written (seconds since the Unix epoch, database clock).
    pub(crate) modified_unix: Option<i64>,
}

/// A database under a [`SqlStore`]: it stores and fetches rows and locks sessions; the store
/// does the encoding, judging, idempotency and durability bookkeeping.
#[async_trait]
pub(crate) trait SqlBackend: Send + Sync + 'static {
    /// What holds one session's lock; dropping it releases the lock.
    type Lock: Send + Sync + 'static;

    /// Names the store in errors and listings (`sqlite:PATH`, `postgres://host:port/db`).
    fn location(&self) -> String;

    /// Takes `session`'s lock, or fails with [`StoreError::Locked`] at once.
    async fn acquire(&self, session: &str) -> Result<Self::Lock, StoreError>;

    /// The session's rows ordered by `seq`; a record longer than `limit` bytes is not fetched.
    async fn rows(&self, session: &str, limit: u64) -> Result<Vec<SqlRow>, StoreError>;

    /// Inserts one row unless `(session, key)` is taken; returns whether it inserted. With
    /// `durable`, the commit (and so every earlier one) is on stable storage when it returns.
    /// `lock` is the session's lock (a backend may write through it, so that a writer that
    /// lost its lock cannot write).
    async fn insert(
        &self,
        lock: &Self::Lock,
        session: &str,
        seq: i64,
        key: Option<&str>,
        record: &[u8],
        durable: bool,
    ) -> Result<bool, StoreError>;

    /// Deletes the session's rows with `seq >= from` (a torn tail) under the session's lock.
    async fn delete_from(
        &self,
        lock: &Self::Lock,
        session: &str,
        from: i64,
    ) -> Result<(), StoreError>;

    /// Makes every commit so far durable (batched mode's close).
    async fn flush(&self) -> Result<(), StoreError>;

    /// Every session with at least one row, ordered by id.
    #[cfg_attr(not(feature = "file"), allow(dead_code))] // listing is `AnyStore::list`
    async fn sessions(&self) -> Result<Vec<SqlSessionInfo>, StoreError>;
}

/// The text of an idempotency key in the `key` column.
pub(crate) fn key_text(key: &EntryKey) -> String {
    match key {
        EntryKey::Turn {
            run_id,
            model_call_index,
        } => format!("turn:{model_call_index}:{run_id}"),
        EntryKey::ToolStarted { tool_call_id } => format!("started:{tool_call_id}"),
        EntryKey::ToolResult { tool_call_id } => format!("result:{tool_call_id}"),
    }
}

/// What judging a session's rows found.
#[derive(Debug, Default)]
struct RowScan {
    entries: Vec<Entry>,
    /// The `seq` of a torn last row and why it is torn.
    torn: Option<(i64, String)>,
}

/// Judges rows (ordered by `seq`) by the file store's rule.
fn scan_rows(
    store: &str,
    session: &str,
    rows: Vec<SqlRow>,
    limit: u64,
) -> Result<RowScan, StoreError> {
    let mut out = RowScan::default();
    let count = rows.len();
    let corrupt = |seq: i64, detail: String| StoreError::CorruptRow {
        store: store.to_string(),
        session: session.to_string(),
        seq,
        detail,
    };
    for (i, row) in rows.into_iter().enumerate() {
        let expected = out.entries.len() as u64 + 1;
        if u64::try_from(row.seq).ok() != Some(expected) {
            return Err(corrupt(
                row.seq,
                format!(
                    "expected seq {expected}, found {} (lost or reordered rows)",
                    row.seq
                ),
            ));
        }
        let Some(record) = row.record.filter(|_| row.bytes <= limit) else {
            return Err(StoreError::RowTooLong {
                store: store.to_string(),
                session: session.to_string(),
                seq: row.seq,
                bytes: row.bytes,
                limit,
            });
        };
        match judge_record(&record, expected, i + 1 == count) {
            Verdict::Entry(entry) => out.entries.push(entry),
            Verdict::Torn(why) => out.torn = Some((row.seq, why)),
            Verdict::Corrupt(detail) => return Err(corrupt(row.seq, detail)),
            Verdict::Version(version) => {
                return Err(corrupt(
                    row.seq,
                    format!(
                        "unsupported record version {version} (this build reads version \
                         {RECORD_VERSION})"
                    ),
                ))
            }
        }
    }
    Ok(out)
}

/// The append side of one locked session.
struct Writer<L> {
    lock: Arc<L>,
    /// The next row's `seq`; `None` until the session's rows were judged under the lock.
    next_seq: Option<i64>,
    /// Appends since the last durable commit (batched mode).
    unsynced: u32,
}

struct Slot<L> {
    lock: Weak<L>,
    holder: Weak<()>,
    writer: Option<Arc<tokio::sync::Mutex<Writer<L>>>>,
    /// Held while this store acquires the session's lock from the database, so two tasks of
    /// the store never race each other for it (the loser would see "locked").
    acquiring: Arc<tokio::sync::Mutex<()>>,
}

impl<L> Default for Slot<L> {
    fn default() -> Self {
        Slot {
            lock: Weak::new(),
            holder: Weak::new(),
            writer: None,
            acquiring: Arc::default(),
        }
    }
}

/// A session store over a SQL database (see the module docs): SQLite
/// (`SqliteStore`) and PostgreSQL (`PostgresStore`) are newtypes of this type over their
/// backends.
pub(crate) struct SqlStore<B: SqlBackend> {
    backend: B,
    durability: Durability,
    max_entry_bytes: u64,
    slots: tokio::sync::Mutex<HashMap<String, Slot<B::Lock>>>,
}

impl<B: SqlBackend> std::fmt::Debug for SqlStore<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("store", &self.backend.location())
            .field("durability", &self.durability)
            .field("max_entry_bytes", &self.max_entry_bytes)
            .finish_non_exhaustive()
    }
}

impl<B: SqlBackend> SqlStore<B> {
    /// A store over `backend` with [`Durability::Sync`] and the default entry size limit.
    pub(crate) fn from_backend(backend: B) -> Self {
        SqlStore {
            backend,
            durability: Durability::Sync,
            max_entry_bytes: DEFAULT_MAX_ENTRY_BYTES,
            slots: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Sets the durability mode.
    pub(crate) fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Sets the entry size limit (the longest record written or read; the file store's
    /// [`FileStore::with_max_entry_bytes`](super::FileStore::with_max_entry_bytes) rule).
    pub(crate) fn with_max_entry_bytes(mut self, limit: u64) -> Self {
        self.max_entry_bytes = limit;
        self
    }

    /// The database under the store.
    // `AnyStore::exists` reads the rows through it.
    pub(crate) fn backend(&self) -> &B {
        &self.backend
    }

    /// Names the store (`sqlite:PATH`, `postgres://host:port/db`).
    pub(crate) fn location(&self) -> String {
        self.backend.location()
    }

    /// The lock of `session` if anyone in this store holds it, else a new one. The backend
    /// acquires without the store's map held, so that a PostgreSQL connect for one session
    /// never stalls the appends of the others; when another task of this store won the race,
    /// its lock is used (and ours, if we got one, is released).
    async fn os_lock(&self, session: &str) -> Result<Arc<B::Lock>, StoreError> {
        let held = |slots: &HashMap<String, Slot<B::Lock>>| {
            slots.get(session).and_then(|s| s.lock.upgrade())
        };
        let gate = {
            let mut slots = self.slots.lock().await;
            if let Some(lock) = held(&slots) {
                return Ok(lock);
            }
            slots
                .entry(session.to_string())
                .or_default()
                .acquiring
                .clone()
        };
        // One acquisition per session at a time in this store; the map itself is not held.
        let _acquiring = gate.lock().await;
        if let Some(lock) = held(&*self.slots.lock().await) {
            return Ok(lock);
        }
        let acquired = self.backend.acquire(session).await;
        let mut slots = self.slots.lock().await;
        if let Some(lock) = held(&slots) {
            return Ok(lock);
        }
        let lock = Arc::new(acquired?);
        slots.entry(session.to_string()).or_default().lock = Arc::downgrade(&lock);
        Ok(lock)
    }

    fn locked(&self, session: &str) -> StoreError {
        StoreError::Locked {
            session: session.to_string(),
            path: self.backend.location(),
        }
    }

    /// Takes the session's lock: [`StoreError::Locked`] when another process, another store
    /// or a live [`SessionLock`] of this store holds it.
    pub(crate) async fn lock(&self, session: &str) -> Result<SessionLock, StoreError> {
        validate_session_id(session)?;
        let has_holder = |slots: &HashMap<String, Slot<B::Lock>>| {
            slots
                .get(session)
                .is_some_and(|s| s.holder.upgrade().is_some())
        };
        if has_holder(&*self.slots.lock().await) {
            return Err(self.locked(session));
        }
        let lock = self.os_lock(session).await?;
        let mut slots = self.slots.lock().await;
        if has_holder(&slots) {
            return Err(self.locked(session));
        }
        let holder = Arc::new(());
        slots.entry(session.to_string()).or_default().holder = Arc::downgrade(&holder);
        Ok(SessionLock::new(
            session,
            self.backend.location(),
            lock,
            holder,
        ))
    }

    /// The session's writer, taking the lock when this store does not hold it.
    async fn writer(
        &self,
        session: &str,
    ) -> Result<Arc<tokio::sync::Mutex<Writer<B::Lock>>>, StoreError> {
        let existing = |slots: &HashMap<String, Slot<B::Lock>>| {
            slots.get(session).and_then(|s| s.writer.clone())
        };
        if let Some(writer) = existing(&*self.slots.lock().await) {
            return Ok(writer);
        }
        let lock = self.os_lock(session).await?;
        let mut slots = self.slots.lock().await;
        if let Some(writer) = existing(&slots) {
            return Ok(writer);
        }
        let writer = Arc::new(tokio::sync::Mutex::new(Writer {
            lock,
            next_seq: None,
            unsynced: 0,
        }));
        slots.entry(session.to_string()).or_default().writer = Some(writer.clone());
        Ok(writer)
    }

    async fn holds_lock(&self, session: &str) -> bool {
        self.slots
            .lock()
            .await
            .get(session)
            .is_some_and(|s| s.lock.upgrade().is_some())
    }

    /// Reads and judges the session's rows; with the session's lock, deletes a torn last row.
    async fn judged(
        &self,
        session: &str,
        cut: Option<&B::Lock>,
    ) -> Result<(RowScan, Vec<String>), StoreError> {
        let store = self.backend.location();
        let rows = self.backend.rows(session, self.max_entry_bytes).await?;
        let scan = scan_rows(&store, session, rows, self.max_entry_bytes)?;
        let mut report = Vec::new();
        if let Some((seq, why)) = &scan.torn {
            let warning = if let Some(lock) = cut {
                self.backend.delete_from(lock, session, *seq).await?;
                format!(
                    "{store}: session {session}: {why} at seq {seq}; deleted the row (an \
                     unacknowledged write)"
                )
            } else {
                format!(
                    "{store}: session {session}: {why} at seq {seq}; left in place because \
                     this store does not hold the session's lock (it is deleted when the \
                     session is next opened for writing)"
                )
            };
            tracing::warn!(target: "agentloop::store", "{warning}");
            report.push(warning);
        }
        Ok((scan, report))
    }

    /// Loads all valid entries of `session` (empty when it has none) and reports a torn last
    /// row; deletes that row when this store holds the session's lock.
    pub(crate) async fn load_report(
        &self,
        session: &str,
    ) -> Result<(Vec<Entry>, Vec<String>), StoreError> {
        validate_session_id(session)?;
        if !self.holds_lock(session).await {
            let (scan, report) = self.judged(session, None).await?;
            return Ok((scan.entries, report));
        }
        let writer = self.writer(session).await?;
        let mut writer = writer.lock().await;
        let (scan, report) = self.judged(session, Some(&*writer.lock.clone())).await?;
        writer.next_seq = Some(scan.entries.len() as i64 + 1);
        Ok((scan.entries, report))
    }

    /// Appends `entry` durably (per the durability mode). Returns `false` when an entry with
    /// the same idempotency key is stored (nothing is written).
    pub(crate) async fn append_entry(
        &self,
        session: &str,
        entry: &Entry,
    ) -> Result<bool, StoreError> {
        validate_session_id(session)?;
        let writer = self.writer(session).await?;
        let mut writer = writer.lock().await;
        let seq = match writer.next_seq {
            Some(seq) => seq,
            None => {
                let (scan, _) = self.judged(session, Some(&*writer.lock.clone())).await?;
                scan.entries.len() as i64 + 1
            }
        };
        writer.next_seq = Some(seq);
        let mut record = encode_bounded(seq as u64, entry, self.max_entry_bytes, session)?;
        record.pop(); // the file store's newline
        let key = entry.idempotency_key().map(|k| key_text(&k));
        let durable = match self.durability {
            Durability::Sync => true,
            Durability::Batched { every } => writer.unsynced + 1 >= every.max(1),
        };
        let inserted = match self
            .backend
            .insert(&writer.lock, session, seq, key.as_deref(), &record, durable)
            .await
        {
            Ok(inserted) => inserted,
            Err(e) => {
                // Judge the rows again on the next use (the insert may have committed).
                writer.next_seq = None;
                return Err(e);
            }
        };
        if !inserted {
            tracing::debug!(target: "agentloop::store", ?key, "duplicate append ignored");
            return Ok(false);
        }
        writer.next_seq = Some(seq + 1);
        writer.unsynced = if durable { 0 } else { writer.unsynced + 1 };
        Ok(true)
    }

    /// Makes batched appends of `session` durable and releases the store's share of the
    /// session's lock (the lock itself goes once no [`SessionLock`] for it is alive).
    pub(crate) async fn close(&self, session: &str) -> Result<(), StoreError> {
        validate_session_id(session)?;
        let writer = self
            .slots
            .lock()
            .await
            .get_mut(session)
            .and_then(|s| s.writer.take());
        if let Some(writer) = writer {
            if writer.lock().await.unsynced > 0 {
                self.backend.flush().await?;
            }
        }
        Ok(())
    }

    /// Every session with at least one row, ordered by id.
    #[cfg_attr(not(feature = "file"), allow(dead_code))] // listing is `AnyStore::list`
    pub(crate) async fn sessions(&self) -> Result<Vec<SqlSessionInfo>, StoreError> {
        self.backend.sessions().await
    }
}

#[async_trait]
impl<B: SqlBackend> SessionStore for SqlStore<B> {
    async fn load(&self, session: &str) -> Result<Vec<Entry>, StoreError> {
        Ok(self.load_report(session).await?.0)
    }

    async fn append(&self, session: &str, entry: &Entry) -> Result<(), StoreError> {
        self.append_entry(session, entry).await.map(|_| ())
    }

    async fn load_with_report(
        &self,
        session: &str,
    ) -> Result<(Vec<Entry>, Vec<String>), StoreError> {
        self.load_report(session).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: i64, record: &[u8]) -> SqlRow {
        SqlRow {
            seq,
            bytes: record.len() as u64,
            record: Some(record.to_vec()),
        }
    }

    fn line(seq: u64) -> Vec<u8> {
        let entry = Entry::RunEnd {
            run_id: format!("r{seq}"),
            outcome: agentloop_core::agent_event::Outcome::Completed,
            reason: String::new(),
        };
        let mut line = super::super::records::encode_record(seq, &entry).unwrap_or_default();
        line.pop();
        line
    }

    #[test]
    fn rows_are_judged_like_lines() {
        let ok = scan_rows("db", "s", vec![row(1, &line(1)), row(2, &line(2))], 1 << 20).unwrap();
        assert_eq!((ok.entries.len(), ok.torn), (2, None));
        let torn = scan_rows(
            "db",
            "s",
            vec![row(1, &line(1)), row(2, b"{\"v\":1,")],
            1 << 20,
        )
        .unwrap();
        assert_eq!(torn.entries.len(), 1);
        assert_eq!(torn.torn.map(|t| t.0), Some(2));
        assert!(matches!(
            scan_rows(
                "db",
                "s",
                vec![row(1, b"{\"v\":1,"), row(2, &line(2))],
                1 << 20
            ),
            Err(StoreError::CorruptRow { seq: 1, .. })
        ));
        assert!(matches!(
            scan_rows("db", "s", vec![row(1, &line(1)), row(3, &line(3))], 1 << 20),
            Err(StoreError::CorruptRow { seq: 3, .. })
        ));
        let long = SqlRow {
            seq: 1,
            bytes: 99,
            record: None,
        };
        assert!(matches!(
            scan_rows("db", "s", vec![long], 10),
            Err(StoreError::RowTooLong {
                seq: 1,
                bytes: 99,
                ..
            })
        ));
    }

    #[test]
    fn keys_are_distinct_per_kind() {
        let turn = key_text(&EntryKey::Turn {
            run_id: "r".into(),
            model_call_index: 1,
        });
        let started = key_text(&EntryKey::ToolStarted {
            tool_call_id: "c".into(),
        });
        let result = key_text(&EntryKey::ToolResult {
            tool_call_id: "c".into(),
        });
        assert_eq!(
            [turn.as_str(), started.as_str(), result.as_str()],
            ["turn:1:r", "started:c", "result:c"]
        );
    }
}
