//! agentloop: LLM agents as verified state machines.
//!
//! The crate documentation is the README (its examples are compiled and run as doc tests).
#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

// The pure core, re-exported under the paths it always had.
pub use agentloop_core::{
    agent_event, chart, context, effect, error, event, execute_result, import, inline_tags,
    message, output, process, react, session_log, step, todo, tool_check, tool_rules, trace_diff,
    transcript, whatif, wildcard,
};

pub mod attachment;
pub mod compaction;
pub mod hooks;
pub mod instructions;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod model;
pub mod provider;
#[cfg_attr(
    not(any(feature = "file-store", feature = "builtin-tools")),
    allow(dead_code)
)]
pub mod regular_file;
pub mod runtime;
pub mod session;
pub mod store;
pub mod subagent;
pub mod tools;
pub mod trace;

/// Re-exported so a custom [`tools::Tool`] needs no extra dependency: `#[agentloop::async_trait]`.
pub use async_trait::async_trait;
/// Re-exported so typed tools and typed answers ([`runtime::Agent::run_typed`]) need no extra
/// dependency: `#[derive(agentloop::schemars::JsonSchema)]` with
/// `#[schemars(crate = "agentloop::schemars")]`.
pub use schemars;
/// Re-exported for `#[derive(agentloop::serde::Deserialize)]` (with
/// `#[serde(crate = "agentloop::serde")]`) on typed tool arguments and answers.
pub use serde;

pub use agent_event::{AgentEvent, Outcome};
pub use effect::Effect;
pub use error::{ErrorKind, ModelError, RunError};
pub use event::{ApprovalDecision, ApprovalStatus, AttemptId, Event, GateVerdict};
pub use execute_result::{ExecuteResult, StepEnd, StepRecord};
pub use message::{
    AssistantMessage, ContentPart, MediaSource, Message, MessageDelta, ToolCall, ToolResult,
    ToolStatus, Usage,
};
pub use react::{LoopResult, Run, RunConfig};
pub use step::{AgentState, Step, Transition};
