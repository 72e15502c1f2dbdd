//! The core crate's integration tests, one module per concern, built as one binary (one link
//! instead of one per file: `cargo test -p agentloop-core` and mutation runs build faster).

mod accumulate;
mod chart_render;
mod conformance;
mod context;
mod coverage;
mod deadlines;
mod decider_replay;
mod fallback;
mod fuzz_corpus_core;
mod import_rules;
mod inline_tags;
mod limits;
mod loop_health;
mod machine_details;
mod messages;
mod names;
mod oracle;
mod output;
mod pairing_repair;
mod partial_updates;
mod process_details;
mod purity;
mod random_events;
mod records;
mod run_control;
mod session_history;
mod shared_messages;
mod step_and_config;
mod steps;
mod tool_cache;
mod trace_diff_rules;
mod trace_io;
mod trace_tools;
mod transcript_text;
mod verdict_rules;
