//! The vocabulary: the plain data the machines, the runtime and traces exchange — messages,
//! input events, effects, session entries, observable events, errors, steps and the model
//! request. Nothing here decides anything; every other part of the crate speaks these types.
//!
//! The modules are re-exported at the crate root (`agentloop_core::message`, …): the public
//! paths stay flat, the directory only shows the part they belong to.

pub mod agent_event;
pub mod effect;
pub mod entry;
pub mod error;
pub mod event;
pub mod execute_result;
pub mod message;
pub mod model;
pub mod outcome;
pub mod output;
pub mod step;
pub mod todo;
pub mod tool_check;
pub mod tool_spec;

/// `skip_serializing_if` for a count left out of the JSON when zero.
pub(crate) fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}
