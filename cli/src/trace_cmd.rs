//! `agentloop trace show|diff|view` and the what-if mode of `agentloop replay`: reading traces for
//! people. The analysis is pure (`agentloop_trace_tools`: `transcript`, `trace_diff`, `whatif`);
//! this module loads files, prints, and maps results to exit codes (0 same / 1 different / 2 bad
//! input).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use crate::regular_file::{open_regular_file, read_regular_to_string};
use agentloop::trace::{Trace, TraceError};
use agentloop_core::react::DeciderRegistry;
use agentloop_core::trace::{
    RecordReader, TraceLimits, OLDEST_READABLE_TRACE_VERSION, OLDEST_TRACE_VERSION,
};
use agentloop_trace_tools::trace_diff::{diff, DiffOptions, TraceDiff};
use agentloop_trace_tools::transcript::{RenderOptions, Style, Summary, Transcript};
use agentloop_trace_tools::whatif::{apply_setting, parse_assignment, what_if, WhatIf};

use crate::out::errln;

/// Output formats of `trace show`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ShowFormat {
    /// Plain text, one line per item.
    Text,
    /// Markdown (a heading per step).
    Markdown,
    /// The transcript as JSON.
    Json,
}

/// `agentloop trace show`.
#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// The trace file (JSON Lines, version 1 to 5).
    pub trace: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ShowFormat::Text)]
    pub format: ShowFormat,
    /// Leave out the machines' state changes.
    #[arg(long)]
    pub no_states: bool,
    /// Leave out record indexes (`#12`).
    #[arg(long)]
    pub no_indexes: bool,
}

/// `agentloop trace view`.
#[derive(Debug, Args)]
pub(crate) struct ViewArgs {
    /// The trace file (JSON Lines, version 1 to 5).
    pub trace: PathBuf,
    /// Where to write the page (default: TRACE with extension `.html`). A page that would
    /// overwrite TRACE itself (a trace named `.html`) is refused: name another with `-o`.
    #[arg(short = 'o', long = "out")]
    pub out: Option<PathBuf>,
}

/// `agentloop trace diff`.
#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    /// The first trace.
    pub a: PathBuf,
    /// The second trace.
    pub b: PathBuf,
    /// Compare volatile fields too (run ids, wall-clock fields, the crate version).
    #[arg(long)]
    pub strict: bool,
}

/// The what-if options of `agentloop replay`.
#[derive(Debug, Args, Default)]
pub(crate) struct WhatIfArgs {
    /// Replay with a changed configuration: KEY=VALUE (repeatable). Keys: max_steps,
    /// retry.max_retries, retry.initial_backoff_ms, retry.max_backoff_ms, parallel_tools,
    /// compact_threshold, context_budget_tokens, steering, inline_tags.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Replay with another decision function (one this program has: `default`); or
    /// RECORDED=BUILTIN: replay a trace whose decider is RECORDED (a program's own, which this
    /// command does not have) with the built-in BUILTIN under that name — a plain replay, not
    /// a what-if.
    #[arg(long, value_name = "NAME|RECORDED=BUILTIN")]
    pub decider: Option<String>,
}

impl WhatIfArgs {
    /// Whether a what-if replay was asked for (a `--decider RECORDED=BUILTIN` alone is not
    /// one: the trace is replayed as recorded).
    pub(crate) fn any(&self) -> bool {
        !self.set.is_empty() || self.decider.as_deref().is_some_and(|d| !d.contains('='))
    }

    /// The deciders a replay resolves the trace's names in (R-OUT-3): the built-ins, plus
    /// RECORDED mapped to the built-in BUILTIN for a `--decider RECORDED=BUILTIN`. An error
    /// names an unknown built-in or an empty name.
    pub(crate) fn registry(&self) -> Result<DeciderRegistry, String> {
        let registry = DeciderRegistry::new();
        let Some((recorded, builtin)) = self.decider.as_deref().and_then(|d| d.split_once('='))
        else {
            return Ok(registry);
        };
        let (recorded, builtin) = (recorded.trim(), builtin.trim());
        if recorded.is_empty() {
            return Err(format!(
                "--decider {recorded}={builtin}: the recorded name is empty"
            ));
        }
        match registry.get(builtin) {
            Some(f) => Ok(registry.with(recorded, f)),
            None => Err(format!(
                "--decider {recorded}={builtin}: unknown built-in decider `{builtin}` (this \
                 program has: {})",
                registry.names().join(", ")
            )),
        }
    }
}

/// Writes text for a person to stdout (through [`crate::out::text`]: a trace's strings
/// cannot drive the terminal); a closed pipe ends the process quietly.
fn emit(text: &str) {
    crate::out::stdout_raw(&crate::out::text(text));
}

/// The trace reader's memory bound: [`TraceLimits::DEFAULT`], each limit replaced by its
/// environment variable (`AGENTLOOP_TRACE_MAX_BYTES`, `AGENTLOOP_TRACE_MAX_LINE_BYTES`,
/// `AGENTLOOP_TRACE_MAX_LOADED_BYTES`) when set.
pub(crate) fn trace_limits(path: &Path) -> Result<TraceLimits, TraceError> {
    TraceLimits::from_vars(|k| std::env::var(k).ok()).map_err(|message| TraceError::Io {
        path: path.display().to_string(),
        message,
    })
}

/// Opens a trace file: a regular file (a FIFO or a device is refused at once, not read
/// forever), read a line at a time within `limits` (the reader reports a file or line over
/// them as `TraceError::TooLarge`; at most a byte past them is read).
pub(crate) fn open_trace(
    path: &Path,
    limits: &TraceLimits,
) -> Result<impl Iterator<Item = std::io::Result<String>>, TraceError> {
    use std::io::Read as _;
    let file = open_regular_file(path).map_err(|e| TraceError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    let file = std::io::BufReader::new(file.take(limits.file_bytes.saturating_add(2)));
    Ok(agentloop::store::regular_file::capped_lines(
        file,
        limits.line_bytes,
    ))
}

/// The records of the trace at `path` one at a time ([`open_trace`]): of a version this build
/// replays, or of any version this crate ever wrote when `any_version` (to show, diff or view
/// it).
pub(crate) fn trace_records(
    path: &Path,
    any_version: bool,
) -> Result<RecordReader<impl Iterator<Item = std::io::Result<String>>>, TraceError> {
    let limits = trace_limits(path)?;
    let oldest = if any_version {
        OLDEST_READABLE_TRACE_VERSION
    } else {
        OLDEST_TRACE_VERSION
    };
    RecordReader::open(
        open_trace(path, &limits)?,
        &path.display().to_string(),
        oldest,
        limits,
    )
}

/// Reads the whole trace at `path` ([`trace_records`]) within its limits, the loaded-bytes
/// limit included.
pub(crate) fn read_trace(path: &Path, any_version: bool) -> Result<Trace, TraceError> {
    let mut records = trace_records(path, any_version)?.holding();
    let mut all = Vec::new();
    for r in &mut records {
        all.push(r?);
    }
    Ok(Trace {
        header: records.header().clone(),
        records: all,
    })
}

/// At most `max` lines of `diff`, then how many were left out.
fn clipped(diff: &str, max: usize) -> String {
    let lines: Vec<&str> = diff.lines().collect();
    if lines.len() <= max {
        return diff.to_string();
    }
    format!(
        "{}\n… ({} more diff lines)\n",
        lines[..max].join("\n"),
        lines.len() - max
    )
}

/// Characters of a header value printed before it is cut.
const HEADER_VALUE_CHARS: usize = 200;

/// `s` cut at `max` characters, with an ellipsis.
fn clip_line(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Lines of a record diff printed before it is cut.
const DIFF_LINES: usize = 60;

/// Reads a trace of any version this crate ever wrote (show, diff and view read; only replay
/// needs a replayable version).
fn load(path: &Path) -> Result<Trace, ExitCode> {
    read_trace(path, true).map_err(|e| {
        errln!("error: {e}");
        ExitCode::from(2)
    })
}

/// `trace show`.
pub(crate) fn show_main(args: ShowArgs) -> ExitCode {
    let trace = match load(&args.trace) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let transcript = Transcript::from_trace(&trace);
    let options = |style| RenderOptions {
        style,
        states: !args.no_states,
        indexes: !args.no_indexes,
        schemas: true,
    };
    match args.format {
        ShowFormat::Text => emit(&transcript.render(options(Style::Text))),
        ShowFormat::Markdown => emit(&transcript.render(options(Style::Markdown))),
        ShowFormat::Json => {
            let json = serde_json::to_string_pretty(&transcript).unwrap_or_default();
            crate::out::stdout_raw(&format!("{}\n", crate::out::json(&json)));
        }
    }
    ExitCode::SUCCESS
}

/// Whether `a` and `b` name the same existing file (links followed).
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        x.dev() == y.dev() && x.ino() == y.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (x, y);
        matches!(
            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
            (Ok(p), Ok(q)) if p == q
        )
    }
}

/// `trace view`: 0 written, 2 when the trace cannot be read or the page cannot be written
/// (or would overwrite the trace: `trace view run.html` of a trace named `.html` without
/// `-o`). The trace is read twice, a record at a time, never whole: once to lay the page out,
/// once to write each record's JSON into it. The page goes to a temporary file next to OUT,
/// renamed over OUT when complete, so a failure leaves no half-written page.
pub(crate) fn view_main(args: ViewArgs) -> ExitCode {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| args.trace.with_extension("html"));
    if same_file(&args.trace, &out) {
        errln!(
            "error: {}: the page would overwrite the trace it shows; name another file with -o",
            out.display()
        );
        return ExitCode::from(2);
    }
    let fail = |e: &dyn std::fmt::Display| {
        errln!("error: {e}");
        ExitCode::from(2)
    };
    // Pass 1: the layout.
    let view = match lay_out(&args.trace) {
        Ok(v) => v,
        Err(e) => return fail(&e),
    };
    let title = args
        .trace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| args.trace.display().to_string());
    // Pass 2: the page, the records streamed into it.
    let written = write_replacing(&out, |w| {
        write_page(&args.trace, w, &view, &title, view.meta.end).map_err(std::io::Error::other)
    });
    if let Err(e) = written {
        return fail(&format!("{}: {e}", out.display()));
    }
    emit(&format!(
        "wrote {} ({} records, {} lanes, {} timers, {} marks)\n",
        out.display(),
        view.meta.end,
        view.lanes.len(),
        view.timers.len(),
        view.marks.len()
    ));
    ExitCode::SUCCESS
}

/// Pass 1 of `trace view`: the page's layout, the trace read a record at a time.
fn lay_out(path: &Path) -> Result<crate::trace_view::View, TraceError> {
    let mut records = trace_records(path, true)?;
    let mut layout = crate::trace_view::Layout::default();
    for r in &mut records {
        layout.record(&r?);
    }
    Ok(layout.finish(records.header()))
}

/// Pass 2 of `trace view`: writes the page for `view` to `w`, each of the trace's `count`
/// records read again and written as it is read. (An error names what went wrong, not the
/// temporary file: the caller names the page.)
fn write_page(
    trace: &Path,
    w: &mut std::io::BufWriter<std::fs::File>,
    view: &crate::trace_view::View,
    title: &str,
    count: u64,
) -> Result<(), String> {
    use crate::trace_view::{page_data_head, page_end, page_start, script_json};
    let io = |e: std::io::Error| e.to_string();
    let head = page_data_head(view).ok_or("the page data could not be laid out")?;
    w.write_all(page_start(title).as_bytes()).map_err(io)?;
    w.write_all(head.as_bytes()).map_err(io)?;
    let records = trace_records(trace, true).map_err(|e| e.to_string())?;
    // Each record as the trace file has it (a request with its new messages and `prefix`), so
    // the page grows with the trace, not with the square of its requests.
    let mut encoder = agentloop_core::trace::TraceEncoder::new();
    let mut line = Vec::new();
    let header = agentloop_core::trace::TraceRecord::Header(Box::new(records.header().clone()));
    encoder
        .encode(&header, &mut line)
        .map_err(|e| e.to_string())?;
    let mut n = 0u64;
    for r in records {
        let r = r.map_err(|e| e.to_string())?;
        if n > 0 {
            w.write_all(b",").map_err(io)?;
        }
        line.clear();
        encoder.encode(&r, &mut line).map_err(|e| e.to_string())?;
        let value: serde_json::Value =
            serde_json::from_slice(&line).unwrap_or(serde_json::Value::Null);
        w.write_all(script_json(&value).as_bytes()).map_err(io)?;
        n += 1;
    }
    if n != count {
        return Err(format!(
            "{}: the trace changed while it was read ({count} records, then {n})",
            trace.display()
        ));
    }
    w.write_all(b"]}").map_err(io)?;
    w.write_all(page_end().as_bytes()).map_err(io)
}

fn side(name: &str, s: &Summary) -> String {
    format!("  {name}: {s}")
}

fn diff_text(d: &TraceDiff, a: &Path, b: &Path) -> String {
    let mut o = String::new();
    let (a, b) = (a.display(), b.display());
    for c in &d.header {
        let show = |v: &Option<serde_json::Value>| {
            v.as_ref()
                .map(|v| {
                    // Under its own key, so a tool list shortens to names.
                    let key = c.path.rsplit('.').next().unwrap_or_default();
                    let mut wrapped = serde_json::json!({ key: v });
                    agentloop_trace_tools::trace_diff::compact_tools(&mut wrapped);
                    clip_line(&wrapped[key].to_string(), HEADER_VALUE_CHARS)
                })
                .unwrap_or_else(|| "<absent>".into())
        };
        let _ = writeln!(o, "header {}: {} | {}", c.path, show(&c.a), show(&c.b));
    }
    match &d.divergence {
        None if d.header.is_empty() => {
            let _ = writeln!(
                o,
                "equivalent: {} records{}",
                d.records.0,
                if d.records.0 == d.records.1 {
                    String::new()
                } else {
                    format!(" vs {}", d.records.1)
                }
            );
        }
        None => {
            let _ = writeln!(o, "records equivalent ({} records)", d.records.0);
        }
        Some(v) => {
            let at = |i: Option<u64>| {
                i.map(|i| format!("index {i}"))
                    .unwrap_or_else(|| "<end>".into())
            };
            let cause = |c: &Option<(u64, String)>| {
                c.as_ref()
                    .map(|(i, n)| format!(" (in the step of input {i}: {n})"))
                    .unwrap_or_default()
            };
            let _ = writeln!(
                o,
                "first divergence: {a} {}{}, {b} {}{}",
                at(v.index_a),
                cause(&v.input_a),
                at(v.index_b),
                cause(&v.input_b)
            );
            let _ = write!(o, "{}", clipped(&v.diff, DIFF_LINES));
        }
    }
    let _ = writeln!(o, "summary:");
    let _ = writeln!(o, "{}", side(&a.to_string(), &d.a));
    let _ = writeln!(o, "{}", side(&b.to_string(), &d.b));
    o
}

/// `trace diff`: 0 when equivalent, 1 when they differ, 2 when a trace cannot be read.
pub(crate) fn diff_main(args: DiffArgs) -> ExitCode {
    let (a, b) = match (load(&args.a), load(&args.b)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    let d = diff(
        &a,
        &b,
        DiffOptions {
            strict: args.strict,
        },
    );
    emit(&diff_text(&d, &args.a, &args.b));
    if d.is_equivalent() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn what_if_text(w: &WhatIf, changes: &[String]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "what-if replay with {}", changes.join(", "));
    match &w.divergence {
        None => {
            let _ = writeln!(o, "behaviour unchanged: {} records", w.trace.records.len());
        }
        Some(d) => {
            let cause = w
                .cause
                .as_ref()
                .map(|(i, n)| format!(" (in the step of input {i}: {n})"))
                .unwrap_or_default();
            let _ = writeln!(o, "behaviour first differs at index {}{cause}", d.index);
            let _ = write!(o, "{}", clipped(&w.diff, DIFF_LINES));
        }
    }
    if let Some(m) = &w.missing {
        let _ = writeln!(o, "replay ended: {m}");
    }
    if w.unused_inputs > 0 {
        let _ = writeln!(
            o,
            "{} recorded input{} not fed: the changed run had ended",
            w.unused_inputs,
            if w.unused_inputs == 1 { "" } else { "s" }
        );
    }
    let _ = writeln!(o, "outcome:");
    let _ = writeln!(o, "  recorded: {}", w.recorded);
    let _ = writeln!(o, "  changed:  {}", w.replayed);
    o
}

/// `replay T --set K=V [--decider NAME]`: 0 when the changed run behaves like the recording,
/// 1 when it differs, 2 on bad input (unreadable trace, bad setting, unknown decider).
pub(crate) fn what_if_main(path: &Path, args: &WhatIfArgs) -> ExitCode {
    let trace = match load(path) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let mut config = trace.header.config.clone();
    let mut changes = Vec::new();
    for s in &args.set {
        let applied = parse_assignment(s).and_then(|(k, v)| apply_setting(&mut config, k, v));
        if let Err(e) = applied {
            errln!("error: --set {s}: {e}");
            return ExitCode::from(2);
        }
        changes.push(s.clone());
    }
    let registry = match args.registry() {
        Ok(r) => r,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(name) = args.decider.as_ref().filter(|d| !d.contains('=')) {
        match registry.get(name) {
            Some(f) => config.decider = agentloop_core::react::DeciderRef::new(name.clone(), f),
            None => {
                errln!(
                    "error: --decider {name}: unknown decider (this program has: {})",
                    registry.names().join(", ")
                );
                return ExitCode::from(2);
            }
        }
        changes.push(format!("decider={name}"));
    }
    let w = match what_if(&trace, config, &registry) {
        Ok(w) => w,
        Err(e) => {
            errln!("error: {}: {e}", path.display());
            if matches!(e, TraceError::UnknownDecider { .. }) {
                errln!("hint: name a decider this program has with --decider");
            }
            if matches!(e, TraceError::UnknownRetryDecider { .. }) {
                errln!(
                    "hint: the agentloop command has only the built-in retry decider; replay \
                     this trace from the program that recorded it"
                );
            }
            return ExitCode::from(2);
        }
    };
    emit(&what_if_text(&w, &changes));
    if w.divergence.is_none() && w.missing.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Formats `trace import` reads.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ImportFormat {
    /// A JSON array of OpenAI chat-completions messages (`tool_calls` and `tool` results).
    OpenaiChat,
    /// An Inspect AI eval log (its default `.eval`, a zip, or its `.json`, with the samples):
    /// one trace, one script and one `.inspect.json` (the sample's id, target, scores, usage
    /// per model) per sample, written into the directory `--out` (default: FILE with extension
    /// `.traces`).
    InspectEval,
    /// OpenTelemetry GenAI spans in OTLP JSON (`resourceSpans`, chat spans with
    /// `gen_ai.input.messages` / `gen_ai.output.messages` or the older message events): one
    /// trace and one script per trace id, written into the directory `--out` (default: FILE
    /// with extension `.traces`).
    OtelGenai,
}

/// `agentloop trace import`.
#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// What the file holds.
    #[arg(long = "from", value_enum)]
    pub from: ImportFormat,
    /// The recorded conversation.
    pub file: PathBuf,
    /// Where to write the trace (default: FILE with extension `.trace.jsonl`); for
    /// `inspect-eval` and `otel-genai`, the directory of the traces (default: FILE with
    /// extension `.traces`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where to write the scripted model's script (default: FILE with extension `.script.json`;
    /// not for `inspect-eval` and `otel-genai`, which write `NAME.script.json` beside each
    /// trace).
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// The model name recorded in the trace (`inspect-eval`, `otel-genai`: when the file names
    /// none).
    #[arg(long, default_value = "imported")]
    pub model: String,
}

/// The scripted model's script replaying `replies` (ids and argument text kept), in the
/// script format of `agentloop::provider::scripted`.
fn script_of(replies: &[agentloop_trace_tools::import::Reply]) -> serde_json::Value {
    use serde_json::{json, Value};
    let turns: Vec<Value> = replies
        .iter()
        .map(|r| {
            let mut turn = serde_json::Map::new();
            if !r.text.is_empty() {
                turn.insert("text".into(), Value::String(r.text.clone()));
            }
            let calls: Vec<Value> = r
                .tool_calls
                .iter()
                .map(|(id, name, arguments)| {
                    // Valid JSON as a value; anything else verbatim as raw argument text.
                    let arguments = serde_json::from_str(arguments)
                        .unwrap_or_else(|_| Value::String(arguments.clone()));
                    json!({"id": id, "name": name, "arguments": arguments})
                })
                .collect();
            if !calls.is_empty() {
                turn.insert("tool_calls".into(), Value::Array(calls));
            }
            Value::Object(turn)
        })
        .collect();
    json!({
        "description": "imported with `agentloop trace import`",
        "turns": turns,
    })
}

/// Writes `path` through a temporary file next to it (`.NAME.PID.tmp`), synced and renamed
/// over `path` once `write` succeeded; on failure the temporary file is removed and `path`
/// is left as it was.
///
/// Only a regular file (or nothing) at `path` is replaced: a symbolic link, FIFO, socket,
/// device node or directory there is refused before anything is written (error kind
/// `InvalidInput`, naming what is there), and checked again just before the rename. So
/// `-o /dev/null` never replaces the system's device with a file.
pub(crate) fn write_replacing<T>(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<T>,
) -> std::io::Result<T> {
    replaceable(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    // A leftover of this process id is ours to remove; `create_new` never follows a link
    // planted at the temporary name.
    if std::fs::symlink_metadata(&tmp).is_ok_and(|m| m.is_file() || m.is_symlink()) {
        let _ = std::fs::remove_file(&tmp);
    }
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp);
    let result = created.and_then(|file| {
        let mut w = std::io::BufWriter::new(file);
        let value = write(&mut w)?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        replaceable(path)?;
        std::fs::rename(&tmp, path)?;
        Ok(value)
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Ok when `path` is missing or a regular file (not a link to one): what
/// [`write_replacing`] may rename a new file over.
fn replaceable(path: &Path) -> std::io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    match agentloop::store::regular_file::FileKind::of(&meta) {
        None => Ok(()),
        Some(kind) => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{kind} is there, not a regular file: refused (nothing written)"),
        )),
    }
}

/// `trace import`: 0 imported as recorded, 1 imported with findings (printed), 2 bad input.
pub(crate) fn import_main(args: ImportArgs) -> ExitCode {
    match args.from {
        ImportFormat::InspectEval => return import_inspect_main(args),
        ImportFormat::OtelGenai => return import_otel_main(args),
        ImportFormat::OpenaiChat => {}
    }
    let fail = |e: String| {
        errln!("error: {}: {e}", args.file.display());
        ExitCode::from(2)
    };
    let text = match read_regular_to_string(&args.file, crate::out::INPUT_LIMIT) {
        Ok(t) => t,
        Err(e) => return fail(e.to_string()),
    };
    let value: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => return fail(format!("not JSON: {e}")),
    };
    let options = agentloop_trace_tools::import::ImportOptions {
        agentloop: env!("CARGO_PKG_VERSION").into(),
        model: args.model.clone(),
        ..Default::default()
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| args.file.with_extension("trace.jsonl"));
    let script_path = args
        .script
        .clone()
        .unwrap_or_else(|| args.file.with_extension("script.json"));
    // The records go to the file as the machines make them (memory linear in the recording),
    // through a temporary file renamed over OUT once complete: a failed import leaves no
    // empty or partial trace.
    let mut bad_input = None;
    let written = write_replacing(&out, |w| {
        // Each request's messages once: the trace grows with the conversation.
        let mut encoder = agentloop_core::trace::TraceEncoder::new();
        let mut line = Vec::new();
        let streamed = agentloop_trace_tools::import::openai_chat_to(&value, &options, |record| {
            line.clear();
            encoder
                .encode(record, &mut line)
                .map_err(std::io::Error::from)?;
            w.write_all(&line)
        });
        streamed.map_err(|e| match e {
            agentloop_trace_tools::import::StreamError::Import(e) => {
                bad_input = Some(e.to_string());
                std::io::Error::other("not imported")
            }
            agentloop_trace_tools::import::StreamError::Sink(e) => e,
        })
    });
    let imported = match (written, bad_input) {
        (_, Some(e)) => return fail(e),
        (Ok(i), None) => i,
        (Err(e), None) => {
            errln!("error: {}: {e}", out.display());
            return ExitCode::from(2);
        }
    };
    let script = serde_json::to_string_pretty(&script_of(&imported.replies)).unwrap_or_default();
    if let Err(e) = write_replacing(&script_path, |w| w.write_all((script + "\n").as_bytes())) {
        errln!("error: {}: {e}", script_path.display());
        return ExitCode::from(2);
    }
    let summary = &imported.summary;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "imported {} assistant message{} as {} ({} records; {summary})",
        imported.replies.len(),
        if imported.replies.len() == 1 { "" } else { "s" },
        out.display(),
        imported.records
    );
    let _ = writeln!(o, "script: {}", script_path.display());
    for f in &imported.findings {
        let _ = writeln!(o, "differs: {f}");
    }
    emit(&o);
    if imported.findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The most bytes an Inspect `.eval` log may hold once inflated (256 MiB): a zip that
/// inflates to more (a zip bomb) is refused after at most this much was read.
const INSPECT_UNCOMPRESSED_LIMIT: u64 = 256 << 20;

/// `trace import --from inspect-eval`: each sample of the log (`.eval` or `.json`) as
/// `DIR/ID_epochN.jsonl`, `DIR/ID_epochN.script.json` and `DIR/ID_epochN.inspect.json` (what
/// Inspect recorded about the sample beyond the conversation). 0 imported as recorded, 1 with
/// findings (printed), 2 bad input.
fn import_inspect_main(args: ImportArgs) -> ExitCode {
    use agentloop_trace_tools::import_inspect::{inspect_eval, read_log};
    let fail = |e: String| {
        errln!("error: {}: {e}", args.file.display());
        ExitCode::from(2)
    };
    if args.script.is_some() {
        return fail(
            "--script is for openai-chat; the scripts of this format go beside its traces".into(),
        );
    }
    let bytes = match crate::regular_file::read_regular_file(&args.file, crate::out::INPUT_LIMIT) {
        Ok(b) => b,
        Err(e) => return fail(e.to_string()),
    };
    // The JSON log's text is capped like the file; a `.eval`'s inflated entries together.
    let value = match read_log(&bytes, INSPECT_UNCOMPRESSED_LIMIT) {
        Ok(v) => v,
        Err(e) => return fail(e.to_string()),
    };
    drop(bytes);
    let options = agentloop_trace_tools::import::ImportOptions {
        agentloop: env!("CARGO_PKG_VERSION").into(),
        model: args.model.clone(),
        ..Default::default()
    };
    let samples = match inspect_eval(&value, &options) {
        Ok(s) => s,
        Err(e) => {
            errln!("error: {}: {e}", args.file.display());
            return ExitCode::from(2);
        }
    };
    let items = samples.iter().map(|s| {
        (
            s.file_stem(),
            format!("sample {} (epoch {})", s.id, s.epoch),
            &s.imported,
            Some(("inspect.json", &s.metadata)),
        )
    });
    write_imported_dir(&args, items, ("sample", "samples"))
}

/// `trace import --from otel-genai`: each OpenTelemetry trace of the export as
/// `DIR/TRACEID.jsonl` and `DIR/TRACEID.script.json`. 0 imported as recorded, 1 with findings
/// (printed), 2 bad input.
fn import_otel_main(args: ImportArgs) -> ExitCode {
    use agentloop_trace_tools::import_otel::otel_genai;
    let value = match read_import_json(&args) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let options = agentloop_trace_tools::import::ImportOptions {
        agentloop: env!("CARGO_PKG_VERSION").into(),
        model: args.model.clone(),
        ..Default::default()
    };
    let traces = match otel_genai(&value, &options) {
        Ok(t) => t,
        Err(e) => {
            errln!("error: {}: {e}", args.file.display());
            return ExitCode::from(2);
        }
    };
    let items = traces.iter().map(|t| {
        (
            t.file_stem(),
            format!("trace {}", t.trace_id),
            &t.imported,
            None,
        )
    });
    write_imported_dir(&args, items, ("trace", "traces"))
}

/// Reads FILE of a per-item import as JSON (refusing `--script`); on failure the error is
/// printed and the exit code returned.
fn read_import_json(args: &ImportArgs) -> Result<serde_json::Value, ExitCode> {
    let fail = |e: String| {
        errln!("error: {}: {e}", args.file.display());
        ExitCode::from(2)
    };
    if args.script.is_some() {
        return Err(fail(
            "--script is for openai-chat; the scripts of this format go beside its traces".into(),
        ));
    }
    let text = read_regular_to_string(&args.file, crate::out::INPUT_LIMIT)
        .map_err(|e| fail(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| fail(format!("not JSON: {e}")))
}

/// One imported item for [`write_imported_dir`]: its file stem, its label in messages, the
/// import, and a sidecar (`STEM.SUFFIX`, JSON) when the format records more than a trace holds.
type ImportedItem<'a> = (
    String,
    String,
    &'a agentloop_trace_tools::import::Imported,
    Option<(&'static str, &'a serde_json::Value)>,
);

/// Writes each imported item as `DIR/STEM.jsonl`, `DIR/STEM.script.json` and its sidecar, and
/// prints the summary and the differences. 0 as recorded, 1 with findings, 2 when a file
/// cannot be written.
fn write_imported_dir<'a>(
    args: &ImportArgs,
    items: impl ExactSizeIterator<Item = ImportedItem<'a>>,
    (one, many): (&str, &str),
) -> ExitCode {
    let count = items.len();
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| args.file.with_extension("traces"));
    // A directory, or nothing: a link there is not followed (the files would land where it
    // points), nor is anything else written through.
    if let Some(kind) = std::fs::symlink_metadata(&dir)
        .ok()
        .filter(|m| !m.is_dir())
        .and_then(|m| agentloop::store::regular_file::FileKind::of(&m))
    {
        errln!(
            "error: {}: {kind} is there, not a directory: refused (nothing written)",
            dir.display()
        );
        return ExitCode::from(2);
    }
    if let Err(e) = std::fs::create_dir_all(&dir) {
        errln!("error: {}: {e}", dir.display());
        return ExitCode::from(2);
    }
    let mut o = String::new();
    let mut with_findings = 0usize;
    let mut stems = std::collections::HashSet::new();
    for (file_stem, label, imported, sidecar) in items {
        // Two items whose ids differ only in replaced characters still get two files.
        let mut stem = file_stem.clone();
        let mut n = 1;
        while !stems.insert(stem.clone()) {
            n += 1;
            stem = format!("{file_stem}-{n}");
        }
        let trace_path = dir.join(format!("{stem}.jsonl"));
        let script_path = dir.join(format!("{stem}.script.json"));
        let trace = imported.trace.to_jsonl();
        let script =
            serde_json::to_string_pretty(&script_of(&imported.replies)).unwrap_or_default();
        let mut files = vec![(trace_path, trace), (script_path, script + "\n")];
        if let Some((suffix, value)) = sidecar {
            let text = serde_json::to_string_pretty(value).unwrap_or_default();
            files.push((dir.join(format!("{stem}.{suffix}")), text + "\n"));
        }
        for (path, text) in &files {
            if let Err(e) = write_replacing(path, |w| w.write_all(text.as_bytes())) {
                errln!("error: {}: {e}", path.display());
                return ExitCode::from(2);
            }
        }
        if !imported.findings.is_empty() {
            with_findings += 1;
        }
        for f in &imported.findings {
            let _ = writeln!(o, "differs: {label}: {f}");
        }
    }
    let head = format!(
        "imported {count} {} into {} ({with_findings} with differences)\n",
        if count == 1 { one } else { many },
        dir.display()
    );
    emit(&(head + &o));
    if with_findings == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
