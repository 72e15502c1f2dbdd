//! Wall-clock timing for latency research, kept out of determinism: `agentloop run --trace
//! T.jsonl` also writes `T.times.jsonl`, one line per timed event of the run (the event
//! envelope's `ts_ms`), which replay never reads (a corpus walk skips it) and `trace export`
//! joins into its `latency_ms` and `ttft_ms` columns.
//!
//! A line: `{"ts_ms", "run_id", "type", "step"?, "attempt"?, "tool_call_id"?}` for the types
//! `run_start`, `request_start`, `message_start` (the response's first chunk),
//! `response_complete`, `tool_start`, `tool_end` and `run_end`. Timing is best effort: a
//! sidecar that cannot be written leaves the columns empty, never fails the run.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{json, Value};

use agentloop::agent_event::AgentEvent;
use agentloop::runtime::EventEnvelope;

/// The sidecar of the trace at `trace`: `NAME.jsonl` → `NAME.times.jsonl` (another name gets
/// `.times.jsonl` appended).
pub fn sidecar_path(trace: &Path) -> PathBuf {
    let name = trace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".jsonl").unwrap_or(&name);
    trace.with_file_name(format!("{stem}{}", crate::corpus::TIMES_SUFFIX))
}

/// The sidecar being written during a run.
pub struct Recorder {
    file: Mutex<std::fs::File>,
}

impl Recorder {
    /// Creates (or truncates) the sidecar of `trace`.
    pub fn create(trace: &Path) -> std::io::Result<Recorder> {
        let file = std::fs::File::create(sidecar_path(trace))?;
        Ok(Recorder {
            file: Mutex::new(file),
        })
    }

    /// Writes a line for `env` when it is a timed event (a write error is ignored: timing is
    /// best effort).
    pub fn record(&self, env: &EventEnvelope) {
        let (kind, step, attempt, call) = match &env.event {
            AgentEvent::RunStart {} => ("run_start", None, None, None),
            AgentEvent::RunEnd { .. } => ("run_end", None, None, None),
            AgentEvent::RequestStart {
                model_call_index,
                attempt,
                ..
            } => (
                "request_start",
                Some(*model_call_index),
                Some(*attempt),
                None,
            ),
            AgentEvent::MessageStart {
                model_call_index,
                attempt,
            } => (
                "message_start",
                Some(*model_call_index),
                Some(*attempt),
                None,
            ),
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
        if let Ok(mut f) = self.file.lock() {
            let _ = f.write_all(text.as_bytes());
        }
    }
}

/// The durations a sidecar gives, in milliseconds.
#[derive(Default)]
pub struct Timing {
    /// Per run id: run start to run end.
    pub runs: HashMap<String, u64>,
    /// Per (run id, step): the step's first request to its committed response.
    pub steps: HashMap<(String, u64), u64>,
    /// Per (run id, step): the step's first request to the first chunk of a response.
    pub ttft: HashMap<(String, u64), u64>,
    /// Per (run id, call id): tool start to tool end.
    pub tools: HashMap<(String, String), u64>,
}

/// Reads the sidecar of `trace` (a regular file of at most [`crate::out::INPUT_LIMIT`]
/// bytes); absent, unreadable or malformed lines give no durations.
pub fn load(trace: &Path) -> Timing {
    let mut t = Timing::default();
    let Ok(text) = agentloop::regular_file::read_regular_to_string(
        &sidecar_path(trace),
        crate::out::INPUT_LIMIT,
    ) else {
        return t;
    };
    let mut run_start: HashMap<String, u64> = HashMap::new();
    let mut request: HashMap<(String, u64), u64> = HashMap::new();
    let mut tool_start: HashMap<(String, String), u64> = HashMap::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let (Some(ts), Some(run), Some(kind)) = (
            v["ts_ms"].as_u64(),
            v["run_id"].as_str(),
            v["type"].as_str(),
        ) else {
            continue;
        };
        let run = run.to_string();
        let step = v["step"].as_u64();
        let call = v["tool_call_id"].as_str().map(str::to_string);
        match (kind, step, call) {
            ("run_start", _, _) => {
                run_start.entry(run).or_insert(ts);
            }
            ("run_end", _, _) => {
                if let Some(s) = run_start.get(&run) {
                    t.runs.insert(run, ts.saturating_sub(*s));
                }
            }
            ("request_start", Some(step), _) => {
                request.entry((run, step)).or_insert(ts);
            }
            ("message_start", Some(step), _) => {
                let key = (run, step);
                if let Some(s) = request.get(&key) {
                    let d = ts.saturating_sub(*s);
                    t.ttft.entry(key).or_insert(d);
                }
            }
            ("response_complete", Some(step), _) => {
                let key = (run, step);
                if let Some(s) = request.get(&key) {
                    let d = ts.saturating_sub(*s);
                    t.steps.insert(key, d);
                }
            }
            ("tool_start", _, Some(call)) => {
                tool_start.entry((run, call)).or_insert(ts);
            }
            ("tool_end", _, Some(call)) => {
                let key = (run, call);
                if let Some(s) = tool_start.get(&key) {
                    let d = ts.saturating_sub(*s);
                    t.tools.insert(key, d);
                }
            }
            _ => {}
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sidecar_sits_next_to_the_trace() {
        assert_eq!(
            sidecar_path(Path::new("d/run.jsonl")),
            PathBuf::from("d/run.times.jsonl")
        );
        assert_eq!(
            sidecar_path(Path::new("run.trace")),
            PathBuf::from("run.trace.times.jsonl")
        );
    }
}
