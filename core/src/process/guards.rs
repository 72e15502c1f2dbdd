//! The inner chart's guards as pure predicates, and the oracle that picks the row the chart
//! prescribes for an input: the first candidate (leaf state first, then its superstates) whose
//! guard holds. The facade evaluates it before every handler runs and reports the verdict as
//! a [`GuardCheck`], so a handler that tests the wrong condition is caught by the
//! conformance suite, not only one whose row is missing from the chart.

use crate::chart::{ProcessEventKind, ProcessGuard, ProcessRow, ProcessState};
use crate::event::Event;
use crate::process::data::ProcessData;
use crate::process::machine::Input;

/// Whether the input's ids name what the step is waiting for: the current attempt (and an
/// unseen seq for a delta), the current backoff timer, a running call, a call being asked about,
/// a call the hooks are being asked about.
fn current(data: &ProcessData, input: &Input<'_>) -> bool {
    let Input::Ext(event) = input else {
        return true;
    };
    match event {
        Event::StreamOpened { .. }
        | Event::RequestRewritten { .. }
        | Event::Delta { .. }
        | Event::Done { .. }
        | Event::TransportError { .. }
        | Event::ContextOverflow { .. }
        | Event::StreamStalled { .. } => !data.is_stale(event),
        Event::TimerElapsed { timer_id } => *timer_id == data.timer_id(),
        Event::ToolFinished { tool_call_id, .. } => data.running(tool_call_id).is_some(),
        Event::Approval { tool_call_id, .. } => data.asking(tool_call_id).is_some(),
        Event::ToolGated { tool_call_id, .. } => data.gating(tool_call_id).is_some(),
        Event::UserAnswered { tool_call_id, .. } => data.asked_user(tool_call_id).is_some(),
        _ => true,
    }
}

/// Whether a failed attempt (error or stall) is retried: the budget is left and the retry
/// decider says so (R-EXT-3).
fn retryable(data: &ProcessData, input: &Input<'_>) -> bool {
    match input {
        Input::Ext(Event::TransportError { error, .. }) => data.may_retry(error),
        Input::Ext(Event::StreamStalled { after_ms, .. }) => {
            data.may_retry(&ProcessData::stall_error(*after_ms))
        }
        _ => false,
    }
}

/// Evaluates guard `g` for `input` in `state`. Pure: reads the data, changes nothing.
pub(crate) fn holds(
    g: ProcessGuard,
    data: &ProcessData,
    state: ProcessState,
    input: &Input<'_>,
) -> bool {
    match g {
        ProcessGuard::Otherwise => true,
        ProcessGuard::Current => current(data, input),
        ProcessGuard::Stale => !current(data, input),
        ProcessGuard::ResumeAfterReject => current(data, input) && data.auto_resume(),
        ProcessGuard::StopAfterReject => current(data, input) && !data.auto_resume(),
        ProcessGuard::RetryBudgetLeft => current(data, input) && retryable(data, input),
        ProcessGuard::NoRetry => current(data, input) && !retryable(data, input),
        ProcessGuard::HasToolCalls => current(data, input) && data.has_tool_calls(),
        ProcessGuard::NoToolCalls => current(data, input) && !data.has_tool_calls(),
        ProcessGuard::ApprovalNeeded => data.approval_needed(),
        ProcessGuard::AllResults => data.all_results(),
        ProcessGuard::ToolsPending => !data.all_results(),
        ProcessGuard::NotDraining => state != ProcessState::Draining,
        ProcessGuard::StreamMoved => match input {
            Input::Ext(Event::TimerElapsed { timer_id }) => data.stream_moved(*timer_id),
            _ => false,
        },
        ProcessGuard::DeadlineRetry | ProcessGuard::DeadlineNoRetry => match input {
            Input::Ext(Event::TimerElapsed { timer_id }) => {
                data.attempt_deadline(*timer_id).is_some()
                    && data.may_retry(&data.deadline_error(*timer_id))
                        == (g == ProcessGuard::DeadlineRetry)
            }
            _ => false,
        },
        ProcessGuard::ToolDeadline => match input {
            Input::Ext(Event::TimerElapsed { timer_id }) => data.deadline_of(*timer_id).is_some(),
            _ => false,
        },
        ProcessGuard::ToolsToDrain => match input {
            Input::Ext(Event::Abort { kill, .. }) => {
                state != ProcessState::Draining && data.would_drain(*kill)
            }
            _ => false,
        },
    }
}

/// The row the chart prescribes for `input` (of kind `kind`) in `state`.
pub(crate) fn expected(
    state: ProcessState,
    kind: ProcessEventKind,
    data: &ProcessData,
    input: &Input<'_>,
) -> Option<ProcessRow> {
    state
        .candidates(kind)
        .into_iter()
        .find(|r| r.guard().is_none_or(|g| holds(g, data, state, input)))
}
