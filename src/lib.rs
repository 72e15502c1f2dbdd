//! agentloop: LLM agents as verified state machines.
//!
//! An agent's loop (call the model, run the tools it asks for, retry, ask a human, compact,
//! stop) is decided by pure state machines from [`agentloop_core`], each transition a row of a
//! written chart. This crate is the runtime around them: it performs the effects the machines
//! return (model requests, tool calls, session writes, timers, events) with tokio and feeds the
//! results back as events. Because the machines decide everything, every run can be recorded
//! as a trace and replayed offline, and a crash never runs a started tool twice.
//!
//! # Where to start
//!
//! * [`prelude`]: `use agentloop::prelude::*;` brings what a typical program names (the agent,
//!   sessions, messages, events, the tool and model traits, the scripted model, the stores).
//! * [`runtime::Agent`]: build an agent with [`runtime::Agent::builder`] (a model, tools, an
//!   event sink, a store, a configuration) and run prompts: [`runtime::Agent::run`],
//!   [`runtime::Agent::run_with`], [`runtime::Agent::run_typed`] for a JSON answer of a type,
//!   [`runtime::Agent::run_stream`] for the events as a stream, [`runtime::Agent::resume`] to
//!   continue an interrupted run.
//! * [`session::Session`]: a long-lived conversation as an actor, from
//!   [`session::Session::spawn`]: prompts queued while a run is going, steering, abort,
//!   approvals, model switches, tool changes, event subscriptions, status and metrics.
//! * Models ([`model::Model`]): [`provider::scripted::ScriptedModel`] (offline, scripted; its
//!   [`demo`](provider::scripted::ScriptedModel::demo) computes arithmetic with the calculator
//!   tool), and with features `openai` / `anthropic` / `openai-responses` the streaming HTTP
//!   clients, built by `provider::http::build_model`.
//! * Tools ([`tools`]): the [`tools::Tool`] and [`tools::TypedTool`] traits, the built-ins
//!   (feature `builtin-tools`), MCP servers (feature `mcp`), subagents ([`subagent`]).
//! * Stores ([`store`], the crate [`agentloop_store`] re-exported whole):
//!   [`store::MemoryStore`], and with features the JSONL file store (`file-store`), SQLite
//!   (`sqlite-store`) and PostgreSQL (`postgres-store`), which turn on the store crate's `file`,
//!   `sqlite` and `postgres`.
//! * Traces ([`trace`]): the recorded run and [`trace::replay`]. The tools built on traces
//!   (transcripts, trace diff, what-if replay, conversation import) are the
//!   [`agentloop-trace-tools`](https://docs.rs/agentloop-trace-tools) crate.
//! * The pure core itself is the [`agentloop_core`] crate: [`agentloop_core::Run`],
//!   [`agentloop_core::Event`], [`agentloop_core::Effect`], [`agentloop_core::Step`], the
//!   [`agentloop_core::react`] and [`agentloop_core::process`] machines and their charts.
//!   This crate re-exports only what a user names (messages, events, errors, [`RunConfig`],
//!   [`LoopResult`]); the machines' internals are named by their core paths
//!   (`agentloop_core::react::X`). [`RunConfig`] is the machines' own configuration, documented
//!   with them: a program sets it through [`runtime::AgentBuilder`]'s methods, or in full with
//!   [`AgentBuilder::configure`](runtime::AgentBuilder::configure).
//!
//! # Example
//!
//! The offline demo model, the built-in tools, every event collected, and the trace replayed:
//!
//! ```no_run
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use agentloop::provider::scripted::ScriptedModel;
//! use agentloop::runtime::Agent;
//! use agentloop::EventEnvelope;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let events = Arc::new(AtomicUsize::new(0));
//!     let counted = events.clone();
//!     let agent = Agent::builder()              // typestate: without .model(..) there is no .build()
//!         .model(ScriptedModel::demo())
//!         .builtin_tools()                      // calculator, read_file, append_line (tools are opt-in)
//!         .sink(Arc::new(move |_: &EventEnvelope| { // every event, indexed and timestamped
//!             counted.fetch_add(1, Ordering::Relaxed);
//!         }))
//!         .max_steps(5)
//!         .build();
//!     let out = agent.run_with("session-1", vec![agentloop::Message::user("What is 6*7?")], None, true).await?;
//!     println!("{:?}: {:?}", out.result.outcome, out.result.final_text());
//!     let trace = out.trace.expect("recorded");
//!     assert!(agentloop::trace::replay(&trace).is_none()); // replays identically, offline
//!     println!("{} events", events.load(Ordering::Relaxed));
//!     Ok(())
//! }
//! ```
//!
//! # Features
//!
//! `default` is `openai`, `anthropic`, `openai-responses`, `builtin-tools`, `file-store` and
//! `mcp`. With `default-features = false` the crate has the machines, the runtime, sessions,
//! the scripted model and the in-memory store, and no HTTP, file-lock or expression crate. `sqlite-store`
//! and `postgres-store` are opt-in.
//!
//! # The guide
//!
//! The repository's `docs/` directory is a guide in plain Markdown: getting started, tools and
//! MCP, sessions and durability, providers, traces and replay, testing, scale-out, the
//! architecture and the command line.
#![warn(missing_docs)]
#![warn(unreachable_pub)]

/// The README's Rust examples, compiled and run as doc tests (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Builder methods that set fields (`AgentBuilder`, `HttpConfig`, `McpOptions`,
/// `SessionConfig`), each with its rustdoc: `name(arg: Type, ...) => field.path = value, ...;`
/// is `pub fn name(mut self, arg: Type, ...) -> Self`, which assigns each value and returns
/// the builder.
macro_rules! setters {
    ($(
        $(#[$doc:meta])*
        $name:ident($($arg:ident: $ty:ty),*) => $($($field:ident).+ = $value:expr),+;
    )*) => {$(
        $(#[$doc])*
        pub fn $name(mut self, $($arg: $ty),*) -> Self {
            $(self.$($field).+ = $value;)+
            self
        }
    )*};
}

/// Declares an item `pub` with feature `wire` and `pub(crate)` without: the providers' wire
/// layer (stream normalizers, request bodies, the scripted model's plan) is for tests,
/// benchmarks, fuzz targets and the CLI's `agentloop decode`, not part of the surface an agent
/// program sees.
macro_rules! wire_pub {
    ($(#[$meta:meta])* pub $($item:tt)*) => {
        #[cfg(feature = "wire")]
        $(#[$meta])*
        pub $($item)*
        #[cfg(not(feature = "wire"))]
        #[allow(dead_code)] // some only the tests and the CLI call
        $(#[$meta])*
        pub(crate) $($item)*
    };
}

// The core's vocabulary a user names (messages, events, errors) is re-exported at the root below.
use agentloop_core::{agent_event, error, message, outcome};

// The machines' internals live in `agentloop_core` (its own documented crate); a user names them
// as `agentloop_core::react::X`. Imported here for this crate's own modules only.
use agentloop_core::{chart, context, effect, event, execute_result, process, react};

pub mod attachment;
pub mod compaction;
pub mod hooks;
pub mod instructions;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod model;
#[cfg(feature = "otlp")]
pub mod otlp;
pub mod prelude;
pub mod provider;
pub mod runtime;
pub mod session;
// The session stores, re-exported whole (see the crate docs' "Stores").
pub use agentloop_store as store;
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

pub use agent_event::{AgentEvent, EventEnvelope, LoopKind, Outcome, SteeringStatus};
pub use error::{ErrorKind, ModelError, RunError};
pub use event::{ApprovalDecision, ApprovalStatus};
pub use message::{
    AssistantMessage, ContentPart, FinishReason, MediaSource, Message, MessageDelta, ToolCall,
    ToolResult, ToolStatus, Usage,
};
// The payloads of `AgentEvent::UsageLimitReached` (which limit, what the run does).
pub use outcome::{LimitAction, LimitKind};
pub use react::LoopResult;
// The machines' configuration, documented with them (see the crate docs).
#[doc(no_inline)]
pub use react::RunConfig;
