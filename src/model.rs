//! The model port: what the runtime asks of a model client, and the request it sends.

use std::pin::Pin;

use async_trait::async_trait;
use futures::Stream;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::ModelError;
use crate::message::{Message, MessageDelta};
use crate::tools::ToolSpec;

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
    pub tools: Vec<ToolSpec>,
    /// Sampling parameters.
    #[serde(default)]
    pub params: ModelParams,
}

/// The stream of normalized deltas of one attempt. It should end with
/// [`MessageDelta::Finish`]; ending without it is an incomplete stream.
pub type DeltaStream = Pin<Box<dyn Stream<Item = Result<MessageDelta, ModelError>> + Send>>;

/// A streaming model client (R-ARCH-4). Implementations must not retry on their own (R-IN-6):
/// the machine decides retries.
#[async_trait]
pub trait Model: Send + Sync {
    /// A short name for logs and traces (e.g. `scripted`, `openai:gpt-4o`).
    fn name(&self) -> String;

    /// Opens a stream for `request`. `Ok` means the response has started (headers received);
    /// `Err` is a failure before any delta (HTTP status, connect error, ...).
    async fn stream(&self, request: ModelRequest) -> Result<DeltaStream, ModelError>;
}
