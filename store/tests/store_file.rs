//! The file store with real files: round trip, torn tails, corruption, versions,
//! idempotent appends, locking across handles and processes, faults, check and repair.
#![cfg(all(feature = "file", feature = "fault-injection"))]

use std::path::Path;
use std::process::Command;

use agentloop_core::session_log::{
    check, committed_turns, history, next_model_call_index, pending, repair, repair_with, Violation,
};
use agentloop_core::{Message, ToolStatus};
use agentloop_store::{
    export_jsonl, export_markdown, list_sessions, Durability, Entry, FaultPoint, FaultyStore,
    FileKind, FileStore, MemoryStore, SessionStore, StoreError, DEFAULT_MAX_ENTRY_BYTES,
};

mod entries;
use entries::*;

fn append_all(store: &FileStore, session: &str, entries: &[Entry]) {
    for e in entries {
        assert!(
            store.append_blocking(session, e).unwrap(),
            "{e:?} not written"
        );
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

// ---------------------------------------------------------------------------------------
// Round trip and format

#[tokio::test]
async fn round_trip_through_the_port() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    for e in sample() {
        store.append("s1", &e).await.unwrap();
    }
    drop(store);

    let store = FileStore::open(dir.path()).unwrap();
    assert_eq!(store.load("s1").await.unwrap(), sample());
    assert_eq!(store.load("never-written").await.unwrap(), vec![]);

    let path = dir.path().join("s1.jsonl");
    let lines = lines(&path);
    assert_eq!(lines.len(), sample().len());
    for (i, line) in lines.iter().enumerate() {
        assert!(
            line.starts_with(&format!(r#"{{"v":1,"seq":{},"entry":""#, i + 1)),
            "{line}"
        );
    }
}

#[test]
fn batched_appends_reach_the_os_at_once_and_keep_seq() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path())
        .unwrap()
        .with_durability(Durability::Batched { every: 4 });
    assert_eq!(store.durability(), Durability::Batched { every: 4 });
    let entries: Vec<Entry> = (1..=10).map(|i| user("r1", &format!("m{i}"))).collect();
    append_all(&store, "b", &entries);
    // A second reader (no lock, so read-only) sees every acknowledged entry: the unsynced
    // ones are in the OS page cache, which survives the process dying.
    let reader = FileStore::open(dir.path()).unwrap();
    assert_eq!(reader.load_blocking("b").unwrap().0, entries);
    store.sync("b").unwrap();
    store.close("b").unwrap();
}

// ---------------------------------------------------------------------------------------
// Torn tails

#[tokio::test]
async fn torn_tail_without_newline_is_reported_and_cut_under_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let entries = sample();
    {
        let store = FileStore::open(dir.path()).unwrap();
        append_all(&store, "s", &entries[..3]);
    }
    let good_len = std::fs::metadata(&path).unwrap().len();
    // Half of the next record, as a crash mid-write leaves it.
    let full = {
        let other = tempfile::tempdir().unwrap();
        let store = FileStore::open(other.path()).unwrap();
        append_all(&store, "x", &entries[..4]);
        std::fs::read(other.path().join("x.jsonl")).unwrap()
    };
    let torn = &full[good_len as usize..good_len as usize + (full.len() - good_len as usize) / 2];
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(torn);
    std::fs::write(&path, &bytes).unwrap();

    // A reader without the lock reports the torn tail but does not touch the file.
    let reader = FileStore::open(dir.path()).unwrap();
    let (loaded, report) = reader.load_blocking("s").unwrap();
    assert_eq!(loaded, entries[..3]);
    assert_eq!(report.len(), 1);
    assert!(report[0].contains("no terminating newline"), "{report:?}");
    assert!(
        report[0].contains(&format!("offset {good_len}")),
        "{report:?}"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), bytes.len() as u64);
    drop(reader);

    // The lock holder cuts it and keeps every complete entry.
    let store = FileStore::open(dir.path()).unwrap();
    let _lock = store.lock("s").unwrap();
    let (loaded, report) = store.load_with_report("s").await.unwrap();
    assert_eq!(loaded, entries[..3]);
    assert!(
        report[0].contains(&format!("cut {} bytes", torn.len())),
        "{report:?}"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), good_len);

    // Appending continues the sequence on a clean boundary.
    append_all(&store, "s", &entries[3..]);
    drop(store);
    let (loaded, report) = FileStore::open(dir.path())
        .unwrap()
        .load_blocking("s")
        .unwrap();
    assert_eq!(loaded, entries);
    assert!(report.is_empty());
}

/// A crash can cut the file at any byte: every prefix loads as the complete records before
/// the cut, with a warning exactly when the cut is inside a record.
#[test]
fn every_crash_point_loads_the_complete_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let entries = sample();
    {
        let store = FileStore::open(dir.path()).unwrap();
        append_all(&store, "full", &entries);
    }
    let full = std::fs::read(dir.path().join("full.jsonl")).unwrap();
    let boundaries: Vec<usize> = std::iter::once(0)
        .chain(
            full.iter()
                .enumerate()
                .filter(|(_, &b)| b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .collect();
    let store = FileStore::open(dir.path()).unwrap();
    let path = dir.path().join("cut.jsonl");
    for cut in 0..=full.len() {
        std::fs::write(&path, &full[..cut]).unwrap();
        let (loaded, report) = store.load_blocking("cut").unwrap();
        let complete = boundaries.iter().filter(|&&b| b <= cut).count() - 1;
        assert_eq!(loaded, entries[..complete], "cut at {cut}");
        assert_eq!(
            report.is_empty(),
            boundaries.contains(&cut),
            "cut at {cut}: {report:?}"
        );
    }
    // Under the lock the cut goes back to the last boundary.
    let cut = boundaries[3] + 10;
    std::fs::write(&path, &full[..cut]).unwrap();
    let _lock = store.lock("cut").unwrap();
    let (loaded, report) = store.load_blocking("cut").unwrap();
    assert_eq!(loaded, entries[..3]);
    assert!(report[0].contains("cut 10 bytes"), "{report:?}");
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        boundaries[3] as u64
    );
}

#[test]
fn unparsable_last_line_is_a_torn_tail_and_append_cuts_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let entries = sample();
    {
        let store = FileStore::open(dir.path()).unwrap();
        append_all(&store, "s", &entries[..2]);
    }
    let good_len = std::fs::metadata(&path).unwrap().len();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"v\":1,\"seq\":3,\"ent\n");
    std::fs::write(&path, &bytes).unwrap();

    // No explicit lock: the first append takes it, cuts the tail, then writes seq 3.
    let store = FileStore::open(dir.path()).unwrap();
    append_all(&store, "s", &entries[2..3]);
    drop(store);
    assert!(std::fs::metadata(&path).unwrap().len() > good_len);
    let (loaded, report) = FileStore::open(dir.path())
        .unwrap()
        .load_blocking("s")
        .unwrap();
    assert_eq!(loaded, entries[..3]);
    assert!(report.is_empty());
}

// ---------------------------------------------------------------------------------------
// Corruption and versions

#[test]
fn corrupt_middle_line_names_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    {
        let store = FileStore::open(dir.path()).unwrap();
        append_all(&store, "s", &sample()[..4]);
    }
    let mut l = lines(&path);
    let offset = l[0].len() + 1;
    l[1] = l[1].replacen("\"entry\"", "\"entry", 1); // breaks the JSON
    std::fs::write(&path, l.join("\n") + "\n").unwrap();
    let before = std::fs::read(&path).unwrap();

    for locked in [false, true] {
        let store = FileStore::open(dir.path()).unwrap();
        let _lock = locked.then(|| store.lock("s").unwrap());
        let err = store.load_blocking("s").unwrap_err();
        match &err {
            StoreError::Corrupt {
                path: p, offset: o, ..
            } => {
                assert_eq!(*o, offset as u64);
                assert!(p.ends_with("s.jsonl"));
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains(&format!("byte offset {offset}")), "{msg}");
        assert!(msg.contains("s.jsonl"), "{msg}");
        // Appending to a corrupt session fails too, and nothing is written or cut.
        assert!(matches!(
            store.append_blocking("s", &run_end("r1")),
            Err(StoreError::Corrupt { .. })
        ));
    }
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn valid_json_with_a_bad_entry_is_corrupt_even_on_the_last_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    std::fs::write(&path, "{\"v\":1,\"seq\":1,\"entry\":\"no_such_entry\"}\n").unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let _lock = store.lock("s").unwrap();
    assert!(matches!(
        store.load_blocking("s"),
        Err(StoreError::Corrupt { offset: 0, .. })
    ));
    assert!(
        path.metadata().unwrap().len() > 0,
        "a complete line was cut"
    );
}

#[test]
fn unknown_record_version_is_rejected_not_skipped_or_cut() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    {
        let store = FileStore::open(dir.path()).unwrap();
        append_all(&store, "s", &sample()[..2]);
    }
    let mut l = lines(&path);
    let offset = l[0].len() + 1;
    l[1] = l[1].replacen("{\"v\":1,", "{\"v\":2,", 1);
    // As the last line (a newer writer's complete record): still an error, file kept.
    std::fs::write(&path, l.join("\n") + "\n").unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let _lock = store.lock("s").unwrap();
    let err = store.load_blocking("s").unwrap_err();
    assert!(
        matches!(err, StoreError::UnsupportedVersion { offset: o, ref version, supported: 1, .. } if o == offset as u64 && version == "2"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("unsupported record version 2"),
        "{err}"
    );
    assert_eq!(lines(&path).len(), 2);

    // A record without `v` is rejected the same way.
    std::fs::write(&path, "{\"seq\":1,\"entry\":\"run_end\"}\n").unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    assert!(matches!(
        store.load_blocking("s"),
        Err(StoreError::UnsupportedVersion { .. })
    ));
}

#[test]
fn invalid_session_ids_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    for bad in ["", "../escape", "a/b", ".."] {
        assert!(matches!(
            store.append_blocking(bad, &run_end("r")),
            Err(StoreError::InvalidSession { .. })
        ));
        assert!(matches!(
            store.load_blocking(bad),
            Err(StoreError::InvalidSession { .. })
        ));
        assert!(matches!(
            store.lock(bad),
            Err(StoreError::InvalidSession { .. })
        ));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

// ---------------------------------------------------------------------------------------
// Idempotency (R-IDEM-1, R-IDEM-3)

#[tokio::test]
async fn duplicate_keys_are_no_ops_also_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let store = FileStore::open(dir.path()).unwrap();
    append_all(&store, "s", &sample()[..5]);

    // Same key, different content: still a no-op (the first commit wins).
    let mut again = assistant("r1", 1, &[("c1", "append_line")]);
    if let Entry::Assistant { message, .. } = &mut again {
        message.text = "a different text".into();
    }
    assert!(!store.append_blocking("s", &again).unwrap());
    assert!(!store
        .append_blocking("s", &started("r1", "c1", "append_line"))
        .unwrap());
    assert!(!store
        .append_blocking("s", &result("r1", "c1", "append_line", ToolStatus::Error))
        .unwrap());
    store.append("s", &again).await.unwrap(); // the port says Ok
    assert_eq!(lines(&path).len(), 5);
    // Entries without a key repeat freely.
    assert!(store.append_blocking("s", &user("r1", "again")).unwrap());
    assert!(store.append_blocking("s", &user("r1", "again")).unwrap());
    drop(store);

    // The key index is rebuilt from the file.
    let store = FileStore::open(dir.path()).unwrap();
    assert!(!store.append_blocking("s", &again).unwrap());
    assert!(!store
        .append_blocking(
            "s",
            &result("r1", "c1", "append_line", ToolStatus::Completed)
        )
        .unwrap());
    assert!(store
        .append_blocking("s", &assistant("r1", 2, &[]))
        .unwrap());
    assert_eq!(lines(&path).len(), 8);
    assert!(check(&store.load("s").await.unwrap()).is_empty());
}

#[tokio::test]
async fn memory_store_is_idempotent_too() {
    let store = MemoryStore::new();
    for e in sample() {
        store.append("s", &e).await.unwrap();
        store.append("s", &e).await.unwrap();
    }
    let loaded = store.load("s").await.unwrap();
    // Keyed entries once; unkeyed ones (metadata, user, compaction, run end) twice.
    assert_eq!(loaded.len(), sample().len() + 4);
    assert!(check(&loaded).is_empty());
}

// ---------------------------------------------------------------------------------------
// Locking

#[test]
fn second_handle_in_the_same_process_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let a = FileStore::open(dir.path()).unwrap();
    let b = FileStore::open(dir.path()).unwrap();
    let lock = a.lock("s").unwrap();
    assert_eq!(lock.session(), "s");
    assert!(lock.location().ends_with("s.lock"));

    let err = b.lock("s").unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    assert!(err.to_string().contains("locked"), "{err}");
    // Writing needs the lock too.
    assert!(matches!(
        b.append_blocking("s", &run_end("r")),
        Err(StoreError::Locked { .. })
    ));
    // Reading does not.
    assert_eq!(b.load_blocking("s").unwrap().0, vec![]);
    // A second explicit lock from the same store is refused as well.
    assert!(matches!(a.lock("s"), Err(StoreError::Locked { .. })));
    // Other sessions are independent.
    let _other = b.lock("t").unwrap();

    drop(lock);
    let lock_b = b.lock("s").unwrap();
    append_all(&b, "s", &[run_end("r")]);
    drop(lock_b);
    // b's writer still holds the session until closed.
    assert!(matches!(a.lock("s"), Err(StoreError::Locked { .. })));
    b.close("s").unwrap();
    let _lock_a = a.lock("s").unwrap();
}

#[test]
fn appending_takes_the_lock_and_close_releases_it() {
    let dir = tempfile::tempdir().unwrap();
    let a = FileStore::open(dir.path()).unwrap();
    let b = FileStore::open(dir.path()).unwrap();
    append_all(&a, "s", &sample()[..1]);
    assert!(matches!(b.lock("s"), Err(StoreError::Locked { .. })));
    // While a writes without an explicit lock, it can still hand one out.
    drop(a.lock("s").unwrap());
    a.close("s").unwrap();
    let _lock = b.lock("s").unwrap();
    drop(a); // dropping a store with nothing open is fine
}

const CHILD_DIR: &str = "AGENTLOOP_TEST_LOCK_CHILD_DIR";

/// Not a test on its own: the child half of `lock_is_exclusive_across_processes`. It tries
/// to lock session `s` in the directory the parent passes and exits 0 (acquired) or 3
/// (locked, printing the error).
#[test]
fn lock_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let store = FileStore::open(Path::new(&dir)).unwrap();
    match store.lock("s") {
        Ok(_) => std::process::exit(0),
        Err(e) => {
            println!("CHILD-ERROR: {e}");
            std::process::exit(3)
        }
    }
}

fn run_child(dir: &Path) -> (Option<i32>, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "lock_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn lock_is_exclusive_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let lock = store.lock("s").unwrap();
    let (code, stdout) = run_child(dir.path());
    assert_eq!(code, Some(3), "child was not locked out: {stdout}");
    assert!(
        stdout.contains("CHILD-ERROR: session s is locked"),
        "{stdout}"
    );

    drop(lock);
    let (code, stdout) = run_child(dir.path());
    assert_eq!(
        code,
        Some(0),
        "child could not lock after release: {stdout}"
    );
}

// ---------------------------------------------------------------------------------------
// Fault injection

#[tokio::test]
async fn faulty_store_fails_the_kth_append_only() {
    let store = FaultyStore::new(MemoryStore::new(), 3);
    let entries = sample();
    let mut failed = vec![];
    for (i, e) in entries.iter().enumerate() {
        if let Err(err) = store.append("s", e).await {
            assert!(
                err.to_string().contains("injected fault: append #3"),
                "{err}"
            );
            failed.push(i);
        }
    }
    assert_eq!(failed, vec![2]);
    assert_eq!(store.appends(), entries.len() as u64);
    let mut expected = entries.clone();
    expected.remove(2);
    assert_eq!(store.load("s").await.unwrap(), expected);
}

#[tokio::test]
async fn sticky_fault_fails_every_later_append_and_after_write_persists() {
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new(FileStore::open(dir.path()).unwrap(), 2).sticky();
    let entries = sample();
    let results: Vec<bool> = {
        let mut v = vec![];
        for e in &entries[..4] {
            v.push(store.append("s", e).await.is_ok());
        }
        v
    };
    assert_eq!(results, vec![true, false, false, false]);
    assert_eq!(store.load("s").await.unwrap(), entries[..1]);

    // AfterWrite: the entry is stored although the caller is told it failed.
    let store = FaultyStore::new(MemoryStore::new(), 1).at(FaultPoint::AfterWrite);
    assert!(store.append("s", &entries[0]).await.is_err());
    assert_eq!(store.inner().load("s").await.unwrap(), entries[..1]);
    assert_eq!(store.into_inner().load("s").await.unwrap().len(), 1);
}

// ---------------------------------------------------------------------------------------
// check / pending / repair

#[test]
fn a_complete_session_passes_check() {
    assert_eq!(check(&sample()), vec![]);
    assert_eq!(pending(&sample()), vec![]);
    assert!(repair(&sample()).is_empty());
}

#[test]
fn check_finds_every_violation_kind() {
    let entries = vec![
        user("r1", "go"),
        started("r1", "ghost", "t"),                   // 1 orphan start
        assistant("r1", 1, &[("a", "t"), ("b", "t")]), // 2: b never answered
        result("r1", "a", "t", ToolStatus::Completed),
        started("r1", "a", "t"), // 4 started after result
        started("r1", "a", "t"), // 5 duplicate start
        result("r1", "a", "t", ToolStatus::Completed), // 6 duplicate result
        result("r1", "nobody", "t", ToolStatus::Completed), // 7 orphan result
        assistant("r1", 1, &[]), // 8 duplicate turn
        assistant("r1", 2, &[("a", "t")]), // 9 reused call id
        run_end("r1"),
    ];
    let v = check(&entries);
    assert_eq!(
        v,
        vec![
            Violation::OrphanToolStarted {
                index: 1,
                tool_call_id: "ghost".into()
            },
            Violation::MissingToolResult {
                index: 2,
                run_id: "r1".into(),
                model_call_index: 1,
                tool_call_id: "b".into(),
                name: "t".into()
            },
            Violation::StartedAfterResult {
                index: 4,
                tool_call_id: "a".into()
            },
            Violation::DuplicateToolStarted {
                index: 5,
                tool_call_id: "a".into()
            },
            Violation::DuplicateToolResult {
                index: 6,
                tool_call_id: "a".into()
            },
            Violation::OrphanToolResult {
                index: 7,
                tool_call_id: "nobody".into()
            },
            Violation::DuplicateTurn {
                index: 8,
                run_id: "r1".into(),
                model_call_index: 1
            },
            Violation::DuplicateToolCallId {
                index: 9,
                tool_call_id: "a".into()
            },
        ]
    );
    for violation in &v {
        assert!(violation.to_string().starts_with("entry "), "{violation}");
    }
    assert_eq!(
        agentloop_core::session_log::duplicate_keys(&entries).len(),
        3
    );
}

#[test]
fn calls_of_the_running_step_are_pending_not_violations() {
    let mut entries = vec![
        user("r1", "go"),
        assistant("r1", 1, &[("a", "t")]),
        result("r1", "a", "t", ToolStatus::Completed),
        assistant("r1", 2, &[("b", "t"), ("c", "t"), ("d", "t")]),
        started("r1", "b", "t"),
        result("r1", "b", "t", ToolStatus::Completed),
        started("r1", "c", "t"),
    ];
    assert_eq!(check(&entries), vec![]);
    let p = pending(&entries);
    assert_eq!(
        p.iter()
            .map(|c| (c.tool_call_id.as_str(), c.started, c.model_call_index))
            .collect::<Vec<_>>(),
        vec![("c", true, 2), ("d", false, 2)]
    );

    // Once the run ended (or another run began) they are violations.
    entries.push(run_end("r1"));
    assert_eq!(check(&entries).len(), 2);
    assert!(pending(&entries).is_empty());
    entries.pop();
    entries.push(user("r2", "next"));
    assert_eq!(check(&entries).len(), 2);
    entries.pop();
    // Steering in the same run keeps them pending.
    entries.push(user("r1", "also do this"));
    assert!(check(&entries).is_empty());
    assert_eq!(pending(&entries).len(), 2);
}

#[test]
fn repair_marks_started_calls_outcome_unknown_and_leaves_unstarted_ones_to_resume() {
    let entries = vec![
        user("r1", "go"),
        assistant("r1", 1, &[("old", "t")]), // never started, step is over
        assistant(
            "r1",
            2,
            &[("b", "append_line"), ("c", "calc"), ("d", "calc")],
        ),
        started("r1", "b", "append_line"),
        started("r1", "c", "calc"),
    ];
    let repaired = repair(&entries);
    let notes: Vec<String> = repaired.repairs.iter().map(|r| r.to_string()).collect();
    let repairs = repaired.entries;
    let got: Vec<(String, ToolStatus)> = repairs
        .iter()
        .map(|e| match e {
            Entry::ToolResult { run_id, result } => {
                assert_eq!(run_id, "r1");
                assert!(result.is_error());
                (result.tool_call_id.clone(), result.status)
            }
            other => panic!("unexpected repair {other:?}"),
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("old".to_string(), ToolStatus::Aborted),
            ("b".to_string(), ToolStatus::OutcomeUnknown),
            ("c".to_string(), ToolStatus::OutcomeUnknown),
        ]
    );
    assert_eq!(notes.len(), 3);
    assert!(notes[1].contains("outcome_unknown"), "{notes:?}");

    let mut repaired = entries.clone();
    repaired.extend(repairs);
    assert!(check(&repaired).is_empty());
    // Only the never-started call of the running step is left, for resume to run.
    let left: Vec<_> = pending(&repaired)
        .into_iter()
        .map(|c| (c.tool_call_id, c.started))
        .collect();
    assert_eq!(left, vec![("d".to_string(), false)]);
    assert!(repair(&repaired).is_empty());

    // A retry-safe tool that was started is left to run again.
    let repairs = repair_with(&entries, |name| name == "calc").entries;
    assert_eq!(repairs.len(), 2); // old + b
}

// ---------------------------------------------------------------------------------------
// history and export

#[test]
fn history_rebuilds_the_context_with_compaction() {
    let entries = sample();
    let h = history(&entries);
    assert_eq!(h.len(), 2);
    assert_eq!(h[0], Message::user("summary: a line was appended"));
    assert!(matches!(&h[1], Message::Assistant(m) if m.text == "step 2"));

    let before_compaction = history(&entries[..5]);
    assert_eq!(before_compaction.len(), 3);
    assert!(matches!(&before_compaction[2], Message::Tool(r) if r.tool_call_id == "c1"));

    let mut dup = entries[..5].to_vec();
    dup.push(entries[2].clone());
    assert_eq!(history(&dup), before_compaction);
    assert_eq!(committed_turns(&dup), 1);
    assert_eq!(committed_turns(&entries), 2);
    assert_eq!(next_model_call_index(&entries, "r1"), 3);
    assert_eq!(next_model_call_index(&entries, "r2"), 1);
}

#[test]
fn exports_and_listing() {
    let dir = tempfile::tempdir().unwrap();
    let entries = sample();
    let mut jsonl = Vec::new();
    export_jsonl(&entries, &mut jsonl).unwrap();
    std::fs::write(dir.path().join("copy.jsonl"), &jsonl).unwrap();
    std::fs::write(dir.path().join("torn.jsonl"), &jsonl[..jsonl.len() - 5]).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a session").unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    assert_eq!(store.load_blocking("copy").unwrap().0, entries);

    let md = export_markdown("copy", &entries);
    for needle in [
        "# Session `copy`",
        "## Run `r1`",
        "append a line",
        "### Step 1",
        "tool call `append_line` (`c1`)",
        "**Tool `append_line`** (`c1`, completed)",
        "Compaction: 2 messages removed",
        "_Run completed._",
    ] {
        assert!(md.contains(needle), "missing {needle:?} in\n{md}");
    }

    let list = list_sessions(dir.path()).unwrap();
    let summary: Vec<_> = list
        .iter()
        .map(|s| (s.id.as_str(), s.entries, s.torn_tail))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("copy", entries.len(), false),
            ("torn", entries.len() - 1, true)
        ]
    );
    assert!(list[0].modified.is_some());
    assert_eq!(list[0].bytes, jsonl.len() as u64);
    assert!(list_sessions(&dir.path().join("missing"))
        .unwrap()
        .is_empty());
}

// ---------------------------------------------------------------------------------------
// Files that are not regular files (issue 9 item 3)

/// R-IDEM-4: a session file that is a symbolic link out of the store is refused with a typed
/// error, by a locked writer and by a reader; the file it points to is never read, cut or
/// written (its content looks like a torn tail, which a writer would otherwise cut off).
#[cfg(unix)]
#[test]
fn r_idem_4_a_symlinked_session_file_is_refused_and_its_target_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    std::fs::create_dir(&store_dir).unwrap();
    let outside = dir.path().join("precious.txt");
    std::fs::write(&outside, "precious data without a newline").unwrap();
    std::os::unix::fs::symlink(&outside, store_dir.join("s.jsonl")).unwrap();

    let store = FileStore::open(&store_dir).unwrap();
    let refused = |e: StoreError| {
        assert!(
            matches!(
                &e,
                StoreError::NotRegularFile { path, kind: FileKind::SymbolicLink }
                    if path.ends_with("s.jsonl")
            ),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("s.jsonl") && text.contains("symbolic link"),
            "{text}"
        );
    };
    let reader = FileStore::open(&store_dir).unwrap();
    refused(reader.load_blocking("s").unwrap_err());
    let _lock = store.lock("s").unwrap();
    refused(store.load_blocking("s").unwrap_err());
    refused(store.append_blocking("s", &run_end("r")).unwrap_err());
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "precious data without a newline"
    );
}

/// A lock file that is a symbolic link is refused too: nothing is created or locked outside.
#[cfg(unix)]
#[test]
fn a_symlinked_lock_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    std::fs::create_dir(&store_dir).unwrap();
    let outside = dir.path().join("elsewhere.lock");
    std::os::unix::fs::symlink(&outside, store_dir.join("s.lock")).unwrap();
    let store = FileStore::open(&store_dir).unwrap();
    let e = store.lock("s").unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::NotRegularFile {
                kind: FileKind::SymbolicLink,
                ..
            }
        ),
        "{e:?}"
    );
    let e = store.append_blocking("s", &run_end("r")).unwrap_err();
    assert!(e.to_string().contains("s.lock"), "{e}");
    assert!(!outside.exists(), "a file was created outside the store");
}

/// A FIFO as session file is refused at once (reading it would block until a writer came).
#[cfg(unix)]
#[test]
fn a_fifo_session_file_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("mkfifo")
        .arg(dir.path().join("f.jsonl"))
        .status()
        .unwrap();
    assert!(status.success());
    let path = dir.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let store = FileStore::open(&path).unwrap();
        let _ = tx.send((
            store.load_blocking("f").map(|_| ()),
            store.append_blocking("f", &run_end("r")).map(|_| ()),
        ));
    });
    let (load, append) = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the store blocked on a FIFO");
    for e in [load.unwrap_err(), append.unwrap_err()] {
        assert!(
            matches!(
                e,
                StoreError::NotRegularFile {
                    kind: FileKind::Fifo,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}

/// Listing reports a linked or special session file instead of following or reading it.
#[cfg(unix)]
#[test]
fn listing_reports_links_instead_of_following_them() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    std::fs::create_dir(&store_dir).unwrap();
    let mut jsonl = Vec::new();
    export_jsonl(&sample(), &mut jsonl).unwrap();
    let outside = dir.path().join("outside.jsonl");
    std::fs::write(&outside, &jsonl).unwrap();
    std::fs::write(store_dir.join("real.jsonl"), &jsonl).unwrap();
    std::os::unix::fs::symlink(&outside, store_dir.join("link.jsonl")).unwrap();
    let list = list_sessions(&store_dir).unwrap();
    let summary: Vec<_> = list
        .iter()
        .map(|s| (s.id.as_str(), s.entries, s.bytes, s.not_regular))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("link", 0, 0, Some(FileKind::SymbolicLink)),
            ("real", sample().len(), jsonl.len() as u64, None),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// Entry size limit (issue 9 item 5)

fn big_user(run: &str, bytes: usize) -> Entry {
    user(run, &"x".repeat(bytes))
}

#[test]
fn the_default_entry_limit_is_16_mib() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    assert_eq!(DEFAULT_MAX_ENTRY_BYTES, 16 * 1024 * 1024);
    assert_eq!(store.max_entry_bytes(), DEFAULT_MAX_ENTRY_BYTES);
}

/// R-IDEM-4: an entry over the limit fails with a typed error before anything is written:
/// the file is byte-for-byte unchanged and the next append continues the sequence.
#[test]
fn r_idem_4_an_oversized_entry_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path())
        .unwrap()
        .with_max_entry_bytes(1024);
    assert_eq!(store.max_entry_bytes(), 1024);
    append_all(&store, "s", &sample()[..2]);
    let path = dir.path().join("s.jsonl");
    let before = std::fs::read(&path).unwrap();
    let e = store
        .append_blocking("s", &big_user("r1", 4000))
        .unwrap_err();
    match &e {
        StoreError::EntryTooLarge { session, limit, .. } => {
            assert_eq!((session.as_str(), *limit), ("s", 1024));
        }
        other => panic!("expected EntryTooLarge, got {other:?}"),
    }
    assert!(e.to_string().contains("1024"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "nothing written");
    // The session is still usable and its seq continues.
    append_all(&store, "s", &sample()[2..3]);
    assert_eq!(store.load_blocking("s").unwrap().0, sample()[..3].to_vec());
    // A new session whose first entry is too large is not created at all.
    assert!(store.append_blocking("t", &big_user("r1", 4000)).is_err());
    assert!(!dir.path().join("t.jsonl").exists());
}

/// Reading a line over the limit is a typed error naming the line, for writers and readers;
/// a store with a larger limit reads the same file.
#[test]
fn a_stored_line_over_the_limit_is_a_typed_error_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let big = FileStore::open(dir.path()).unwrap();
    append_all(
        &big,
        "s",
        &[user("r1", "short"), big_user("r1", 5000), run_end("r1")],
    );
    big.close("s").unwrap();
    drop(big);
    let first_line = lines(&dir.path().join("s.jsonl"))[0].len() as u64 + 1;
    let small = FileStore::open(dir.path())
        .unwrap()
        .with_max_entry_bytes(1000);
    let check_err = |e: StoreError| {
        match &e {
            StoreError::LineTooLong {
                path,
                line,
                offset,
                limit,
            } => {
                assert!(path.ends_with("s.jsonl"), "{path}");
                assert_eq!((*line, *offset, *limit), (2, first_line, 1000));
            }
            other => panic!("expected LineTooLong, got {other:?}"),
        }
        assert!(e.to_string().contains("line 2"), "{e}");
    };
    check_err(small.load_blocking("s").unwrap_err());
    let _lock = small.lock("s").unwrap();
    check_err(small.load_blocking("s").unwrap_err());
    check_err(small.append_blocking("s", &run_end("r2")).unwrap_err());
    let reader = FileStore::open(dir.path()).unwrap();
    assert_eq!(reader.load_blocking("s").unwrap().0.len(), 3);
}

// ---------------------------------------------------------------------------------------
// Lazy creation (issue 9 item 10)

/// R-IDEM-5: a session file exists only once its first entry is in it, so a process killed
/// before its first write leaves no empty session behind.
#[test]
fn r_idem_5_the_session_file_is_created_with_its_first_entry() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let path = dir.path().join("s.jsonl");
    let _lock = store.lock("s").unwrap();
    assert_eq!(store.load_blocking("s").unwrap().0, vec![]);
    assert!(!path.exists(), "loading under the lock created the file");
    append_all(&store, "s", &sample()[..1]);
    assert_eq!(lines(&path).len(), 1);
    append_all(&store, "s", &sample()[1..]);
    assert_eq!(store.load_blocking("s").unwrap().0, sample());
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| n == "s.jsonl" || n == "s.lock"),
        "{names:?}"
    );
}
