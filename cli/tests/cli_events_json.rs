//! `agentloop run --events json` as a real child process (R-EVT): every stdout line is one
//! JSON object with each key once (parsed with a parser that refuses duplicate keys, which
//! `run_start`, `run_end`, `run_error` and `agent_abort` used to break by writing `run_id`
//! twice), reads back as an `EventEnvelope`, and `tool_end` carries the call's result: the
//! output, the error's text for a failed call, and at most 16 KiB of it, flagged when cut.

use std::process::Output;

use agentloop::AgentEvent;
use agentloop::EventEnvelope;
use agentloop_core::agent_event::TOOL_END_RESULT_MAX_BYTES;
use agentloop_testkit::strict_json::parse_strict;
use serde_json::Value;

mod support;
use support::agentloop;

/// Every stdout line, parsed strictly and read back as an envelope (panics on the first line
/// that is not).
fn events(out: &Output) -> Vec<(Value, EventEnvelope)> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.trim().is_empty(), "no events: {out:?}");
    stdout
        .lines()
        .map(|line| {
            let value = parse_strict(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            let env: EventEnvelope =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            (value, env)
        })
        .collect()
}

/// `tool_end` of call `id`, as JSON.
fn tool_end<'a>(events: &'a [(Value, EventEnvelope)], id: &str) -> &'a Value {
    events
        .iter()
        .map(|(v, _)| v)
        .find(|v| v["type"] == "tool_end" && v["tool_call_id"] == id)
        .unwrap_or_else(|| panic!("no tool_end for {id}"))
}

#[test]
fn r_evt_every_json_event_line_has_each_key_once_and_tool_end_carries_the_result() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 40 KB of text ending in a multi-byte character: over the bound, cut before it.
    let big = format!("{}é", "abcdefgh\n".repeat(4_500));
    std::fs::write(dir.path().join("big.txt"), &big).expect("big.txt");
    let script = serde_json::json!({"turns": [
        {"tool_calls": [
            {"id": "c1", "name": "calculator", "arguments": {"expression": "2+3"}},
            {"id": "c2", "name": "read_file", "arguments": {"path": "missing.txt"}},
            {"id": "c3", "name": "read_file", "arguments": {"path": "big.txt"}}
        ]},
        {"text": "done"}
    ]});
    std::fs::write(dir.path().join("s.json"), script.to_string()).expect("script");
    let out = agentloop(
        dir.path(),
        &[
            "run",
            "--script",
            "s.json",
            "--root",
            ".",
            "--events",
            "json",
            "Add and read",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let events = events(&out);

    // The run's events carry the run once, in the envelope.
    let run_id = &events[0].1.run_id;
    assert!(!run_id.is_empty());
    for ty in ["run_start", "run_end"] {
        let (v, _) = events
            .iter()
            .find(|(v, _)| v["type"] == ty)
            .unwrap_or_else(|| panic!("no {ty}"));
        assert_eq!(&v["run_id"], run_id.as_str(), "{v}");
    }
    assert!(events
        .iter()
        .any(|(_, e)| matches!(e.event, AgentEvent::RunStart { .. })));

    let ok = tool_end(&events, "c1");
    assert_eq!(ok["status"], "completed", "{ok}");
    assert_eq!(ok["result"], "5", "{ok}");
    assert_eq!(ok["result_truncated"], false, "{ok}");
    assert_eq!(ok["result_bytes"], 1, "{ok}");

    let failed = tool_end(&events, "c2");
    assert_eq!(failed["status"], "error", "{failed}");
    let why = failed["result"].as_str().unwrap_or_default();
    assert!(why.contains("missing.txt"), "{failed}");
    assert_eq!(failed["result_truncated"], false, "{failed}");

    let cut = tool_end(&events, "c3");
    assert_eq!(cut["status"], "completed");
    assert_eq!(cut["result_truncated"], true);
    assert_eq!(cut["result_bytes"], big.len());
    let head = cut["result"].as_str().unwrap_or_default();
    assert_eq!(head.len(), TOOL_END_RESULT_MAX_BYTES);
    assert!(big.starts_with(head));
    // The model still got the whole file: the session log has it, and the answer step ran.
    assert!(events.iter().any(|(v, _)| v["type"] == "run_end"
        && v["outcome"] == "completed"
        && v["final_text"] == "done"));
}

#[test]
fn r_evt_a_failed_run_s_json_events_have_each_key_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A script that runs out: the run fails with `run_error`.
    let script = serde_json::json!({"turns": [
        {"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "1/"}}]}
    ]});
    std::fs::write(dir.path().join("s.json"), script.to_string()).expect("script");
    let out = agentloop(
        dir.path(),
        &["run", "--script", "s.json", "--events", "json", "Go"],
    );
    let events = events(&out);
    let (error, env) = events
        .iter()
        .find(|(v, _)| v["type"] == "run_error")
        .unwrap_or_else(|| panic!("no run_error: {out:?}"));
    assert_eq!(error["run_id"], env.run_id.as_str());
    let bad = tool_end(&events, "c1");
    assert_eq!(bad["status"], "error", "{bad}");
    assert!(
        !bad["result"].as_str().unwrap_or_default().is_empty(),
        "{bad}"
    );
}

/// The streamed parts' boundaries are events too: `agentloop run --script
/// examples/scripts/reasoning.json --events json` shows each reasoning block as
/// `reasoning_start`, its deltas, `reasoning_end`, and each tool call's arguments ending with
/// `tool_input_end`; every `request_start` carries the request's messages.
#[test]
fn reasoning_and_tool_input_blocks_have_start_and_end_events_and_requests_their_messages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/scripts/reasoning.json"
    );
    let out = agentloop(
        dir.path(),
        &[
            "run",
            "--script",
            script,
            "--events",
            "json",
            "What is 6*7?",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let events = events(&out);
    let types: Vec<&str> = events
        .iter()
        .map(|(v, _)| v["type"].as_str().unwrap_or_default())
        .collect();
    let at = |ty: &str, step: u64| {
        events
            .iter()
            .position(|(v, _)| v["type"] == ty && v["model_call_index"] == step)
            .unwrap_or_else(|| panic!("no {ty} in step {step}: {types:?}"))
    };
    for step in [1, 2] {
        let (start, end) = (at("reasoning_start", step), at("reasoning_end", step));
        let deltas: Vec<usize> = (0..events.len())
            .filter(|&i| types[i] == "reasoning_delta" && events[i].0["model_call_index"] == step)
            .collect();
        assert!(!deltas.is_empty());
        assert!(
            deltas.iter().all(|&d| start < d && d < end),
            "step {step}: {types:?}"
        );
        let request = &events[at("request_start", step)].0;
        let messages = request["messages"].as_array().expect("messages");
        assert_eq!(messages[0]["content"], "What is 6*7?");
        // The second request holds the first answer and the tool's result too.
        assert_eq!(messages.len(), if step == 1 { 1 } else { 3 }, "{request}");
    }
    let last_input = types.iter().rposition(|t| *t == "tool_input_delta");
    let input_end = types.iter().position(|t| *t == "tool_input_end");
    assert!(last_input.is_some() && input_end > last_input, "{types:?}");
    assert!(input_end < types.iter().position(|t| *t == "tool_start"));
}
