//! Typed answers on the worker: a prompt with an `output` schema (as `agentloop run
//! --output-schema`) gets its final answer checked; an invalid one is sent back once and a
//! valid retry completes the run; two invalid answers fail it with `output_invalid`.
//!
//! Mandatory when `CI` is set; otherwise skipped, with the reason printed, unless
//! `AGENTLOOP_RESTATE_TEST=1` is set.

#![allow(clippy::disallowed_methods)]

mod support;

use serde_json::json;
use support::*;

#[test]
fn restate_typed_answers_are_checked() {
    if !wanted() {
        return;
    }
    let _ports = ports_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let _server = Server::start(&dir.path().join("restate"));
    let script = dir.path().join("script.json");
    let turns = json!({"turns": [
        {"text": "{\"answer\": \"five\"}"},
        {"text": "{\"answer\": 5}"},
        {"text": "not JSON"},
        {"text": "{\"answer\": []}"},
    ]});
    std::fs::write(&script, turns.to_string()).expect("script");
    let _w = Worker::start(9080, &script, dir.path(), None);
    register("http://127.0.0.1:9080");
    let output = json!({
        "name": "Answer",
        "schema": {"type": "object", "properties": {"answer": {"type": "integer"}},
                   "required": ["answer"]},
    });
    let session = format!("typed{}", std::process::id());

    // 1. "five" is not an integer: sent back, and the retry's 5 is the answer.
    let r = call(
        &session,
        "prompt",
        &json!({"prompt": "What is 2+3?", "output": output}),
    );
    eprintln!("typed answer after one invalid one: {r}");
    assert_eq!(r["outcome"], "completed", "{r}");
    assert_eq!(r["text"], "{\"answer\": 5}", "{r}");
    assert_eq!(r["iterations"], 2, "{r}");

    // 2. Two invalid answers (not JSON, then the wrong type): the run fails.
    let r = call(
        &session,
        "prompt",
        &json!({"prompt": "And again?", "output": output}),
    );
    eprintln!("two invalid typed answers: {r}");
    assert_eq!(r["outcome"], "failed", "{r}");
    assert_eq!(r["reason"], "output_invalid", "{r}");
}
