//! The tool-call chart's guards (`statecharts/tool_call.toml`) as pure predicates, one per
//! guard and named after it: the generated dispatch ([`crate::process::call_dispatch`]) calls
//! them to pick a call's row, the chart oracle to check that choice. Each reads slot `i` of the
//! inner machine's data and what the event carries ([`Facts`]), and changes nothing. They are
//! methods of [`Guards`], which implements the generated trait [`ToolCallGuards`]: the
//! compiler ties their names and signatures to the chart.

use crate::event::{ApprovalDecision, GateVerdict, KillPolicy};
use crate::message::{ToolResult, ToolStatus};
use crate::process::call_dispatch::ToolCallGuards;
use crate::process::calls::Calls;
use crate::process::config::{LoopAction, ASK_USER_TOOL};
use crate::tool_rules::RuleAction;

/// What a tool-call event carries beyond the call and the step's data.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Facts<'a> {
    /// Nothing more.
    None,
    /// `Commit`: doom-loop detection's verdict on the call.
    Commit {
        /// The action of the loop policy the call triggered.
        looped: Option<LoopAction>,
        /// How many identical calls in a row end with this one.
        repeats: u32,
    },
    /// `Restore`: the call's result, if the session log holds one.
    Restore {
        /// That result.
        stored: Option<&'a ToolResult>,
    },
    /// `Finished`: what the runtime reported.
    Finished {
        /// The result's status.
        status: ToolStatus,
        /// The result's content.
        content: &'a str,
    },
    /// `Answered`: the person's answer (`None`: nobody can answer).
    Answered(Option<&'a str>),
    /// `Abort` or `Skip`: the kill policy in force.
    Kill(KillPolicy),
    /// `GateAllowed`, `GateModified`, `GateBlocked`, `GateAsked`: the hooks' verdict.
    Gate(&'a GateVerdict),
    /// `Approved`, `Modified`, `Rejected`: the decision the approver answered with.
    Approval(&'a ApprovalDecision),
    /// `Rejected`: the approval timer elapsed before anyone answered (the timeout decision).
    ApprovalTimer(&'a ApprovalDecision),
}

impl Facts<'_> {
    /// The loop policy's action a committed call triggered.
    fn looped(&self) -> Option<LoopAction> {
        match self {
            Facts::Commit { looped, .. } => *looped,
            _ => None,
        }
    }
}

/// The tool-call chart's guards, one method of [`ToolCallGuards`] each.
pub(crate) struct Guards;

impl ToolCallGuards for Guards {
    /// The call's arguments are not a JSON object (not JSON, or cut off).
    fn invalid_arguments(data: &Calls<'_>, i: usize, _: &Facts<'_>) -> bool {
        data.tools.slots.get(i).call.invalid_arguments.is_some()
    }

    /// The step does not offer the called tool.
    fn unknown_tool(data: &Calls<'_>, i: usize, _: &Facts<'_>) -> bool {
        let name = &data.tools.slots.get(i).call.name;
        !data.request.tools.iter().any(|t| t.name == *name)
    }

    /// The runtime's schema check rejected the call's arguments.
    fn schema_violated(data: &Calls<'_>, i: usize, _: &Facts<'_>) -> bool {
        data.tools.slots.get(i).rejected.is_some()
    }

    /// The call completes a doom loop whose policy stops the run.
    fn loop_refused(_: &Calls<'_>, _: usize, facts: &Facts<'_>) -> bool {
        facts.looped() == Some(LoopAction::Stop)
    }

    /// The call completes a doom loop whose policy asks a human.
    fn loop_asks(_: &Calls<'_>, _: usize, facts: &Facts<'_>) -> bool {
        facts.looped() == Some(LoopAction::Ask)
    }

    /// The call is to the built-in `ask_user` tool, which the step offers.
    fn asks_user(data: &Calls<'_>, i: usize, _: &Facts<'_>) -> bool {
        data.cfg.ask_user && data.tools.slots.get(i).call.name == ASK_USER_TOOL
    }

    /// The person answered with text.
    fn answered(_: &Calls<'_>, _: usize, facts: &Facts<'_>) -> bool {
        matches!(facts, Facts::Answered(Some(_)))
    }

    /// The call's deciding tool rule denies it.
    fn denied_by_rule(data: &Calls<'_>, i: usize, _: &Facts<'_>) -> bool {
        let policy = &data.tools.slots.get(i).policy;
        policy.action == RuleAction::Deny && policy.rule.is_some()
    }

    /// A pure tool's identical earlier call has a cached result.
    fn cached(data: &Calls<'_>, i: usize, _: &Facts<'_>) -> bool {
        data.cached(&data.tools.slots.get(i).call).is_some()
    }

    /// The call must be put to a human (a doom-loop question, or its rule (or the approval
    /// map) asks and no "approve always" covers it).
    fn needs_approval(data: &Calls<'_>, i: usize, facts: &Facts<'_>) -> bool {
        let slot = data.tools.slots.get(i);
        facts.looped() == Some(LoopAction::Ask)
            || slot.policy.action == RuleAction::Ask && !data.tools.covers(slot)
    }

    /// The session log holds the resumed call's result.
    fn has_result(_: &Calls<'_>, _: usize, facts: &Facts<'_>) -> bool {
        matches!(facts, Facts::Restore { stored: Some(_) })
    }

    /// The step gates tools through `before_tool` hooks and this call has not been gated yet.
    fn ungated(data: &Calls<'_>, i: usize, _: &Facts<'_>) -> bool {
        data.cfg.gate_tools && !data.tools.slots.get(i).gated
    }

    /// The tool reported success.
    fn succeeded(_: &Calls<'_>, _: usize, facts: &Facts<'_>) -> bool {
        matches!(
            facts,
            Facts::Finished {
                status: ToolStatus::Completed,
                ..
            }
        )
    }

    /// The kill policy in force kills this running call.
    fn killed(data: &Calls<'_>, i: usize, facts: &Facts<'_>) -> bool {
        match facts {
            Facts::Kill(kill) => data.cfg.kills(*kill, &data.tools.slots.get(i).call.name),
            _ => false,
        }
    }

    /// The kill policy in force spares this running call.
    fn immune(data: &Calls<'_>, i: usize, facts: &Facts<'_>) -> bool {
        matches!(facts, Facts::Kill(_)) && !Self::killed(data, i, facts)
    }
}
