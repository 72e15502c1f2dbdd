//! The statecharts: generated state/event/row enums, the embedded chart files, and Mermaid
//! rendering (R-ARCH-3).
//!
//! `statecharts/react.toml` and `statecharts/process.toml` are the source of truth. `build.rs`
//! turns them into [`ReactState`], [`ReactEventKind`], [`ReactRow`] (and the `Process*` twins);
//! the machines record which [`ReactRow`]/[`ProcessRow`] every step took, and the conformance
//! tests check each recorded transition against [`RowSpec`].

mod effects;
pub mod model;

pub use effects::{check_effects, effect_name, DeclaredEffect, EffectCheck};
pub use model::Chart;

include!(concat!(env!("OUT_DIR"), "/charts.rs"));

/// The text of `statecharts/react.toml`.
pub const REACT_TOML: &str = include_str!("../../statecharts/react.toml");
/// The text of `statecharts/process.toml`.
pub const PROCESS_TOML: &str = include_str!("../../statecharts/process.toml");
/// The text of `statecharts/tool_call.toml`.
pub const TOOL_CALL_TOML: &str = include_str!("../../statecharts/tool_call.toml");
/// The text of `statecharts/session.toml`.
pub const SESSION_TOML: &str = include_str!("../../statecharts/session.toml");

/// How a row treats the current state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowKind {
    /// Exit/entry run; the state changes or re-enters.
    Transition,
    /// Handled in place.
    Internal,
    /// Accepted and deliberately ignored.
    Ignored,
}

/// One row of a chart, as generated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowSpec<E> {
    /// Row id.
    pub id: &'static str,
    /// Source state or superstate.
    pub from: &'static str,
    /// Event kind.
    pub event: E,
    /// Guard name.
    pub guard: Option<&'static str>,
    /// Target state (== `from` for internal/ignored rows).
    pub to: &'static str,
    /// Row kind.
    pub kind: RowKind,
}

/// Which machine.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum MachineKind {
    /// The outer ReAct machine.
    React,
    /// The inner process machine.
    Process,
    /// The lifecycle of one tool call (owned by the inner machine).
    ToolCall,
    /// The live session (one per session: commands, queue, the run it runs).
    Session,
}

impl MachineKind {
    /// The text of this machine's chart file.
    pub fn toml(self) -> &'static str {
        match self {
            MachineKind::React => REACT_TOML,
            MachineKind::Process => PROCESS_TOML,
            MachineKind::ToolCall => TOOL_CALL_TOML,
            MachineKind::Session => SESSION_TOML,
        }
    }

    /// The embedded chart of this machine.
    pub fn chart(self) -> Chart {
        // The build script validated this exact text; parsing cannot fail at run time.
        Chart::parse(self.toml()).unwrap_or_else(|e| panic!("embedded chart is invalid: {e}"))
    }
}

/// `allows` for a generated row type: whether `from --event--> to` is what the row allows.
macro_rules! row_allows {
    ($row:ty, $state:ty, $event:ty) => {
        impl $row {
            /// Whether `from --event--> to` is what this row allows.
            pub fn allows(self, from: $state, event: $event, to: $state) -> bool {
                let s = self.spec();
                from.is_in(s.from)
                    && s.event == event
                    && match s.kind {
                        RowKind::Transition => to.name() == s.to,
                        RowKind::Internal | RowKind::Ignored => to == from,
                    }
            }
        }
    };
}

row_allows!(ReactRow, ReactState, ReactEventKind);
row_allows!(ProcessRow, ProcessState, ProcessEventKind);
row_allows!(ToolCallRow, ToolCallState, ToolCallEventKind);
row_allows!(SessionRow, SessionState, SessionEventKind);

/// The rows of `all` that a state (named `leaf`, inside `ancestors`, innermost first) may take
/// for `event`, in the order the chart decides: the leaf's rows first, then each enclosing
/// superstate's, each level in chart order. The reference the generated `candidates` tables
/// (one `match`, no search at run time) are checked against.
#[cfg(test)]
fn candidates_in<R: Copy, E: PartialEq + Copy>(
    leaf: &'static str,
    ancestors: &[&'static str],
    all: &[R],
    spec: impl Fn(R) -> RowSpec<E>,
    event: E,
) -> Vec<R> {
    std::iter::once(leaf)
        .chain(ancestors.iter().copied())
        .flat_map(|scope| {
            let spec = &spec;
            all.iter().copied().filter(move |&r| {
                let s = spec(r);
                s.from == scope && s.event == event
            })
        })
        .collect()
}

/// The chart oracle's verdict on one transition: the row the machine took, and the row the
/// chart prescribes — the first candidate whose guard held, evaluated before the machine ran.
/// They differ when a handler tests the wrong condition or takes the wrong row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuardCheck {
    /// Which machine.
    pub machine: MachineKind,
    /// The state before, by chart name.
    pub from: &'static str,
    /// The event kind, by chart name.
    pub event: &'static str,
    /// The row taken (`None`: unhandled).
    pub taken: Option<&'static str>,
    /// The row the guards select (`None`: no row applies).
    pub expected: Option<&'static str>,
    /// Two rows whose non-`otherwise` guards both held, earlier row first, where the earlier
    /// does not declare `wins_over` the later: the chart's order decided by accident.
    pub overlap: Option<(&'static str, &'static str)>,
}

impl GuardCheck {
    /// Whether the machine took the row the chart's guards select, and at most one guard held
    /// unless the chart says which row wins.
    pub fn holds(&self) -> bool {
        self.taken == self.expected && self.overlap.is_none()
    }
}

/// The declared overlaps (`(winner, loser)` row ids, from the rows' `wins_over`) of a machine's
/// embedded chart, parsed once.
pub fn declared_wins(machine: MachineKind) -> &'static [(String, String)] {
    use std::sync::OnceLock;
    static REACT: OnceLock<Vec<(String, String)>> = OnceLock::new();
    static PROCESS: OnceLock<Vec<(String, String)>> = OnceLock::new();
    static TOOL_CALL: OnceLock<Vec<(String, String)>> = OnceLock::new();
    static SESSION: OnceLock<Vec<(String, String)>> = OnceLock::new();
    let cell = match machine {
        MachineKind::React => &REACT,
        MachineKind::Process => &PROCESS,
        MachineKind::ToolCall => &TOOL_CALL,
        MachineKind::Session => &SESSION,
    };
    cell.get_or_init(|| machine.chart().declared_wins())
}

/// The first pair of rows in `holding` (rows whose guards held, in the order the state tries
/// them) where the earlier does not declare in `wins` that it wins over the later.
pub fn undeclared_overlap(
    wins: &[(String, String)],
    holding: &[&'static str],
) -> Option<(&'static str, &'static str)> {
    holding.iter().enumerate().find_map(|(i, &a)| {
        holding[i + 1..]
            .iter()
            .find(|&&b| !wins.iter().any(|(w, l)| w == a && l == b))
            .map(|&b| (a, b))
    })
}

/// The oracle over a state's `candidates` (in the order it tries them): the row the chart
/// prescribes (the first whose guard holds; a row without a guard or with `otherwise` always
/// holds), and an undeclared overlap, if any. Every non-`otherwise` guard up to the first
/// unconditional row is evaluated (rows after it are never tried in this state).
pub(crate) fn oracle<R: Copy, E, G: Copy>(
    machine: MachineKind,
    candidates: &[R],
    spec: impl Fn(R) -> RowSpec<E>,
    guard: impl Fn(R) -> Option<G>,
    mut holds: impl FnMut(G) -> bool,
) -> (Option<R>, Option<(&'static str, &'static str)>) {
    let mut chosen = None;
    let mut holding = Vec::new();
    for &r in candidates {
        let s = spec(r);
        match (s.guard, guard(r)) {
            (Some(name), Some(g)) if name != "otherwise" => {
                if holds(g) {
                    chosen = chosen.or(Some(r));
                    holding.push(s.id);
                }
            }
            _ => {
                chosen = chosen.or(Some(r));
                break;
            }
        }
    }
    let overlap = if holding.len() > 1 {
        undeclared_overlap(declared_wins(machine), &holding)
    } else {
        None
    };
    (chosen, overlap)
}

impl std::fmt::Display for GuardCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} {} --{}--> took row {}, the chart's guards select {}",
            self.machine,
            self.from,
            self.event,
            self.taken.unwrap_or("(none: unhandled)"),
            self.expected.unwrap_or("(none: unhandled)")
        )?;
        if let Some((a, b)) = self.overlap {
            write!(
                f,
                "; the guards of rows {a} and {b} both held and {a} does not declare \
                 `wins_over = [\"{b}\"]` (with a `why`)"
            )?;
        }
        Ok(())
    }
}

/// Renders a chart as a Mermaid `stateDiagram-v2`. Ignored rows are listed in a note, not drawn.
pub fn mermaid(chart: &Chart) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "---\ntitle: {}\n---\nstateDiagram-v2", chart.title);
    let _ = writeln!(out, "    [*] --> {}", chart.initial);
    fn children(chart: &Chart, parent: Option<&str>, depth: usize, out: &mut String) {
        let pad = "    ".repeat(depth);
        for s in chart
            .superstate
            .iter()
            .filter(|s| s.parent.as_deref() == parent)
        {
            let _ = writeln!(out, "{pad}state {} {{", s.name);
            children(chart, Some(&s.name), depth + 1, out);
            let _ = writeln!(out, "{pad}}}");
        }
        for s in chart.state.iter().filter(|s| s.parent.as_deref() == parent) {
            let _ = writeln!(out, "{pad}{}", s.name);
        }
    }
    children(chart, None, 1, &mut out);
    for r in &chart.row {
        if r.kind == model::RowKindDef::Ignored {
            continue;
        }
        let guard = r
            .guard
            .as_ref()
            .map(|g| format!(" [{g}]"))
            .unwrap_or_default();
        let _ = writeln!(out, "    {} --> {} : {}{guard}", r.from, r.to, r.event);
    }
    for s in chart.state.iter().filter(|s| s.terminal) {
        let _ = writeln!(out, "    {} --> [*]", s.name);
    }
    let ignored: Vec<String> = chart
        .row
        .iter()
        .filter(|r| r.kind == model::RowKindDef::Ignored)
        .map(|r| {
            let guard = r
                .guard
                .as_ref()
                .map(|g| format!(" [{g}]"))
                .unwrap_or_default();
            format!("{} ignores {}{guard}", r.from, r.event)
        })
        .collect();
    if !ignored.is_empty() {
        let _ = writeln!(
            out,
            "    note right of {}\n        {}\n    end note",
            chart.initial,
            ignored.join("<br/>\n        ")
        );
    }
    out
}

/// A row a generated dispatch function takes, by variant name, and the guard it calls right
/// before (`None`: taken unconditionally). Test support for the machines' dispatch tests.
#[cfg(test)]
pub(crate) type Tried = (String, Option<String>);

/// The rows each function of a generated dispatch source records, in the order the source
/// tries them (`prefix`: the machine's enum prefix, e.g. `React`). Test support: the machines'
/// tests compare it with the chart's row order.
#[cfg(test)]
pub(crate) fn generated_order(src: &str, prefix: &str) -> Vec<(String, Vec<Tried>)> {
    let take = format!("data.take({prefix}Row::");
    let event = format!("{prefix}EventKind::");
    src.split("pub(crate) fn ")
        .skip(1)
        .map(|f| {
            let name = f.split('(').next().unwrap_or_default().to_string();
            let mut rows = Vec::new();
            let mut last_guard: Option<String> = None;
            for line in f.lines().map(str::trim) {
                if let Some(g) = line.strip_prefix("if guards::") {
                    last_guard = g.split('(').next().map(str::to_string);
                } else if let Some(r) = line.strip_prefix(take.as_str()) {
                    let row = r.split(')').next().unwrap_or_default().to_string();
                    rows.push((row, last_guard.take()));
                } else if line.starts_with(event.as_str()) || line == "}" {
                    last_guard = None;
                }
            }
            (name, rows)
        })
        .collect()
}

#[cfg(test)]
mod oracle_tests {
    use super::*;

    /// Each chart's generated `candidates` table lists, for every leaf state and event, the
    /// rows the chart gives in the order it decides (leaf first, then each superstate).
    #[test]
    fn generated_candidates_are_the_charts_rows_in_order() {
        macro_rules! check {
            ($st:ty, $ev:ty, $row:ty) => {
                let mut listed = 0;
                for &state in <$st>::ALL {
                    for &event in <$ev>::ALL {
                        let want = candidates_in(
                            state.name(),
                            state.ancestors(),
                            <$row>::ALL,
                            <$row>::spec,
                            event,
                        );
                        assert_eq!(state.candidates(event), &want[..], "{state:?} {event:?}");
                        listed += want.len();
                    }
                }
                assert!(
                    listed >= <$row>::ALL.len(),
                    "some rows are never candidates"
                );
            };
        }
        check!(ReactState, ReactEventKind, ReactRow);
        check!(ProcessState, ProcessEventKind, ProcessRow);
        check!(ToolCallState, ToolCallEventKind, ToolCallRow);
        check!(SessionState, SessionEventKind, SessionRow);
    }

    /// The oracle over AwaitingApproval's rows for an elapsed timer, whose guards hold as
    /// `holds` says (by row position among the guarded candidates).
    fn awaiting_timer(
        holds: impl Fn(usize) -> bool,
    ) -> (Option<ProcessRow>, Option<(&'static str, &'static str)>) {
        let candidates = ProcessState::AwaitingApproval.candidates(ProcessEventKind::TimerElapsed);
        let mut n = 0;
        oracle(
            MachineKind::Process,
            candidates,
            ProcessRow::spec,
            ProcessRow::guard,
            |_| {
                n += 1;
                holds(n - 1)
            },
        )
    }

    /// Two guards that hold together without a `wins_over` between them are an overlap the
    /// oracle reports (the timed-out rows' guards are meant to be disjoint); one that holds
    /// alone is not, and the first that holds is the row prescribed (R-ARCH-3).
    #[test]
    fn the_oracle_reports_two_undeclared_guards_that_hold_together() {
        let (row, overlap) = awaiting_timer(|_| true);
        assert_eq!(row, Some(ProcessRow::AwaitingTimedOut));
        assert_eq!(
            overlap,
            Some(("awaiting_timed_out", "awaiting_timed_out_stop"))
        );
        let (row, overlap) = awaiting_timer(|i| i == 1);
        assert_eq!(row, Some(ProcessRow::AwaitingTimedOutStop));
        assert_eq!(overlap, None);
        assert_eq!(awaiting_timer(|_| false).1, None);
    }
}
