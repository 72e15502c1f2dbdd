//! The outer chart's guards: one pure predicate per guard a row of `statecharts/react.toml`
//! names (`otherwise` needs none), called by the generated dispatch
//! ([`crate::react::dispatch`]) and by the oracle. Each reads the data and the input and
//! changes nothing; work a guard needs done first (forwarding an abort to the inner step,
//! running the decision function) is done before dispatch, in [`ReactData::prepare`].
//!
//! `build.rs` checks that the `pub(crate) fn`s here are exactly the guards the chart's rows
//! name: a missing predicate or one that no row names fails the build.

use crate::agent_event::Outcome;
use crate::chart::ProcessState;
use crate::event::Event;
use crate::react::config::Decision;
use crate::react::data::ReactData;
use crate::react::machine::Input;

/// Whether the inner step drains tools (after the abort was forwarded to it).
fn draining(data: &ReactData) -> bool {
    data.current
        .step
        .as_ref()
        .is_some_and(|s| s.state() == ProcessState::Draining)
}

/// The decision function's answer for the step being observed.
fn decided(data: &ReactData, d: Decision) -> bool {
    data.local.decided(d)
}

/// `tools_draining`: after the abort's kill policy, some immune tools still run.
pub(crate) fn tools_draining(data: &ReactData, _input: &Input<'_>) -> bool {
    draining(data)
}

/// `nothing_to_drain`: no tool of the step is left running after the abort.
pub(crate) fn nothing_to_drain(data: &ReactData, _input: &Input<'_>) -> bool {
    !draining(data)
}

/// `max_steps_reached`: the final step ran.
pub(crate) fn max_steps_reached(data: &ReactData, _input: &Input<'_>) -> bool {
    data.max_steps_reached()
}

/// `over_threshold`: the context is over its compaction threshold.
pub(crate) fn over_threshold(data: &ReactData, _input: &Input<'_>) -> bool {
    data.over_threshold()
}

/// `compaction_required`: the compaction under way answers an overflow.
pub(crate) fn compaction_required(data: &ReactData, _input: &Input<'_>) -> bool {
    data.compaction_required()
}

/// `pending_tools`: the resumed run's last committed message has calls without results.
pub(crate) fn pending_tools(_data: &ReactData, input: &Input<'_>) -> bool {
    matches!(
        input,
        Input::Ext(Event::Resume {
            pending: Some(_),
            ..
        })
    )
}

/// `subtask_queued`: a subtask waits to run before the next model step.
pub(crate) fn subtask_queued(data: &ReactData, _input: &Input<'_>) -> bool {
    data.subtask_queued()
}

/// `stop_requested`: the decision function asked to stop.
pub(crate) fn stop_requested(data: &ReactData, _input: &Input<'_>) -> bool {
    decided(data, Decision::Stop)
}

/// `continue_over_budget`: the decision function asked to compact first.
pub(crate) fn continue_over_budget(data: &ReactData, _input: &Input<'_>) -> bool {
    decided(data, Decision::Compact)
}

/// `has_tool_calls`: the decision function asked to go on.
pub(crate) fn has_tool_calls(data: &ReactData, _input: &Input<'_>) -> bool {
    decided(data, Decision::Continue)
}

/// `output_retry`: the typed final answer was rejected and retries are left.
pub(crate) fn output_retry(data: &ReactData, _input: &Input<'_>) -> bool {
    data.output_retry()
}

/// `output_invalid`: the typed final answer was rejected and the retries are used up.
pub(crate) fn output_invalid(data: &ReactData, _input: &Input<'_>) -> bool {
    data.output_invalid()
}

/// `no_tool_calls`: the message is the final answer (and, if typed, accepted).
pub(crate) fn no_tool_calls(data: &ReactData, _input: &Input<'_>) -> bool {
    decided(data, Decision::Complete) && !data.output_retry() && !data.output_invalid()
}

/// `ended_completed`: the end being committed is a completion.
pub(crate) fn ended_completed(data: &ReactData, _input: &Input<'_>) -> bool {
    data.ending_outcome() == Some(Outcome::Completed)
}

/// `ended_failed`: the end being committed is a failure.
pub(crate) fn ended_failed(data: &ReactData, _input: &Input<'_>) -> bool {
    data.ending_outcome() == Some(Outcome::Failed)
}

/// `ended_aborted`: the end being committed is an abort.
pub(crate) fn ended_aborted(data: &ReactData, _input: &Input<'_>) -> bool {
    data.ending_outcome() == Some(Outcome::Aborted)
}

/// `fallback_available`: the step failed and the fallback chain has a model left.
pub(crate) fn fallback_available(data: &ReactData, _input: &Input<'_>) -> bool {
    data.fallback_available()
}

/// `limit_stop`: a usage limit is reached and the run stops now.
pub(crate) fn limit_stop(data: &ReactData, _input: &Input<'_>) -> bool {
    data.limit_stops()
}

/// `limit_final_answer`: a usage limit is reached and asks for one final-answer step.
pub(crate) fn limit_final_answer(data: &ReactData, _input: &Input<'_>) -> bool {
    data.limit_asks_final_answer()
}
