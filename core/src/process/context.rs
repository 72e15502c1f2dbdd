//! The inner machine's context in parts: each part is one concept that spans states, with the
//! methods that keep it consistent. [`ProcessData`](crate::process::data::ProcessData) holds
//! the step's configuration and one field per part: the current model [`Attempt`], the
//! committed message's [`ToolCalls`], the step's [`Ending`] and the per-handle [`Outbox`](crate::outbox::Outbox).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use crate::chart::ToolCallState;
use crate::event::{AttemptId, Event, KillPolicy};
use crate::inline_tags::InlineTags;
use crate::message::AssistantMessage;
use crate::model::ModelRequest;
use crate::output::OutputRejected;
use crate::process::accumulate::MessageAssembler;
use crate::process::config::StepConfig;
use crate::process::data::StepOutcome;
use crate::process::deadlines::{approval_slot, tool_slot, AttemptTimer, AttemptTimers};
use crate::process::slots::{Slot, Slots};
use crate::tool_cache::ToolCache;

/// The model attempt in flight and the step's attempts so far: the request (its ids name the
/// attempt), what a hook sent instead, the message being assembled from the deltas and the
/// seqs seen, the attempt's deadline timers, and the counts the retry rows read.
#[derive(Clone, Debug)]
pub(crate) struct Attempt {
    /// The current attempt's request, as the machine built it (`attempt` counts up on retry).
    pub(crate) request: ModelRequest,
    /// The current attempt's request as a hook rewrote it (cleared for each attempt).
    pub(crate) sent: Option<Box<ModelRequest>>,
    /// The message the current attempt's deltas build.
    pub(crate) acc: MessageAssembler,
    /// How many times `acc` was started afresh (a new attempt): with the step and the
    /// assembler's revision it identifies the partial message (see `Process::partial_mark`).
    pub(crate) acc_epoch: u64,
    /// The delta seqs the current attempt delivered (a repeat is stale).
    pub(crate) seen: crate::process::seen::SeenSeqs,
    /// Model attempts this step sent (`CallModel` effects).
    pub(crate) attempts: u32,
    /// Retries scheduled in this step.
    pub(crate) retries: u32,
    /// A retry was scheduled after a `malformed_response` (retried once per step).
    pub(crate) malformed_retried: bool,
    /// The current attempt's deadline timers.
    pub(crate) timers: AttemptTimers,
    /// The current attempt's model call is out: sent, and not yet answered, failed or
    /// cancelled (leaving Requesting with it open cancels it).
    pub(crate) open: bool,
    /// The call ids of the run's context: a call that repeats one gets a derived id.
    pub(crate) earlier_call_ids: std::sync::Arc<HashSet<String>>,
}

impl Attempt {
    /// The first attempt of `request`'s step, its deltas read with `inline_tags`.
    pub(crate) fn new(request: ModelRequest, inline_tags: InlineTags) -> Self {
        Attempt {
            request,
            sent: None,
            acc: MessageAssembler::with_inline_tags(inline_tags),
            acc_epoch: 0,
            seen: Default::default(),
            attempts: 0,
            retries: 0,
            malformed_retried: false,
            timers: AttemptTimers::default(),
            open: false,
            earlier_call_ids: Default::default(),
        }
    }

    /// The current attempt's ids.
    pub(crate) fn id(&self) -> AttemptId {
        AttemptId {
            run_id: self.request.run_id.clone(),
            model_call_index: self.request.model_call_index,
            attempt: self.request.attempt,
        }
    }

    /// Whether `a` names the current attempt.
    pub(crate) fn is_current(&self, a: &AttemptId) -> bool {
        a.attempt == self.request.attempt
            && a.model_call_index == self.request.model_call_index
            && a.run_id == self.request.run_id
    }

    /// Whether a stream event belongs to another run, step or attempt, or repeats a seq.
    pub(crate) fn is_stale(&self, event: &Event) -> bool {
        match event {
            Event::Delta { attempt, seq, .. } => {
                !self.is_current(attempt) || self.seen.contains(*seq)
            }
            Event::StreamOpened { attempt }
            | Event::RequestRewritten { attempt, .. }
            | Event::Done { attempt, .. }
            | Event::TransportError { attempt, .. }
            | Event::ContextOverflow { attempt, .. }
            | Event::StreamStalled { attempt, .. } => !self.is_current(attempt),
            _ => false,
        }
    }

    /// The backoff timer of the current attempt (see [`deadlines`](crate::process::deadlines)).
    pub(crate) fn timer_id(&self) -> u64 {
        u64::from(self.request.model_call_index) * 1_000_000 + u64::from(self.request.attempt)
    }

    /// Starts the message afresh (a new attempt discards the partial output).
    fn new_assembler(&mut self, inline_tags: InlineTags) {
        self.acc =
            MessageAssembler::with_earlier_call_ids(inline_tags, self.earlier_call_ids.clone());
        self.acc_epoch += 1;
    }

    /// The current attempt's request is sent: no seq seen, no hook rewrite yet, an empty
    /// message, one more attempt.
    pub(crate) fn send(&mut self, inline_tags: InlineTags) {
        self.seen.clear();
        self.sent = None;
        self.new_assembler(inline_tags);
        self.attempts += 1;
        self.open = true;
    }

    /// A retry is scheduled: the next attempt's ids, one more retry, the partial output
    /// discarded.
    pub(crate) fn retry(&mut self, inline_tags: InlineTags) {
        self.request.attempt += 1;
        self.retries += 1;
        self.new_assembler(inline_tags);
        self.seen.clear();
    }

    /// The current attempt's deadline that `timer_id` names, if it passed: its kind and
    /// delay. The stall watchdog counts only when no delta arrived since it was armed.
    pub(crate) fn deadline(&self, timer_id: u64) -> Option<(AttemptTimer, u64)> {
        self.timers
            .get(timer_id)
            .filter(|(kind, _)| !(*kind == AttemptTimer::Stall && self.timers.moved))
    }

    /// Whether `timer_id` is the stall watchdog and deltas arrived since it was armed.
    pub(crate) fn stream_moved(&self, timer_id: u64) -> bool {
        self.timers.moved
            && self
                .timers
                .get(timer_id)
                .is_some_and(|(kind, _)| kind == AttemptTimer::Stall)
    }
}

/// `Retrying`'s own data (its state-local storage): why the attempt is retried, and the
/// backoff timer once entering the state started it (`None` again once it fired, so leaving
/// the state cancels only a timer still armed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Backoff {
    /// The failed attempt's error, for the `retry` event.
    pub(crate) reason: String,
    /// The delay the provider asked for (`Retry-After`), if any.
    pub(crate) retry_after_ms: Option<u64>,
    /// The armed backoff timer.
    pub(crate) timer: Option<u64>,
}

impl Backoff {
    /// A retry for `reason`, after at least `retry_after_ms` when the provider asked.
    pub(crate) fn new(reason: String, retry_after_ms: Option<u64>) -> Self {
        Backoff {
            reason,
            retry_after_ms,
            timer: None,
        }
    }
}

/// The committed message's tool calls (one [`Slot`](crate::process::slots::Slot) each, moved
/// along the tool-call chart) and what decides them beyond the configuration: the scopes
/// approved "always", the run's earlier calls (doom loops), the session's pure-tool results,
/// and the call the current input answers.
#[derive(Clone, Debug, Default)]
pub(crate) struct ToolCalls {
    /// The calls, in the model's order.
    pub(crate) slots: Slots,
    /// Approval scopes ([`approval_scope`](crate::tool_rules::approval_scope)) approved
    /// "always" in this run.
    pub(crate) whitelist: BTreeSet<String>,
    /// Signatures (tool name, canonical arguments) of the run's earlier calls, oldest first.
    pub(crate) recent: Vec<(String, String)>,
    /// Results of the session's earlier pure-tool calls (R-TOOL-6).
    pub(crate) cache: Arc<ToolCache>,
    /// The slot of the tool call the current input answers (a result, a verdict, an answer,
    /// an approval or its timer), looked up once before the oracle and the dispatch run (see
    /// [`crate::process::dispatch::prepare`]); `None` for a stale answer or another input.
    pub(crate) answered: Option<usize>,
}

impl ToolCalls {
    /// No calls yet; `whitelist` holds what was approved "always" earlier in the run.
    pub(crate) fn new(whitelist: BTreeSet<String>) -> Self {
        ToolCalls {
            whitelist,
            ..ToolCalls::default()
        }
    }

    /// Whether an "approve always" of this run covers `slot`'s call: its
    /// [`approval_scope`](crate::tool_rules::approval_scope) (a tool, or a shell-like tool's
    /// command family), so never a call a rule singled out by its arguments.
    pub(crate) fn covers(&self, slot: &Slot) -> bool {
        !slot.policy.by_argument
            && self
                .whitelist
                .contains(&crate::tool_rules::approval_scope(&slot.call))
    }

    /// The running (or answer-awaiting) call whose deadline timer is `timer_id`, if it is one
    /// of step `model_call_index` (see [`deadlines`](crate::process::deadlines)).
    pub(crate) fn deadline_of(&self, timer_id: u64, model_call_index: u32) -> Option<usize> {
        let i = tool_slot(timer_id, model_call_index)?;
        let state = (i < self.slots.len()).then(|| self.slots.get(i).state());
        matches!(
            state,
            Some(ToolCallState::Running | ToolCallState::AwaitingUser)
        )
        .then_some(i)
    }

    /// The call being asked about whose approval timer is `timer_id`, if it is one of step
    /// `model_call_index`.
    pub(crate) fn approval_timer_of(&self, timer_id: u64, model_call_index: u32) -> Option<usize> {
        let i = approval_slot(timer_id, model_call_index)?;
        let asked = i < self.slots.len() && self.slots.get(i).state() == ToolCallState::Asking;
        asked.then_some(i)
    }

    /// Whether, under `kill`, some running call would keep running.
    pub(crate) fn would_drain(&self, kill: KillPolicy, cfg: &StepConfig) -> bool {
        self.slots
            .in_state(ToolCallState::Running)
            .into_iter()
            .any(|i| !cfg.kills(kill, &self.slots.get(i).call.name))
    }
}

/// How the step ends and what it leaves for the outer machine: the committed message, the
/// outcome, a stop the run should make after the step, and the runtime's verdict on the
/// message as a typed final answer.
#[derive(Clone, Debug, Default)]
pub(crate) struct Ending {
    /// The message `Done` committed (or the resumed one).
    pub(crate) committed: Option<AssistantMessage>,
    /// How the step ended, once decided.
    pub(crate) outcome: Option<StepOutcome>,
    /// Why the outer machine stops the run after this step, if it does: `stopped` (a doom
    /// loop with action `stop`), `tool_rejected` (a rejected approval without auto_resume).
    pub(crate) stop_requested: Option<&'static str>,
    /// The runtime's verdict on the committed message as a typed final answer (`done`'s
    /// `output_rejected`); the outer machine's Observing decides on it.
    pub(crate) output_rejected: Option<OutputRejected>,
}

impl Ending {
    /// Asks the run to stop after this step with `reason`, unless an earlier reason stands.
    pub(crate) fn stop(&mut self, reason: &'static str) {
        self.stop_requested.get_or_insert(reason);
    }

    /// The step ends with `outcome`.
    pub(crate) fn end(&mut self, outcome: StepOutcome) {
        self.outcome = Some(outcome);
    }
}
