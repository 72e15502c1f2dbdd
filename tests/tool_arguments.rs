//! R-TOOL-1: tool arguments are checked against the tool's JSON Schema before
//! the call runs, on the real runtime with the offline scripted model.
//!
//! The first step's calls break their schemas (a typed tool's `n` is a string, a raw-schema
//! tool misses a required field) or name a tool that does not exist but is close to one; each
//! gets an error result that tells the model what to fix, and no tool runs. The second step's
//! corrected calls run, once each, and the final answer uses their results. The trace records
//! the runtime's verdicts with the `done` event and replays without a validator, also after a
//! round trip through its JSON Lines form.

mod durable_support;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use agentloop::runtime::{Agent, RunOutput, VecSink};
use agentloop::store::{MemoryStore, SessionStore};
use agentloop::tools::{Tool, ToolContext, ToolError, ToolSpec, TypedTool};
use agentloop::trace::Trace;
use agentloop::{AgentEvent, Outcome};
use agentloop::{Message, ToolResult, ToolStatus};
use agentloop_core::chart::ToolCallRow;
use agentloop_core::event::Event;
use agentloop_core::session_log;
use agentloop_core::step::Transition;
use agentloop_core::trace::TraceRecord;
use async_trait::async_trait;
use durable_support::{model, model_requests};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

/// A typed tool (schema from `schemars`) that counts its runs.
struct Counter(Arc<AtomicUsize>);

#[derive(Deserialize, JsonSchema)]
struct CounterArgs {
    /// How far to count.
    n: i64,
}

#[async_trait]
impl TypedTool for Counter {
    type Args = CounterArgs;
    const NAME: &'static str = "counter";
    const DESCRIPTION: &'static str = "Counts to n.";
    async fn run(&self, _ctx: ToolContext, args: CounterArgs) -> Result<String, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(format!("counted to {}", args.n))
    }
}

/// A raw tool with a hand-written schema that counts its runs (nothing but the runtime's check
/// stands between it and bad arguments).
struct Shout(Arc<AtomicUsize>);

#[async_trait]
impl Tool for Shout {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "shout".into(),
            description: "Shouts the text.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"text": {"type": "string", "minLength": 1}},
                "required": ["text"]
            }),
        }
    }
    async fn call(&self, _ctx: ToolContext, args: Value) -> Result<String, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(args["text"].as_str().unwrap_or("?").to_uppercase())
    }
}

struct Fixture {
    agent: Agent,
    store: Arc<MemoryStore>,
    sink: VecSink,
    counted: Arc<AtomicUsize>,
    shouted: Arc<AtomicUsize>,
}

const FINAL: &str = "done: {{last_tool_result}}";

fn fixture() -> Fixture {
    let counted = Arc::new(AtomicUsize::new(0));
    let shouted = Arc::new(AtomicUsize::new(0));
    let script = json!({"turns": [
        {"text": "first try", "tool_calls": [
            {"id": "bad_n", "name": "counter", "arguments": {"n": "abc"}},
            {"id": "no_text", "name": "shout", "arguments": {"loud": true}},
            {"id": "typo", "name": "Counter", "arguments": {"n": 1}}
        ]},
        {"text": "repaired", "tool_calls": [
            {"id": "good_text", "name": "shout", "arguments": {"text": "hi"}},
            {"id": "good_n", "name": "counter", "arguments": {"n": 4}}
        ]},
        {"text": FINAL}
    ]});
    let (agent, store, sink) = support::agent_with_tools(
        model(script),
        vec![
            Arc::new(Counter(counted.clone())),
            Arc::new(Shout(shouted.clone())),
        ],
        |b| b,
    );
    Fixture {
        agent,
        store,
        sink,
        counted,
        shouted,
    }
}

async fn run(f: &Fixture) -> RunOutput {
    support::run_go(&f.agent).await
}

/// R-TOOL-1: schema-breaking calls get error results naming each bad field and do not run;
/// an unknown name close to a tool's gets the suggestion; the corrected calls run once each and
/// the final answer uses their result; the trace replays.
#[tokio::test]
async fn r_tool_1_schema_violations_are_reported_and_the_corrected_call_runs_once() {
    let f = fixture();
    let out = run(&f).await;
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    assert_eq!(out.result.final_text(), Some("done: counted to 4"));

    // Each tool ran once: only the corrected calls.
    assert_eq!(f.counted.load(Ordering::SeqCst), 1);
    assert_eq!(f.shouted.load(Ordering::SeqCst), 1);

    let stored = support::stored_results(&f.store).await;
    let ids: Vec<&str> = stored.iter().map(|r| r.tool_call_id.as_str()).collect();
    assert_eq!(ids, ["bad_n", "no_text", "typo", "good_text", "good_n"]);
    let [bad_n, no_text, typo, good_text, good_n] = &stored[..] else {
        unreachable!()
    };
    assert_eq!(bad_n.status, ToolStatus::Error);
    assert_eq!(
        bad_n.content,
        "invalid arguments for counter (they do not match its JSON Schema):\n\
         - /n: invalid type: string \"abc\", expected i64\n\
         The tool did not run; call it again with corrected arguments."
    );
    assert_eq!(no_text.status, ToolStatus::Error);
    assert!(
        no_text
            .content
            .contains("- (root): \"text\" is a required property"),
        "{}",
        no_text.content
    );
    assert_eq!(typo.status, ToolStatus::Error);
    assert_eq!(typo.content, "unknown tool: Counter; did you mean counter?");
    assert_eq!(
        (good_text.status, good_text.content.as_str()),
        (ToolStatus::Completed, "HI")
    );
    assert_eq!(
        (good_n.status, good_n.content.as_str()),
        (ToolStatus::Completed, "counted to 4")
    );

    // The model was told: the second request carries the error results.
    let trace = out.trace.as_ref().expect("trace");
    let requests = model_requests(trace);
    let sent: Vec<&ToolResult> = requests[1]
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(sent, [bad_n, no_text, typo]);

    // No tool_start for a rejected call; each rejected call has one tool_end (error).
    let events = f.sink.events();
    let started: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::ToolStart { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(started, ["good_text", "good_n"]);

    let entries = f.store.load("s").await.expect("load");
    assert_eq!(session_log::check(&entries), [], "the session log pairs up");
    assert_replays(trace);
}

/// The verdicts are data of the recorded `done` input (only the first step's), the row taken
/// for the two rejected calls is `commit_schema_invalid`, and the trace replays as recorded and after a JSON Lines round
/// trip (R-TOOL-1, R-TRACE-2).
fn assert_replays(trace: &Trace) {
    let verdicts: Vec<Vec<String>> = trace
        .records
        .iter()
        .filter_map(|r| match r {
            TraceRecord::Input {
                event: Event::Done {
                    rejected_arguments, ..
                },
                ..
            } => Some(
                rejected_arguments
                    .iter()
                    .map(|v| v.tool_call_id.clone())
                    .collect(),
            ),
            _ => None,
        })
        .collect();
    assert_eq!(
        verdicts,
        [vec!["bad_n".to_string(), "no_text".into()], vec![], vec![]]
    );
    let rejected: Vec<&str> = trace
        .records
        .iter()
        .filter_map(|r| match r {
            TraceRecord::Transition {
                transition:
                    Transition::ToolCall {
                        call,
                        row: ToolCallRow::CommitSchemaInvalid,
                        ..
                    },
                ..
            } => Some(call.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(rejected, ["bad_n", "no_text"]);
    let jsonl = trace.to_jsonl();
    assert_eq!(agentloop::trace::replay(trace), None, "the trace replays");
    let reread = Trace::parse(&jsonl, "test").expect("the trace parses");
    assert_eq!(&reread, trace);
    assert_eq!(
        agentloop::trace::replay(&reread),
        None,
        "the reread trace replays"
    );
}
