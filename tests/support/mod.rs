//! Shared harness for the session tests: a slowed-down scripted model (virtual time makes the
//! delays free and deterministic), sleeping tools, and event helpers.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use agentloop::model::{DeltaStream, Model, ModelRequest};
use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::{Agent, AgentBuilder};
use agentloop::session::{Session, SessionConfig, Subscription, SubscriptionItem};
use agentloop::store::MemoryStore;
use agentloop::tools::{Tool, ToolContext, ToolError, ToolSpec};
use agentloop::AgentEvent;
use agentloop::EventEnvelope;
use agentloop::ModelError;
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{json, Value};

/// A scripted model whose response opens after `open_ms` and yields a delta every `delta_ms`.
pub struct Slow {
    pub name: String,
    pub inner: ScriptedModel,
    pub open_ms: u64,
    pub delta_ms: u64,
}

impl Slow {
    pub fn new(script: &str) -> Self {
        Slow {
            name: "scripted".into(),
            inner: ScriptedModel::from_json_str(script, "inline").expect("valid script"),
            open_ms: 100,
            delta_ms: 50,
        }
    }
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }
}

#[async_trait]
impl Model for Slow {
    fn name(&self) -> String {
        self.name.clone()
    }
    async fn stream(&self, request: ModelRequest) -> Result<DeltaStream, ModelError> {
        tokio::time::sleep(Duration::from_millis(self.open_ms)).await;
        let inner = self.inner.stream(request).await?;
        let d = self.delta_ms;
        Ok(Box::pin(inner.then(move |item| async move {
            tokio::time::sleep(Duration::from_millis(d)).await;
            item
        })))
    }
}

/// A tool that sleeps `ms` and returns `content` (or "done").
pub struct SleepTool {
    pub name: &'static str,
    pub ms: u64,
    pub killable: bool,
    pub content: Option<String>,
}

impl SleepTool {
    pub fn new(name: &'static str, ms: u64) -> Self {
        SleepTool {
            name,
            ms,
            killable: true,
            content: None,
        }
    }
    pub fn immune(mut self) -> Self {
        self.killable = false;
        self
    }
    pub fn returning(mut self, content: String) -> Self {
        self.content = Some(content);
        self
    }
}

#[async_trait]
impl Tool for SleepTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.into(),
            description: format!("sleeps {} ms", self.ms),
            parameters: json!({"type": "object"}),
        }
    }
    fn killable(&self) -> bool {
        self.killable
    }
    async fn call(&self, _ctx: ToolContext, _args: Value) -> Result<String, ToolError> {
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        Ok(self.content.clone().unwrap_or_else(|| "done".into()))
    }
}

/// An agent builder on `model` with the built-in tools, deterministic ids and an in-memory
/// store.
pub fn builder(model: impl Model + 'static) -> AgentBuilder {
    Agent::builder()
        .builtin_tools()
        .model(model)
        .store(Arc::new(MemoryStore::new()))
        .deterministic()
}

/// A session over `agent` with a ring buffer of 1024 events.
pub fn session(agent: Agent) -> Session {
    Session::spawn(agent, SessionConfig::new("s").event_buffer_size(1024))
}

/// Waits for the first event of type `ty`.
pub async fn wait_for(sub: &mut Subscription, ty: &str) -> EventEnvelope {
    loop {
        match sub.recv().await {
            Some(SubscriptionItem::Event(e)) if e.event.type_name() == ty => return e,
            Some(_) => continue,
            None => panic!("session closed before {ty}"),
        }
    }
}

/// Every event so far (from the ring buffer).
pub fn history(s: &Session) -> Vec<EventEnvelope> {
    s.recent_events()
}

/// Type names of the events so far, without the noisy streaming and transition events.
pub fn names(events: &[EventEnvelope]) -> Vec<String> {
    events
        .iter()
        .map(|e| e.event.type_name())
        .filter(|n| {
            !matches!(
                n.as_str(),
                "state_changed" | "text_delta" | "reasoning_delta"
            )
        })
        .collect()
}

pub fn count(events: &[EventEnvelope], ty: &str) -> usize {
    events.iter().filter(|e| e.event.type_name() == ty).count()
}

/// One line per event for snapshots: type and the interesting fields, no timestamps.
pub fn transcript(events: &[EventEnvelope]) -> String {
    events
        .iter()
        .filter(|e| {
            !matches!(
                e.event,
                AgentEvent::TextDelta { .. }
                    | AgentEvent::ReasoningDelta { .. }
                    | AgentEvent::ToolMetrics { .. }
            )
        })
        .map(|e| {
            let mut v = serde_json::to_value(&e.event).unwrap_or(Value::Null);
            if let Some(o) = v.as_object_mut() {
                o.remove("type");
                o.remove("usage");
                o.remove("arguments");
                // request_start's context: the messages are snapshotted where they are made.
                o.remove("messages");
            }
            format!("{} {} {}", e.run_id, e.event.type_name(), v)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A tool that panics with a `String` payload (`"formatted"`), a `&'static str` payload
/// (`"static"`) or a non-string payload (`"opaque"`), as chosen by its `kind` argument
/// (R-IN-3: a panic is a tool error result, never a machine error).
pub struct PanicTool;

#[async_trait]
impl Tool for PanicTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "boom".into(),
            description: "panics".into(),
            parameters: json!({"type": "object", "properties": {"kind": {"type": "string"}}}),
        }
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<String, ToolError> {
        match args["kind"].as_str() {
            Some("static") => panic!("static boom"),
            Some("opaque") => std::panic::panic_any(42_u32),
            _ => panic!("formatted boom in {}", ctx.call_id),
        }
    }
}

/// A tool that sleeps the `ms` of its arguments, records its call id in `finished` when it
/// finishes, and answers `slept <ms> (<call id>)`. Calls with decreasing `ms` finish in the
/// reverse of their call order.
pub struct EchoSleep {
    pub finished: Arc<std::sync::Mutex<Vec<String>>>,
}

impl EchoSleep {
    pub fn new() -> (Arc<Self>, Arc<std::sync::Mutex<Vec<String>>>) {
        let finished = Arc::new(std::sync::Mutex::new(Vec::new()));
        (
            Arc::new(EchoSleep {
                finished: finished.clone(),
            }),
            finished,
        )
    }
}

#[async_trait]
impl Tool for EchoSleep {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "sleepy".into(),
            description: "sleeps, then echoes".into(),
            parameters: json!({"type": "object", "properties": {"ms": {"type": "integer"}}}),
        }
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<String, ToolError> {
        let ms = args["ms"].as_u64().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.finished.lock().unwrap().push(ctx.call_id.clone());
        Ok(format!("slept {ms} ({})", ctx.call_id))
    }
}

/// A tool that blocks a blocking-pool thread (a stuck file system call, say) until the test
/// sends on the returned channel; it sets the returned flag if it ever gets to finish.
pub struct BlockingTool {
    pub release: std::sync::Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    pub finished: Arc<std::sync::atomic::AtomicBool>,
}

impl BlockingTool {
    pub fn new() -> (
        Arc<Self>,
        std::sync::mpsc::Sender<()>,
        Arc<std::sync::atomic::AtomicBool>,
    ) {
        let (tx, rx) = std::sync::mpsc::channel();
        let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
        (
            Arc::new(BlockingTool {
                release: std::sync::Mutex::new(Some(rx)),
                finished: finished.clone(),
            }),
            tx,
            finished,
        )
    }
}

#[async_trait]
impl Tool for BlockingTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "stuck".into(),
            description: "blocks a thread until released".into(),
            parameters: json!({"type": "object"}),
        }
    }
    async fn call(&self, _ctx: ToolContext, _args: Value) -> Result<String, ToolError> {
        let rx = self.release.lock().unwrap().take();
        let finished = self.finished.clone();
        tokio::task::spawn_blocking(move || {
            if let Some(rx) = rx {
                let _ = rx.recv();
            }
            finished.store(true, std::sync::atomic::Ordering::SeqCst);
        })
        .await
        .map_err(|e| ToolError::Failed(e.to_string()))?;
        Ok("unblocked".into())
    }
}

/// Runs `agent` on session `s` with the user input "go", recording a trace.
pub async fn run_go(agent: &Agent) -> agentloop::runtime::RunOutput {
    agent
        .run_with("s", vec![agentloop::Message::user("go")], None, true)
        .await
        .expect("run starts")
}

/// The tool results among session `s`'s stored entries, in store order.
pub async fn stored_results(store: &MemoryStore) -> Vec<agentloop::ToolResult> {
    use agentloop::store::{Entry, SessionStore};
    store
        .load("s")
        .await
        .expect("load")
        .into_iter()
        .filter_map(|e| match e {
            Entry::ToolResult { result, .. } => Some(result),
            _ => None,
        })
        .collect()
}

/// An agent on `model` with `tools`, an in-memory store and an event sink the test keeps;
/// `configure` sets the rest (timeouts, say).
pub fn agent_with_tools(
    model: impl Model + 'static,
    tools: Vec<Arc<dyn Tool>>,
    configure: impl FnOnce(AgentBuilder) -> AgentBuilder,
) -> (Agent, Arc<MemoryStore>, agentloop::runtime::VecSink) {
    let mut registry = agentloop::tools::ToolRegistry::new();
    for t in tools {
        registry.insert(t);
    }
    let store = Arc::new(MemoryStore::new());
    let sink = agentloop::runtime::VecSink::default();
    let agent = builder(model)
        .tools(registry)
        .store(store.clone())
        .sink(Arc::new(sink.clone()));
    let agent = configure(agent).build();
    (agent, store, sink)
}
