//! Tables of traces for a notebook (`agentloop trace export`, the Python package's
//! DataFrames): one row per run, model step, tool call or trace record, with the columns a
//! researcher filters on. Pure: the caller reads the trace and its timing sidecar; this module
//! turns them into rows of JSON values.
//!
//! Latency: a trace holds no wall-clock time (replay must not depend on it); the
//! `latency_ms` (and the steps' `ttft_ms`) columns come from the trace's timing sidecar
//! (`T.times.jsonl`, [`Timing::from_sidecar`]) and are empty without one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use agentloop_core::trace::{Trace, TraceRecord};

use crate::transcript::{Item, Transcript};

/// The suffix of a timing sidecar, which a directory walk skips (it is not a trace).
pub const TIMES_SUFFIX: &str = ".times.jsonl";

/// Which table to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    /// One row per run: outcome, reason, steps, tool calls, retries, tokens.
    Runs,
    /// One row per committed model step: finish reason, tool calls, tokens, text.
    Steps,
    /// One row per tool call: tool, status, arguments, result.
    ToolCalls,
    /// One row per trace record: input events, transitions, effects.
    Events,
}

impl Table {
    /// Every table, in the order they are documented.
    pub const ALL: [Table; 4] = [Table::Runs, Table::Steps, Table::ToolCalls, Table::Events];

    /// The table's name (`runs`, `steps`, `tool_calls`, `events`).
    pub fn name(self) -> &'static str {
        match self {
            Table::Runs => "runs",
            Table::Steps => "steps",
            Table::ToolCalls => "tool_calls",
            Table::Events => "events",
        }
    }

    /// The table named `name` (`tool-calls` is taken for `tool_calls`).
    pub fn from_name(name: &str) -> Option<Table> {
        match name {
            "tool-calls" => Some(Table::ToolCalls),
            _ => Table::ALL.into_iter().find(|t| t.name() == name),
        }
    }
}

/// The sidecar of the trace at `trace`: `NAME.jsonl` → `NAME.times.jsonl` (another name gets
/// `.times.jsonl` appended).
pub fn sidecar_path(trace: &Path) -> PathBuf {
    let name = trace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".jsonl").unwrap_or(&name);
    trace.with_file_name(format!("{stem}{TIMES_SUFFIX}"))
}

/// The durations a timing sidecar gives, in milliseconds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Timing {
    /// Per run id: run start to run end.
    pub runs: HashMap<String, u64>,
    /// Per (run id, step): the step's first request to its committed response.
    pub steps: HashMap<(String, u64), u64>,
    /// Per (run id, step): the time to first token of the step's last attempt that streamed
    /// (the committed one): its request to its first text, reasoning or tool-call delta (the
    /// sidecar's `first_token` line; `--metrics`' `time_to_first_token` is the same figure per
    /// attempt).
    pub ttft: HashMap<(String, u64), u64>,
    /// Per (run id, call id): tool start to tool end.
    pub tools: HashMap<(String, String), u64>,
}

impl Timing {
    /// The durations of a sidecar's text: one JSON object a line, `{"ts_ms", "run_id",
    /// "type", "step"?, "attempt"?, "tool_call_id"?}`; malformed lines give no durations.
    pub fn from_sidecar(text: &str) -> Timing {
        let mut t = Timing::default();
        let mut run_start: HashMap<String, u64> = HashMap::new();
        let mut request: HashMap<(String, u64), u64> = HashMap::new();
        let mut attempt_start: HashMap<(String, u64, u64), u64> = HashMap::new();
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
                    if let Some(a) = v["attempt"].as_u64() {
                        attempt_start.insert((run.clone(), step, a), ts);
                    }
                    request.entry((run, step)).or_insert(ts);
                }
                ("first_token", Some(step), _) => {
                    let Some(a) = v["attempt"].as_u64() else {
                        continue;
                    };
                    if let Some(s) = attempt_start.remove(&(run.clone(), step, a)) {
                        // A later attempt's figure replaces an earlier one's.
                        t.ttft.insert((run, step), ts.saturating_sub(s));
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
}

/// The columns of each table, in order.
pub fn columns(table: Table) -> &'static [&'static str] {
    match table {
        Table::Runs => &[
            "trace",
            "session",
            "run_id",
            "model",
            "outcome",
            "reason",
            "steps",
            "tool_calls",
            "retries",
            "tokens_in",
            "tokens_out",
            "latency_ms",
        ],
        Table::Steps => &[
            "trace",
            "session",
            "run_id",
            "model",
            "step",
            "finish_reason",
            "tool_calls",
            "tokens_in",
            "tokens_out",
            "text",
            "latency_ms",
            "ttft_ms",
            "tokens_cache_read",
            "tokens_reasoning",
        ],
        Table::ToolCalls => &[
            "trace",
            "session",
            "run_id",
            "step",
            "call_id",
            "tool",
            "status",
            "arguments",
            "result",
            "latency_ms",
        ],
        Table::Events => &[
            "trace", "session", "run_id", "index", "kind", "name", "detail",
        ],
    }
}

/// One row: the values of [`columns`], in order.
pub type Row = Vec<Value>;

/// How a run ended: outcome, reason, and the run's usage (tokens in, out) when reported.
type RunEnd = (String, String, Option<(u64, u64)>);

/// The rows of `table` for one trace (`name`: how the trace column names it).
/// `timing`: the durations of the trace's timing sidecar (empty columns without one).
pub fn rows(trace: &Trace, name: &str, table: Table, timing: &Timing) -> Vec<Row> {
    if table == Table::Events {
        return event_rows(trace, name);
    }
    let t = Transcript::from_trace(trace);
    let session = t.session.clone();
    let mut out = Vec::new();
    let mut run_id = String::new();
    let mut model = t.model.clone();
    let mut step: Option<u32> = None;
    // Per run: steps, tool calls, retries, tokens in, tokens out.
    let mut run = [0u64; 5];
    let mut run_open = false;
    let close_run =
        |out: &mut Vec<Row>, run_id: &str, model: &str, run: &[u64; 5], end: Option<RunEnd>| {
            let (outcome, reason, usage) = match end {
                Some((o, r, u)) => (json!(o), json!(r), u),
                None => (Value::Null, Value::Null, None),
            };
            let (tin, tout) = usage.unwrap_or((run[3], run[4]));
            out.push(vec![
                json!(name),
                json!(session),
                json!(run_id),
                json!(model),
                outcome,
                reason,
                json!(run[0]),
                json!(run[1]),
                json!(run[2]),
                json!(tin),
                json!(tout),
                json!(timing.runs.get(run_id)),
            ]);
        };
    for item in &t.items {
        match item {
            Item::RunStart { run_id: id, .. } | Item::Resume { run_id: id, .. } => {
                if run_open && table == Table::Runs {
                    close_run(&mut out, &run_id, &model, &run, None);
                }
                run_id = id.clone();
                run = [0; 5];
                run_open = true;
                step = None;
            }
            Item::Request { model: m, .. } => model = m.clone(),
            Item::Assistant {
                step: s,
                text,
                tool_calls,
                finish_reason,
                usage,
                ..
            } => {
                step = Some(*s);
                run[0] += 1;
                let (tin, tout) = usage.as_ref().map_or((None, None), |u| {
                    (Some(u.input_tokens), Some(u.output_tokens))
                });
                let (cached, reasoning) = usage.as_ref().map_or((None, None), |u| {
                    (Some(u.cache_read_input_tokens), Some(u.reasoning_tokens))
                });
                run[3] += tin.unwrap_or(0);
                run[4] += tout.unwrap_or(0);
                if table == Table::Steps {
                    out.push(vec![
                        json!(name),
                        json!(session),
                        json!(run_id),
                        json!(model),
                        json!(s),
                        json!(finish_reason),
                        json!(tool_calls),
                        json!(tin),
                        json!(tout),
                        json!(text),
                        json!(timing.steps.get(&(run_id.clone(), u64::from(*s)))),
                        json!(timing.ttft.get(&(run_id.clone(), u64::from(*s)))),
                        json!(cached),
                        json!(reasoning),
                    ]);
                }
            }
            Item::Tool {
                id,
                name: tool,
                arguments,
                status,
                result,
                ..
            } => {
                if status.is_some() {
                    run[1] += 1;
                }
                if table == Table::ToolCalls {
                    out.push(vec![
                        json!(name),
                        json!(session),
                        json!(run_id),
                        json!(step),
                        json!(id),
                        json!(tool),
                        serde_json::to_value(status).unwrap_or(Value::Null),
                        json!(arguments.to_string()),
                        json!(result),
                        json!(timing.tools.get(&(run_id.clone(), id.clone()))),
                    ]);
                }
            }
            Item::Retry { .. } => run[2] += 1,
            Item::RunEnd {
                outcome,
                reason,
                usage,
                ..
            } => {
                if table == Table::Runs {
                    let usage = usage.as_ref().map(|u| (u.input_tokens, u.output_tokens));
                    let end = Some((outcome.to_string(), reason.clone(), usage));
                    close_run(&mut out, &run_id, &model, &run, end);
                }
                run_open = false;
            }
            _ => {}
        }
    }
    if run_open && table == Table::Runs {
        close_run(&mut out, &run_id, &model, &run, None);
    }
    out
}

/// One row per record of `trace`: its index, kind (`input`, `transition`, `effect`), name
/// (the event's type, the machine, the effect — an `emit` with its event's type) and detail
/// (a transition's `from -> to`).
fn event_rows(trace: &Trace, name: &str) -> Vec<Row> {
    let session = &trace.header.session;
    let mut run_id = String::new();
    let field = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut out = Vec::with_capacity(trace.records.len());
    for r in &trace.records {
        let (index, kind, what, detail) = match r {
            TraceRecord::Header(_) => continue,
            TraceRecord::Input { index, event } => {
                let v = serde_json::to_value(event).unwrap_or(Value::Null);
                if let Some(id) = v.get("run_id").and_then(Value::as_str) {
                    run_id = id.to_string();
                }
                (*index, "input", field(&v, "type"), Value::Null)
            }
            TraceRecord::Transition { index, transition } => {
                let v = serde_json::to_value(transition).unwrap_or(Value::Null);
                let detail = format!(
                    "{} -> {}",
                    v.get("from").map(Value::to_string).unwrap_or_default(),
                    v.get("to").map(Value::to_string).unwrap_or_default()
                )
                .replace('"', "");
                (*index, "transition", field(&v, "machine"), json!(detail))
            }
            TraceRecord::Effect { index, effect } => {
                let v = serde_json::to_value(effect).unwrap_or(Value::Null);
                let mut what = field(&v, "effect");
                if let Some(e) = v.get("event") {
                    what = format!("{what}:{}", field(e, "type"));
                }
                (*index, "effect", what, Value::Null)
            }
        };
        out.push(vec![
            json!(name),
            json!(session),
            json!(run_id),
            json!(index),
            json!(kind),
            json!(what),
            detail,
        ]);
    }
    out
}

/// One CSV field: empty for null, the text of a string, the JSON text of anything else;
/// quoted (quotes doubled) when it holds a comma, a quote, a newline or a carriage return, or
/// starts or ends with a space.
pub fn csv_field(v: &Value) -> String {
    let s = match v {
        Value::Null => return String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.contains([',', '"', '\n', '\r']) || s.starts_with(' ') || s.ends_with(' ') {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_when_they_must_be() {
        assert_eq!(csv_field(&Value::Null), "");
        assert_eq!(csv_field(&json!("plain")), "plain");
        assert_eq!(csv_field(&json!(12)), "12");
        assert_eq!(csv_field(&json!("a,b")), "\"a,b\"");
        assert_eq!(csv_field(&json!("say \"hi\"")), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field(&json!("two\nlines")), "\"two\nlines\"");
        assert_eq!(csv_field(&json!(" pad")), "\" pad\"");
    }

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

    #[test]
    fn tables_are_named() {
        for t in Table::ALL {
            assert_eq!(Table::from_name(t.name()), Some(t));
        }
        assert_eq!(Table::from_name("tool-calls"), Some(Table::ToolCalls));
        assert_eq!(Table::from_name("nope"), None);
    }

    #[test]
    fn a_sidecar_gives_durations() {
        let text = concat!(
            r#"{"ts_ms":100,"run_id":"r","type":"run_start"}"#,
            "\n",
            r#"{"ts_ms":110,"run_id":"r","type":"request_start","step":1,"attempt":1}"#,
            "\n",
            r#"{"ts_ms":112,"run_id":"r","type":"first_token","step":1,"attempt":1}"#,
            "\n",
            r#"{"ts_ms":125,"run_id":"r","type":"request_start","step":1,"attempt":2}"#,
            "\n",
            r#"{"ts_ms":130,"run_id":"r","type":"first_token","step":1,"attempt":2}"#,
            "\n",
            r#"{"ts_ms":150,"run_id":"r","type":"response_complete","step":1}"#,
            "\n",
            "not json\n",
            r#"{"ts_ms":190,"run_id":"r","type":"run_end"}"#,
            "\n",
        );
        let t = Timing::from_sidecar(text);
        assert_eq!(t.runs.get("r"), Some(&90));
        assert_eq!(t.steps.get(&("r".to_string(), 1)), Some(&40));
        // The committed (last) attempt's time to first token, not the first request's.
        assert_eq!(t.ttft.get(&("r".to_string(), 1)), Some(&5));
    }
}
