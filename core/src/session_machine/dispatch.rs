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
    use crate::chart::{Chart, SessionRow, Tried, SESSION_TOML};

    /// R-ARCH-3: the generated dispatch tries each scope's rows for an event in the order the
    /// TOML lists them, each behind the guard the TOML gives it, and every row once.
    #[test]
    fn r_arch_3_generated_session_dispatch_tries_rows_in_chart_order() {
        let chart = Chart::parse(SESSION_TOML).expect("chart");
        let order = crate::chart::generated_order(
            include_str!("../generated/session_dispatch.rs"),
            "Session",
        );
        let mut tried = 0;
        for (func, rows) in &order {
            let Some(scope) = crate::chart::scope_of(&chart, func) else {
                continue;
            };
            let want: Vec<Tried> = chart
                .row
                .iter()
                .filter(|r| r.from == *scope)
                .map(|r| {
                    let row = SessionRow::ALL
                        .iter()
                        .find(|x| x.spec().id == r.id)
                        .expect("generated row");
                    (format!("{row:?}"), r.guard.clone())
                })
                .collect();
            // Rows of one event are contiguous in the source; compare per event.
            for (row, guard) in &want {
                let got = rows.iter().find(|(r, _)| r == row);
                assert_eq!(got, Some(&(row.clone(), guard.clone())), "{scope}: {row}");
            }
            let got_order: Vec<&String> = rows.iter().map(|(r, _)| r).collect();
            let mut events: Vec<&str> = Vec::new();
            for r in chart.row.iter().filter(|r| r.from == *scope) {
                if !events.contains(&r.event.as_str()) {
                    events.push(&r.event);
                }
            }
            let want_order: Vec<&String> = events
                .iter()
                .flat_map(|e| {
                    want.iter()
                        .zip(chart.row.iter().filter(|r| r.from == *scope))
                        .filter(move |(_, r)| r.event == *e)
                        .map(|((w, _), _)| w)
                })
                .collect();
            assert_eq!(got_order, want_order, "{scope}: rows in chart order");
            tried += rows.len();
        }
        assert_eq!(tried, SessionRow::ALL.len(), "every row is dispatched once");
    }
}
