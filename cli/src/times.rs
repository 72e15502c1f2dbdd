//! Wall-clock timing for latency research, kept out of determinism: `agentloop run --trace
//! T.jsonl` also writes `T.times.jsonl`, one line per timed event of the run (the event
//! envelope's `ts_ms`), which replay never reads (a corpus walk skips it) and `trace export`
//! joins into its `latency_ms` and `ttft_ms` columns.
//!
//! A line: `{"ts_ms", "run_id", "type", "step"?, "attempt"?, "tool_call_id"?}` for the types
//! `run_start`, `request_start`, `first_token` (the attempt's first text, reasoning or tool-call
//! delta: the time to first token `--metrics` reports too), `response_complete`, `tool_start`,
//! `tool_end` and `run_end`. Timing is best effort: a
//! sidecar that cannot be written leaves the columns empty, never fails the run.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;

use serde_json::json;

use agentloop::AgentEvent;
use agentloop::EventEnvelope;

pub(crate) use agentloop_trace_tools::export::{sidecar_path, Timing};

/// The sidecar being written during a run.
pub(crate) struct Recorder {
    file: Mutex<Sidecar>,
}

/// The open sidecar, and per run the attempt whose first token is still to come.
struct Sidecar {
    file: std::fs::File,
    awaiting_token: HashMap<String, (u32, u32)>,
}

impl Recorder {
    /// Creates (or truncates) the sidecar of `trace`.
    pub(crate) fn create(trace: &Path) -> std::io::Result<Recorder> {
        let file = std::fs::File::create(sidecar_path(trace))?;
        Ok(Recorder {
            file: Mutex::new(Sidecar {
                file,
                awaiting_token: HashMap::new(),
            }),
        })
    }

    /// Writes a line for `env` when it is a timed event (a write error is ignored: timing is
    /// best effort).
    pub(crate) fn record(&self, env: &EventEnvelope) {
        let Ok(mut sidecar) = self.file.lock() else {
            return;
        };
        let (kind, step, attempt, call) = match &env.event {
            AgentEvent::RunStart {} => ("run_start", None, None, None),
            AgentEvent::RunEnd { .. } => {
                sidecar.awaiting_token.remove(&env.run_id);
                ("run_end", None, None, None)
            }
            AgentEvent::RequestStart {
                model_call_index,
                attempt,
                ..
            } => {
                sidecar
                    .awaiting_token
                    .insert(env.run_id.clone(), (*model_call_index, *attempt));
                (
                    "request_start",
                    Some(*model_call_index),
                    Some(*attempt),
                    None,
                )
            }
            // The first content delta of the attempt in flight (tool-call deltas name no
            // attempt: they belong to the latest request, as in `RunMetrics`).
            token if token.is_token() => match sidecar.awaiting_token.remove(&env.run_id) {
                Some((s, a)) => ("first_token", Some(s), Some(a), None),
                None => return,
            },
            AgentEvent::ResponseComplete {
                model_call_index, ..
            } => ("response_complete", Some(*model_call_index), None, None),
            AgentEvent::ToolStart { tool_call_id, .. } => {
                ("tool_start", None, None, Some(tool_call_id))
            }
            AgentEvent::ToolEnd { tool_call_id, .. } => {
                ("tool_end", None, None, Some(tool_call_id))
            }
            _ => return,
        };
        let mut line = json!({"ts_ms": env.ts_ms, "run_id": env.run_id, "type": kind});
        if let Some(s) = step {
            line["step"] = json!(s);
        }
        if let Some(a) = attempt {
            line["attempt"] = json!(a);
        }
        if let Some(c) = call {
            line["tool_call_id"] = json!(c);
        }
        let text = format!("{line}\n");
        let _ = sidecar.file.write_all(text.as_bytes());
    }
}

/// Reads the sidecar of `trace` (a regular file of at most [`crate::out::INPUT_LIMIT`]
/// bytes); absent, unreadable or malformed lines give no durations.
pub(crate) fn load(trace: &Path) -> Timing {
    crate::regular_file::read_regular_to_string(&sidecar_path(trace), crate::out::INPUT_LIMIT)
        .map(|text| Timing::from_sidecar(&text))
        .unwrap_or_default()
}

/// The span times of the sidecar of `trace` for an OTLP export; none when it is absent or
/// unreadable.
pub(crate) fn load_span_times(trace: &Path) -> agentloop_trace_tools::export_otlp::SpanTimes {
    crate::regular_file::read_regular_to_string(&sidecar_path(trace), crate::out::INPUT_LIMIT)
        .map(|text| agentloop_trace_tools::export_otlp::SpanTimes::from_sidecar(&text))
        .unwrap_or_default()
}
