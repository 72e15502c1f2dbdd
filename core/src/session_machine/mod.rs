//! The session machine (SPEC §5, R-CTL-1..6): what each command of a live session does, as a
//! pure machine generated from `statecharts/session.toml` like the run's machines (the chart
//! is the code). No IO, no clock, no await: the session actor feeds it the handle's commands
//! and the end of each run ([`SessionInput`]) and performs the typed effects it returns
//! ([`SessionEffect`]): start a run, queue a prompt, forward a control event into the running
//! run, publish an event, reply to the caller.
//!
//! What the machine keeps ([`SessionData`]): the model the next run uses, the texts of the
//! queued prompts (the actor keeps their payloads in the same order), the steering counters,
//! the abort asked of the running run, and the session's approval whitelist, which seeds
//! every run it starts (row `approved_always`).

mod actions;
mod data;
mod dispatch;
mod guards;
mod machine;

use std::collections::BTreeSet;

use statig::blocking::{InitializedStateMachine, IntoStateMachineExt};

use crate::agent_event::AgentEvent;
use crate::chart::{GuardCheck, SessionEventKind, SessionRow, SessionState};
use crate::event::KillPolicy;

pub use data::SessionData;
use machine::SessionMachine as Machine;

/// One input of the session machine: a command of the handle (with what the actor looked up
/// for it: a hook's verdict, the run's steering counts, the registry's answer) or the end of
/// the run.
#[derive(Clone, Copy, Debug)]
pub enum SessionInput<'a> {
    /// `prompt(text)`; `rejected`: the `before_prompt` hook's reason, if it rejected it.
    Prompt {
        /// The prompt's text.
        text: &'a str,
        /// The hook's rejection, if any.
        rejected: Option<&'a str>,
    },
    /// `steer(text)`.
    Steer {
        /// The message.
        text: &'a str,
        /// The `before_steering` hook's rejection, if any.
        rejected: Option<&'a str>,
        /// Steering messages the running run's machine holds (not yet merged).
        run_pending: usize,
        /// Steering messages the running run's machine has received so far.
        run_received: u64,
    },
    /// `subtask(tool, arguments)` (the actor keeps the call).
    Subtask,
    /// `abort(reason, kill, clear_queue)`.
    Abort {
        /// Why.
        reason: &'a str,
        /// Which running tools to kill.
        kill: KillPolicy,
        /// Drop the queued prompts.
        clear_queue: bool,
    },
    /// The run task returned.
    RunEnded {
        /// Steering that never reached a step boundary, handed back by the run.
        leftover: &'a [String],
        /// Whether the run published `agent_abort` itself.
        announced_abort: bool,
    },
    /// `switch_model(model)`.
    SwitchModel {
        /// The model's name.
        model: &'a str,
        /// Whether the agent's registry knows it.
        known: bool,
    },
    /// The session's tool set changed (attach, detach, update).
    ToolsChanged,
    /// A parked approval was answered.
    ApprovalAnswered {
        /// The call's approval scope (`tool_rules::approval_scope`).
        scope: &'a str,
        /// Whether the answer was "approve always".
        always: bool,
    },
    /// Every handle is gone.
    Close,
}

impl SessionInput<'_> {
    /// The chart event this input is.
    pub fn kind(&self) -> SessionEventKind {
        dispatch::event_kind(self)
    }
}

/// What a started run's input is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunInput {
    /// The payload of the command being handled (the prompt, the steering text, the subtask).
    Command,
    /// The first queued prompt (the actor pops its payload).
    Queued,
    /// Steering the ended run handed back, joined into one prompt.
    Leftover(String),
}

/// A control event the session forwards into the running run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forward {
    /// A steering message.
    Steer(String),
    /// The command's subtask.
    Subtask,
    /// Abort the run.
    Abort {
        /// Why.
        reason: String,
        /// Which running tools to kill.
        kill: KillPolicy,
    },
    /// Switch to this model at the next step.
    SwitchModel(String),
    /// The session's current tool set (the actor's configuration).
    SetTools,
}

/// The answer to the caller of a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionReply {
    /// A run started.
    Started,
    /// The prompt was queued at this position (1 = next).
    PromptQueued(usize),
    /// The steering message was forwarded (its reference).
    SteerQueued(u64),
    /// The subtask was forwarded into the running run.
    SubtaskQueued,
    /// A hook rejected the text.
    Rejected(String),
    /// The steering queue is full.
    QueueFull {
        /// The capacity.
        capacity: usize,
    },
    /// Nothing was running: `agent_abort` was published anyway.
    AbortIdle,
    /// The running run was told to abort.
    Aborting,
    /// Whether the model changed.
    ModelSwitched(bool),
    /// The registry does not know the model.
    UnknownModel(String),
}

/// What the session actor does, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum SessionEffect {
    /// Start a run of `input`, its machine's approval whitelist seeded with `whitelist`.
    StartRun {
        /// What the run starts with.
        input: RunInput,
        /// The session's approval scopes approved "always".
        whitelist: BTreeSet<String>,
    },
    /// Keep the command's prompt at the back of the queue.
    QueuePrompt,
    /// Drop every queued prompt's payload (the machine published `prompt_dropped` for each).
    DropQueued,
    /// Send a control event into the running run.
    Forward(Forward),
    /// The next run uses this model.
    UseModel(String),
    /// Publish an event on the session bus.
    Publish(AgentEvent),
    /// The ended run's bookkeeping: its usage total, its result, no run in progress.
    CloseRun,
    /// No run and nothing queued (`wait_idle` returns).
    Idle,
    /// Answer the caller.
    Reply(SessionReply),
}

impl SessionEffect {
    /// The effect's name in the session chart's vocabulary: the variant, snake_case, and
    /// `publish:<event type>` for a published event.
    pub fn name(&self) -> String {
        let name = match self {
            SessionEffect::StartRun { .. } => "start_run",
            SessionEffect::QueuePrompt => "queue_prompt",
            SessionEffect::DropQueued => "drop_queued",
            SessionEffect::Forward(_) => "forward",
            SessionEffect::UseModel(_) => "use_model",
            SessionEffect::Publish(event) => return format!("publish:{}", event.type_name()),
            SessionEffect::CloseRun => "close_run",
            SessionEffect::Idle => "idle",
            SessionEffect::Reply(_) => "reply",
        };
        name.to_string()
    }
}

/// The session machine: feed it [`SessionInput`]s, perform the [`SessionEffect`]s.
pub struct Session {
    sm: InitializedStateMachine<Machine>,
    data: SessionData,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("state", &self.state())
            .field("data", &self.data)
            .finish()
    }
}

/// What one input did: the row taken (`None`: no row, the input was unhandled), the oracle's
/// check of it, and the effects to perform in order.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionStep {
    /// The state before.
    pub from: SessionState,
    /// The state after.
    pub to: SessionState,
    /// The row taken.
    pub row: Option<SessionRow>,
    /// The chart oracle's verdict on the row.
    pub check: GuardCheck,
    /// The effects, in order.
    pub effects: Vec<SessionEffect>,
    /// The verdict on the row's effects against those its chart row declares (debug builds
    /// only; see [`check_effects`](crate::chart::check_effects)).
    pub effect_check: Option<crate::chart::EffectCheck>,
}

impl Session {
    /// A session in `Idle` whose runs use `model`, with a steering queue of
    /// `steering_capacity` messages.
    pub fn new(model: impl Into<String>, steering_capacity: usize) -> Self {
        let mut data = SessionData::new(model.into(), steering_capacity);
        let sm = Machine
            .uninitialized_state_machine()
            .init_with_context(&mut data);
        Session { sm, data }
    }

    /// The current state.
    pub fn state(&self) -> SessionState {
        machine::kind(self.sm.state())
    }

    /// The machine's data.
    pub fn data(&self) -> &SessionData {
        &self.data
    }

    /// Feeds one input; returns the row it took, the oracle's check and the effects.
    pub fn handle(&mut self, input: SessionInput<'_>) -> SessionStep {
        let from = self.state();
        let kind = dispatch::event_kind(&input);
        let verdict = dispatch::expected(from, kind, &self.data, &input);
        self.data.begin();
        self.sm.handle_with_context(&input, &mut self.data);
        let (row, effects) = self.data.finish();
        let effect_check = row.filter(|_| crate::chart::ORACLE).and_then(|r| {
            let produced: Vec<String> = effects.iter().map(SessionEffect::name).collect();
            r.effect_check(&produced)
        });
        SessionStep {
            from,
            to: self.state(),
            row,
            check: SessionRow::guard_check(from.name(), kind.name(), row, verdict),
            effects,
            effect_check,
        }
    }
}
