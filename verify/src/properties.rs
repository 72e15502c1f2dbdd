//! The properties, written from the specification (SPEC.md), never from the charts: each is a
//! predicate over the inputs a machine was fed and the effects it returned, kept by an
//! observer ([`RunSpec`] for a run, [`SessionSpec`] for a session) that records the first
//! violation of each property. Nothing here names a chart row, a guard, a chart state or the
//! chart oracle: a wrong chart is judged by what it makes the machine do.
//!
//! The checks that need to drive a machine further (an abort ends the run, fair delivery ends
//! it) are in [`crate::run_model`] and [`crate::session_model`], over the same observers.

use std::collections::{BTreeMap, BTreeSet};

use agentloop_core::agent_event::AgentEvent;
use agentloop_core::effect::Effect;
use agentloop_core::entry::Entry;
use agentloop_core::event::{ApprovalDecision, AttemptId, Event};
use agentloop_core::message::{Message, MessageDelta, ToolStatus};
use agentloop_core::outcome::Outcome;
use agentloop_core::react::RUN_DEADLINE_TIMER;
use agentloop_core::session_machine::{RunInput, SessionEffect, SessionReply};
use agentloop_core::{LoopResult, Step};

use crate::events::EventLedger;

/// A named property of the run: what must always hold (SPEC.md's requirement in brackets).
pub mod run {
    /// A tool call id is run at most once (R-IDEM-3).
    pub const NO_DOUBLE_EXECUTION: &str = "no tool executed twice for one call id";
    /// Before every model request every committed tool call has exactly one terminal result,
    /// and no result exists without its call (R-IDEM-7).
    pub const PAIRED_BEFORE_REQUEST: &str = "every call has one result before the next request";
    /// The context sent to the model pairs each call with its result, also after compaction
    /// (R-IDEM-7, R-OUT-6).
    pub const CONTEXT_PAIRED: &str = "the model's context pairs calls and results";
    /// Only the current attempt's deduplicated output is emitted and committed, only on its
    /// `Done` (R-IN-6, R-STR-3, R-STR-4).
    pub const NOTHING_FROM_FAILED_ATTEMPT: &str = "nothing from a failed or retried attempt";
    /// A tool whose start was not persisted, that was not offered, whose arguments are not
    /// JSON, or that needs approval and was not approved, never runs (R-IDEM-6, R-CTL-6,
    /// R-STR-6, R-CTL-4).
    pub const DENIED_NEVER_RUNS: &str = "a denied, unknown or malformed call never runs";
    /// Once the run ended, every input is refused, changes nothing and requests nothing.
    pub const TERMINAL_ABSORBS: &str = "terminal states absorb";
    /// At most one end event, exactly one once ended, agreeing with the result, which never
    /// changes (R-OUT-1, R-VER-1).
    pub const ONE_OUTCOME: &str = "exactly one run outcome";
    /// At most `max_steps` steps, at most `max_retries` retries per request of a step (a
    /// step re-requested after compaction starts its budget again), and the last allowed step
    /// offers no tools (R-OUT-2, R-OUT-5, R-IN-6).
    pub const MODEL_CALLS_BOUNDED: &str = "model requests within max_steps and max_retries";
    /// No model request carries more context messages than `compact_threshold`: a context
    /// over it is compacted first (R-OUT). Allowances: steering merged at that step boundary
    /// and the last step's reminder (R-OUT-5) go on top of the checked context; a request
    /// after a compaction carries what the compactor returned (the compactor answers for its
    /// size, R-OUT-6); a retry re-sends its step's request.
    pub const CONTEXT_WITHIN_THRESHOLD: &str =
        "a request's context is within the compaction threshold";
    /// What the run's own effects await is never refused: the current attempt's stream
    /// opening, fresh deltas, end and failure; a running call's result; the answer to an
    /// approval it asked for; the compaction and the run-end commit it requested (R-IN-2:
    /// every model error is retried or fails the step; R-IN-3; R-CTL-4).
    pub const AWAITED_TAKEN: &str = "an awaited result is never refused";
    /// An input the machine did not take changes nothing (typed unexpected input).
    pub const UNHANDLED_IS_INERT: &str = "an unhandled input does nothing";
    /// From any state, an abort (then the results of tools that finish regardless) ends the
    /// run within a bounded number of inputs, as `Aborted` unless it had already ended
    /// (R-CTL-3).
    pub const ABORT_ENDS: &str = "an abort reaches Aborted within a bound";
    /// From any state, a driver that delivers every awaited result ends the run within a
    /// bound, without the run's deadline firing (liveness: some input always moves the run
    /// forward, and fair runs end; the deadline only bounds a run that is stuck, R-IN-7).
    pub const FAIR_RUNS_END: &str = "under fair delivery every run ends";
    /// A call's result says it was aborted, or the run ends `Aborted`, only after the user
    /// aborted the run or the run's deadline passed (R-CTL-3, R-IN-7): a stop after this
    /// step, a rejection or an approval timeout (a rejection, R-CTL-4) aborts neither the run
    /// nor the calls that are still allowed to run.
    pub const ABORTED_ONLY_BY_ABORT: &str = "a call or run is aborted only by an abort";
    /// A run ends only once the store acknowledged its run-end entry (or failed, so that
    /// nothing more can be stored): a crash before that resumes the run (R-IDEM-5).
    pub const END_COMMITTED: &str = "the end is committed before the run ends";
    /// Each model request, compaction and approval request is announced once in the step
    /// that starts it (`request_start`, `compact_start`, `approval_required`); a tool's
    /// `tool_start`/`tool_end` come once, with its run and its recorded result; a compaction
    /// announces its end before the next request; an
    /// approval is resolved once per time it was asked; `session_repaired` only when a
    /// run starts from a history that breaks pairing (R-EVT, R-IDEM-7).
    pub const EVENTS_MATCH_WORK: &str = "events announce the work, once each";
    /// A run that asks for a typed answer never completes with an answer its check rejected
    /// (it asks again or fails).
    pub const TYPED_ANSWER_CHECKED: &str = "no completion with a rejected typed answer";

    /// Every run property, in report order.
    pub const ALL: [&str; 17] = [
        NO_DOUBLE_EXECUTION,
        PAIRED_BEFORE_REQUEST,
        CONTEXT_PAIRED,
        NOTHING_FROM_FAILED_ATTEMPT,
        DENIED_NEVER_RUNS,
        TERMINAL_ABSORBS,
        ONE_OUTCOME,
        MODEL_CALLS_BOUNDED,
        CONTEXT_WITHIN_THRESHOLD,
        AWAITED_TAKEN,
        UNHANDLED_IS_INERT,
        ABORT_ENDS,
        FAIR_RUNS_END,
        ABORTED_ONLY_BY_ABORT,
        END_COMMITTED,
        EVENTS_MATCH_WORK,
        TYPED_ANSWER_CHECKED,
    ];
}

/// A named property of the session: what must always hold.
pub mod session {
    /// A run starts only when none is running (R-CTL-1).
    pub const ONE_RUN_AT_A_TIME: &str = "never two runs at once";
    /// Every accepted prompt is started, queued or dropped with `prompt_dropped`; a queued one
    /// starts when the run before it ends (R-CTL-1, R-CTL-3).
    pub const NO_LOST_PROMPT: &str = "no queued prompt is lost";
    /// A prompt or steer while idle starts a run; while busy a prompt is queued (R-CTL-1,
    /// R-CTL-2).
    pub const IDLE_STARTS_BUSY_QUEUES: &str = "idle starts a run, busy queues";
    /// Steering beyond the queue's capacity is refused with `QueueFull` (R-CTL-2).
    pub const STEERING_BOUNDED: &str = "steering never exceeds its capacity";
    /// An abort always publishes `agent_abort` or reaches the running run; idle, it starts
    /// nothing (R-CTL-3).
    pub const ABORT_HEARD: &str = "an abort is always heard";
    /// Every command is answered exactly once.
    pub const ONE_REPLY: &str = "every command gets one reply";
    /// From any state of an open session, ending the running runs drains the queue to idle
    /// within a bound.
    pub const DRAINS_TO_IDLE: &str = "ending runs drains the queue to idle";

    /// Every session property, in report order.
    pub const ALL: [&str; 7] = [
        ONE_RUN_AT_A_TIME,
        NO_LOST_PROMPT,
        IDLE_STARTS_BUSY_QUEUES,
        STEERING_BOUNDED,
        ABORT_HEARD,
        ONE_REPLY,
        DRAINS_TO_IDLE,
    ];
}

/// The first violation of each property seen so far, with what happened.
#[derive(Clone, Debug, Default)]
pub struct Violations(BTreeMap<&'static str, String>);

impl Violations {
    /// Records a violation of `property` (the first one is kept).
    pub fn record(&mut self, property: &'static str, detail: impl FnOnce() -> String) {
        self.0.entry(property).or_insert_with(detail);
    }

    /// Whether `property` was violated.
    pub fn violated(&self, property: &str) -> bool {
        self.0.contains_key(property)
    }

    /// The violations, by property.
    pub fn iter(&self) -> impl Iterator<Item = (&&'static str, &String)> {
        self.0.iter()
    }

    /// The violated properties (part of a state's fingerprint).
    pub fn names(&self) -> Vec<&'static str> {
        self.0.keys().copied().collect()
    }
}

/// What the observer is told of a run's configuration (the facts the specification speaks
/// of, taken from the configuration, not from the chart).
#[derive(Clone, Debug, Default)]
pub struct RunLimits {
    /// `max_steps`.
    pub max_steps: u32,
    /// `max_retries` per step.
    pub max_retries: u32,
    /// The tools offered.
    pub tools: BTreeSet<String>,
    /// The tools whose calls always need a human's approval.
    pub approval: BTreeSet<String>,
    /// `compact_threshold`, in messages.
    pub compact_threshold: Option<usize>,
}

/// One committed tool call, as the observer saw it.
#[derive(Clone, Debug, Default)]
struct CallRecord {
    name: String,
    malformed: bool,
    results: u32,
    started: bool,
    ran: bool,
    approved: bool,
    denied: bool,
}

/// The run observer: fed every (input, step) pair, it keeps what the effects said and records
/// the first violation of each [`run`] property.
#[derive(Clone, Debug, Default)]
pub struct RunSpec {
    limits: RunLimits,
    /// The attempt of the last `CallModel`.
    current: Option<AttemptId>,
    /// The current attempt's stream was opened and has not ended.
    pub opened: bool,
    /// A `CallModel` awaits its stream (opened, failed).
    pub model_call_outstanding: bool,
    seqs: BTreeSet<u64>,
    /// Text deltas accepted in the current attempt.
    pub texts: u32,
    emitted: String,
    attempt_calls: Vec<String>,
    attempt_kinds: Vec<String>,
    compacted_since_call: bool,
    steers_since_request: usize,
    retries: BTreeMap<u32, u32>,
    calls: BTreeMap<String, CallRecord>,
    always_approved: BTreeSet<String>,
    asked: BTreeSet<String>,
    /// A `Compact` awaits its answer.
    pub compact_outstanding: bool,
    /// A `CommitRunEnd` awaits its acknowledgement.
    pub run_end_outstanding: bool,
    ends: u32,
    end_is_abort: bool,
    result: Option<(Outcome, String)>,
    /// The run-end entry the run asked to commit was acknowledged, or the store failed.
    end_durable: bool,
    /// The user aborted the run or its deadline passed.
    aborting: bool,
    events: EventLedger,
    /// The violations seen.
    pub violations: Violations,
}

/// Whether the current attempt's stream is open (the observer's view).
fn is_current(current: &Option<AttemptId>, attempt: &AttemptId) -> bool {
    current.as_ref() == Some(attempt)
}

impl RunSpec {
    /// An observer for a run with these limits.
    pub fn new(limits: RunLimits) -> Self {
        RunSpec {
            limits,
            ..RunSpec::default()
        }
    }

    /// The current attempt's model call index and attempt number.
    pub fn attempt(&self) -> Option<(u32, u32)> {
        self.current
            .as_ref()
            .map(|a| (a.model_call_index, a.attempt))
    }

    /// Committed calls in commit order with a summary of each (for fingerprints):
    /// (results, started, ran, approved, denied).
    pub fn call_summary(&self) -> Vec<(String, bool, u32, bool, bool, bool, bool)> {
        self.calls
            .values()
            .map(|c| {
                let (results, started, ran) = (c.results, c.started, c.ran);
                (
                    c.name.clone(),
                    c.malformed,
                    results,
                    started,
                    ran,
                    c.approved,
                    c.denied,
                )
            })
            .collect()
    }

    /// The tools (and whether their arguments are JSON: a `!` when not) the current
    /// attempt's tool calls name, in order (for fingerprints).
    pub fn attempt_kinds(&self) -> &[String] {
        &self.attempt_kinds
    }

    /// Tool calls sent in the current attempt.
    pub fn attempt_calls(&self) -> usize {
        self.attempt_calls.len()
    }

    /// Approvals asked and not yet answered.
    pub fn asked(&self) -> usize {
        self.asked.len()
    }

    /// End events seen.
    pub fn ends(&self) -> u32 {
        self.ends
    }

    /// The outcome, once the run ended.
    pub fn outcome(&self) -> Option<Outcome> {
        self.result.as_ref().map(|(o, _)| *o)
    }

    /// Observes one input and what the run did with it. `was_terminal`/`terminal`: whether
    /// the run had ended before/after; `result`: its result after.
    pub fn observe(
        &mut self,
        event: &Event,
        step: &Step,
        was_terminal: bool,
        terminal: bool,
        result: Option<&LoopResult>,
    ) {
        let effects = &step.effects;
        if was_terminal && (!step.unhandled || !effects.is_empty() || step.from != step.to) {
            self.violations.record(run::TERMINAL_ABSORBS, || {
                format!("after the end, {} was taken: {effects:?}", step.event)
            });
        }
        if step.unhandled && (!effects.is_empty() || step.from != step.to) {
            self.violations.record(run::UNHANDLED_IS_INERT, || {
                format!(
                    "unhandled {} changed {} -> {}",
                    step.event, step.from, step.to
                )
            });
        }
        if !was_terminal && step.unhandled {
            if let Some(what) = self.awaited(event) {
                self.violations.record(run::AWAITED_TAKEN, || {
                    format!("{what} was refused in {}", step.from)
                });
            }
        }
        self.observe_input(event, step.unhandled);
        for e in effects {
            self.observe_effect(event, e);
        }
        self.observe_end(terminal, result);
        let outcome = self.outcome();
        self.events
            .observe(event, step, outcome, &mut self.violations);
    }

    /// What `event` answers that the run's effects await, if anything.
    fn awaited(&self, event: &Event) -> Option<String> {
        let current = |a: &AttemptId| is_current(&self.current, a);
        match event {
            Event::StreamOpened { attempt } if current(attempt) && self.model_call_outstanding => {
                Some("the current request's stream opening".into())
            }
            Event::Delta { attempt, seq, .. }
                if current(attempt) && self.opened && !self.seqs.contains(seq) =>
            {
                Some("a fresh delta of the open stream".into())
            }
            Event::Done { attempt, .. } if current(attempt) && self.opened => {
                Some("the open stream's end".into())
            }
            Event::TransportError { attempt, .. }
            | Event::ContextOverflow { attempt, .. }
            | Event::StreamStalled { attempt, .. }
                if current(attempt) && (self.opened || self.model_call_outstanding) =>
            {
                Some(format!("the current request's failure ({})", event.name()))
            }
            Event::ToolFinished { tool_call_id, .. }
                if self
                    .calls
                    .get(tool_call_id)
                    .is_some_and(|c| c.ran && c.results == 0) =>
            {
                Some(format!("the result of running call {tool_call_id}"))
            }
            Event::Approval { tool_call_id, .. } if self.asked.contains(tool_call_id) => {
                Some(format!("the answer on {tool_call_id}"))
            }
            Event::CompactionDone { .. } | Event::CompactionFailed { .. }
                if self.compact_outstanding =>
            {
                Some("the compaction's answer".into())
            }
            Event::RunEndCommitted if self.run_end_outstanding => {
                Some("the run-end commit's acknowledgement".into())
            }
            Event::Start { .. } if self.current.is_none() && self.calls.is_empty() => {
                Some("the start".into())
            }
            _ => None,
        }
    }

    fn observe_input(&mut self, event: &Event, unhandled: bool) {
        match event {
            Event::StreamOpened { attempt } if is_current(&self.current, attempt) && !unhandled => {
                self.opened = true;
                self.model_call_outstanding = false;
            }
            Event::Delta {
                attempt,
                seq,
                delta,
            } => {
                let fresh =
                    self.opened && is_current(&self.current, attempt) && !self.seqs.contains(seq);
                if fresh && !unhandled {
                    self.seqs.insert(*seq);
                    match delta {
                        MessageDelta::TextDelta { .. } => self.texts += 1,
                        MessageDelta::ToolCall {
                            id,
                            name,
                            arguments,
                        } => {
                            self.attempt_calls.push(id.clone());
                            let json = arguments.trim().is_empty()
                                || serde_json::from_str::<serde_json::Value>(arguments).is_ok();
                            self.attempt_kinds
                                .push(format!("{name}{}", if json { "" } else { "!" }));
                        }
                        _ => {}
                    }
                }
            }
            Event::Done { attempt, .. }
            | Event::TransportError { attempt, .. }
            | Event::ContextOverflow { attempt, .. }
            | Event::StreamStalled { attempt, .. }
                if is_current(&self.current, attempt) && !unhandled =>
            {
                self.opened = false;
                self.model_call_outstanding = false;
            }
            Event::Approval {
                tool_call_id,
                decision,
            } if !unhandled => {
                // Only the answer to a question asked counts (a second answer is late).
                let asked = self.asked.remove(tool_call_id);
                if let Some(c) = self.calls.get_mut(tool_call_id).filter(|_| asked) {
                    match decision {
                        ApprovalDecision::Approved | ApprovalDecision::Modified { .. } => {
                            c.approved = true
                        }
                        ApprovalDecision::ApprovedAlways => {
                            c.approved = true;
                            self.always_approved.insert(c.name.clone());
                        }
                        _ => c.denied = true,
                    }
                }
            }
            Event::CompactionDone { .. } | Event::CompactionFailed { .. } => {
                self.compact_outstanding = false
            }
            Event::CompactionVetoed { .. } => self.compact_outstanding = false,
            Event::TimerElapsed { timer_id } if !unhandled && *timer_id == RUN_DEADLINE_TIMER => {
                self.aborting = true
            }
            Event::Abort { .. } if !unhandled => {
                self.aborting = true;
                // An abort cancels the work in flight (R-CTL-3): the stream, a compaction,
                // the questions asked; only running tools may still report.
                self.opened = false;
                self.model_call_outstanding = false;
                self.compact_outstanding = false;
                self.asked.clear();
            }
            Event::Steer { .. } if !unhandled => self.steers_since_request += 1,
            Event::RunEndCommitted if !unhandled => {
                self.end_durable |= self.run_end_outstanding;
                self.run_end_outstanding = false
            }
            Event::StoreWriteFailed { .. } if !unhandled => {
                // Nothing more can be stored: the run ends without its run-end entry.
                self.end_durable = true;
                self.run_end_outstanding = false
            }
            _ => {}
        }
    }

    fn observe_effect(&mut self, event: &Event, e: &Effect) {
        match e {
            Effect::CallModel { request } => {
                self.check_paired(|| format!("request {}", request.model_call_index));
                self.check_context(request.messages.iter());
                let id = AttemptId {
                    run_id: request.run_id.clone(),
                    model_call_index: request.model_call_index,
                    attempt: request.attempt,
                };
                let same_step = self
                    .current
                    .as_ref()
                    .is_some_and(|p| p.model_call_index == id.model_call_index);
                let len = request.messages.iter().count();
                // The last step's "answer now" reminder joins after the check (R-OUT-5).
                let last_step = request.model_call_index == self.limits.max_steps;
                let allowed = self
                    .limits
                    .compact_threshold
                    .map(|t| t + self.steers_since_request + usize::from(last_step));
                if !same_step && !self.compacted_since_call && allowed.is_some_and(|t| len > t) {
                    self.violations.record(run::CONTEXT_WITHIN_THRESHOLD, || {
                        format!(
                            "request {} carries {len} messages",
                            request.model_call_index
                        )
                    });
                }
                if same_step && self.compacted_since_call {
                    // Re-requested with a compacted context: the retry budget starts again
                    // (compaction itself cannot loop: it fails when it cannot shrink, R-OUT-6).
                    self.retries.remove(&id.model_call_index);
                } else if same_step {
                    let r = self.retries.entry(id.model_call_index).or_default();
                    *r += 1;
                    let retries = *r;
                    if retries > self.limits.max_retries {
                        self.violations.record(run::MODEL_CALLS_BOUNDED, || {
                            format!("retry {retries} of step {}", id.model_call_index)
                        });
                    }
                }
                if id.model_call_index > self.limits.max_steps {
                    self.violations.record(run::MODEL_CALLS_BOUNDED, || {
                        format!("step {} past max_steps", id.model_call_index)
                    });
                }
                if id.model_call_index == self.limits.max_steps && !request.tools.is_empty() {
                    self.violations.record(run::MODEL_CALLS_BOUNDED, || {
                        format!("the last step {} offers tools", id.model_call_index)
                    });
                }
                self.current = Some(id);
                self.model_call_outstanding = true;
                self.opened = false;
                self.seqs.clear();
                self.texts = 0;
                self.emitted.clear();
                self.attempt_calls.clear();
                self.attempt_kinds.clear();
                self.compacted_since_call = false;
                self.steers_since_request = 0;
            }
            Effect::Compact { .. } => {
                self.compacted_since_call = true;
                self.compact_outstanding = true;
            }
            Effect::CommitRunEnd { .. } => {
                // The end is decided: only its commit is awaited now.
                self.run_end_outstanding = true;
                self.opened = false;
                self.model_call_outstanding = false;
                self.compact_outstanding = false;
                self.asked.clear();
            }
            Effect::CancelModel { attempt } if is_current(&self.current, attempt) => {
                self.opened = false;
                self.model_call_outstanding = false;
            }
            Effect::RequestApproval { call } => {
                self.asked.insert(call.id.clone());
            }
            Effect::WithdrawApproval { tool_call_id } => {
                self.asked.remove(tool_call_id);
            }
            Effect::Emit {
                event:
                    AgentEvent::TextDelta {
                        model_call_index,
                        attempt,
                        text,
                    },
            } => {
                let ok = self.attempt() == Some((*model_call_index, *attempt))
                    && matches!(event, Event::Delta { attempt: a, delta: MessageDelta::TextDelta { .. }, .. } if is_current(&self.current, a));
                if !ok {
                    let detail = format!(
                        "text of attempt {model_call_index}.{attempt} emitted on {} while the current attempt is {:?}",
                        event.name(),
                        self.attempt()
                    );
                    self.violations
                        .record(run::NOTHING_FROM_FAILED_ATTEMPT, || detail);
                }
                self.emitted.push_str(text);
            }
            Effect::Persist {
                entry:
                    Entry::Assistant {
                        model_call_index,
                        message,
                        ..
                    },
            } => {
                let subtask = message.text.is_empty()
                    && message
                        .tool_calls
                        .iter()
                        .all(|c| c.id.starts_with("subtask-"))
                    && !message.tool_calls.is_empty();
                if !subtask {
                    let on_current_done = matches!(event, Event::Done { attempt, .. } if is_current(&self.current, attempt) && attempt.model_call_index == *model_call_index);
                    let ids: Vec<String> =
                        message.tool_calls.iter().map(|c| c.id.clone()).collect();
                    if !on_current_done || message.text != self.emitted || ids != self.attempt_calls
                    {
                        let detail = format!(
                            "committed {:?} with calls {ids:?} on {} (current attempt {:?}, emitted {:?}, calls {:?})",
                            message.text,
                            event.name(),
                            self.attempt(),
                            self.emitted,
                            self.attempt_calls
                        );
                        self.violations
                            .record(run::NOTHING_FROM_FAILED_ATTEMPT, || detail);
                    }
                }
                for c in &message.tool_calls {
                    let record = CallRecord {
                        name: c.name.clone(),
                        malformed: c.invalid_arguments.is_some(),
                        ..CallRecord::default()
                    };
                    if self.calls.insert(c.id.clone(), record).is_some() {
                        let id = c.id.clone();
                        self.violations.record(run::NO_DOUBLE_EXECUTION, || {
                            format!("call {id} committed twice")
                        });
                    }
                }
            }
            Effect::Persist {
                entry: Entry::ToolStarted { tool_call_id, .. },
            } => match self.calls.get_mut(tool_call_id) {
                Some(c) if c.results == 0 && !c.started => c.started = true,
                _ => self.violations.record(run::NO_DOUBLE_EXECUTION, || {
                    format!(
                        "start of {tool_call_id}, not a committed call awaiting its first start"
                    )
                }),
            },
            Effect::RunTool { call } => self.observe_run_tool(&call.id, &call.name),
            Effect::Persist {
                entry: Entry::ToolResult { result, .. },
            } => match self.calls.get_mut(&result.tool_call_id) {
                Some(c) => {
                    if result.status == ToolStatus::Aborted && !self.aborting {
                        let id = result.tool_call_id.clone();
                        self.violations.record(run::ABORTED_ONLY_BY_ABORT, || {
                            format!("{id} aborted on {} without an abort", event.name())
                        });
                    }
                    self.asked.remove(&result.tool_call_id);
                    c.results += 1;
                    if c.results > 1 {
                        let id = result.tool_call_id.clone();
                        self.violations.record(run::PAIRED_BEFORE_REQUEST, || {
                            format!("a second result for {id}")
                        });
                    }
                }
                None => {
                    let id = result.tool_call_id.clone();
                    self.violations.record(run::PAIRED_BEFORE_REQUEST, || {
                        format!("a result for {id}, which no committed message called")
                    });
                }
            },
            Effect::Emit {
                event:
                    e @ (AgentEvent::RunEnd { .. }
                    | AgentEvent::RunError { .. }
                    | AgentEvent::AgentAbort { .. }),
            } => {
                self.ends += 1;
                self.end_is_abort = matches!(e, AgentEvent::AgentAbort { .. });
                if self.ends > 1 {
                    let name = e.type_name();
                    self.violations.record(run::ONE_OUTCOME, || {
                        format!("a second end event ({name}) on {}", event.name())
                    });
                }
            }
            _ => {}
        }
    }

    fn observe_run_tool(&mut self, id: &str, name: &str) {
        let always = self.always_approved.contains(name);
        let limits = &self.limits;
        let Some(c) = self.calls.get_mut(id) else {
            self.violations.record(run::DENIED_NEVER_RUNS, || {
                format!("ran {id}, which no committed message called")
            });
            return;
        };
        if c.ran {
            self.violations
                .record(run::NO_DOUBLE_EXECUTION, || format!("{id} ran twice"));
        }
        c.ran = true;
        let why = if c.results > 0 {
            Some("it already has a result")
        } else if !c.started {
            Some("its start was not persisted first")
        } else if c.malformed {
            Some("its arguments are not JSON")
        } else if !limits.tools.contains(&c.name) {
            Some("the tool is not offered")
        } else if c.denied {
            Some("a human rejected it")
        } else if limits.approval.contains(&c.name) && !c.approved && !always {
            Some("it needs approval and nobody approved it")
        } else {
            None
        };
        if let Some(why) = why {
            self.violations.record(run::DENIED_NEVER_RUNS, || {
                format!("ran {id} ({}) though {why}", c.name)
            });
        }
    }

    fn observe_end(&mut self, terminal: bool, result: Option<&LoopResult>) {
        let now = result.map(|r| (r.outcome, r.reason.clone()));
        match (&self.result, &now) {
            (None, None) if terminal => self
                .violations
                .record(run::ONE_OUTCOME, || "ended without a result".into()),
            (None, Some(_)) if !terminal => self
                .violations
                .record(run::ONE_OUTCOME, || "a result before the end".into()),
            (None, Some((outcome, reason))) => {
                if *outcome == Outcome::Aborted && !self.aborting {
                    let reason = reason.clone();
                    self.violations.record(run::ABORTED_ONLY_BY_ABORT, || {
                        format!("the run ended aborted ({reason}) without an abort")
                    });
                }
                if !self.end_durable {
                    let reason = reason.clone();
                    self.violations.record(run::END_COMMITTED, || {
                        format!("ended ({reason}) before its run-end entry was committed")
                    });
                }
                if self.ends != 1 {
                    let ends = self.ends;
                    self.violations.record(run::ONE_OUTCOME, || {
                        format!("ended ({outcome} {reason}) with {ends} end events")
                    });
                }
                // An abort announced while immune tools drained stays the end event when the
                // store then fails: the result says why the run stopped.
                let abort_then_store = self.end_is_abort && reason == "store_write_failed";
                if self.end_is_abort != (*outcome == Outcome::Aborted) && !abort_then_store {
                    self.violations.record(run::ONE_OUTCOME, || {
                        format!("the end event disagrees with the outcome {outcome}")
                    });
                }
                if *reason != "store_write_failed" {
                    let open: Vec<&String> = self
                        .calls
                        .iter()
                        .filter(|(_, c)| c.results == 0)
                        .map(|(id, _)| id)
                        .collect();
                    if !open.is_empty() {
                        let open = format!("{open:?}");
                        self.violations.record(run::PAIRED_BEFORE_REQUEST, || {
                            format!("ended ({reason}) with calls lacking results: {open}")
                        });
                    }
                }
                self.result = now;
            }
            (Some(old), now) if now.as_ref() != Some(old) => {
                self.violations.record(run::ONE_OUTCOME, || {
                    format!("the result changed: {old:?} -> {now:?}")
                })
            }
            _ => {}
        }
    }

    fn check_paired(&mut self, at: impl FnOnce() -> String) {
        let open: Vec<String> = self
            .calls
            .iter()
            .filter(|(_, c)| c.results != 1)
            .map(|(id, _)| id.clone())
            .collect();
        if !open.is_empty() {
            self.violations.record(run::PAIRED_BEFORE_REQUEST, || {
                format!("{}: calls without exactly one result: {open:?}", at())
            });
        }
    }

    fn check_context<'a>(&mut self, messages: impl Iterator<Item = &'a Message>) {
        if let Err(why) = context_paired(messages) {
            self.violations.record(run::CONTEXT_PAIRED, || why);
        }
    }
}

/// Whether a model context pairs every assistant tool call with exactly one result that
/// follows it before the next assistant message, and has no result without its call.
pub fn context_paired<'a>(messages: impl Iterator<Item = &'a Message>) -> Result<(), String> {
    let mut open: Vec<&str> = Vec::new();
    let mut answered: BTreeSet<&str> = BTreeSet::new();
    for m in messages {
        match m {
            Message::Assistant(a) => {
                if !open.is_empty() {
                    return Err(format!("calls {open:?} have no result in the context"));
                }
                open = a.tool_calls.iter().map(|c| c.id.as_str()).collect();
            }
            Message::Tool(t) => {
                let id = t.tool_call_id.as_str();
                if !open.contains(&id) || !answered.insert(id) {
                    return Err(format!("result {id} without its call in the context"));
                }
                open.retain(|c| *c != id);
            }
            _ => {}
        }
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(format!("calls {open:?} have no result in the context"))
    }
}

/// The session observer: fed every (input, effects) pair, it keeps what the effects said and
/// records the first violation of each [`session`] property.
#[derive(Clone, Debug, Default)]
pub struct SessionSpec {
    capacity: usize,
    /// A run is in progress (started and not yet ended).
    pub running: bool,
    /// Prompts queued and neither started nor dropped.
    pub queued: usize,
    /// Steering forwarded into the running run.
    pub steering: usize,
    /// The session was closed.
    pub closed: bool,
    /// The violations seen.
    pub violations: Violations,
}

/// The kind of session input the observer judges (the session model's alphabet, described).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionCommand {
    /// `prompt`, the hook allowing it.
    Prompt,
    /// `prompt`, the hook rejecting it.
    PromptRejected,
    /// `steer`.
    Steer,
    /// `abort`; `true`: clear the queue.
    Abort(bool),
    /// The run ended; `true`: it handed back steering.
    RunEnded(bool),
    /// `switch_model`.
    SwitchModel,
    /// Another command without a run-level effect (tools changed, approval answered).
    Other,
    /// Every handle is gone.
    Close,
}

impl SessionSpec {
    /// An observer for a session with this steering capacity.
    pub fn new(capacity: usize) -> Self {
        SessionSpec {
            capacity,
            ..SessionSpec::default()
        }
    }

    /// Observes one input and its effects.
    // Each arm's guard picks the situation and the `if` inside is the verdict: folded into
    // the guard, a passing case would fall through to the next arm.
    #[allow(clippy::collapsible_match)]
    pub fn observe(&mut self, command: SessionCommand, effects: &[SessionEffect]) {
        let was_running = self.running;
        let queued_before = self.queued;
        let replies = effects
            .iter()
            .filter(|e| matches!(e, SessionEffect::Reply(_)))
            .count();
        let commands_reply = !matches!(
            command,
            SessionCommand::RunEnded(_) | SessionCommand::Other | SessionCommand::Close
        );
        if !self.closed && commands_reply && replies != 1 {
            self.violations.record(session::ONE_REPLY, || {
                format!("{command:?} got {replies} replies: {effects:?}")
            });
        }
        if matches!(command, SessionCommand::RunEnded(_)) && was_running {
            self.running = false;
            self.steering = 0;
        }
        let mut started = 0;
        let mut dropped_events = 0;
        for e in effects {
            match e {
                SessionEffect::StartRun { input, .. } => {
                    started += 1;
                    if self.running {
                        self.violations.record(session::ONE_RUN_AT_A_TIME, || {
                            format!("{command:?} started a run while one was running")
                        });
                    }
                    self.running = true;
                    self.steering = 0;
                    if *input == RunInput::Queued {
                        if self.queued == 0 {
                            self.violations.record(session::NO_LOST_PROMPT, || {
                                format!("{command:?} started a queued prompt from an empty queue")
                            });
                        }
                        self.queued = self.queued.saturating_sub(1);
                    }
                }
                SessionEffect::QueuePrompt => self.queued += 1,
                SessionEffect::DropQueued => {
                    if dropped_events != queued_before {
                        self.violations.record(session::NO_LOST_PROMPT, || {
                            format!(
                                "{queued_before} queued prompts dropped with {dropped_events} prompt_dropped events"
                            )
                        });
                    }
                    self.queued = 0;
                }
                SessionEffect::Publish(AgentEvent::PromptDropped { .. }) => dropped_events += 1,
                SessionEffect::Forward(agentloop_core::session_machine::Forward::Steer(_)) => {
                    self.steering += 1;
                    if self.steering > self.capacity {
                        let capacity = self.capacity;
                        self.violations.record(session::STEERING_BOUNDED, || {
                            format!(
                                "steering {} forwarded past capacity {capacity}",
                                self.steering
                            )
                        });
                    }
                }
                SessionEffect::Idle => {
                    if self.running || self.queued > 0 {
                        self.violations.record(session::NO_LOST_PROMPT, || {
                            format!(
                                "idle with a run {} and {} queued",
                                self.running, self.queued
                            )
                        });
                    }
                }
                _ => {}
            }
        }
        let reply = effects.iter().find_map(|e| match e {
            SessionEffect::Reply(r) => Some(r.clone()),
            _ => None,
        });
        match command {
            SessionCommand::Prompt | SessionCommand::Steer if !self.closed && !was_running => {
                if started != 1 {
                    self.violations
                        .record(session::IDLE_STARTS_BUSY_QUEUES, || {
                            format!("{command:?} while idle started {started} runs: {effects:?}")
                        });
                }
            }
            SessionCommand::Prompt if !self.closed => {
                let ok = matches!(reply, Some(SessionReply::PromptQueued(n)) if n == self.queued)
                    && self.queued == queued_before + 1
                    && started == 0;
                if !ok {
                    self.violations
                        .record(session::IDLE_STARTS_BUSY_QUEUES, || {
                            format!("a prompt while busy: {effects:?}")
                        });
                }
            }
            SessionCommand::Steer if !self.closed => {
                if queued_before != self.queued || started != 0 {
                    self.violations
                        .record(session::IDLE_STARTS_BUSY_QUEUES, || {
                            format!("a steer while busy: {effects:?}")
                        });
                }
                let full = matches!(reply, Some(SessionReply::QueueFull { .. }));
                let forwarded = matches!(reply, Some(SessionReply::SteerQueued(_)));
                if full == forwarded || (full && was_running && self.steering < self.capacity) {
                    self.violations.record(session::STEERING_BOUNDED, || {
                        format!(
                            "a steer while busy with {} of {} queued: {effects:?}",
                            self.steering, self.capacity
                        )
                    });
                }
            }
            SessionCommand::PromptRejected if started > 0 || self.queued != queued_before => {
                self.violations
                    .record(session::IDLE_STARTS_BUSY_QUEUES, || {
                        format!("a rejected prompt started or queued: {effects:?}")
                    });
            }
            SessionCommand::Abort(clear) if !self.closed => {
                let published = effects
                    .iter()
                    .any(|e| matches!(e, SessionEffect::Publish(AgentEvent::AgentAbort { .. })));
                let forwarded = effects.iter().any(|e| {
                    matches!(
                        e,
                        SessionEffect::Forward(
                            agentloop_core::session_machine::Forward::Abort { .. }
                        )
                    )
                });
                if !(published || forwarded) || started > 0 || (!was_running && !published) {
                    self.violations.record(session::ABORT_HEARD, || {
                        format!("an abort (running {was_running}): {effects:?}")
                    });
                }
                if clear && self.queued != 0 {
                    self.violations.record(session::NO_LOST_PROMPT, || {
                        format!("abort with clear_queue left {} queued", self.queued)
                    });
                }
            }
            SessionCommand::RunEnded(leftover) if was_running && !self.closed => {
                let next = queued_before > 0 || leftover;
                if next != (started == 1) {
                    self.violations.record(session::NO_LOST_PROMPT, || {
                        format!(
                            "the run ended with {queued_before} queued (leftover {leftover}) and {started} runs started"
                        )
                    });
                }
            }
            SessionCommand::Close => self.closed = true,
            _ => {}
        }
    }
}
