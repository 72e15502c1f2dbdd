//! The inner chart's row actions: one function per row of `statecharts/process.toml` (an
//! ignored row has none), named after the row's id (or the `action` rows share) and called by the generated dispatch
//! ([`crate::process::dispatch`]) once the row is taken. An action does the row's effects on
//! the data; it never chooses a row or a target state: the chart does.
//!
//! Each is a method of [`Actions`], which implements the generated trait [`ProcessActions`] (one method
//! per row that acts, with the signature the dispatch calls): a missing action, one the chart does not
//! name or a wrong signature is a compile error.

use crate::agent_event::AgentEvent;
use crate::chart::{ToolCallEventKind, ToolCallState};
use crate::effect::Effect;
use crate::error::{ErrorKind, ModelError};
use crate::event::{ApprovalDecision, Event, KillPolicy};
use crate::process::call_guards::Facts;
use crate::process::context::Backoff;
use crate::process::data::{ProcessData, StepOutcome};
use crate::process::deadlines::AttemptTimer;
use crate::process::dispatch::ProcessActions;
use crate::process::machine::Input;

/// The external event of `input`, if any.
fn ext<'a>(input: &Input<'a>) -> Option<&'a Event> {
    match input {
        Input::Ext(e) => Some(e),
        _ => None,
    }
}

/// The timer of a `TimerElapsed` input.
fn timer(input: &Input<'_>) -> Option<u64> {
    match ext(input) {
        Some(Event::TimerElapsed { timer_id }) => Some(*timer_id),
        _ => None,
    }
}

/// The stall of a `StreamStalled` input (ms without a chunk).
fn stall(input: &Input<'_>) -> Option<u64> {
    match ext(input) {
        Some(Event::StreamStalled { after_ms, .. }) => Some(*after_ms),
        _ => None,
    }
}

/// The call an `Approval` input answers (its slot, being asked about, found before dispatch)
/// and the decision.
fn approval<'a>(data: &ProcessData, input: &Input<'a>) -> Option<(usize, &'a ApprovalDecision)> {
    match ext(input) {
        Some(Event::Approval { decision, .. }) => Some((data.tools.answered?, decision)),
        _ => None,
    }
}

/// The inner chart's actions, one method of [`ProcessActions`] each.
pub(crate) struct Actions;

impl ProcessActions for Actions {
    /// `idle_begin` (entering Requesting calls the model), `draining_settle_done` (the abort
    /// decided the outcome), `draining_settle_wait` (immune tools still run): nothing to do.
    fn nothing(_data: &mut ProcessData, _input: &Input<'_>) {}

    /// `idle_resume`: restore the committed message and its results, run the calls left.
    fn idle_resume(data: &mut ProcessData, input: &Input<'_>) {
        if let Input::Resume(message, results) = input {
            data.calls().resume((*message).clone(), results.to_vec());
            data.calls().start_queued();
        }
    }

    /// `requesting_rewritten`: the request as the runtime sent it.
    fn requesting_rewritten(data: &mut ProcessData, input: &Input<'_>) {
        if let Some(Event::RequestRewritten { request, .. }) = ext(input) {
            data.attempt.sent = Some(request.clone());
        }
    }

    /// `calling_opened`: the stream opened.
    fn calling_opened(data: &mut ProcessData, _input: &Input<'_>) {
        let r = &data.attempt.request;
        let (model_call_index, attempt) = (r.model_call_index, r.attempt);
        data.outbox.emit(AgentEvent::MessageStart {
            model_call_index,
            attempt,
        });
    }

    /// `requesting_retry`: the attempt failed; note the error, retry (entering Retrying
    /// starts the backoff).
    fn requesting_retry(data: &mut ProcessData, input: &Input<'_>) -> Backoff {
        data.end_attempt();
        match ext(input) {
            Some(Event::TransportError { error, .. }) => {
                // A malformed response is retried once per step (see `ProcessData::may_retry`).
                data.attempt.malformed_retried |= error.kind == ErrorKind::MalformedResponse;
                Backoff::new(error.to_string(), error.retry_after_ms)
            }
            _ => Backoff::default(),
        }
    }

    /// `requesting_deadline_retry`: the deadline passed; retry.
    fn requesting_deadline_retry(data: &mut ProcessData, input: &Input<'_>) -> Backoff {
        match timer(input) {
            Some(timer_id) => Backoff::new(data.deadline_passed(timer_id).0, None),
            None => Backoff::default(),
        }
    }

    /// `requesting_deadline_fail`: the deadline passed; the step fails.
    fn requesting_deadline_fail(data: &mut ProcessData, input: &Input<'_>) {
        if let Some(timer_id) = timer(input) {
            let (_, error) = data.deadline_passed(timer_id);
            data.fail(error);
        }
    }

    /// `requesting_fail`: the step fails with the transport error (a second malformed answer
    /// says so).
    fn requesting_fail(data: &mut ProcessData, input: &Input<'_>) {
        if let Some(Event::TransportError { error, .. }) = ext(input) {
            let mut error = error.clone();
            if error.kind == ErrorKind::MalformedResponse && data.attempt.malformed_retried {
                let note = " (the retry got a malformed answer too: not retried again)";
                error.message.push_str(note);
            }
            data.fail(error);
        }
    }

    /// `requesting_overflow`: the step ends with a context overflow.
    fn requesting_overflow(data: &mut ProcessData, input: &Input<'_>) {
        if let Some(Event::ContextOverflow { error, .. }) = ext(input) {
            data.end_attempt();
            let message = error.message.clone();
            data.outbox.emit(AgentEvent::ContextOverflow { message });
            data.ending.end(StepOutcome::ContextOverflow(error.clone()));
        }
    }

    /// `requesting_stall_retry`: cancel the stalled stream; retry.
    fn requesting_stall_retry(data: &mut ProcessData, input: &Input<'_>) -> Backoff {
        let Some(after_ms) = stall(input) else {
            return Backoff::default();
        };
        data.stalled(after_ms);
        data.end_attempt();
        Backoff::new(format!("stream stalled for {after_ms} ms"), None)
    }

    /// `requesting_stall_fail`: cancel the stalled stream; the step fails.
    fn requesting_stall_fail(data: &mut ProcessData, input: &Input<'_>) {
        if let Some(after_ms) = stall(input) {
            data.stalled(after_ms);
            let note = data.not_retried_note();
            data.fail(ModelError::new(
                ErrorKind::Timeout,
                format!("stream stalled for {after_ms} ms; {note}"),
            ));
        }
    }

    /// `streaming_delta`: accumulate the delta.
    fn streaming_delta(data: &mut ProcessData, input: &Input<'_>) {
        if let Some(Event::Delta { seq, delta, .. }) = ext(input) {
            data.delta(*seq, delta);
        }
    }

    /// `streaming_watch`: the stream moved; the stall watchdog looks again one period later.
    fn streaming_watch(data: &mut ProcessData, input: &Input<'_>) {
        let timers = &mut data.attempt.timers;
        if let Some((timer_id, (kind, delay_ms))) =
            timer(input).and_then(|t| Some((t, timers.get(t)?)))
        {
            timers.moved = false;
            timers.arm(kind, timer_id, delay_ms, &mut data.outbox);
        }
    }

    /// `streaming_done_tools`, and the part `streaming_done` shares: keep the runtime's
    /// verdict, commit the message (and schedule its calls).
    fn done(data: &mut ProcessData, input: &Input<'_>) {
        if let Some(Event::Done {
            rejected_arguments,
            output_rejected,
            ..
        }) = ext(input)
        {
            data.ending.output_rejected = output_rejected.clone();
            data.commit(rejected_arguments);
        }
    }

    /// `streaming_done`: commit the message; the step succeeds.
    fn streaming_done(data: &mut ProcessData, input: &Input<'_>) {
        Self::done(data, input);
        data.ending.end(StepOutcome::Success);
    }

    /// `retrying_timer`: the backoff passed; call the model again.
    fn retrying_timer(data: &mut ProcessData, local: &mut Backoff, _input: &Input<'_>) {
        // The timer fired: leaving Retrying has nothing to cancel.
        local.timer = None;
        let r = &data.attempt.request;
        let (model_call_index, attempt) = (r.model_call_index, r.attempt);
        data.outbox.emit(AgentEvent::ModelTurnRetried {
            model_call_index,
            attempt,
        });
    }

    /// `running_settle_approval`: ask for the next approval.
    fn running_settle_approval(data: &mut ProcessData, _input: &Input<'_>) {
        if let Some(i) = data.tools.slots.first(ToolCallState::NeedsApproval) {
            data.calls()
                .call_event(i, ToolCallEventKind::Ask, Facts::None);
        }
    }

    /// `running_settle_done`: every call has its result; the step succeeds.
    fn running_settle_done(data: &mut ProcessData, _input: &Input<'_>) {
        data.ending.end(StepOutcome::Success);
    }

    /// `running_settle_wait`: start the queued calls that may run.
    fn running_settle_wait(data: &mut ProcessData, _input: &Input<'_>) {
        data.calls().start_queued();
    }

    /// `tools_deadline`: a running call's deadline passed.
    fn tools_deadline(data: &mut ProcessData, input: &Input<'_>) {
        if let Some(i) = timer(input).and_then(|t| {
            data.tools
                .deadline_of(t, data.attempt.request.model_call_index)
        }) {
            data.calls()
                .call_event(i, ToolCallEventKind::Deadline, Facts::None);
        }
    }

    /// `tools_finished`: record the running call's result (its slot found before dispatch).
    fn tools_finished(data: &mut ProcessData, input: &Input<'_>) {
        if let (
            Some(Event::ToolFinished {
                status, content, ..
            }),
            Some(i),
        ) = (ext(input), data.tools.answered)
        {
            let (status, content) = (*status, content.as_str());
            let facts = Facts::Finished { status, content };
            data.calls()
                .call_event(i, ToolCallEventKind::Finished, facts);
        }
    }

    /// `tools_user_answered`: the user answered the call's question.
    fn tools_user_answered(data: &mut ProcessData, input: &Input<'_>) {
        if let (Some(Event::UserAnswered { answer, .. }), Some(i)) =
            (ext(input), data.tools.answered)
        {
            let facts = Facts::Answered(answer.as_deref());
            data.calls()
                .call_event(i, ToolCallEventKind::Answered, facts);
        }
    }

    /// The four `tools_gate_*` rows: apply the hooks' verdict (allowed, modified, blocked,
    /// asked) to the call being gated.
    fn gated(data: &mut ProcessData, input: &Input<'_>) {
        if let (Some(Event::ToolGated { verdict, .. }), Some(i)) = (ext(input), data.tools.answered)
        {
            data.calls().gated(i, verdict);
        }
    }

    /// `awaiting_approved`, `awaiting_modified`: run the call approved (with the human's
    /// arguments, if any).
    fn approved(data: &mut ProcessData, input: &Input<'_>) {
        if let Some((i, decision)) = approval(data, input) {
            data.calls().approved(i, decision, false);
        }
    }

    /// `awaiting_approved_always`: run the call and remember its scope.
    fn awaiting_approved_always(data: &mut ProcessData, input: &Input<'_>) {
        if let Some((i, decision)) = approval(data, input) {
            data.calls().approved(i, decision, true);
        }
    }

    /// `awaiting_rejected` (the run goes on), `awaiting_rejected_stop` (without auto_resume,
    /// the run stops after this step): a denied result.
    fn rejected(data: &mut ProcessData, input: &Input<'_>) {
        if let Some((i, decision)) = approval(data, input) {
            data.calls()
                .call_event(i, ToolCallEventKind::Rejected, Facts::Approval(decision));
        }
    }

    /// `awaiting_timed_out`, `awaiting_timed_out_stop`: the approval timer of the call being
    /// asked about fired (its slot found before dispatch): a denied result (timed out).
    fn timed_out(data: &mut ProcessData, input: &Input<'_>) {
        if let (Some(_), Some(i)) = (timer(input), data.tools.answered) {
            let after_ms = data.cfg.approval_timeout_ms.unwrap_or_default();
            let decision = ApprovalDecision::TimedOut { after_ms };
            let facts = Facts::ApprovalTimer(&decision);
            data.calls()
                .call_event(i, ToolCallEventKind::Rejected, facts);
        }
    }

    /// `tools_abort_drain`: apply the kill policy, close every call that did not start or was
    /// killed; the immune tools keep running and their results will be kept (R-CTL-3).
    fn tools_abort_drain(data: &mut ProcessData, input: &Input<'_>) {
        if let Some(Event::Abort { kill, .. }) = ext(input) {
            data.calls()
                .close_open_calls(ToolCallEventKind::Abort, *kill);
            data.ending.end(StepOutcome::Aborted);
        }
    }

    /// `tools_steer_skip`: calls not started are skipped for the steering message, killable
    /// running calls are killed and skipped; immune running calls finish (R-CTL-2).
    fn tools_steer_skip(data: &mut ProcessData, _input: &Input<'_>) {
        data.calls()
            .close_open_calls(ToolCallEventKind::Skip, KillPolicy::Killable);
    }

    /// `live_abort`: abort the step: kill running tools, give every call without a result an
    /// `aborted` result (R-CTL-3, R-IDEM-7). The model call or the backoff timer in flight is
    /// cancelled by the exit action of the state the abort leaves (Requesting, Retrying).
    fn live_abort(data: &mut ProcessData, _input: &Input<'_>) {
        data.calls()
            .close_open_calls(ToolCallEventKind::Abort, KillPolicy::All);
        data.ending.end(StepOutcome::Aborted);
    }

    /// Entering Requesting: send the attempt's request (call the model, start its deadline
    /// timers).
    fn send_request(data: &mut ProcessData) {
        data.attempt.send(data.cfg.inline_tags);
        let request = data.attempt.request.clone();
        data.outbox.emit(AgentEvent::RequestStart {
            model_call_index: request.model_call_index,
            attempt: request.attempt,
            model: request.model.clone(),
            messages: None,
        });
        data.outbox.push(Effect::CallModel { request });
        if let Some(d) = data.cfg.stream {
            let (base, timers) = (data.attempt.timer_id(), &mut data.attempt.timers);
            let (first, request) = (AttemptTimer::FirstChunk, AttemptTimer::Request);
            timers.arm(first, first.id(base), d.first_chunk_ms, &mut data.outbox);
            if let Some(ms) = d.request_ms {
                timers.arm(request, request.id(base), ms, &mut data.outbox);
            }
        }
    }

    /// Leaving Requesting: end an attempt still in flight (an abort): cancel its timers and
    /// its model call.
    fn end_request(data: &mut ProcessData) {
        if data.attempt.open {
            data.end_attempt();
            data.cancel_model();
        }
    }

    /// Entering Retrying: start the backoff timer, announce the retry.
    fn start_backoff(data: &mut ProcessData, local: &mut Backoff) {
        let r = &data.attempt.request;
        let draw = u64::from(r.model_call_index) << 32 | u64::from(r.attempt);
        let retry_after_ms = local.retry_after_ms;
        let retry = &data.cfg.retry;
        let delay_ms = retry.jittered_delay_ms(data.attempt.retries + 1, retry_after_ms, draw);
        data.attempt.retry(data.cfg.inline_tags);
        let timer_id = data.attempt.timer_id();
        data.outbox.push(Effect::StartTimer { timer_id, delay_ms });
        local.timer = Some(timer_id);
        data.outbox.emit(AgentEvent::Retry {
            model_call_index: data.attempt.request.model_call_index,
            attempt: data.attempt.request.attempt,
            delay_ms,
            reason: std::mem::take(&mut local.reason),
            retry_after_ms,
        });
    }

    /// Leaving Retrying: cancel the backoff timer unless it fired (an abort).
    fn cancel_backoff(data: &mut ProcessData, local: &mut Backoff) {
        if let Some(timer_id) = local.timer.take() {
            data.outbox.push(Effect::CancelTimer { timer_id });
        }
    }
}
