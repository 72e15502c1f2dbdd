//! The live session handle (SPEC §5, R-CTL): an actor task on tokio that owns an [`Agent`]
//! and a session id, and a cheap, cloneable [`Session`] handle to drive it.
//!
//! ```text
//!  Session (clone) ──commands──▶ actor ──spawn──▶ run task (Agent::run_configured)
//!        │                        │  ▲                 │ effects, events
//!        │ approve/reject/modify  │  └── run ended ────┘
//!        ▼                        ▼
//!  approvals (shared)        Controller ──Event::Abort / Steer / SwitchModel / SetTools──▶ run
//!        ▲
//!  event bus ◀── every event (runtime + session), indexed; status and metrics observe it
//! ```
//!
//! Behaviour per status follows R-CTL-1..6:
//!
//! | call | idle | busy (`running`, `streaming`, `executing_tools`, `awaiting_approval`) |
//! |---|---|---|
//! | `prompt` | starts a run | queued (`prompt_queued`), started when the run ends |
//! | `steer` | like `prompt` | steering queue (capacity 3, else `QueueFull`); merged at the next step |
//! | `abort` | no-op + `agent_abort` | `Event::Abort` into the run; `clear_queue` drops queued prompts |
//! | `approve`/`reject`/`modify` | `NotPending` error | answers a parked approval |
//! | `switch_model` | immediate | takes effect at the next step |
//! | `attach_tool`/`detach_tool` | next run | next step |
//!
//! Status is derived from the machines' `state_changed` events (the driver reports every
//! transition): process `Calling`/`Retrying` → `running`, `Streaming` → `streaming`,
//! `RunningTools` → `executing_tools`, `AwaitingApproval` (or a parked hook approval) →
//! `awaiting_approval`; outer `Planning`/`Compacting` → `running`.
//!
//! Models are switched by name through the agent's model registry
//! ([`AgentBuilder::extra_model`](crate::runtime::AgentBuilder::extra_model)).

pub mod approvals;
pub mod bus;
pub mod metrics;
pub mod questions;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, watch};

use crate::agent_event::{AgentEvent, SteeringStatus};
use crate::attachment::Prompt;
use crate::chart::{MachineKind, ProcessState, ReactState};
use crate::event::{ApprovalDecision, Event};
use crate::hooks::Verdict;
use crate::message::{AssistantMessage, Message};
use crate::react::{LoopResult, RunConfig};
use crate::runtime::{control_sharing, Agent, Controller, PartialMessage, RunOutput};
use crate::tools::Tool;

pub use approvals::{approval_scope, command_family, ApprovalError};
pub use bus::{EventBus, Subscription, SubscriptionItem};
pub use metrics::{Metrics, Price, PriceTable, ToolStats};

use approvals::{Approvals, SessionApprover};
use bus::BusSink;
use metrics::RunUsage;
pub use questions::AnswerError;
use questions::{Questions, SessionAsker};

/// Which running tools an abort kills (R-CTL-3): the machine's kill policy.
pub use crate::event::KillPolicy as KillTools;

/// How many finished runs' traces a recording session keeps ([`Session::trace_of`]).
pub const RECENT_TRACES: usize = 16;

/// The run a trace recorded: the id its `Start` input carries.
fn trace_run_id(trace: &crate::trace::Trace) -> Option<&str> {
    trace.records.iter().find_map(|r| match r {
        crate::trace::TraceRecord::Input {
            event: Event::Start { run_id, .. },
            ..
        } => Some(run_id.as_str()),
        _ => None,
    })
}

/// The observable status of a session (R-CTL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// No run.
    Idle,
    /// A request was sent, no chunk yet (also planning, retry backoff, compaction).
    Running,
    /// The model is streaming.
    Streaming,
    /// Tools are running.
    ExecutingTools,
    /// A tool call waits for a human.
    AwaitingApproval,
    /// An `ask_user` question waits for the person's answer.
    AwaitingUser,
}

impl Status {
    /// The status a run's `state_changed` into `to` (a state of `machine`'s chart) sets, if
    /// any. The matches are exhaustive over the charts' generated state enums, so a new state
    /// in a chart does not compile until it is given a status here.
    pub fn entered(machine: MachineKind, to: &str) -> Option<Status> {
        match machine {
            MachineKind::React => {
                match ReactState::ALL.iter().copied().find(|s| s.name() == to)? {
                    ReactState::Init | ReactState::Planning | ReactState::Compacting => {
                        Some(Status::Running)
                    }
                    // Executing is refined by the inner machine's own changes; Observing and
                    // Finishing are instants between them; the terminal states end the run
                    // (the session turns idle when the run returns).
                    ReactState::Executing
                    | ReactState::Observing
                    | ReactState::Finishing
                    | ReactState::Completed
                    | ReactState::Failed
                    | ReactState::Aborted => None,
                }
            }
            MachineKind::Process => {
                match ProcessState::ALL.iter().copied().find(|s| s.name() == to)? {
                    ProcessState::Idle | ProcessState::Calling | ProcessState::Retrying => {
                        Some(Status::Running)
                    }
                    ProcessState::Streaming => Some(Status::Streaming),
                    ProcessState::RunningTools | ProcessState::Draining => {
                        Some(Status::ExecutingTools)
                    }
                    ProcessState::AwaitingApproval => Some(Status::AwaitingApproval),
                    ProcessState::Success | ProcessState::Error => None,
                }
            }
            // A tool call's lifecycle is inside ExecutingTools / AwaitingApproval, which the
            // inner machine's own changes set.
            MachineKind::ToolCall => None,
        }
    }

    fn from_u8(v: u8) -> Status {
        match v {
            1 => Status::Running,
            2 => Status::Streaming,
            3 => Status::ExecutingTools,
            4 => Status::AwaitingApproval,
            _ => Status::Idle,
        }
    }

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Idle => "idle",
            Status::Running => "running",
            Status::Streaming => "streaming",
            Status::ExecutingTools => "executing_tools",
            Status::AwaitingApproval => "awaiting_approval",
            Status::AwaitingUser => "awaiting_user",
        }
    }
}

/// Session settings.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// The session id (store key).
    pub session_id: String,
    /// Steering queue capacity (default 3).
    pub steering_capacity: usize,
    /// Ring buffer of past events for `subscribe(since)` (default 0: off).
    pub event_buffer_size: usize,
    /// Live events buffered per subscriber before it lags (default 4096). Memory follows
    /// use: the bus holds only events a subscriber has not read yet (or the ring keeps).
    pub subscriber_capacity: usize,
    /// Approval timeout; expiry counts as a reject (default 5 minutes; `None`: wait forever).
    /// It becomes the agent's `StepConfig::approval_timeout_ms` (a timer of each step's
    /// machine, recorded in the trace), replacing what the agent's builder set.
    pub approval_timeout_ms: Option<u64>,
    /// Prices for usage reports (default empty: usage without cost).
    pub prices: PriceTable,
    /// Record a trace of every run (R-TRACE-1); the latest is [`Session::last_trace`], the
    /// last [`RECENT_TRACES`] by run id [`Session::trace_of`]
    /// (default off).
    pub record_traces: bool,
}

impl SessionConfig {
    /// Defaults for session `id`.
    pub fn new(id: impl Into<String>) -> Self {
        SessionConfig {
            session_id: id.into(),
            steering_capacity: 3,
            event_buffer_size: 0,
            subscriber_capacity: 4096,
            approval_timeout_ms: Some(300_000),
            prices: PriceTable::default(),
            record_traces: false,
        }
    }

    /// Records a trace of every run (R-TRACE-1): read it with [`Session::last_trace`].
    pub fn record_traces(mut self, on: bool) -> Self {
        self.record_traces = on;
        self
    }

    /// Sets the ring buffer size (R-EVT-1).
    pub fn event_buffer_size(mut self, n: usize) -> Self {
        self.event_buffer_size = n;
        self
    }

    /// Sets the steering queue capacity.
    pub fn steering_capacity(mut self, n: usize) -> Self {
        self.steering_capacity = n;
        self
    }

    /// Sets the approval timeout.
    pub fn approval_timeout_ms(mut self, ms: Option<u64>) -> Self {
        self.approval_timeout_ms = ms;
        self
    }

    /// Sets the price table.
    pub fn prices(mut self, prices: PriceTable) -> Self {
        self.prices = prices;
        self
    }
}

/// Errors of session calls. None of them changes the session: they are answers to the caller.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The steering queue is full (R-CTL-2).
    #[error("steering queue is full ({capacity} messages)")]
    QueueFull {
        /// The capacity.
        capacity: usize,
    },
    /// A hook rejected the prompt or steering message.
    #[error("rejected by a hook: {0}")]
    Rejected(String),
    /// The approval is not pending (unknown id, double answer, timed out).
    #[error(transparent)]
    Approval(#[from] ApprovalError),
    /// No `ask_user` question with that ref waits (unknown, already answered, timed out).
    #[error(transparent)]
    Answer(#[from] AnswerError),
    /// No model of that name is registered.
    #[error("unknown model {0:?} (registered: {1:?})")]
    UnknownModel(String, Vec<String>),
    /// No attached tool of that name.
    #[error("unknown tool {0:?}")]
    UnknownTool(String),
    /// The session actor is gone.
    #[error("the session is closed")]
    Closed,
}

/// What `prompt` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptAck {
    /// The session was idle: a run started.
    Started,
    /// A run is busy: queued at this position (1 = next).
    Queued(usize),
}

/// What `steer` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SteerAck {
    /// The session was idle: the message started a run.
    Started,
    /// Queued for the next step boundary (reference for `steering_received`).
    Queued(u64),
}

/// What `subtask` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubtaskAck {
    /// The session was idle: a run started with it (no new user message).
    Started,
    /// Queued into the running run: it runs before the run's next model step.
    Queued,
}

/// What `abort` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbortAck {
    /// Nothing was running: `agent_abort` was emitted anyway.
    Idle,
    /// The running run was told to abort.
    Aborting,
}

enum Command {
    // Boxed: the channel's blocks hold 32 commands each, and an idle session's share of them
    // counts against its 8 KiB budget (tests/session_size.rs).
    Prompt(
        Box<Prompt>,
        oneshot::Sender<Result<PromptAck, SessionError>>,
    ),
    Steer(String, oneshot::Sender<Result<SteerAck, SessionError>>),
    Subtask(
        Box<(String, serde_json::Value)>,
        oneshot::Sender<Result<SubtaskAck, SessionError>>,
    ),
    Abort {
        reason: String,
        kill: KillTools,
        clear_queue: bool,
        reply: oneshot::Sender<AbortAck>,
    },
    SwitchModel(String, oneshot::Sender<Result<bool, SessionError>>),
    Attach(Arc<dyn Tool>, oneshot::Sender<Result<(), SessionError>>),
    Detach(String, oneshot::Sender<Result<(), SessionError>>),
    /// Boxed: a command is a slot of the session's channel blocks, sized by the largest.
    Update(Box<ToolUpdate>),
}

/// `update_tools`' batch.
struct ToolUpdate {
    attach: Vec<Arc<dyn Tool>>,
    detach: Vec<String>,
    reply: oneshot::Sender<Result<(), SessionError>>,
}

struct Shared {
    id: String,
    bus: Arc<EventBus>,
    approvals: Arc<Approvals>,
    questions: Arc<Questions>,
    status: AtomicU8,
    busy: AtomicBool,
    saw_abort: AtomicBool,
    metrics: Mutex<Metrics>,
    last_result: Mutex<Option<LoopResult>>,
    /// The traces of the last [`RECENT_TRACES`] finished runs, oldest first, when recording.
    traces: Mutex<VecDeque<crate::trace::Trace>>,
    run_usage: Mutex<RunUsage>,
    idle: watch::Sender<bool>,
    /// The running run's partial message (R-STR-2); every run of the session publishes here.
    partial: PartialMessage,
}

/// The handle. Clone it freely; the session lives while a handle does.
#[derive(Clone)]
pub struct Session {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<Command>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.shared.id)
            .field("status", &self.status())
            .finish()
    }
}

impl Session {
    /// Starts a session actor for `agent` (must be called inside a tokio runtime). The session
    /// takes over the agent's event sink (its events go to the session bus, then to the old
    /// sink) and approver (approvals are answered through the handle).
    pub fn spawn(mut agent: Agent, config: SessionConfig) -> Session {
        let bus = Arc::new(EventBus::new(
            config.subscriber_capacity,
            config.event_buffer_size,
            agent.clock.clone(),
            agent.hooks.clone(),
            agent.sink.clone(),
        ));
        let approvals = Arc::new(Approvals::default());
        agent.sink = Arc::new(BusSink(bus.clone()));
        agent.approver = Arc::new(SessionApprover {
            approvals: approvals.clone(),
        });
        // The approval timeout is a timer of each step's machine (R-CTL-4).
        Arc::make_mut(&mut agent.config).step.approval_timeout_ms = config.approval_timeout_ms;
        let questions = Arc::new(Questions::default());
        agent.asker = Arc::new(SessionAsker {
            questions: questions.clone(),
        });
        let (idle, _) = watch::channel(true);
        let shared = Arc::new(Shared {
            id: config.session_id.clone(),
            bus: bus.clone(),
            approvals,
            questions,
            status: AtomicU8::new(0),
            busy: AtomicBool::new(false),
            saw_abort: AtomicBool::new(false),
            metrics: Mutex::new(Metrics::default()),
            last_result: Mutex::new(None),
            traces: Mutex::new(VecDeque::new()),
            run_usage: Mutex::new(RunUsage::default()),
            idle,
            partial: PartialMessage::default(),
        });
        bus.observe(observer(Arc::downgrade(&shared), config.prices.clone()));
        let (tx, rx) = mpsc::unbounded_channel();
        let run_config = agent.config.clone();
        let actor = Actor {
            agent: Arc::new(agent),
            shared: shared.clone(),
            config: run_config,
            steering_capacity: config.steering_capacity,
            record: config.record_traces,
            queue: VecDeque::new(),
            current: None,
            steering_ref: 0,
        };
        tokio::spawn(actor.run(rx));
        Session { shared, tx }
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The trace of the last finished run, when the session records traces
    /// ([`SessionConfig::record_traces`], R-TRACE-1). It replays like any other trace.
    pub fn last_trace(&self) -> Option<crate::trace::Trace> {
        self.shared
            .traces
            .lock()
            .ok()
            .and_then(|t| t.back().cloned())
    }

    /// The trace of run `run_id` if it is one of the last [`RECENT_TRACES`] finished runs and
    /// the session records traces. A run's trace is kept when its task returns, just after
    /// its last event: a caller that saw a run's end event and wants its trace (queued runs
    /// may end one after another before the caller looks) asks by id, not for the last one.
    pub fn trace_of(&self, run_id: &str) -> Option<crate::trace::Trace> {
        let traces = self.shared.traces.lock().ok()?;
        traces
            .iter()
            .rev()
            .find(|t| trace_run_id(t) == Some(run_id))
            .cloned()
    }

    /// Sends a prompt (R-CTL-1): idle → a run starts; busy → queued (`prompt_queued`) and
    /// started automatically when the run ends. A `before_prompt` hook may reject it
    /// (`prompt_rejected`).
    pub async fn prompt(&self, text: impl Into<String>) -> Result<PromptAck, SessionError> {
        self.prompt_with(Prompt::new(text)).await
    }

    /// Like [`Session::prompt`], for a prompt with images and files (content parts after its
    /// text). Hooks and events see the prompt's text.
    pub async fn prompt_with(&self, prompt: impl Into<Prompt>) -> Result<PromptAck, SessionError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Prompt(Box::new(prompt.into()), reply))?;
        rx.await.map_err(|_| SessionError::Closed)?
    }

    /// Steers the running run (R-CTL-2): idle → like `prompt`; busy → queued for the next step
    /// boundary (`steering_received{status: queued}`), or `QueueFull` when the queue holds
    /// `steering_capacity` messages (`steering_received{status: rejected_full}`).
    pub async fn steer(&self, text: impl Into<String>) -> Result<SteerAck, SessionError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Steer(text.into(), reply))?;
        rx.await.map_err(|_| SessionError::Closed)?
    }

    /// Queues a subtask: a call of `tool` (usually a
    /// [`SubagentTool`](crate::subagent::SubagentTool)) with `arguments` that runs before the
    /// next model step, under the normal tool pipeline (approval, rules, timeouts, abort); the
    /// model then sees the call and its result. Busy → queued into the running run (row
    /// `active_subtask`, run by `planning_subtask`; a run that would end keeps going to run
    /// it); idle → a run starts with it and no new user message. For a prompt carrying
    /// subtasks, see [`Prompt::subtask`](crate::attachment::Prompt::subtask).
    pub async fn subtask(
        &self,
        tool: impl Into<String>,
        arguments: serde_json::Value,
    ) -> Result<SubtaskAck, SessionError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Subtask(Box::new((tool.into(), arguments)), reply))?;
        rx.await.map_err(|_| SessionError::Closed)?
    }

    /// Aborts (R-CTL-3), in every status: idle → no-op plus `agent_abort`; busy → the run
    /// cancels its stream and timers and kills tools per `kill`. `clear_queue` drops queued
    /// prompts (`prompt_dropped`).
    pub async fn abort(
        &self,
        reason: impl Into<String>,
        kill: KillTools,
        clear_queue: bool,
    ) -> Result<AbortAck, SessionError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Abort {
            reason: reason.into(),
            kill,
            clear_queue,
            reply,
        })?;
        rx.await.map_err(|_| SessionError::Closed)
    }

    /// Like [`Session::abort`], without waiting for the answer (usable in `Drop`).
    pub fn abort_nowait(
        &self,
        reason: impl Into<String>,
        kill: KillTools,
        clear_queue: bool,
    ) -> Result<(), SessionError> {
        let (reply, _) = oneshot::channel();
        self.send(Command::Abort {
            reason: reason.into(),
            kill,
            clear_queue,
            reply,
        })
    }

    /// Approves a pending call (R-CTL-4); `always` whitelists its
    /// [`approval_scope`] — the tool, or a shell-like tool's command family (`git` for
    /// `git status`, never the whole tool) — for the session, and tells the run so
    /// (`ApprovedAlways`: its machine skips asking for that scope in the rest of the run).
    /// Unknown or already decided calls are a harmless `Approval` error.
    pub fn approve(&self, tool_call_id: &str, always: bool) -> Result<(), SessionError> {
        let decision = if always {
            ApprovalDecision::ApprovedAlways
        } else {
            ApprovalDecision::Approved
        };
        Ok(self
            .shared
            .approvals
            .answer(&self.shared.bus, tool_call_id, decision, always)?)
    }

    /// Rejects a pending call: the model sees a denied result.
    pub fn reject(
        &self,
        tool_call_id: &str,
        reason: impl Into<String>,
    ) -> Result<(), SessionError> {
        Ok(self.shared.approvals.answer(
            &self.shared.bus,
            tool_call_id,
            ApprovalDecision::Rejected {
                reason: reason.into(),
            },
            false,
        )?)
    }

    /// Runs a pending call with other arguments.
    pub fn modify(
        &self,
        tool_call_id: &str,
        arguments: serde_json::Value,
    ) -> Result<(), SessionError> {
        Ok(self.shared.approvals.answer(
            &self.shared.bus,
            tool_call_id,
            ApprovalDecision::Modified { arguments },
            false,
        )?)
    }

    /// Ids of calls waiting for approval.
    pub fn pending_approvals(&self) -> Vec<String> {
        self.shared.approvals.pending_ids()
    }

    /// Answers the `ask_user` question `reference` (the `ask_user` event's
    /// ref): the waiting call gets `answer` as its result and the run goes on.
    pub fn respond(&self, reference: &str, answer: impl Into<String>) -> Result<(), SessionError> {
        Ok(self.shared.questions.answer(reference, answer.into())?)
    }

    /// The `ask_user` questions waiting for an answer.
    pub fn pending_questions(&self) -> Vec<crate::runtime::Question> {
        self.shared.questions.pending()
    }

    /// Switches the model (R-CTL-5): idle → now; busy → from the next step. Returns false (and
    /// emits nothing) when it is already the model. The name must be registered.
    pub async fn switch_model(&self, model: impl Into<String>) -> Result<bool, SessionError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::SwitchModel(model.into(), reply))?;
        rx.await.map_err(|_| SessionError::Closed)?
    }

    /// Attaches (or replaces) a tool (R-CTL-6): offered from the next step on.
    pub async fn attach_tool(&self, tool: Arc<dyn Tool>) -> Result<(), SessionError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Attach(tool, reply))?;
        rx.await.map_err(|_| SessionError::Closed)?
    }

    /// Detaches a tool: later calls to it get an "unknown tool" error result.
    pub async fn detach_tool(&self, name: impl Into<String>) -> Result<(), SessionError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Detach(name.into(), reply))?;
        rx.await.map_err(|_| SessionError::Closed)?
    }

    /// Detaches the tools named in `detach`, then attaches `attach` (replacing tools of the
    /// same name), as one change (R-CTL-6): one `tools_updated{attached, detached}`
    /// event, and the next step offers the new set. A name in `detach` that is not attached
    /// is an [`SessionError::UnknownTool`] error and nothing changes.
    pub async fn update_tools(
        &self,
        attach: Vec<Arc<dyn Tool>>,
        detach: Vec<String>,
    ) -> Result<(), SessionError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Update(Box::new(ToolUpdate {
            attach,
            detach,
            reply,
        })))?;
        rx.await.map_err(|_| SessionError::Closed)?
    }

    /// Subscribes to events (R-EVT-1). `since`: replay events after this index that the ring
    /// buffer still holds (a `Lagged(n)` item first if some are gone); `types`: only these
    /// event type names (`text_delta`, `agent_abort`, ...). See [`bus`] for lag behaviour.
    pub fn subscribe(&self, since: Option<u64>, types: Option<Vec<String>>) -> Subscription {
        self.shared.bus.subscribe(since, types)
    }

    /// The event bus (to publish custom events, or for subagents to forward into).
    pub fn bus(&self) -> &Arc<EventBus> {
        &self.shared.bus
    }

    /// The current status.
    pub fn status(&self) -> Status {
        if !self.shared.busy.load(Ordering::SeqCst) {
            return Status::Idle;
        }
        if self.shared.approvals.has_pending() {
            return Status::AwaitingApproval;
        }
        if self.shared.questions.has_pending() {
            return Status::AwaitingUser;
        }
        match Status::from_u8(self.shared.status.load(Ordering::SeqCst)) {
            Status::Idle => Status::Running,
            s => s,
        }
    }

    /// A snapshot of the metrics (R-OBS).
    pub fn metrics(&self) -> Metrics {
        self.shared
            .metrics
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    /// A snapshot of the message the running run is streaming (R-STR-2): the current step's
    /// message as assembled so far, refreshed after every delta the machines accept (before
    /// its `text_delta` event is published). `None` when idle and between steps. Cheap: an
    /// `Arc` clone under a read lock.
    pub fn partial(&self) -> Option<Arc<AssistantMessage>> {
        self.shared.partial.get()
    }

    /// The result of the last finished run.
    pub fn last_result(&self) -> Option<LoopResult> {
        self.shared.last_result.lock().ok().and_then(|r| r.clone())
    }

    /// Waits until no run is going and the prompt queue is empty.
    pub async fn wait_idle(&self) {
        let mut rx = self.shared.idle.subscribe();
        let _ = rx.wait_for(|idle| *idle).await;
    }

    fn send(&self, c: Command) -> Result<(), SessionError> {
        self.tx.send(c).map_err(|_| SessionError::Closed)
    }
}

/// Folds every bus event into status, metrics, steering bookkeeping and usage; returns the
/// derived events (step usage reports).
fn observer(shared: std::sync::Weak<Shared>, prices: PriceTable) -> bus::Observer {
    let model = Mutex::new(String::new());
    Box::new(move |env| {
        let Some(shared) = shared.upgrade() else {
            return Vec::new();
        };
        if let Ok(mut m) = shared.metrics.lock() {
            m.observe(env);
        }
        let mut derived = Vec::new();
        match &env.event {
            AgentEvent::StateChanged { machine, to, .. } => {
                if let Some(s) = Status::entered(*machine, to) {
                    shared.status.store(s as u8, Ordering::SeqCst);
                }
            }
            AgentEvent::RequestStart { model: m, .. } => {
                if let Ok(mut cur) = model.lock() {
                    *cur = m.clone();
                }
            }
            AgentEvent::ResponseComplete {
                model_call_index,
                usage: Some(u),
                ..
            } => {
                let m = model.lock().map(|m| m.clone()).unwrap_or_default();
                if let Ok(mut ru) = shared.run_usage.lock() {
                    derived.push(ru.step(&prices, &m, *model_call_index, u));
                }
            }
            AgentEvent::AgentAbort { .. } => shared.saw_abort.store(true, Ordering::SeqCst),
            _ => {}
        }
        derived
    })
}

struct Current {
    controller: Controller,
    /// `steer` events sent to this run.
    steers_sent: u64,
    run: tokio::task::JoinHandle<Result<RunOutput, crate::runtime::AgentError>>,
    abort_requested: Option<String>,
}

struct Actor {
    agent: Arc<Agent>,
    shared: Arc<Shared>,
    /// The configuration the next run starts with (model and tools as switched/attached):
    /// the agent's, shared until the session first changes it.
    config: Arc<RunConfig>,
    steering_capacity: usize,
    /// Record a trace of each run.
    record: bool,
    queue: VecDeque<Prompt>,
    current: Option<Current>,
    steering_ref: u64,
}

impl Actor {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        loop {
            let ended = async {
                match self.current.as_mut() {
                    Some(c) => Some((&mut c.run).await),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                cmd = rx.recv() => match cmd {
                    Some(cmd) => self.command(cmd),
                    None => break,
                },
                Some(out) = ended => self.run_ended(out),
            }
        }
        // Every handle is gone: stop the run in progress.
        if let Some(c) = self.current.take() {
            c.controller.abort("session closed");
            let _ = c.run.await;
        }
    }

    fn publish(&self, event: AgentEvent) {
        self.shared.bus.publish_current(event);
    }

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Prompt(prompt, reply) => {
                let _ = reply.send(self.prompt(*prompt));
            }
            Command::Steer(text, reply) => {
                let _ = reply.send(self.steer(text));
            }
            Command::Subtask(task, reply) => {
                let (tool, arguments) = *task;
                let _ = reply.send(Ok(self.subtask(tool, arguments)));
            }
            Command::Abort {
                reason,
                kill,
                clear_queue,
                reply,
            } => {
                let _ = reply.send(self.abort(reason, kill, clear_queue));
            }
            Command::SwitchModel(model, reply) => {
                let _ = reply.send(self.switch_model(model));
            }
            Command::Attach(tool, reply) => {
                let name = self.configure_attached(&tool);
                self.agent.tools.insert(tool);
                Arc::make_mut(&mut self.config).tools = self.agent.tools.specs();
                self.publish(AgentEvent::ToolAttached { name });
                self.tools_changed();
                let _ = reply.send(Ok(()));
            }
            Command::Update(update) => {
                let ToolUpdate {
                    attach,
                    detach,
                    reply,
                } = *update;
                let r = match self.agent.tools.update(&attach, &detach) {
                    Ok(()) => {
                        for name in &detach {
                            Arc::make_mut(&mut self.config).step.immune.remove(name);
                            Arc::make_mut(&mut self.config).step.set_pure(name, false);
                        }
                        let attached = attach.iter().map(|t| self.configure_attached(t)).collect();
                        Arc::make_mut(&mut self.config).tools = self.agent.tools.specs();
                        self.publish(AgentEvent::ToolsUpdated {
                            attached,
                            detached: detach,
                        });
                        self.tools_changed();
                        Ok(())
                    }
                    Err(name) => Err(SessionError::UnknownTool(name)),
                };
                let _ = reply.send(r);
            }
            Command::Detach(name, reply) => {
                let r = if self.agent.tools.remove(&name).is_some() {
                    Arc::make_mut(&mut self.config).tools = self.agent.tools.specs();
                    self.publish(AgentEvent::ToolDetached { name });
                    self.tools_changed();
                    Ok(())
                } else {
                    Err(SessionError::UnknownTool(name))
                };
                let _ = reply.send(r);
            }
        }
    }

    fn prompt(&mut self, prompt: Prompt) -> Result<PromptAck, SessionError> {
        let text = prompt.text.clone();
        if let Verdict::Reject(reason) = self.agent.hooks.before_prompt(&text) {
            self.publish(AgentEvent::PromptRejected {
                text,
                reason: reason.clone(),
            });
            return Err(SessionError::Rejected(reason));
        }
        self.publish(AgentEvent::PromptReceived { text: text.clone() });
        if self.current.is_some() {
            self.queue.push_back(prompt);
            self.publish(AgentEvent::PromptQueued {
                text,
                queued: self.queue.len(),
            });
            Ok(PromptAck::Queued(self.queue.len()))
        } else {
            self.start(prompt);
            Ok(PromptAck::Started)
        }
    }

    fn steer(&mut self, text: String) -> Result<SteerAck, SessionError> {
        self.steering_ref += 1;
        let steering_ref = self.steering_ref;
        let received = |status| AgentEvent::SteeringReceived {
            steering_ref,
            text: text.clone(),
            status,
        };
        if let Verdict::Reject(reason) = self.agent.hooks.before_steering(&text) {
            self.publish(received(SteeringStatus::RejectedHook));
            return Err(SessionError::Rejected(reason));
        }
        let Some(current) = self.current.as_ref() else {
            self.publish(received(SteeringStatus::StartedRun));
            self.start(Prompt::new(text));
            return Ok(SteerAck::Started);
        };
        // The queue is the run's machine's: what it holds, plus what was sent and has not
        // reached it yet.
        let counts = current.controller.steering();
        let in_flight = current.steers_sent.saturating_sub(counts.received());
        let pending = counts.pending() + usize::try_from(in_flight).unwrap_or(usize::MAX);
        if pending >= self.steering_capacity {
            self.publish(received(SteeringStatus::RejectedFull));
            return Err(SessionError::QueueFull {
                capacity: self.steering_capacity,
            });
        }
        self.publish(received(SteeringStatus::Queued));
        forward_steer(&current.controller, &text);
        if let Some(c) = self.current.as_mut() {
            c.steers_sent += 1;
        }
        Ok(SteerAck::Queued(steering_ref))
    }

    fn subtask(&mut self, tool: String, arguments: serde_json::Value) -> SubtaskAck {
        match self.current.as_ref() {
            Some(current) => {
                current.controller.send(Event::Subtask { tool, arguments });
                SubtaskAck::Queued
            }
            None => {
                let prompt = Prompt::new("").subtask(tool, arguments);
                self.start_with(Vec::new(), prompt.subtask_events());
                SubtaskAck::Started
            }
        }
    }

    fn abort(&mut self, reason: String, kill: KillTools, clear_queue: bool) -> AbortAck {
        if clear_queue {
            let dropped: Vec<Prompt> = self.queue.drain(..).collect();
            for prompt in dropped {
                self.publish(AgentEvent::PromptDropped { text: prompt.text });
            }
        }
        match self.current.as_mut() {
            None => {
                self.shared
                    .bus
                    .publish("", AgentEvent::AgentAbort { reason });
                AbortAck::Idle
            }
            Some(c) => {
                if c.abort_requested.is_none() {
                    c.abort_requested = Some(reason.clone());
                }
                forward_abort(&c.controller, reason, kill);
                AbortAck::Aborting
            }
        }
    }

    fn switch_model(&mut self, model: String) -> Result<bool, SessionError> {
        if self.agent.model_named(&model).is_none() {
            return Err(SessionError::UnknownModel(model, self.agent.model_names()));
        }
        if model == self.config.model {
            return Ok(false);
        }
        let from = std::mem::replace(&mut Arc::make_mut(&mut self.config).model, model.clone());
        match &self.current {
            // The machine switches at the next step and emits `model_switched` itself.
            Some(c) => forward_switch_model(&c.controller, &model),
            None => self.publish(AgentEvent::ModelSwitched { from, to: model }),
        }
        Ok(true)
    }

    /// Records an attached tool's kill immunity and purity in the session's configuration
    /// (pure tools take effect from the next run: a running one keeps its own); its name.
    fn configure_attached(&mut self, tool: &Arc<dyn Tool>) -> String {
        let name = tool.spec().name;
        if tool.killable() {
            Arc::make_mut(&mut self.config).step.immune.remove(&name);
        } else {
            Arc::make_mut(&mut self.config)
                .step
                .immune
                .insert(name.clone());
        }
        Arc::make_mut(&mut self.config)
            .step
            .set_pure(&name, tool.pure());
        name
    }

    fn tools_changed(&self) {
        if let Some(c) = &self.current {
            forward_set_tools(&c.controller, &self.config);
        }
    }

    fn start(&mut self, prompt: Prompt) {
        let before = prompt.subtask_events();
        self.start_with(vec![prompt.into_message()], before);
    }

    /// Starts a run of `input`, feeding `before` (queued subtasks) to its machine first.
    fn start_with(&mut self, input: Vec<Message>, before: Vec<Event>) {
        let (controller, receiver) = control_sharing(self.shared.partial.clone());
        let agent = self.agent.clone();
        let config = (*self.config).clone();
        let id = self.shared.id.clone();
        let record = self.record;
        self.shared.saw_abort.store(false, Ordering::SeqCst);
        if let Ok(mut u) = self.shared.run_usage.lock() {
            *u = RunUsage::default();
        }
        self.shared
            .status
            .store(Status::Running as u8, Ordering::SeqCst);
        self.shared.busy.store(true, Ordering::SeqCst);
        self.shared.idle.send_replace(false);
        let run = tokio::spawn(async move {
            agent
                .run_queued_here(&id, input, before, config, Some(receiver), record)
                .await
        });
        self.current = Some(Current {
            controller,
            run,
            steers_sent: 0,
            abort_requested: None,
        });
    }

    fn run_ended(
        &mut self,
        out: Result<Result<RunOutput, crate::runtime::AgentError>, tokio::task::JoinError>,
    ) {
        let Some(current) = self.current.take() else {
            return;
        };
        let mut leftover = Vec::new();
        let result = match out {
            Ok(Ok(o)) => {
                leftover = o.result.steering_left.clone();
                if let (Some(t), Ok(mut traces)) = (o.trace, self.shared.traces.lock()) {
                    if traces.len() >= RECENT_TRACES {
                        traces.pop_front();
                    }
                    traces.push_back(t);
                }
                Some(o.result)
            }
            Ok(Err(e)) => {
                self.publish(AgentEvent::RunError {
                    error: e.to_string(),
                });
                None
            }
            Err(e) => {
                self.publish(AgentEvent::RunError {
                    error: format!("run task failed: {e}"),
                });
                None
            }
        };
        // R-CTL-3: an abort always produces `agent_abort`, even if the run ended on its own
        // just before the abort reached it.
        if let Some(reason) = current.abort_requested {
            if !self.shared.saw_abort.load(Ordering::SeqCst) {
                self.publish(AgentEvent::AgentAbort { reason });
            }
        }
        // R-CTX-3: the run's usage, also on abort.
        let total = self.shared.run_usage.lock().ok().and_then(|u| u.total());
        if let Some(total) = total {
            self.publish(total);
        }
        if let (Some(r), Ok(mut last)) = (result, self.shared.last_result.lock()) {
            *last = Some(r);
        }
        // Steering that never reached a step boundary (the run hands it back) becomes the
        // next prompt.
        self.shared.bus.set_current_run("");
        // The driver clears it when a run ends; a run task that died did not.
        self.shared.partial.set(None);
        self.shared.busy.store(false, Ordering::SeqCst);
        self.shared
            .status
            .store(Status::Idle as u8, Ordering::SeqCst);
        let next = if leftover.is_empty() {
            self.queue.pop_front()
        } else {
            Some(Prompt::new(leftover.join("\n\n")))
        };
        match next {
            Some(prompt) => {
                self.publish(AgentEvent::AgentResumed {
                    trigger: "queued_prompt".into(),
                });
                self.start(prompt);
            }
            None => {
                self.shared.idle.send_replace(true);
            }
        }
    }
}

// ---- forwarding into the running machine -------------------------------------------------
// These are the only places that depend on the machines' control events.

fn forward_abort(c: &Controller, reason: String, kill: KillTools) {
    c.abort_with(reason, kill);
}

fn forward_steer(c: &Controller, text: &str) {
    c.send(Event::Steer {
        text: text.to_string(),
    });
}

fn forward_switch_model(c: &Controller, model: &str) {
    c.send(Event::SwitchModel {
        model: model.to_string(),
    });
}

fn forward_set_tools(c: &Controller, config: &RunConfig) {
    c.send(Event::SetTools {
        tools: config.tools.clone(),
        immune: config.step.immune.clone(),
    });
}

#[cfg(test)]
mod status_tests {
    use super::*;

    /// R-CTL-1: every chart state's name is read as a typed state (an unknown name sets
    /// nothing), and the busy states map to their statuses.
    #[test]
    fn every_state_of_both_charts_maps_by_its_typed_name() {
        let react: Vec<_> = ReactState::ALL
            .iter()
            .map(|s| (s.name(), Status::entered(MachineKind::React, s.name())))
            .filter_map(|(n, s)| s.map(|s| (n, s.as_str())))
            .collect();
        assert_eq!(
            react,
            [
                ("Init", "running"),
                ("Planning", "running"),
                ("Compacting", "running")
            ]
        );
        let process: Vec<_> = ProcessState::ALL
            .iter()
            .filter_map(|s| {
                Status::entered(MachineKind::Process, s.name()).map(|st| (s.name(), st.as_str()))
            })
            .collect();
        assert_eq!(
            process,
            [
                ("Idle", "running"),
                ("Calling", "running"),
                ("Streaming", "streaming"),
                ("Retrying", "running"),
                ("RunningTools", "executing_tools"),
                ("AwaitingApproval", "awaiting_approval"),
                ("Draining", "executing_tools"),
            ]
        );
        assert_eq!(Status::entered(MachineKind::Process, "Nowhere"), None);
        assert_eq!(Status::entered(MachineKind::React, "Streaming"), None);
    }
}
