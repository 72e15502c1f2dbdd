//! Usage limits of a run: tokens, cost, model calls and tool calls. Planning checks
//! them before each step; a limit reached ends the run with a final-answer request (rows
//! `planning_limit_final`, then `planning_limit_stop`) or at once, as configured.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::message::Usage;

/// Re-exported from [`outcome`](crate::outcome), where they live with the run's [`Outcome`](crate::Outcome)
/// (the `limit_reached` event names them): `react::limits::{LimitAction, LimitKind}` keep naming them.
pub use crate::outcome::{LimitAction, LimitKind};

/// A cost limit: the run's usage priced per million tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CostLimit {
    /// The most the run may spend, in US dollars.
    pub max_usd: f64,
    /// Price of a million input tokens, in US dollars.
    pub input_usd_per_mtok: f64,
    /// Price of a million output tokens, in US dollars.
    pub output_usd_per_mtok: f64,
}

impl CostLimit {
    /// The cost of `usage` at these prices, in US dollars.
    pub fn cost(&self, usage: &Usage) -> f64 {
        (usage.input_tokens as f64 * self.input_usd_per_mtok
            + usage.output_tokens as f64 * self.output_usd_per_mtok)
            / 1_000_000.0
    }
}

/// Per-run usage limits (none by default). Tokens and cost count what the committed steps
/// reported; model calls count every request sent (retries and fallbacks included); tool
/// calls count the calls of committed messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UsageLimits {
    /// Input (prompt) tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Output (completion) tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Input plus output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// Model requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<u64>,
    /// Tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    /// Cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostLimit>,
    /// What reaching one does.
    #[serde(default)]
    pub on_limit: LimitAction,
}

/// The reminder of the final-answer step a reached limit asks for.
pub const LIMIT_REMINDER: &str =
    "A usage limit of this run was reached. Answer now with what you have, without calling tools.";

/// What a run has used so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spent {
    /// Usage the committed steps reported.
    pub usage: Usage,
    /// Model requests sent.
    pub model_calls: u64,
    /// Tool calls of committed messages.
    pub tool_calls: u64,
}

impl UsageLimits {
    /// Whether no limit is set.
    pub fn is_none(&self) -> bool {
        self.input_tokens.is_none()
            && self.output_tokens.is_none()
            && self.total_tokens.is_none()
            && self.model_calls.is_none()
            && self.tool_calls.is_none()
            && self.cost.is_none()
    }

    /// The first limit `spent` reached (used ≥ limit), with what was used and the limit,
    /// in the order of the fields. Pure.
    pub fn reached(&self, spent: &Spent) -> Option<(LimitKind, f64, f64)> {
        let u = &spent.usage;
        let counts = [
            (LimitKind::InputTokens, self.input_tokens, u.input_tokens),
            (LimitKind::OutputTokens, self.output_tokens, u.output_tokens),
            (
                LimitKind::TotalTokens,
                self.total_tokens,
                u.input_tokens + u.output_tokens,
            ),
            (LimitKind::ModelCalls, self.model_calls, spent.model_calls),
            (LimitKind::ToolCalls, self.tool_calls, spent.tool_calls),
        ];
        for (kind, max, used) in counts {
            if let Some(max) = max {
                if used >= max {
                    return Some((kind, used as f64, max as f64));
                }
            }
        }
        let c = self.cost?;
        let used = c.cost(u);
        (used >= c.max_usd).then_some((LimitKind::Cost, used, c.max_usd))
    }
}
