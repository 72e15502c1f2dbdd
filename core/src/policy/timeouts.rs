//! The runtime's deadlines and tool-completion order: plain settings, recorded in every
//! trace header so a replay knows what the recorded run was configured with (R-TRACE-1).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How tool completions are delivered to the machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolOrder {
    /// In the order the calls were started (deterministic traces; default).
    #[default]
    CallOrder,
    /// As each call finishes (earliest persistence of each result; traces of parallel runs
    /// may differ from run to run).
    Completion,
}

/// Timeouts the runtime turns into machine events (R-IN-7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Timeouts {
    /// Until the response starts and its first delta arrives (default 60 s).
    pub first_chunk_ms: u64,
    /// Between deltas (default 30 s).
    pub stall_ms: u64,
    /// Per tool call (default 120 s).
    pub tool_ms: u64,
    /// Whole model request (one attempt, from sending to the last delta); expiry is a
    /// retryable `timeout` error (default none).
    pub request_ms: Option<u64>,
    /// Whole-run deadline; expiry aborts the run (default none).
    pub run_deadline_ms: Option<u64>,
    /// The order in which parallel tools' completions reach the machine (default: call
    /// order, so identical runs record identical traces).
    #[serde(default)]
    pub tool_order: ToolOrder,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            first_chunk_ms: 60_000,
            stall_ms: 30_000,
            tool_ms: 120_000,
            request_ms: None,
            run_deadline_ms: None,
            tool_order: ToolOrder::default(),
        }
    }
}
