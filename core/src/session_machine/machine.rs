//! The session machine as a blocking `statig` machine: statig keeps the hierarchy and the
//! state enum; the `#[state_machine]` impl, generated from `statecharts/session.toml`
//! (`generated/session_machine.rs`), has each state's handler call its dispatch function
//! ([`super::dispatch`]), which picks the row, records it and runs its action.

use statig::blocking::*;

use super::data::SessionData;
use super::dispatch;
use super::SessionInput as Input;

/// The statig machine; all data lives in the context ([`SessionData`]).
#[derive(Debug, Default)]
pub(crate) struct SessionMachine;

include!("../generated/session_machine.rs");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::SessionState;

    crate::chart::superstates_are_the_charts_parents!(
        SessionMachine,
        SessionState,
        kind,
        [
            State::idle(),
            State::running(),
            State::aborting(),
            State::closed()
        ]
    );
}
