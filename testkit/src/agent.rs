//! Deterministic agents for users' own test suites (feature `runtime`): run ids `run-1`,
//! `run-2`, … and a clock on tokio's time, virtual under `#[tokio::test(start_paused = true)]`
//! ([`AgentBuilder::deterministic`]), an in-memory store, an event sink that keeps every
//! event ([`VecSink`]), and two models — a scripted
//! one ([`scripted`]) and a function from request to reply ([`FnModel`]).
//!
//! ```no_run
//! # async fn demo() {
//! use agentloop_testkit::agent::{deterministic, reply, run_traced, FnModel};
//! let model = FnModel::new(|request| match request.model_call_index {
//!     1 => reply::tool_call("calculator", serde_json::json!({"expression": "2+3"})),
//!     _ => reply::text("The answer is 5."),
//! });
//! let agent = deterministic().model(model).build();
//! let (out, trace) = run_traced(&agent, "What is 2+3?").await.expect("run");
//! assert_eq!(out.result.final_text(), Some("The answer is 5."));
//! agentloop_testkit::assert_trace_snapshot!(trace);
//! # }
//! ```

use std::sync::Arc;

use agentloop::model::{DeltaStream, Model, ModelRequest};
use agentloop::provider::scripted::{ScriptLoadError, ScriptedModel};
use agentloop::runtime::{Agent, AgentBuilder, AgentError, RunOutput};
use agentloop::store::MemoryStore;
use agentloop::trace::Trace;
use agentloop::{Message, ModelError};

/// Collects every event in memory: `.sink(Arc::new(events.clone()))`, then `events.events()`.
pub use agentloop::runtime::VecSink;

/// An agent builder for tests: sequential run ids, tokio's (virtual, when paused) clock, a
/// fresh in-memory store, the built-in tools. Call it inside a tokio runtime; set the model
/// (`.model(..)`) and anything else, then `.build()`.
pub fn deterministic() -> AgentBuilder<()> {
    Agent::builder()
        .builtin_tools()
        .deterministic()
        .store(Arc::new(MemoryStore::new()))
}

/// A scripted model from a script's JSON text (`{"turns": [...]}`, see
/// [`agentloop::provider::scripted`]).
pub fn scripted(json: &str) -> Result<ScriptedModel, ScriptLoadError> {
    ScriptedModel::from_json_str(json, "test script")
}

/// Runs `prompt` in session `test`, recording the trace; returns the output and the trace.
pub async fn run_traced(agent: &Agent, prompt: &str) -> Result<(RunOutput, Trace), AgentError> {
    let out = agent
        .run_with("test", vec![Message::user(prompt)], None, true)
        .await?;
    let trace = out.trace.clone().unwrap_or_else(|| {
        // `run_with(.., record: true)` always records; an empty trace would fail the snapshot
        // visibly rather than panic here.
        Trace::new(agentloop_core::trace::TraceHeader {
            version: agentloop_core::trace::TRACE_VERSION,
            agentloop: String::new(),
            session: "test".into(),
            timeouts: None,
            config: agent.config().clone(),
            tools: Default::default(),
        })
    });
    Ok((out, trace))
}

/// The model requests `trace` recorded (its `call_model` effects), in order.
pub fn model_requests(trace: &Trace) -> Vec<ModelRequest> {
    trace
        .records
        .iter()
        .filter_map(|r| match r {
            agentloop_core::trace::TraceRecord::Effect {
                effect: agentloop_core::effect::Effect::CallModel { request },
                ..
            } => Some(request.clone()),
            _ => None,
        })
        .collect()
}

/// Replies for [`FnModel`]: a turn of the scripted model's JSON format (see
/// [`agentloop::provider::scripted`]), so a reply can also stream reasoning (`"reasoning"`),
/// fail first (`"errors"`) or choose its chunk size (`"chunk_chars"`): write the JSON with
/// `serde_json::json!` for those.
pub mod reply {
    use serde_json::{json, Value};

    /// A text answer.
    pub fn text(text: impl Into<String>) -> Value {
        json!({ "text": text.into() })
    }

    /// One tool call (its id is `call_<session_turn>_0`).
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Value {
        tool_calls([(name, arguments)])
    }

    /// Several tool calls, in order.
    pub fn tool_calls<N: Into<String>>(calls: impl IntoIterator<Item = (N, Value)>) -> Value {
        let calls: Vec<Value> = calls
            .into_iter()
            .map(|(name, arguments)| json!({ "name": name.into(), "arguments": arguments }))
            .collect();
        json!({ "tool_calls": calls })
    }
}

/// A model whose reply is a function of the request (`Fn(&ModelRequest) -> Value`, the value
/// one turn of the scripted model's JSON format, see [`reply`]), streamed like the scripted
/// model streams a turn (same deltas, ids, usage and failure kinds). A reply that is not a
/// valid turn fails the model call with a `bad_request` error naming the problem.
pub struct FnModel<F> {
    f: F,
    name: String,
}

impl<F> FnModel<F>
where
    F: Fn(&ModelRequest) -> serde_json::Value + Send + Sync + 'static,
{
    /// A model answering with `f`, named `scripted` (the name traces record).
    pub fn new(f: F) -> Self {
        FnModel {
            f,
            name: "scripted".into(),
        }
    }

    /// The same model under another name.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
}

#[async_trait::async_trait]
impl<F> Model for FnModel<F>
where
    F: Fn(&ModelRequest) -> serde_json::Value + Send + Sync + 'static,
{
    fn name(&self) -> String {
        self.name.clone()
    }

    async fn stream(&self, request: ModelRequest) -> Result<DeltaStream, ModelError> {
        // The scripted model serves `turns[session_turn]`: put the reply there, so call ids
        // (`call_<session_turn>_<i>`) stay unique across the session.
        let turn = (self.f)(&request);
        let mut turns = vec![serde_json::json!({}); request.session_turn as usize];
        turns.push(turn);
        let model =
            ScriptedModel::from_json(serde_json::json!({ "turns": turns })).map_err(|e| {
                ModelError::new(
                    agentloop::ErrorKind::BadRequest,
                    format!("FnModel reply: {e}"),
                )
            })?;
        model.stream(request).await
    }
}
