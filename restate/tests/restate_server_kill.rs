//! The Restate server killed with SIGKILL mid-run and restarted on the same base dir five
//! times during one scripted run of 30 steps, each with two `append_line` calls: the run
//! completes, each of its 60 lines is written exactly once, in order. Prints how long each
//! restart and each recovery took.
//!
//! Mandatory when `CI` is set; otherwise skipped, with the reason printed, unless
//! `AGENTLOOP_RESTATE_TEST=1` is set.

// Real processes on the wall clock: the test measures recovery times.
#![allow(clippy::disallowed_methods)]

mod support;

use std::time::{Duration, Instant};

use support::*;

/// Model steps with tool calls (two `append_line` calls each).
const STEPS: usize = 30;
const LINES: usize = 2 * STEPS;
const KILLS: usize = 5;

#[test]
fn restate_server_kill_mid_run() {
    if !wanted() {
        return;
    }
    let _ports = ports_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = Server::start(&dir.path().join("restate"));
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("root");
    let script = dir.path().join("script.json");
    paired_append_script(&script, STEPS);
    let _w = Worker::start(9080, &script, &root, None);
    register("http://127.0.0.1:9080");

    let session = format!("k{}", std::process::id());
    let r = prompt(&session, "What is 2+3?");
    assert_eq!(r["outcome"], "completed", "{r}");
    let started = Instant::now();
    let inv = send(&session, "append the lines", "k-appends");
    let waiter =
        std::thread::spawn(move || attach_through_restarts(&inv, Duration::from_secs(300)));
    let out = root.join("out.txt");
    let count = || lines(&out).len();
    let mut seed = 0x9e37_79b9_u64 ^ u64::from(std::process::id());
    let mut kills = Vec::new();
    // Kill at random moments spread over the run: after 1 to 8 new lines (the two calls of
    // a step are two journaled effects, so a kill may fall between them).
    while kills.len() < KILLS && !waiter.is_finished() {
        let target = count() + 1 + (xorshift(&mut seed) % 8) as usize;
        while count() < target && !waiter.is_finished() {
            std::thread::sleep(Duration::from_millis(2));
        }
        if waiter.is_finished() {
            break;
        }
        let at = count();
        server.kill9();
        let killed = Instant::now();
        let after_kill = count();
        server.restart();
        let restarted = killed.elapsed();
        while count() == after_kill && !waiter.is_finished() {
            assert!(
                killed.elapsed() < Duration::from_secs(120),
                "no progress after a restart"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let progress = killed.elapsed();
        eprintln!(
            "kill at {at} lines: server answering again after {restarted:?}, next line after {progress:?}"
        );
        kills.push((restarted, progress));
    }
    let r = waiter.join().expect("attach thread");
    eprintln!(
        "{} server kills; the append run took {:?}: {r}",
        kills.len(),
        started.elapsed()
    );
    assert_eq!(r["outcome"], "completed", "{r}");
    assert_eq!(r["reason"], "final_answer", "{r}");
    assert_eq!(r["iterations"], STEPS + 1, "{r}");
    let expected: Vec<String> = (0..LINES).map(|i| format!("line {i}")).collect();
    assert_eq!(lines(&out), expected, "every line exactly once, in order");
    assert_eq!(
        kills.len(),
        KILLS,
        "the run ended before {KILLS} kills: make it longer"
    );
    let st = status(&session);
    assert_eq!(st["last"]["run_id"], r["run_id"], "{st}");
}
