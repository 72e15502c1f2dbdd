//! `agentloop trace export DIR|FILES… --table runs|steps|tool_calls|events --format csv|jsonl
//! -o FILE`: a corpus of traces as one table for a notebook — one row per run, model step,
//! tool call or trace record, with the columns a researcher filters on. The traces are read
//! in parallel (the corpus walk of `replay DIR`); rows come out in path order, then trace
//! order.
//!
//! Latency: a trace holds no wall-clock time (replay must not depend on it); the
//! `latency_ms` (and the steps' `ttft_ms`) columns come from the trace's timing sidecar
//! (`T.times.jsonl`, [`crate::times`]) and are empty without one. Parquet is not offered: the maintained crates (`arrow` /
//! `parquet`) would more than double the command's build; CSV and JSONL load in pandas as
//! `read_csv` / `read_json(lines=True)`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde_json::{json, Value};

use agentloop::trace::{Trace, TraceRecord};
use agentloop_trace_tools::transcript::{Item, Transcript};

use crate::out::errln;
use crate::times::{load as load_times, Timing};

/// Which table `trace export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Table {
    /// One row per run: outcome, reason, steps, tool calls, retries, tokens.
    Runs,
    /// One row per committed model step: finish reason, tool calls, tokens, text.
    Steps,
    /// One row per tool call: tool, status, arguments, result.
    #[value(name = "tool_calls", alias = "tool-calls")]
    ToolCalls,
    /// One row per trace record: input events, transitions, effects.
    Events,
}

/// File formats of `trace export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Comma-separated values (RFC 4180 quoting), a header row first.
    Csv,
    /// JSON Lines: one object per row.
    Jsonl,
}

/// `agentloop trace export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The trace files, or directories of them (`*.jsonl`, walked recursively, links not
    /// followed).
    #[arg(required = true, value_name = "TRACE|DIR")]
    pub traces: Vec<PathBuf>,
    /// Which table.
    #[arg(long, value_enum)]
    pub table: Table,
    /// The file format.
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    pub format: Format,
    /// Where to write the table (written through a temporary file, renamed when complete).
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: PathBuf,
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
type Row = Vec<Value>;

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

/// `trace export`: 0 written, 2 when a trace could not be read (the others are written) or
/// the table cannot be written.
pub fn export_main(args: ExportArgs) -> ExitCode {
    let (files, errors) = crate::corpus::collect(&args.traces);
    if files.is_empty() && errors.is_empty() {
        errln!("error: no *.jsonl traces found");
        return ExitCode::from(2);
    }
    if let Some(f) = files
        .iter()
        .find(|f| crate::trace_cmd::same_file(f, &args.out))
    {
        errln!(
            "error: {}: the table would overwrite a trace it reads; name another file with -o",
            f.display()
        );
        return ExitCode::from(2);
    }
    let table = args.table;
    let results = crate::corpus::par_map(&files, |p| {
        crate::trace_cmd::read_trace(p, true)
            .map(|t| rows(&t, &p.display().to_string(), table, &load_times(p)))
            .map_err(|e| e.to_string())
    })
    .into_iter()
    .zip(&files)
    .map(|(r, p)| {
        r.unwrap_or_else(|| {
            Err(format!(
                "{}: reading the trace panicked (a bug)",
                p.display()
            ))
        })
    })
    .collect::<Vec<_>>();
    let mut unreadable = errors.len();
    for (p, e) in &errors {
        errln!("error: {}: {e}", p.display());
    }
    let cols = columns(table);
    let mut count = 0usize;
    let mut traces = 0usize;
    let written = crate::trace_cmd::write_replacing(&args.out, |w| {
        if args.format == Format::Csv {
            writeln!(w, "{}", cols.join(","))?;
        }
        for r in &results {
            let rows = match r {
                Ok(rows) => rows,
                Err(_) => continue,
            };
            traces += 1;
            for row in rows {
                count += 1;
                match args.format {
                    Format::Csv => {
                        let line: Vec<String> = row.iter().map(csv_field).collect();
                        // RFC 4180 ends records with CRLF; a bare LF is what pandas and
                        // most tools write and read, and a quoted field keeps its own.
                        writeln!(w, "{}", line.join(","))?;
                    }
                    Format::Jsonl => {
                        let object: serde_json::Map<String, Value> = cols
                            .iter()
                            .map(|c| c.to_string())
                            .zip(row.iter().cloned())
                            .collect();
                        serde_json::to_writer(&mut *w, &object)?;
                        w.write_all(b"\n")?;
                    }
                }
            }
        }
        Ok(())
    });
    for e in results.iter().filter_map(|r| r.as_ref().err()) {
        unreadable += 1;
        errln!("error: {e}");
    }
    if let Err(e) = written {
        errln!("error: {}: {e}", args.out.display());
        return ExitCode::from(2);
    }
    crate::out::outln!(
        "wrote {} ({} row{} from {} trace{}{})",
        args.out.display(),
        count,
        if count == 1 { "" } else { "s" },
        traces,
        if traces == 1 { "" } else { "s" },
        if unreadable > 0 {
            format!("; {unreadable} unreadable")
        } else {
            String::new()
        }
    );
    if unreadable > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
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
}
