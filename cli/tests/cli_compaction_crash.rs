//! A crash during compaction, with the real binary (R-IDEM-3, R-IDEM-5,
//! R-IDEM-7, R-OUT-6). `examples/scripts/compact_append.json` makes four steps of
//! `append_line` calls; with `--compact-threshold 4` the context is compacted before steps 3,
//! 4 and 5. Two ways to crash there:
//!
//! - exactly: a complete run's session file is cut just before each compaction entry — the
//!   file a process killed while compacting leaves (every earlier append was synced, the
//!   compaction entry never written) — with the side-effect file holding the calls of the
//!   kept entries; `agentloop resume` must complete it;
//! - for real: `agentloop run --events json` is SIGKILLed as soon as it prints
//!   `compact_start` (the kill lands during the compaction or shortly after it; the test
//!   reports which), then resumed.
//!
//! Either way every call is in the side-effect file exactly once (at most once when resume
//! had to report it `outcome_unknown`), `agentloop sessions check` passes, and the session
//! ends with the final answer and a completed run.
#![cfg(unix)]
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentloop::store::{Entry, FileStore};
use agentloop::ToolStatus;

mod support;
use support::bin;
use support::script_calls;

/// See tests/durable_crash.rs: `$AGENTLOOP_BIN` overrides the binary under test.
const FINAL: &str = "All batches written after compacting. Done.";
const THRESHOLD: &str = "4";

fn script_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/scripts/compact_append.json")
}

/// `agentloop <verb>` on the compaction script, with the store and root given.
fn agentloop(verb: &[&str], store: &Path, root: &Path) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(verb)
        .arg("--store")
        .arg(store)
        .arg("--script")
        .arg(script_path())
        .arg("--root")
        .arg(root)
        .args(["--compact-threshold", THRESHOLD])
        .stdin(Stdio::null());
    cmd
}

/// Runs `cmd` to its end, killing it after 60 s; returns (exit success, stderr).
fn run_bounded(mut cmd: Command) -> (bool, String) {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agentloop");
    let started = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("agentloop did not exit within 60 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().expect("wait");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn session_file(store: &Path, session: &str) -> PathBuf {
    store.join(format!("{session}.jsonl"))
}

fn entries(store: &Path, session: &str) -> Vec<Entry> {
    let (entries, report) = FileStore::open(store)
        .expect("store")
        .load_blocking(session)
        .expect("load");
    assert!(report.is_empty(), "{:?}", report);
    entries
}

fn compactions(entries: &[Entry]) -> usize {
    entries
        .iter()
        .filter(|e| matches!(e, Entry::Compaction { .. }))
        .count()
}

/// The call id of a side-effect line (`call=<id> ...`).
fn call_of(line: &str) -> &str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("call="))
        .unwrap_or_else(|| panic!("malformed side-effect line {line:?}"))
}

/// Checks a session that `resume` completed (see the module documentation); returns how
/// many calls ended `outcome_unknown`.
fn verify(store: &Path, root: &Path, session: &str) -> usize {
    let entries = entries(store, session);
    let effects = std::fs::read_to_string(root.join("side_effects.txt")).unwrap_or_default();
    let mut lines: HashMap<&str, usize> = HashMap::new();
    for line in effects.lines() {
        *lines.entry(call_of(line)).or_default() += 1;
    }
    let mut results: HashMap<String, ToolStatus> = HashMap::new();
    for e in &entries {
        if let Entry::ToolResult { result, .. } = e {
            let again = results.insert(result.tool_call_id.clone(), result.status);
            assert!(
                again.is_none(),
                "{session}: two results for {}",
                result.tool_call_id
            );
        }
    }
    let script = script_calls(&script_path());
    let mut unknown = 0;
    for id in script {
        let n = lines.get(id.as_str()).copied().unwrap_or(0);
        match results.get(&id) {
            Some(ToolStatus::Completed) => {
                assert_eq!(
                    n, 1,
                    "{session}: {id} completed, in the side-effect file {n} times"
                )
            }
            Some(ToolStatus::OutcomeUnknown) => {
                unknown += 1;
                assert!(n <= 1, "{session}: {id} (outcome_unknown) ran {n} times");
            }
            other => panic!("{session}: {id} ended {other:?}"),
        }
    }
    // No side effect of a call the session does not know (an `outcome_unknown` call may
    // have left none: the kill landed before it ran).
    let strangers: Vec<&&str> = lines
        .keys()
        .filter(|id| !results.contains_key(**id))
        .collect();
    assert!(
        strangers.is_empty(),
        "{session}: side effects of calls without a result: {strangers:?}"
    );
    assert!(
        compactions(&entries) >= 1,
        "{session}: no compaction stored"
    );

    let check = Command::new(bin())
        .args(["sessions", "check", session, "--store"])
        .arg(store)
        .output()
        .expect("sessions check");
    assert!(
        check.status.success(),
        "{session}: sessions check failed: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let answer = entries.iter().rev().find_map(|e| match e {
        Entry::Assistant { message, .. } => Some(message.text.as_str()),
        _ => None,
    });
    assert_eq!(answer, Some(FINAL), "{session}");
    assert!(
        matches!(entries.last(), Some(Entry::RunEnd { outcome, .. }) if *outcome == agentloop::Outcome::Completed),
        "{session}: {:?}",
        entries.last()
    );
    unknown
}

/// R-IDEM-5 / R-IDEM-3: the session file cut before each of the three compaction entries
/// (the state a kill while compacting leaves) resumes to completion without running any
/// call again.
#[test]
fn r_idem_5_resume_after_a_crash_while_compacting_completes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("store");
    let root = tmp.path().join("full");
    std::fs::create_dir_all(&root).expect("root");
    let (ok, stderr) = run_bounded(agentloop(
        &["run", "--session", "full", "go"],
        &store,
        &root,
    ));
    assert!(ok, "the complete run failed: {stderr}");
    assert_eq!(verify(&store, &root, "full"), 0);

    let full = std::fs::read_to_string(session_file(&store, "full")).expect("session file");
    let effects = std::fs::read_to_string(root.join("side_effects.txt")).expect("side effects");
    let cuts: Vec<usize> = full
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("\"entry\":\"compaction\""))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(cuts.len(), 3, "compacted before steps 3, 4 and 5");

    for (n, cut) in cuts.into_iter().enumerate() {
        let session = format!("cut-{n}");
        let kept: String = full.lines().take(cut).map(|l| format!("{l}\n")).collect();
        std::fs::write(session_file(&store, &session), kept).expect("write cut session");
        let before = entries(&store, &session);
        assert_eq!(compactions(&before), n, "{session}");
        assert!(
            !before.iter().any(|e| matches!(e, Entry::RunEnd { .. })),
            "{session}: the run is interrupted"
        );
        // The side effects the crashed process left: those of the calls with a stored result.
        let done: Vec<String> = before
            .iter()
            .filter_map(|e| match e {
                Entry::ToolResult { result, .. } => Some(result.tool_call_id.clone()),
                _ => None,
            })
            .collect();
        let root = tmp.path().join(&session);
        std::fs::create_dir_all(&root).expect("root");
        let left: String = effects
            .lines()
            .filter(|l| done.iter().any(|id| id == call_of(l)))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(root.join("side_effects.txt"), left).expect("side effects");

        // `-v`: the state transitions are printed only when asked for.
        let (ok, stderr) = run_bounded(agentloop(&["resume", "-v", &session], &store, &root));
        assert!(ok, "{session}: resume failed: {stderr}");
        assert!(stderr.contains("[completed]"), "{session}: {stderr}");
        assert!(
            stderr.contains("Planning --Plan--> Compacting"),
            "{session}: the resumed run compacts first: {stderr}"
        );
        assert_eq!(verify(&store, &root, &session), 0, "{session}");
        assert_eq!(
            compactions(&entries(&store, &session)),
            3,
            "{session}: compacted again where it crashed, and after"
        );
    }
}

/// R-IDEM-5 / R-IDEM-6: `agentloop run` SIGKILLed right after it printed its first, second
/// and third `compact_start`, then resumed until it exits 0.
#[test]
fn r_idem_5_sigkill_at_compact_start_then_resume_completes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("store");
    let mut inside = 0;
    for nth in 1..=3 {
        let session = format!("kill-{nth}");
        let root = tmp.path().join(&session);
        std::fs::create_dir_all(&root).expect("root");
        let mut child = agentloop(
            &["run", "--session", &session, "--events", "json", "go"],
            &store,
            &root,
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn agentloop");
        let pid = child.id();
        // A watchdog kills the child after 60 s unless told the child is gone.
        let (gone, watch) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if watch.recv_timeout(Duration::from_secs(60)).is_err() {
                // SAFETY: kill(2) on the child's pid, not yet reaped (the test thread waits
                // for it only after this thread was told or gave up).
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
        });
        let stdout = child.stdout.take().expect("stdout");
        let mut seen = 0;
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.expect("stdout line");
            if line.contains("\"type\":\"compact_start\"") {
                seen += 1;
                if seen == nth {
                    child.kill().expect("SIGKILL");
                    break;
                }
            }
        }
        let _ = gone.send(());
        watchdog.join().expect("watchdog");
        let status = child.wait().expect("wait");
        assert_eq!(seen, nth, "{session}: compact_start {nth} never printed");
        if status.success() {
            // The run ended before the kill landed: nothing to resume.
            verify(&store, &root, &session);
            continue;
        }
        // Compaction entries on disk (read raw: a kill may leave a torn last line, which
        // the resume's locked load reports and cuts).
        let file = std::fs::read_to_string(session_file(&store, &session)).expect("session");
        if file.matches("\"entry\":\"compaction\"").count() < nth {
            inside += 1;
        }

        let (ok, stderr) = run_bounded(agentloop(&["resume", &session], &store, &root));
        assert!(ok, "{session}: resume failed: {stderr}");
        verify(&store, &root, &session);
    }
    eprintln!("{inside} of 3 kills landed before the compaction entry was written");
}
