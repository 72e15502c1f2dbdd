//! Policy helpers: the pure decisions and settings the machines consult — tool rules and their
//! wildcard patterns, the pure-tool cache, context compaction, inline tags in streamed text and
//! the runtime's deadlines. They speak the [vocabulary](crate::message) and hold no machine state.
//!
//! The modules are re-exported at the crate root (`agentloop_core::tool_rules`, …): the public
//! paths stay flat, the directory only shows the part they belong to.

pub mod context;
pub mod inline_tags;
pub mod timeouts;
pub mod tool_cache;
pub mod tool_rules;
pub mod wildcard;
