//! Configuration of a run, the run result, and Observing's replaceable decision (R-OUT-3).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::agent_event::Outcome;
use crate::message::{Message, Usage};
use crate::model::ModelParams;
use crate::process::StepConfig;
use crate::tool_spec::ToolSpec;

/// What Observing sees.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// The committed message had tool calls.
    pub has_tool_calls: bool,
    /// Steering messages wait to be merged.
    pub steering_pending: bool,
    /// Something (a doom loop with action `stop`, a hook) asked to stop.
    pub stop_requested: bool,
    /// The context is over its budget (from reported usage or the estimate).
    pub over_budget: bool,
    /// Steps committed so far in this run.
    pub steps: u32,
    /// The run's `max_steps`.
    pub max_steps: u32,
}

/// What Observing decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Stop the run now (`Completed`, reason `stopped`).
    Stop,
    /// Compact, then continue.
    Compact,
    /// Plan the next step.
    Continue,
    /// The message is the final answer.
    Complete,
}

/// Observing's decision function (R-OUT-3): a plain function, so it stays pure and replaceable.
pub type Decider = fn(&Observation) -> Decision;

/// The default decision: continue after tool calls (compacting first when over budget),
/// complete otherwise.
pub fn default_decider(o: &Observation) -> Decision {
    if o.stop_requested {
        return Decision::Stop;
    }
    match (o.has_tool_calls || o.steering_pending, o.over_budget) {
        (true, true) => Decision::Compact,
        (true, false) => Decision::Continue,
        (false, _) => Decision::Complete,
    }
}

/// What steering does to the running tool batch (R-CTL-2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SteeringPolicy {
    /// The batch finishes; the message joins the next model call.
    #[default]
    DeliverAtBoundary,
    /// Calls not yet started are skipped; killable running calls are killed.
    SkipRemaining,
}

/// The reminder appended on the last allowed step (R-OUT-5).
pub const FINAL_REMINDER: &str =
    "Maximum steps reached. Answer now with what you have, without calling tools.";

/// Configuration of a run (R-OUT-2).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct RunConfig {
    /// Model name.
    pub model: String,
    /// System prompt.
    #[serde(default)]
    pub system: Option<String>,
    /// Tools offered to the model.
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    /// Sampling parameters.
    #[serde(default)]
    pub params: ModelParams,
    /// Maximum model steps per run; the last one gets the reminder and no tools.
    pub max_steps: u32,
    /// Inner-machine configuration (retries, approvals, parallel tools).
    #[serde(default)]
    pub step: StepConfig,
    /// Compact when the context has more messages than this.
    #[serde(default)]
    pub compact_threshold: Option<usize>,
    /// Context window budget in tokens.
    #[serde(default)]
    pub context_budget_tokens: Option<u64>,
    /// Compact when tokens reach `budget * compact_ratio`.
    pub compact_ratio: f64,
    /// Text of the final-step reminder.
    pub final_reminder: String,
    /// What steering does to a running tool batch.
    #[serde(default)]
    pub steering: SteeringPolicy,
    /// Observing's decision function.
    #[serde(skip, default = "default_decider_fn")]
    #[schemars(skip)]
    pub decide: Decider,
}

fn default_decider_fn() -> Decider {
    default_decider
}

impl PartialEq for RunConfig {
    fn eq(&self, other: &Self) -> bool {
        // The decider is compared by behaviour elsewhere; configs compare by data.
        serde_json::to_value(self).ok() == serde_json::to_value(other).ok()
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            model: "scripted".into(),
            system: None,
            tools: Vec::new(),
            params: ModelParams::default(),
            max_steps: 10,
            step: StepConfig::default(),
            compact_threshold: None,
            context_budget_tokens: None,
            compact_ratio: 0.8,
            final_reminder: FINAL_REMINDER.into(),
            steering: SteeringPolicy::default(),
            decide: default_decider,
        }
    }
}

/// The result of a run (R-OUT-1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LoopResult {
    /// How it ended.
    pub outcome: Outcome,
    /// Why (`final_answer`, `max_steps`, `stopped`, `aborted: ...`, the error).
    pub reason: String,
    /// The context at the end (history + this run's messages, after compaction).
    pub messages: Vec<Message>,
    /// Model steps committed.
    pub iterations: u32,
    /// Usage of the run.
    pub usage: Usage,
    /// The error, when failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl LoopResult {
    /// The text of the last assistant message, if any.
    pub fn final_text(&self) -> Option<&str> {
        self.messages.iter().rev().find_map(|m| match m {
            Message::Assistant(a) => Some(a.text.as_str()),
            _ => None,
        })
    }
}
