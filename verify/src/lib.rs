//! agentloop-verify: the machines' properties, written from the specification apart from the
//! charts, checked over every reachable state up to a bound by the
//! [stateright](https://docs.rs/stateright) model checker.
//!
//! The charts in `statecharts/` generate both the machines' dispatch and the oracle the test
//! kit checks them with, so the oracle agrees with any chart. This crate is the independent
//! check:
//!
//! - [`properties`]: what must always hold, as predicates over the inputs a machine was fed
//!   and the effects it returned (no chart row, guard, chart state or oracle is named).
//! - [`events`]: what the event stream must say about the work (R-EVT) and the typed-answer
//!   contract.
//! - [`run_model`]: a run ([`agentloop_core::Run`]: outer machine, inner machine, tool-call
//!   lifecycles) as a `stateright::Model` over a small abstract alphabet.
//! - [`session_model`]: the session machine the same way.
//! - [`check`]: breadth-first checking to a depth, with a report per model.
//!
//! `cargo run --release -p agentloop-verify -- [--quick | --deep]` runs every model and
//! exits non-zero on any violated property.
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod check;
pub mod events;
pub mod explored;
pub mod properties;
pub mod run_model;
pub mod session_model;
