//! Crash test with a real process: `agentloop run --session` on a script
//! whose turns call `append_line` in sequence and in parallel is killed with SIGKILL at
//! seeded random moments, then `agentloop resume` is started (and killed) again until it
//! exits 0. Across the test at least 50 kills land. After each session:
//!
//! - every `append_line` call id is in the side-effect file at most once (a call whose
//!   outcome was reported `outcome_unknown` may be there once or not at all; a call with a
//!   `completed` result is there exactly once: no acknowledged effect is lost),
//! - `agentloop sessions check` exits 0,
//! - the final answer is stored and the run ended `completed`.
//!
//! `scripts/crash_test.sh` runs the same loop against the release binary for longer.
#![allow(clippy::disallowed_methods)] // tests and benchmarks may read the wall clock

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentloop::store::{Entry, FileStore};
use agentloop::ToolStatus;

mod support;
use support::bin;
use support::script_calls;

/// The binary under test: `$AGENTLOOP_BIN` when set (a target directory shared between
/// worktrees can have another build's `agentloop` in it), else the one Cargo built.
const MIN_KILLS: usize = 150;
/// Kills per session at most (then the attempt runs to its end and the session is verified).
const MAX_KILLS_PER_SESSION: usize = 40;
/// Kill delays are drawn uniformly from 0..MAX_DELAY_US (after spawn, or a third of it after
/// the attempt first writes).
const MAX_DELAY_US: u64 = 30_000;
const FINAL: &str = "All batches written. Done.";

/// A small deterministic generator (PCG-style LCG), so a failing seed can be replayed.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

fn script_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/scripts/crash_many.json")
}

fn has_input(store: &Path, session: &str) -> bool {
    std::fs::read_to_string(store.join(format!("{session}.jsonl")))
        .is_ok_and(|s| s.contains("\"entry\":\"user_input\""))
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Polls until `path` is longer than `before`, the child has exited, or 10 s have passed.
fn wait_for_growth(path: &Path, before: u64, child: &mut std::process::Child) {
    let started = Instant::now();
    while file_len(path) <= before
        && child.try_wait().expect("try_wait").is_none()
        && started.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_micros(100));
    }
}

#[derive(Default, Debug)]
struct Stats {
    kills: usize,
    /// Kills after which the session file had grown during the attempt (landed inside a run).
    kills_mid_run: usize,
    attempts: usize,
    sessions: usize,
    outcome_unknown: usize,
}

/// Drives one session to completion through kills; returns when an attempt exits 0.
fn crash_session(store: &Path, root: &Path, session: &str, rng: &mut Lcg, stats: &mut Stats) {
    let session_file = store.join(format!("{session}.jsonl"));
    let script = script_path();
    let mut kills_here = 0;
    for attempt in 0.. {
        assert!(attempt < 2_000, "session {session} did not complete");
        stats.attempts += 1;
        let mut cmd = Command::new(bin());
        if has_input(store, session) {
            cmd.args(["resume", session]);
        } else {
            cmd.args(["run", "--session", session]);
        }
        cmd.arg("--store")
            .arg(store)
            .arg("--script")
            .arg(&script)
            .arg("--root")
            .arg(root)
            .args(["--max-steps", "100"]);
        if !has_input(store, session) {
            cmd.arg("go");
        }
        let before = file_len(&session_file);
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn agentloop");
        // At most MAX_KILLS_PER_SESSION per session, so that even a slow machine (where
        // every attempt outlives its kill delay) completes and verifies several sessions.
        let kill = stats.kills < MIN_KILLS && kills_here < MAX_KILLS_PER_SESSION;
        if kill {
            // Half the kills come at a random moment after spawn (they may land before the
            // first write: a crash during start-up). The other half wait until this attempt
            // has written something and then come at a random moment: without that, a
            // loaded machine whose process start-up outlasts MAX_DELAY_US kills every attempt
            // before it writes, and no kill lands inside a run (seen once in CI-like runs).
            if rng.next() % 2 == 1 {
                wait_for_growth(&session_file, before, &mut child);
                std::thread::sleep(Duration::from_micros(rng.next() % (MAX_DELAY_US / 3)));
            } else {
                std::thread::sleep(Duration::from_micros(rng.next() % MAX_DELAY_US));
            }
            if child.try_wait().expect("try_wait").is_none() {
                child.kill().expect("SIGKILL");
                let _ = child.wait();
                stats.kills += 1;
                kills_here += 1;
                let after = file_len(&session_file);
                if after > before {
                    stats.kills_mid_run += 1;
                }
                continue;
            }
        }
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "session {session}: attempt {attempt} exited {:?}: {stderr}",
            out.status
        );
        return;
    }
}

fn verify_session(store: &Path, root: &Path, session: &str, stats: &mut Stats) {
    let script = script_calls(&script_path());
    let (entries, report) = FileStore::open(store)
        .unwrap()
        .load_blocking(session)
        .unwrap();
    assert!(report.is_empty(), "{:?}", report);

    // Side effects: count each call id's lines.
    let effects = std::fs::read_to_string(root.join("side_effects.txt")).unwrap_or_default();
    let mut lines: HashMap<String, usize> = HashMap::new();
    for line in effects.lines() {
        let id = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("call="))
            .unwrap_or_else(|| panic!("malformed side-effect line {line:?}"));
        *lines.entry(id.to_string()).or_default() += 1;
    }
    let mut results: HashMap<String, ToolStatus> = HashMap::new();
    for e in &entries {
        if let Entry::ToolResult { result, .. } = e {
            assert!(
                results
                    .insert(result.tool_call_id.clone(), result.status)
                    .is_none(),
                "{session}: two results for {}",
                result.tool_call_id
            );
        }
    }
    for id in script {
        let n = lines.get(&id).copied().unwrap_or(0);
        let status = results.get(&id).copied();
        match status {
            Some(ToolStatus::Completed) => assert_eq!(
                n, 1,
                "{session}: {id} completed but is in the side-effect file {n} times"
            ),
            Some(ToolStatus::OutcomeUnknown) => {
                stats.outcome_unknown += 1;
                assert!(n <= 1, "{session}: {id} (outcome_unknown) ran {n} times");
            }
            other => panic!("{session}: {id} ended {other:?}, file count {n}"),
        }
    }
    assert_eq!(
        lines.keys().filter(|id| !results.contains_key(*id)).count(),
        0,
        "{session}: side effects of unknown calls"
    );

    let check = Command::new(bin())
        .args(["sessions", "check", session, "--store"])
        .arg(store)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{session}: sessions check failed: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );

    let answer = entries.iter().rev().find_map(|e| match e {
        Entry::Assistant { message, .. } => Some(message.text.clone()),
        _ => None,
    });
    assert_eq!(answer.as_deref(), Some(FINAL), "{session}");
    assert!(
        matches!(entries.last(), Some(Entry::RunEnd { outcome, .. }) if *outcome == agentloop::Outcome::Completed),
        "{session}: {:?}",
        entries.last()
    );
}

#[test]
fn kill_and_resume_never_duplicates_a_side_effect() {
    let seed = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed4_u64);
    let mut rng = Lcg(seed);
    let tmp = tempfile::tempdir().unwrap();
    // CRASH_KEEP_DIR=<dir> keeps the stores and side-effect files for inspection.
    let base = std::env::var_os("CRASH_KEEP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let store = base.join("store");
    let started = Instant::now();
    let mut stats = Stats::default();
    while stats.kills < MIN_KILLS {
        stats.sessions += 1;
        let session = format!("crash-{}", stats.sessions);
        let root = base.join(&session);
        std::fs::create_dir_all(&root).unwrap();
        crash_session(&store, &root, &session, &mut rng, &mut stats);
        verify_session(&store, &root, &session, &mut stats);
    }
    eprintln!(
        "crash test (seed {seed:#x}): {stats:?} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(stats.kills >= MIN_KILLS);
    assert!(
        stats.kills_mid_run >= 30,
        "too few kills landed inside a run: {stats:?}"
    );
}
