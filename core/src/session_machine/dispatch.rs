//! The session machine's dispatch, `core/src/generated/session_dispatch.rs`, written by `cargo run -p agentloop-codegen` from
//! `statecharts/session.toml`
//! (see [`crate::react::dispatch`] for the scheme): which row, which target, the chart's.

use statig::blocking::*;

use super::actions::Actions;
use super::data::SessionData;
use super::guards::Guards;
use super::machine::State;
use super::SessionInput as Input;
use crate::chart::{SessionEventKind, SessionGuard, SessionRow, SessionState};

include!("../generated/session_dispatch.rs");

/// The chart event an input stands for.
pub(crate) fn event_kind(input: &Input<'_>) -> SessionEventKind {
    match input {
        Input::Prompt { .. } => SessionEventKind::Prompt,
        Input::Steer { .. } => SessionEventKind::Steer,
        Input::Subtask => SessionEventKind::Subtask,
        Input::Abort { .. } => SessionEventKind::Abort,
        Input::RunEnded { .. } => SessionEventKind::RunEnded,
        Input::SwitchModel { .. } => SessionEventKind::SwitchModel,
        Input::ToolsChanged => SessionEventKind::ToolsChanged,
        Input::ApprovalAnswered { .. } => SessionEventKind::ApprovalAnswered,
        Input::Close => SessionEventKind::Close,
    }
}

/// The generated dispatch's classification (every input is a chart event).
fn chart_event(_: &SessionData, input: &Input<'_>) -> Option<SessionEventKind> {
    Some(event_kind(input))
}

#[cfg(test)]
mod tests {
    use crate::chart::{SessionRow, SESSION_TOML};

    /// R-ARCH-3: the generated dispatch tries each scope's rows for an event in the order the
    /// TOML lists them, each behind the guard the TOML gives it, and every row once.
    #[test]
    fn r_arch_3_generated_session_dispatch_tries_rows_in_chart_order() {
        crate::chart::check_dispatch_order(
            SESSION_TOML,
            include_str!("../generated/session_dispatch.rs"),
            "Session",
            SessionRow::ALL,
            |r| r.spec().id,
        );
    }
}
