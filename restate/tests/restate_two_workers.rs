//! Two workers (127.0.0.1:9080 and :9081) serving one Restate server, 20 sessions at once,
//! each sent two prompts at the same moment: every prompt completes, and every session's
//! steps are strictly serialized — each session appends numbered lines to its own file, and
//! the file holds `line 0..60` in order, none repeated, none missing (two prompts of one
//! session running concurrently would both start at the same script turn and repeat lines).
//!
//! Phases on one server, each with its own 20 sessions:
//! 1. one worker, registered directly (the baseline for steps/s);
//! 2. both workers behind one deployment URI, a round-robin TCP balancer on :9090 (the
//!    workers' logs show both ran prompts);
//! 3. the same, with worker :9080 killed (SIGKILL) mid-run and not restarted: its prompts
//!    resume on :9081.
//!
//! Registering the two workers as two deployments does not spread load (the newest
//! deployment gets every new invocation; docs/scale-out.md), so the test does not do that.
//!
//! Mandatory when `CI` is set; otherwise skipped, with the reason printed, unless
//! `AGENTLOOP_RESTATE_TEST=1` is set.

// Real processes on the wall clock: the test measures steps/s.
#![allow(clippy::disallowed_methods)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use support::*;

const SESSIONS: usize = 20;
const PROMPTS: usize = 2;
const STEPS: usize = 30;

/// Sends `PROMPTS` prompts to each of `SESSIONS` sessions (numbers `base+1..`) at once and
/// waits for all; `during` runs while they run. Returns steps/s and the session keys.
fn run_sessions(base: usize, root: &Path, during: impl FnOnce()) -> (f64, Vec<String>) {
    let started = Instant::now();
    let mut invocations = Vec::new();
    let mut keys = Vec::new();
    for i in 1..=SESSIONS {
        let n = base + i;
        let session = format!("w{n}");
        for p in 0..PROMPTS {
            invocations.push(send(
                &session,
                &format!("session {n}"),
                &format!("{session}-{p}"),
            ));
        }
        keys.push(session);
    }
    let waiters: Vec<_> = invocations
        .into_iter()
        .map(|inv| std::thread::spawn(move || attach(&inv)))
        .collect();
    during();
    for w in waiters {
        let r = w.join().expect("attach thread");
        assert_eq!(r["outcome"], "completed", "{r}");
        assert_eq!(r["iterations"], STEPS + 1, "{r}");
    }
    let elapsed = started.elapsed();
    for i in 1..=SESSIONS {
        let n = base + i;
        let expected: Vec<String> = (0..PROMPTS * STEPS).map(|k| format!("line {k}")).collect();
        assert_eq!(
            lines(&root.join(format!("s{n}.txt"))),
            expected,
            "session w{n}: its lines in order, each once"
        );
        let st = status(&format!("w{n}"));
        assert_eq!(st["turns"], PROMPTS * (STEPS + 1), "w{n}: {st}");
    }
    let steps = (SESSIONS * PROMPTS * (STEPS + 1)) as f64;
    (steps / elapsed.as_secs_f64(), keys)
}

/// Session → invocations whose attempts a worker's log shows.
fn attempts(log: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let field = |line: &str, name: &str| {
        let start = line.find(&format!("{name}=\""))? + name.len() + 2;
        let len = line[start..].find('"')?;
        Some(line[start..start + len].to_string())
    };
    let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| l.contains("prompt attempt")) {
        if let (Some(s), Some(i)) = (field(line, "session"), field(line, "invocation")) {
            m.entry(s).or_default().insert(i);
        }
    }
    m
}

/// How many of `keys`' prompt invocations each log shows attempts of.
fn share(keys: &[String], logs: &[&Path]) -> Vec<usize> {
    logs.iter()
        .map(|log| {
            let a = attempts(log);
            keys.iter()
                .filter_map(|k| a.get(k))
                .map(BTreeSet::len)
                .sum()
        })
        .collect()
}

#[test]
fn restate_two_workers_serialize_each_session() {
    if !wanted() {
        return;
    }
    let _ports = ports_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let _server = Server::start(&dir.path().join("restate"));
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("root");
    let script = dir.path().join("script.json");
    numbered_script(&script, PROMPTS, STEPS);
    let (log_a, log_b) = (dir.path().join("9080.log"), dir.path().join("9081.log"));
    let logs = [log_a.as_path(), log_b.as_path()];

    // 1. One worker.
    let mut a = Worker::start(9080, &script, &root, Some(&log_a));
    register("http://127.0.0.1:9080");
    let (one, keys) = run_sessions(0, &root, || {});
    let s = share(&keys, &logs);
    eprintln!("one worker: {one:.0} steps/s; prompt invocations per worker {s:?}");
    assert_eq!(s, [SESSIONS * PROMPTS, 0]);

    // 2. Two workers behind one URI.
    let _b = Worker::start(9081, &script, &root, Some(&log_b));
    let connections = balancer(9090, vec![9080, 9081]);
    register("http://127.0.0.1:9090");
    let (two, keys) = run_sessions(100, &root, || {});
    let s = share(&keys, &logs);
    let c: Vec<usize> = connections
        .iter()
        .map(|c| c.load(std::sync::atomic::Ordering::SeqCst))
        .collect();
    eprintln!(
        "two workers behind a round-robin balancer: {two:.0} steps/s; prompt invocations per worker {s:?}; connections per worker {c:?}"
    );
    assert!(s.iter().all(|&n| n > 0), "both workers ran prompts: {s:?}");

    // 3. Worker :9080 killed mid-run: its prompts resume on :9081.
    let total = SESSIONS * PROMPTS * STEPS;
    let (_, keys) = run_sessions(200, &root, || {
        let t = Instant::now();
        let written = || {
            (201..=200 + SESSIONS)
                .map(|n| lines(&root.join(format!("s{n}.txt"))).len())
                .sum::<usize>()
        };
        while written() < total / 3 {
            assert!(t.elapsed() < Duration::from_secs(120), "no progress");
            std::thread::sleep(Duration::from_millis(2));
        }
        a.kill9();
        eprintln!("killed worker :9080 at {} of {total} lines", written());
    });
    let (on_a, on_b) = (attempts(&log_a), attempts(&log_b));
    let moved: Vec<&String> = keys
        .iter()
        .filter(|k| {
            on_a.get(*k)
                .zip(on_b.get(*k))
                .is_some_and(|(x, y)| x.intersection(y).next().is_some())
        })
        .collect();
    eprintln!(
        "after the kill: prompt invocations per worker {:?}; {} resumed on :9081 ({moved:?})",
        share(&keys, &logs),
        moved.len()
    );
    assert!(
        !moved.is_empty(),
        "a prompt of the killed worker resumed on the other one"
    );
}
