//! agentloop-testkit: the harness the conformance, coverage and random-event suites, the fuzz
//! targets and the benches share — and that users' own suites can depend on.
//!
//! - [`harness`]: abstract [`harness::Action`]s, a [`harness::Feeder`] that turns them into
//!   concrete events by following the effects the machines return, and the run/process
//!   harnesses that check the chart and the invariants after every step.
//! - [`strategies`]: proptest strategies over setups and action sequences.
//! - [`fuzz_decode`]: bytes → actions, the decoding the fuzz targets use.
#![allow(missing_docs)]

pub mod fuzz_decode;
pub mod harness;
pub mod strategies;
