//! R-TRACE-2 / R-IN-4: the same inputs give the same trace. Four tool calls run in parallel
//! and finish in the reverse of their call order (each sleeps less than the one before); with
//! the default `ToolOrder::CallOrder` the machine still sees their completions in call order,
//! so every recording of the run is identical. `ToolOrder::Completion` shows the test can
//! fail: there the completions reach the machine in finish order.

use std::sync::Arc;
use std::time::Duration;

use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::Agent;
use agentloop::tools::{Tool, ToolContext, ToolError, ToolRegistry, ToolSpec};
use agentloop::trace::{replay, Trace};
use agentloop_core::event::Event;
use agentloop_core::trace::TraceRecord;
use async_trait::async_trait;
use serde_json::{json, Value};

/// Sleeps `ms` milliseconds, then answers with its argument.
struct Sleepy;

#[async_trait]
impl Tool for Sleepy {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "sleepy".into(),
            description: "Sleeps, then echoes".into(),
            parameters: json!({"type": "object", "properties": {"ms": {"type": "integer"}}}),
        }
    }
    async fn call(&self, _ctx: ToolContext, arguments: Value) -> Result<String, ToolError> {
        let ms = arguments["ms"].as_u64().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(format!("slept {ms}"))
    }
}

const SCRIPT: &str = r#"{"turns": [
  {"text": "four at once", "tool_calls": [
    {"id": "c1", "name": "sleepy", "arguments": {"ms": 80}},
    {"id": "c2", "name": "sleepy", "arguments": {"ms": 55}},
    {"id": "c3", "name": "sleepy", "arguments": {"ms": 30}},
    {"id": "c4", "name": "sleepy", "arguments": {"ms": 5}}
  ]},
  {"text": "done"}
]}"#;

/// Records the run; `as_completed`: tool results reach the machine as each call finishes.
async fn record(as_completed: bool) -> Trace {
    let mut tools = ToolRegistry::new();
    tools.insert(Arc::new(Sleepy));
    let builder = Agent::builder()
        .model(ScriptedModel::from_json_str(SCRIPT, "inline").expect("script"))
        .tools(tools)
        .deterministic();
    let agent = if as_completed {
        builder.tool_results_as_completed()
    } else {
        builder
    }
    .build();
    let out = agent
        .run_with("s", vec![agentloop::Message::user("go")], None, true)
        .await
        .expect("run");
    assert_eq!(out.result.final_text(), Some("done"));
    out.trace.expect("trace")
}

fn finish_order(trace: &Trace) -> Vec<String> {
    trace
        .records
        .iter()
        .filter_map(|r| match r {
            TraceRecord::Input {
                event: Event::ToolFinished { tool_call_id, .. },
                ..
            } => Some(tool_call_id.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_trace_2_parallel_tools_record_one_trace() {
    let first = record(false).await;
    assert_eq!(finish_order(&first), ["c1", "c2", "c3", "c4"]);
    assert!(replay(&first).is_none(), "the trace replays");
    for _ in 0..7 {
        let again = record(false).await;
        assert_eq!(again.to_jsonl(), first.to_jsonl(), "identical recordings");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_order_feeds_results_as_they_finish() {
    let trace = record(true).await;
    assert_eq!(finish_order(&trace), ["c4", "c3", "c2", "c1"]);
    assert!(replay(&trace).is_none());
}

/// A `before_model_call` hook that adds a system prompt.
struct AddSystem;

impl agentloop::hooks::Hooks for AddSystem {
    fn before_model_call(&self, request: &mut agentloop::model::ModelRequest) {
        request.system = Some("be brief".into());
    }
}

/// R-TRACE-1 / R-EXT-1: a hook's rewrite of the request is an input of the machine, so the
/// trace holds the request actually sent, and the trace still replays without the hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_trace_1_hook_rewrites_of_the_request_are_recorded() {
    let agent = Agent::builder()
        .model(ScriptedModel::demo())
        .builtin_tools()
        .hooks(Arc::new(AddSystem))
        .deterministic()
        .build();
    let out = agent
        .run_with(
            "s",
            vec![agentloop::Message::user("What is 2+3?")],
            None,
            true,
        )
        .await
        .expect("run");
    assert_eq!(out.result.final_text(), Some("The answer is 5."));
    let trace = out.trace.expect("trace");
    let rewrites: Vec<_> = trace
        .records
        .iter()
        .filter_map(|r| match r {
            TraceRecord::Input {
                event: Event::RequestRewritten { request, .. },
                ..
            } => Some(request.system.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        rewrites,
        [Some("be brief".to_string()), Some("be brief".to_string())],
        "one recorded rewrite per model call"
    );
    assert!(replay(&trace).is_none(), "replays without the hook");

    // Without a hook there is nothing to record.
    let plain = Agent::builder()
        .model(ScriptedModel::demo())
        .deterministic()
        .build();
    let out = plain
        .run_with(
            "s",
            vec![agentloop::Message::user("What is 2+3?")],
            None,
            true,
        )
        .await
        .expect("run");
    let trace = out.trace.expect("trace");
    assert!(!trace.to_jsonl().contains("request_rewritten"));
}
