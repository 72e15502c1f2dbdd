//! `Step`: what one `handle` call did — the transitions it took (with chart rows) and the
//! effects it requested. A step is also a trace record.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::chart::{
    ProcessEventKind, ProcessRow, ProcessState, ReactEventKind, ReactRow, ReactState,
    ToolCallEventKind, ToolCallRow, ToolCallState,
};
use crate::effect::Effect;

/// One transition of one machine, with the chart row it followed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "machine", rename_all = "snake_case")]
pub enum Transition {
    /// The outer machine.
    React {
        /// State before.
        from: ReactState,
        /// Event kind.
        event: ReactEventKind,
        /// State after.
        to: ReactState,
        /// The chart row taken (`None` only when unhandled).
        row: Option<ReactRow>,
        /// No state accepted the event.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        unhandled: bool,
    },
    /// The inner machine.
    Process {
        /// State before.
        from: ProcessState,
        /// Event kind.
        event: ProcessEventKind,
        /// State after.
        to: ProcessState,
        /// The chart row taken (`None` only when unhandled).
        row: Option<ProcessRow>,
        /// No state accepted the event.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        unhandled: bool,
    },
    /// One tool call's lifecycle (moved by the inner machine; never unhandled).
    ToolCall {
        /// The call's position in the committed message (ids may repeat in a malformed one).
        index: usize,
        /// The call's id.
        call: String,
        /// State before.
        from: ToolCallState,
        /// Event kind.
        event: ToolCallEventKind,
        /// State after.
        to: ToolCallState,
        /// The chart row taken.
        row: ToolCallRow,
    },
}

impl Transition {
    /// Whether the transition is allowed by its chart: a handled event must name a row whose
    /// source contains `from`, whose event is `event`, and whose target is `to`; an unhandled
    /// event must leave the state unchanged.
    pub fn conforms(&self) -> bool {
        match *self {
            Transition::React {
                from,
                event,
                to,
                row,
                unhandled,
            } => match row {
                Some(r) => !unhandled && r.allows(from, event, to),
                None => unhandled && from == to,
            },
            Transition::Process {
                from,
                event,
                to,
                row,
                unhandled,
            } => match row {
                Some(r) => !unhandled && r.allows(from, event, to),
                None => unhandled && from == to,
            },
            Transition::ToolCall {
                from,
                event,
                to,
                row,
                ..
            } => row.allows(from, event, to),
        }
    }

    /// Whether the state changed.
    pub fn changed(&self) -> bool {
        match self {
            Transition::React { from, to, .. } => from != to,
            Transition::Process { from, to, .. } => from != to,
            Transition::ToolCall { from, to, .. } => from != to,
        }
    }
}

/// The state of a run: the outer state and, while a step exists, the inner state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AgentState {
    /// Outer machine.
    pub react: ReactState,
    /// Inner machine of the current step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessState>,
}

impl std::fmt::Display for AgentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.process {
            Some(p) => write!(f, "{}.{}", self.react.name(), p.name()),
            None => f.write_str(self.react.name()),
        }
    }
}

/// What one [`crate::react::Run::handle`] call did. Its effects must be performed (or, in a
/// replay, compared): dropping a step loses them.
#[must_use = "a step's effects must be performed"]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Step {
    /// State before.
    pub from: AgentState,
    /// The input event's name.
    pub event: std::borrow::Cow<'static, str>,
    /// State after (internal events ran to completion).
    pub to: AgentState,
    /// Effects requested, in order.
    pub effects: Vec<Effect>,
    /// Whether no state accepted the input event.
    pub unhandled: bool,
    /// Every transition taken, outer and inner, in order.
    pub transitions: Vec<Transition>,
    /// The chart oracle's verdict on each transition, in the same order (not recorded in
    /// traces: replay re-derives it).
    #[serde(skip)]
    #[schemars(skip)]
    pub guard_checks: Vec<crate::chart::GuardCheck>,
}

impl Step {
    /// The transitions whose row is not the one the chart's guards select.
    pub fn guard_violations(&self) -> Vec<crate::chart::GuardCheck> {
        self.guard_checks
            .iter()
            .filter(|c| !c.holds())
            .copied()
            .collect()
    }
}
