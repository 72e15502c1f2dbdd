//! The inner machine's data and the pure helpers its handlers use to request effects (the
//! tool calls' in `process/calls.rs`, on the [`Calls`](crate::process::calls::Calls) view).

use std::collections::BTreeSet;

use crate::agent_event::AgentEvent;
use crate::chart::ProcessRow;
use crate::effect::Effect;
use crate::entry::Entry;
use crate::error::{ErrorKind, ModelError};
use crate::inline_tags::{InlinePiece, TagKind};
use crate::message::MessageDelta;
use crate::model::ModelRequest;
use crate::outbox::Outbox;
use crate::process::config::StepConfig;
use crate::process::context::{Attempt, Ending, ToolCalls};
use crate::process::deadlines::AttemptTimer;
use crate::tool_check::ArgumentsRejected;

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
pub(crate) struct ProcessData {
    pub(crate) cfg: StepConfig,
    /// The model attempt in flight and the step's attempts so far.
    pub(crate) attempt: Attempt,
    /// The committed message's calls, the "always" scopes, the run's earlier calls, the
    /// session's tool cache and the call the current input answers.
    pub(crate) tools: ToolCalls,
    /// The committed message, the outcome, a stop request, the typed-answer verdict.
    pub(crate) ending: Ending,
    /// What the current handle produced (drained by the facade).
    pub(crate) outbox: Outbox<ProcessRow>,
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

    /// Commits the accumulated message (R-STR-4) and, when it has tool calls, feeds each its
    /// `Commit` event (the tool-call chart picks its row). `rejected` holds the runtime's
    /// schema verdicts on the calls (R-TOOL-1, from `done`); doom-loop detection runs here, in
    /// call order, and announces each looped call before its row is chosen.
    pub(crate) fn commit(&mut self, rejected: &[ArgumentsRejected]) {
        self.end_attempt();
        // The text ends: what the inline-tag filter still held back is text after all.
        let rest = self.attempt.acc.end_text();
        if !rest.is_empty() {
            self.emit_text(vec![InlinePiece::Text(rest)]);
        }
        let message = self.attempt.acc.message();
        self.outbox.persist(Entry::Assistant {
            run_id: self.attempt.request.run_id.clone(),
            model_call_index: self.attempt.request.model_call_index,
            message: message.clone(),
        });
        self.outbox.emit(AgentEvent::ResponseComplete {
            model_call_index: self.attempt.request.model_call_index,
            usage: message.usage,
            tool_calls: message.tool_calls.len(),
            message: Box::new(message.clone()),
        });
        if !message.tool_calls.is_empty() {
            self.outbox.emit(AgentEvent::ToolCalls {
                count: message.tool_calls.len(),
            });
        }
        for (provided, derived) in self.attempt.acc.derived_ids().to_vec() {
            self.outbox.emit(AgentEvent::ToolCallIdDerived {
                provided,
                tool_call_id: derived,
            });
        }
        let local_ids = self.attempt.acc.message_local_ids();
        self.calls().commit(message, &local_ids, rejected);
    }

    /// An attempt deadline passed: the stream is cancelled; a first-chunk or stall deadline is
    /// announced as a stall. Returns the retry reason and the error if the step cannot retry.
    pub(crate) fn deadline_passed(&mut self, timer_id: u64) -> (String, ModelError) {
        let mut error = self.deadline_error(timer_id);
        let why = error.message.clone();
        let note = self.not_retried_note();
        let kind = self.attempt.timers.get(timer_id);
        self.attempt.timers.fired(timer_id);
        self.end_attempt();
        match kind {
            Some((AttemptTimer::FirstChunk | AttemptTimer::Stall, ms)) => {
                self.stalled(ms);
                error.message = format!("{why}; {note}");
            }
            _ => self.cancel_model(),
        }
        (why, error)
    }

    /// The `timeout` error an attempt deadline that passed stands for, as the retry decider
    /// sees it (pure: the guards ask before the handler runs).
    pub(crate) fn deadline_error(&self, timer_id: u64) -> ModelError {
        let why = match self.attempt.timers.get(timer_id) {
            Some((AttemptTimer::FirstChunk | AttemptTimer::Stall, ms)) => {
                format!("stream stalled for {ms} ms")
            }
            Some((AttemptTimer::Request, ms)) => format!("request exceeded {ms} ms"),
            None => "request exceeded 0 ms".into(),
        };
        ModelError::new(ErrorKind::Timeout, why)
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
        self.attempt.timers.clear(&mut self.outbox);
        self.attempt.open = false;
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

    pub(crate) fn cancel_model(&mut self) {
        let attempt = self.attempt.id();
        self.attempt.open = false;
        self.outbox.push(Effect::CancelModel { attempt });
    }

    pub(crate) fn fail(&mut self, error: ModelError) {
        self.end_attempt();
        self.outbox.emit(AgentEvent::StreamError {
            error: error.clone(),
        });
        self.ending.end(StepOutcome::Failed(error));
    }

    pub(crate) fn stalled(&mut self, after_ms: u64) {
        self.cancel_model();
        self.outbox.emit(AgentEvent::StreamStalled {
            model_call_index: self.attempt.request.model_call_index,
            attempt: self.attempt.request.attempt,
            after_ms,
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
                .disarm(AttemptTimer::FirstChunk, &mut self.outbox);
            if let Some(d) = self.cfg.stream {
                let stall = AttemptTimer::Stall;
                let id = stall.id(self.attempt.timer_id());
                self.attempt
                    .timers
                    .arm(stall, id, d.stall_ms, &mut self.outbox);
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
            MessageDelta::ReasoningStart if self.cfg.detailed_events => {
                Some(AgentEvent::ReasoningStart {
                    model_call_index: idx,
                    attempt,
                })
            }
            MessageDelta::ReasoningEnd if self.cfg.detailed_events => {
                Some(AgentEvent::ReasoningEnd {
                    model_call_index: idx,
                    attempt,
                })
            }
            MessageDelta::ToolInputEnd { id } if self.cfg.detailed_events => {
                Some(AgentEvent::ToolInputEnd {
                    tool_call_id: id.clone(),
                })
            }
            _ => None,
        };
        if let Some(event) = event {
            self.outbox.emit(event);
        }
    }

    /// Emits what observers see of the text: visible text as `text_delta`, closed inline tags
    /// as `status_update` / `title_generated` / `plan_generated`, in stream order.
    pub(crate) fn emit_text(&mut self, observed: Vec<InlinePiece>) {
        let (model_call_index, attempt) = (
            self.attempt.request.model_call_index,
            self.attempt.request.attempt,
        );
        for piece in observed {
            self.outbox.emit(match piece {
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
}
