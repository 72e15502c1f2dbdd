//! Through the runtime on the scripted model: the retry decision replaceable as a pure
//! function of the typed error, recorded by name (R-EXT-3), and an `ExecuteResult` for each
//! step (R-IN-5).

use std::sync::Arc;

use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::{Agent, AgentBuilder, RunOutput, VecSink};
use agentloop::store::MemoryStore;
use agentloop::trace::{replay, Trace, TraceError};
use agentloop::{ErrorKind, ModelError};
use agentloop_core::process::default_retry_decider;
use agentloop_core::react::DeciderRegistry;
use agentloop_core::trace::replay_with;
use agentloop_core::{AgentEvent, Message, Outcome, StepEnd, ToolStatus};

const ONCE: &str = "retry_bad_request_once";

/// Retries a `bad_request` on its first failure only; otherwise the default rule.
fn retry_bad_request_once(error: &ModelError, attempt: u32) -> bool {
    (error.kind == ErrorKind::BadRequest && attempt == 1) || default_retry_decider(error, attempt)
}

fn scripted(json: &str) -> ScriptedModel {
    ScriptedModel::from_json_str(json, "inline").expect("script")
}

fn builder(script: &str, sink: &VecSink) -> AgentBuilder {
    Agent::builder()
        .builtin_tools()
        .model(scripted(script))
        .store(Arc::new(MemoryStore::new()))
        .deterministic()
        .sink(Arc::new(sink.clone()))
}

async fn run(agent: &Agent, prompt: &str) -> RunOutput {
    agent
        .run_with("s", vec![Message::user(prompt)], None, true)
        .await
        .expect("run starts")
}

fn retries(sink: &VecSink) -> usize {
    sink.events()
        .iter()
        .filter(|e| matches!(e.event, AgentEvent::Retry { .. }))
        .count()
}

/// A 400 on the first attempt, then the answer.
const BAD_REQUEST_ONCE: &str = r#"{"turns": [{"errors": [{"status": 400}], "text": "recovered"}]}"#;

#[tokio::test(start_paused = true)]
async fn r_ext_3_issue_13_a_custom_retry_decider_changes_the_run() {
    // The default rule: a bad request is not retried, the run fails.
    let sink = VecSink::default();
    let out = run(&builder(BAD_REQUEST_ONCE, &sink).build(), "hi").await;
    assert_eq!(out.result.outcome, Outcome::Failed);
    assert_eq!(out.result.reason, "bad_request");
    assert_eq!(retries(&sink), 0);

    // The custom decider retries it once: the second attempt answers.
    let sink = VecSink::default();
    let agent = builder(BAD_REQUEST_ONCE, &sink)
        .retry_decider(ONCE, retry_bad_request_once)
        .build();
    let out = run(&agent, "hi").await;
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    assert_eq!(out.result.final_text(), Some("recovered"));
    assert_eq!(retries(&sink), 1);

    // Only once: a second bad request fails the step, though retries are left.
    let sink = VecSink::default();
    let twice = r#"{"turns": [{"errors": [{"status": 400}, {"status": 400}], "text": "never"}]}"#;
    let agent = builder(twice, &sink)
        .retry_decider(ONCE, retry_bad_request_once)
        .build();
    let out = run(&agent, "hi").await;
    assert_eq!(out.result.outcome, Outcome::Failed);
    assert_eq!(out.steps()[0].attempts, 2);
    assert_eq!(retries(&sink), 1);
}

#[tokio::test(start_paused = true)]
async fn r_ext_3_issue_13_the_trace_names_the_retry_decider_and_replays_only_with_it() {
    let sink = VecSink::default();
    let agent = builder(BAD_REQUEST_ONCE, &sink)
        .retry_decider(ONCE, retry_bad_request_once)
        .build();
    let out = run(&agent, "hi").await;
    let text = out.trace.expect("recorded").to_jsonl();
    let header: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("header")).expect("json");
    assert_eq!(header["config"]["step"]["retry"]["decider"], ONCE);
    let trace = Trace::parse(&text, "retry.jsonl").expect("parses");
    assert_eq!(trace.header.config.step.retry.decider.name(), ONCE);

    let registry = DeciderRegistry::new().with_retry(ONCE, retry_bad_request_once);
    assert_eq!(replay_with(&trace, &registry).expect("registered"), None);
    match replay_with(&trace, &DeciderRegistry::new()) {
        Err(e @ TraceError::UnknownRetryDecider { .. }) => {
            assert!(e.to_string().contains("`retry_bad_request_once`"), "{e}");
        }
        other => panic!("expected UnknownRetryDecider, got {other:?}"),
    }
    // Never a silent replay with the default rule: the plain replay reports the trace as
    // diverging at its first record, having replayed nothing.
    let d = replay(&trace).expect("not identical");
    assert_eq!((d.index, d.replayed), (0, None));

    // A run with the default decider writes no name: its header reads as before.
    let sink = VecSink::default();
    let out = run(
        &builder(r#"{"turns": [{"text": "hi"}]}"#, &sink).build(),
        "hi",
    )
    .await;
    let text = out.trace.expect("recorded").to_jsonl();
    let header: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("header")).expect("json");
    assert!(header["config"]["step"]["retry"].get("decider").is_none());
}

/// Step 1: a 429, then two calls (one to a tool that does not exist: an error result).
/// Step 2: a 500 (retried), then a 400 (not): the step fails and the fallback model takes it.
const PRIMARY: &str = r#"{"turns": [
    {"errors": [{"status": 429}], "text": "Let me see.",
     "tool_calls": [{"id": "c1", "name": "nope"},
                    {"id": "c2", "name": "calculator", "arguments": {"expression": "2+3"}}]},
    {"errors": [{"status": 500}, {"status": 400}], "text": "never served"}
]}"#;

const BACKUP: &str = r#"{"turns": [
    {"text": "unused"},
    {"text": "The answer is {{last_tool_result}}."}
]}"#;

#[tokio::test(start_paused = true)]
async fn r_in_5_issue_13_each_step_has_an_execute_result() {
    let sink = VecSink::default();
    let agent = builder(PRIMARY, &sink)
        .fallback_model("backup", Arc::new(scripted(BACKUP)))
        .build();
    let out = run(&agent, "What is 2+3?").await;
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    let steps = out.steps();
    let summary: Vec<(u32, &str, u32, StepEnd, Option<ErrorKind>)> = steps
        .iter()
        .map(|s| {
            (
                s.model_call_index,
                s.model,
                s.attempts,
                s.end,
                s.error.map(|e| e.kind),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (1, "scripted", 2, StepEnd::Success, None),
            (
                2,
                "scripted",
                2,
                StepEnd::Failed,
                Some(ErrorKind::BadRequest)
            ),
            (2, "backup", 1, StepEnd::Success, None),
        ]
    );

    // Step 1: its message, both calls and both results, the failed call's included.
    let first = &steps[0];
    assert!(first.success());
    assert_eq!(first.message.map(|m| m.text.as_str()), Some("Let me see."));
    let calls: Vec<&str> = first.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(calls, ["nope", "calculator"]);
    let results: Vec<(&str, ToolStatus)> = first
        .tool_results
        .iter()
        .map(|r| (r.content.as_str(), r.status))
        .collect();
    assert_eq!(results[0].1, ToolStatus::Error);
    assert_eq!(results[1], ("5", ToolStatus::Completed));

    // The failed step: the error, no message.
    let failed = &steps[1];
    assert!(!failed.success() && failed.message.is_none());
    assert_eq!(failed.error.and_then(|e| e.http_status), Some(400));

    // The fallback's step: the answer.
    assert_eq!(
        steps[2].message.map(|m| m.text.as_str()),
        Some("The answer is 5.")
    );

    // Observers got the same records, as `step_finished` events, in order.
    let reported: Vec<_> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e.event {
            AgentEvent::StepFinished { step } => Some(*step),
            _ => None,
        })
        .collect();
    assert_eq!(reported, out.result.steps);

    // The records are in the trace, and it replays.
    let trace = out.trace.as_ref().expect("recorded");
    assert_eq!(replay(trace), None);
    insta::assert_json_snapshot!(out.result.steps);
}
