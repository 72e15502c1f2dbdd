//! R-IDEM-7, every request well paired whatever built it, on the real runtime: a custom
//! context manager whose history holds a call without a result and an orphan result, and a
//! custom compactor that returns such a context, are repaired in the machine before the next
//! model request — `session_repaired` events, and a well-paired request.

mod durable_support;

use std::sync::{Arc, Mutex};

use agentloop::model::{DeltaStream, Model, ModelRequest};
use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::{Agent, Compactor, ContextManager, RunContext, VecSink};
use agentloop::store::MemoryStore;
use agentloop::tools::ToolRegistry;
use agentloop::EventEnvelope;
use agentloop::ModelError;
use agentloop::{AgentEvent, Outcome};
use agentloop::{AssistantMessage, Message, ToolCall, ToolResult, ToolStatus};
use agentloop_core::session_log::{ContextSource, Repair};
use async_trait::async_trait;
use durable_support::*;
use serde_json::json;

/// A scripted model that keeps every request it receives.
struct Recording {
    inner: ScriptedModel,
    requests: Arc<Mutex<Vec<ModelRequest>>>,
}

#[async_trait]
impl Model for Recording {
    fn name(&self) -> String {
        "scripted".into()
    }
    async fn stream(&self, request: ModelRequest) -> Result<DeltaStream, ModelError> {
        self.requests.lock().unwrap().push(request.clone());
        self.inner.stream(request).await
    }
}

fn assistant_calling(id: &str) -> Message {
    Message::Assistant(AssistantMessage {
        text: "calling".into(),
        tool_calls: vec![ToolCall {
            id: id.into(),
            name: "work".into(),
            arguments: json!({}),
            invalid_arguments: None,
        }],
        ..Default::default()
    })
}

fn tool_result(id: &str) -> Message {
    Message::Tool(ToolResult {
        tool_call_id: id.into(),
        name: "work".into(),
        content: format!("result of {id}"),
        status: ToolStatus::Completed,
    })
}

/// A history with an orphan result (`ghost`, answering nothing) and a call without a result
/// (`lost`).
fn unpaired() -> Vec<Message> {
    vec![
        Message::user("earlier"),
        tool_result("ghost"),
        assistant_calling("lost"),
        Message::user("then"),
    ]
}

/// The repairs `unpaired()` needs, made in `source`.
fn expected(source: ContextSource) -> Vec<Repair> {
    vec![
        Repair::ContextResultDropped {
            index: 1,
            source,
            tool_call_id: "ghost".into(),
        },
        Repair::ContextResultFilled {
            index: 2,
            source,
            tool_call_id: "lost".into(),
            name: "work".into(),
        },
    ]
}

/// A context manager that returns the default history followed by `unpaired()`.
struct Unpaired;

#[async_trait]
impl ContextManager for Unpaired {
    async fn build_context(&self, context: &mut RunContext<'_>) {
        context.messages.extend(unpaired());
    }
}

/// A compactor whose new context is `unpaired()`.
struct UnpairedCompactor;

#[async_trait]
impl Compactor for UnpairedCompactor {
    async fn compact(
        &self,
        messages: &[Message],
        _budget_tokens: Option<u64>,
        _max_messages: Option<usize>,
    ) -> Result<(Vec<Message>, usize), String> {
        Ok((unpaired(), messages.len()))
    }
}

/// Every call of a request is answered exactly once, in the block of tool messages right
/// after its assistant message, and every tool message answers such a call.
fn assert_well_paired(messages: &[Message]) {
    let mut i = 0;
    while let Some(m) = messages.get(i) {
        i += 1;
        match m {
            Message::Assistant(a) => {
                let mut answered = Vec::new();
                while let Some(Message::Tool(r)) = messages.get(i) {
                    answered.push(r.tool_call_id.clone());
                    i += 1;
                }
                let calls: Vec<String> = a.tool_calls.iter().map(|c| c.id.clone()).collect();
                assert_eq!(answered, calls, "unpaired request: {messages:#?}");
            }
            Message::Tool(r) => panic!("orphan result {} sent: {messages:#?}", r.tool_call_id),
            _ => {}
        }
    }
}

fn repair_events(events: &[EventEnvelope]) -> Vec<Repair> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::SessionRepaired { repair } => Some(repair.clone()),
            _ => None,
        })
        .collect()
}

/// An agent whose model serves `script` and records its requests, with `manager` and
/// `compactor` (and a compaction threshold of 4 messages with the compactor).
fn agent(
    script: serde_json::Value,
    sink: &VecSink,
    manager: Option<Arc<dyn ContextManager>>,
    compactor: Option<Arc<dyn Compactor>>,
) -> (Agent, Arc<Mutex<Vec<ModelRequest>>>) {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (work, _) = CountingTool::new("work", false);
    let mut tools = ToolRegistry::new();
    tools.insert(work);
    let mut builder = Agent::builder()
        .model(Recording {
            inner: model(script),
            requests: requests.clone(),
        })
        .tools(tools)
        .store(Arc::new(MemoryStore::new()))
        .sink(Arc::new(sink.clone()))
        .deterministic();
    if let Some(manager) = manager {
        builder = builder.context_manager(manager);
    }
    if let Some(compactor) = compactor {
        builder = builder.compactor(compactor).compact_after_messages(4);
    }
    (builder.build(), requests)
}

#[tokio::test]
async fn r_idem_7_a_custom_context_managers_unpaired_history_is_repaired_before_the_first_request()
{
    let sink = VecSink::default();
    let (agent, requests) = agent(
        json!({"turns": [{"text": "fine"}]}),
        &sink,
        Some(Arc::new(Unpaired)),
        None,
    );

    let out = agent.run("s", "now").await.unwrap();
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);

    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    assert_well_paired(&requests[0].messages);
    let filled = requests[0].messages.iter().find_map(|m| match m {
        Message::Tool(r) if r.tool_call_id == "lost" => Some(r.status),
        _ => None,
    });
    assert_eq!(filled, Some(ToolStatus::OutcomeUnknown));

    let events = sink.events();
    assert_eq!(repair_events(&events), expected(ContextSource::Start));
    let position = |pred: &dyn Fn(&AgentEvent) -> bool| events.iter().position(|e| pred(&e.event));
    assert!(
        position(&|e| matches!(e, AgentEvent::SessionRepaired { .. }))
            < position(&|e| matches!(e, AgentEvent::RequestStart { .. }))
    );
    let json = serde_json::to_value(
        events
            .iter()
            .find(|e| matches!(e.event, AgentEvent::SessionRepaired { .. }))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(json["type"], "session_repaired");
    assert_eq!(json["repair"]["kind"], "context_result_dropped");
    assert_eq!(json["repair"]["source"], "start");
}

#[tokio::test]
async fn r_idem_7_a_custom_compactors_unpaired_context_is_repaired_before_the_next_request() {
    let sink = VecSink::default();
    let script = json!({"turns": [
        {"text": "first", "tool_calls": [{"id": "w1", "name": "work"}]},
        {"text": "second", "tool_calls": [{"id": "w2", "name": "work"}]},
        {"text": "done"}
    ]});
    let (agent, requests) = agent(script, &sink, None, Some(Arc::new(UnpairedCompactor)));

    let out = agent.run("s", "go").await.unwrap();
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);

    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    for r in &requests {
        assert_well_paired(&r.messages);
    }
    assert!(requests[2]
        .messages
        .iter()
        .any(|m| matches!(m, Message::Tool(r) if r.tool_call_id == "lost")));
    assert_eq!(
        repair_events(&sink.events()),
        expected(ContextSource::Compaction)
    );
}
