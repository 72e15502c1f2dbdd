//! The session machine as a blocking `statig` machine: statig keeps the hierarchy and the
//! state enum; each state's handler calls its dispatch function, generated from
//! `statecharts/session.toml` ([`super::dispatch`]), which picks the row, records it and runs
//! its action.

use statig::blocking::*;

use super::data::SessionData;
use super::dispatch;
use super::SessionInput as Input;
use crate::chart::SessionState;

/// The statig machine; all data lives in the context ([`SessionData`]).
#[derive(Debug, Default)]
pub(crate) struct SessionMachine;

#[state_machine(
    initial = "State::idle()",
    state(derive(Debug, Clone, PartialEq, Eq)),
    superstate(derive(Debug))
)]
impl SessionMachine {
    /// Root: an input no state accepts ends here (no row is recorded).
    #[superstate]
    fn root(context: &mut SessionData, event: &Input<'_>) -> Outcome<State> {
        let _ = (context, event);
        Handled
    }

    /// Open: its rows, generated from the chart.
    #[superstate(superstate = "root")]
    fn open(context: &mut SessionData, event: &Input<'_>) -> Outcome<State> {
        dispatch::open(context, event)
    }

    /// Busy: its rows, generated from the chart.
    #[superstate(superstate = "open")]
    fn busy(context: &mut SessionData, event: &Input<'_>) -> Outcome<State> {
        dispatch::busy(context, event)
    }

    /// Idle: its rows, generated from the chart.
    #[state(superstate = "open")]
    fn idle(context: &mut SessionData, event: &Input<'_>) -> Outcome<State> {
        dispatch::idle(context, event)
    }

    /// Running: its rows, generated from the chart.
    #[state(superstate = "busy")]
    fn running(context: &mut SessionData, event: &Input<'_>) -> Outcome<State> {
        dispatch::running(context, event)
    }

    /// Aborting: its rows, generated from the chart.
    #[state(superstate = "busy")]
    fn aborting(context: &mut SessionData, event: &Input<'_>) -> Outcome<State> {
        dispatch::aborting(context, event)
    }

    /// Closed: terminal, absorbs every input.
    #[state(superstate = "root")]
    fn closed(context: &mut SessionData, event: &Input<'_>) -> Outcome<State> {
        dispatch::closed(context, event)
    }
}

/// The chart state of a statig state.
pub(crate) fn leaf(state: &State) -> SessionState {
    match state {
        State::Idle {} => SessionState::Idle,
        State::Running {} => SessionState::Running,
        State::Aborting {} => SessionState::Aborting,
        State::Closed {} => SessionState::Closed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::SessionState;

    crate::chart::superstates_are_the_charts_parents!(
        SessionMachine,
        SessionState,
        leaf,
        [
            State::idle(),
            State::running(),
            State::aborting(),
            State::closed()
        ]
    );
}
