//! R-OUT-3, a decider that can see what it decides on: the observation carries the committed
//! message (text, tool calls, finish reason), a closure can be the decision function, it is
//! recorded in the trace by the name it is registered under, and replay resolves that name
//! from a registry (a typed error naming it when the registry lacks it).

use std::sync::Arc;

use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::Agent;
use agentloop::store::MemoryStore;
use agentloop::trace::{Trace, TraceError};
use agentloop::Message;
use agentloop::Outcome;
use agentloop_core::react::{default_decider, DeciderRef, DeciderRegistry, Decision, Observation};
use agentloop_core::trace::replay_with;

/// Three steps: a tool call, an answer holding the completion marker that still calls a tool
/// (the default decider would go on), and a last answer.
const SCRIPT: &str = r#"{"turns": [
    {"text": "working", "tool_calls": [{"name": "calculator", "arguments": {"expression": "2+3"}}]},
    {"text": "5, DONE", "tool_calls": [{"name": "calculator", "arguments": {"expression": "5+0"}}]},
    {"text": "never reached"}
]}"#;

/// Stops as soon as the committed answer contains `marker`; decides like the default
/// otherwise. A closure: it captures the marker.
fn until(marker: &str) -> impl Fn(&Observation<'_>) -> Decision + Send + Sync + 'static {
    let marker = marker.to_string();
    move |o: &Observation<'_>| match o.message {
        Some(m) if m.text.contains(&marker) => Decision::Stop,
        _ => default_decider(o),
    }
}

fn agent(decider: Option<DeciderRef>) -> Agent {
    let model = ScriptedModel::from_json_str(SCRIPT, "inline").expect("valid script");
    Agent::builder()
        .builtin_tools()
        .model(model)
        .store(Arc::new(MemoryStore::new()))
        .deterministic()
        .configure(|c| {
            if let Some(d) = decider {
                c.decider = d;
            }
        })
        .build()
}

#[tokio::test(start_paused = true)]
async fn r_out_3_a_closure_decider_stops_at_the_step_whose_answer_holds_the_marker() {
    let agent = agent(Some(DeciderRef::new("until_done", until("DONE"))));
    let out = agent
        .run_with("s", vec![Message::user("add")], None, true)
        .await
        .expect("run starts");
    assert_eq!(out.result.outcome, Outcome::Completed);
    assert_eq!(out.result.reason, "stopped", "the closure stopped the run");
    assert_eq!(out.result.steps.len(), 2, "it ended at the DONE step");
    let last = out.result.messages.iter().rev().find_map(|m| match m {
        Message::Assistant(a) => Some(a.text.clone()),
        _ => None,
    });
    assert_eq!(last.as_deref(), Some("5, DONE"));

    // The trace names the closure; it replays with the same closure registered by name.
    let trace = out.trace.expect("trace");
    let parsed = Trace::parse(&trace.to_jsonl(), "until_done.jsonl").expect("parses");
    assert_eq!(parsed.header.config.decider.name(), "until_done");
    let registry = DeciderRegistry::new().with("until_done", until("DONE"));
    assert_eq!(replay_with(&parsed, &registry).expect("registered"), None);

    // Without it: a typed error naming the decider, never a replay with another function.
    match replay_with(&parsed, &DeciderRegistry::new()) {
        Err(TraceError::UnknownDecider { name, .. }) => assert_eq!(name, "until_done"),
        other => panic!("expected UnknownDecider, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn r_out_3_the_default_decider_goes_past_the_marker() {
    let out = agent(None)
        .run_with("s", vec![Message::user("add")], None, true)
        .await
        .expect("run starts");
    assert_eq!(out.result.reason, "final_answer");
    assert_eq!(out.result.steps.len(), 3);
}
