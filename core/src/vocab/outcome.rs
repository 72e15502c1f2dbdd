//! How a run ends: its [`Outcome`], and the usage limits that can end it ([`LimitKind`], with
//! what reaching one does, [`LimitAction`]). Small enums the observable events, the session
//! entries, the errors and the machines all name, so they live below all of them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Ended normally.
    Completed,
    /// Ended with an error.
    Failed,
    /// Aborted.
    Aborted,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Outcome {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Aborted => "aborted",
        }
    }
}

/// What a run does when it reaches a usage limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LimitAction {
    /// One more step without tools, with [`LIMIT_REMINDER`](crate::react::limits::LIMIT_REMINDER), for a final answer (like the
    /// step limit, R-OUT-5); that request is the one model call beyond a `model_calls` limit.
    #[default]
    FinalAnswer,
    /// End the run at once (a hard cap).
    Stop,
}

/// Which limit a run reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// [`UsageLimits::input_tokens`](crate::react::limits::UsageLimits::input_tokens).
    InputTokens,
    /// [`UsageLimits::output_tokens`](crate::react::limits::UsageLimits::output_tokens).
    OutputTokens,
    /// [`UsageLimits::total_tokens`](crate::react::limits::UsageLimits::total_tokens).
    TotalTokens,
    /// [`UsageLimits::model_calls`](crate::react::limits::UsageLimits::model_calls).
    ModelCalls,
    /// [`UsageLimits::tool_calls`](crate::react::limits::UsageLimits::tool_calls).
    ToolCalls,
    /// [`UsageLimits::cost`](crate::react::limits::UsageLimits::cost).
    Cost,
}

impl LimitKind {
    /// The snake_case name (the run's end reason is `usage_limit:<name>`).
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::InputTokens => "input_tokens",
            LimitKind::OutputTokens => "output_tokens",
            LimitKind::TotalTokens => "total_tokens",
            LimitKind::ModelCalls => "model_calls",
            LimitKind::ToolCalls => "tool_calls",
            LimitKind::Cost => "cost",
        }
    }

    /// The reason a run ended by this limit records (`usage_limit:<name>`).
    pub fn reason(self) -> String {
        format!("usage_limit:{}", self.as_str())
    }
}
