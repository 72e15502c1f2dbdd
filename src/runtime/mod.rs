//! The tokio runtime: an [`Agent`] (model, tools, store, approver, clock, ids, event sink,
//! compactor) that drives [`Run`]s by performing their effects and feeding results back.
//!
//! The builder is a typestate: an agent without a model does not compile. The ports take
//! closures where a function is enough (an event sink, an approver); limits and deadlines are
//! builder methods:
//!
//! ```
//! use std::sync::Arc;
//! use agentloop::prelude::*;
//! use agentloop::{ApprovalDecision, ToolCall};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), AgentError> {
//! let agent = Agent::builder()
//!     .model(ScriptedModel::demo())
//!     .builtin_tools()
//!     .sink(Arc::new(|e: &EventEnvelope| eprintln!("{}", e.event.type_name())))
//!     .approver(Arc::new(|call: &ToolCall| {
//!         (call.name == "calculator").then_some(ApprovalDecision::Approved) // else: ask a person
//!     }))
//!     .max_model_calls(10)
//!     .tool_timeout_ms(30_000)
//!     .deterministic() // run ids run-1, run-2, ...: reproducible traces
//!     .build();
//! let out = agent.run("session-1", "What is 6*7?").await?;
//! assert_eq!(out.run_id, "run-1");
//! println!("{:?} in {} steps", out.result.outcome, out.metrics.steps);
//! # Ok(()) }
//! ```
//!
//! ```compile_fail
//! let agent = agentloop::runtime::Agent::builder().build(); // no model: compile error
//! ```

mod builder;
mod context_manager;
mod control;
mod custom;
mod drive;
pub(crate) mod driver;
#[cfg(feature = "driver-kit")]
pub mod kit;
#[cfg(not(feature = "driver-kit"))]
mod kit;
mod metrics;
mod offload;
mod output;
mod ports;
pub mod resume;
mod stream;
pub(crate) mod title;
mod tool_order;
mod worker;

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use tokio::sync::mpsc;
use tracing::Instrument;

use crate::event::{ApprovalDecision, Event, KillPolicy};
use crate::hooks::{Hooks, NoHooks};
use crate::message::{AssistantMessage, Message};
use crate::model::Model;
use crate::process::PartialMark;
use crate::react::{LoopResult, Run, RunConfig};
use crate::store::{MemoryStore, SessionStore, StoreError};
use crate::tools::{Tool, ToolRegistry};
use crate::EventEnvelope;
use agentloop_core::trace::{Trace, TraceHeader, TRACE_VERSION};

#[cfg(test)]
pub(crate) use ports::NullSink;
#[cfg(feature = "testing")]
pub use ports::VecSink;
pub use ports::{Approver, Clock, Compactor, EventSink, Ids, Question, UserAsker};
pub(crate) use ports::{
    AutoApprove, CompactionDeadline, NoUser, SequentialIds, SystemClock, TimeIds, TokioClock,
    Truncate,
};

pub use agentloop_core::process::ToolRule;
// What a `ToolRule` decides for a call (also the `action` of `AgentEvent::ToolRuleMatched`),
// and why a rule's command-line form or patterns are refused.
pub use agentloop_core::tool_rules::{RuleAction, RuleError};

/// When a reminder rule ([`AgentBuilder::reminder`]) speaks.
pub use agentloop_core::react::reminders::ReminderWhen;
use agentloop_core::timeouts::{Timeouts, ToolOrder};
pub use builder::AgentBuilder;
pub(crate) use context_manager::DefaultContextManager;
pub use context_manager::{ContextManager, ContextUpdates, RunContext};
pub use control::Controller;
pub(crate) use control::{control_sharing, ControlReceiver, PartialMessage};
pub use custom::emit_custom;
pub(crate) use custom::scoped as with_custom_events;
use driver::{Driver, Tasks};
pub use metrics::{RunMetrics, ToolStats};
pub(crate) use offload::Offload;
pub use stream::RunStreamItem;
use tool_order::CompletionOrder;

/// Why a run call has no output: the run could not start (a store failure, nothing to resume,
/// the runtime shut down), or, for [`Agent::run_typed`], the run ended without a value of the
/// asked type. Failures during a run are a `Failed` result, not an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The session could not be loaded.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `resume` found no interrupted run.
    #[error("session {session} has no interrupted run to resume")]
    NothingToResume {
        /// The session.
        session: String,
    },
    /// The tokio runtime shut down while the run's task was still going.
    #[error("the runtime shut down before the run ended")]
    RuntimeShutDown,
    /// [`Agent::run_typed`]: the run failed or was aborted (an answer still invalid after the
    /// output retries fails the run with reason `output_invalid`).
    #[error("the run ended {outcome} ({reason}){}", error.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    Ended {
        /// How it ended.
        outcome: crate::agent_event::Outcome,
        /// Why.
        reason: String,
        /// Why it failed, when it failed.
        error: Option<crate::error::RunError>,
    },
    /// [`Agent::run_typed`]: the run completed, but its final answer is not a `T` (say, it
    /// ended at `max_steps`).
    #[error("the final answer is not a {type_name}: {error}")]
    Output {
        /// `T`'s schema name.
        type_name: String,
        /// What is wrong.
        error: String,
    },
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct RunOutput {
    /// The run id.
    pub run_id: String,
    /// The result.
    pub result: LoopResult,
    /// The trace, if recording was asked for.
    pub trace: Option<Trace>,
    /// The run's metrics (R-OBS): step and tool latency, time to first token, tokens,
    /// retries by kind, compactions; times from the agent's `Clock` port.
    pub metrics: RunMetrics,
}

impl RunOutput {
    /// What each step produced (R-IN-5): its committed message,
    /// tool calls, tool results, usage and error, in step order, borrowed from the result's
    /// messages (see [`LoopResult::execute_results`]).
    pub fn steps(&self) -> Vec<crate::execute_result::ExecuteResult<'_>> {
        self.result.execute_results()
    }
}

/// The tools of an agent, shared so a session can attach tools while a run is going (R-CTL-6):
/// the driver looks implementations up here; which tools the *model* is offered is the run's
/// configuration.
#[derive(Clone, Default)]
pub(crate) struct SharedTools(Arc<RwLock<ToolRegistry>>);

impl std::fmt::Debug for SharedTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.read() {
            Ok(r) => r.fmt(f),
            Err(_) => f.write_str("<poisoned>"),
        }
    }
}

impl SharedTools {
    /// Wraps a registry.
    pub(crate) fn new(registry: ToolRegistry) -> Self {
        SharedTools(Arc::new(RwLock::new(registry)))
    }
    /// Looks a tool up.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.0.read().ok().and_then(|r| r.get(name).cloned())
    }
    /// Adds (or replaces) a tool.
    pub(crate) fn insert(&self, tool: Arc<dyn Tool>) {
        if let Ok(mut r) = self.0.write() {
            r.insert(tool);
        }
    }
    /// Removes a tool.
    pub(crate) fn remove(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.0.write().ok().and_then(|mut r| r.remove(name))
    }
    /// Detaches `detach`, then attaches `attach`, under one lock: a lookup sees the tools
    /// before or after, never half of it. If a name in `detach` is not there, nothing changes
    /// and that name is returned.
    pub(crate) fn update(&self, attach: &[Arc<dyn Tool>], detach: &[String]) -> Result<(), String> {
        let Ok(mut r) = self.0.write() else {
            return Err(detach.first().cloned().unwrap_or_default());
        };
        if let Some(missing) = detach.iter().find(|n| r.get(n).is_none()) {
            return Err(missing.clone());
        }
        for name in detach {
            r.remove(name);
        }
        for tool in attach {
            r.insert(tool.clone());
        }
        Ok(())
    }
    /// Specs of every tool, sorted by name (shared, not copied).
    pub(crate) fn specs(&self) -> Arc<[crate::tools::ToolSpec]> {
        self.0.read().map(|r| r.specs()).unwrap_or_default()
    }
    /// The tools' compiled parameters schemas (shared, not copied; R-TOOL-1).
    pub(crate) fn schemas(&self) -> crate::tools::ArgumentSchemas {
        self.0.read().map(|r| r.schemas()).unwrap_or_default()
    }
}

/// An agent: the machines' configuration plus every port.
///
/// Models are a registry keyed by name: the model given to the builder is registered under its
/// [`Model::name`] (and under the configured model name); more can be added with
/// [`AgentBuilder::extra_model`]. Each request is routed by its `model` field, so switching
/// models (R-CTL-5) is a change of the run configuration's `model` — no client is rebuilt.
///
/// A clone shares everything: ports, tools, models and event numbering.
#[derive(Clone)]
pub struct Agent {
    pub(crate) model: Arc<dyn Model>,
    pub(crate) models: BTreeMap<String, Arc<dyn Model>>,
    pub(crate) tools: SharedTools,
    pub(crate) hooks: Arc<dyn Hooks>,
    pub(crate) offload: Option<Offload>,
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) approver: Arc<dyn Approver>,
    pub(crate) asker: Arc<dyn UserAsker>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ids: Arc<dyn Ids>,
    pub(crate) sink: Arc<dyn EventSink>,
    pub(crate) compactor: Arc<dyn Compactor>,
    pub(crate) context_manager: Arc<dyn ContextManager>,
    pub(crate) context_init_data: Arc<serde_json::Value>,
    /// Shared with the sessions built on the agent (copied on a session's first change), so
    /// an idle session does not hold a second copy.
    pub(crate) config: Arc<RunConfig>,
    pub(crate) timeouts: Timeouts,
    pub(crate) root: PathBuf,
    /// Whether the file tools may write instruction, agent and rule files.
    pub(crate) allow_instruction_writes: bool,
    pub(crate) event_index: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("model", &self.model.name())
            .field("tools", &self.tools)
            .field("config", &self.config)
            .finish()
    }
}
