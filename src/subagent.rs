//! Subagents (R-EXT-2): a [`Tool`] that runs a child [`Session`] with its own loop, limits and
//! tools, and answers with the child's final text.
//!
//! - The child's events are forwarded into the parent's bus wrapped as `subagent_event`
//!   (between `subagent_start` and `subagent_end`).
//! - The tool is killable: when the parent aborts (or the per-tool timeout fires), the driver
//!   drops the tool's future, and dropping it aborts the child.
//! - A stuck child is detectable from the parent: `subagent_start` carries the child's session
//!   id, and [`SubagentTool::children`] returns the live child handles (status, metrics).
//!
//! ```no_run
//! # async fn demo(parent: agentloop::session::Session) {
//! use std::sync::Arc;
//! use agentloop::subagent::SubagentTool;
//! let tool = SubagentTool::new("research", "Delegate a research task", || {
//!     agentloop::runtime::Agent::builder()
//!         .model(agentloop::provider::scripted::ScriptedModel::demo())
//!         .build()
//! })
//! .forward_to(&parent);
//! parent.attach_tool(Arc::new(tool)).await.unwrap();
//! # }
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::agent_event::{AgentEvent, Outcome};
use crate::runtime::Agent;
use crate::session::{EventBus, KillTools, Session, SessionConfig, Status, SubscriptionItem};
use crate::tools::{Tool, ToolContext, ToolError, ToolSpec};

type Factory = Arc<dyn Fn() -> Agent + Send + Sync>;

/// A tool that delegates a task to a child session.
#[derive(Clone)]
pub struct SubagentTool {
    name: String,
    description: String,
    factory: Factory,
    parent: Option<Arc<EventBus>>,
    children: Arc<Mutex<BTreeMap<String, Session>>>,
    child_config: fn(String) -> SessionConfig,
}

impl std::fmt::Debug for SubagentTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubagentTool")
            .field("name", &self.name)
            .finish()
    }
}

impl SubagentTool {
    /// A subagent tool named `name`; `factory` builds each child's agent (model, tools, limits).
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        factory: impl Fn() -> Agent + Send + Sync + 'static,
    ) -> Self {
        SubagentTool {
            name: name.into(),
            description: description.into(),
            factory: Arc::new(factory),
            parent: None,
            children: Arc::default(),
            child_config: |id| SessionConfig::new(id).event_buffer_size(256),
        }
    }

    setters! {
        /// Forwards the child's events into `parent`'s event bus (its subscribers see them as
        /// `subagent_event`).
        forward_to(parent: &Session) => parent = Some(parent.bus().clone());

        /// Sets how child sessions are configured (from the child's session id).
        child_config(f: fn(String) -> SessionConfig) => child_config = f;
    }

    /// Live children, by the parent's tool call id: check `status()` / `metrics()` to detect a
    /// stuck child, or abort it.
    pub fn children(&self) -> Vec<(String, Session)> {
        self.children
            .lock()
            .map(|c| c.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    fn publish(&self, event: AgentEvent) {
        if let Some(bus) = &self.parent {
            bus.publish_current(event);
        }
    }
}

/// Aborts and unregisters the child when the tool's future ends or is dropped (killed).
struct ChildGuard {
    call_id: String,
    child: Session,
    children: Arc<Mutex<BTreeMap<String, Session>>>,
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(mut c) = self.children.lock() {
            c.remove(&self.call_id);
        }
        if self.child.status() != Status::Idle {
            let _ = self
                .child
                .abort_nowait("parent aborted", KillTools::All, true);
        }
    }
}

#[async_trait]
impl Tool for SubagentTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: json!({
                "type": "object",
                "properties": {"task": {"type": "string", "description": "The task for the subagent"}},
                "required": ["task"]
            }),
        }
    }

    async fn call(&self, ctx: ToolContext, arguments: Value) -> Result<String, ToolError> {
        let task = arguments
            .get("task")
            .and_then(|t| t.as_str())
            .ok_or_else(|| ToolError::InvalidArguments("missing string field `task`".into()))?
            .to_string();
        let child_id = format!("{}-{}", self.name, ctx.call_id);
        let child = Session::spawn((self.factory)(), (self.child_config)(child_id.clone()));
        if let Ok(mut c) = self.children.lock() {
            c.insert(ctx.call_id.clone(), child.clone());
        }
        let _guard = ChildGuard {
            call_id: ctx.call_id.clone(),
            child: child.clone(),
            children: self.children.clone(),
        };
        self.publish(AgentEvent::SubagentStart {
            tool_call_id: ctx.call_id.clone(),
            child_session: child_id.clone(),
            description: task.clone(),
        });
        let mut sub = child.subscribe(None, None);
        child
            .prompt(task)
            .await
            .map_err(|e| ToolError::Failed(format!("subagent could not start: {e}")))?;
        let forward = |item: SubscriptionItem| {
            if let SubscriptionItem::Event(e) = item {
                self.publish(AgentEvent::SubagentEvent {
                    tool_call_id: ctx.call_id.clone(),
                    child_session: child_id.clone(),
                    event: Box::new(e),
                });
            }
        };
        let idle = child.wait_idle();
        tokio::pin!(idle);
        loop {
            tokio::select! {
                _ = &mut idle => break,
                item = sub.recv() => match item {
                    Some(item) => forward(item),
                    None => break,
                },
            }
        }
        for item in sub.drain() {
            forward(item);
        }
        let result = child.last_result();
        let (outcome, text) = match &result {
            Some(r) => (
                r.outcome,
                r.final_text()
                    .map(str::to_string)
                    .or_else(|| r.error.as_ref().map(ToString::to_string))
                    .unwrap_or_else(|| r.reason.clone()),
            ),
            None => (Outcome::Failed, "the subagent produced no result".into()),
        };
        self.publish(AgentEvent::SubagentEnd {
            tool_call_id: ctx.call_id.clone(),
            child_session: child_id,
            outcome,
            result: text.clone(),
        });
        match outcome {
            Outcome::Completed => Ok(text),
            _ => Err(ToolError::Failed(format!(
                "subagent {}: {text}",
                outcome.as_str()
            ))),
        }
    }
}
