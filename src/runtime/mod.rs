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

mod context_manager;
mod custom;
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
mod title;
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
pub(crate) use context_manager::DefaultContextManager;
pub use context_manager::{ContextManager, ContextUpdates, RunContext};
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

/// The partial-message snapshot of a run (R-STR-2), shared between the run's driver, which
/// refreshes it after every event the machines handle (every delta included) and before it
/// performs that event's effects, and any number of readers. It holds what
/// [`Run::partial`] returns: the message of the current step as assembled so far (the
/// committed message once the step committed, while its tools run), `None` between steps and
/// after the run. Cloning shares the snapshot; reading clones an `Arc`, not the message.
#[derive(Clone, Debug, Default)]
pub(crate) struct PartialMessage(Arc<RwLock<Option<Arc<AssistantMessage>>>>);

impl PartialMessage {
    /// The message as it stands, if a step is in progress.
    pub(crate) fn get(&self) -> Option<Arc<AssistantMessage>> {
        self.0.read().ok().and_then(|m| m.clone())
    }

    /// Replaces the snapshot (the driver's side).
    pub(crate) fn set(&self, message: Option<AssistantMessage>) {
        if let Ok(mut slot) = self.0.write() {
            *slot = message.map(Arc::new);
        }
    }

    /// Brings the snapshot up to `run`'s partial message (the driver's side). `mark` is the
    /// mark of the snapshot held: an unchanged message costs nothing, a message that grew is
    /// extended in place with what arrived since (copied only while a reader still holds the
    /// previous snapshot), anything else is rebuilt. Refreshing after every event thus costs
    /// time proportional to what the event added, not to the message's size.
    pub(crate) fn refresh(&self, run: &Run, mark: &mut Option<PartialMark>) {
        let now = run.partial_mark();
        if now == *mark {
            return;
        }
        let Ok(mut slot) = self.0.write() else {
            return;
        };
        match (slot.as_mut(), now, mark.as_ref()) {
            (Some(held), Some(n), Some(m)) if n.same_source(m) => {
                run.update_partial(Arc::make_mut(held));
            }
            _ => *slot = run.partial().map(Arc::new),
        }
        *mark = now;
    }
}

/// Sends control events (abort, approvals) into a running run, and reads its partial message.
///
/// Make one with [`Controller::new`] and hand it to [`Agent::run_with`] (or `run_configured`,
/// `resume_with`). Events sent before the run starts wait for it. Given to another run, the
/// controller follows that run (the newest it was given); a clone shares it.
#[derive(Clone, Debug)]
pub struct Controller {
    channel: Arc<std::sync::Mutex<ControlChannel>>,
    partial: PartialMessage,
    steering: Arc<SteeringCounts>,
}

/// A controller's channel: the receiver waits here until a run takes it.
#[derive(Debug)]
struct ControlChannel {
    tx: mpsc::UnboundedSender<Event>,
    rx: Option<mpsc::UnboundedReceiver<Event>>,
}

impl Default for Controller {
    fn default() -> Self {
        Self::sharing(PartialMessage::default())
    }
}

/// What a controlled run's machine reports of its steering queue (R-CTL-2): the queue itself is
/// the machine's ([`Run::steering`](agentloop_core::Run::steering)); a controller reads how many
/// messages it holds and how many `steer` events reached it, so a session can bound the queue
/// without keeping a copy of it.
#[derive(Debug, Default)]
pub(crate) struct SteeringCounts {
    received: std::sync::atomic::AtomicU64,
    pending: std::sync::atomic::AtomicUsize,
}

impl SteeringCounts {
    /// `steer` events the run has fed to its machine.
    pub(crate) fn received(&self) -> u64 {
        self.received.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Steering messages the machine holds, not yet applied.
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The receiving side of a [`Controller`], taken by the run it is given to.
#[derive(Debug)]
pub(crate) struct ControlReceiver {
    rx: mpsc::UnboundedReceiver<Event>,
    partial: PartialMessage,
    steering: Arc<SteeringCounts>,
}

/// A new controller and its receiver, whose run publishes its partial message into `partial`.
pub(crate) fn control_sharing(partial: PartialMessage) -> (Controller, ControlReceiver) {
    let controller = Controller::sharing(partial);
    let receiver = controller.receiver();
    (controller, receiver)
}

impl Controller {
    /// A controller for a run not started yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A controller whose run publishes its partial message into `partial`.
    fn sharing(partial: PartialMessage) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Controller {
            channel: Arc::new(std::sync::Mutex::new(ControlChannel { tx, rx: Some(rx) })),
            partial,
            steering: Arc::new(SteeringCounts::default()),
        }
    }

    /// The receiver for a run: the waiting one, or (the first one taken) a new channel the
    /// controller now sends into.
    pub(crate) fn receiver(&self) -> ControlReceiver {
        let rx = {
            let mut channel = self.channel.lock().unwrap_or_else(|e| e.into_inner());
            match channel.rx.take() {
                Some(rx) => rx,
                None => {
                    let (tx, rx) = mpsc::unbounded_channel();
                    channel.tx = tx;
                    rx
                }
            }
        };
        ControlReceiver {
            rx,
            partial: self.partial.clone(),
            steering: self.steering.clone(),
        }
    }

    fn send_event(&self, event: Event) -> bool {
        let channel = self.channel.lock().unwrap_or_else(|e| e.into_inner());
        channel.tx.send(event).is_ok()
    }

    /// A snapshot of the message being streamed by the controlled run (R-STR-2): the message
    /// of the current step as assembled so far (the committed message once the step
    /// committed, while its tools run). `None` before the run starts a step, between steps and
    /// after it. Reading clones an `Arc`, not the message; another observer clones the
    /// controller.
    pub fn partial(&self) -> Option<Arc<AssistantMessage>> {
        self.partial.get()
    }

    /// Steering messages the run's machine holds, not yet applied (R-CTL-2).
    pub fn steering_pending(&self) -> usize {
        self.steering.pending()
    }

    /// `steer` events the run has fed to its machine (R-CTL-2).
    pub fn steering_received(&self) -> u64 {
        self.steering.received()
    }

    /// Aborts the run (R-CTL-3). Returns false if the run is gone.
    pub fn abort(&self, reason: impl Into<String>) -> bool {
        self.abort_with(reason, KillPolicy::default())
    }

    /// Aborts the run with a kill policy for running tools (R-CTL-3).
    pub fn abort_with(&self, reason: impl Into<String>, kill: KillPolicy) -> bool {
        self.send_event(Event::Abort {
            reason: reason.into(),
            kill,
        })
    }

    /// Steers the run (R-CTL-2): `text` joins the conversation at the next step boundary, as
    /// a user message. Returns false if the run is gone.
    pub fn steer(&self, text: impl Into<String>) -> bool {
        self.send_event(Event::Steer { text: text.into() })
    }

    /// Uses model `model` from the run's next step on (R-CTL-5); the same model again is no
    /// change. Returns false if the run is gone.
    pub fn switch_model(&self, model: impl Into<String>) -> bool {
        self.send_event(Event::SwitchModel {
            model: model.into(),
        })
    }

    /// Sends any machine input into the run (a session's subtasks and tool sets).
    pub(crate) fn send(&self, event: Event) -> bool {
        self.send_event(event)
    }

    /// Answers an approval request (R-CTL-4).
    pub fn decide(&self, tool_call_id: impl Into<String>, decision: ApprovalDecision) -> bool {
        self.send_event(Event::Approval {
            tool_call_id: tool_call_id.into(),
            decision,
        })
    }
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

/// Builds an [`Agent`]. `build` exists only once a model was given: [`Agent::builder`] returns
/// an `AgentBuilder<()>`, [`model`](AgentBuilder::model) an `AgentBuilder<Arc<dyn Model>>`.
pub struct AgentBuilder<M = Arc<dyn Model>> {
    model: M,
    models: BTreeMap<String, Arc<dyn Model>>,
    hooks: Arc<dyn Hooks>,
    offload: Option<Offload>,
    offload_preview: Option<usize>,
    tools: ToolRegistry,
    store: Arc<dyn SessionStore>,
    approver: Arc<dyn Approver>,
    asker: Arc<dyn UserAsker>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn Ids>,
    sink: Arc<dyn EventSink>,
    compactor: Arc<dyn Compactor>,
    compaction_timeout_ms: Option<u64>,
    context_manager: Arc<dyn ContextManager>,
    context_init_data: serde_json::Value,
    config: RunConfig,
    timeouts: Timeouts,
    root: PathBuf,
    allow_instruction_writes: bool,
}

/// The default deadline of one compaction (`AgentBuilder::compaction_timeout_ms`): 2 min.
const DEFAULT_COMPACTION_TIMEOUT_MS: u64 = 120_000;

impl Agent {
    /// A builder with defaults: no tools (the built-ins are opt-in:
    /// [`builtin_tools`](AgentBuilder::builtin_tools)), in-memory store, auto-approve, system
    /// clock, time-based ids, no event sink, truncation compaction, root `.`.
    pub fn builder() -> AgentBuilder<()> {
        AgentBuilder {
            model: (),
            models: BTreeMap::new(),
            hooks: Arc::new(NoHooks),
            offload: None,
            offload_preview: None,
            tools: ToolRegistry::new(),
            store: Arc::new(MemoryStore::new()),
            approver: Arc::new(AutoApprove),
            asker: Arc::new(NoUser),
            clock: Arc::new(SystemClock),
            ids: Arc::new(TimeIds::default()),
            sink: ports::null_sink(),
            compactor: Arc::new(Truncate),
            compaction_timeout_ms: Some(DEFAULT_COMPACTION_TIMEOUT_MS),
            context_manager: Arc::new(DefaultContextManager),
            context_init_data: serde_json::Value::Null,
            config: RunConfig::default(),
            timeouts: Timeouts::default(),
            root: PathBuf::from("."),
            allow_instruction_writes: false,
        }
    }
}

impl<M> AgentBuilder<M> {
    /// Sets the model.
    pub fn model(self, model: impl Model + 'static) -> AgentBuilder<Arc<dyn Model>> {
        self.model_arc(Arc::new(model))
    }

    /// Sets a shared model.
    pub fn model_arc(self, model: Arc<dyn Model>) -> AgentBuilder<Arc<dyn Model>> {
        AgentBuilder {
            model,
            models: self.models,
            hooks: self.hooks,
            offload: self.offload,
            offload_preview: self.offload_preview,
            tools: self.tools,
            store: self.store,
            approver: self.approver,
            asker: self.asker,
            clock: self.clock,
            ids: self.ids,
            sink: self.sink,
            compactor: self.compactor,
            compaction_timeout_ms: self.compaction_timeout_ms,
            context_manager: self.context_manager,
            context_init_data: self.context_init_data,
            config: self.config,
            timeouts: self.timeouts,
            root: self.root,
            allow_instruction_writes: self.allow_instruction_writes,
        }
    }

    /// Registers another model under `name`; a run whose configured model is `name` (e.g.
    /// after `switch_model(name)`) is served by it.
    pub fn extra_model(mut self, name: impl Into<String>, model: Arc<dyn Model>) -> Self {
        self.models.insert(name.into(), model);
        self
    }

    /// Adds a model to the run's fallback chain: when a step fails with a provider
    /// error that is not retried, or exhausts its retries (not on a context overflow, not on
    /// an abort), the step is requested again from the next model of the chain, in the order
    /// they were added (row `executing_fallback`, event `model_fallback`). `name` is what the
    /// requests carry; `model` serves it. To fall back to another model name of the same
    /// client, put the name in [`RunConfig::fallbacks`] instead.
    pub fn fallback_model(mut self, name: impl Into<String>, model: Arc<dyn Model>) -> Self {
        let name = name.into();
        self.models.insert(name.clone(), model);
        self.config.fallbacks.push(name);
        self
    }

    /// Sets the retry decision (R-EXT-3): `f` says whether an attempt that failed with a
    /// typed error is worth retrying, given the error and the failed attempt's number among
    /// the step's attempts on its current model, from 1 (the retry policy's `max_retries`
    /// still bounds the retries). `f` is a plain function (or a closure that captures
    /// nothing): traces record it as `name` (`config.step.retry.decider`), and a replay finds
    /// it by that name in its registry (`agentloop_core::react::DeciderRegistry::with_retry`,
    /// passed to [`agentloop_core::trace::replay_with`]).
    ///
    /// ```
    /// use agentloop::prelude::*;
    /// use agentloop::{ErrorKind, ModelError};
    ///
    /// fn rate_limits_only(error: &ModelError, _attempt: u32) -> bool {
    ///     error.kind == ErrorKind::RateLimited
    /// }
    /// let agent = Agent::builder()
    ///     .model(ScriptedModel::demo())
    ///     .retry_decider("rate-limits-only", rate_limits_only)
    ///     .build();
    /// # let _ = agent;
    /// ```
    pub fn retry_decider(
        mut self,
        name: impl Into<std::borrow::Cow<'static, str>>,
        f: fn(&crate::ModelError, u32) -> bool,
    ) -> Self {
        self.config.step.retry.decider = crate::process::RetryDeciderRef::new(name, f);
        self
    }

    /// Limits the input (prompt) tokens the run's committed steps may report. Reaching a
    /// usage limit asks the model for a final answer without tools (or stops the run, with
    /// [`stop_at_limit`](Self::stop_at_limit)); the run ends with reason
    /// `usage_limit:<limit>`. No limits by default.
    ///
    /// ```
    /// use agentloop::provider::scripted::ScriptedModel;
    /// use agentloop::runtime::Agent;
    /// let agent = Agent::builder()
    ///     .model(ScriptedModel::demo())
    ///     .max_total_tokens(50_000)
    ///     .max_tool_calls(20)
    ///     .max_cost_usd(0.50, 2.5, 10.0) // at most 50 cents at 2.5 / 10 USD per million tokens
    ///     .build();
    /// assert_eq!(agent.config().limits.tool_calls, Some(20));
    /// ```
    pub fn max_input_tokens(mut self, tokens: u64) -> Self {
        self.config.limits.input_tokens = Some(tokens);
        self
    }

    /// Limits the output tokens the run's committed steps may report (see
    /// [`max_input_tokens`](Self::max_input_tokens)).
    pub fn max_output_tokens(mut self, tokens: u64) -> Self {
        self.config.limits.output_tokens = Some(tokens);
        self
    }

    /// Limits the input plus output tokens the run's committed steps may report (see
    /// [`max_input_tokens`](Self::max_input_tokens)).
    pub fn max_total_tokens(mut self, tokens: u64) -> Self {
        self.config.limits.total_tokens = Some(tokens);
        self
    }

    /// Limits the model requests the run may send, retries and fallbacks included (see
    /// [`max_input_tokens`](Self::max_input_tokens)).
    pub fn max_model_calls(mut self, calls: u64) -> Self {
        self.config.limits.model_calls = Some(calls);
        self
    }

    /// Limits the tool calls of the run's committed messages (see
    /// [`max_input_tokens`](Self::max_input_tokens)).
    pub fn max_tool_calls(mut self, calls: u64) -> Self {
        self.config.limits.tool_calls = Some(calls);
        self
    }

    /// Limits what the run may cost, in US dollars, its usage priced at
    /// `input_usd_per_mtok` and `output_usd_per_mtok` per million tokens (see
    /// [`max_input_tokens`](Self::max_input_tokens)).
    pub fn max_cost_usd(
        mut self,
        max_usd: f64,
        input_usd_per_mtok: f64,
        output_usd_per_mtok: f64,
    ) -> Self {
        self.config.limits.cost = Some(agentloop_core::react::CostLimit {
            max_usd,
            input_usd_per_mtok,
            output_usd_per_mtok,
        });
        self
    }

    /// Ends the run at once when it reaches a usage limit, instead of asking the model for a
    /// final answer first.
    pub fn stop_at_limit(mut self) -> Self {
        self.config.limits.on_limit = agentloop_core::react::LimitAction::Stop;
        self
    }

    /// Keeps inline `<status>`, `<title>` and `<plan>` tags in the answer's text: they are
    /// still reported (`status_update` / `title_generated` / `plan_generated` events), and the
    /// text stays as the model wrote it. By default they are reported and removed from the
    /// answer.
    pub fn keep_inline_tags(mut self) -> Self {
        self.config.step.inline_tags = agentloop_core::process::InlineTags::Keep;
        self
    }

    /// Looks for no inline `<status>`, `<title>` or `<plan>` tags: the text is the answer,
    /// and no tag event is emitted.
    pub fn ignore_inline_tags(mut self) -> Self {
        self.config.step.inline_tags = agentloop_core::process::InlineTags::Off;
        self
    }

    /// Sets the hooks (R-EXT-1); a `Vec<Arc<dyn Hooks>>` is hooks that call several in order.
    pub fn hooks(mut self, hooks: Arc<dyn Hooks>) -> Self {
        self.hooks = hooks;
        self
    }

    /// Offloads tool results longer than `limit_bytes` to files under `dir`
    /// (`<dir>/<session>/<tool_call_id>.txt`, R-TOOL-5): the model sees a preview (1 KiB, see
    /// [`offload_preview`](Self::offload_preview)) and the file's path instead
    /// (`large_result_offloaded`).
    pub fn offload(mut self, dir: impl Into<PathBuf>, limit_bytes: usize) -> Self {
        self.offload = Some(Offload::new(dir, limit_bytes));
        self
    }

    /// Bytes of an offloaded result kept inline as its preview (cut at a char boundary;
    /// default 1024). Only with [`offload`](Self::offload).
    pub fn offload_preview(mut self, bytes: usize) -> Self {
        self.offload_preview = Some(bytes);
        self
    }

    /// Sets the tools.
    pub fn tools(mut self, tools: ToolRegistry) -> Self {
        self.tools = tools;
        self
    }

    /// Adds one tool to the agent's tools.
    pub fn tool(mut self, tool: Arc<dyn crate::tools::Tool>) -> Self {
        self.tools.insert(tool);
        self
    }

    /// Adds the built-in tools: `calculator`, `read_file` and `append_line` (which writes
    /// files under [`root`](Self::root); mind the approver, which auto-approves by default).
    #[cfg(feature = "builtin-tools")]
    pub fn builtin_tools(mut self) -> Self {
        self.tools.extend(ToolRegistry::builtin());
        self
    }

    /// Adds the tools of a connected MCP server (feature `mcp`; see [`crate::mcp`]). The
    /// builder stays synchronous: connecting is IO, done before by
    /// [`McpServer::connect_stdio`](crate::mcp::McpServer::connect_stdio) and its siblings. A
    /// tool named like one already registered replaces it.
    #[cfg(feature = "mcp")]
    pub fn mcp(mut self, server: &crate::mcp::McpServer) -> Self {
        for tool in server.tools() {
            self.tools.insert(tool);
        }
        self
    }

    /// Sets the session store.
    pub fn store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.store = store;
        self
    }

    /// Sets the approver.
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = approver;
        self
    }

    /// Makes runs reproducible for tests: run ids `run-1`, `run-2`, ... (so each run's
    /// backoff jitter seed is fixed too), and event timestamps from tokio's clock, starting at
    /// 0 ms when the agent is built (virtual time under a paused runtime, `start_paused`).
    /// Two runs of the same script then record the same trace and the same events.
    pub fn deterministic(mut self) -> Self {
        self.ids = Arc::new(SequentialIds::default());
        self.clock = Arc::new(TokioClock::default());
        self
    }

    /// Sets the clock: event timestamps and the machines' timers (the default reads the
    /// system time and sleeps on tokio's timers). See [`Clock`] for an example.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the id generator: run ids and each run's backoff jitter seed (the default:
    /// time-based ids and a random seed). See [`Ids`] for an example.
    pub fn ids(mut self, ids: Arc<dyn Ids>) -> Self {
        self.ids = ids;
        self
    }

    /// Sets the event sink.
    pub fn sink(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.sink = sink;
        self
    }

    /// Sets the compaction strategy.
    pub fn compactor(mut self, compactor: Arc<dyn Compactor>) -> Self {
        self.compactor = compactor;
        self
    }

    /// How long one compaction may take, on the agent's clock (default 2 minutes; `None`: as
    /// long as it takes). Past it the compaction fails like a compactor's error:
    /// a context that still fits is sent as it is, one that does not fails the run
    /// (`compaction_failed`). An LLM summary whose model hangs no longer waits until the
    /// run's deadline.
    pub fn compaction_timeout_ms(mut self, ms: Option<u64>) -> Self {
        self.compaction_timeout_ms = ms;
        self
    }

    /// Sets the context manager (R-CTX-1/2): it builds each new run's history,
    /// system prompt and tools, and may keep entries before and after the run; see
    /// [`ContextManager`]. Default: the history rebuilt from the session's entries, the run's
    /// own system prompt and tools (see [`RunContext`]).
    pub fn context_manager(mut self, manager: Arc<dyn ContextManager>) -> Self {
        self.context_manager = manager;
        self
    }

    /// The data every [`RunContext`] carries as `runtime_init_data` (default `null`).
    pub fn context_init_data(mut self, data: serde_json::Value) -> Self {
        self.context_init_data = data;
        self
    }

    /// Caps a run at `steps` model steps (default 10): the last one gets a reminder that it is
    /// the last and is offered no tools (R-OUT-5), so the run ends with an answer.
    pub fn max_steps(mut self, steps: u32) -> Self {
        self.config.max_steps = steps;
        self
    }

    /// Tells the agent its model's context window in tokens (R-CTX-3). The run compacts its
    /// context before it would overflow the window (a `context_budget_tokens` set through
    /// [`configure`](Self::configure) takes precedence). Without either, the window is looked
    /// up by model name; for an unknown model only a message cap
    /// ([`compact_after_messages`](Self::compact_after_messages)) or a provider's overflow
    /// error compacts.
    pub fn context_window(mut self, tokens: u64) -> Self {
        self.config.context_window = Some(tokens);
        self
    }

    /// Compacts the context when it has more than `messages` messages, whatever its size in
    /// tokens (off by default).
    pub fn compact_after_messages(mut self, messages: usize) -> Self {
        self.config.compact_threshold = Some(messages);
        self
    }

    /// Sets the whole run configuration (its `tools` are replaced by the registry's specs). The
    /// builder's other methods each set a part of it; this and [`configure`](Self::configure)
    /// reach the rest ([`RunConfig`]'s fields are documented with the core's machines).
    pub fn config(mut self, config: RunConfig) -> Self {
        self.config = config;
        self
    }

    /// Changes the run configuration in place.
    pub fn configure(mut self, f: impl FnOnce(&mut RunConfig)) -> Self {
        f(&mut self.config);
        self
    }

    /// Fixes the seed of every run's retry backoff jitter (by default each run draws one from
    /// the agent's id source). The seed is recorded in the trace's header either way; a fixed one
    /// makes the header and the delays the same on every run (CLI: `--seed N`).
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.step.retry.jitter_seed = Some(seed);
        self
    }

    /// Caps each model step's output at `max_tokens` tokens (the request's `max_tokens`;
    /// without it OpenAI-compatible servers use their own default, which for a local server
    /// can be the whole context, and Anthropic uses `HttpConfig::default_max_tokens`).
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.config.params.max_tokens = Some(max_tokens);
        self
    }

    /// Sets whether and which tool the model must call on the steps that offer tools (the
    /// final step offers none, R-OUT-5, so a forced tool cannot loop past `max_steps`).
    /// A [`ToolChoice::Tool`](crate::model::ToolChoice::Tool) naming no registered tool is
    /// not checked here: the provider refuses it.
    pub fn tool_choice(mut self, choice: crate::model::ToolChoice) -> Self {
        self.config.params.tool_choice = Some(choice);
        self
    }

    /// Sets what a rejected or timed-out approval does: `false`
    /// (the default) stops the run after the step with reason `tool_rejected`; `true`
    /// continues, the model seeing the denied result. An approval always resumes.
    pub fn auto_resume(mut self, on: bool) -> Self {
        self.config.step.auto_resume = on;
        self
    }

    /// Sets how long a call waits for its approval (R-CTL-4; default `None`: as long as the
    /// approver takes). The step's machine starts it as a timer with each approval request;
    /// when it fires first the call is denied with status `timeout` (a rejection, so
    /// [`auto_resume`](Self::auto_resume) decides whether the run goes on) and the approver's
    /// wait is withdrawn. A session replaces it with its own
    /// [`SessionConfig::approval_timeout_ms`](crate::session::SessionConfig::approval_timeout_ms).
    pub fn approval_timeout(mut self, timeout_ms: Option<u64>) -> Self {
        self.config.step.approval_timeout_ms = timeout_ms;
        self
    }

    /// Titles each new session with `model`, registered as `name` (off by
    /// default): on a session's first run the title model is asked in parallel with the
    /// first step, and its answer is a `title_generated` event and a `title` session entry.
    pub fn title_model(mut self, name: impl Into<String>, model: Arc<dyn Model>) -> Self {
        let name = name.into();
        self.models.insert(name.clone(), model);
        self.config.title_model = Some(name);
        self
    }

    /// Sets the system prompt (replacing any).
    pub fn system(mut self, text: impl Into<String>) -> Self {
        self.config.system = Some(text.into());
        self
    }

    /// Composes an agent's instructions into the system prompt with
    /// [`build_system_prompt`](crate::instructions::build_system_prompt), after any system
    /// prompt already set. Load them by agent id with
    /// [`instructions::load`](crate::instructions::load).
    pub fn instructions(mut self, text: &str) -> Self {
        self.config.system = Some(crate::instructions::build_system_prompt(
            self.config.system.as_deref(),
            text,
        ));
        self
    }

    /// Adds a reminder rule: `text` goes to the model, as a user message after the context,
    /// before each step `when` holds for (every step, every n-th, after a failed tool call,
    /// or from a context size on). Reminders are not stored in the session.
    ///
    /// ```
    /// use agentloop::provider::scripted::ScriptedModel;
    /// use agentloop::runtime::{Agent, ReminderWhen};
    /// let agent = Agent::builder()
    ///     .model(ScriptedModel::demo())
    ///     .reminder(ReminderWhen::AfterToolFailure, "Read the tool's error before retrying.")
    ///     .reminder(ReminderWhen::EveryNSteps(5), "Keep the plan short.")
    ///     .build();
    /// # let _ = agent;
    /// ```
    pub fn reminder(mut self, when: ReminderWhen, text: impl Into<String>) -> Self {
        self.config
            .reminders
            .push(crate::react::reminders::Reminder {
                when,
                text: text.into(),
            });
        self
    }

    /// Adds a tool rule after those already set (R-TOOL-3): per call, by tool name
    /// and an argument pattern, whether it runs, waits for the approver or gets a denied
    /// result without running, and its deadline. The last matching rule decides, so add the
    /// general rules first and their exceptions after; calls no rule matches keep the
    /// per-tool approval map and timeout. See `agentloop_core::tool_rules`.
    ///
    /// ```
    /// use agentloop::provider::scripted::ScriptedModel;
    /// use agentloop::runtime::{Agent, ToolRule};
    /// let agent = Agent::builder()
    ///     .model(ScriptedModel::demo())
    ///     .tool_rule(ToolRule::ask("*"))
    ///     .tool_rule(ToolRule::allow("calculator").timeout_ms(5_000))
    ///     .tool_rule(ToolRule::deny("append_line").argument("line", "*password*"))
    ///     .build();
    /// assert_eq!(agent.config().step.tool_rules.len(), 3);
    /// ```
    pub fn tool_rule(mut self, rule: ToolRule) -> Self {
        self.config.step.tool_rules.push(rule);
        self
    }

    /// Adds tool rules in order after those already set (see [`tool_rule`](Self::tool_rule)).
    pub fn tool_rules(mut self, rules: impl IntoIterator<Item = ToolRule>) -> Self {
        self.config.step.tool_rules.extend(rules);
        self
    }

    /// Offers the built-in `write_todos` tool: the model keeps a todo
    /// list, each completed call reported as a `todo_change{todos}` event.
    pub fn write_todos(mut self) -> Self {
        self.tools.insert(Arc::new(crate::tools::WriteTodos));
        self
    }

    /// Offers the built-in `ask_user` tool: the model asks the person a
    /// question, with options; the call waits for the answer (a session's
    /// [`respond`](crate::session::Session::respond), the CLI's `chat`), at most
    /// `timeout_ms` when given. Outside a session nobody can answer and the call fails.
    pub fn ask_user(mut self, timeout_ms: Option<u64>) -> Self {
        self.tools.insert(Arc::new(crate::tools::AskUser));
        self.config.step.ask_user = true;
        self.config.step.ask_user_timeout_ms = timeout_ms;
        self
    }

    /// Sets who answers `ask_user` questions (the default: nobody, so a question fails at
    /// once; a session installs its own). See [`UserAsker`] for an example.
    pub fn asker(mut self, asker: Arc<dyn UserAsker>) -> Self {
        self.asker = asker;
        self
    }

    /// How long a tool call may run before it gets a `timeout` error result (R-IN-3; default
    /// 120 s). A [`ToolRule`]'s timeout overrides it for the calls the rule matches.
    pub fn tool_timeout_ms(mut self, ms: u64) -> Self {
        self.timeouts.tool_ms = ms;
        self
    }

    /// How long a model attempt may wait for its response to start and its first delta to
    /// arrive (default 60 s), and then at most between two deltas (default 30 s). Expiry is a
    /// retryable `stalled` failure of the attempt.
    pub fn stream_timeouts_ms(mut self, first_chunk_ms: u64, stall_ms: u64) -> Self {
        self.timeouts.first_chunk_ms = first_chunk_ms;
        self.timeouts.stall_ms = stall_ms;
        self
    }

    /// How long one model attempt may take, from sending to its last delta (default: no
    /// limit). Expiry is a retryable `timeout` error.
    pub fn request_timeout_ms(mut self, ms: u64) -> Self {
        self.timeouts.request_ms = Some(ms);
        self
    }

    /// How long a whole run may take (default: no limit). Expiry aborts the run.
    pub fn run_deadline_ms(mut self, ms: u64) -> Self {
        self.timeouts.run_deadline_ms = Some(ms);
        self
    }

    /// Feeds parallel tools' results to the machine as each call finishes, so each result is
    /// stored as early as possible (R-IN-4). By default they reach it in the order the calls
    /// were started, so identical runs record identical traces; with this, traces of
    /// parallel calls may differ from run to run.
    pub fn tool_results_as_completed(mut self) -> Self {
        self.timeouts.tool_order = ToolOrder::Completion;
        self
    }

    /// Sets the directory file tools are confined to.
    pub fn root(mut self, root: impl Into<PathBuf>) -> Self {
        self.root = root.into();
        self
    }

    /// Lets the built-in file tools write instruction, agent and rule files (`AGENTS.md`,
    /// `agents/ID.md`, a tool rules file; see [`crate::tools::protected`]). Off by default:
    /// a model that appends to its own instructions or rules changes every later run.
    ///
    /// ```
    /// use agentloop::prelude::*;
    /// let agent = Agent::builder()
    ///     .model(ScriptedModel::demo())
    ///     .allow_instruction_writes(true)
    ///     .build();
    /// # let _ = agent;
    /// ```
    pub fn allow_instruction_writes(mut self, allow: bool) -> Self {
        self.allow_instruction_writes = allow;
        self
    }
}

impl AgentBuilder<Arc<dyn Model>> {
    /// Builds the agent.
    pub fn build(self) -> Agent {
        let mut config = self.config;
        kit::configure_tools(&mut config, &self.tools);
        config.step.gate_tools = self.hooks.gates_tools();
        if config.model.is_empty() || config.model == "scripted" {
            config.model = self.model.name();
        }
        let mut models = self.models;
        models
            .entry(self.model.name())
            .or_insert_with(|| self.model.clone());
        models
            .entry(config.model.clone())
            .or_insert_with(|| self.model.clone());
        let compactor: Arc<dyn Compactor> = match self.compaction_timeout_ms {
            Some(ms) => Arc::new(CompactionDeadline {
                inner: self.compactor,
                clock: self.clock.clone(),
                ms,
            }),
            None => self.compactor,
        };
        Agent {
            model: self.model,
            models,
            hooks: self.hooks,
            offload: self.offload.map(|mut o| {
                if let Some(bytes) = self.offload_preview {
                    o.preview_bytes = bytes;
                }
                o
            }),
            tools: SharedTools::new(self.tools),
            store: self.store,
            approver: self.approver,
            asker: self.asker,
            clock: self.clock,
            ids: self.ids,
            sink: self.sink,
            compactor,
            context_manager: self.context_manager,
            context_init_data: Arc::new(self.context_init_data),
            config: Arc::new(config),
            timeouts: self.timeouts,
            root: self.root,
            allow_instruction_writes: self.allow_instruction_writes,
            event_index: Default::default(),
        }
    }
}

impl Agent {
    /// An emitter for background tasks of a run (tool tasks emit their own events).
    pub(crate) fn emitter(&self, run_id: &str) -> driver::Emitter {
        driver::Emitter {
            sink: self.sink.clone(),
            clock: self.clock.clone(),
            index: self.event_index.clone(),
            run_id: run_id.to_string(),
        }
    }

    /// The next event index (monotonic over the agent's lifetime).
    pub(crate) fn next_event_index(&self) -> u64 {
        self.event_index
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The run configuration.
    pub fn config(&self) -> &RunConfig {
        &self.config
    }

    /// The model serving `name`, if registered.
    pub fn model_named(&self, name: &str) -> Option<Arc<dyn Model>> {
        self.models.get(name).cloned()
    }

    /// Names of the registered models.
    pub fn model_names(&self) -> Vec<String> {
        self.models.keys().cloned().collect()
    }

    /// The model for a request: by name, else the default model.
    pub(crate) fn model_for(&self, name: &str) -> Arc<dyn Model> {
        self.models
            .get(name)
            .cloned()
            .unwrap_or_else(|| self.model.clone())
    }

    /// The hooks.
    pub fn hooks(&self) -> &Arc<dyn Hooks> {
        &self.hooks
    }

    /// Resumes the interrupted run of `session`, without external control or trace.
    pub async fn resume(&self, session: &str) -> Result<RunOutput, AgentError> {
        self.resume_with(session, None, false).await
    }

    /// Runs one prompt in `session` to completion, without external control or trace.
    pub async fn run(&self, session: &str, prompt: &str) -> Result<RunOutput, AgentError> {
        self.run_with(session, vec![Message::user(prompt)], None, false)
            .await
    }

    /// Runs a prompt with images and files ([`Prompt`](crate::attachment::Prompt): text, then
    /// content parts) in `session` to completion, without external control or trace.
    pub async fn run_prompt(
        &self,
        session: &str,
        prompt: impl Into<crate::attachment::Prompt>,
    ) -> Result<RunOutput, AgentError> {
        let prompt = prompt.into();
        let before = prompt.subtask_events();
        self.run_queued(
            session,
            vec![prompt.into_message()],
            before,
            (*self.config).clone(),
            None,
            false,
        )
        .await
    }

    /// Runs `prompt` in `session` asking for a final answer of type `T` (structured output):
    /// requests carry `T`'s JSON Schema (OpenAI-compatible servers get it as
    /// `response_format`, Anthropic as an instruction), the runtime checks each final answer
    /// against it, and an invalid one goes back to the model with its errors, at most
    /// `config.output.retries` times (default 1; rows `observing_retry_output`,
    /// `observing_output_invalid`). Returns the parsed value and the run's output.
    ///
    /// ```no_run
    /// # async fn f(agent: agentloop::runtime::Agent) -> Result<(), agentloop::runtime::AgentError> {
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Point { x: i64, y: i64 }
    /// let (point, _output) = agent.run_typed::<Point>("s1", "A point on the diagonal").await?;
    /// # let _ = point.x + point.y; Ok(()) }
    /// ```
    pub async fn run_typed<T>(
        &self,
        session: &str,
        prompt: &str,
    ) -> Result<(T, RunOutput), AgentError>
    where
        T: schemars::JsonSchema + serde::de::DeserializeOwned,
    {
        let type_name = T::schema_name().to_string();
        let schema =
            serde_json::to_value(schemars::schema_for!(T)).map_err(|e| AgentError::Output {
                type_name: type_name.clone(),
                error: format!("the type's JSON Schema does not serialize: {e}"),
            })?;
        let mut config = (*self.config).clone();
        let retries = config.output.as_ref().map_or(1, |o| o.retries);
        config.output = Some(agentloop_core::output::OutputSpec {
            name: type_name.clone(),
            schema,
            retries,
        });
        let output = self
            .run_configured(session, vec![Message::user(prompt)], config, None, false)
            .await?;
        let result = &output.result;
        if result.outcome != crate::agent_event::Outcome::Completed {
            return Err(AgentError::Ended {
                outcome: result.outcome,
                reason: result.reason.clone(),
                error: result.error.clone(),
            });
        }
        let value = agentloop_core::output::output_json(result.final_text().unwrap_or_default())
            .and_then(|v| serde_json::from_value::<T>(v).map_err(|e| e.to_string()))
            .map_err(|error| AgentError::Output {
                type_name: type_name.clone(),
                error: format!("{error} (run ended: {})", result.reason),
            })?;
        Ok((value, output))
    }

    /// Runs `input` in `session` to completion. `control` receives aborts and approvals;
    /// `record` keeps a trace of every input, transition and effect. A session left with
    /// unanswered tool calls by an interrupted run is repaired first (R-IDEM-7).
    pub async fn run_with(
        &self,
        session: &str,
        input: Vec<Message>,
        control: Option<&Controller>,
        record: bool,
    ) -> Result<RunOutput, AgentError> {
        self.run_configured(session, input, (*self.config).clone(), control, record)
            .await
    }

    /// Like [`Agent::run_with`], with a run configuration other than the agent's (a session
    /// passes its current model and tool set).
    pub async fn run_configured(
        &self,
        session: &str,
        input: Vec<Message>,
        config: RunConfig,
        control: Option<&Controller>,
        record: bool,
    ) -> Result<RunOutput, AgentError> {
        let control = control.map(Controller::receiver);
        self.run_queued(session, input, Vec::new(), config, control, record)
            .await
    }

    /// Like [`Agent::run_configured`], with machine inputs fed before `Start` (queued
    /// subtasks: rows `active_subtask`, then `planning_subtask` before the first
    /// model step).
    ///
    /// On a multi-thread runtime the run is a task of its own ([`worker::on_worker`]).
    pub(crate) async fn run_queued(
        &self,
        session: &str,
        input: Vec<Message>,
        before: Vec<Event>,
        config: RunConfig,
        control: Option<ControlReceiver>,
        record: bool,
    ) -> Result<RunOutput, AgentError> {
        let agent = self.clone();
        let session = session.to_string();
        worker::on_worker(async move {
            agent
                .run_queued_here(&session, input, before, config, control, record)
                .await
        })
        .await
    }

    /// [`Agent::run_queued`] in the caller's task (a [`Session`](crate::session::Session)
    /// already runs it in a task of its own).
    pub(crate) async fn run_queued_here(
        &self,
        session: &str,
        input: Vec<Message>,
        before: Vec<Event>,
        config: RunConfig,
        control: Option<ControlReceiver>,
        record: bool,
    ) -> Result<RunOutput, AgentError> {
        let run_id = self.ids.run_id();
        let entries = self.store.load(session).await?;
        let entries = self.settle(session, entries, &run_id, false).await?;
        let session_turns = agentloop_core::session_log::committed_turns(&entries);
        let mut config = config;
        let hints = serde_json::json!({
            "model": config.model,
            "max_steps": config.max_steps,
            "context_budget_tokens": config.context_budget_tokens,
            "compact_threshold": config.compact_threshold,
            "session_turns": session_turns,
        });
        let mut context = RunContext {
            session,
            run_id: &run_id,
            entries: &entries,
            input: &input,
            runtime_init_data: &self.context_init_data,
            runtime_hints: &hints,
            messages: agentloop_core::session_log::history(&entries),
            system_prompt: config.system.take(),
            tool_specs: config.tools.clone(),
            entries_to_append: Vec::new(),
        };
        self.context_manager.build_context(&mut context).await;
        let RunContext {
            messages: history,
            system_prompt,
            tool_specs,
            entries_to_append,
            ..
        } = context;
        config.system = system_prompt;
        config.tools = tool_specs;
        let mut entries = entries;
        for e in entries_to_append {
            self.store.append(session, &e).await?;
            entries.push(e);
        }
        let updates = self.context_manager.updates_context();
        let input_for_updates = if updates { input.clone() } else { Vec::new() };
        let start = Event::Start {
            run_id: run_id.clone(),
            history,
            input,
            session_turns,
        };
        let mut first = before;
        first.push(start);
        let output = self
            .drive(session, run_id, first, config, control, record)
            .await?;
        if updates {
            self.update_context(session, &output, &entries, input_for_updates)
                .await?;
        }
        Ok(output)
    }

    /// Calls the context manager's `compute_context_updates` after a run (R-CTX-2) and
    /// persists what it returns.
    async fn update_context(
        &self,
        session: &str,
        output: &RunOutput,
        entries: &[crate::store::Entry],
        input: Vec<Message>,
    ) -> Result<(), AgentError> {
        let result = &output.result;
        let mut new_messages = input;
        for step in &result.steps {
            if let Some(i) = step.message {
                let end = (i + 1 + step.tool_results).min(result.messages.len());
                new_messages.extend_from_slice(result.messages.get(i..end).unwrap_or_default());
            }
        }
        let overflow = result
            .steps
            .iter()
            .any(|s| s.end == crate::execute_result::StepEnd::ContextOverflow);
        let updates = self
            .context_manager
            .compute_context_updates(entries, &new_messages, overflow)
            .await;
        for e in &updates.entries_to_append {
            self.store.append(session, e).await?;
        }
        if let Some(messages) = updates.messages {
            let e = crate::store::Entry::Compaction {
                run_id: output.run_id.clone(),
                removed: 0,
                messages,
            };
            self.store.append(session, &e).await?;
        }
        Ok(())
    }

    /// Continues the interrupted run of `session` (R-IDEM-5..7): calls started without a
    /// result get `outcome_unknown` (unless their tool is retry-safe), calls that never started
    /// run now, an uncommitted step is re-requested with the same `model_call_index`.
    pub async fn resume_with(
        &self,
        session: &str,
        control: Option<&Controller>,
        record: bool,
    ) -> Result<RunOutput, AgentError> {
        let control = control.map(Controller::receiver);
        let agent = self.clone();
        let session = session.to_string();
        worker::on_worker(async move { agent.resume_here(&session, control, record).await }).await
    }

    /// [`Agent::resume_with`] in the caller's task.
    async fn resume_here(
        &self,
        session: &str,
        control: Option<ControlReceiver>,
        record: bool,
    ) -> Result<RunOutput, AgentError> {
        let entries = self.store.load(session).await?;
        let Some(run_id) = resume::interrupted_run(&entries) else {
            return Err(AgentError::NothingToResume {
                session: session.to_string(),
            });
        };
        let entries = self.settle(session, entries, &run_id, true).await?;
        let resume = resume::resume_event(&entries, &run_id);
        self.drive(
            session,
            run_id,
            vec![resume],
            (*self.config).clone(),
            control,
            record,
        )
        .await
    }

    /// Appends the repairs the loaded `entries` of `session` need before the next request
    /// (R-IDEM-7): the entries [`repair_with`](agentloop_core::session_log::repair_with) adds, then one
    /// [`Entry::Repair`](crate::store::Entry::Repair) marker of `run_id` listing every repair,
    /// and emits one `session_repaired` event per repair. For a resume, calls of the
    /// interrupted step that never started are left to run; for a new run they are closed as
    /// aborted, with a run end. Returns the entries with the appended ones.
    async fn settle(
        &self,
        session: &str,
        mut entries: Vec<crate::store::Entry>,
        run_id: &str,
        resuming: bool,
    ) -> Result<Vec<crate::store::Entry>, AgentError> {
        let tools = &self.tools;
        let mut repaired = agentloop_core::session_log::repair_with(&entries, |name| {
            resuming && tools.get(name).is_some_and(|t| t.retry_safe())
        });
        if !resuming {
            let superseded = resume::supersede(&entries, &repaired.entries);
            repaired.extend(superseded);
        }
        if repaired.is_empty() {
            return Ok(entries);
        }
        let repairs = repaired.repairs.clone();
        for e in repaired.into_entries(run_id) {
            self.store.append(session, &e).await?;
            entries.push(e);
        }
        for repair in repairs {
            tracing::info!(session, run_id, %repair, "session_repaired");
            self.sink.emit(&EventEnvelope {
                index: self.next_event_index(),
                ts_ms: self.clock.now_ms(),
                run_id: run_id.to_string(),
                event: crate::agent_event::AgentEvent::SessionRepaired { repair },
            });
        }
        Ok(entries)
    }

    async fn drive(
        &self,
        session: &str,
        run_id: String,
        first: Vec<Event>,
        config: RunConfig,
        control: Option<ControlReceiver>,
        record: bool,
    ) -> Result<RunOutput, AgentError> {
        // OpenTelemetry GenAI semantic conventions (`invoke_agent`), beside our own fields.
        let span = tracing::info_span!(
            "run",
            otel.name = "invoke_agent agentloop",
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = "agentloop",
            gen_ai.conversation.id = %session,
            gen_ai.request.model = %config.model,
            session,
            run_id = %run_id,
            model = %config.model
        );
        // The run's tools and hooks may emit events of their own (`emit_custom`).
        let emitter = self.emitter(&run_id);
        with_custom_events(
            emitter,
            self.drive_inner(session, run_id, first, config, control, record),
        )
        .instrument(span)
        .await
    }

    async fn drive_inner(
        &self,
        session: &str,
        run_id: String,
        first: Vec<Event>,
        config: RunConfig,
        control: Option<ControlReceiver>,
        record: bool,
    ) -> Result<RunOutput, AgentError> {
        let mut config = config;
        kit::apply_timeouts(&mut config, &self.timeouts);
        // Backoff jitter is drawn from the injected ids port, and recorded with the config.
        if config.step.retry.jitter_percent > 0 && config.step.retry.jitter_seed.is_none() {
            config.step.retry.jitter_seed = Some(self.ids.jitter_seed(&run_id));
        }
        let output_check = kit::OutputCheck::new(config.output.as_ref());
        let mut run = Run::new(config.clone());
        let mut trace = record.then(|| {
            Trace::new(TraceHeader {
                version: TRACE_VERSION,
                agentloop: env!("CARGO_PKG_VERSION").to_string(),
                session: session.to_string(),
                timeouts: Some(self.timeouts),
                tools: config.tools.clone(),
                config,
            })
        });
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (model_tx, model_rx) = mpsc::unbounded_channel();
        let (mut ctl, partial, steering) = match control {
            Some(c) => (Some(c.rx), Some(c.partial), Some(c.steering)),
            None => (None, None, None),
        };
        let mut driver = Driver {
            agent: self,
            session: session.to_string(),
            run_id: run_id.clone(),
            tx,
            tasks: Tasks::default(),
            state_since: [None; 2],
            order: (self.timeouts.tool_order == ToolOrder::CallOrder)
                .then(CompletionOrder::default),
            answers: Vec::new(),
            attempts: Vec::new(),
            model_tx,
            model_rx,
            metrics: RunMetrics::default(),
            compact_before: None,
        };
        // The first inputs: queued subtasks (if any), then `Start` or `Resume`.
        let mut pending = VecDeque::from(first);
        let mut partial_mark = None;
        // Steering the machine did not take (it arrived after the run's end was decided).
        let mut undelivered = Vec::new();
        loop {
            let event = match pending.pop_front() {
                Some(e) => e,
                None => {
                    tokio::select! {
                        e = std::future::poll_fn(|cx| driver.poll_model(cx)) => {
                            pending.extend(driver.arrived(e));
                            continue;
                        }
                        Some(e) = rx.recv() => {
                            pending.extend(driver.arrived(e));
                            continue;
                        }
                        Some(e) = async { match ctl.as_mut() { Some(c) => c.recv().await, None => None } } => e,
                    }
                }
            };
            // A typed final answer's verdict rides on its `done` (recorded with it).
            let event = match &output_check {
                Some(check) => check.annotate(event, &run),
                None => event,
            };
            // The event is cloned only when a trace keeps it.
            let kept = trace.as_ref().map(|_| event.clone());
            let steer = match &event {
                Event::Steer { text } => Some(text.clone()),
                _ => None,
            };
            let step = run.handle(event);
            if let Some(text) = &steer {
                // A run past its last step boundary does not take steering: it is handed back.
                if step.unhandled {
                    undelivered.push(text.clone());
                }
            }
            if let Some(s) = &steering {
                if steer.is_some() {
                    s.received.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                s.pending
                    .store(run.steering().len(), std::sync::atomic::Ordering::SeqCst);
            }
            if let (Some(t), Some(event)) = (trace.as_mut(), kept.as_ref()) {
                t.record(event, &step);
            }
            // R-STR-2: observers see the message as the machines assembled it, before the
            // step's events (a `text_delta`, say) are delivered.
            if let Some(p) = &partial {
                p.refresh(&run, &mut partial_mark);
            }
            if let Some(failed) = driver.perform(step.effects).await {
                pending.push_front(failed);
            }
            pending.extend(driver.answers.drain(..));
            if run.is_terminal() && pending.is_empty() {
                break;
            }
        }
        driver.tasks.shutdown();
        if let Some(p) = &partial {
            p.set(None);
        }
        // Steering sent after the run's last step never reached its machine: it is handed
        // back with the queue's leftovers.
        if let Some(c) = ctl.as_mut() {
            while let Ok(e) = c.try_recv() {
                if let Event::Steer { text } = e {
                    undelivered.push(text);
                }
            }
        }
        let result = run.result().cloned().unwrap_or_else(|| LoopResult {
            outcome: crate::agent_event::Outcome::Failed,
            reason: "no result".into(),
            messages: run.messages().to_vec(),
            iterations: 0,
            usage: Default::default(),
            steering_left: run.steering().to_vec(),
            error: Some(crate::error::RunError::NoResult),
            steps: run.steps().to_vec(),
        });
        let mut result = result;
        result.steering_left.extend(undelivered);
        if let Some(s) = &steering {
            s.pending.store(0, std::sync::atomic::Ordering::SeqCst);
        }
        let metrics = std::mem::take(&mut driver.metrics);
        metrics.trace(&run_id);
        Ok(RunOutput {
            run_id,
            result,
            trace,
            metrics,
        })
    }
}
