//! Shared harness of the durable-session tests: a counting tool, entry builders, trace
//! readers.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use agentloop::model::ModelRequest;
use agentloop::provider::scripted::ScriptedModel;
use agentloop::store::Entry;
use agentloop::tools::{Tool, ToolContext, ToolError, ToolSpec};
use agentloop::trace::Trace;
use agentloop::{AssistantMessage, Message, ToolCall};
use agentloop_core::effect::Effect;
use agentloop_core::trace::TraceRecord;
use async_trait::async_trait;
use serde_json::{json, Value};

/// A tool that records the call id of every invocation.
pub struct CountingTool {
    pub name: &'static str,
    pub retry_safe: bool,
    pub calls: Arc<Mutex<Vec<String>>>,
}

impl CountingTool {
    pub fn new(name: &'static str, retry_safe: bool) -> (Arc<Self>, Arc<Mutex<Vec<String>>>) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        (
            Arc::new(CountingTool {
                name,
                retry_safe,
                calls: calls.clone(),
            }),
            calls,
        )
    }
}

#[async_trait]
impl Tool for CountingTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.into(),
            description: "counts its invocations".into(),
            parameters: json!({"type": "object"}),
        }
    }
    fn retry_safe(&self) -> bool {
        self.retry_safe
    }
    async fn call(&self, ctx: ToolContext, _arguments: Value) -> Result<String, ToolError> {
        self.calls.lock().unwrap().push(ctx.call_id.clone());
        Ok(format!("{} ran ({})", self.name, ctx.call_id))
    }
}

pub fn invocations(calls: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    calls.lock().unwrap().clone()
}

/// A scripted model from inline JSON.
pub fn model(script: Value) -> ScriptedModel {
    ScriptedModel::from_json_str(&script.to_string(), "test script").expect("valid script")
}

pub fn user(run: &str, text: &str) -> Entry {
    Entry::UserInput {
        run_id: run.into(),
        message: Message::user(text),
    }
}

/// A committed assistant turn calling `(id, tool)` pairs.
pub fn assistant(run: &str, index: u32, text: &str, calls: &[(&str, &str)]) -> Entry {
    Entry::Assistant {
        run_id: run.into(),
        model_call_index: index,
        message: AssistantMessage {
            text: text.into(),
            tool_calls: calls
                .iter()
                .map(|(id, name)| ToolCall {
                    id: (*id).into(),
                    name: (*name).into(),
                    arguments: json!({}),
                    invalid_arguments: None,
                })
                .collect(),
            ..Default::default()
        },
    }
}

pub fn started(run: &str, id: &str, name: &str) -> Entry {
    Entry::ToolStarted {
        run_id: run.into(),
        tool_call_id: id.into(),
        name: name.into(),
    }
}

pub fn result(run: &str, id: &str, name: &str) -> Entry {
    Entry::ToolResult {
        run_id: run.into(),
        result: agentloop::ToolResult {
            tool_call_id: id.into(),
            name: name.into(),
            content: format!("{name} ran ({id})"),
            status: agentloop::ToolStatus::Completed,
        },
    }
}

/// Every effect of a trace, in order.
pub fn effects(trace: &Trace) -> Vec<Effect> {
    trace
        .records
        .iter()
        .filter_map(|r| match r {
            TraceRecord::Effect { effect, .. } => Some(effect.clone()),
            _ => None,
        })
        .collect()
}

/// The model requests of a trace, in order.
pub fn model_requests(trace: &Trace) -> Vec<ModelRequest> {
    effects(trace)
        .into_iter()
        .filter_map(|e| match e {
            Effect::CallModel { request } => Some(request),
            _ => None,
        })
        .collect()
}

/// The entries a trace asked to persist, in order.
pub fn persisted(trace: &Trace) -> Vec<Entry> {
    effects(trace)
        .into_iter()
        .filter_map(|e| match e {
            Effect::Persist { entry } => Some(entry),
            _ => None,
        })
        .collect()
}
