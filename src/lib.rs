//! agentloop: LLM agents as verified state machines.
#![warn(missing_docs)]

pub mod error;
pub mod message;
pub mod model;
pub mod provider;
pub mod store;
pub mod tools;
