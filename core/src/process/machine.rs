//! The inner process machine as a blocking `statig` machine (crate-private; see
//! [`crate::process::Process`] for the facade). statig keeps the hierarchy and the state enum;
//! the `#[state_machine]` impl, generated from `statecharts/process.toml`
//! (`generated/process_machine.rs`), has each state's handler call its dispatch function
//! ([`crate::process::dispatch`]), which picks the row, records it and runs its action (pure:
//! effects go to the data's outbox).

use statig::blocking::*;

use crate::event::Event;
use crate::message::{AssistantMessage, ToolResult};
use crate::process::context::Backoff;
use crate::process::data::ProcessData;
use crate::process::dispatch;

/// What the facade feeds the machine: an external event, or one of its own internal events.
#[derive(Debug)]
pub(crate) enum Input<'a> {
    /// Start the step.
    Begin,
    /// Resume a committed message's unanswered tool calls.
    Resume(&'a AssistantMessage, &'a [ToolResult]),
    /// An event from outside.
    Ext(&'a Event),
    /// Decide what comes next after landing in RunningTools.
    Settle,
}

/// The statig machine. What spans states lives in the context ([`ProcessData`]); a state's own
/// data lives in the state (statig state-local storage, the chart's `local`): `Retrying`'s
/// [`Backoff`]. Entering `Requesting` sends the attempt's request and leaving it ends an
/// attempt still in flight; entering `Retrying` starts the backoff timer and leaving it cancels
/// one that has not fired (the chart's entry and exit actions).
#[derive(Debug, Default)]
pub(crate) struct ProcessMachine;

include!("../generated/process_machine.rs");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::ProcessState;

    crate::chart::superstates_are_the_charts_parents!(
        ProcessMachine,
        ProcessState,
        kind,
        [
            State::idle(),
            State::calling(),
            State::streaming(),
            State::retrying(Backoff::default()),
            State::running_tools(),
            State::awaiting_approval(),
            State::draining(),
            State::success(),
            State::error()
        ]
    );
}
