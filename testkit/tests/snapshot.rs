//! The testkit as a user's suite uses it: deterministic agents, the scripted and the function
//! model, and trace snapshots (`testkit/tests/snapshots/`).

use agentloop_testkit::agent::{deterministic, reply, run_traced, scripted, FnModel};
use agentloop_testkit::assert_trace_snapshot;

/// The README's example ("Testing your agent").
#[tokio::test(start_paused = true)]
async fn calculator_two_steps() {
    let model = FnModel::new(|request| match request.model_call_index {
        1 => reply::tool_call("calculator", serde_json::json!({"expression": "2+3"})),
        _ => reply::text("The answer is 5."),
    });
    let agent = deterministic().model(model).build();
    let (out, trace) = run_traced(&agent, "What is 2+3?").await.expect("run");
    assert_eq!(out.result.final_text(), Some("The answer is 5."));
    assert_trace_snapshot!(trace);
}

#[tokio::test(start_paused = true)]
async fn scripted_retry_then_tool() {
    let model = scripted(
        r#"{"turns": [
            {"errors": [{"status": 429}], "text": "Let me calculate that.",
             "tool_calls": [{"name": "calculator", "arguments": {"expression": "{{prompt_expression}}"}}]},
            {"text": "The answer is {{last_tool_result}}."}]}"#,
    )
    .expect("script");
    let agent = deterministic().model(model).build();
    let (out, trace) = run_traced(&agent, "What is 6*7?").await.expect("run");
    assert_eq!(out.result.final_text(), Some("The answer is 42."));
    let snapshot = agentloop_testkit::snapshot::render(&trace);
    assert!(snapshot.lines().count() < 60, "{snapshot}");
    assert!(!snapshot.contains("0.1.0"), "no crate version: {snapshot}");
    assert_trace_snapshot!(trace);
}
