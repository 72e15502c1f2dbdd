//! `agentloop trace export DIR|FILES… --table runs|steps|tool_calls|events --format csv|jsonl
//! -o FILE`: a corpus of traces as one table for a notebook — one row per run, model step,
//! tool call or trace record, with the columns a researcher filters on. The traces are read
//! in parallel (the corpus walk of `replay DIR`); rows come out in path order, then trace
//! order.
//!
//! `--format inspect -o LOG.json|LOG.eval` writes the corpus as an Inspect AI eval log
//! instead, one sample per trace (`agentloop_trace_tools::export_inspect`), which Inspect's
//! `read_eval_log` and log viewer read: its JSON, or its `.eval` zip when `-o` ends in `.eval`.
//!
//! `--format otlp -o SPANS.json` writes the traces as OpenTelemetry GenAI spans in OTLP/JSON
//! (`agentloop_trace_tools::export_otlp`): one OpenTelemetry trace per trace, an
//! `invoke_agent` span per run with a `chat` span per model step and an `execute_tool` span
//! per tool call. The messages, tool arguments and results only with `--include-content`; so
//! exported, the file imports back with `trace import --from otel-genai`. Span times come
//! from the trace's timing sidecar; without one, from the trace's record order after the
//! file's modification time.
//!
//! The tables themselves are built by `agentloop_trace_tools::export` (which the Python
//! package's DataFrames use too); this module reads the files and writes the table.
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
use serde_json::Value;

use agentloop_trace_tools::export::{columns, csv_field, rows};

use crate::out::errln;
use crate::times::load as load_times;

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
pub(crate) enum Format {
    /// Comma-separated values (RFC 4180 quoting), a header row first.
    Csv,
    /// JSON Lines: one object per row.
    Jsonl,
    /// An Inspect AI eval log, one sample per trace (no `--table`): its `.eval` zip when `-o`
    /// ends in `.eval`, else its JSON.
    Inspect,
    /// OpenTelemetry GenAI spans in OTLP/JSON (`resourceSpans`; no `--table`).
    Otlp,
}

/// `agentloop trace export`.
#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// The trace files, or directories of them (`*.jsonl`, walked recursively, links not
    /// followed).
    #[arg(required = true, value_name = "TRACE|DIR")]
    pub traces: Vec<PathBuf>,
    /// Which table (for `csv` and `jsonl`).
    #[arg(long, value_enum)]
    pub table: Option<Table>,
    /// The file format.
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    pub format: Format,
    /// Where to write the table (written through a temporary file, renamed when complete).
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: PathBuf,
    /// `--format otlp`: put the messages, the tools' definitions, tool arguments and results in
    /// the spans (`gen_ai.input.messages`, …; off by default: they may hold personal or secret
    /// data). Needed for `trace import --from otel-genai` to read the export back.
    #[arg(long)]
    pub include_content: bool,
}

impl From<Table> for agentloop_trace_tools::export::Table {
    fn from(t: Table) -> Self {
        use agentloop_trace_tools::export::Table as T;
        match t {
            Table::Runs => T::Runs,
            Table::Steps => T::Steps,
            Table::ToolCalls => T::ToolCalls,
            Table::Events => T::Events,
        }
    }
}

/// `trace export`: 0 written, 2 when a trace could not be read (the others are written) or
/// the table cannot be written.
pub(crate) fn export_main(args: ExportArgs) -> ExitCode {
    let table = match (args.format, args.table) {
        (Format::Inspect | Format::Otlp, None) => None,
        (Format::Inspect | Format::Otlp, Some(_)) => {
            errln!("error: --format inspect and otlp write whole traces: leave out --table");
            return ExitCode::from(2);
        }
        (_, Some(t)) => Some(t),
        (_, None) => {
            errln!("error: --format csv and jsonl need --table runs|steps|tool_calls|events");
            return ExitCode::from(2);
        }
    };
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
    let unreadable = errors.len();
    for (p, e) in &errors {
        errln!("error: {}: {e}", p.display());
    }
    if args.include_content && args.format != Format::Otlp {
        errln!("error: --include-content is for --format otlp");
        return ExitCode::from(2);
    }
    let Some(table) = table else {
        if args.format == Format::Otlp {
            return export_otlp(&args, &files, unreadable);
        }
        return export_inspect(&args, &files, unreadable);
    };
    let table = agentloop_trace_tools::export::Table::from(table);
    let cols = columns(table);
    let mut count = 0usize;
    let mut traces = 0usize;
    let mut failed = Vec::new();
    let written = crate::trace_cmd::write_replacing(&args.out, |w| {
        if args.format == Format::Csv {
            writeln!(w, "{}", cols.join(","))?;
        }
        in_batches(
            &files,
            |p| {
                crate::trace_cmd::read_trace(p, true)
                    .map(|t| rows(&t, &p.display().to_string(), table, &load_times(p)))
                    .map_err(|e| e.to_string())
            },
            &mut failed,
            |_, rows| {
                traces += 1;
                for row in rows {
                    count += 1;
                    write_row(w, args.format, cols, &row)?;
                }
                Ok(())
            },
        )
    });
    wrote(&args.out, &failed, unreadable, written, || {
        format!(
            "{count} row{} from {traces} trace{}",
            if count == 1 { "" } else { "s" },
            if traces == 1 { "" } else { "s" }
        )
    })
}

/// Reads `files` with `read`, a batch (one file per core) in parallel, and hands each result
/// to `each` in path order, so a corpus is never held whole: a batch's results are dropped
/// before the next batch is read. A file that could not be read (or whose reading panicked)
/// adds its error to `failed`; an error of `each` stops the walk.
fn in_batches<T: Send>(
    files: &[PathBuf],
    read: impl Fn(&PathBuf) -> Result<T, String> + Sync,
    failed: &mut Vec<String>,
    mut each: impl FnMut(&PathBuf, T) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let batch = std::thread::available_parallelism().map_or(1, |n| n.get());
    for chunk in files.chunks(batch) {
        let results = agentloop::store::corpus::par_map(chunk, &read);
        for (r, p) in results.into_iter().zip(chunk) {
            match r {
                Some(Ok(v)) => each(p, v)?,
                Some(Err(e)) => failed.push(e),
                None => failed.push(format!(
                    "{}: reading the trace panicked (a bug)",
                    p.display()
                )),
            }
        }
    }
    Ok(())
}

/// Writes one row of the table in `format`.
fn write_row(
    w: &mut dyn std::io::Write,
    format: Format,
    cols: &[&str],
    row: &[Value],
) -> std::io::Result<()> {
    match format {
        Format::Csv => {
            let line: Vec<String> = row.iter().map(csv_field).collect();
            // RFC 4180 ends records with CRLF; a bare LF is what pandas and most tools write
            // and read, and a quoted field keeps its own.
            writeln!(w, "{}", line.join(","))
        }
        Format::Jsonl => {
            let object: serde_json::Map<String, Value> = cols
                .iter()
                .map(|c| c.to_string())
                .zip(row.iter().cloned())
                .collect();
            serde_json::to_writer(&mut *w, &object)?;
            w.write_all(b"\n")
        }
        // Not tables: `export_inspect` and `export_otlp` write them.
        Format::Inspect | Format::Otlp => Ok(()),
    }
}

/// `trace export --format inspect`: the traces as one Inspect eval log, one sample per trace
/// (id: the trace's file name without `.jsonl`, made unique with `-2`, `-3`, …). The samples
/// are written as the traces are read (a batch per core, in path order), the log's other
/// fields after them, so the corpus is never held whole.
fn export_inspect(args: &ExportArgs, files: &[PathBuf], unreadable: usize) -> ExitCode {
    use agentloop_trace_tools::export_inspect::{inspect_log_fields, inspect_sample, EvalZip};
    // `-o LOG.eval`: Inspect's zip form; anything else its JSON.
    let mut zip = args
        .out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("eval"))
        .then(EvalZip::new);
    let mut totals = Vec::new();
    let mut failed = Vec::new();
    let mut ids = std::collections::HashSet::new();
    let mut newest = 0u64;
    let written = crate::trace_cmd::write_replacing(&args.out, |w| {
        if zip.is_none() {
            w.write_all(b"{\"samples\": [")?;
        }
        in_batches(
            files,
            |p| crate::trace_cmd::read_trace(p, true).map_err(|e| e.to_string()),
            &mut failed,
            |p, trace| {
                let stem = p
                    .file_name()
                    .map(|n| n.to_string_lossy().trim_end_matches(".jsonl").to_string())
                    .unwrap_or_else(|| "trace".into());
                let mut id = stem.clone();
                let mut n = 1;
                while !ids.insert(id.clone()) {
                    n += 1;
                    id = format!("{stem}-{n}");
                }
                if let Some(secs) = std::fs::metadata(p)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                {
                    newest = newest.max(secs.as_secs());
                }
                let (sample, t) = inspect_sample(&id, &trace);
                if let Some(zip) = zip.as_mut() {
                    w.write_all(&zip.sample(&sample).map_err(std::io::Error::other)?)?;
                } else {
                    if !totals.is_empty() {
                        w.write_all(b",")?;
                    }
                    w.write_all(b"\n")?;
                    serde_json::to_writer(&mut *w, &sample)?;
                }
                totals.push(t);
                Ok(())
            },
        )?;
        // The log's time: when the newest of its traces was last written (no clock read).
        let created = crate::sessions::rfc3339_utc(newest);
        let fields = inspect_log_fields(&totals, &created, env!("CARGO_PKG_VERSION"));
        if let Some(zip) = zip.take() {
            return w.write_all(&zip.finish(&fields).map_err(std::io::Error::other)?);
        }
        w.write_all(b"\n]")?;
        if let Value::Object(fields) = fields {
            for (k, v) in fields {
                write!(w, ",\n{}: ", Value::String(k))?;
                serde_json::to_writer(&mut *w, &v)?;
            }
        }
        w.write_all(b"}\n")
    });
    let n = totals.len();
    wrote(&args.out, &failed, unreadable, written, || {
        format!(
            "an Inspect eval log: {n} sample{} from {n} trace{}",
            if n == 1 { "" } else { "s" },
            if n == 1 { "" } else { "s" }
        )
    })
}

/// `trace export --format otlp`: the traces' spans as one OTLP/JSON export request. Span
/// times come from each trace's timing sidecar; without one, from its record order after the
/// file's modification time (see `agentloop_trace_tools::export_otlp`).
fn export_otlp(args: &ExportArgs, files: &[PathBuf], unreadable: usize) -> ExitCode {
    use agentloop_trace_tools::export_otlp::{otlp_export, otlp_spans, OtlpOptions};
    let mut spans = Vec::new();
    let mut traces = 0usize;
    let mut failed = Vec::new();
    let read = in_batches(
        files,
        |p| {
            let trace = crate::trace_cmd::read_trace(p, true).map_err(|e| e.to_string())?;
            let base_ms = std::fs::metadata(p)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            let options = OtlpOptions {
                include_content: args.include_content,
                base_ms,
            };
            Ok(otlp_spans(
                &trace,
                &crate::times::load_span_times(p),
                &options,
            ))
        },
        &mut failed,
        |_, mut s| {
            traces += 1;
            spans.append(&mut s);
            Ok(())
        },
    );
    let n = spans.len();
    let export = otlp_export(spans, env!("CARGO_PKG_VERSION"));
    let written = read.and_then(|()| {
        crate::trace_cmd::write_replacing(&args.out, |w| {
            serde_json::to_writer(&mut *w, &export)?;
            w.write_all(b"\n")
        })
    });
    wrote(&args.out, &failed, unreadable, written, || {
        format!(
            "OTLP JSON: {n} span{} from {traces} trace{}",
            if n == 1 { "" } else { "s" },
            if traces == 1 { "" } else { "s" }
        )
    })
}

/// Ends an export to `out`: reports the traces in `failed` (each one unreadable more), then
/// the write's error (exit 2), else what the file holds (`what`) and how many traces could
/// not be read (exit 2 when any could not, the others are written).
fn wrote(
    out: &std::path::Path,
    failed: &[String],
    mut unreadable: usize,
    written: std::io::Result<()>,
    what: impl FnOnce() -> String,
) -> ExitCode {
    for e in failed {
        unreadable += 1;
        errln!("error: {e}");
    }
    if let Err(e) = written {
        errln!("error: {}: {e}", out.display());
        return ExitCode::from(2);
    }
    crate::out::outln!(
        "wrote {} ({}{})",
        out.display(),
        what(),
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
