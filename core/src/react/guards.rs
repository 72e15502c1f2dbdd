//! The outer chart's guards as pure predicates, and the oracle that picks the row the chart
//! prescribes for an input (see [`crate::process`]'s guards for the inner machine).

use crate::agent_event::Outcome;
use crate::chart::{ProcessState, ReactEventKind, ReactGuard, ReactRow, ReactState};
use crate::event::Event;
use crate::react::config::Decision;
use crate::react::data::ReactData;
use crate::react::machine::Input;

/// Whether an abort leaves tools of the current step running (immune tools, or kill policy
/// `none`): the inner machine would take its `tools_abort_drain` row.
fn abort_drains(data: &ReactData, input: &Input<'_>) -> bool {
    let Input::Ext(Event::Abort { kill, .. }) = input else {
        return false;
    };
    data.step.as_ref().is_some_and(|s| {
        matches!(
            s.state(),
            ProcessState::RunningTools | ProcessState::AwaitingApproval
        ) && s.abort_would_drain(*kill)
    })
}

/// Evaluates guard `g` for `input`. Pure: reads the data, changes nothing.
pub(crate) fn holds(g: ReactGuard, data: &ReactData, input: &Input<'_>) -> bool {
    match g {
        ReactGuard::Otherwise => true,
        ReactGuard::PendingTools => matches!(
            input,
            Input::Ext(Event::Resume {
                pending: Some(_),
                ..
            })
        ),
        ReactGuard::MaxStepsReached => data.max_steps_reached(),
        ReactGuard::OverThreshold => data.over_threshold(),
        ReactGuard::CompactionRequired => data.compaction_required(),
        ReactGuard::StopRequested => data.observe() == Decision::Stop,
        ReactGuard::ContinueOverBudget => data.observe() == Decision::Compact,
        ReactGuard::HasToolCalls => data.observe() == Decision::Continue,
        ReactGuard::OutputRetry => data.output_retry(),
        ReactGuard::OutputInvalid => data.output_invalid(),
        ReactGuard::NoToolCalls => {
            data.observe() == Decision::Complete && !data.output_retry() && !data.output_invalid()
        }
        ReactGuard::EndedCompleted => data.ending_outcome() == Some(Outcome::Completed),
        ReactGuard::EndedFailed => data.ending_outcome() == Some(Outcome::Failed),
        ReactGuard::EndedAborted => data.ending_outcome() == Some(Outcome::Aborted),
        ReactGuard::SubtaskQueued => data.subtask_queued(),
        ReactGuard::FallbackAvailable => data.fallback_available(),
        ReactGuard::LimitStop => data.limit_stops(),
        ReactGuard::LimitFinalAnswer => data.limit_asks_final_answer(),
        ReactGuard::ToolsDraining => abort_drains(data, input),
        ReactGuard::NothingToDrain => !abort_drains(data, input),
    }
}

/// The row the chart prescribes for `input` (of kind `kind`) in `state`.
pub(crate) fn expected(
    state: ReactState,
    kind: ReactEventKind,
    data: &ReactData,
    input: &Input<'_>,
) -> Option<ReactRow> {
    state
        .candidates(kind)
        .into_iter()
        .find(|r| r.guard().is_none_or(|g| holds(g, data, input)))
}
