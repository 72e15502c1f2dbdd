//! The embedded session store: one append-only JSON Lines file per session, with an
//! advisory lock per session.
//!
//! # Layout
//!
//! ```text
//! <dir>/<session>.jsonl   one record per line: {"v":1,"seq":N,"entry":"assistant",...}
//! <dir>/<session>.lock    advisory lock (flock on Unix); never deleted
//! <dir>/<session>.jsonl.new  transient: a new session's first record before its rename
//! ```
//!
//! Session and lock files must be regular files: a symbolic link, FIFO, directory or device
//! in their place is refused with [`StoreError::NotRegularFile`] — never followed (a link
//! could lead out of the store, and a writer cuts torn tails), never waited on (see
//! [`crate::regular_file`]).
//!
//! The default directory is `$AGENTLOOP_STORE` when set (and non-empty), otherwise
//! `./.agentloop/sessions` relative to the current directory ([`FileStore::default_dir`]).
//!
//! # Why JSON Lines and not a length-prefixed log
//!
//! A session file is read by people as often as by the loader: `grep tool_call_id`,
//! `tail -f`, `jq` all work on JSON Lines, and a length-prefixed binary log needs a tool to
//! read at all. JSON Lines also detects a torn write without a length or checksum:
//! serde_json never writes a raw newline inside a record, so **a record is committed
//! exactly when its terminating `\n` is in the file**. A crash mid-write leaves a last line
//! without `\n` (or, after a file-system-level crash, an unparsable last line), which the
//! loader reports and cuts off. What JSON Lines does not detect is a bit flip inside a
//! complete line that still parses; the `seq` field catches lost or reordered lines, and
//! anything that no longer parses is [`StoreError::Corrupt`] with its byte offset.
//!
//! # Records
//!
//! Each line is `{"v":1,"seq":N, ...}` followed by the [`Entry`] fields (tagged by
//! `"entry"`). `seq` starts at 1 and increases by one per line; a gap or repeat in the middle
//! of a file is corruption. A record with another `v` is rejected with
//! [`StoreError::UnsupportedVersion`] (never skipped).
//!
//! A record line (without its newline) is at most [`FileStore::max_entry_bytes`] long
//! ([`DEFAULT_MAX_ENTRY_BYTES`], 16 MiB, by default): `append` refuses a larger entry with
//! [`StoreError::EntryTooLarge`] before writing anything, and a load stops at a longer line
//! with [`StoreError::LineTooLong`] (naming the line) after reading at most the limit of it.
//!
//! # Creation
//!
//! Locking or loading a session does not create its file; its first append does, by writing
//! and syncing the first record to `<session>.jsonl.new` and renaming that into place. So a
//! session file always holds at least one complete record: a process killed before its
//! first write leaves no empty session behind.
//!
//! # Durability
//!
//! [`Durability::Sync`] (default) calls `fdatasync` before `append` returns: an
//! acknowledged entry survives a process crash and a power loss. [`Durability::Batched`]
//! writes each record to the OS at once (so it survives the *process* being killed) but
//! calls `fdatasync` only every `every` appends, on [`FileStore::sync`], on
//! [`FileStore::close`] and when the store is dropped: an OS crash or power loss can lose
//! up to `every - 1` acknowledged entries (the unsynced tail). Lost entries are always a
//! suffix, so the file stays a valid prefix of the session.
//!
//! A failed append (write or fsync error) cuts the file back to its length before the
//! append when it can, and always closes the session's writer: the next append re-opens the
//! file, which cuts any torn tail. The run itself must end `Failed` (R-IDEM-4).
//!
//! # Locking
//!
//! Writing a session requires its lock. [`FileStore::lock`] takes it explicitly (the CLI
//! does, so a second `agentloop run --session X` fails with "locked"); otherwise the first
//! append takes it. The lock is an OS advisory lock on `<session>.lock` held by an open file
//! descriptor: it is released when the last holder in this store lets go (the
//! [`SessionLock`] is dropped *and* the session's writer is closed by [`FileStore::close`]
//! or by dropping the store), and by the OS when the process dies.
//!
//! # Loading
//!
//! Loading reads and validates the whole file, line by line (one line in memory at a time,
//! besides the entries). A torn last entry is reported among
//! [`SessionStore::load_with_report`]'s warnings; it is cut off the file only when this store
//! holds the session's lock (a reader without the lock, e.g. `sessions show` beside a running
//! session, must not cut a line another process is still writing).
//!
//! # Blocking
//!
//! The [`SessionStore`] methods do their file IO inline (they contain no `.await`). That is
//! deliberate: an append future cannot be cancelled half-way, so a dropped run never leaves
//! an entry written that the caller believes failed (R-IDEM-4). The cost is that an fsync
//! (about a millisecond on an SSD) blocks the calling worker thread.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use async_trait::async_trait;

use super::lock::{io_err, open_err, LockFile};
use super::options::{validate_session_id, Durability};
use super::records::{encode_bounded, scan, Scan, Torn, DEFAULT_MAX_ENTRY_BYTES};
use super::{Entry, EntryKey, SessionLock, SessionStore, StoreError};
use crate::regular_file::{open_regular, OpenError};

/// Opens an existing session or lock file with `options`, refusing anything but a regular
/// file (links are not followed, FIFOs not waited on); `Ok(None)` when it does not exist.
fn open_existing(path: &Path, options: &mut OpenOptions) -> Result<Option<File>, StoreError> {
    match open_regular(path, options) {
        Ok(file) => Ok(Some(file)),
        Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(open_err(path, e)),
    }
}

/// Scans the session file at `path` (an empty scan when it does not exist).
fn read_scan(path: &Path, limit: u64) -> Result<Scan, StoreError> {
    match open_existing(path, OpenOptions::new().read(true))? {
        Some(file) => scan(path, BufReader::new(file), limit),
        None => Ok(Scan::default()),
    }
}

fn poisoned<T>(_: T) -> StoreError {
    StoreError::Other("file store mutex poisoned".into())
}

/// The open, locked append side of one session.
#[derive(Debug)]
struct Writer {
    /// The session file; `None` until the session's first entry creates it.
    file: Option<File>,
    path: PathBuf,
    session: String,
    /// File length after the last complete record.
    len: u64,
    next_seq: u64,
    keys: HashSet<EntryKey>,
    unsynced: u32,
    /// Longest record line accepted, without its newline.
    limit: u64,
    _lock: Arc<LockFile>,
}

impl Writer {
    /// Opens the session file for appending under `lock`: reads and validates it, cuts a
    /// torn tail, and indexes the idempotency keys. A missing file is not created here: the
    /// first append creates it (see [`Writer::create`]).
    fn open(
        path: PathBuf,
        session: &str,
        lock: Arc<LockFile>,
        limit: u64,
    ) -> Result<(Self, Vec<Entry>, Vec<String>), StoreError> {
        let file = open_existing(&path, OpenOptions::new().read(true).append(true))?;
        let mut writer = Writer {
            file: None,
            path,
            session: session.to_string(),
            len: 0,
            next_seq: 1,
            keys: HashSet::new(),
            unsynced: 0,
            limit,
            _lock: lock,
        };
        let Some(file) = file else {
            return Ok((writer, Vec::new(), Vec::new()));
        };
        let path = &writer.path;
        let scan = scan(path, BufReader::new(&file), limit)?;
        let mut report = Vec::new();
        if let Some(torn) = scan.torn {
            file.set_len(torn.offset).map_err(io_err(path))?;
            file.sync_data().map_err(io_err(path))?;
            let warning = format!(
                "{}: {} at byte offset {}; cut {} bytes (an unacknowledged write)",
                path.display(),
                torn.why,
                torn.offset,
                torn.len
            );
            tracing::warn!(target: "agentloop::store", "{warning}");
            report.push(warning);
        }
        writer.keys = scan
            .entries
            .iter()
            .filter_map(Entry::idempotency_key)
            .collect();
        writer.len = scan.complete_len;
        writer.next_seq = scan.entries.len() as u64 + 1;
        writer.file = Some(file);
        Ok((writer, scan.entries, report))
    }

    /// Appends `entry` unless its key is stored; returns whether it was written. An entry
    /// over the limit is refused before anything is written.
    fn append(&mut self, entry: &Entry, durability: Durability) -> Result<bool, StoreError> {
        let key = entry.idempotency_key();
        if let Some(key) = &key {
            if self.keys.contains(key) {
                tracing::debug!(target: "agentloop::store", ?key, "duplicate append ignored");
                return Ok(false);
            }
        }
        let line = encode_bounded(self.next_seq, entry, self.limit, &self.session)?;
        match &mut self.file {
            Some(file) => {
                let written = file.write_all(&line).and_then(|()| match durability {
                    Durability::Sync => file.sync_data(),
                    Durability::Batched { every } => {
                        self.unsynced += 1;
                        if self.unsynced >= every.max(1) {
                            self.unsynced = 0;
                            file.sync_data()
                        } else {
                            Ok(())
                        }
                    }
                });
                if let Err(e) = written {
                    // Best effort: take back a partial line so the file ends on a record
                    // boundary.
                    let _ = file.set_len(self.len);
                    return Err(io_err(&self.path)(e));
                }
            }
            None => self.file = Some(self.create(&line)?),
        }
        self.len += line.len() as u64;
        self.next_seq += 1;
        if let Some(key) = key {
            self.keys.insert(key);
        }
        Ok(true)
    }

    /// Creates the session file holding its first record: the record is written and synced
    /// to `<session>.jsonl.new`, which is then renamed into place. So the session file never
    /// exists without a complete record — a process killed before its first write leaves
    /// no empty session behind (at most a `.new` file, which the next creation replaces).
    fn create(&self, line: &[u8]) -> Result<File, StoreError> {
        let tmp = self.path.with_extension("jsonl.new");
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&tmp)(e)),
        }
        let mut file = open_regular(
            &tmp,
            OpenOptions::new().read(true).append(true).create_new(true),
        )
        .map_err(|e| open_err(&tmp, e))?;
        let created = file
            .write_all(line)
            .and_then(|()| file.sync_data())
            .and_then(|()| std::fs::rename(&tmp, &self.path));
        if let Err(e) = created {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err(&self.path)(e));
        }
        sync_parent_dir(&self.path)?;
        Ok(file)
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        if let (Some(file), true) = (&self.file, self.unsynced > 0) {
            file.sync_data().map_err(io_err(&self.path))?;
            self.unsynced = 0;
        }
        Ok(())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Err(e) = self.sync() {
            tracing::error!(target: "agentloop::store", "fsync on close failed: {e}");
        }
    }
}

#[cfg(unix)]
fn sync_parent_dir(path: &Path) -> Result<(), StoreError> {
    // A new file's directory entry is durable only once the directory is synced.
    match path.parent() {
        Some(dir) => File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(dir)),
        None => Ok(()),
    }
}

#[cfg(not(unix))]
fn sync_parent_dir(_path: &Path) -> Result<(), StoreError> {
    Ok(())
}

#[derive(Debug, Default)]
struct Slot {
    /// The OS lock, while anyone in this store holds it.
    lock: Weak<LockFile>,
    /// Alive while a [`SessionLock`] handed out by this store is alive.
    holder: Weak<()>,
    writer: Option<Arc<Mutex<Writer>>>,
}

/// The embedded store: one JSON Lines file per session under a directory (see the module
/// docs for format, durability and locking).
#[derive(Debug)]
pub struct FileStore {
    dir: PathBuf,
    durability: Durability,
    max_entry_bytes: u64,
    slots: Mutex<HashMap<String, Slot>>,
}

impl FileStore {
    /// Opens (creating it if needed) a store in `dir`, with [`Durability::Sync`].
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        // The built-in file tools may not read or write the sessions (whatever their root).
        crate::protected::protect(&dir);
        Ok(FileStore {
            dir,
            durability: Durability::default(),
            max_entry_bytes: DEFAULT_MAX_ENTRY_BYTES,
            slots: Mutex::new(HashMap::new()),
        })
    }

    /// Opens the store in [`FileStore::default_dir`].
    pub fn open_default() -> Result<Self, StoreError> {
        Self::open(Self::default_dir())
    }

    /// `$AGENTLOOP_STORE` if set and non-empty, else `./.agentloop/sessions`.
    pub fn default_dir() -> PathBuf {
        super::default_dir()
    }

    /// Sets the durability mode (for sessions opened for writing from now on).
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The durability mode.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Sets the entry size limit: the longest record line (without its newline) this store
    /// writes or reads, [`DEFAULT_MAX_ENTRY_BYTES`] (16 MiB) by default. A larger entry is
    /// refused by `append` ([`StoreError::EntryTooLarge`], nothing written); a longer stored
    /// line fails the load ([`StoreError::LineTooLong`], naming it) after reading at most
    /// `limit` bytes of it. Applies to sessions opened from now on.
    pub fn with_max_entry_bytes(mut self, limit: u64) -> Self {
        self.max_entry_bytes = limit;
        self
    }

    /// The entry size limit (see [`with_max_entry_bytes`](Self::with_max_entry_bytes)).
    pub fn max_entry_bytes(&self) -> u64 {
        self.max_entry_bytes
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The session's file, `<dir>/<session>.jsonl`.
    pub fn session_path(&self, session: &str) -> Result<PathBuf, StoreError> {
        validate_session_id(session)?;
        Ok(self.dir.join(format!("{session}.jsonl")))
    }

    fn lock_path(&self, session: &str) -> PathBuf {
        self.dir.join(format!("{session}.lock"))
    }

    fn slots(&self) -> Result<MutexGuard<'_, HashMap<String, Slot>>, StoreError> {
        self.slots.lock().map_err(poisoned)
    }

    /// Takes the session's lock: fails with [`StoreError::Locked`] when another process (or
    /// another store, or a live [`SessionLock`] of this store) holds it.
    pub fn lock(&self, session: &str) -> Result<SessionLock, StoreError> {
        validate_session_id(session)?;
        let path = self.lock_path(session);
        let mut slots = self.slots()?;
        let slot = slots.entry(session.to_string()).or_default();
        if slot.holder.upgrade().is_some() {
            return Err(StoreError::Locked {
                session: session.to_string(),
                path: path.display().to_string(),
            });
        }
        let file = match slot.lock.upgrade() {
            Some(file) => file,
            None => {
                let file = Arc::new(LockFile::acquire(session, &path)?);
                slot.lock = Arc::downgrade(&file);
                file
            }
        };
        let holder = Arc::new(());
        slot.holder = Arc::downgrade(&holder);
        Ok(SessionLock::new(
            session,
            path.display().to_string(),
            file,
            holder,
        ))
    }

    /// The session's writer, opening it (and taking the lock if this store does not hold
    /// it) when needed. Returns the load result when it opened the writer now.
    #[allow(clippy::type_complexity)]
    fn writer(
        &self,
        session: &str,
    ) -> Result<(Arc<Mutex<Writer>>, Option<(Vec<Entry>, Vec<String>)>), StoreError> {
        let path = self.session_path(session)?;
        let mut slots = self.slots()?;
        let slot = slots.entry(session.to_string()).or_default();
        if let Some(writer) = &slot.writer {
            return Ok((writer.clone(), None));
        }
        let lock = match slot.lock.upgrade() {
            Some(lock) => lock,
            None => {
                let lock = Arc::new(LockFile::acquire(session, &self.lock_path(session))?);
                slot.lock = Arc::downgrade(&lock);
                lock
            }
        };
        let (writer, entries, report) = Writer::open(path, session, lock, self.max_entry_bytes)?;
        let writer = Arc::new(Mutex::new(writer));
        slot.writer = Some(writer.clone());
        Ok((writer, Some((entries, report))))
    }

    fn holds_lock(&self, session: &str) -> Result<bool, StoreError> {
        Ok(self
            .slots()?
            .get(session)
            .is_some_and(|slot| slot.lock.upgrade().is_some()))
    }

    /// Loads all complete entries of `session` (empty when it does not exist) and reports a
    /// torn last entry; cuts that entry off when this store holds the session's lock.
    pub fn load_blocking(&self, session: &str) -> Result<(Vec<Entry>, Vec<String>), StoreError> {
        let path = self.session_path(session)?;
        if self.holds_lock(session)? {
            let (writer, opened) = self.writer(session)?;
            if let Some(loaded) = opened {
                return Ok(loaded);
            }
            // Read under the writer's mutex so no append of ours is half-visible.
            let _guard = writer.lock().map_err(poisoned)?;
            let scan = read_scan(&path, self.max_entry_bytes)?;
            return Ok((scan.entries, report_unlocked(&path, scan.torn)));
        }
        let scan = read_scan(&path, self.max_entry_bytes)?;
        Ok((scan.entries, report_unlocked(&path, scan.torn)))
    }

    /// Appends `entry` durably (per the durability mode). Returns `false` when an entry
    /// with the same idempotency key is already stored (nothing is written).
    pub fn append_blocking(&self, session: &str, entry: &Entry) -> Result<bool, StoreError> {
        let (writer, _) = self.writer(session)?;
        let result = writer
            .lock()
            .map_err(poisoned)?
            .append(entry, self.durability);
        if result.is_err() {
            // Re-open (and re-validate, cutting any torn tail) on the next use.
            let mut slots = self.slots()?;
            if let Some(slot) = slots.get_mut(session) {
                if slot
                    .writer
                    .as_ref()
                    .is_some_and(|w| Arc::ptr_eq(w, &writer))
                {
                    slot.writer = None;
                }
            }
        }
        result
    }

    /// Forces batched appends of `session` to disk.
    pub fn sync(&self, session: &str) -> Result<(), StoreError> {
        validate_session_id(session)?;
        let writer = self.slots()?.get(session).and_then(|s| s.writer.clone());
        match writer {
            Some(writer) => writer.lock().map_err(poisoned)?.sync(),
            None => Ok(()),
        }
    }

    /// Syncs and closes the session's writer, releasing the store's share of the lock (the
    /// lock itself is released once no [`SessionLock`] for it is alive either).
    pub fn close(&self, session: &str) -> Result<(), StoreError> {
        validate_session_id(session)?;
        let writer = self.slots()?.get_mut(session).and_then(|s| s.writer.take());
        if let Some(writer) = writer {
            writer.lock().map_err(poisoned)?.sync()?;
        }
        Ok(())
    }
}

fn report_unlocked(path: &Path, torn: Option<Torn>) -> Vec<String> {
    let mut report = Vec::new();
    if let Some(torn) = torn {
        tracing::warn!(
            target: "agentloop::store",
            "{}: torn last record at byte offset {} left in place (not locked)",
            path.display(),
            torn.offset
        );
        report.push(format!(
            "{}: {} at byte offset {} ({} bytes); left in place because this store does not \
             hold the session's lock (it is cut when the session is next opened for writing)",
            path.display(),
            torn.why,
            torn.offset,
            torn.len
        ));
    }
    report
}

#[async_trait]
impl SessionStore for FileStore {
    async fn load(&self, session: &str) -> Result<Vec<Entry>, StoreError> {
        Ok(self.load_blocking(session)?.0)
    }

    async fn append(&self, session: &str, entry: &Entry) -> Result<(), StoreError> {
        self.append_blocking(session, entry).map(|_| ())
    }

    async fn load_with_report(
        &self,
        session: &str,
    ) -> Result<(Vec<Entry>, Vec<String>), StoreError> {
        self.load_blocking(session)
    }
}
