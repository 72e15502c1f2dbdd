//! The inner process machine's dispatch, `core/src/generated/process_dispatch.rs`, written by `cargo run -p agentloop-codegen` from
//! `statecharts/process.toml` (the same generator as the outer machine's,
//! [`crate::react::dispatch`]): for each state and superstate, a function that classifies the
//! input into its chart event ([`chart_event`]), tries the scope's rows for that event in chart
//! order, evaluates each row's guard with its predicate in [`Guards`], and for the first that
//! holds records the row, runs its action in [`Actions`] and returns the row's outcome
//! (`Transition` to its target, `Handled` for an internal or ignored row, `Super` when no row
//! holds). The statig handlers in [`crate::process::machine`] only call these. Whether an event
//! is for the live attempt or call or a stale one is a guard (`current` / `stale`), read from
//! the data: the chart picks the row, never a hand-written function.

use statig::blocking::*;

use crate::chart::{ProcessEventKind, ProcessGuard, ProcessRow, ProcessState};
use crate::event::Event;
use crate::process::actions::Actions;
use crate::process::context::Backoff;
use crate::process::data::ProcessData;
use crate::process::guards::Guards;
use crate::process::machine::{Input, State};

include!("../generated/process_dispatch.rs");

/// The chart event an input stands for (`None`: no row of the inner chart can take it). An
/// approval and a gate verdict are classified by their decision.
pub(crate) fn chart_event(_data: &ProcessData, input: &Input<'_>) -> Option<ProcessEventKind> {
    match input {
        Input::Begin => Some(ProcessEventKind::Begin),
        Input::Resume(..) => Some(ProcessEventKind::Resume),
        Input::Ext(e) => crate::route::route(e).process,
        Input::Settle => Some(ProcessEventKind::Settle),
    }
}

/// Work the guards and the actions share, done once before the oracle and the dispatch run
/// (the guards only read): the slot of the tool call the input answers — a running call for a
/// result, a call being asked about for an approval or a question (or whose approval timer
/// fired), a call being gated for a hooks' verdict — or `None` (a stale answer, or another
/// input).
pub(crate) fn prepare(data: &mut ProcessData, input: &Input<'_>) {
    use crate::chart::ToolCallState as S;
    let (tools, step) = (&data.tools, data.attempt.request.model_call_index);
    let find = |tool_call_id: &str, state| tools.slots.find(tool_call_id, state);
    data.tools.answered = match input {
        Input::Ext(Event::ToolFinished { tool_call_id, .. }) => find(tool_call_id, S::Running),
        Input::Ext(Event::Approval { tool_call_id, .. }) => find(tool_call_id, S::Asking),
        Input::Ext(Event::ToolGated { tool_call_id, .. }) => find(tool_call_id, S::Gating),
        Input::Ext(Event::UserAnswered { tool_call_id, .. }) => find(tool_call_id, S::AwaitingUser),
        Input::Ext(Event::TimerElapsed { timer_id }) => tools.approval_timer_of(*timer_id, step),
        _ => None,
    };
}

#[cfg(test)]
mod tests {
    use crate::chart::{ProcessRow, PROCESS_TOML};

    /// The generated dispatch of the inner machine tries each scope's rows in the order the
    /// TOML lists them, each behind the guard the TOML gives it, and takes every row from its
    /// own scope's function exactly once (the stale rows of `Live` included).
    #[test]
    fn generated_dispatch_tries_rows_in_chart_order() {
        crate::chart::check_dispatch_order(
            PROCESS_TOML,
            include_str!("../generated/process_dispatch.rs"),
            "Process",
            ProcessRow::ALL,
            |r| r.spec().id,
        );
    }
}
