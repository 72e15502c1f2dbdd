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
    use crate::chart::{Chart, ReactRow, REACT_TOML};

    use crate::chart::Tried;

    /// The rows each generated function records, in source order, with their guards.
    fn generated_order() -> Vec<(String, Vec<Tried>)> {
        crate::chart::generated_order(include_str!("../generated/react_dispatch.rs"), "React")
    }

    /// The generated dispatch tries each scope's rows for an event in the order the TOML
    /// lists them, each behind the guard the TOML gives it, and every row is tried by its own
    /// scope's function. (Swapping two rows' guards in the TOML swaps them in the generated
    /// code: the chart decides; see docs/architecture.md, "Adding a chart row".)
    #[test]
    fn generated_dispatch_tries_rows_in_chart_order() {
        let chart = Chart::parse(REACT_TOML).expect("chart");
        let order = generated_order();
        let mut tried = 0;
        for (func, rows) in &order {
            let Some(scope) = crate::chart::scope_of(&chart, func) else {
                continue;
            };
            let mut events: Vec<&str> = Vec::new();
            for r in chart.row.iter().filter(|r| r.from == *scope) {
                if !events.contains(&r.event.as_str()) {
                    events.push(&r.event);
                }
            }
            for e in events {
                let want: Vec<Tried> = chart
                    .row
                    .iter()
                    .filter(|r| r.from == *scope && r.event == e)
                    .map(|r| {
                        let row = ReactRow::ALL
                            .iter()
                            .find(|x| x.spec().id == r.id)
                            .expect("generated row");
                        let guard = r.guard.clone().filter(|g| g != "otherwise");
                        (format!("{row:?}"), guard)
                    })
                    .collect();
                let got: Vec<Tried> = rows
                    .iter()
                    .filter(|(r, _)| want.iter().any(|(w, _)| w == r))
                    .cloned()
                    .collect();
                assert_eq!(
                    got, want,
                    "{scope} --{e}-->: the generated dispatch must try the chart's rows in \
                     chart order, each behind its own guard"
                );
                tried += got.len();
            }
        }
        assert_eq!(tried, ReactRow::ALL.len(), "every row is dispatched once");
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
