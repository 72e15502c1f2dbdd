//! The Restate adapter on real processes: a Restate server (npm `@restatedev/restate-server`,
//! started by `scripts/restate_up.sh`) and the `agentloop-restate` worker binary.
//!
//! One test, in stages: a prompt through ingress answers 5; the same idempotency key sent
//! twice starts one run; a scripted run of many `append_line` calls completes while its worker
//! is killed with SIGKILL at random moments and restarted at least 30 times (at most 45; the
//! rest of the run finishes on the last worker), and no line is duplicated or missing.
//!
//! Mandatory when `CI` is set; otherwise skipped, with the reason printed, unless
//! `AGENTLOOP_RESTATE_TEST=1` is set.

// Real processes on the wall clock: the test measures how long the killed run took.
#![allow(clippy::disallowed_methods)]

mod support;

use std::time::{Duration, Instant};

use support::*;

const LINES: usize = 200;
/// Kills past this many prove no more (each one costs a restart and Restate's retry, about a
/// second): the rest of the run finishes on the last worker.
const KILLS: usize = 45;

#[test]
fn restate_prompt_idempotency_and_kill_recovery() {
    if !wanted() {
        return;
    }
    let _ports = ports_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let _server = Server::start(&dir.path().join("restate"));
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("root");
    let script_path = dir.path().join("script.json");
    append_script(&script_path, LINES);
    let mut w = Worker::start(9080, &script_path, &root, None);
    register("http://127.0.0.1:9080");

    // 1. A prompt answers 5.
    let session = format!("s{}", std::process::id());
    let inv = send(&session, "What is 2+3?", "k-first");
    let r = attach(&inv);
    assert_eq!(r["outcome"], "completed", "{r}");
    assert!(r["text"].as_str().unwrap_or("").contains('5'), "{r}");

    // 2. The same idempotency key twice: one run.
    let again = send(&session, "What is 2+3?", "k-first");
    assert_eq!(again, inv, "the same key is the same invocation");
    let st = status(&session);
    assert_eq!(st["turns"], 2, "{st}");

    // 3. Many appends while the worker is killed -9 and restarted.
    let started = Instant::now();
    let inv = send(&session, "append the lines", "k-appends");
    let waiter = std::thread::spawn(move || attach(&inv));
    let mut kills = 0;
    let mut seed = 0x2545_f491_u64 ^ u64::from(std::process::id());
    let out = root.join("out.txt");
    let count = || lines(&out).len();
    while !waiter.is_finished() && kills < KILLS {
        // A random moment after the restarted worker made progress (so every kill interrupts
        // a live run, not a worker Restate has not called back yet).
        let before = count();
        while count() == before && !waiter.is_finished() {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(xorshift(&mut seed) % 150));
        if waiter.is_finished() {
            break;
        }
        w.kill9();
        kills += 1;
        w = Worker::start(9080, &script_path, &root, None);
        assert!(started.elapsed() < Duration::from_secs(900), "no progress");
    }
    let r = waiter.join().expect("attach thread");
    eprintln!(
        "{kills} kills; the append run took {:?}: {r}",
        started.elapsed()
    );
    assert_eq!(r["outcome"], "completed", "{r}");
    let expected: Vec<String> = (0..LINES).map(|i| format!("line {i}")).collect();
    assert_eq!(lines(&out), expected, "every line exactly once, in order");
    assert!(
        kills >= 30,
        "only {kills} kills happened during the run: make it longer"
    );
}
