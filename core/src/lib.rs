//! agentloop-core: the pure core of [agentloop](https://docs.rs/agentloop).
//!
//! Everything here is plain data and pure functions: the two statig machines (outer
//! [`react`], inner [`process`]), their input [`event`]s and output [`effect`]s, session
//! [`entry`]s and the session-log functions ([`session_log`]: pairing check, repair, history),
//! the [`model`] request, [`tool_spec`]s, observable [`agent_event`]s, the [`chart`]s generated
//! from `statecharts/*.toml`, and the [`trace`] format with replay.
//!
//! The crate has no async runtime, HTTP, file-system or clock dependency (see its
//! `Cargo.toml`): time, ids and every result from the outside world arrive as [`Event`]s, and
//! everything the machines want done leaves as [`Effect`]s. The `agentloop` crate performs the
//! effects with tokio and re-exports this crate's modules under the same paths.
//!
//! ```
//! use agentloop_core::{Event, Message, Run, RunConfig};
//! let mut run = Run::new(RunConfig::default());
//! let step = run.handle(Event::Start {
//!     run_id: "r1".into(),
//!     history: vec![],
//!     input: vec![Message::user("hi")],
//!     session_turns: 0,
//! });
//! assert_eq!(step.to.to_string(), "Executing.Calling");
//! assert!(step.transitions.iter().all(|t| t.conforms()));
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod agent_event;
pub mod chart;
pub mod context;
pub mod effect;
pub mod entry;
pub mod error;
pub mod event;
pub mod execute_result;
pub mod import;
pub mod inline_tags;
pub mod message;
pub mod model;
pub mod output;
pub mod process;
pub mod react;
pub mod session_log;
pub mod step;
pub mod timeouts;
pub mod todo;
pub mod tool_cache;
pub mod tool_check;
pub mod tool_rules;
pub mod tool_spec;
pub mod trace;
pub mod trace_diff;
pub mod transcript;
pub mod whatif;
pub mod wildcard;

pub use agent_event::{AgentEvent, EventEnvelope, Outcome};
pub use effect::Effect;
pub use entry::{Entry, EntryKey};
pub use error::{ErrorKind, ModelError, RunError};
pub use event::{ApprovalDecision, ApprovalStatus, AttemptId, Event, GateVerdict};
pub use execute_result::{ExecuteResult, StepEnd, StepRecord};
pub use message::{
    AssistantMessage, ContentPart, MediaSource, Message, MessageDelta, ToolCall, ToolResult,
    ToolStatus, Usage,
};
pub use model::{ModelParams, ModelRequest, ToolChoice};
pub use react::{LoopResult, Run, RunConfig};
pub use step::{AgentState, Step, Transition};
pub use tool_spec::{ToolSpec, ToolSpecs};
