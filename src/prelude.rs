//! What a typical program imports: `use agentloop::prelude::*;`.
//!
//! The agent and its builder, sessions, messages and events (a closure over an
//! [`EventEnvelope`] is an event sink), the tool traits, the model trait
//! and the offline scripted model, the run configuration and the stores.
//!
//! ```no_run
//! use agentloop::prelude::*;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let agent = Agent::builder().model(ScriptedModel::demo()).builtin_tools().build();
//! let out = agent.run("session-1", "What is 2+3?").await?;
//! assert_eq!(out.result.outcome, Outcome::Completed);
//! # Ok(()) }
//! ```

#[doc(no_inline)]
pub use crate::model::Model;
#[doc(no_inline)]
pub use crate::provider::scripted::ScriptedModel;
#[doc(no_inline)]
pub use crate::runtime::{Agent, AgentBuilder, AgentError, EventSink, RunOutput};
#[doc(no_inline)]
pub use crate::session::{Session, SessionConfig, SessionError};
#[cfg(feature = "file-store")]
#[doc(no_inline)]
pub use crate::store::FileStore;
#[doc(no_inline)]
pub use crate::store::MemoryStore;
#[doc(no_inline)]
pub use crate::tools::{Tool, ToolContext, ToolError, ToolSpec, TypedTool};
#[doc(no_inline)]
pub use crate::{AgentEvent, EventEnvelope, LoopResult, Message, Outcome, RunConfig};
#[doc(no_inline)]
pub use async_trait::async_trait;
