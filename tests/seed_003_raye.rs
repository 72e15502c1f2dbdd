//! Issue 13 item 3, seed 003 (Raye) through the runtime on the scripted model: the retry
//! decision replaceable as a pure function of the typed error, recorded by name (R-EXT-3).

use std::sync::Arc;

use agentloop::error::{ErrorKind, ModelError};
use agentloop::process::default_retry_decider;
use agentloop::provider::scripted::ScriptedModel;
use agentloop::react::DeciderRegistry;
use agentloop::runtime::{Agent, AgentBuilder, RunOutput, SequentialIds, VecSink, WithModel};
use agentloop::store::MemoryStore;
use agentloop::trace::{replay, replay_with, Trace, TraceError};
use agentloop::{AgentEvent, Message, Outcome};

const ONCE: &str = "retry_bad_request_once";

/// Retries a `bad_request` on its first failure only; otherwise the default rule.
fn retry_bad_request_once(error: &ModelError, attempt: u32) -> bool {
    (error.kind == ErrorKind::BadRequest && attempt == 1) || default_retry_decider(error, attempt)
}

fn scripted(json: &str) -> ScriptedModel {
    ScriptedModel::from_json_str(json, "inline").expect("script")
}

fn builder(script: &str, sink: &VecSink) -> AgentBuilder<WithModel> {
    Agent::builder()
        .builtin_tools()
        .model(scripted(script))
        .store(Arc::new(MemoryStore::new()))
        .ids(Arc::new(SequentialIds::default()))
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
