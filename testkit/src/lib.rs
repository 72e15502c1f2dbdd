//! agentloop-testkit: the harness the conformance, coverage and random-event suites, the fuzz
//! targets and the benches share — and that users' own suites depend on.
//!
//! For an agent's tests (feature `runtime`, on by default):
//! - [`agent`]: deterministic test agents (sequential run ids, virtual clock, in-memory store),
//!   the scripted model and [`agent::FnModel`], a function from request to reply.
//! - [`assert_trace_snapshot!`] ([`snapshot`]): a compact, stable `insta` snapshot of a trace.
//!
//! For the machines:
//! - [`harness`]: abstract [`harness::Action`]s, a [`harness::Feeder`] that turns them into
//!   concrete events by following the effects the machines return, and the run/process
//!   harnesses that check the chart and the invariants after every step.
//! - [`strategies`]: proptest strategies over setups and action sequences.
//! - [`fuzz_decode`]: bytes → actions, the decoding the fuzz targets use.
//! - [`strict_json`]: JSON parsing that rejects a duplicate key, for checking what the crate
//!   writes.
//!
//! For suites against real servers: [`external`] (a server named by an environment variable,
//! skipped outside CI and required in it; processes watched by pid).
//!
//! # Example
//!
//! A deterministic run with a function model, checked against a stored snapshot of its trace
//! (accept the first one with `cargo insta test`):
//!
//! ```ignore
//! use agentloop_testkit::agent::{deterministic, reply, run_traced, FnModel};
//!
//! #[tokio::test(start_paused = true)]
//! async fn calculator_two_steps() {
//!     let model = FnModel::new(|request| match request.model_call_index {
//!         1 => reply::tool_call("calculator", serde_json::json!({"expression": "2+3"})),
//!         _ => reply::text("The answer is 5."),
//!     });
//!     let agent = deterministic().model(model).build();
//!     let (out, trace) = run_traced(&agent, "What is 2+3?").await.expect("run");
//!     assert_eq!(out.result.final_text(), Some("The answer is 5."));
//!     agentloop_testkit::assert_trace_snapshot!(trace);
//! }
//! ```
//!
//! The same test is `tests/snapshot.rs` in this crate, where it runs.
#![warn(missing_docs)]
#![warn(unreachable_pub)]

#[cfg(feature = "runtime")]
#[warn(missing_docs)]
pub mod agent;
#[warn(missing_docs)]
pub mod external;
#[warn(missing_docs)]
pub mod fuzz_decode;
#[warn(missing_docs)]
pub mod harness;
#[warn(missing_docs)]
pub mod snapshot;
#[warn(missing_docs)]
pub mod strategies;
#[warn(missing_docs)]
pub mod strict_json;

/// `insta`, re-exported for [`assert_trace_snapshot!`].
pub use insta;
