//! The inner process machine as a blocking `statig` machine (crate-private; see
//! [`crate::process::Process`] for the facade). Handlers are pure: they read the event and
//! the data, record the chart row they take, and push effects to the data's outbox.

use statig::blocking::*;

use crate::chart::ProcessRow as Row;
use crate::event::{ApprovalDecision, Event, GateVerdict};
use crate::message::{AssistantMessage, ToolResult};
use crate::process::data::{ProcessData, StepOutcome};

/// What the facade feeds the machine: an external event, or one of its own internal events.
#[derive(Debug)]
pub(crate) enum Input<'a> {
    /// Start the step.
    Begin,
    /// Resume a committed message's unanswered tool calls.
    Resume(&'a AssistantMessage, &'a [ToolResult]),
    /// An event from outside.
    Ext(&'a Event),
    /// Decide what comes next after landing in RunningTools.
    Settle,
}

/// The statig machine; all data lives in the context ([`ProcessData`]).
#[derive(Debug, Default)]
pub(crate) struct ProcessMachine;

#[state_machine(
    initial = "State::idle()",
    state(derive(Debug, Clone, PartialEq, Eq)),
    superstate(derive(Debug))
)]
impl ProcessMachine {
    /// Root: every event no state accepted ends here and is reported as unhandled.
    #[superstate]
    fn root(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        let _ = event;
        context.unhandled = true;
        Handled
    }

    /// Idle: Begin → Calling, Resume → RunningTools.
    #[state(superstate = "root")]
    fn idle(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        match event {
            Input::Begin => {
                context.take(Row::IdleBegin);
                context.call_model();
                Transition(State::calling())
            }
            Input::Resume(message, results) => {
                context.take(Row::IdleResume);
                context.resume((*message).clone(), results.to_vec());
                context.start_queued();
                Transition(State::running_tools())
            }
            _ => Super,
        }
    }

    /// Live: Abort → Error; stale stream events are ignored.
    #[superstate(superstate = "root")]
    fn live(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        let Input::Ext(ev) = event else { return Super };
        match ev {
            Event::Abort { .. } => {
                context.take(Row::LiveAbort);
                let in_request = context.state.in_requesting();
                let in_retry = context.state == crate::chart::ProcessState::Retrying;
                context.abort(in_request, in_retry);
                Transition(State::error())
            }
            e if context.is_stale(e) => {
                let row = match e {
                    Event::StreamOpened { .. } => Row::LiveStaleStreamOpened,
                    Event::RequestRewritten { .. } => Row::LiveStaleRequestRewritten,
                    Event::Delta { .. } => Row::LiveStaleDelta,
                    Event::Done { .. } => Row::LiveStaleDone,
                    Event::TransportError { .. } => Row::LiveStaleTransportError,
                    Event::ContextOverflow { .. } => Row::LiveStaleContextOverflow,
                    _ => Row::LiveStaleStreamStalled,
                };
                context.take(row);
                Handled
            }
            _ => Super,
        }
    }

    /// Requesting: TransportError → Retrying | Error, ContextOverflow → Error,
    /// StreamStalled → Retrying | Error, RequestRewritten → Requesting (internal).
    #[superstate(superstate = "live")]
    fn requesting(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        let Input::Ext(ev) = event else { return Super };
        match ev {
            Event::TransportError { attempt, error } if context.is_current(attempt) => {
                if context.may_retry(error) {
                    context.take(Row::RequestingRetry);
                    context.retrying_after(error);
                    context.schedule_retry(error.to_string(), error.retry_after_ms);
                    Transition(State::retrying())
                } else {
                    context.take(Row::RequestingFail);
                    let error = context.unretried(error);
                    context.fail(error);
                    Transition(State::error())
                }
            }
            Event::RequestRewritten { attempt, request } if context.is_current(attempt) => {
                context.take(Row::RequestingRewritten);
                context.sent = Some(request.clone());
                Handled
            }
            Event::ContextOverflow { attempt, error } if context.is_current(attempt) => {
                context.take(Row::RequestingOverflow);
                context.overflow(error.clone());
                Transition(State::error())
            }
            Event::TimerElapsed { timer_id } if context.attempt_deadline(*timer_id).is_some() => {
                let retry = context.may_retry(&context.deadline_error(*timer_id));
                let (reason, error) = context.deadline_passed(*timer_id);
                if retry {
                    context.take(Row::RequestingDeadlineRetry);
                    context.schedule_retry(reason, None);
                    Transition(State::retrying())
                } else {
                    context.take(Row::RequestingDeadlineFail);
                    context.fail(error);
                    Transition(State::error())
                }
            }
            Event::StreamStalled { attempt, after_ms } if context.is_current(attempt) => {
                context.stalled(*after_ms);
                if context.may_retry(&ProcessData::stall_error(*after_ms)) {
                    context.take(Row::RequestingStallRetry);
                    context.schedule_retry(format!("stream stalled for {after_ms} ms"), None);
                    Transition(State::retrying())
                } else {
                    context.take(Row::RequestingStallFail);
                    let note = context.not_retried_note();
                    context.fail(crate::error::ModelError::new(
                        crate::error::ErrorKind::Timeout,
                        format!("stream stalled for {after_ms} ms; {note}"),
                    ));
                    Transition(State::error())
                }
            }
            _ => Super,
        }
    }

    /// Calling: StreamOpened → Streaming.
    #[state(superstate = "requesting")]
    fn calling(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        match event {
            Input::Ext(Event::StreamOpened { attempt }) if context.is_current(attempt) => {
                context.take(Row::CallingOpened);
                context.opened();
                Transition(State::streaming())
            }
            _ => Super,
        }
    }

    /// Streaming: Delta → Streaming (new seq), Done → RunningTools | Success.
    #[state(superstate = "requesting")]
    fn streaming(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        match event {
            Input::Ext(e @ Event::Delta { seq, delta, .. }) if !context.is_stale(e) => {
                context.take(Row::StreamingDelta);
                context.delta(*seq, delta);
                Handled
            }
            Input::Ext(Event::TimerElapsed { timer_id }) if context.stream_moved(*timer_id) => {
                context.take(Row::StreamingWatch);
                context.rewatch(*timer_id);
                Handled
            }
            Input::Ext(
                e @ Event::Done {
                    rejected_arguments,
                    output_rejected,
                    ..
                },
            ) if !context.is_stale(e) => {
                context.output_rejected = output_rejected.clone();
                if context.has_tool_calls() {
                    context.take(Row::StreamingDoneTools);
                    context.commit(rejected_arguments);
                    Transition(State::running_tools())
                } else {
                    context.take(Row::StreamingDone);
                    context.commit(rejected_arguments);
                    context.outcome = Some(StepOutcome::Success);
                    Transition(State::success())
                }
            }
            _ => Super,
        }
    }

    /// Retrying: TimerElapsed → Calling (same step, next attempt).
    #[state(superstate = "live")]
    fn retrying(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        match event {
            Input::Ext(Event::TimerElapsed { timer_id }) => {
                if *timer_id == context.timer_id() {
                    context.take(Row::RetryingTimer);
                    context.retried();
                    Transition(State::calling())
                } else {
                    context.take(Row::RetryingTimerStale);
                    Handled
                }
            }
            _ => Super,
        }
    }

    /// ToolExecuting: ToolFinished → record the result (or ignore a stale one); ToolGated →
    /// run, block or send to approval the call the hooks were asked about (or ignore);
    /// Abort → Draining when tools keep running; Steer (skip_remaining) → RunningTools.
    #[superstate(superstate = "live")]
    fn tool_executing(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        let draining = context.state == crate::chart::ProcessState::Draining;
        match event {
            Input::Ext(Event::Abort { kill, .. }) if !draining && context.would_drain(*kill) => {
                context.take(Row::ToolsAbortDrain);
                context.abort_draining(*kill);
                Transition(State::draining())
            }
            Input::Ext(Event::Steer { .. }) if !draining => {
                context.take(Row::ToolsSteerSkip);
                context.skip_for_steering();
                Transition(State::running_tools())
            }
            Input::Ext(Event::TimerElapsed { timer_id }) => match context.deadline_of(*timer_id) {
                Some(i) => {
                    context.take(Row::ToolsDeadline);
                    context.tool_deadline(i);
                    Handled
                }
                None => Super,
            },
            Input::Ext(Event::ToolFinished {
                tool_call_id,
                status,
                content,
            }) => {
                match context.running(tool_call_id) {
                    Some(i) => {
                        context.take(Row::ToolsFinished);
                        context.tool_finished(i, *status, content.clone());
                    }
                    None => context.take(Row::ToolsFinishedStale),
                }
                Handled
            }
            Input::Ext(Event::UserAnswered {
                tool_call_id,
                answer,
            }) => {
                match context.asked_user(tool_call_id) {
                    Some(i) => {
                        context.take(Row::ToolsUserAnswered);
                        context.user_answered(i, answer.as_deref());
                    }
                    None => context.take(Row::ToolsUserAnsweredStale),
                }
                Handled
            }
            Input::Ext(Event::ToolGated {
                tool_call_id,
                verdict,
            }) => {
                let (current, stale) = match verdict {
                    GateVerdict::Allow => (Row::ToolsGateAllowed, Row::ToolsGateAllowedStale),
                    GateVerdict::Modify { .. } => {
                        (Row::ToolsGateModified, Row::ToolsGateModifiedStale)
                    }
                    GateVerdict::Block { .. } => {
                        (Row::ToolsGateBlocked, Row::ToolsGateBlockedStale)
                    }
                    GateVerdict::Ask => (Row::ToolsGateAsked, Row::ToolsGateAskedStale),
                };
                match context.gating(tool_call_id) {
                    Some(i) => {
                        context.take(current);
                        context.gated(i, verdict);
                    }
                    None => context.take(stale),
                }
                Handled
            }
            _ => Super,
        }
    }

    /// RunningTools: Settle → AwaitingApproval | Success | RunningTools.
    #[state(superstate = "tool_executing")]
    fn running_tools(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        match event {
            Input::Settle => {
                if context.approval_needed() {
                    context.take(Row::RunningSettleApproval);
                    context.ask_approval();
                    Transition(State::awaiting_approval())
                } else if context.all_results() {
                    context.take(Row::RunningSettleDone);
                    context.outcome = Some(StepOutcome::Success);
                    Transition(State::success())
                } else {
                    context.take(Row::RunningSettleWait);
                    context.start_queued();
                    Handled
                }
            }
            _ => Super,
        }
    }

    /// AwaitingApproval: Approved | ApprovedAlways | Modified | Rejected | TimedOut →
    /// RunningTools; a rejection or timeout also asks the run to stop unless auto_resume.
    #[state(superstate = "tool_executing")]
    fn awaiting_approval(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        let Input::Ext(Event::Approval {
            tool_call_id,
            decision,
        }) = event
        else {
            return Super;
        };
        let Some(i) = context.asking(tool_call_id) else {
            context.take(match decision {
                ApprovalDecision::Approved => Row::AwaitingApprovedStale,
                ApprovalDecision::ApprovedAlways => Row::AwaitingApprovedAlwaysStale,
                ApprovalDecision::Rejected { .. } => Row::AwaitingRejectedStale,
                ApprovalDecision::Modified { .. } => Row::AwaitingModifiedStale,
                ApprovalDecision::TimedOut { .. } => Row::AwaitingTimedOutStale,
            });
            return Handled;
        };
        match decision {
            ApprovalDecision::Approved => {
                context.take(Row::AwaitingApproved);
                context.approved(i, decision, false);
            }
            ApprovalDecision::ApprovedAlways => {
                context.take(Row::AwaitingApprovedAlways);
                context.approved(i, decision, true);
            }
            ApprovalDecision::Rejected { .. } | ApprovalDecision::TimedOut { .. } => {
                let timed_out = matches!(decision, ApprovalDecision::TimedOut { .. });
                context.take(match (timed_out, context.auto_resume()) {
                    (false, true) => Row::AwaitingRejected,
                    (false, false) => Row::AwaitingRejectedStop,
                    (true, true) => Row::AwaitingTimedOut,
                    (true, false) => Row::AwaitingTimedOutStop,
                });
                context.rejected(i, decision);
            }
            ApprovalDecision::Modified { .. } => {
                context.take(Row::AwaitingModified);
                context.modified(i, decision);
            }
        }
        Transition(State::running_tools())
    }

    /// Draining: Settle → Error once the immune tools finished.
    #[state(superstate = "tool_executing")]
    fn draining(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        match event {
            Input::Settle if context.all_results() => {
                context.take(Row::DrainingSettleDone);
                Transition(State::error())
            }
            Input::Settle => {
                context.take(Row::DrainingSettleWait);
                Handled
            }
            _ => Super,
        }
    }

    /// Success: terminal, absorbs every event (reported unhandled).
    #[state(superstate = "root")]
    fn success(event: &Input<'_>) -> Outcome<State> {
        let _ = event;
        Super
    }

    /// Error: terminal, absorbs every event (reported unhandled).
    #[state(superstate = "root")]
    fn error(event: &Input<'_>) -> Outcome<State> {
        let _ = event;
        Super
    }
}
