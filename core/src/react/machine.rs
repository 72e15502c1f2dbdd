//! The outer ReAct machine as a blocking `statig` machine (crate-private; see
//! [`crate::react::Run`] for the facade). statig keeps the hierarchy, the entry actions and
//! the state enum; each state's handler calls its dispatch function, generated from
//! `statecharts/react.toml` ([`crate::react::dispatch`]), which picks the row, records it and
//! runs its action.

use statig::blocking::*;

use crate::event::Event;
use crate::react::config::Decision;
use crate::react::context::{Compaction, Drain, Ended};
use crate::react::data::ReactData;
use crate::react::dispatch;

/// What the facade feeds the machine: an external event or one of its internal events.
#[derive(Debug)]
pub(crate) enum Input<'a> {
    /// An event from outside.
    Ext(&'a Event),
    /// Fed on entering Planning.
    Plan,
    /// Fed on entering Observing, with the decision function's answer for the step observed
    /// (computed once, before dispatch: the Observing guards read it).
    Decide(Decision),
    /// The inner machine reached a terminal state.
    InnerEnded,
}

/// The statig machine. What spans states lives in the context ([`ReactData`]); a state's own
/// data lives in the state (statig state-local storage, the chart's `local`): `Executing`'s
/// [`Drain`], `Compacting`'s [`Compaction`], the decided end ([`Ended`]) of `Finishing` and the
/// terminal states.
#[derive(Debug, Default)]
pub(crate) struct ReactMachine;

#[state_machine(
    initial = "State::init()",
    state(derive(Debug)),
    superstate(derive(Debug))
)]
impl ReactMachine {
    /// Root: every event no state accepted ends here and is reported as unhandled.
    #[superstate]
    fn root(context: &mut ReactData, event: &Input<'_>) -> Outcome<State> {
        let _ = event;
        context.outbox.unhandled = true;
        Handled
    }

    /// Active (a run in progress): its rows, generated from the chart.
    #[superstate(superstate = "root", exit_action = "exit_active")]
    fn active(context: &mut ReactData, event: &Input<'_>) -> Outcome<State> {
        dispatch::active(context, event)
    }

    /// Init: its rows, generated from the chart.
    #[state(superstate = "active")]
    fn init(context: &mut ReactData, event: &Input<'_>) -> Outcome<State> {
        dispatch::init(context, event)
    }

    /// Planning: its rows, generated from the chart.
    #[state(superstate = "active")]
    fn planning(context: &mut ReactData, event: &Input<'_>) -> Outcome<State> {
        dispatch::planning(context, event)
    }

    /// Executing: its rows, generated from the chart (the facade forwards inner events, and
    /// an abort, to the step before this handler runs).
    #[state(superstate = "active")]
    fn executing(context: &mut ReactData, local: &mut Drain, event: &Input<'_>) -> Outcome<State> {
        dispatch::executing(context, local, event)
    }

    /// Observing: its rows, generated from the chart (the decision function ran before).
    #[state(superstate = "active")]
    fn observing(context: &mut ReactData, event: &Input<'_>) -> Outcome<State> {
        dispatch::observing(context, event)
    }

    /// Compacting: its rows, generated from the chart.
    #[state(superstate = "active", entry_action = "enter_compacting")]
    fn compacting(
        context: &mut ReactData,
        local: &mut Compaction,
        event: &Input<'_>,
    ) -> Outcome<State> {
        dispatch::compacting(context, local, event)
    }

    /// Finishing: the run-end entry is being committed; its rows, generated from the chart.
    #[state(superstate = "root", entry_action = "enter_finishing")]
    fn finishing(context: &mut ReactData, local: &mut Ended, event: &Input<'_>) -> Outcome<State> {
        dispatch::finishing(context, local, event)
    }

    /// Leaving `Active` (the run is over): the chart's exit action.
    #[action]
    fn exit_active(context: &mut ReactData) {
        dispatch::exit_active(context);
    }

    /// Entering `Compacting`: the chart's entry action (requests the compaction).
    #[action]
    fn enter_compacting(context: &mut ReactData, local: &mut Compaction) {
        dispatch::enter_compacting(context, local);
    }

    /// Entering `Finishing`: the chart's entry action (commits the decided end, the one place).
    #[action]
    fn enter_finishing(context: &mut ReactData, local: &mut Ended) {
        dispatch::enter_finishing(context, local);
    }

    /// Entering `Completed`: the chart's entry action (reports the end, the one place).
    #[action]
    fn enter_completed(context: &mut ReactData, local: &mut Ended) {
        dispatch::enter_completed(context, local);
    }

    /// Entering `Failed`: the chart's entry action (reports the end).
    #[action]
    fn enter_failed(context: &mut ReactData, local: &mut Ended) {
        dispatch::enter_failed(context, local);
    }

    /// Entering `Aborted`: the chart's entry action (reports the end).
    #[action]
    fn enter_aborted(context: &mut ReactData, local: &mut Ended) {
        dispatch::enter_aborted(context, local);
    }

    /// Completed: terminal, absorbs every event (reported unhandled).
    #[state(superstate = "root", entry_action = "enter_completed")]
    fn completed(context: &mut ReactData, local: &mut Ended, event: &Input<'_>) -> Outcome<State> {
        dispatch::completed(context, local, event)
    }

    /// Failed: terminal, absorbs every event (reported unhandled).
    #[state(superstate = "root", entry_action = "enter_failed")]
    fn failed(context: &mut ReactData, local: &mut Ended, event: &Input<'_>) -> Outcome<State> {
        dispatch::failed(context, local, event)
    }

    /// Aborted: terminal, absorbs every event (reported unhandled).
    #[state(superstate = "root", entry_action = "enter_aborted")]
    fn aborted(context: &mut ReactData, local: &mut Ended, event: &Input<'_>) -> Outcome<State> {
        dispatch::aborted(context, local, event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::ReactState;

    crate::chart::superstates_are_the_charts_parents!(
        ReactMachine,
        ReactState,
        crate::react::kind,
        [
            State::init(),
            State::planning(),
            State::executing(Drain::default()),
            State::observing(),
            State::compacting(Compaction {
                reason: "threshold",
                budget_tokens: None,
            }),
            State::finishing(Ended { result: None }),
            State::completed(Ended { result: None }),
            State::failed(Ended { result: None }),
            State::aborted(Ended { result: None })
        ]
    );
}
