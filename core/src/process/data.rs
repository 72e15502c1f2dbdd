//! The inner machine's data and the pure helpers its handlers use to request effects.

use std::collections::{BTreeSet, HashMap};

use crate::agent_event::AgentEvent;
use crate::chart::{GuardCheck, MachineKind, ProcessRow, ToolCallRow};
use crate::effect::Effect;
use crate::entry::Entry;
use crate::error::ErrorKind;
use crate::error::ModelError;
use crate::event::KillPolicy;
use crate::inline_tags::{InlinePiece, TagKind};
use crate::message::{AssistantMessage, MessageDelta, ToolCall, ToolResult, ToolStatus};
use crate::model::ModelRequest;
use crate::process::call_guards::{self, Facts};
use crate::process::config::{LoopAction, StepConfig};
use crate::process::context::{Attempt, Ending, Outbox, ToolCalls};
use crate::process::deadlines::{
    approval_slot, approval_timer, tool_slot, tool_timer, AttemptTimer,
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

/// Everything the inner machine knows. Passed to the statig handlers as their context: the
/// step's configuration and one field per part of the context ([`crate::process::context`]),
/// each one concept that spans states — the model attempt in flight, the committed message's
/// tool calls, how the step ends, and what the current handle produces.
#[derive(Clone, Debug)]
pub struct ProcessData {
    pub(crate) cfg: StepConfig,
    /// The model attempt in flight and the step's attempts so far.
    pub(crate) attempt: Attempt,
    /// The committed message's calls, the "always" scopes, the run's earlier calls, the
    /// session's tool cache and the call the current input answers.
    pub(crate) tools: ToolCalls,
    /// The committed message, the outcome, a stop request, the typed-answer verdict.
    pub(crate) ending: Ending,
    /// The leaf state the handle started in and what it produced (drained by the facade).
    pub(crate) outbox: Outbox,
}

impl ProcessData {
    pub(crate) fn new(cfg: StepConfig, request: ModelRequest, whitelist: BTreeSet<String>) -> Self {
        let attempt = Attempt::new(request, cfg.inline_tags);
        ProcessData {
            cfg,
            attempt,
            tools: ToolCalls::new(whitelist),
            ending: Ending::default(),
            outbox: Outbox::default(),
        }
    }

    /// Records the chart row a handler took (the generated dispatch calls it).
    pub(crate) fn take(&mut self, row: ProcessRow) {
        self.outbox.take(row);
    }

    fn emit(&mut self, event: AgentEvent) {
        self.outbox.emit(event);
    }

    fn persist(&mut self, entry: Entry) {
        self.outbox.persist(entry);
    }

    /// The current attempt's backoff timer.
    pub(crate) fn timer_id(&self) -> u64 {
        self.attempt.timer_id()
    }

    /// The deadline timer of slot `i` (see [`deadlines`](crate::process::deadlines)).
    pub(crate) fn deadline_timer(&self, i: usize) -> u64 {
        tool_timer(self.attempt.request.model_call_index, i)
    }

    /// The running slot whose deadline timer is `timer_id`, if any.
    pub(crate) fn deadline_of(&self, timer_id: u64) -> Option<usize> {
        let i = tool_slot(timer_id, self.attempt.request.model_call_index)?;
        let state = (i < self.tools.slots.len()).then(|| self.tools.slots.get(i).state());
        matches!(
            state,
            Some(ToolCallState::Running | ToolCallState::AwaitingUser)
        )
        .then_some(i)
    }

    /// The current attempt's deadline that `timer_id` names, if it passed (see
    /// [`Attempt::deadline`]).
    pub(crate) fn attempt_deadline(&self, timer_id: u64) -> Option<(AttemptTimer, u64)> {
        self.attempt.deadline(timer_id)
    }

    /// Whether `timer_id` is the stall watchdog and deltas arrived since it was armed.
    pub(crate) fn stream_moved(&self, timer_id: u64) -> bool {
        self.attempt.stream_moved(timer_id)
    }

    /// The stall watchdog looked and saw deltas: it looks again one period later.
    pub(crate) fn rewatch(&mut self, timer_id: u64) {
        if let Some((kind, delay_ms)) = self.attempt.timers.get(timer_id) {
            self.attempt.timers.moved = false;
            self.attempt
                .timers
                .arm(kind, timer_id, delay_ms, &mut self.outbox.out);
        }
    }

    /// An attempt deadline passed: the stream is cancelled; a first-chunk or stall deadline is
    /// announced as a stall. Returns the retry reason and the error if the step cannot retry.
    pub(crate) fn deadline_passed(&mut self, timer_id: u64) -> (String, ModelError) {
        let (kind, ms) = self
            .attempt
            .timers
            .get(timer_id)
            .unwrap_or((AttemptTimer::Request, 0));
        let note = self.not_retried_note();
        self.attempt.timers.fired(timer_id);
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
            .attempt
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
        if self.attempt.retries >= self.cfg.retry.max_retries {
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
        self.attempt.timers.clear(&mut self.outbox.out);
    }

    /// Sends the current attempt's request.
    pub(crate) fn call_model(&mut self) {
        self.attempt.send(self.cfg.inline_tags);
        let request = self.attempt.request.clone();
        self.emit(AgentEvent::RequestStart {
            model_call_index: request.model_call_index,
            attempt: request.attempt,
            model: request.model.clone(),
        });
        self.outbox.push(Effect::CallModel { request });
        if let Some(d) = self.cfg.stream {
            let base = self.timer_id();
            let first = AttemptTimer::FirstChunk;
            self.attempt.timers.arm(
                first,
                first.id(base),
                d.first_chunk_ms,
                &mut self.outbox.out,
            );
            if let Some(ms) = d.request_ms {
                let request = AttemptTimer::Request;
                self.attempt
                    .timers
                    .arm(request, request.id(base), ms, &mut self.outbox.out);
            }
        }
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
        self.cfg.retry.retries_after(error, self.attempt.retries)
            && !(error.kind == ErrorKind::MalformedResponse && self.attempt.malformed_retried)
    }

    /// Notes the error a retry is scheduled after (row `requesting_retry`).
    pub(crate) fn retrying_after(&mut self, error: &ModelError) {
        if error.kind == ErrorKind::MalformedResponse {
            self.attempt.malformed_retried = true;
        }
    }

    /// The step's error for a transport error that is not retried: a second malformed
    /// answer says so.
    pub(crate) fn unretried(&self, error: &ModelError) -> ModelError {
        let mut error = error.clone();
        if error.kind == ErrorKind::MalformedResponse && self.attempt.malformed_retried {
            error
                .message
                .push_str(" (the retry got a malformed answer too: not retried again)");
        }
        error
    }

    /// Schedules the next attempt: discards partial output, starts the backoff timer.
    pub(crate) fn schedule_retry(&mut self, reason: String, retry_after_ms: Option<u64>) {
        self.end_attempt();
        let draw = u64::from(self.attempt.request.model_call_index) << 32
            | u64::from(self.attempt.request.attempt);
        let delay_ms =
            self.cfg
                .retry
                .jittered_delay_ms(self.attempt.retries + 1, retry_after_ms, draw);
        self.attempt.retry(self.cfg.inline_tags);
        let timer_id = self.timer_id();
        self.outbox.push(Effect::StartTimer { timer_id, delay_ms });
        self.emit(AgentEvent::Retry {
            model_call_index: self.attempt.request.model_call_index,
            attempt: self.attempt.request.attempt,
            delay_ms,
            reason,
            retry_after_ms,
        });
    }

    pub(crate) fn retried(&mut self) {
        self.emit(AgentEvent::ModelTurnRetried {
            model_call_index: self.attempt.request.model_call_index,
            attempt: self.attempt.request.attempt,
        });
        self.call_model();
    }

    pub(crate) fn cancel_model(&mut self) {
        let attempt = self.attempt.id();
        self.outbox.push(Effect::CancelModel { attempt });
    }

    pub(crate) fn fail(&mut self, error: ModelError) {
        self.end_attempt();
        self.emit(AgentEvent::StreamError {
            error: error.clone(),
        });
        self.ending.end(StepOutcome::Failed(error));
    }

    pub(crate) fn overflow(&mut self, error: ModelError) {
        self.end_attempt();
        self.emit(AgentEvent::ContextOverflow {
            message: error.message.clone(),
        });
        self.ending.end(StepOutcome::ContextOverflow(error));
    }

    pub(crate) fn stalled(&mut self, after_ms: u64) {
        self.cancel_model();
        self.emit(AgentEvent::StreamStalled {
            model_call_index: self.attempt.request.model_call_index,
            attempt: self.attempt.request.attempt,
            after_ms,
        });
    }

    pub(crate) fn opened(&mut self) {
        self.emit(AgentEvent::MessageStart {
            model_call_index: self.attempt.request.model_call_index,
            attempt: self.attempt.request.attempt,
        });
    }

    /// Accumulates a new delta and emits its observable form.
    pub(crate) fn delta(&mut self, seq: u64, delta: &MessageDelta) {
        self.attempt.seen.insert(seq);
        self.attempt.timers.moved = true;
        if self.attempt.timers.armed(AttemptTimer::FirstChunk) {
            // Deltas flow: the first-chunk deadline gives way to the stall watchdog.
            self.attempt
                .timers
                .disarm(AttemptTimer::FirstChunk, &mut self.outbox.out);
            if let Some(d) = self.cfg.stream {
                let stall = AttemptTimer::Stall;
                let id = stall.id(self.timer_id());
                self.attempt
                    .timers
                    .arm(stall, id, d.stall_ms, &mut self.outbox.out);
                self.attempt.timers.moved = false;
            }
        }
        let observed = self.attempt.acc.push_observed(delta);
        self.emit_text(observed);
        let (idx, attempt) = (
            self.attempt.request.model_call_index,
            self.attempt.request.attempt,
        );
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
        let (model_call_index, attempt) = (
            self.attempt.request.model_call_index,
            self.attempt.request.attempt,
        );
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
        self.attempt.acc.has_tool_calls()
    }

    /// Commits the accumulated message (R-STR-4) and, when it has tool calls, schedules them.
    /// `rejected` holds the runtime's schema verdicts on the calls (R-TOOL-1, from `done`): a
    /// call with one fails at once (row `commit_schema_invalid`) unless an earlier row applies.
    pub(crate) fn commit(&mut self, rejected: &[ArgumentsRejected]) {
        self.end_attempt();
        // The text ends: what the inline-tag filter still held back is text after all.
        let rest = self.attempt.acc.end_text();
        if !rest.is_empty() {
            self.emit_text(vec![InlinePiece::Text(rest)]);
        }
        let message = self.attempt.acc.message();
        self.persist(Entry::Assistant {
            run_id: self.attempt.request.run_id.clone(),
            model_call_index: self.attempt.request.model_call_index,
            message: message.clone(),
        });
        self.emit(AgentEvent::ResponseComplete {
            model_call_index: self.attempt.request.model_call_index,
            usage: message.usage,
            tool_calls: message.tool_calls.len(),
            message: Box::new(message.clone()),
        });
        if !message.tool_calls.is_empty() {
            self.emit(AgentEvent::ToolCalls {
                count: message.tool_calls.len(),
            });
        }
        let offered: BTreeSet<&str> = self
            .attempt
            .request
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect();
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
        let mut last: Option<(String, String)> = self.tools.recent.last().cloned();
        let mut run = last.as_ref().map_or(0, |l| {
            self.tools
                .recent
                .iter()
                .rev()
                .take_while(|s| *s == l)
                .count() as u32
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
                    kind: Default::default(),
                    path: None,
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
                self.ending.stop("stopped");
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
        self.ending.committed = Some(message);
        self.tools.slots = Slots::new(slots);
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
        self.tools.slots = Slots::new(slots);
        for i in 0..self.tools.slots.len() {
            let call = &self.tools.slots.get(i).call;
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
            self.tools.slots.get_mut(i).policy = policy;
            let has_result = stored.is_some();
            self.move_call(i, row, Facts::Restore { has_result });
            if let Some(event) = matched {
                self.emit(event);
            }
            match (stored, denial) {
                (Some(stored), _) => self.tools.slots.get_mut(i).result = Some(stored),
                (None, Some(denial)) => self.record_result(i, denial),
                (None, None) => {}
            }
        }
        self.ending.committed = Some(message);
    }

    /// Moves slot `i` along tool-call chart row `row` and records the transition with the
    /// chart oracle's verdict (the row the guards select, evaluated before the move).
    fn move_call(&mut self, i: usize, row: ToolCallRow, facts: Facts) {
        let event = row.spec().event;
        let before = self.tools.slots.get(i).state();
        let (expected, overlap) = call_guards::expected(before, event, self, i, facts);
        let (from, to) = self.tools.slots.apply(i, row);
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
            call: self.tools.slots.get(i).call.id.clone(),
            from,
            event,
            to,
            row,
        };
        self.outbox.calls.push((transition, check));
    }

    /// Whether the step offers a tool named `name`.
    pub(crate) fn offers(&self, name: &str) -> bool {
        self.attempt.request.tools.iter().any(|t| t.name == name)
    }

    /// The cached result for an identical earlier call of a pure tool (R-TOOL-6).
    pub(crate) fn cached(&self, call: &ToolCall) -> Option<&crate::tool_cache::Cached> {
        if !self.cfg.is_pure(&call.name) {
            return None;
        }
        self.tools.cache.get(call)
    }

    /// Whether slot `i` must be put to a human (the guard `needs_approval`, without the
    /// doom-loop question).
    pub(crate) fn needs_approval(&self, i: usize) -> bool {
        let slot = self.tools.slots.get(i);
        self.asks(&slot.call, &slot.policy)
    }

    /// Whether `call`, decided by `policy`, must be put to a human: its rule (or the approval
    /// map) says ask, and no "approve always" in this run covers it — which covers a tool, or
    /// a shell-like tool's command family ([`approval_scope`]), so not a call that a rule
    /// singled out by its arguments.
    ///
    /// [`approval_scope`]: crate::tool_rules::approval_scope
    fn asks(&self, call: &ToolCall, policy: &CallPolicy) -> bool {
        policy.action == RuleAction::Ask && (policy.by_argument || !self.tools.whitelisted(call))
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
            run_id: self.attempt.request.run_id.clone(),
            result: result.clone(),
        });
        self.emit(AgentEvent::tool_end(&result));
        if result.status == ToolStatus::Completed && result.name == crate::todo::WRITE_TODOS_TOOL {
            if let Some(todos) = crate::todo::todos_of(&self.tools.slots.get(i).call.arguments) {
                self.emit(AgentEvent::TodoChange {
                    tool_call_id: result.tool_call_id.clone(),
                    todos,
                });
            }
        }
        self.tools.slots.get_mut(i).result = Some(result);
    }

    /// Starts slot `i`: asks the `before_tool` hooks first when the step gates tools and the
    /// call has not been gated yet, else runs it.
    fn start(&mut self, i: usize) {
        if self.asks_user(&self.tools.slots.get(i).call) {
            self.ask_user(i);
            return;
        }
        if self.cfg.gate_tools && !self.tools.slots.get(i).gated {
            self.move_call(i, ToolCallRow::StartGate, Facts::None);
            self.tools.slots.get_mut(i).gated = true;
            let call = self.tools.slots.get(i).call.clone();
            self.outbox.push(Effect::GateTool { call });
            return;
        }
        self.run(i, ToolCallRow::StartRun);
    }

    /// Runs slot `i` (moved by `row`): its start marker first (R-IDEM-6), then the tool.
    fn run(&mut self, i: usize, row: ToolCallRow) {
        self.move_call(i, row, Facts::None);
        let call = self.tools.slots.get(i).call.clone();
        self.persist(Entry::ToolStarted {
            run_id: self.attempt.request.run_id.clone(),
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
        });
        self.emit(AgentEvent::ToolStart {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
        self.outbox.push(Effect::RunTool { call });
        if let Some(delay_ms) = self.tools.slots.get(i).policy.timeout_ms {
            let timer_id = self.deadline_timer(i);
            self.outbox.push(Effect::StartTimer { timer_id, delay_ms });
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
        let call = &self.tools.slots.get(i).call;
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
        self.outbox.push(Effect::AskUser {
            tool_call_id,
            question,
            options,
        });
        if let Some(delay_ms) = self.cfg.ask_user_timeout_ms {
            let timer_id = self.deadline_timer(i);
            self.outbox.push(Effect::StartTimer { timer_id, delay_ms });
        }
    }

    /// The person answered slot `i`'s question (`None`: nobody can): rows `user_answered`
    /// and `user_unavailable`.
    pub(crate) fn user_answered(&mut self, i: usize, answer: Option<&str>) {
        self.cancel_deadline(i);
        let call = self.tools.slots.get(i).call.clone();
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
        let asks = self.tools.slots.get(i).state() == ToolCallState::AwaitingUser;
        if asks && self.cfg.ask_user_timeout_ms.is_some() {
            let timer_id = self.deadline_timer(i);
            self.outbox.push(Effect::CancelTimer { timer_id });
            return;
        }
        if !asks && self.tools.slots.get(i).policy.timeout_ms.is_some() {
            let timer_id = self.deadline_timer(i);
            self.outbox.push(Effect::CancelTimer { timer_id });
        }
    }

    /// Slot `i`'s deadline passed while it ran: kill it and close it with an error result.
    pub(crate) fn tool_deadline(&mut self, i: usize) {
        let call = self.tools.slots.get(i).call.clone();
        if self.tools.slots.get(i).state() == ToolCallState::AwaitingUser {
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
        self.outbox.push(Effect::KillTool {
            tool_call_id: call.id.clone(),
        });
        self.move_call(i, ToolCallRow::Deadline, Facts::None);
        let ms = self
            .tools
            .slots
            .get(i)
            .policy
            .timeout_ms
            .unwrap_or_default();
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
        while let Some(i) = self.tools.slots.next(ToolCallState::Queued, after) {
            if !self.cfg.parallel_tools && self.tools.slots.busy() {
                return;
            }
            self.start(i);
            after = Some(i);
        }
    }

    pub(crate) fn ask_approval(&mut self) {
        if let Some(i) = self.tools.slots.first(ToolCallState::NeedsApproval) {
            self.move_call(i, ToolCallRow::Ask, Facts::None);
            let call = self.tools.slots.get(i).call.clone();
            self.emit(AgentEvent::ApprovalRequired {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
            self.outbox.push(Effect::RequestApproval { call });
            if let Some(delay_ms) = self.cfg.approval_timeout_ms {
                let timer_id = approval_timer(self.attempt.request.model_call_index, i);
                self.outbox.push(Effect::StartTimer { timer_id, delay_ms });
            }
        }
    }

    /// The call being asked about whose approval timer is `timer_id`, if any.
    pub(crate) fn approval_timer_of(&self, timer_id: u64) -> Option<usize> {
        let i = approval_slot(timer_id, self.attempt.request.model_call_index)?;
        let asked =
            i < self.tools.slots.len() && self.tools.slots.get(i).state() == ToolCallState::Asking;
        asked.then_some(i)
    }

    /// Ends the approval timer of slot `i`, which is no longer asked about (answered or
    /// closed).
    fn cancel_approval_timer(&mut self, i: usize) {
        if self.cfg.approval_timeout_ms.is_some() {
            let timer_id = approval_timer(self.attempt.request.model_call_index, i);
            self.outbox.push(Effect::CancelTimer { timer_id });
        }
    }

    /// Slot `i`'s approval timer fired before anyone answered (rows `awaiting_timed_out*`):
    /// the runtime stops waiting for the answer, and the call is denied like a rejection,
    /// with status timeout.
    pub(crate) fn approval_timed_out(&mut self, i: usize) {
        let after_ms = self.cfg.approval_timeout_ms.unwrap_or_default();
        let tool_call_id = self.tools.slots.get(i).call.id.clone();
        self.outbox.push(Effect::WithdrawApproval { tool_call_id });
        let decision = crate::event::ApprovalDecision::TimedOut { after_ms };
        self.denied(i, &decision);
    }

    /// The hooks' verdict on gated slot `i` (R-EXT-1): run it (as it is or with their
    /// arguments), close it with a denied result, or send it down the approval path.
    pub(crate) fn gated(&mut self, i: usize, verdict: &crate::event::GateVerdict) {
        use crate::event::GateVerdict;
        match verdict {
            GateVerdict::Allow => self.run(i, ToolCallRow::GateAllowed),
            GateVerdict::Modify { arguments } => {
                self.tools.slots.get_mut(i).call.arguments = arguments.clone();
                self.run(i, ToolCallRow::GateModified);
            }
            GateVerdict::Block { reason } => {
                let call = self.tools.slots.get(i).call.clone();
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
            GateVerdict::Ask => {
                self.move_call(i, ToolCallRow::GateAsked, Facts::None);
                // An "approve always" that covers the call (this run's, or the session's
                // handed to the run) answers the hook's question as it answers a rule's.
                let slot = self.tools.slots.get(i);
                if !slot.policy.by_argument && self.tools.whitelisted(&slot.call) {
                    self.move_call(i, ToolCallRow::Whitelisted, Facts::None);
                    self.start_queued_from(i);
                }
            }
        }
    }

    pub(crate) fn tool_finished(&mut self, i: usize, status: ToolStatus, content: String) {
        let call = &self.tools.slots.get(i).call;
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
        let call = self.tools.slots.get(i).call.clone();
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
            for j in self.tools.slots.in_state(ToolCallState::NeedsApproval) {
                let other = self.tools.slots.get(j);
                if crate::tool_rules::approval_scope(&other.call) == scope
                    && !other.policy.by_argument
                {
                    self.move_call(j, ToolCallRow::Whitelisted, Facts::None);
                }
            }
            self.tools.whitelist.insert(scope);
        }
        self.start_queued_from(i);
    }

    /// Starts slot `i` now if the parallelism policy allows, else leaves it queued.
    fn start_queued_from(&mut self, i: usize) {
        if self.cfg.parallel_tools || !self.tools.slots.busy() {
            self.start(i);
        }
        self.start_queued();
    }

    pub(crate) fn modified(&mut self, i: usize, decision: &crate::event::ApprovalDecision) {
        if let crate::event::ApprovalDecision::Modified { arguments } = decision {
            self.tools.slots.get_mut(i).call.arguments = arguments.clone();
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
        let call = self.tools.slots.get(i).call.clone();
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
            self.ending.stop("tool_rejected");
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
        self.tools
            .slots
            .in_state(ToolCallState::Running)
            .into_iter()
            .any(|i| !self.killed_by(kill, &self.tools.slots.get(i).call.name))
    }

    /// Abort in ToolExecuting when some calls keep running: kill per policy, close every call
    /// that did not start or was killed; the survivors' results will be kept (R-CTL-3).
    pub(crate) fn abort_draining(&mut self, kill: KillPolicy) {
        self.close_open_calls(kill, ToolStatus::Aborted);
        self.ending.end(StepOutcome::Aborted);
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
            self.outbox.push(Effect::CancelTimer { timer_id });
        }
        self.close_open_calls(KillPolicy::All, ToolStatus::Aborted);
        self.ending.end(StepOutcome::Aborted);
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
        for i in 0..self.tools.slots.len() {
            let state = self.tools.slots.get(i).state();
            if state.is_terminal() {
                continue;
            }
            let id = self.tools.slots.get(i).call.id.clone();
            let row = if state != ToolCallState::Running {
                if state == ToolCallState::AwaitingUser {
                    self.cancel_deadline(i);
                }
                if state == ToolCallState::Asking {
                    self.cancel_approval_timer(i);
                }
                unstarted
            } else if self.killed_by(kill, &self.tools.slots.get(i).call.name) {
                self.outbox.push(Effect::KillTool {
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
            let r = error_result(&self.tools.slots.get(i).call, status, content.into());
            self.record_result(i, r);
        }
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
