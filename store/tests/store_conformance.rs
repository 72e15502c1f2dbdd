//! One conformance suite for every session store: the same test bodies run against the file
//! store, the SQLite store (feature `sqlite`) and the PostgreSQL store (feature
//! `postgres`, on a server this test starts; see `postgres_support`). Each store is
//! opened by URL through [`AnyStore`], as the CLI opens it; only the tampering (a torn write,
//! a corrupt entry) reaches under the store, each in its own medium.
//!
//! Run all three: `cargo test -p agentloop-store --features sqlite,postgres --test
//! store_conformance`. Append rates: add `-- --ignored --nocapture append_rate`.
#![cfg(feature = "file")]

mod entries;
mod postgres_support;

use std::path::PathBuf;

use agentloop_core::session_log::{check, repair};
use agentloop_core::ToolStatus;
use agentloop_store::{AnyStore, Durability, Entry, SessionStore, StoreError};
use entries::{assistant, result, run_end, sample, started, user};

// ---------------------------------------------------------------------------------------
// Stores under test

enum Kind {
    File(PathBuf),
    #[cfg(feature = "sqlite")]
    Sqlite(PathBuf),
    #[cfg(feature = "postgres")]
    Postgres(String),
}

/// One store under test and how to tamper with it underneath.
struct Target {
    kind: Kind,
    _dir: tempfile::TempDir,
    _server: Option<postgres_support::PgServer>,
}

impl Target {
    fn file() -> Target {
        let dir = tempfile::tempdir().expect("temp dir");
        Target {
            kind: Kind::File(dir.path().join("sessions")),
            _dir: dir,
            _server: None,
        }
    }

    #[cfg(feature = "sqlite")]
    fn sqlite() -> Target {
        let dir = tempfile::tempdir().expect("temp dir");
        Target {
            kind: Kind::Sqlite(dir.path().join("sessions.db")),
            _dir: dir,
            _server: None,
        }
    }

    #[cfg(feature = "postgres")]
    fn postgres() -> Option<Target> {
        let server = postgres_support::PgServer::start()?;
        let url = server.database("conformance");
        Some(Target {
            kind: Kind::Postgres(url),
            _dir: tempfile::tempdir().expect("temp dir"),
            _server: Some(server),
        })
    }

    fn url(&self) -> String {
        match &self.kind {
            Kind::File(dir) => dir.display().to_string(),
            #[cfg(feature = "sqlite")]
            Kind::Sqlite(path) => format!("sqlite:{}", path.display()),
            #[cfg(feature = "postgres")]
            Kind::Postgres(url) => url.clone(),
        }
    }

    /// A new handle on the store (as another process would open it).
    async fn open(&self) -> AnyStore {
        self.open_with(Durability::Sync).await
    }

    async fn open_with(&self, durability: Durability) -> AnyStore {
        AnyStore::open(&self.url(), durability)
            .await
            .expect("open store")
    }

    /// Stores a torn record as `seq` (after the session's last complete one): a half line
    /// without newline in a file, a row with truncated JSON in a database.
    async fn insert_torn(&self, session: &str, seq: i64) {
        let half = format!(r#"{{"v":1,"seq":{seq},"entry":"us"#);
        match &self.kind {
            Kind::File(dir) => {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(dir.join(format!("{session}.jsonl")))
                    .expect("session file");
                f.write_all(half.as_bytes()).expect("write");
            }
            #[cfg(feature = "sqlite")]
            Kind::Sqlite(path) => {
                let conn = rusqlite::Connection::open(path).expect("sqlite");
                conn.execute(
                    "INSERT INTO entries (session, seq, record) VALUES (?1, ?2, ?3)",
                    rusqlite::params![session, seq, half],
                )
                .expect("insert torn row");
            }
            #[cfg(feature = "postgres")]
            Kind::Postgres(url) => {
                pg_execute(
                    url,
                    "INSERT INTO agentloop_entries (session, seq, record) VALUES ($1, $2, $3)",
                    &[&session, &seq, &half],
                )
                .await
            }
        }
    }

    /// Replaces the record `seq` with text that is not JSON.
    async fn corrupt(&self, session: &str, seq: i64) {
        let bad = "{not json";
        match &self.kind {
            Kind::File(dir) => {
                let path = dir.join(format!("{session}.jsonl"));
                let text = std::fs::read_to_string(&path).expect("read");
                let lines: Vec<&str> = text
                    .lines()
                    .enumerate()
                    .map(|(i, l)| if i as i64 + 1 == seq { bad } else { l })
                    .collect();
                std::fs::write(&path, lines.join("\n") + "\n").expect("write");
            }
            #[cfg(feature = "sqlite")]
            Kind::Sqlite(path) => {
                let conn = rusqlite::Connection::open(path).expect("sqlite");
                conn.execute(
                    "UPDATE entries SET record = ?3 WHERE session = ?1 AND seq = ?2",
                    rusqlite::params![session, seq, bad],
                )
                .expect("update");
            }
            #[cfg(feature = "postgres")]
            Kind::Postgres(url) => {
                pg_execute(
                    url,
                    "UPDATE agentloop_entries SET record = $3 WHERE session = $1 AND seq = $2",
                    &[&session, &seq, &bad],
                )
                .await
            }
        }
    }
}

#[cfg(feature = "postgres")]
async fn pg_execute(url: &str, sql: &str, params: &[&(dyn tokio_postgres::types::ToSql + Sync)]) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(conn);
    client.execute(sql, params).await.expect("execute");
    drop(client);
    let _ = task.await;
}

fn is_locked(r: &Result<impl std::fmt::Debug, StoreError>) -> bool {
    matches!(r, Err(StoreError::Locked { .. }))
}

/// Locks `session`, retrying for a while: a PostgreSQL lock is released when the server sees
/// the holder's connection end, a moment after the holder dropped it.
async fn lock_soon(store: &AnyStore, session: &str) -> agentloop_store::SessionLock {
    for _ in 0..200 {
        match store.lock(session).await {
            Ok(lock) => return lock,
            Err(StoreError::Locked { .. }) => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await
            }
            Err(e) => panic!("lock: {e}"),
        }
    }
    panic!("{session} still locked after 2 s");
}

// ---------------------------------------------------------------------------------------
// The bodies

async fn append_load_and_resume_after_reopening(t: &Target) {
    let s = t.open().await;
    for e in sample() {
        s.append("al", &e).await.expect("append");
    }
    assert_eq!(s.load("al").await.expect("load"), sample());
    s.close("al").await.expect("close");
    drop(s);

    let s = t.open().await;
    let _lock = lock_soon(&s, "al").await;
    let (entries, report) = s.load_report("al").await.expect("load");
    assert_eq!(entries, sample());
    assert!(report.is_empty(), "{:?}", report);
    s.append("al", &user("r2", "again")).await.expect("append");
    assert_eq!(s.load("al").await.expect("load").len(), sample().len() + 1);
    assert!(s.exists("al").await.expect("exists"));
    assert!(!s.exists("none").await.expect("exists"));
    assert!(s.load("none").await.expect("load").is_empty());
    let listed = s.list().await.expect("list");
    assert!(
        listed
            .iter()
            .any(|i| i.id == "al" && i.entries == sample().len() + 1),
        "{listed:?}"
    );
    s.close("al").await.expect("close");
}

async fn idempotent_reappend_is_a_no_op(t: &Target) {
    let s = t.open().await;
    let first = [
        user("r1", "go"),
        assistant("r1", 1, &[("c1", "append_line")]),
        started("r1", "c1", "append_line"),
        result("r1", "c1", "append_line", ToolStatus::Completed),
    ];
    let mut other_turn = assistant("r1", 1, &[("c1", "append_line")]);
    if let Entry::Assistant { message, .. } = &mut other_turn {
        message.text = "another text for the same turn".into();
    }
    for e in &first {
        s.append("idem", e).await.expect("append");
    }
    let again = [
        other_turn,
        started("r1", "c1", "append_line"),
        result("r1", "c1", "append_line", ToolStatus::Error),
    ];
    for e in &again {
        s.append("idem", e).await.expect("re-append is Ok");
    }
    assert_eq!(s.load("idem").await.expect("load"), first.to_vec());
    s.close("idem").await.expect("close");
    drop(s);
    // Also after reopening (the keys come from the stored entries, not from memory).
    let s = t.open().await;
    let _lock = lock_soon(&s, "idem").await;
    for e in &again {
        s.append("idem", e).await.expect("re-append is Ok");
    }
    s.append("idem", &run_end("r1")).await.expect("append");
    let mut expected = first.to_vec();
    expected.push(run_end("r1"));
    assert_eq!(s.load("idem").await.expect("load"), expected);
    s.close("idem").await.expect("close");
}

async fn torn_write_is_reported_then_cut_by_the_lock_holder(t: &Target) {
    let s = t.open().await;
    s.append("torn", &user("r1", "go")).await.expect("append");
    s.append("torn", &assistant("r1", 1, &[]))
        .await
        .expect("append");
    s.close("torn").await.expect("close");
    drop(s);
    t.insert_torn("torn", 3).await;

    // A reader without the lock reports the torn entry and leaves it.
    let reader = t.open().await;
    for _ in 0..2 {
        let (entries, report) = reader.load_report("torn").await.expect("load");
        assert_eq!(entries.len(), 2);
        assert_eq!(report.len(), 1, "{:?}", report);
        assert!(report[0].contains("left in place"), "{:?}", report);
    }

    // The lock holder cuts it, and appends go on after the complete entries.
    let writer = t.open().await;
    let _lock = lock_soon(&writer, "torn").await;
    let (entries, report) = writer.load_report("torn").await.expect("load");
    assert_eq!(entries.len(), 2);
    assert_eq!(report.len(), 1, "{:?}", report);
    assert!(!report[0].contains("left in place"));
    writer.append("torn", &run_end("r1")).await.expect("append");
    let (entries, report) = reader.load_report("torn").await.expect("load");
    assert_eq!(entries.len(), 3);
    assert!(report.is_empty(), "{:?}", report);
    writer.close("torn").await.expect("close");
}

fn assert_corrupt(r: Result<impl std::fmt::Debug, StoreError>) {
    match r {
        Err(e @ (StoreError::Corrupt { .. } | StoreError::CorruptRow { .. })) => {
            assert!(e.to_string().contains("corrupt"), "{e}")
        }
        other => panic!("expected a corrupt-entry error, got {other:?}"),
    }
}

async fn corrupt_entry_is_a_typed_error_for_readers_and_writers(t: &Target) {
    let s = t.open().await;
    for e in &sample()[..4] {
        s.append("bad", e).await.expect("append");
    }
    s.close("bad").await.expect("close");
    drop(s);
    t.corrupt("bad", 2).await;
    let reader = t.open().await;
    assert_corrupt(reader.load_report("bad").await);
    let writer = t.open().await;
    let _lock = lock_soon(&writer, "bad").await;
    assert_corrupt(writer.load_report("bad").await);
    assert_corrupt(writer.append("bad", &run_end("r1")).await);
    // Nothing was cut or written: the corrupt entry is still reported.
    assert_corrupt(reader.load_report("bad").await);
}

async fn pairing_check_and_repair(t: &Target) {
    let s = t.open().await;
    let broken = [
        user("r1", "go"),
        assistant("r1", 1, &[("c1", "t")]),
        result("r1", "ghost", "t", ToolStatus::Completed),
        run_end("r1"),
    ];
    for e in &broken {
        s.append("pair", e).await.expect("append");
    }
    s.close("pair").await.expect("close");
    drop(s);
    let s = t.open().await;
    let _lock = lock_soon(&s, "pair").await;
    let entries = s.load("pair").await.expect("load");
    assert!(!check(&entries).is_empty(), "violations expected");
    for e in repair(&entries).into_entries("r2") {
        s.append("pair", &e).await.expect("append repair");
    }
    let entries = s.load("pair").await.expect("load");
    assert!(check(&entries).is_empty(), "{:?}", check(&entries));
    s.close("pair").await.expect("close");
}

async fn lock_contention(t: &Target) {
    let a = t.open().await;
    let b = t.open().await;
    let la = a.lock("lk").await.expect("first lock");
    assert!(is_locked(&a.lock("lk").await), "same handle");
    assert!(is_locked(&b.lock("lk").await), "second handle");
    assert!(is_locked(&b.append("lk", &user("r1", "b")).await));
    a.append("lk", &user("r1", "a"))
        .await
        .expect("holder appends");
    // Other sessions are not affected.
    b.append("other", &user("r1", "b"))
        .await
        .expect("other session");
    b.close("other").await.expect("close");
    drop(la);
    a.close("lk").await.expect("close");
    let _lb = lock_soon(&b, "lk").await;
    b.append("lk", &user("r2", "b")).await.expect("append");
    assert_eq!(b.load("lk").await.expect("load").len(), 2);
    assert!(is_locked(&a.lock("lk").await), "now held by b");
    b.close("lk").await.expect("close");

    // Within one store, a lock and an append racing for a session share one lock.
    let c = t.open().await;
    let entry = user("r1", "c");
    let (lock, appended) = tokio::join!(c.lock("race"), c.append("race", &entry));
    let _lock = lock.expect("lock");
    appended.expect("append");
    assert!(is_locked(&a.lock("race").await));
    c.close("race").await.expect("close");
}

async fn oversized_entries_are_refused_on_write_and_read(t: &Target) {
    let small = t.open().await.with_max_entry_bytes(300);
    small
        .append("big", &user("r1", "small"))
        .await
        .expect("append");
    let big = user("r1", &"x".repeat(1000));
    match small.append("big", &big).await {
        Err(StoreError::EntryTooLarge { limit: 300, .. }) => {}
        other => panic!("expected EntryTooLarge, got {other:?}"),
    }
    assert_eq!(small.load("big").await.expect("load").len(), 1);
    small.close("big").await.expect("close");
    drop(small);
    let default = t.open().await;
    let _lock = lock_soon(&default, "big").await;
    default.append("big", &big).await.expect("default limit");
    default.close("big").await.expect("close");
    let reader = t.open().await.with_max_entry_bytes(300);
    match reader.load("big").await {
        Err(StoreError::LineTooLong { line: 2, .. } | StoreError::RowTooLong { seq: 2, .. }) => {}
        other => panic!("expected an over-long entry error, got {other:?}"),
    }
}

async fn batched_durability_keeps_every_acknowledged_entry(t: &Target) {
    let s = t.open_with(Durability::Batched { every: 3 }).await;
    for i in 0..7 {
        s.append("batch", &user(&format!("r{i}"), "x"))
            .await
            .expect("append");
    }
    s.close("batch").await.expect("close");
    drop(s);
    let s = t.open().await;
    assert_eq!(s.load("batch").await.expect("load").len(), 7);
}

async fn invalid_session_ids_are_typed_errors(t: &Target) {
    let s = t.open().await;
    for bad in ["", "a/b", "..", ".hidden"] {
        assert!(
            matches!(
                s.append(bad, &user("r1", "x")).await,
                Err(StoreError::InvalidSession { .. })
            ),
            "{bad:?}"
        );
    }
}

async fn sessions_are_written_concurrently(t: &Target) {
    let mut writers = Vec::new();
    for w in 0..4 {
        let store = t.open().await;
        writers.push(tokio::spawn(async move {
            let session = format!("conc{w}");
            for i in 0..20 {
                store
                    .append(&session, &user(&format!("r{i}"), "x"))
                    .await
                    .expect("append");
            }
            store.close(&session).await.expect("close");
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    let s = t.open().await;
    for w in 0..4 {
        assert_eq!(s.load(&format!("conc{w}")).await.expect("load").len(), 20);
    }
}

async fn conformance(t: &Target) {
    macro_rules! body {
        ($f:ident) => {
            eprintln!("conformance {:?}: {}", t.url(), stringify!($f));
            $f(t).await;
        };
    }
    body!(append_load_and_resume_after_reopening);
    body!(idempotent_reappend_is_a_no_op);
    body!(torn_write_is_reported_then_cut_by_the_lock_holder);
    body!(corrupt_entry_is_a_typed_error_for_readers_and_writers);
    body!(pairing_check_and_repair);
    body!(lock_contention);
    body!(oversized_entries_are_refused_on_write_and_read);
    body!(batched_durability_keeps_every_acknowledged_entry);
    body!(invalid_session_ids_are_typed_errors);
    body!(sessions_are_written_concurrently);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_store_conforms() {
    conformance(&Target::file()).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_conforms() {
    conformance(&Target::sqlite()).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_conforms() {
    let Some(t) = Target::postgres() else { return };
    conformance(&t).await;
}

/// PostgreSQL only: when the server ends the holder's lock connection (a worker's host
/// vanished, a network cut), the session is free for another worker, and the old holder's
/// appends fail instead of writing beside the new one.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_dead_lock_connection_frees_the_session_and_fences_its_holder() {
    let Some(t) = Target::postgres() else { return };
    let Kind::Postgres(url) = &t.kind else {
        unreachable!()
    };
    let a = t.open().await;
    let b = t.open().await;
    let _la = a.lock("dead").await.expect("lock");
    a.append("dead", &user("r1", "a")).await.expect("append");
    assert!(is_locked(&b.lock("dead").await));
    pg_execute(
        url,
        "SELECT pg_terminate_backend(pid) FROM pg_locks \
         WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()",
        &[],
    )
    .await;
    let _lb = lock_soon(&b, "dead").await;
    b.append("dead", &user("r2", "b")).await.expect("append");
    assert!(
        a.append("dead", &user("r3", "a")).await.is_err(),
        "the old holder wrote without its lock"
    );
    let entries = b.load("dead").await.expect("load");
    assert_eq!(entries, vec![user("r1", "a"), user("r2", "b")]);
}

// ---------------------------------------------------------------------------------------
// Figures (not run by default)

#[allow(clippy::disallowed_methods)] // a benchmark reads the wall clock
async fn append_rate_of(t: &Target, durability: Durability, n: u32) -> f64 {
    let s = t.open_with(durability).await;
    let session = format!("rate-{}", durability.to_string().replace(':', "-"));
    let _lock = s.lock(&session).await.expect("lock");
    let start = std::time::Instant::now();
    for i in 0..n {
        s.append(&session, &assistant("r1", i + 1, &[]))
            .await
            .expect("append");
    }
    s.close(&session).await.expect("close");
    f64::from(n) / start.elapsed().as_secs_f64()
}

/// Appends per second of each store, `sync` and `batched:64`:
/// `cargo test --release -p agentloop-store --features sqlite,postgres --test
/// store_conformance -- --ignored --nocapture append_rate`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn append_rate() {
    #[allow(unused_mut)] // without the SQL features only the file store is measured
    let mut targets = vec![("file", Target::file())];
    #[cfg(feature = "sqlite")]
    targets.push(("sqlite", Target::sqlite()));
    #[cfg(feature = "postgres")]
    if let Some(t) = Target::postgres() {
        targets.push(("postgres", t));
    }
    for (name, t) in &targets {
        for (durability, n) in [
            (Durability::Sync, 500),
            (Durability::Batched { every: 64 }, 5000),
        ] {
            let rate = append_rate_of(t, durability, n).await;
            println!(
                "append_rate {name:<8} {:<10} {n:>5} appends: {rate:>9.0} appends/s",
                durability.to_string()
            );
        }
    }
}
