//! The inner process machine (SPEC §3): one model step — request, stream, retries, tools,
//! approvals. [`Process`] is the documented facade over the crate-private statig machine.

pub mod accumulate;
pub(crate) mod actions;
pub(crate) mod call_actions;
pub(crate) mod call_dispatch;
pub(crate) mod call_guards;
pub mod call_ids;
mod calls;
pub mod config;
pub(crate) mod context;
pub(crate) mod data;
pub(crate) mod deadlines;
pub(crate) mod dispatch;
pub(crate) mod guards;
pub(crate) mod machine;
pub mod retry;
mod seen;
pub(crate) mod slots;

#[cfg(test)]
mod complexity_tests;

use std::collections::BTreeSet;

use statig::blocking::{InitializedStateMachine, IntoStateMachineExt};

use crate::chart::{GuardCheck, MachineKind, ProcessEventKind, ProcessRow, ProcessState};
use crate::effect::Effect;
use crate::event::Event;
use crate::message::{AssistantMessage, ToolResult};
use crate::model::ModelRequest;
use crate::step::Transition;

pub use crate::tool_rules::{ArgumentPattern, CallPolicy, RuleAction, ToolRule};
pub use config::{
    ApprovalPolicy, DoomLoopPolicy, InlineTags, LoopAction, RetryAfterRule, RetryPolicy,
    StepConfig, StreamDeadlines, ASK_USER_TOOL,
};
use data::ProcessData;
pub use data::StepOutcome;
use machine::{kind, Input, ProcessMachine};
pub use retry::{
    default_retry_decider, RetryDecider, RetryDeciderRef, RetryDeciderRegistry,
    UnknownRetryDecider, DEFAULT_RETRY_DECIDER,
};

/// Identifies the partial message of a run (R-STR-2) without building it: equal marks mean
/// an equal message, so an observer's snapshot needs no refresh; marks of the same source
/// (same step, same attempt) mean the message only grew in between, so the snapshot can be
/// brought up to date incrementally ([`Process::update_partial`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartialMark {
    pub(crate) step: u64,
    epoch: u64,
    revision: u64,
}

impl PartialMark {
    /// Whether both marks name states of one attempt's message (the later one grew from the
    /// earlier one).
    pub fn same_source(&self, other: &PartialMark) -> bool {
        self.step == other.step && self.epoch == other.epoch
    }
}

/// The result of feeding one event to the inner machine.
#[must_use = "a step's effects must be performed"]
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessStep {
    /// State before.
    pub from: ProcessState,
    /// State after (after internal events ran to completion).
    pub to: ProcessState,
    /// Effects requested, in order.
    pub effects: Vec<Effect>,
    /// Whether no state accepted the event.
    pub unhandled: bool,
    /// Every transition taken, with its chart row.
    pub transitions: Vec<Transition>,
    /// The chart oracle's verdict on each transition (see [`GuardCheck`]).
    pub guard_checks: Vec<GuardCheck>,
    /// The verdicts on the effects of the process rows and tool-call rows taken (debug builds
    /// only; see [`check_effects`](crate::chart::check_effects)): each row's action produced
    /// the effects its chart row declares.
    pub effect_checks: Vec<crate::chart::EffectCheck>,
}

impl ProcessStep {
    /// Nothing happened yet, in `state`.
    fn at(state: ProcessState) -> Self {
        ProcessStep {
            from: state,
            to: state,
            effects: Vec::new(),
            unhandled: false,
            transitions: Vec::new(),
            guard_checks: Vec::new(),
            effect_checks: Vec::new(),
        }
    }
}

/// One step of a run: the inner machine with its data.
pub struct Process {
    sm: InitializedStateMachine<ProcessMachine>,
    data: ProcessData,
    /// The verdicts on the effects of the rows the current `handle` took (debug builds).
    effect_checks: Vec<crate::chart::EffectCheck>,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("state", &self.state())
            .field("request", &self.data.attempt.request.model_call_index)
            .finish()
    }
}

/// The `state_changed` event for a transition, as an effect.
pub(crate) fn state_changed(machine: MachineKind, from: &str, event: &str, to: &str) -> Effect {
    Effect::Emit {
        event: crate::agent_event::AgentEvent::StateChanged {
            machine,
            from: from.into(),
            to: to.into(),
            event: event.into(),
        },
    }
}

impl Process {
    /// A new step in `Idle`. `whitelist` holds what a human approved "always" earlier in the
    /// run: [`approval_scope`](crate::tool_rules::approval_scope)s (a tool, or a shell-like
    /// tool's command family).
    pub fn new(config: StepConfig, request: ModelRequest, whitelist: BTreeSet<String>) -> Self {
        let mut data = ProcessData::new(config, request, whitelist);
        let sm = ProcessMachine
            .uninitialized_state_machine()
            .init_with_context(&mut data);
        Process {
            sm,
            data,
            effect_checks: Vec::new(),
        }
    }

    /// Starts the step (`Begin`): requests the first model call.
    pub fn begin(&mut self) -> ProcessStep {
        self.run(Input::Begin, ProcessEventKind::Begin)
    }

    /// Resumes a committed message whose calls lack results: runs only those (R-IDEM-5).
    pub fn resume(&mut self, message: AssistantMessage, results: Vec<ToolResult>) -> ProcessStep {
        self.run(Input::Resume(&message, &results), ProcessEventKind::Resume)
    }

    /// Feeds one event. An event no state accepts is reported (`unhandled`), never dropped
    /// silently; internal events (`Settle`) run to completion inside this call.
    pub fn handle(&mut self, event: &Event) -> ProcessStep {
        match crate::route::route(event).process {
            Some(k) => self.run(Input::Ext(event), k),
            None => ProcessStep {
                unhandled: true,
                ..ProcessStep::at(self.state())
            },
        }
    }

    fn feed(&mut self, input: Input<'_>, k: ProcessEventKind, step: &mut ProcessStep) -> bool {
        let from = self.state();
        let mark = self.data.outbox.open();
        dispatch::prepare(&mut self.data, &input);
        let verdict = dispatch::expected(from, k, &self.data, &input);
        self.sm.handle_with_context(&input, &mut self.data);
        let to = self.state();
        let outbox = &mut self.data.outbox;
        // Everything the row's action pushed, the tool-call lifecycle's effects it drove
        // included.
        let check = outbox.row.and_then(|r| r.effect_check(&outbox.own));
        self.effect_checks.extend(check);
        if from != to {
            outbox.out.insert(
                mark,
                state_changed(MachineKind::Process, from.name(), k.name(), to.name()),
            );
        }
        let unhandled = outbox.unhandled;
        let row = outbox.row.take();
        step.guard_checks
            .push(ProcessRow::guard_check(from.name(), k.name(), row, verdict));
        step.transitions.push(Transition::Process {
            from,
            event: k,
            to,
            row,
            unhandled,
        });
        self.effect_checks.append(&mut outbox.effect_checks);
        step.transitions.append(&mut outbox.transitions);
        step.guard_checks.append(&mut outbox.checks);
        unhandled
    }

    fn run(&mut self, input: Input<'_>, k: ProcessEventKind) -> ProcessStep {
        let mut step = ProcessStep::at(self.state());
        step.unhandled = self.feed(input, k, &mut step);
        // Run to completion: while the machine is in RunningTools or Draining, Settle asks it
        // what comes next, until it is at rest (a Settle that neither moves it nor requests an
        // effect: a fixpoint). This terminates by construction: a Settle that moves the machine
        // leaves both states (to AwaitingApproval, Success or Error); one that stays is
        // `running_settle_wait` / `draining_settle_wait`, whose action starts every queued call
        // that may start now (`Calls::start_queued`, itself a pass over the queue), so
        // the Settle after it finds nothing left to start and requests nothing.
        while matches!(
            self.state(),
            ProcessState::RunningTools | ProcessState::Draining
        ) {
            let (before, state) = (self.data.outbox.out.len(), self.state());
            self.feed(Input::Settle, ProcessEventKind::Settle, &mut step);
            if self.state() == state && self.data.outbox.out.len() == before {
                break;
            }
        }
        step.to = self.state();
        step.effects = std::mem::take(&mut self.data.outbox.out);
        step.effect_checks = std::mem::take(&mut self.effect_checks);
        step
    }

    /// The current leaf state.
    pub fn state(&self) -> ProcessState {
        kind(self.sm.state())
    }

    /// How the step ends: set when the end is decided — at the terminal transition, or for an
    /// abort that waits for immune tools (`Draining`), at the abort.
    pub fn outcome(&self) -> Option<&StepOutcome> {
        self.data.ending.outcome.as_ref()
    }

    /// A snapshot of the message being streamed (R-STR-2).
    pub fn partial(&self) -> AssistantMessage {
        self.data.attempt.acc.snapshot()
    }

    /// Identifies [`partial`](Self::partial)'s content within this step; see [`PartialMark`].
    pub fn partial_mark(&self) -> PartialMark {
        PartialMark {
            step: 0,
            epoch: self.data.attempt.acc_epoch,
            revision: self.data.attempt.acc.revision(),
        }
    }

    /// Brings `snapshot`, an earlier [`partial`](Self::partial) of the same attempt (same
    /// [`PartialMark::same_source`]), up to date in time proportional to what arrived since
    /// (see [`MessageAssembler::update_snapshot`](accumulate::MessageAssembler::update_snapshot)).
    pub fn update_partial(&self, snapshot: &mut AssistantMessage) {
        self.data.attempt.acc.update_snapshot(snapshot);
    }

    /// The committed message, once `Done` arrived.
    pub fn committed(&self) -> Option<&AssistantMessage> {
        self.data.ending.committed.as_ref()
    }

    /// Tool results in call order (complete once the step succeeded).
    pub fn results(&self) -> Vec<ToolResult> {
        let slots = self.data.tools.slots.iter();
        slots.filter_map(|s| s.result.clone()).collect()
    }

    /// The approval scopes approved "always" so far (see [`Process::new`]).
    pub fn whitelist(&self) -> &BTreeSet<String> {
        &self.data.tools.whitelist
    }

    /// The request of the current attempt, as the machine built it.
    pub fn request(&self) -> &ModelRequest {
        &self.data.attempt.request
    }

    /// The last sent attempt's request as a `before_model_call` hook rewrote it, if one did.
    pub fn sent_request(&self) -> Option<&ModelRequest> {
        self.data.attempt.sent.as_deref()
    }

    /// Sets the signatures (tool name, canonical arguments) of the run's earlier calls, for
    /// doom-loop detection.
    pub fn with_recent_calls(mut self, recent: Vec<(String, String)>) -> Self {
        self.data.tools.recent = recent;
        self
    }

    /// The call ids of the run's context (the calls it started from and committed since): a
    /// call that repeats one gets a derived id ([`call_ids`]).
    pub fn with_earlier_call_ids(
        mut self,
        ids: std::sync::Arc<std::collections::HashSet<String>>,
    ) -> Self {
        self.data.attempt.earlier_call_ids = ids;
        self
    }

    /// The results of the session's earlier pure-tool calls (R-TOOL-6): an
    /// identical call of a pure tool is answered from them.
    pub fn with_tool_cache(mut self, cache: std::sync::Arc<crate::tool_cache::ToolCache>) -> Self {
        self.data.tools.cache = cache;
        self
    }

    /// Whether the step asks the run to stop: a doom loop with action `stop`, or a rejected
    /// approval without auto_resume.
    pub fn stop_requested(&self) -> bool {
        self.data.ending.stop_requested.is_some()
    }

    /// The run-end reason the step asks for: `stopped` (doom loop) or `tool_rejected`.
    pub fn stop_reason(&self) -> Option<&'static str> {
        self.data.ending.stop_requested
    }

    /// The runtime's verdict on the committed message as a typed final answer, if it was
    /// rejected (see [`crate::output`]).
    pub fn output_rejected(&self) -> Option<&crate::output::OutputRejected> {
        self.data.ending.output_rejected.as_ref()
    }

    /// Retries so far.
    pub fn retries(&self) -> u32 {
        self.data.attempt.retries
    }

    /// Model attempts the step sent so far (1 + its retries once it began; 0 for a resumed
    /// step, which makes no request).
    pub fn attempts(&self) -> u32 {
        self.data.attempt.attempts
    }
}

impl Process {
    /// Whether an abort with `kill` would leave some running call running (immune tools, or
    /// kill policy `none`), so the step would drain instead of ending at once.
    pub fn abort_would_drain(&self, kill: crate::event::KillPolicy) -> bool {
        self.data.tools.would_drain(kill, &self.data.cfg)
    }

    /// Ids of tool calls currently running.
    pub fn running_calls(&self) -> Vec<String> {
        let slots = &self.data.tools.slots;
        slots
            .in_state(data::ToolCallState::Running)
            .into_iter()
            .map(|i| slots.get(i).call.id.clone())
            .collect()
    }
}
