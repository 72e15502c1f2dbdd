//! agentloop: LLM agents as verified state machines.
//!
//! The crate documentation is the README (its examples are compiled and run as doc tests).
#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod agent_event;
pub mod chart;
pub mod compaction;
pub mod context;
pub mod effect;
pub mod error;
pub mod event;
pub mod hooks;
pub mod message;
pub mod model;
pub mod process;
pub mod provider;
pub mod react;
pub mod step;
pub mod store;
pub mod subagent;
pub mod tools;

pub use agent_event::{AgentEvent, Outcome};
pub use effect::Effect;
pub use error::{ErrorKind, ModelError};
pub use event::{ApprovalDecision, AttemptId, Event};
pub use message::{
    AssistantMessage, Message, MessageDelta, ToolCall, ToolResult, ToolStatus, Usage,
};
pub use react::{LoopResult, Run, RunConfig};
pub use step::{AgentState, Step, Transition};
pub mod runtime;
pub mod session;
pub mod trace;
