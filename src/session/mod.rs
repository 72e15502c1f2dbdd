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
//! What each command does is decided by the session machine
//! ([`agentloop_core::session_machine`], generated from `statecharts/session.toml`, printed by
//! `agentloop chart session`): the actor feeds it each command (with the hook's verdict, the
//! run's steering counts, whether the registry knows a model) and each run's end, and performs
//! the typed effects it returns. Behaviour per status follows R-CTL-1..6:
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
//! Status is idle unless the session machine is in `Busy` (Running or Aborting); while busy it
//! is refined from the run's machines' `state_changed` events (the driver reports every
//! transition): process `Calling`/`Retrying` → `running`, `Streaming` → `streaming`,
//! `RunningTools` → `executing_tools`, `AwaitingApproval` (or a parked hook approval) →
//! `awaiting_approval`; outer `Planning`/`Compacting` → `running`.
//!
//! Models are switched by name through the agent's model registry
//! ([`AgentBuilder::extra_model`](crate::runtime::AgentBuilder::extra_model)).
//!
//! ```
//! use agentloop::prelude::*;
//! use agentloop::session::{Ack, Status};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), SessionError> {
//! let agent = Agent::builder().model(ScriptedModel::demo()).builtin_tools().build();
//! let session = Session::spawn(agent, SessionConfig::new("s1").price("scripted", 2.5, 10.0));
//! let mut events = session.subscribe(None, Some(vec!["run_end".into()]));
//! assert_eq!(session.prompt("What is 6*7?").await?, Ack::Started);
//! let end = events.recv().await; // the run's `run_end`
//! assert!(end.is_some());
//! session.wait_idle().await;
//! assert_eq!(session.status(), Status::Idle);
//! assert_eq!(session.metrics().runs, 1);
//! # Ok(()) }
//! ```

mod approvals;
mod bus;
mod metrics;
mod questions;
mod waiting;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, watch};

use crate::agent_event::AgentEvent;
use crate::attachment::Prompt;
use crate::chart::{MachineKind, ProcessState, ReactState, SessionRow, SessionState};
use crate::event::{ApprovalDecision, Event};
use crate::message::{AssistantMessage, Message};
use crate::react::{LoopResult, RunConfig};
use crate::runtime::{control_sharing, Agent, Controller, PartialMessage, RunMetrics, RunOutput};
use crate::tools::Tool;
use agentloop_core::session_machine::{
    Forward, RunInput, Session as SessionMachine, SessionEffect, SessionInput, SessionReply,
};

pub use approvals::{approval_scope, command_family};
pub(crate) use bus::EventBus;
pub use bus::{Subscription, SubscriptionItem};
use metrics::PriceTable;

use approvals::{Approvals, SessionApprover};
use bus::BusSink;
use metrics::RunUsage;
use questions::{Questions, SessionAsker};

/// Which running tools an abort kills (R-CTL-3): the machine's kill policy.
pub use crate::event::KillPolicy as KillTools;

/// How many finished runs' traces a recording session keeps ([`Session::trace_of`]).
pub const RECENT_TRACES: usize = 16;

/// The run a trace recorded: the id its `Start` input carries.
fn trace_run_id(trace: &crate::trace::Trace) -> Option<&str> {
    trace.records.iter().find_map(|r| match r {
        agentloop_core::trace::TraceRecord::Input {
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
            // The session machine's own state is read directly (`Session::status`).
            MachineKind::Session => None,
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
    /// Prices for usage reports ([`price`](Self::price); default none: usage without cost).
    prices: PriceTable,
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

    setters! {
        /// Records a trace of every run (R-TRACE-1): read it with [`Session::last_trace`].
        record_traces(on: bool) => record_traces = on;

        /// Sets the ring buffer size (R-EVT-1).
        event_buffer_size(n: usize) => event_buffer_size = n;

        /// Sets the steering queue capacity.
        steering_capacity(n: usize) => steering_capacity = n;

        /// Sets the approval timeout.
        approval_timeout_ms(ms: Option<u64>) => approval_timeout_ms = ms;
    }

    /// Prices `model`'s tokens, in USD per million: input tokens (not served from cache) and
    /// output tokens (reasoning tokens are output tokens, as the providers count them). Each
    /// step's `usage_report` then carries its cost, and [`RunMetrics::cost_usd`] sums them.
    ///
    /// ```
    /// use agentloop::session::SessionConfig;
    /// let config = SessionConfig::new("s1")
    ///     .price("gpt-4o", 2.5, 10.0)
    ///     .cache_price("gpt-4o", 1.25, 0.0);
    /// # let _ = config;
    /// ```
    pub fn price(
        mut self,
        model: impl Into<String>,
        input_per_mtok: f64,
        output_per_mtok: f64,
    ) -> Self {
        let price = self.prices.price_mut(model.into());
        price.input_per_mtok = input_per_mtok;
        price.output_per_mtok = output_per_mtok;
        self
    }

    /// Prices `model`'s prompt cache, in USD per million input tokens read from the cache and
    /// written to it (both 0 unless set; see [`price`](Self::price)).
    pub fn cache_price(
        mut self,
        model: impl Into<String>,
        read_per_mtok: f64,
        write_per_mtok: f64,
    ) -> Self {
        let price = self.prices.price_mut(model.into());
        price.cache_read_per_mtok = read_per_mtok;
        price.cache_write_per_mtok = write_per_mtok;
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
    /// No approval is pending for this tool call id: unknown id, already answered, or timed
    /// out.
    #[error("no pending approval for tool call {0} (unknown, already decided or timed out)")]
    Approval(String),
    /// No `ask_user` question with this ref waits: unknown, already answered, or timed out.
    #[error("no pending question {0} (unknown, already answered or timed out)")]
    Answer(String),
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

/// What a command did: [`Session::prompt`] (and `prompt_with`) answers `Started` or `Queued`,
/// [`Session::steer`] `Started` or `SteerQueued`, [`Session::subtask`] `Started` or
/// `SubtaskQueued`, [`Session::abort`] `Idle` or `Aborting`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ack {
    /// The session was idle: a run started (for a subtask, with no new user message).
    Started,
    /// A prompt: a run is busy, the prompt is queued at this position (1 = next).
    Queued(usize),
    /// A steering message: queued for the next step boundary (reference for
    /// `steering_received`).
    SteerQueued(u64),
    /// A subtask: queued into the running run, it runs before the run's next model step.
    SubtaskQueued,
    /// An abort: nothing was running (`agent_abort` was emitted anyway).
    Idle,
    /// An abort: the running run was told to abort.
    Aborting,
}

enum Command {
    // Boxed: the channel's blocks hold 32 commands each, and an idle session's share of them
    // counts against its 8 KiB budget (tests/session_size.rs).
    Prompt(Box<Prompt>, oneshot::Sender<Result<Ack, SessionError>>),
    Steer(String, oneshot::Sender<Result<Ack, SessionError>>),
    Subtask(
        Box<(String, serde_json::Value)>,
        oneshot::Sender<Result<Ack, SessionError>>,
    ),
    Abort {
        reason: String,
        kill: KillTools,
        clear_queue: bool,
        reply: oneshot::Sender<Ack>,
    },
    SwitchModel(String, oneshot::Sender<Result<bool, SessionError>>),
    Attach(Arc<dyn Tool>, oneshot::Sender<Result<(), SessionError>>),
    Detach(String, oneshot::Sender<Result<(), SessionError>>),
    /// Boxed: a command is a slot of the session's channel blocks, sized by the largest.
    Update(Box<ToolUpdate>),
    /// A parked approval was answered (`always`: its scope joins the session's whitelist).
    ApprovalAnswered {
        scope: String,
        always: bool,
    },
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
    /// The session machine's state (index in [`SessionState::ALL`]).
    state: AtomicU8,
    /// The session machine's rows taken so far.
    rows: SessionRows,
    saw_abort: AtomicBool,
    metrics: Mutex<RunMetrics>,
    last_result: Mutex<Option<LoopResult>>,
    /// The traces of the last [`RECENT_TRACES`] finished runs, oldest first, when recording.
    traces: Mutex<VecDeque<crate::trace::Trace>>,
    run_usage: Mutex<RunUsage>,
    idle: watch::Sender<bool>,
    /// The running run's partial message (R-STR-2); every run of the session publishes here.
    partial: PartialMessage,
}

/// The rows of the session chart a session's machine took, with counts (R-ARCH-3, R-VER-2):
/// a cheap shared handle (`Session::rows`, with feature `testing`).
#[derive(Clone, Debug, Default)]
struct SessionRows(Arc<Mutex<BTreeMap<SessionRow, usize>>>);

impl SessionRows {
    fn add(&self, row: SessionRow) {
        if let Ok(mut rows) = self.0.lock() {
            *rows.entry(row).or_default() += 1;
        }
    }

    /// The rows taken so far, with how often.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    fn taken(&self) -> BTreeMap<SessionRow, usize> {
        self.0.lock().map(|r| r.clone()).unwrap_or_default()
    }
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
            state: AtomicU8::new(state_index(SessionState::INITIAL)),
            rows: SessionRows::default(),
            saw_abort: AtomicBool::new(false),
            metrics: Mutex::new(RunMetrics::default()),
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
            machine: SessionMachine::new(run_config.model.clone(), config.steering_capacity),
            config: run_config,
            record: config.record_traces,
            queue: VecDeque::new(),
            current: None,
            ended: None,
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
    pub async fn prompt(&self, text: impl Into<String>) -> Result<Ack, SessionError> {
        self.prompt_with(Prompt::new(text)).await
    }

    /// Like [`Session::prompt`], for a prompt with images and files (content parts after its
    /// text). Hooks and events see the prompt's text.
    pub async fn prompt_with(&self, prompt: impl Into<Prompt>) -> Result<Ack, SessionError> {
        self.request(|reply| Command::Prompt(Box::new(prompt.into()), reply))
            .await?
    }

    /// Steers the running run (R-CTL-2): idle → like `prompt`; busy → queued for the next step
    /// boundary (`steering_received{status: queued}`), or `QueueFull` when the queue holds
    /// `steering_capacity` messages (`steering_received{status: rejected_full}`).
    pub async fn steer(&self, text: impl Into<String>) -> Result<Ack, SessionError> {
        self.request(|reply| Command::Steer(text.into(), reply))
            .await?
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
    ) -> Result<Ack, SessionError> {
        self.request(|reply| Command::Subtask(Box::new((tool.into(), arguments)), reply))
            .await?
    }

    /// Aborts (R-CTL-3), in every status: idle → no-op plus `agent_abort`; busy → the run
    /// cancels its stream and timers and kills tools per `kill`. `clear_queue` drops queued
    /// prompts (`prompt_dropped`).
    pub async fn abort(
        &self,
        reason: impl Into<String>,
        kill: KillTools,
        clear_queue: bool,
    ) -> Result<Ack, SessionError> {
        self.request(|reply| Command::Abort {
            reason: reason.into(),
            kill,
            clear_queue,
            reply,
        })
        .await
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
    /// The whitelist is the session machine's (row `approved_always`): every later run starts
    /// with it. Unknown or already decided calls are a harmless `Approval` error.
    pub fn approve(&self, tool_call_id: &str, always: bool) -> Result<(), SessionError> {
        let decision = if always {
            ApprovalDecision::ApprovedAlways
        } else {
            ApprovalDecision::Approved
        };
        self.answer(tool_call_id, decision, always)
    }

    /// Answers a parked approval; the session machine hears of it first
    /// (`approval_answered`), so a run started after this answer is seeded with its scope.
    fn answer(
        &self,
        tool_call_id: &str,
        decision: ApprovalDecision,
        always: bool,
    ) -> Result<(), SessionError> {
        self.shared
            .approvals
            .answer(&self.shared.bus, tool_call_id, decision, always, |call| {
                // A closed session has no later runs to seed.
                let _ = self.send(Command::ApprovalAnswered {
                    scope: approval_scope(call),
                    always,
                });
            })
    }

    /// Rejects a pending call: the model sees a denied result.
    pub fn reject(
        &self,
        tool_call_id: &str,
        reason: impl Into<String>,
    ) -> Result<(), SessionError> {
        self.answer(
            tool_call_id,
            ApprovalDecision::Rejected {
                reason: reason.into(),
            },
            false,
        )
    }

    /// Runs a pending call with other arguments.
    pub fn modify(
        &self,
        tool_call_id: &str,
        arguments: serde_json::Value,
    ) -> Result<(), SessionError> {
        self.answer(
            tool_call_id,
            ApprovalDecision::Modified { arguments },
            false,
        )
    }

    /// Ids of calls waiting for approval.
    pub fn pending_approvals(&self) -> Vec<String> {
        self.shared.approvals.ids()
    }

    /// Answers the `ask_user` question `reference` (the `ask_user` event's
    /// ref): the waiting call gets `answer` as its result and the run goes on.
    pub fn respond(&self, reference: &str, answer: impl Into<String>) -> Result<(), SessionError> {
        self.shared.questions.answer(reference, answer.into())
    }

    /// Refs of the `ask_user` questions waiting for an answer (the `ask_user` event of each
    /// carries its question and options).
    pub fn pending_questions(&self) -> Vec<String> {
        self.shared.questions.ids()
    }

    /// Switches the model (R-CTL-5): idle → now; busy → from the next step. Returns false (and
    /// emits nothing) when it is already the model. The name must be registered.
    pub async fn switch_model(&self, model: impl Into<String>) -> Result<bool, SessionError> {
        self.request(|reply| Command::SwitchModel(model.into(), reply))
            .await?
    }

    /// Attaches (or replaces) a tool (R-CTL-6): offered from the next step on.
    pub async fn attach_tool(&self, tool: Arc<dyn Tool>) -> Result<(), SessionError> {
        self.request(|reply| Command::Attach(tool, reply)).await?
    }

    /// Detaches a tool: later calls to it get an "unknown tool" error result.
    pub async fn detach_tool(&self, name: impl Into<String>) -> Result<(), SessionError> {
        self.request(|reply| Command::Detach(name.into(), reply))
            .await?
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
        self.request(|reply| {
            Command::Update(Box::new(ToolUpdate {
                attach,
                detach,
                reply,
            }))
        })
        .await?
    }

    /// Subscribes to events (R-EVT-1). `since`: replay events after this index that the ring
    /// buffer still holds (a `Lagged(n)` item first if some are gone); `types`: only these
    /// event type names (`text_delta`, `agent_abort`, ...). Slow subscribers never block the
    /// loop: one that falls more than [`SessionConfig::subscriber_capacity`] events behind
    /// loses the oldest it did not read, and its next item is a
    /// [`SubscriptionItem::Lagged`] with the number lost.
    pub fn subscribe(&self, since: Option<u64>, types: Option<Vec<String>>) -> Subscription {
        self.shared.bus.subscribe(since, types)
    }

    /// The events the ring buffer holds, oldest first: the last
    /// [`SessionConfig::event_buffer_size`] events (none when the buffer is off, the default).
    pub fn recent_events(&self) -> Vec<crate::EventEnvelope> {
        self.shared.bus.buffered()
    }

    /// The event bus (for subagents to forward into).
    pub(crate) fn bus(&self) -> &Arc<EventBus> {
        &self.shared.bus
    }

    /// The rows of the session chart (`statecharts/session.toml`) the session's machine has
    /// taken, with how often: a function that reads them, and outlives the session (the close
    /// rows are taken once every handle is gone). For a program's tests of its chart coverage
    /// (feature `testing`; the rows are named by `agentloop_core::chart::SessionRow`).
    #[cfg(feature = "testing")]
    pub fn rows(&self) -> impl Fn() -> BTreeMap<SessionRow, usize> + Send + Sync + 'static {
        let rows = self.shared.rows.clone();
        move || rows.taken()
    }

    /// The current status.
    pub fn status(&self) -> Status {
        if !state_at(self.shared.state.load(Ordering::SeqCst)).in_busy() {
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

    /// A snapshot of the metrics of the session's runs (R-OBS): every run's figures folded
    /// from the session's events, per-tool counters, and the cost of priced steps.
    pub fn metrics(&self) -> RunMetrics {
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

    /// Sends the command `command` makes around a reply channel, and awaits the reply.
    async fn request<T>(
        &self,
        command: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, SessionError> {
        let (reply, rx) = oneshot::channel();
        self.send(command(reply))?;
        rx.await.map_err(|_| SessionError::Closed)
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
    run: tokio::task::JoinHandle<Result<RunOutput, crate::runtime::AgentError>>,
}

/// What a command carries besides what the session machine reads: what a started run or the
/// queue takes (`RunInput::Command`, `QueuePrompt`, `Forward::Subtask`).
enum Payload {
    Prompt(Prompt),
    Subtask(String, serde_json::Value),
}

/// The session actor: it feeds the session machine (`statecharts/session.toml`,
/// [`agentloop_core::session_machine`]) the handle's commands and each run's end, and
/// performs the effects the machine returns. Which command starts, queues, forwards or is
/// rejected is the machine's row, never decided here.
struct Actor {
    agent: Arc<Agent>,
    shared: Arc<Shared>,
    /// The configuration the next run starts with (model and tools as switched/attached):
    /// the agent's, shared until the session first changes it.
    config: Arc<RunConfig>,
    /// Record a trace of each run.
    record: bool,
    /// The session machine.
    machine: SessionMachine,
    /// The queued prompts' payloads, in the machine's queue order.
    queue: VecDeque<Prompt>,
    current: Option<Current>,
    /// The ended run's result, until the machine closes the run (`CloseRun`).
    ended: Option<LoopResult>,
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
        // Every handle is gone: the machine closes (aborting the run in progress).
        self.feed(SessionInput::Close, None);
        if let Some(c) = self.current.take() {
            let _ = c.run.await;
        }
    }

    fn publish(&self, event: AgentEvent) {
        self.shared.bus.publish_current(event);
    }

    /// Feeds the machine one input, performs its effects and returns its reply.
    fn feed(
        &mut self,
        input: SessionInput<'_>,
        mut payload: Option<Payload>,
    ) -> Option<SessionReply> {
        let step = self.machine.handle(input);
        debug_assert!(step.check.holds(), "{}", step.check);
        debug_assert!(
            step.effect_check.as_ref().is_none_or(|c| c.holds()),
            "{:?}",
            step.effect_check
        );
        if let Some(row) = step.row {
            self.shared.rows.add(row);
        }
        self.shared
            .state
            .store(state_index(step.to), Ordering::SeqCst);
        let mut reply = None;
        for effect in step.effects {
            match effect {
                SessionEffect::StartRun { input, whitelist } => {
                    let (messages, before) = match input {
                        RunInput::Command => match payload.take() {
                            Some(Payload::Prompt(p)) => run_input(p),
                            Some(Payload::Subtask(tool, arguments)) => {
                                (Vec::new(), vec![Event::Subtask { tool, arguments }])
                            }
                            None => (Vec::new(), Vec::new()),
                        },
                        RunInput::Queued => {
                            self.queue.pop_front().map(run_input).unwrap_or_default()
                        }
                        RunInput::Leftover(text) => {
                            (vec![Prompt::new(text).into_message()], Vec::new())
                        }
                    };
                    self.start_with(messages, before, whitelist);
                }
                SessionEffect::QueuePrompt => {
                    if let Some(Payload::Prompt(p)) = payload.take() {
                        self.queue.push_back(p);
                    }
                }
                SessionEffect::DropQueued => self.queue.clear(),
                SessionEffect::Forward(f) => {
                    if let Some(c) = &self.current {
                        let _ = match f {
                            Forward::Steer(text) => c.controller.send(Event::Steer { text }),
                            Forward::Subtask => match payload.take() {
                                Some(Payload::Subtask(tool, arguments)) => {
                                    c.controller.send(Event::Subtask { tool, arguments })
                                }
                                _ => false,
                            },
                            Forward::Abort { reason, kill } => {
                                c.controller.abort_with(reason, kill)
                            }
                            Forward::SwitchModel(model) => {
                                c.controller.send(Event::SwitchModel { model })
                            }
                            Forward::SetTools => c.controller.send(Event::SetTools {
                                tools: self.config.tools.clone(),
                                immune: self.config.step.immune.clone(),
                            }),
                        };
                    }
                }
                SessionEffect::UseModel(model) => Arc::make_mut(&mut self.config).model = model,
                SessionEffect::Publish(AgentEvent::AgentAbort { reason })
                    if self.current.is_none() =>
                {
                    // No run: the abort is the session's own event.
                    self.shared
                        .bus
                        .publish("", AgentEvent::AgentAbort { reason });
                }
                SessionEffect::Publish(event) => self.publish(event),
                SessionEffect::CloseRun => self.close_run(),
                SessionEffect::Idle => {
                    self.shared.idle.send_replace(true);
                }
                SessionEffect::Reply(r) => reply = Some(r),
            }
        }
        reply
    }

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Prompt(prompt, reply) => {
                let text = prompt.text.clone();
                let verdict = self.agent.hooks.before_prompt(&text);
                let rejected = verdict.as_ref().err().map(String::as_str);
                let input = SessionInput::Prompt {
                    text: &text,
                    rejected,
                };
                let _ = reply.send(ack(self.feed(input, Some(Payload::Prompt(*prompt)))));
            }
            Command::Steer(text, reply) => {
                let verdict = self.agent.hooks.before_steering(&text);
                let rejected = verdict.as_ref().err().map(String::as_str);
                // The run's machine's steering queue: what it holds and has received.
                let run = self.current.as_ref().map(|c| &c.controller);
                let input = SessionInput::Steer {
                    text: &text,
                    rejected,
                    run_pending: run.map_or(0, Controller::steering_pending),
                    run_received: run.map_or(0, Controller::steering_received),
                };
                let r = self.feed(input, Some(Payload::Prompt(Prompt::new(text.clone()))));
                let _ = reply.send(ack(r));
            }
            Command::Subtask(task, reply) => {
                let (tool, arguments) = *task;
                let r = self.feed(
                    SessionInput::Subtask,
                    Some(Payload::Subtask(tool, arguments)),
                );
                let _ = reply.send(ack(r));
            }
            Command::Abort {
                reason,
                kill,
                clear_queue,
                reply,
            } => {
                let input = SessionInput::Abort {
                    reason: &reason,
                    kill,
                    clear_queue,
                };
                let r = self.feed(input, None);
                let _ = reply.send(match r {
                    Some(SessionReply::AbortIdle) => Ack::Idle,
                    _ => Ack::Aborting,
                });
            }
            Command::SwitchModel(model, reply) => {
                let known = self.agent.model_named(&model).is_some();
                let r = self.feed(
                    SessionInput::SwitchModel {
                        model: &model,
                        known,
                    },
                    None,
                );
                let _ = reply.send(match r {
                    Some(SessionReply::ModelSwitched(changed)) => Ok(changed),
                    Some(SessionReply::UnknownModel(m)) => {
                        Err(SessionError::UnknownModel(m, self.agent.model_names()))
                    }
                    other => Err(error(other)),
                });
            }
            Command::ApprovalAnswered { scope, always } => {
                self.feed(
                    SessionInput::ApprovalAnswered {
                        scope: &scope,
                        always,
                    },
                    None,
                );
            }
            Command::Attach(tool, reply) => {
                let name = self.configure_attached(&tool);
                self.agent.tools.insert(tool);
                self.tools_changed(AgentEvent::ToolAttached { name });
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
                        let step = &mut Arc::make_mut(&mut self.config).step;
                        for name in &detach {
                            step.immune.remove(name);
                            step.set_pure(name, false);
                        }
                        let attached = attach.iter().map(|t| self.configure_attached(t)).collect();
                        self.tools_changed(AgentEvent::ToolsUpdated {
                            attached,
                            detached: detach,
                        });
                        Ok(())
                    }
                    Err(name) => Err(SessionError::UnknownTool(name)),
                };
                let _ = reply.send(r);
            }
            Command::Detach(name, reply) => {
                let r = if self.agent.tools.remove(&name).is_some() {
                    self.tools_changed(AgentEvent::ToolDetached { name });
                    Ok(())
                } else {
                    Err(SessionError::UnknownTool(name))
                };
                let _ = reply.send(r);
            }
        }
    }

    /// The agent's tools changed: the next runs offer them, `event` says how, and the machine
    /// hears of it (a running run gets the new set).
    fn tools_changed(&mut self, event: AgentEvent) {
        Arc::make_mut(&mut self.config).tools = self.agent.tools.specs();
        self.publish(event);
        self.feed(SessionInput::ToolsChanged, None);
    }

    /// Records an attached tool's kill immunity and purity in the session's configuration
    /// (pure tools take effect from the next run: a running one keeps its own); its name.
    fn configure_attached(&mut self, tool: &Arc<dyn Tool>) -> String {
        let name = tool.spec().name;
        let step = &mut Arc::make_mut(&mut self.config).step;
        if tool.killable() {
            step.immune.remove(&name);
        } else {
            step.immune.insert(name.clone());
        }
        step.set_pure(&name, tool.pure());
        name
    }

    /// Starts a run of `input`, feeding `before` (queued subtasks) to its machine first; its
    /// first step's approval whitelist is the session's (`whitelist`).
    fn start_with(&mut self, input: Vec<Message>, before: Vec<Event>, whitelist: BTreeSet<String>) {
        let (controller, receiver) = control_sharing(self.shared.partial.clone());
        let agent = self.agent.clone();
        let mut config = (*self.config).clone();
        config.approved_always = whitelist;
        let id = self.shared.id.clone();
        let record = self.record;
        self.shared.saw_abort.store(false, Ordering::SeqCst);
        if let Ok(mut u) = self.shared.run_usage.lock() {
            *u = RunUsage::default();
        }
        self.shared
            .status
            .store(Status::Running as u8, Ordering::SeqCst);
        self.shared.idle.send_replace(false);
        // Boxed, as `Agent::run_queued` does: a run's future is tens of kilobytes.
        let run = tokio::spawn(Box::pin(async move {
            agent
                .run_queued_here(&id, input, before, config, Some(receiver), record)
                .await
        }));
        self.current = Some(Current { controller, run });
    }

    fn run_ended(
        &mut self,
        out: Result<Result<RunOutput, crate::runtime::AgentError>, tokio::task::JoinError>,
    ) {
        if self.current.is_none() {
            return;
        }
        let mut leftover = Vec::new();
        let out = out.map_err(|e| format!("run task failed: {e}"));
        let result = match out.and_then(|r| r.map_err(|e| e.to_string())) {
            Ok(o) => {
                leftover = o.result.steering_left.clone();
                if let (Some(t), Ok(mut traces)) = (o.trace, self.shared.traces.lock()) {
                    if traces.len() >= RECENT_TRACES {
                        traces.pop_front();
                    }
                    traces.push_back(t);
                }
                Some(o.result)
            }
            Err(error) => {
                self.publish(AgentEvent::RunError { error });
                None
            }
        };
        self.ended = result;
        let announced_abort = self.shared.saw_abort.load(Ordering::SeqCst);
        self.feed(
            SessionInput::RunEnded {
                leftover: &leftover,
                announced_abort,
            },
            None,
        );
    }

    /// The ended run's bookkeeping (effect `CloseRun`): its usage total (R-CTX-3, also on
    /// abort), its result, and no run in progress.
    fn close_run(&mut self) {
        self.current = None;
        let total = self.shared.run_usage.lock().ok().and_then(|u| u.total());
        if let Some(total) = total {
            self.publish(total);
        }
        if let (Some(r), Ok(mut last)) = (self.ended.take(), self.shared.last_result.lock()) {
            *last = Some(r);
        }
        self.shared.bus.set_current_run("");
        // The driver clears it when a run ends; a run task that died did not.
        self.shared.partial.set(None);
        self.shared
            .status
            .store(Status::Idle as u8, Ordering::SeqCst);
    }
}

/// The index of a session state in [`SessionState::ALL`] (what [`Shared::state`] holds).
fn state_index(s: SessionState) -> u8 {
    let i = SessionState::ALL.iter().position(|x| *x == s).unwrap_or(0);
    u8::try_from(i).unwrap_or(0)
}

/// The session state [`state_index`] stored.
fn state_at(i: u8) -> SessionState {
    SessionState::ALL
        .get(usize::from(i))
        .copied()
        .unwrap_or(SessionState::INITIAL)
}

/// A prompt as a run's input: its message, and its subtasks' events to feed first.
fn run_input(p: Prompt) -> (Vec<Message>, Vec<Event>) {
    let before = p.subtask_events();
    (vec![p.into_message()], before)
}

/// The answer of `prompt`, `steer` or `subtask` a reply stands for (`Closed` for a reply no
/// command gets, which the chart rules out).
fn ack(reply: Option<SessionReply>) -> Result<Ack, SessionError> {
    Ok(match reply {
        Some(SessionReply::Started) => Ack::Started,
        Some(SessionReply::PromptQueued(n)) => Ack::Queued(n),
        Some(SessionReply::SteerQueued(n)) => Ack::SteerQueued(n),
        Some(SessionReply::SubtaskQueued) => Ack::SubtaskQueued,
        other => return Err(error(other)),
    })
}

/// The error a reply stands for (a command's error replies; `Closed` for a reply the command
/// cannot get, which the chart rules out).
fn error(reply: Option<SessionReply>) -> SessionError {
    match reply {
        Some(SessionReply::Rejected(reason)) => SessionError::Rejected(reason),
        Some(SessionReply::QueueFull { capacity }) => SessionError::QueueFull { capacity },
        Some(SessionReply::UnknownModel(m)) => SessionError::UnknownModel(m, Vec::new()),
        _ => SessionError::Closed,
    }
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
