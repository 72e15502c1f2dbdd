//! The worker with `--store DIR` (the library's file store): a session it ran is in the store,
//! and the real `agentloop` CLI shows and checks it; a second prompt continues the stored
//! history; a run whose worker is killed (SIGKILL) mid-run and restarted writes each entry once.
//!
//! Mandatory when `CI` is set; otherwise skipped, with the reason printed, unless
//! `AGENTLOOP_RESTATE_TEST=1` is set.

#![allow(clippy::disallowed_methods)]

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

/// `agentloop sessions <what> <session> --store <store>`: exit status and stdout.
fn sessions(what: &str, session: &str, store: &std::path::Path) -> (bool, String) {
    let out = Command::new(cli_binary())
        .args(["sessions", "--store"])
        .arg(store)
        .args([what, session])
        .output()
        .expect("agentloop sessions");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!(
        "agentloop sessions {what} {session}: {}\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn restate_store_sessions_show_and_check() {
    if !wanted() {
        return;
    }
    let _ports = ports_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let _server = Server::start(&dir.path().join("restate"));
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("root");
    let store = dir.path().join("sessions");
    let script = dir.path().join("script.json");
    append_script(&script, 40);
    let args = [
        "--script".as_ref(),
        script.as_os_str(),
        "--root".as_ref(),
        root.as_os_str(),
        "--store".as_ref(),
        store.as_os_str(),
    ];
    let mut w = Worker::start_with(9080, &args, None);
    register("http://127.0.0.1:9080");

    // 1. A prompt's entries are in the store; the CLI shows and checks them.
    let session = format!("st{}", std::process::id());
    let r = prompt(&session, "What is 2+3?");
    assert_eq!(r["outcome"], "completed", "{r}");
    assert_eq!(r["text"], "The answer is 5.", "{r}");
    let (ok, shown) = sessions("show", &session, &store);
    assert!(ok, "sessions show failed");
    assert!(shown.contains("What is 2+3?"), "{shown}");
    assert!(shown.contains("The answer is 5."), "{shown}");
    let (ok, _) = sessions("check", &session, &store);
    assert!(ok, "sessions check failed");

    // 2. The next prompt continues the stored history (its turns follow the first run's),
    // while the worker is killed and restarted a few times: each entry is stored once.
    let inv = send(&session, "append the lines", &format!("{session}-appends"));
    let out = root.join("out.txt");
    let mut kills = 0;
    let t = Instant::now();
    while kills < 3 {
        let target = lines(&out).len() + 8;
        while lines(&out).len() < target {
            assert!(t.elapsed() < Duration::from_secs(120), "no progress");
            std::thread::sleep(Duration::from_millis(2));
        }
        w.kill9();
        w = Worker::start_with(9080, &args, None);
        kills += 1;
    }
    let r = attach_through_restarts(&inv, Duration::from_secs(120));
    assert_eq!(r["outcome"], "completed", "{r}");
    assert_eq!(r["reason"], "final_answer", "{r}");
    let expected: Vec<String> = (0..40).map(|i| format!("line {i}")).collect();
    assert_eq!(lines(&out), expected, "every line exactly once, in order");
    let (ok, shown) = sessions("show", &session, &store);
    assert!(ok, "sessions show failed");
    assert!(shown.contains("The answer is 5."), "{shown}");
    // The 40 calls, each with its result, and the run's end.
    assert!(
        shown.contains("append_line (call_41_0) completed"),
        "{shown}"
    );
    assert_eq!(
        shown.matches("completed: final_answer").count(),
        2,
        "{shown}"
    );
    let (ok, checked) = sessions("check", &session, &store);
    assert!(ok, "sessions check failed: {checked}");
    let st = status(&session);
    // Two runs: 2 + 41 steps, one entry per message and a run-end entry each.
    let stored = std::fs::read_to_string(store.join(format!("{session}.jsonl")))
        .expect("the session's file")
        .lines()
        .count();
    eprintln!("{kills} worker kills; {stored} entries stored; status {st}");
    assert_eq!(st["entries"].as_u64(), Some(stored as u64), "{st}");
    drop(w);
}

/// The same with `--store sqlite:PATH`: the CLI shows and checks the session the worker ran,
/// and a second prompt continues its history.
#[test]
fn restate_store_sqlite() {
    if !wanted() {
        return;
    }
    let _ports = ports_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let _server = Server::start(&dir.path().join("restate"));
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("root");
    let store = format!("sqlite:{}", dir.path().join("sessions.db").display());
    let script = dir.path().join("script.json");
    append_script(&script, 5);
    let args = [
        "--script".as_ref(),
        script.as_os_str(),
        "--root".as_ref(),
        root.as_os_str(),
        "--store".as_ref(),
        std::ffi::OsStr::new(&store),
    ];
    let _w = Worker::start_with(9080, &args, None);
    register("http://127.0.0.1:9080");
    let session = format!("sq{}", std::process::id());
    let r = prompt(&session, "What is 2+3?");
    assert_eq!(r["text"], "The answer is 5.", "{r}");
    let r = prompt(&session, "append the lines");
    assert_eq!(r["reason"], "final_answer", "{r}");
    let store = std::path::PathBuf::from(store);
    let (ok, shown) = sessions("show", &session, &store);
    assert!(ok, "sessions show failed");
    assert!(shown.contains("The answer is 5."), "{shown}");
    assert!(
        shown.contains("append_line (call_6_0) completed"),
        "{shown}"
    );
    assert_eq!(
        shown.matches("completed: final_answer").count(),
        2,
        "{shown}"
    );
    let (ok, checked) = sessions("check", &session, &store);
    assert!(ok, "sessions check failed: {checked}");
    assert_eq!(lines(&root.join("out.txt")).len(), 5);
}
