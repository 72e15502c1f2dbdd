//! The model port: what the runtime asks of a model client, and the request it sends.
//!
//! # Example
//!
//! Every model, the offline scripted one or an HTTP client, is a [`Model`]; the agent builder
//! takes any of them:
//!
//! ```
//! use std::sync::Arc;
//!
//! use agentloop::model::Model;
//! use agentloop::prelude::*;
//!
//! let model: Arc<dyn Model> = Arc::new(ScriptedModel::demo());
//! assert_eq!(model.name(), "scripted");
//! let agent = Agent::builder().model(ScriptedModel::demo()).build();
//! # let _ = agent;
//! ```

use std::pin::Pin;

use async_trait::async_trait;
use futures::Stream;

use crate::error::ModelError;
use crate::message::MessageDelta;

pub use agentloop_core::model::{ModelParams, ModelRequest, ToolChoice};

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
