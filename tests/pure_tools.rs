//! Pure tools (R-TOOL-6): a tool that declares `pure()` is run once per distinct
//! call in a session; an identical call in a later step, or a later run of the same session,
//! is answered from the cache with a `tool_cache_hit` event, and the trace replays.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use agentloop::provider::scripted::ScriptedModel;
use agentloop::tools::{Tool, ToolContext, ToolError, TypedTool};
use agentloop::AgentEvent;
use agentloop::{Message, ToolStatus};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use support::*;

#[derive(Deserialize, JsonSchema)]
struct LookupArgs {
    key: String,
}

/// A pure lookup that counts how often it really ran.
struct Lookup {
    runs: Arc<AtomicUsize>,
    pure: bool,
}

#[async_trait]
impl TypedTool for Lookup {
    type Args = LookupArgs;
    const NAME: &'static str = "lookup";
    const DESCRIPTION: &'static str = "Looks a key up.";

    fn pure(&self) -> bool {
        self.pure
    }

    async fn run(&self, _ctx: ToolContext, args: LookupArgs) -> Result<String, ToolError> {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(format!("{}={n}", args.key))
    }
}

const SCRIPT: &str = r#"{"turns": [
    {"tool_calls": [{"id": "a1", "name": "lookup", "arguments": {"key": "a"}}]},
    {"tool_calls": [{"id": "a2", "name": "lookup", "arguments": {"key": "a"}},
                    {"id": "b1", "name": "lookup", "arguments": {"key": "b"}}]},
    {"text": "first run done"},
    {"tool_calls": [{"id": "a3", "name": "lookup", "arguments": {"key": "a"}}]},
    {"text": "second run done"}
]}"#;

fn agent(
    pure: bool,
) -> (
    agentloop::runtime::Agent,
    Arc<AtomicUsize>,
    agentloop::runtime::VecSink,
) {
    let runs = Arc::new(AtomicUsize::new(0));
    let tool: Arc<dyn Tool> = Arc::new(Lookup {
        runs: runs.clone(),
        pure,
    });
    let model = ScriptedModel::from_json_str(SCRIPT, "inline").expect("script");
    let (agent, _store, sink) = agent_with_tools(model, vec![tool], |b| b);
    (agent, runs, sink)
}

fn hits(sink: &agentloop::runtime::VecSink) -> Vec<(String, String)> {
    sink.events()
        .into_iter()
        .filter_map(|e| match e.event {
            AgentEvent::ToolCacheHit {
                tool_call_id,
                cached_from,
                ..
            } => Some((tool_call_id, cached_from)),
            _ => None,
        })
        .collect()
}

fn result_of(messages: &[Message], id: &str) -> (ToolStatus, String) {
    messages
        .iter()
        .find_map(|m| match m {
            Message::Tool(r) if r.tool_call_id == id => Some((r.status, r.content.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {id}"))
}

#[tokio::test]
async fn r_tool_6_an_identical_pure_call_is_served_from_the_cache_across_steps_and_runs() {
    let (agent, runs, sink) = agent(true);
    let first = agent.run("s", "go").await.expect("first run");
    assert_eq!(first.result.reason, "final_answer");
    // a1 and b1 ran; a2 (same key as a1, a later step) came from the cache.
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(hits(&sink), vec![("a2".to_string(), "a1".to_string())]);
    assert_eq!(
        result_of(&first.result.messages, "a2"),
        (ToolStatus::Completed, "a=1".to_string())
    );
    // A later run of the same session finds the result in the session's history.
    let second = agent.run("s", "again").await.expect("second run");
    assert_eq!(second.result.final_text(), Some("second run done"));
    assert_eq!(runs.load(Ordering::SeqCst), 2, "a3 did not run either");
    assert_eq!(
        result_of(&second.result.messages, "a3"),
        (ToolStatus::Completed, "a=1".to_string())
    );
    assert_eq!(hits(&sink).len(), 2);
}

#[tokio::test]
async fn r_tool_6_a_tool_that_is_not_pure_runs_every_time() {
    let (agent, runs, sink) = agent(false);
    agent.run("s", "go").await.expect("first run");
    agent.run("s", "again").await.expect("second run");
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    assert!(hits(&sink).is_empty());
}

#[tokio::test]
async fn r_tool_6_a_cached_answer_is_in_the_trace_and_replays() {
    let (agent, runs, _sink) = agent(true);
    let out = agent
        .run_with("s", vec![Message::user("go")], None, true)
        .await
        .expect("run");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let trace = out.trace.expect("a trace");
    let text = trace.to_jsonl();
    assert!(
        text.contains("\"row\":\"CommitCached\""),
        "the row is recorded"
    );
    assert!(text.contains("tool_cache_hit"));
    assert_eq!(
        agentloop::trace::replay(&trace),
        None,
        "replays without divergence"
    );
}
