//! The inner machine's data and the pure helpers its handlers use to request effects.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::agent_event::AgentEvent;
use crate::chart::{GuardCheck, MachineKind, ProcessRow, ToolCallRow};
use crate::effect::Effect;
use crate::entry::Entry;
use crate::error::ErrorKind;
use crate::error::ModelError;
use crate::event::KillPolicy;
use crate::event::{AttemptId, Event};
use crate::inline_tags::{InlinePiece, TagKind};
use crate::message::{AssistantMessage, MessageDelta, ToolCall, ToolResult, ToolStatus};
use crate::model::ModelRequest;
use crate::process::accumulate::MessageAssembler;
use crate::process::call_guards::{self, Facts};
use crate::process::config::{LoopAction, StepConfig};
use crate::process::deadlines::{
    approval_slot, approval_timer, tool_slot, tool_timer, AttemptTimer, AttemptTimers,
};
pub(crate) use crate::process::slots::{Slot, Slots};
use crate::step::Transition;
use crate::tool_check::{unknown_tool_message, ArgumentsRejected};
use crate::tool_rules::{CallPolicy, RuleAction};

pub(crate) use crate::chart::ToolCallState;

/// How a step ended.
#[derive(Clone, Debug, PartialEq)]
pub enum StepOutcome {
    /// Message committed and every call has a result.
    Success,
    /// The context does not fit.
    ContextOverflow(ModelError),
    /// The step failed.
    Failed(ModelError),
    /// The step was aborted.
    Aborted,
}

/// Everything the inner machine knows. Passed to the statig handlers as their context.
#[derive(Clone, Debug)]
pub struct ProcessData {
    pub(crate) cfg: StepConfig,
    pub(crate) request: ModelRequest,
    pub(crate) whitelist: BTreeSet<String>,
    pub(crate) seen: HashSet<u64>,
    pub(crate) acc: MessageAssembler,
    /// How many times `acc` was started afresh (a new attempt): with the step and the
    /// assembler's revision it identifies the partial message (see `Process::partial_mark`).
    pub(crate) acc_epoch: u64,
    pub(crate) committed: Option<AssistantMessage>,
    pub(crate) slots: Slots,
    pub(crate) outcome: Option<StepOutcome>,
    pub(crate) retries: u32,
    /// A retry was scheduled after a `malformed_response` (retried once per step).
    pub(crate) malformed_retried: bool,
    /// Model attempts this step sent (`CallModel` effects).
    pub(crate) attempts: u32,
    /// The current attempt's request as a hook rewrote it (cleared for each attempt).
    pub(crate) sent: Option<Box<ModelRequest>>,
    /// Signatures (tool name, canonical arguments) of the run's earlier calls, oldest first.
    pub(crate) recent: Vec<(String, String)>,
    /// Results of the session's earlier pure-tool calls (R-TOOL-6).
    pub(crate) cache: std::sync::Arc<crate::tool_cache::ToolCache>,
    /// Why the outer machine stops the run after this step, if it does: `stopped` (a doom
    /// loop with action `stop`), `tool_rejected` (a rejected approval without auto_resume).
    pub(crate) stop_requested: Option<&'static str>,
    /// The leaf state before the current handle (set by the facade).
    pub(crate) state: crate::chart::ProcessState,
    // Per-handle outputs, drained by the facade.
    pub(crate) out: Vec<Effect>,
    pub(crate) row: Option<ProcessRow>,
    pub(crate) unhandled: bool,
    /// The tool-call transitions this handle took, with the chart oracle's verdicts.
    pub(crate) calls: Vec<(Transition, GuardCheck)>,
    /// The current attempt's deadline timers.
    pub(crate) timers: AttemptTimers,
    /// The runtime's verdict on the committed message as a typed final answer (`done`'s
    /// `output_rejected`); the outer machine's Observing decides on it.
    pub(crate) output_rejected: Option<crate::output::OutputRejected>,
    /// The slot of the tool call the current input answers, looked up once before the oracle
    /// and the dispatch run (see [`crate::process::dispatch::prepare`]); `None` for a stale
    /// answer or another input.
    pub(crate) call: Option<usize>,
}

impl ProcessData {
    pub(crate) fn new(cfg: StepConfig, request: ModelRequest, whitelist: BTreeSet<String>) -> Self {
        let acc = MessageAssembler::with_inline_tags(cfg.inline_tags);
        ProcessData {
            cfg,
            request,
            whitelist,
            seen: HashSet::new(),
            acc,
            acc_epoch: 0,
            committed: None,
            slots: Slots::default(),
            outcome: None,
            retries: 0,
            malformed_retried: false,
            attempts: 0,
            sent: None,
            recent: Vec::new(),
            cache: Default::default(),
            stop_requested: None,
            state: crate::chart::ProcessState::INITIAL,
            out: Vec::new(),
            row: None,
            unhandled: false,
            calls: Vec::new(),
            timers: AttemptTimers::default(),
            output_rejected: None,
            call: None,
        }
    }

    /// Records the chart row a handler took.
    pub(crate) fn take(&mut self, row: ProcessRow) {
        debug_assert!(
            self.row.is_none(),
            "two rows in one handle: {:?} then {row:?}",
            self.row
        );
        self.row = Some(row);
    }

    fn emit(&mut self, event: AgentEvent) {
        self.out.push(Effect::Emit { event });
    }

    fn persist(&mut self, entry: Entry) {
        self.out.push(Effect::Persist { entry });
    }

    pub(crate) fn attempt_id(&self) -> AttemptId {
        AttemptId {
            run_id: self.request.run_id.clone(),
            model_call_index: self.request.model_call_index,
            attempt: self.request.attempt,
        }
    }

    pub(crate) fn is_current(&self, a: &AttemptId) -> bool {
        a.attempt == self.request.attempt
            && a.model_call_index == self.request.model_call_index
            && a.run_id == self.request.run_id
    }

    /// Whether a stream event belongs to another run, step or attempt, or repeats a seq.
    pub(crate) fn is_stale(&self, event: &Event) -> bool {
        match event {
            Event::Delta { attempt, seq, .. } => {
                !self.is_current(attempt) || self.seen.contains(seq)
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

    pub(crate) fn timer_id(&self) -> u64 {
        u64::from(self.request.model_call_index) * 1_000_000 + u64::from(self.request.attempt)
    }

    /// The deadline timer of slot `i` (see [`deadlines`](crate::process::deadlines)).
    pub(crate) fn deadline_timer(&self, i: usize) -> u64 {
        tool_timer(self.request.model_call_index, i)
    }

    /// The running slot whose deadline timer is `timer_id`, if any.
    pub(crate) fn deadline_of(&self, timer_id: u64) -> Option<usize> {
        let i = tool_slot(timer_id, self.request.model_call_index)?;
        let state = (i < self.slots.len()).then(|| self.slots.get(i).state());
        matches!(
            state,
            Some(ToolCallState::Running | ToolCallState::AwaitingUser)
        )
        .then_some(i)
    }

    /// The current attempt's deadline that `timer_id` names, if it passed: its kind and
    /// delay. The stall watchdog counts only when no delta arrived since it was armed.
    pub(crate) fn attempt_deadline(&self, timer_id: u64) -> Option<(AttemptTimer, u64)> {
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

    /// The stall watchdog looked and saw deltas: it looks again one period later.
    pub(crate) fn rewatch(&mut self, timer_id: u64) {
        if let Some((kind, delay_ms)) = self.timers.get(timer_id) {
            self.timers.moved = false;
            self.timers.arm(kind, timer_id, delay_ms, &mut self.out);
        }
    }

    /// An attempt deadline passed: the stream is cancelled; a first-chunk or stall deadline is
    /// announced as a stall. Returns the retry reason and the error if the step cannot retry.
    pub(crate) fn deadline_passed(&mut self, timer_id: u64) -> (String, ModelError) {
        let (kind, ms) = self
            .timers
            .get(timer_id)
            .unwrap_or((AttemptTimer::Request, 0));
        let note = self.not_retried_note();
        self.timers.fired(timer_id);
        self.end_attempt();
        match kind {
            AttemptTimer::Request => {
                self.cancel_model();
                let why = format!("request exceeded {ms} ms");
                (why.clone(), ModelError::new(ErrorKind::Timeout, why))
            }
            AttemptTimer::FirstChunk | AttemptTimer::Stall => {
                self.stalled(ms);
                (
                    format!("stream stalled for {ms} ms"),
                    ModelError::new(
                        ErrorKind::Timeout,
                        format!("stream stalled for {ms} ms; {note}"),
                    ),
                )
            }
        }
    }

    /// The `timeout` error an attempt deadline that passed stands for, as the retry decider
    /// sees it (pure: the guards ask before the handler runs).
    pub(crate) fn deadline_error(&self, timer_id: u64) -> ModelError {
        let (kind, ms) = self
            .timers
            .get(timer_id)
            .unwrap_or((AttemptTimer::Request, 0));
        let why = match kind {
            AttemptTimer::Request => format!("request exceeded {ms} ms"),
            AttemptTimer::FirstChunk | AttemptTimer::Stall => {
                format!("stream stalled for {ms} ms")
            }
        };
        ModelError::new(ErrorKind::Timeout, why)
    }

    /// The `timeout` error a stalled stream stands for, as the retry decider sees it.
    pub(crate) fn stall_error(after_ms: u64) -> ModelError {
        ModelError::new(
            ErrorKind::Timeout,
            format!("stream stalled for {after_ms} ms"),
        )
    }

    /// Why a failed attempt is not retried, for the step's error: the retries are used up,
    /// or the retry decider declined.
    pub(crate) fn not_retried_note(&self) -> String {
        if self.retries >= self.cfg.retry.max_retries {
            "retries exhausted".into()
        } else {
            format!(
                "not retried (retry decider `{}`)",
                self.cfg.retry.decider.name()
            )
        }
    }

    /// The attempt ended (committed, failed, retried, aborted): its deadline timers stop.
    pub(crate) fn end_attempt(&mut self) {
        self.timers.clear(&mut self.out);
    }

    /// Sends the current attempt's request.
    pub(crate) fn call_model(&mut self) {
        self.seen.clear();
        self.sent = None;
        self.new_assembler();
        let request = self.request.clone();
        self.attempts += 1;
        self.emit(AgentEvent::RequestStart {
            model_call_index: request.model_call_index,
            attempt: request.attempt,
            model: request.model.clone(),
        });
        self.out.push(Effect::CallModel { request });
        if let Some(d) = self.cfg.stream {
            let base = self.timer_id();
            let first = AttemptTimer::FirstChunk;
            self.timers
                .arm(first, first.id(base), d.first_chunk_ms, &mut self.out);
            if let Some(ms) = d.request_ms {
                let request = AttemptTimer::Request;
                self.timers
                    .arm(request, request.id(base), ms, &mut self.out);
            }
        }
    }

    /// Starts the message afresh (a new attempt discards the partial output).
    fn new_assembler(&mut self) {
        self.acc = MessageAssembler::with_inline_tags(self.cfg.inline_tags);
        self.acc_epoch += 1;
    }

    /// Whether the attempt that failed with `error` is retried: retries are left and the
    /// retry decider says so (R-EXT-3; see [`RetryPolicy::retries_after`]).
    ///
    /// [`RetryPolicy::retries_after`]: crate::process::RetryPolicy::retries_after
    ///
    /// A `malformed_response` is retried once per step whatever the decider says: the second
    /// one fails the step at once (a server that sends what this client cannot read sends it
    /// again; a garbled chunk does not).
    pub(crate) fn may_retry(&self, error: &ModelError) -> bool {
        self.cfg.retry.retries_after(error, self.retries)
            && !(error.kind == ErrorKind::MalformedResponse && self.malformed_retried)
    }

    /// Notes the error a retry is scheduled after (row `requesting_retry`).
    pub(crate) fn retrying_after(&mut self, error: &ModelError) {
        if error.kind == ErrorKind::MalformedResponse {
            self.malformed_retried = true;
        }
    }

    /// The step's error for a transport error that is not retried: a second malformed
    /// answer says so.
    pub(crate) fn unretried(&self, error: &ModelError) -> ModelError {
        let mut error = error.clone();
        if error.kind == ErrorKind::MalformedResponse && self.malformed_retried {
            error
                .message
                .push_str(" (the retry got a malformed answer too: not retried again)");
        }
        error
    }

    /// Schedules the next attempt: discards partial output, starts the backoff timer.
    pub(crate) fn schedule_retry(&mut self, reason: String, retry_after_ms: Option<u64>) {
        self.end_attempt();
        let draw = u64::from(self.request.model_call_index) << 32 | u64::from(self.request.attempt);
        let delay_ms = self
            .cfg
            .retry
            .jittered_delay_ms(self.retries + 1, retry_after_ms, draw);
        self.request.attempt += 1;
        self.retries += 1;
        self.new_assembler();
        self.seen.clear();
        let timer_id = self.timer_id();
        self.out.push(Effect::StartTimer { timer_id, delay_ms });
        self.emit(AgentEvent::Retry {
            model_call_index: self.request.model_call_index,
            attempt: self.request.attempt,
            delay_ms,
            reason,
        });
    }

    pub(crate) fn retried(&mut self) {
        self.emit(AgentEvent::ModelTurnRetried {
            model_call_index: self.request.model_call_index,
            attempt: self.request.attempt,
        });
        self.call_model();
    }

    pub(crate) fn cancel_model(&mut self) {
        let attempt = self.attempt_id();
        self.out.push(Effect::CancelModel { attempt });
    }

    pub(crate) fn fail(&mut self, error: ModelError) {
        self.end_attempt();
        self.emit(AgentEvent::StreamError {
            error: error.clone(),
        });
        self.outcome = Some(StepOutcome::Failed(error));
    }

    pub(crate) fn overflow(&mut self, error: ModelError) {
        self.end_attempt();
        self.emit(AgentEvent::ContextOverflow {
            message: error.message.clone(),
        });
        self.outcome = Some(StepOutcome::ContextOverflow(error));
    }

    pub(crate) fn stalled(&mut self, after_ms: u64) {
        self.cancel_model();
        self.emit(AgentEvent::StreamStalled {
            model_call_index: self.request.model_call_index,
            attempt: self.request.attempt,
            after_ms,
        });
    }

    pub(crate) fn opened(&mut self) {
        self.emit(AgentEvent::MessageStart {
            model_call_index: self.request.model_call_index,
            attempt: self.request.attempt,
        });
    }

    /// Accumulates a new delta and emits its observable form.
    pub(crate) fn delta(&mut self, seq: u64, delta: &MessageDelta) {
        self.seen.insert(seq);
        self.timers.moved = true;
        if self.timers.armed(AttemptTimer::FirstChunk) {
            // Deltas flow: the first-chunk deadline gives way to the stall watchdog.
            self.timers.disarm(AttemptTimer::FirstChunk, &mut self.out);
            if let Some(d) = self.cfg.stream {
                let stall = AttemptTimer::Stall;
                let id = stall.id(self.timer_id());
                self.timers.arm(stall, id, d.stall_ms, &mut self.out);
                self.timers.moved = false;
            }
        }
        let observed = self.acc.push_observed(delta);
        self.emit_text(observed);
        let (idx, attempt) = (self.request.model_call_index, self.request.attempt);
        let event = match delta {
            MessageDelta::ReasoningDelta { text } => Some(AgentEvent::ReasoningDelta {
                model_call_index: idx,
                attempt,
                text: text.clone(),
            }),
            MessageDelta::ToolInputStart { id, name } => Some(AgentEvent::ToolInputStart {
                tool_call_id: id.clone(),
                name: name.clone(),
            }),
            MessageDelta::ToolInputDelta { id, delta } => Some(AgentEvent::ToolInputDelta {
                tool_call_id: id.clone(),
                delta: delta.clone(),
            }),
            _ => None,
        };
        if let Some(event) = event {
            self.emit(event);
        }
    }

    /// Emits what observers see of the text: visible text as `text_delta`, closed inline tags
    /// as `status_update` / `title_generated` / `plan_generated`, in stream order.
    fn emit_text(&mut self, observed: Vec<InlinePiece>) {
        let (model_call_index, attempt) = (self.request.model_call_index, self.request.attempt);
        for piece in observed {
            self.emit(match piece {
                InlinePiece::Text(text) => AgentEvent::TextDelta {
                    model_call_index,
                    attempt,
                    text,
                },
                InlinePiece::Tag(TagKind::Status, text) => AgentEvent::StatusUpdate {
                    model_call_index,
                    attempt,
                    text,
                },
                InlinePiece::Tag(TagKind::Title, title) => AgentEvent::TitleGenerated {
                    model_call_index,
                    attempt,
                    title,
                },
                InlinePiece::Tag(TagKind::Plan, body) => AgentEvent::PlanGenerated {
                    model_call_index,
                    attempt,
                    steps: crate::inline_tags::plan_steps(&body),
                },
            });
        }
    }

    /// Whether the accumulated message has tool calls.
    pub(crate) fn has_tool_calls(&self) -> bool {
        self.acc.has_tool_calls()
    }

    /// Commits the accumulated message (R-STR-4) and, when it has tool calls, schedules them.
    /// `rejected` holds the runtime's schema verdicts on the calls (R-TOOL-1, from `done`): a
    /// call with one fails at once (row `commit_schema_invalid`) unless an earlier row applies.
    pub(crate) fn commit(&mut self, rejected: &[ArgumentsRejected]) {
        self.end_attempt();
        // The text ends: what the inline-tag filter still held back is text after all.
        let rest = self.acc.end_text();
        if !rest.is_empty() {
            self.emit_text(vec![InlinePiece::Text(rest)]);
        }
        let message = self.acc.message();
        self.persist(Entry::Assistant {
            run_id: self.request.run_id.clone(),
            model_call_index: self.request.model_call_index,
            message: message.clone(),
        });
        self.emit(AgentEvent::ResponseComplete {
            model_call_index: self.request.model_call_index,
            usage: message.usage,
            tool_calls: message.tool_calls.len(),
            message: Box::new(message.clone()),
        });
        if !message.tool_calls.is_empty() {
            self.emit(AgentEvent::ToolCalls {
                count: message.tool_calls.len(),
            });
        }
        let offered: BTreeSet<&str> = self.request.tools.iter().map(|t| t.name.as_str()).collect();
        // The first verdict on each call id (ids are unique in a well-formed message).
        let mut verdicts: HashMap<&str, &ArgumentsRejected> =
            HashMap::with_capacity(rejected.len());
        for r in rejected {
            verdicts.entry(r.tool_call_id.as_str()).or_insert(r);
        }
        let mut slots = Vec::with_capacity(message.tool_calls.len());
        let mut sorted = Vec::with_capacity(message.tool_calls.len());
        let mut immediate = Vec::new();
        // The run of identical signatures at the end of the history: its signature and length
        // (the history is the run's earlier calls, then this message's calls so far).
        let mut last: Option<(String, String)> = self.recent.last().cloned();
        let mut run = last.as_ref().map_or(0, |l| {
            self.recent.iter().rev().take_while(|s| *s == l).count() as u32
        });
        for call in &message.tool_calls {
            let signature = (call.name.clone(), call.arguments.to_string());
            let repeats = if last.as_ref() == Some(&signature) {
                run + 1
            } else {
                1
            };
            last = Some(signature);
            run = repeats;
            let looped = self.cfg.doom_loop.filter(|p| repeats >= p.threshold);
            if let Some(policy) = looped {
                immediate.push(AgentEvent::LoopDetected {
                    tool_call_id: Some(call.id.clone()),
                    pattern: vec![call.name.clone()],
                    repeats,
                    action: match policy.action {
                        LoopAction::Ask => "ask".into(),
                        LoopAction::Stop => "stop".into(),
                    },
                });
            }
            let looped_action = looped.map(|p| p.action);
            let verdict = verdicts.get(call.id.as_str()).copied();
            let policy = self.cfg.policy(call);
            let (row, result) = if let Some(why) = &call.invalid_arguments {
                let r = error_result(call, ToolStatus::Error, why.clone());
                (ToolCallRow::CommitInvalid, Some(r))
            } else if !offered.contains(call.name.as_str()) {
                immediate.push(AgentEvent::ToolCallUnknown {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                });
                let why = unknown_tool_message(&call.name, offered.iter().copied());
                (
                    ToolCallRow::CommitUnknown,
                    Some(error_result(call, ToolStatus::Error, why)),
                )
            } else if let Some(verdict) = verdict {
                let why = verdict.message(&call.name);
                (
                    ToolCallRow::CommitSchemaInvalid,
                    Some(error_result(call, ToolStatus::Error, why)),
                )
            } else if looped_action == Some(LoopAction::Stop) {
                self.stop_requested.get_or_insert("stopped");
                let why = format!(
                    "refused: `{}` was called {repeats} times in a row with identical arguments (doom loop)",
                    call.name
                );
                (
                    ToolCallRow::CommitLoopRefused,
                    Some(error_result(call, ToolStatus::Error, why)),
                )
            } else if let Some(denial) = self.denial(call, &policy) {
                (ToolCallRow::CommitDeniedByRule, Some(denial))
            } else if looped_action == Some(LoopAction::Ask) {
                (ToolCallRow::CommitLoopAsk, None)
            } else if let Some(hit) = self.cached(call) {
                immediate.push(AgentEvent::ToolCacheHit {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                    cached_from: hit.tool_call_id.clone(),
                });
                let result = ToolResult {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                    content: hit.content.clone(),
                    status: ToolStatus::Completed,
                };
                (ToolCallRow::CommitCached, Some(result))
            } else if self.asks(call, &policy) {
                (ToolCallRow::CommitApproval, None)
            } else {
                (ToolCallRow::CommitQueued, None)
            };
            if let Some(event) = rule_matched(call, &policy, row) {
                immediate.push(event);
            }
            let mut slot = Slot::new(call.clone());
            slot.rejected = verdict.cloned();
            slot.policy = policy;
            slots.push(slot);
            sorted.push((row, looped_action, result));
        }
        self.committed = Some(message);
        self.slots = Slots::new(slots);
        let mut failed = Vec::new();
        for (i, (row, looped, result)) in sorted.into_iter().enumerate() {
            self.move_call(i, row, Facts::Commit { looped });
            if let Some(r) = result {
                failed.push((i, r));
            }
        }
        for e in immediate {
            self.emit(e);
        }
        for (i, r) in failed {
            self.record_result(i, r);
        }
        self.start_queued();
    }

    /// Loads a committed message and its known results; calls without one are queued (or
    /// wait for approval). Nothing is persisted for the known results.
    pub(crate) fn resume(&mut self, message: AssistantMessage, results: Vec<ToolResult>) {
        // The first known result of each call id (as a linear search would find it).
        let mut known: HashMap<&str, &ToolResult> = HashMap::with_capacity(results.len());
        for r in &results {
            known.entry(r.tool_call_id.as_str()).or_insert(r);
        }
        let slots = message
            .tool_calls
            .iter()
            .map(|call| Slot::new(call.clone()))
            .collect();
        self.slots = Slots::new(slots);
        for i in 0..self.slots.len() {
            let call = &self.slots.get(i).call;
            let policy = self.cfg.policy(call);
            let stored = known.get(call.id.as_str()).map(|r| (*r).clone());
            let denial = self.denial(call, &policy);
            let row = if stored.is_some() {
                ToolCallRow::RestoreResult
            } else if denial.is_some() {
                ToolCallRow::RestoreDeniedByRule
            } else if self.asks(call, &policy) {
                ToolCallRow::RestoreApproval
            } else {
                ToolCallRow::RestoreQueued
            };
            let matched = rule_matched(call, &policy, row);
            self.slots.get_mut(i).policy = policy;
            let has_result = stored.is_some();
            self.move_call(i, row, Facts::Restore { has_result });
            if let Some(event) = matched {
                self.emit(event);
            }
            match (stored, denial) {
                (Some(stored), _) => self.slots.get_mut(i).result = Some(stored),
                (None, Some(denial)) => self.record_result(i, denial),
                (None, None) => {}
            }
        }
        self.committed = Some(message);
    }

    /// Moves slot `i` along tool-call chart row `row` and records the transition with the
    /// chart oracle's verdict (the row the guards select, evaluated before the move).
    fn move_call(&mut self, i: usize, row: ToolCallRow, facts: Facts) {
        let event = row.spec().event;
        let before = self.slots.get(i).state();
        let (expected, overlap) = call_guards::expected(before, event, self, i, facts);
        let (from, to) = self.slots.apply(i, row);
        let check = GuardCheck {
            machine: MachineKind::ToolCall,
            from: from.name(),
            event: event.name(),
            taken: Some(row.spec().id),
            expected: expected.map(|r| r.spec().id),
            overlap,
        };
        let transition = Transition::ToolCall {
            index: i,
            call: self.slots.get(i).call.id.clone(),
            from,
            event,
            to,
            row,
        };
        self.calls.push((transition, check));
    }

    /// Whether the step offers a tool named `name`.
    pub(crate) fn offers(&self, name: &str) -> bool {
        self.request.tools.iter().any(|t| t.name == name)
    }

    /// The cached result for an identical earlier call of a pure tool (R-TOOL-6).
    pub(crate) fn cached(&self, call: &ToolCall) -> Option<&crate::tool_cache::Cached> {
        if !self.cfg.is_pure(&call.name) {
            return None;
        }
        self.cache.get(call)
    }

    /// Whether slot `i` must be put to a human (the guard `needs_approval`, without the
    /// doom-loop question).
    pub(crate) fn needs_approval(&self, i: usize) -> bool {
        let slot = self.slots.get(i);
        self.asks(&slot.call, &slot.policy)
    }

    /// Whether `call`, decided by `policy`, must be put to a human: its rule (or the approval
    /// map) says ask, and no "approve always" in this run covers it — which covers a tool, or
    /// a shell-like tool's command family ([`approval_scope`]), so not a call that a rule
    /// singled out by its arguments.
    ///
    /// [`approval_scope`]: crate::tool_rules::approval_scope
    fn asks(&self, call: &ToolCall, policy: &CallPolicy) -> bool {
        policy.action == RuleAction::Ask
            && (policy.by_argument
                || !self
                    .whitelist
                    .contains(&crate::tool_rules::approval_scope(call)))
    }

    /// The denied result of `call` if its deciding rule denies it (the guard `denied_by_rule`).
    fn denial(&self, call: &ToolCall, policy: &CallPolicy) -> Option<ToolResult> {
        if policy.action != RuleAction::Deny {
            return None;
        }
        let i = policy.rule?;
        let why = self.cfg.tool_rules.get(i)?.denial(i);
        Some(error_result(call, ToolStatus::Denied, why))
    }

    /// Persists and announces the result of slot `i`, which a chart row has just ended.
    fn record_result(&mut self, i: usize, result: ToolResult) {
        self.persist(Entry::ToolResult {
            run_id: self.request.run_id.clone(),
            result: result.clone(),
        });
        self.emit(AgentEvent::tool_end(&result));
        if result.status == ToolStatus::Completed && result.name == crate::todo::WRITE_TODOS_TOOL {
            if let Some(todos) = crate::todo::todos_of(&self.slots.get(i).call.arguments) {
                self.emit(AgentEvent::TodoChange {
                    tool_call_id: result.tool_call_id.clone(),
                    todos,
                });
            }
        }
        self.slots.get_mut(i).result = Some(result);
    }

    /// Starts slot `i`: asks the `before_tool` hooks first when the step gates tools and the
    /// call has not been gated yet, else runs it.
    fn start(&mut self, i: usize) {
        if self.asks_user(&self.slots.get(i).call) {
            self.ask_user(i);
            return;
        }
        if self.cfg.gate_tools && !self.slots.get(i).gated {
            self.move_call(i, ToolCallRow::StartGate, Facts::None);
            self.slots.get_mut(i).gated = true;
            let call = self.slots.get(i).call.clone();
            self.out.push(Effect::GateTool { call });
            return;
        }
        self.run(i, ToolCallRow::StartRun);
    }

    /// Runs slot `i` (moved by `row`): its start marker first (R-IDEM-6), then the tool.
    fn run(&mut self, i: usize, row: ToolCallRow) {
        self.move_call(i, row, Facts::None);
        let call = self.slots.get(i).call.clone();
        self.persist(Entry::ToolStarted {
            run_id: self.request.run_id.clone(),
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
        });
        self.emit(AgentEvent::ToolStart {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
        self.out.push(Effect::RunTool { call });
        if let Some(delay_ms) = self.slots.get(i).policy.timeout_ms {
            let timer_id = self.deadline_timer(i);
            self.out.push(Effect::StartTimer { timer_id, delay_ms });
        }
    }

    /// Whether `call` is to the built-in `ask_user` tool and the step offers it.
    pub(crate) fn asks_user(&self, call: &ToolCall) -> bool {
        self.cfg.ask_user && call.name == crate::process::config::ASK_USER_TOOL
    }

    /// Puts slot `i`'s question to the person (row `start_ask_user`): the question and the
    /// options are the call's `question` and `options` arguments (a call without a string
    /// `question` asks its whole arguments).
    fn ask_user(&mut self, i: usize) {
        self.move_call(i, ToolCallRow::StartAskUser, Facts::None);
        let call = &self.slots.get(i).call;
        let question = match call.arguments.get("question").and_then(|q| q.as_str()) {
            Some(q) => q.to_string(),
            None => call.arguments.to_string(),
        };
        let options: Vec<String> = call
            .arguments
            .get("options")
            .and_then(|o| o.as_array())
            .map(|a| {
                a.iter()
                    .map(|v| match v.as_str() {
                        Some(s) => s.to_string(),
                        None => v.to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let tool_call_id = call.id.clone();
        self.emit(AgentEvent::AskUser {
            reference: tool_call_id.clone(),
            question: question.clone(),
            options: options.clone(),
        });
        self.out.push(Effect::AskUser {
            tool_call_id,
            question,
            options,
        });
        if let Some(delay_ms) = self.cfg.ask_user_timeout_ms {
            let timer_id = self.deadline_timer(i);
            self.out.push(Effect::StartTimer { timer_id, delay_ms });
        }
    }

    /// The call waiting for the person's answer to the question `tool_call_id`, if any.
    pub(crate) fn asked_user(&self, tool_call_id: &str) -> Option<usize> {
        self.slots.find(tool_call_id, ToolCallState::AwaitingUser)
    }

    /// The person answered slot `i`'s question (`None`: nobody can): rows `user_answered`
    /// and `user_unavailable`.
    pub(crate) fn user_answered(&mut self, i: usize, answer: Option<&str>) {
        self.cancel_deadline(i);
        let call = self.slots.get(i).call.clone();
        match answer {
            Some(answer) => {
                self.emit(AgentEvent::UserResponded {
                    reference: call.id.clone(),
                    answer: answer.to_string(),
                });
                self.move_call(i, ToolCallRow::UserAnswered, Facts::Answered(true));
                let r = ToolResult {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                    content: answer.to_string(),
                    status: ToolStatus::Completed,
                };
                self.record_result(i, r);
            }
            None => {
                self.move_call(i, ToolCallRow::UserUnavailable, Facts::Answered(false));
                let why = "nobody can answer: no person is attached to this run (run it in a session or in `agentloop chat`)";
                self.record_result(i, error_result(&call, ToolStatus::Error, why.into()));
            }
        }
    }

    /// Ends the deadline timer of slot `i`, which stopped running (or waiting for an answer).
    fn cancel_deadline(&mut self, i: usize) {
        let asks = self.slots.get(i).state() == ToolCallState::AwaitingUser;
        if asks && self.cfg.ask_user_timeout_ms.is_some() {
            let timer_id = self.deadline_timer(i);
            self.out.push(Effect::CancelTimer { timer_id });
            return;
        }
        if !asks && self.slots.get(i).policy.timeout_ms.is_some() {
            let timer_id = self.deadline_timer(i);
            self.out.push(Effect::CancelTimer { timer_id });
        }
    }

    /// Slot `i`'s deadline passed while it ran: kill it and close it with an error result.
    pub(crate) fn tool_deadline(&mut self, i: usize) {
        let call = self.slots.get(i).call.clone();
        if self.slots.get(i).state() == ToolCallState::AwaitingUser {
            self.move_call(i, ToolCallRow::UserDeadline, Facts::None);
            let ms = self.cfg.ask_user_timeout_ms.unwrap_or_default();
            let r = error_result(
                &call,
                ToolStatus::Error,
                format!("the person did not answer within {ms} ms"),
            );
            self.record_result(i, r);
            return;
        }
        self.out.push(Effect::KillTool {
            tool_call_id: call.id.clone(),
        });
        self.move_call(i, ToolCallRow::Deadline, Facts::None);
        let ms = self.slots.get(i).policy.timeout_ms.unwrap_or_default();
        let r = error_result(
            &call,
            ToolStatus::Error,
            format!("tool timed out after {ms} ms"),
        );
        self.record_result(i, r);
    }

    /// Starts queued calls: all of them in parallel mode, else one when none runs.
    /// In call order; starting a call never queues another, so each queued call is looked at
    /// once.
    pub(crate) fn start_queued(&mut self) {
        let mut after = None;
        while let Some(i) = self.slots.next(ToolCallState::Queued, after) {
            if !self.cfg.parallel_tools && self.slots.busy() {
                return;
            }
            self.start(i);
            after = Some(i);
        }
    }

    pub(crate) fn approval_needed(&self) -> bool {
        self.slots.count(ToolCallState::NeedsApproval) > 0
            && self.slots.count(ToolCallState::Asking) == 0
    }

    pub(crate) fn all_results(&self) -> bool {
        self.slots.all_done()
    }

    pub(crate) fn ask_approval(&mut self) {
        if let Some(i) = self.slots.first(ToolCallState::NeedsApproval) {
            self.move_call(i, ToolCallRow::Ask, Facts::None);
            let call = self.slots.get(i).call.clone();
            self.emit(AgentEvent::ApprovalRequired {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
            self.out.push(Effect::RequestApproval { call });
            if let Some(delay_ms) = self.cfg.approval_timeout_ms {
                let timer_id = approval_timer(self.request.model_call_index, i);
                self.out.push(Effect::StartTimer { timer_id, delay_ms });
            }
        }
    }

    /// The call being asked about whose approval timer is `timer_id`, if any.
    pub(crate) fn approval_timer_of(&self, timer_id: u64) -> Option<usize> {
        let i = approval_slot(timer_id, self.request.model_call_index)?;
        let asked = i < self.slots.len() && self.slots.get(i).state() == ToolCallState::Asking;
        asked.then_some(i)
    }

    /// Ends the approval timer of slot `i`, which is no longer asked about (answered or
    /// closed).
    fn cancel_approval_timer(&mut self, i: usize) {
        if self.cfg.approval_timeout_ms.is_some() {
            let timer_id = approval_timer(self.request.model_call_index, i);
            self.out.push(Effect::CancelTimer { timer_id });
        }
    }

    /// Slot `i`'s approval timer fired before anyone answered (rows `awaiting_timed_out*`):
    /// the runtime stops waiting for the answer, and the call is denied like a rejection,
    /// with status timeout.
    pub(crate) fn approval_timed_out(&mut self, i: usize) {
        let after_ms = self.cfg.approval_timeout_ms.unwrap_or_default();
        let tool_call_id = self.slots.get(i).call.id.clone();
        self.out.push(Effect::WithdrawApproval { tool_call_id });
        let decision = crate::event::ApprovalDecision::TimedOut { after_ms };
        self.denied(i, &decision);
    }

    pub(crate) fn asking(&self, tool_call_id: &str) -> Option<usize> {
        self.slots.find(tool_call_id, ToolCallState::Asking)
    }

    pub(crate) fn gating(&self, tool_call_id: &str) -> Option<usize> {
        self.slots.find(tool_call_id, ToolCallState::Gating)
    }

    /// The hooks' verdict on gated slot `i` (R-EXT-1): run it (as it is or with their
    /// arguments), close it with a denied result, or send it down the approval path.
    pub(crate) fn gated(&mut self, i: usize, verdict: &crate::event::GateVerdict) {
        use crate::event::GateVerdict;
        match verdict {
            GateVerdict::Allow => self.run(i, ToolCallRow::GateAllowed),
            GateVerdict::Modify { arguments } => {
                self.slots.get_mut(i).call.arguments = arguments.clone();
                self.run(i, ToolCallRow::GateModified);
            }
            GateVerdict::Block { reason } => {
                let call = self.slots.get(i).call.clone();
                self.emit(AgentEvent::ToolBlocked {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                    reason: reason.clone(),
                });
                let r = error_result(&call, ToolStatus::Denied, format!("blocked: {reason}"));
                self.move_call(i, ToolCallRow::GateBlocked, Facts::None);
                self.record_result(i, r);
                self.start_queued();
            }
            GateVerdict::Ask => self.move_call(i, ToolCallRow::GateAsked, Facts::None),
        }
    }

    pub(crate) fn running(&self, tool_call_id: &str) -> Option<usize> {
        self.slots.find(tool_call_id, ToolCallState::Running)
    }

    pub(crate) fn tool_finished(&mut self, i: usize, status: ToolStatus, content: String) {
        let call = &self.slots.get(i).call;
        let result = ToolResult {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            content,
            status,
        };
        let row = if status == ToolStatus::Completed {
            ToolCallRow::FinishedOk
        } else {
            ToolCallRow::FinishedError
        };
        self.cancel_deadline(i);
        self.move_call(i, row, Facts::Finished(status));
        self.record_result(i, result);
    }

    pub(crate) fn approved(
        &mut self,
        i: usize,
        decision: &crate::event::ApprovalDecision,
        always: bool,
    ) {
        self.cancel_approval_timer(i);
        let call = self.slots.get(i).call.clone();
        self.emit(AgentEvent::ApprovalResolved {
            tool_call_id: call.id.clone(),
            decision: decision.clone(),
            status: decision.status(),
        });
        // Seed 001: the resume is announced before any event of the resumed run.
        self.emit(AgentEvent::AgentResumed {
            trigger: "tool_approved".into(),
        });
        let row = match decision {
            crate::event::ApprovalDecision::Modified { .. } => ToolCallRow::Modified,
            _ => ToolCallRow::Approved,
        };
        self.move_call(i, row, Facts::None);
        if always {
            // "Always" covers the call's command family, not the whole tool (R-CTL-4).
            let scope = crate::tool_rules::approval_scope(&call);
            for j in self.slots.in_state(ToolCallState::NeedsApproval) {
                let other = self.slots.get(j);
                if crate::tool_rules::approval_scope(&other.call) == scope
                    && !other.policy.by_argument
                {
                    self.move_call(j, ToolCallRow::Whitelisted, Facts::None);
                }
            }
            self.whitelist.insert(scope);
        }
        self.start_queued_from(i);
    }

    /// Starts slot `i` now if the parallelism policy allows, else leaves it queued.
    fn start_queued_from(&mut self, i: usize) {
        if self.cfg.parallel_tools || !self.slots.busy() {
            self.start(i);
        }
        self.start_queued();
    }

    pub(crate) fn modified(&mut self, i: usize, decision: &crate::event::ApprovalDecision) {
        if let crate::event::ApprovalDecision::Modified { arguments } = decision {
            self.slots.get_mut(i).call.arguments = arguments.clone();
        }
        self.approved(i, decision, false);
    }

    /// Whether the run continues after a rejected or timed-out approval.
    pub(crate) fn auto_resume(&self) -> bool {
        self.cfg.auto_resume
    }

    /// A human's rejection (or an approver's own timeout): the approval timer stops, and the
    /// call is denied (see [`denied`](Self::denied)).
    pub(crate) fn rejected(&mut self, i: usize, decision: &crate::event::ApprovalDecision) {
        self.cancel_approval_timer(i);
        self.denied(i, decision);
    }

    /// A rejection or approval timeout: the call gets a denied result; the run stops after
    /// the step (`tool_rejected`) unless auto_resume, which announces the resume instead.
    fn denied(&mut self, i: usize, decision: &crate::event::ApprovalDecision) {
        use crate::event::ApprovalDecision;
        let call = self.slots.get(i).call.clone();
        self.emit(AgentEvent::ApprovalResolved {
            tool_call_id: call.id.clone(),
            decision: decision.clone(),
            status: decision.status(),
        });
        let (why, trigger) = match decision {
            ApprovalDecision::TimedOut { after_ms } => (
                format!("denied: nobody approved the call within {after_ms} ms"),
                "tool_approval_timeout",
            ),
            ApprovalDecision::Rejected { reason } => {
                (format!("denied by user: {reason}"), "tool_rejected")
            }
            _ => (String::from("denied"), "tool_rejected"),
        };
        if self.cfg.auto_resume {
            self.emit(AgentEvent::AgentResumed {
                trigger: trigger.into(),
            });
        } else {
            self.stop_requested.get_or_insert("tool_rejected");
        }
        let r = error_result(&call, ToolStatus::Denied, why);
        self.move_call(i, ToolCallRow::Rejected, Facts::None);
        self.record_result(i, r);
    }

    pub(crate) fn killed_by(&self, kill: KillPolicy, name: &str) -> bool {
        match kill {
            KillPolicy::All => true,
            KillPolicy::None => false,
            KillPolicy::Killable => !self.cfg.immune.contains(name),
        }
    }

    /// Whether, under `kill`, some running call would keep running.
    pub(crate) fn would_drain(&self, kill: KillPolicy) -> bool {
        self.slots
            .in_state(ToolCallState::Running)
            .into_iter()
            .any(|i| !self.killed_by(kill, &self.slots.get(i).call.name))
    }

    /// Abort in ToolExecuting when some calls keep running: kill per policy, close every call
    /// that did not start or was killed; the survivors' results will be kept (R-CTL-3).
    pub(crate) fn abort_draining(&mut self, kill: KillPolicy) {
        self.close_open_calls(kill, ToolStatus::Aborted);
        self.outcome = Some(StepOutcome::Aborted);
    }

    /// Steering with `skip_remaining`: calls not started are skipped, killable running calls
    /// are killed and skipped; immune running calls finish (R-CTL-2).
    pub(crate) fn skip_for_steering(&mut self) {
        self.close_open_calls(KillPolicy::Killable, ToolStatus::Skipped);
    }

    /// Abort: cancel the stream or timer, kill running tools, give every call without a
    /// result an `aborted` result (R-CTL-3, R-IDEM-7).
    pub(crate) fn abort(&mut self, in_request: bool, in_retry: bool) {
        if in_request {
            self.end_attempt();
            self.cancel_model();
        }
        if in_retry {
            let timer_id = self.timer_id();
            self.out.push(Effect::CancelTimer { timer_id });
        }
        self.close_open_calls(KillPolicy::All, ToolStatus::Aborted);
        self.outcome = Some(StepOutcome::Aborted);
    }

    /// Closes every call without a result, in call order, with `status` (`aborted` for an
    /// abort, `skipped` for a steering skip): running calls the kill policy `kill` kills are
    /// killed, running calls it spares keep running (rows `*_immune`), calls not started end.
    fn close_open_calls(&mut self, kill: KillPolicy, status: ToolStatus) {
        let skip = status == ToolStatus::Skipped;
        let (killed, immune, unstarted) = if skip {
            (
                ToolCallRow::SkipKilled,
                ToolCallRow::SkipImmune,
                ToolCallRow::SkipUnstarted,
            )
        } else {
            (
                ToolCallRow::AbortKilled,
                ToolCallRow::AbortImmune,
                ToolCallRow::AbortUnstarted,
            )
        };
        for i in 0..self.slots.len() {
            let state = self.slots.get(i).state();
            if state.is_terminal() {
                continue;
            }
            let id = self.slots.get(i).call.id.clone();
            let row = if state != ToolCallState::Running {
                if state == ToolCallState::AwaitingUser {
                    self.cancel_deadline(i);
                }
                if state == ToolCallState::Asking {
                    self.cancel_approval_timer(i);
                }
                unstarted
            } else if self.killed_by(kill, &self.slots.get(i).call.name) {
                self.out.push(Effect::KillTool {
                    tool_call_id: id.clone(),
                });
                self.cancel_deadline(i);
                killed
            } else {
                immune
            };
            self.move_call(i, row, Facts::Kill(kill));
            if row == immune {
                continue;
            }
            let content = if skip {
                self.emit(AgentEvent::ToolSkippedForSteering { tool_call_id: id });
                "skipped: the user sent a steering message"
            } else {
                if row == killed {
                    self.emit(AgentEvent::ToolKilled { tool_call_id: id });
                }
                "aborted"
            };
            let r = error_result(&self.slots.get(i).call, status, content.into());
            self.record_result(i, r);
        }
    }

    /// Tool results in the model's call order (R-IN-4).
    pub(crate) fn results_in_call_order(&self) -> Vec<ToolResult> {
        self.slots.iter().filter_map(|s| s.result.clone()).collect()
    }
}

/// The `tool_rule_matched` event for `call` if a rule decided it and `row` acts on that
/// decision (not a call closed before the rules apply, nor one answered from the cache).
fn rule_matched(call: &ToolCall, policy: &CallPolicy, row: ToolCallRow) -> Option<AgentEvent> {
    let acts = matches!(
        row,
        ToolCallRow::CommitDeniedByRule
            | ToolCallRow::CommitLoopAsk
            | ToolCallRow::CommitApproval
            | ToolCallRow::CommitQueued
            | ToolCallRow::RestoreDeniedByRule
            | ToolCallRow::RestoreApproval
            | ToolCallRow::RestoreQueued
    );
    let rule = policy.rule.filter(|_| acts)?;
    Some(AgentEvent::ToolRuleMatched {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        rule,
        action: policy.action,
        // A denied call never runs: it has no deadline.
        timeout_ms: policy
            .timeout_ms
            .filter(|_| policy.action != RuleAction::Deny),
    })
}

fn error_result(call: &ToolCall, status: ToolStatus, content: String) -> ToolResult {
    ToolResult {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        content,
        status,
    }
}
