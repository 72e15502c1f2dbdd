//! The model request: what one attempt of one step asks of a model (plain data, recorded in traces).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::message::Message;
use crate::tool_spec::ToolSpecs;

/// Sampling parameters passed through to the provider.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelParams {
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Maximum output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

/// One request for one attempt of one model step. Produced by the pure machine
/// (inside `Effect::CallModel`), so it is recorded in traces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelRequest {
    /// The run this step belongs to.
    pub run_id: String,
    /// Step number within the run, from 1 (R-IDEM-1).
    pub model_call_index: u32,
    /// Attempt number within the step, from 1; a retry keeps `model_call_index` (R-IN-6).
    pub attempt: u32,
    /// How many assistant turns the session had committed before this step, over all runs.
    /// Scripted models pick their turn from this, so a resumed session continues its script.
    pub session_turn: u32,
    /// Model name.
    pub model: String,
    /// System prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Conversation context (after compaction), oldest first.
    pub messages: Vec<Message>,
    /// Tools offered for this step (empty on the final step, R-OUT-5).
    #[serde(default)]
    pub tools: ToolSpecs,
    /// Sampling parameters.
    #[serde(default)]
    pub params: ModelParams,
}
