//! agentloop-core: the pure core of [agentloop](https://docs.rs/agentloop), LLM agents as
//! verified state machines.
//!
//! Everything here is plain data and pure functions: the two statig machines (outer
//! [`react`], one per run; inner [`process`], one per model step, which also moves each tool
//! call along its own lifecycle), their input [`event`]s and output [`effect`]s, session
//! [`entry`]s and the session-log functions ([`session_log`]: pairing check, repair, history),
//! the [`model`] request, [`tool_spec`]s, observable [`agent_event`]s, the [`chart`]s generated
//! from `statecharts/*.toml`, and the [`trace`] format with replay. Transcripts, trace diff,
//! what-if replay and conversation import over traces are the `agentloop-trace-tools` crate.
//!
//! # Layout
//!
//! The directories show the parts; the public paths stay flat (`agentloop_core::message`, …),
//! and dependencies go one way: each part names only the parts listed before it.
//!
//! * `vocab/`: the plain data everything else speaks — [`message`], [`event`], [`effect`],
//!   [`entry`], [`agent_event`], [`error`], [`step`], [`model`], [`tool_spec`], the run's
//!   [`outcome`] and the rest; it names only itself and the generated [`chart`] enums.
//! * `policy/`: pure decisions the machines consult — [`tool_rules`] and their [`wildcard`]s,
//!   the [`tool_cache`], [`context`] compaction, [`inline_tags`], [`timeouts`]; they name only
//!   the vocabulary.
//! * [`chart`], [`react`], [`process`], [`session_machine`]: the charts and the machines
//!   generated from them.
//! * [`trace`] and [`session_log`]: the recorded run and replay, the session log's functions.
//!
//! # The no-IO rule
//!
//! The crate has no async runtime, HTTP, file-system or clock dependency (see its
//! `Cargo.toml`; CI checks the dependency tree and a test scans the sources): time, ids and
//! every result from the outside world arrive as [`Event`]s, and everything the machines want
//! done leaves as [`Effect`]s. The `agentloop` crate performs the effects with tokio and
//! re-exports this crate's modules under the same paths; depend on this crate directly only to
//! write a driver of your own, or to work with traces and charts without a runtime.
//!
//! # Where to start
//!
//! * [`Run`]: one run of the outer machine. [`Run::handle`] is the one mutation point: an
//!   [`Event`] in, a [`Step`] out (the [`Transition`]s taken, each with its chart row, the guard
//!   checks, and the [`Effect`]s to perform).
//! * [`RunConfig`]: max steps, retries, deciders, limits, tool rules and the rest of a run's
//!   configuration; it is recorded in every trace's header.
//! * [`trace::Trace`] and [`trace::replay`]: a recorded run and its offline replay.
//! * [`chart::MachineKind`]: the three charts, as data, TOML and Mermaid.
//!
//! # Driving a run by hand
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
//! assert!(step.effects.iter().any(|e| matches!(e, agentloop_core::Effect::CallModel { .. })));
//! ```
//!
//! A driver performs each effect and feeds its result back as the next event; replay, the
//! property tests and the fuzz targets work exactly this way.
#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![forbid(unsafe_code)]

mod named_fn;
mod outbox;
mod policy;
mod vocab;

pub mod chart;
pub mod process;
pub mod react;
pub mod route;
pub mod session_log;
pub mod session_machine;
pub mod trace;

pub use policy::{context, inline_tags, timeouts, tool_cache, tool_rules, wildcard};
pub use vocab::{
    agent_event, effect, entry, error, event, execute_result, message, model, outcome, output,
    step, todo, tool_check, tool_spec,
};

pub use agent_event::{AgentEvent, EventEnvelope};
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
pub use outcome::Outcome;
pub use react::{LoopResult, Run, RunConfig};
pub use step::{AgentState, Step, Transition};
pub use tool_spec::{ToolSpec, ToolSpecs};
