//! `Session/<id>/abort` on real processes: aborting a running prompt ends its run with outcome
//! `aborted` and the abort's reason (the machine's `Abort` event), the `prompt` invocation
//! returns that result, and no further tool runs; an idle session's abort does nothing; a
//! cancellation through the admin API aborts with reason "cancelled".
//!
//! Mandatory when `CI` is set; otherwise skipped, with the reason printed, unless
//! `AGENTLOOP_RESTATE_TEST=1` is set.

#![allow(clippy::disallowed_methods)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use support::*;

const LINES: usize = 200;

/// Runs "What is 2+3?" in `session` (the script's first two turns), then sends the append
/// run and waits until `at_least` lines are written; returns its invocation id.
fn start_append_run(session: &str, out: &Path, at_least: usize) -> String {
    let r = prompt(session, "What is 2+3?");
    assert_eq!(r["outcome"], "completed", "{r}");
    let inv = send(session, "append the lines", &format!("{session}-appends"));
    let t = Instant::now();
    while lines(out).len() < at_least {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the run made no progress"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    inv
}

/// The lines are `line 0`, `line 1`, ... without a gap or a repeat, fewer than the script's
/// `LINES`, and no more come within half a second (the run stopped).
fn assert_stopped_prefix(out: &Path) -> usize {
    let got = lines(out);
    let expected: Vec<String> = (0..got.len()).map(|i| format!("line {i}")).collect();
    assert_eq!(got, expected, "a prefix of the script's lines, each once");
    assert!(
        got.len() < LINES,
        "the run was not stopped: {} lines",
        got.len()
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        lines(out).len(),
        got.len(),
        "a line was appended after the abort"
    );
    got.len()
}

#[test]
fn restate_abort_stops_a_running_prompt() {
    if !wanted() {
        return;
    }
    let _ports = ports_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let _server = Server::start(&dir.path().join("restate"));
    let script = dir.path().join("script.json");
    append_script(&script, LINES);
    let (root_a, root_b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir(&root_a).expect("root");
    std::fs::create_dir(&root_b).expect("root");
    let tag = std::process::id();

    // 1. `abort` on a running prompt.
    let session = format!("abort{tag}");
    let mut w = Worker::start(9080, &script, &root_a, None);
    register("http://127.0.0.1:9080");
    let idle = call(&session, "abort", &json!({}));
    assert_eq!(idle, json!({"aborting": false}), "idle: nothing to abort");
    let out = root_a.join("out.txt");
    let inv = start_append_run(&session, &out, 10);
    let st = status(&session);
    assert_eq!(
        st["running"],
        inv.as_str(),
        "status names the running prompt: {st}"
    );
    let ack = call(
        &session,
        "abort",
        &json!({"reason": "the user pressed stop", "kill": "killable"}),
    );
    assert_eq!(
        ack,
        json!({"aborting": true, "invocation_id": inv}),
        "{ack}"
    );
    let r = attach(&inv);
    assert_eq!(r["outcome"], "aborted", "{r}");
    assert_eq!(r["reason"], "the user pressed stop", "{r}");
    let n = assert_stopped_prefix(&out);
    let iterations = r["iterations"].as_u64().expect("iterations") as usize;
    assert!(
        iterations.abs_diff(n) <= 1,
        "{iterations} steps committed for {n} lines: {r}"
    );
    let st = status(&session);
    assert!(
        st.get("running").is_none(),
        "nothing runs after the abort: {st}"
    );
    assert_eq!(st["last"]["outcome"], "aborted", "{st}");
    assert_eq!(st["last"]["run_id"], r["run_id"], "{st}");
    eprintln!("aborted after {n} lines: {r}");

    // 2. A cancellation from elsewhere (the admin API) is an abort too.
    drop(w);
    w = Worker::start(9080, &script, &root_b, None);
    let session = format!("cancel{tag}");
    let out = root_b.join("out.txt");
    let inv = start_append_run(&session, &out, 10);
    let cancelled = curl(&[
        "-X",
        "PATCH",
        "-w",
        "%{http_code}",
        &format!("{ADMIN}/invocations/{inv}/cancel"),
    ])
    .expect("cancel");
    assert!(cancelled.starts_with("20"), "admin cancel: {cancelled}");
    let r = attach(&inv);
    assert_eq!(r["outcome"], "aborted", "{r}");
    assert_eq!(r["reason"], "cancelled", "{r}");
    assert_stopped_prefix(&out);
    drop(w);
}

/// `abort` while the model attempt is stalled (the model server sent its headers and then
/// nothing): the prompt ends within 2 s with outcome `aborted` and the abort's reason, and
/// with `clear_queue` the prompts queued behind it are dropped (cancelled, never run).
#[test]
fn restate_abort_stalled_model_attempt() {
    if !wanted() {
        return;
    }
    let _ports = ports_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let _server = Server::start(&dir.path().join("restate"));
    let (port, requests) = stalled_model_server();
    let base_url = format!("http://127.0.0.1:{port}");
    let store = dir.path().join("sessions");
    let args = [
        "--store".as_ref(),
        store.as_os_str(),
        "--provider".as_ref(),
        "openai".as_ref(),
        "--model".as_ref(),
        "stalled".as_ref(),
        "--base-url".as_ref(),
        std::ffi::OsStr::new(&base_url),
        "--root".as_ref(),
        dir.path().as_os_str(),
    ];
    let _w = Worker::start_with(9080, &args, None);
    register("http://127.0.0.1:9080");
    let session = format!("stall{}", std::process::id());

    // 1. A plain abort of the stalled attempt.
    let inv = send(&session, "hello", &format!("{session}-1"));
    let t = Instant::now();
    while requests.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the model was not called"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The attempt is open and silent (its first-chunk deadline is 60 s away).
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(status(&session)["running"], inv.as_str());
    let aborted = Instant::now();
    let ack = call(
        &session,
        "abort",
        &json!({"reason": "stop the stalled model"}),
    );
    assert_eq!(ack["aborting"], true, "{ack}");
    let r = attach(&inv);
    let took = aborted.elapsed();
    eprintln!("stalled attempt: abort to result {took:?}: {r}");
    assert_eq!(r["outcome"], "aborted", "{r}");
    assert_eq!(r["reason"], "stop the stalled model", "{r}");
    assert!(took < Duration::from_secs(2), "the abort took {took:?}");
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The abort is recorded: the run's end in the store, as `agentloop sessions` shows it.
    let shown = std::process::Command::new(cli_binary())
        .args(["sessions", "--store"])
        .arg(&store)
        .args(["show", &session])
        .output()
        .expect("agentloop sessions show");
    let shown = String::from_utf8_lossy(&shown.stdout);
    eprintln!("{shown}");
    assert!(
        shown.contains("aborted: stop the stalled model"),
        "the store records the abort: {shown}"
    );

    // 2. Two prompts queued behind a stalled one, dropped by `clear_queue`.
    let running = send(&session, "hello again", &format!("{session}-2"));
    let queued: Vec<String> = (3..5)
        .map(|i| send(&session, "queued", &format!("{session}-{i}")))
        .collect();
    let t = Instant::now();
    while requests.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        assert!(t.elapsed() < Duration::from_secs(30), "no second attempt");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(300));
    let aborted = Instant::now();
    let ack = call(
        &session,
        "abort",
        &json!({"reason": "stop all", "clear_queue": true}),
    );
    assert_eq!(ack["invocation_id"], running.as_str(), "{ack}");
    let mut dropped: Vec<String> = ack["dropped"]
        .as_array()
        .expect("dropped")
        .iter()
        .map(|v| v.as_str().expect("id").to_string())
        .collect();
    dropped.sort();
    let mut expected = queued.clone();
    expected.sort();
    assert_eq!(dropped, expected, "{ack}");
    let r = attach(&running);
    let took = aborted.elapsed();
    eprintln!("stalled attempt with clear_queue: abort to result {took:?}: {r}");
    assert_eq!(r["outcome"], "aborted", "{r}");
    assert_eq!(r["reason"], "stop all", "{r}");
    assert!(took < Duration::from_secs(2), "the abort took {took:?}");
    for q in &queued {
        let out = curl(&[&format!("{INGRESS}/restate/invocation/{q}/attach")]).expect("attach");
        // Cancelled before it started: no result (409 cancelled, or 404: not retained).
        assert!(
            (out.contains("cancel") || out.contains("404")) && !out.contains("outcome"),
            "a dropped prompt does not run: {out}"
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        requests.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "no queued prompt called the model"
    );
    let st = status(&session);
    assert!(st.get("running").is_none(), "{st}");
    assert_eq!(st["last"]["run_id"], r["run_id"], "{st}");
}
