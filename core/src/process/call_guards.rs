//! The tool-call chart's guards (`statecharts/tool_call.toml`) as pure predicates, and the
//! oracle that picks the row the chart prescribes for a call: the first candidate whose guard
//! holds. The inner machine evaluates it before it moves a call and reports the verdict as a
//! [`GuardCheck`](crate::chart::GuardCheck), as it does for its own rows.

use crate::chart::{MachineKind, ToolCallEventKind, ToolCallGuard, ToolCallRow, ToolCallState};
use crate::event::KillPolicy;
use crate::message::ToolStatus;
use crate::process::config::LoopAction;
use crate::process::data::ProcessData;
use crate::tool_rules::RuleAction;

/// What the cause of a call's move carries beyond the call and the step's data.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Facts {
    /// Nothing more.
    None,
    /// `Commit`: doom-loop detection's verdict on the call.
    Commit {
        /// The action of the loop policy the call triggered.
        looped: Option<LoopAction>,
    },
    /// `Restore`: whether the session log holds the call's result.
    Restore {
        /// It does.
        has_result: bool,
    },
    /// `Finished`: the status the runtime reported.
    Finished(ToolStatus),
    /// `Answered`: whether the answer carries text.
    Answered(bool),
    /// `Abort` or `Skip`: the kill policy in force.
    Kill(KillPolicy),
}

/// Evaluates guard `g` for slot `i`. Pure: reads the data, changes nothing.
fn holds(g: ToolCallGuard, data: &ProcessData, i: usize, facts: Facts) -> bool {
    let slot = data.tools.slots.get(i);
    let looped = match facts {
        Facts::Commit { looped } => looped,
        _ => None,
    };
    match g {
        ToolCallGuard::Otherwise => true,
        ToolCallGuard::InvalidArguments => slot.call.invalid_arguments.is_some(),
        ToolCallGuard::UnknownTool => !data.offers(&slot.call.name),
        ToolCallGuard::SchemaViolated => slot.rejected.is_some(),
        ToolCallGuard::LoopRefused => looped == Some(LoopAction::Stop),
        ToolCallGuard::LoopAsks => looped == Some(LoopAction::Ask),
        ToolCallGuard::AsksUser => data.asks_user(&slot.call),
        ToolCallGuard::Answered => matches!(facts, Facts::Answered(true)),
        ToolCallGuard::DeniedByRule => {
            slot.policy.action == RuleAction::Deny && slot.policy.rule.is_some()
        }
        ToolCallGuard::Cached => data.cached(&slot.call).is_some(),
        ToolCallGuard::NeedsApproval => looped == Some(LoopAction::Ask) || data.needs_approval(i),
        ToolCallGuard::HasResult => matches!(facts, Facts::Restore { has_result: true }),
        ToolCallGuard::Ungated => data.cfg.gate_tools && !slot.gated,
        ToolCallGuard::Succeeded => matches!(facts, Facts::Finished(ToolStatus::Completed)),
        ToolCallGuard::Killed => match facts {
            Facts::Kill(kill) => data.killed_by(kill, &slot.call.name),
            _ => false,
        },
        ToolCallGuard::Immune => match facts {
            Facts::Kill(kill) => !data.killed_by(kill, &slot.call.name),
            _ => false,
        },
    }
}

/// The row the chart prescribes for slot `i` in `state` on `event`, and two rows whose guards
/// both held without the chart saying which wins (see [`crate::chart::oracle`]).
pub(crate) fn expected(
    state: ToolCallState,
    event: ToolCallEventKind,
    data: &ProcessData,
    i: usize,
    facts: Facts,
) -> (Option<ToolCallRow>, Option<(&'static str, &'static str)>) {
    crate::chart::oracle(
        MachineKind::ToolCall,
        state.candidates(event),
        ToolCallRow::spec,
        ToolCallRow::guard,
        |g| holds(g, data, i, facts),
    )
}
