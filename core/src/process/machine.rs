//! The inner process machine as a blocking `statig` machine (crate-private; see
//! [`crate::process::Process`] for the facade). statig keeps the hierarchy and the state enum;
//! each state's handler calls its dispatch function, generated from `statecharts/process.toml`
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

#[state_machine(
    initial = "State::idle()",
    state(derive(Debug, Clone, PartialEq, Eq)),
    superstate(derive(Debug))
)]
impl ProcessMachine {
    /// Root: every event no state accepted ends here and is reported as unhandled.
    #[superstate]
    fn root(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        let _ = event;
        context.outbox.unhandled = true;
        Handled
    }

    /// Idle: its rows, generated from the chart.
    #[state(superstate = "root")]
    fn idle(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        dispatch::idle(context, event)
    }

    /// Live (a request or the tools in progress): its rows, generated from the chart (an
    /// abort; an event for another attempt, or a duplicate, is ignored).
    #[superstate(superstate = "root")]
    fn live(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        dispatch::live(context, event)
    }

    /// Requesting (a model call in progress): its rows, generated from the chart.
    #[superstate(
        superstate = "live",
        entry_action = "enter_requesting",
        exit_action = "exit_requesting"
    )]
    fn requesting(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        dispatch::requesting(context, event)
    }

    /// Calling: its rows, generated from the chart.
    #[state(superstate = "requesting")]
    fn calling(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        dispatch::calling(context, event)
    }

    /// Streaming: its rows, generated from the chart.
    #[state(superstate = "requesting")]
    fn streaming(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        dispatch::streaming(context, event)
    }

    /// Retrying: its rows, generated from the chart.
    #[state(
        superstate = "live",
        entry_action = "enter_retrying",
        exit_action = "exit_retrying"
    )]
    fn retrying(
        context: &mut ProcessData,
        local: &mut Backoff,
        event: &Input<'_>,
    ) -> Outcome<State> {
        dispatch::retrying(context, local, event)
    }

    /// Entering `Requesting`: the chart's entry action (sends the attempt's request).
    #[action]
    fn enter_requesting(context: &mut ProcessData) {
        dispatch::enter_requesting(context);
    }

    /// Leaving `Requesting`: the chart's exit action (ends an attempt still in flight).
    #[action]
    fn exit_requesting(context: &mut ProcessData) {
        dispatch::exit_requesting(context);
    }

    /// Entering `Retrying`: the chart's entry action (starts the backoff timer).
    #[action]
    fn enter_retrying(context: &mut ProcessData, local: &mut Backoff) {
        dispatch::enter_retrying(context, local);
    }

    /// Leaving `Retrying`: the chart's exit action (cancels a backoff timer still armed).
    #[action]
    fn exit_retrying(context: &mut ProcessData, local: &mut Backoff) {
        dispatch::exit_retrying(context, local);
    }

    /// ToolExecuting (the committed message's calls): its rows, generated from the chart.
    #[superstate(superstate = "live")]
    fn tool_executing(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        dispatch::tool_executing(context, event)
    }

    /// Proceeding (the calls go on, not draining): its rows, generated from the chart.
    #[superstate(superstate = "tool_executing")]
    fn proceeding(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        dispatch::proceeding(context, event)
    }

    /// RunningTools: its rows, generated from the chart.
    #[state(superstate = "proceeding")]
    fn running_tools(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        dispatch::running_tools(context, event)
    }

    /// AwaitingApproval: its rows, generated from the chart.
    #[state(superstate = "proceeding")]
    fn awaiting_approval(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        dispatch::awaiting_approval(context, event)
    }

    /// Draining: its rows, generated from the chart.
    #[state(superstate = "tool_executing")]
    fn draining(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        dispatch::draining(context, event)
    }

    /// Success: terminal, absorbs every event (reported unhandled).
    #[state(superstate = "root")]
    fn success(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        dispatch::success(context, event)
    }

    /// Error: terminal, absorbs every event (reported unhandled).
    #[state(superstate = "root")]
    fn error(context: &mut ProcessData, event: &Input<'_>) -> Outcome<State> {
        dispatch::error(context, event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::ProcessState;

    crate::chart::superstates_are_the_charts_parents!(
        ProcessMachine,
        ProcessState,
        crate::process::kind,
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
