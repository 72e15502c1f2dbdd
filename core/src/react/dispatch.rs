//! The outer machine's dispatch, `core/src/generated/react_dispatch.rs`, written by `cargo run -p agentloop-codegen` from
//! `statecharts/react.toml`: for
//! each state and superstate, a function that classifies the input into its chart event
//! ([`chart_event`]), tries the scope's rows for that event in chart order, evaluates each
//! row's guard with its predicate in [`Guards`], and for the first that holds records the row,
//! runs its action in [`Actions`] and returns the row's outcome (`Transition` to its target,
//! `Handled` for an internal or ignored row, `Super` when no row holds). The statig handlers
//! in [`crate::react::machine`] only call these. Which row, which target: the chart's, never
//! a hand-written function's.

use statig::blocking::*;

use crate::chart::{ReactEventKind, ReactGuard, ReactRow, ReactState};
use crate::process::StepOutcome;
use crate::react::actions::Actions;
use crate::react::context::{Compaction, Drain, Ended};
use crate::react::data::ReactData;
use crate::react::guards::Guards;
use crate::react::machine::{Input, State};

include!("../generated/react_dispatch.rs");

/// The chart event an input stands for (`None`: no row of the outer chart can take it).
pub(crate) fn chart_event(data: &ReactData, input: &Input<'_>) -> Option<ReactEventKind> {
    match input {
        Input::Ext(e) => crate::route::route(e).react,
        Input::Plan => Some(ReactEventKind::Plan),
        Input::Decide(_) => Some(ReactEventKind::Decide),
        Input::InnerEnded => match data.current.step.as_ref()?.outcome()? {
            StepOutcome::Success => Some(ReactEventKind::InnerSucceeded),
            StepOutcome::ContextOverflow(_) => Some(ReactEventKind::InnerOverflowed),
            StepOutcome::Failed(_) => Some(ReactEventKind::InnerFailed),
            StepOutcome::Aborted => Some(ReactEventKind::InnerAborted),
        },
    }
}

#[cfg(test)]
mod tests {
    use crate::chart::{ReactRow, REACT_TOML};

    /// The generated dispatch tries each scope's rows for an event in the order the TOML
    /// lists them, each behind the guard the TOML gives it, and every row is tried by its own
    /// scope's function. (Swapping two rows' guards in the TOML swaps them in the generated
    /// code: the chart decides; see docs/architecture.md, "Adding a chart row".)
    #[test]
    fn generated_dispatch_tries_rows_in_chart_order() {
        let order = crate::chart::check_dispatch_order(
            REACT_TOML,
            include_str!("../generated/react_dispatch.rs"),
            "React",
            ReactRow::ALL,
            |r| r.spec().id,
        );
        // The planning rows whose guards a chart edit may swap, in TOML order.
        let planning: Vec<(&str, Option<&str>)> = order
            .iter()
            .find(|(f, _)| f == "planning")
            .expect("planning")
            .1
            .iter()
            .map(|(r, g)| (r.as_str(), g.as_deref()))
            .collect();
        assert_eq!(
            planning,
            [
                (
                    "PlanningMaxStepsRejected",
                    Some("max_steps_answer_rejected")
                ),
                ("PlanningMaxSteps", Some("max_steps_reached")),
                ("PlanningLimitStop", Some("limit_stop")),
                ("PlanningLimitFinal", Some("limit_final_answer")),
                ("PlanningSubtask", Some("subtask_queued")),
                ("PlanningCompact", Some("over_threshold")),
                ("PlanningExecute", None),
            ]
        );
    }
}
