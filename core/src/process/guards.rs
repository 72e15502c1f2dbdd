//! The inner chart's guards: one pure predicate per guard a row of `statecharts/process.toml`
//! names (`otherwise` needs none), called by the generated dispatch
//! ([`crate::process::dispatch`]) and by the oracle, which evaluates them before every handler
//! runs and reports the verdict as a [`GuardCheck`](crate::chart::GuardCheck). Each reads the
//! data and the input, and changes nothing; where the state matters, the chart says so by the
//! state a row is in (the steering and draining rows are `Proceeding`'s, not `Draining`'s).
//!
//! Each is a method of [`Guards`], which implements the generated trait [`ProcessGuards`] (one method
//! per guard the chart's rows name, with the signature the dispatch calls): a missing
//! predicate, one no row names or a wrong signature is a compile error.

use crate::chart::ToolCallState;
use crate::error::{ErrorKind, ModelError};
use crate::event::Event;
use crate::process::data::ProcessData;
use crate::process::dispatch::ProcessGuards;
use crate::process::machine::Input;

/// Whether a failed attempt (error or stall) is retried: the budget is left and the retry
/// decider says so (R-EXT-3).
fn retryable(data: &ProcessData, input: &Input<'_>) -> bool {
    match input {
        Input::Ext(Event::TransportError { error, .. }) => data.may_retry(error),
        Input::Ext(Event::StreamStalled { after_ms, .. }) => {
            let why = format!("stream stalled for {after_ms} ms");
            data.may_retry(&ModelError::new(ErrorKind::Timeout, why))
        }
        _ => false,
    }
}

/// Whether the input is a passed deadline of the current attempt whose timeout the retry
/// policy retries (`Some(true)`) or not (`Some(false)`); `None` for any other input.
fn deadline_retried(data: &ProcessData, input: &Input<'_>) -> Option<bool> {
    match input {
        Input::Ext(Event::TimerElapsed { timer_id }) => {
            data.attempt.deadline(*timer_id)?;
            Some(data.may_retry(&data.deadline_error(*timer_id)))
        }
        _ => None,
    }
}

/// Whether the input is an answer to the call being asked about, or its approval timer
/// (the slot `dispatch::prepare` found).
fn answers_asked(data: &ProcessData, input: &Input<'_>) -> bool {
    match input {
        Input::Ext(Event::TimerElapsed { .. }) => data.tools.answered.is_some(),
        _ => Guards::current(data, input),
    }
}

/// The inner chart's guards, one method of [`ProcessGuards`] each.
pub(crate) struct Guards;

impl ProcessGuards for Guards {
    /// `current`: the event belongs to this attempt, timer or call: its ids name what the step
    /// is waiting for (the current attempt, and an unseen seq for a delta; the current backoff
    /// timer; a running call, a call being asked about, a call the hooks are being asked about:
    /// the slot `dispatch::prepare` found).
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
            | Event::StreamStalled { .. } => !data.attempt.is_stale(event),
            Event::TimerElapsed { timer_id } => *timer_id == data.attempt.timer_id(),
            // The call's slot, looked up before dispatch (`dispatch::prepare`).
            Event::ToolFinished { .. }
            | Event::Approval { .. }
            | Event::ToolGated { .. }
            | Event::UserAnswered { .. } => data.tools.answered.is_some(),
            _ => true,
        }
    }

    /// `stale`: the event is a duplicate or belongs to another attempt, timer or call.
    fn stale(data: &ProcessData, input: &Input<'_>) -> bool {
        !Self::current(data, input)
    }

    /// `resume_after_reject`: the answer (or the approval timer) is current and the run continues
    /// after a rejection or a timeout.
    fn resume_after_reject(data: &ProcessData, input: &Input<'_>) -> bool {
        answers_asked(data, input) && data.cfg.auto_resume
    }

    /// `stop_after_reject`: the answer (or the approval timer) is current and a rejection or a
    /// timeout stops the run.
    fn stop_after_reject(data: &ProcessData, input: &Input<'_>) -> bool {
        answers_asked(data, input) && !data.cfg.auto_resume
    }

    /// `stale_approval_timer`: an approval timer of no call being asked about now.
    fn stale_approval_timer(data: &ProcessData, input: &Input<'_>) -> bool {
        match input {
            Input::Ext(Event::TimerElapsed { timer_id }) => {
                crate::process::deadlines::is_approval_timer(*timer_id)
                    && data.tools.answered.is_none()
            }
            _ => false,
        }
    }

    /// `retry_budget_left`: the current attempt failed and is retried.
    fn retry_budget_left(data: &ProcessData, input: &Input<'_>) -> bool {
        Self::current(data, input) && retryable(data, input)
    }

    /// `no_retry`: the current attempt failed and is not retried.
    fn no_retry(data: &ProcessData, input: &Input<'_>) -> bool {
        Self::current(data, input) && !retryable(data, input)
    }

    /// `has_tool_calls`: the current attempt is done and its message has tool calls.
    fn has_tool_calls(data: &ProcessData, input: &Input<'_>) -> bool {
        Self::current(data, input) && data.attempt.acc.has_tool_calls()
    }

    /// `no_tool_calls`: the current attempt is done and its message has no tool calls.
    fn no_tool_calls(data: &ProcessData, input: &Input<'_>) -> bool {
        Self::current(data, input) && !data.attempt.acc.has_tool_calls()
    }

    /// `approval_needed`: a call waits for approval and none is being asked.
    fn approval_needed(data: &ProcessData, _input: &Input<'_>) -> bool {
        let slots = &data.tools.slots;
        slots.count(ToolCallState::NeedsApproval) > 0 && slots.count(ToolCallState::Asking) == 0
    }

    /// `all_results`: every tool call has its result.
    fn all_results(data: &ProcessData, _input: &Input<'_>) -> bool {
        data.tools.slots.all_done()
    }

    /// `tools_pending`: some calls are still running or queued.
    fn tools_pending(data: &ProcessData, _input: &Input<'_>) -> bool {
        !data.tools.slots.all_done()
    }

    /// `stream_moved`: the timer is the stall watchdog and a delta arrived since it was armed.
    fn stream_moved(data: &ProcessData, input: &Input<'_>) -> bool {
        match input {
            Input::Ext(Event::TimerElapsed { timer_id }) => data.attempt.stream_moved(*timer_id),
            _ => false,
        }
    }

    /// `deadline_retry`: a deadline of the current attempt passed and the timeout is retried.
    fn deadline_retry(data: &ProcessData, input: &Input<'_>) -> bool {
        deadline_retried(data, input) == Some(true)
    }

    /// `deadline_no_retry`: a deadline of the current attempt passed and is not retried.
    fn deadline_no_retry(data: &ProcessData, input: &Input<'_>) -> bool {
        deadline_retried(data, input) == Some(false)
    }

    /// `tool_deadline`: the timer is the deadline of a running call.
    fn tool_deadline(data: &ProcessData, input: &Input<'_>) -> bool {
        match input {
            Input::Ext(Event::TimerElapsed { timer_id }) => data
                .tools
                .deadline_of(*timer_id, data.attempt.request.model_call_index)
                .is_some(),
            _ => false,
        }
    }

    /// `tools_to_drain`: after the abort's kill policy some tools would still run.
    fn tools_to_drain(data: &ProcessData, input: &Input<'_>) -> bool {
        match input {
            Input::Ext(Event::Abort { kill, .. }) => data.tools.would_drain(*kill, &data.cfg),
            _ => false,
        }
    }
}
