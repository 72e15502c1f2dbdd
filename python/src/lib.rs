//! The native part of agentloop's Python package (`agentloop._agentloop`): traces loaded,
//! replayed, what-if replayed and turned into tables, over the pure crates `agentloop-core`
//! and `agentloop-trace-tools` (no async runtime, no HTTP). This module reads the files; the
//! analysis is the crates' own — replay is `agentloop_core::trace::replay_with`, what-if is
//! `agentloop_trace_tools::whatif`, the tables are `agentloop_trace_tools::export`, the same
//! code `agentloop replay` and `agentloop trace export` run.
//!
//! No panic crosses into Python: every call into the crates runs under `catch_unwind` and a
//! panic becomes `agentloop.InternalError`. Bad input is one of the typed exceptions below.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyImportError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use pyo3::IntoPyObjectExt as _;
use serde_json::{json, Value};

use agentloop_core::react::{DeciderRef, DeciderRegistry};
use agentloop_core::trace::{
    replay_reader, replay_with, RecordReader, Trace as CoreTrace, TraceError as CoreError,
    TraceLimits, TraceRecord, OLDEST_READABLE_TRACE_VERSION, OLDEST_TRACE_VERSION,
};
use agentloop_store::corpus::par_map;
use agentloop_store::regular_file::{capped_lines, open_regular, OpenError};
use agentloop_trace_tools::export::{columns, rows, sidecar_path, Table, Timing, TIMES_SUFFIX};
use agentloop_trace_tools::trace_diff::input_before;
use agentloop_trace_tools::transcript::{RenderOptions, Style, Transcript};
use agentloop_trace_tools::whatif::{apply_setting, parse_assignment, what_if, Figures};

create_exception!(
    agentloop,
    TraceError,
    PyException,
    "A trace could not be read or replayed (the base of agentloop's trace exceptions)."
);
create_exception!(
    agentloop,
    TraceReadError,
    TraceError,
    "The trace file could not be read (missing, not a regular file, permission denied)."
);
create_exception!(
    agentloop,
    TraceCorruptError,
    TraceError,
    "The file is not a valid trace: a line that is not a record, no header, records out of order."
);
create_exception!(
    agentloop,
    TraceTooLargeError,
    TraceReadError,
    "The trace is over the reader's memory bound (its file, a line, or what it holds loaded; \
     AGENTLOOP_TRACE_MAX_BYTES, AGENTLOOP_TRACE_MAX_LINE_BYTES, AGENTLOOP_TRACE_MAX_LOADED_BYTES)."
);
create_exception!(
    agentloop,
    TraceVersionError,
    TraceError,
    "The trace's format version is one this build does not read (or, for replay, does not replay)."
);
create_exception!(
    agentloop,
    UnknownDeciderError,
    TraceError,
    "The trace was recorded with a decision function this package does not have."
);
create_exception!(
    agentloop,
    SettingError,
    PyValueError,
    "A what-if setting the configuration cannot take (an unknown key, a bad value)."
);
create_exception!(
    agentloop,
    InternalError,
    PyException,
    "A bug in agentloop (a panic in its Rust code, caught before it reached Python)."
);

/// The Python exception of a trace error.
fn trace_err(e: CoreError) -> PyErr {
    let text = e.to_string();
    match e {
        CoreError::Io { .. } => TraceReadError::new_err(text),
        CoreError::Parse { .. }
        | CoreError::NoHeader { .. }
        | CoreError::Index { .. }
        | CoreError::ToolRules { .. } => TraceCorruptError::new_err(text),
        CoreError::TooLarge { .. } => TraceTooLargeError::new_err(text),
        CoreError::Version { .. } => TraceVersionError::new_err(text),
        CoreError::UnknownDecider { .. } | CoreError::UnknownRetryDecider { .. } => {
            UnknownDeciderError::new_err(text)
        }
        _ => TraceError::new_err(text),
    }
}

/// Runs `f`, turning a panic into [`InternalError`] (`what` names the work).
fn guarded<R>(what: &str, f: impl FnOnce() -> PyResult<R>) -> PyResult<R> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(InternalError::new_err(format!(
            "{what} panicked (a bug in agentloop: please report it)"
        )))
    })
}

/// The trace reader's memory bound: the defaults, or the `AGENTLOOP_TRACE_MAX_*` variables
/// as the `agentloop` command reads them.
fn trace_limits(origin: &str) -> Result<TraceLimits, CoreError> {
    TraceLimits::from_vars(|k| std::env::var(k).ok()).map_err(|message| CoreError::Io {
        path: origin.to_string(),
        message,
    })
}

/// Opens `path` as the `agentloop` command opens its inputs (links followed, then anything
/// but a regular file refused without blocking: a FIFO, `/dev/zero`, a directory).
fn open_input(path: &Path) -> std::io::Result<std::fs::File> {
    let resolved = std::fs::canonicalize(path)?;
    open_regular(&resolved, std::fs::OpenOptions::new().read(true)).map_err(|e| match e {
        OpenError::NotRegular(kind) => std::io::Error::other(format!("{kind}, not a regular file")),
        OpenError::Io(e) => e,
    })
}

/// Where the lines of a trace file stopped being UTF-8 (set by [`trace_records`]'s lines).
type BadText = std::rc::Rc<Cell<Option<usize>>>;

/// The records of the trace file at `path` one at a time (of a version from `oldest` on),
/// within its [`TraceLimits`] (over them: `TraceError::TooLarge`); pass the reader's errors
/// through [`text_error`] with the returned [`BadText`].
fn trace_records(
    path: &Path,
    oldest: u32,
) -> Result<
    (
        RecordReader<impl Iterator<Item = std::io::Result<String>>>,
        BadText,
    ),
    CoreError,
> {
    use std::io::Read as _;
    let origin = path.display().to_string();
    let limits = trace_limits(&origin)?;
    let file = open_input(path).map_err(|e| CoreError::Io {
        path: origin.clone(),
        message: e.to_string(),
    })?;
    let file = std::io::BufReader::new(file.take(limits.file_bytes.saturating_add(2)));
    let bad_text = BadText::default();
    let seen = bad_text.clone();
    let lines = capped_lines(file, limits.line_bytes)
        .enumerate()
        .map(move |(i, line)| {
            line.inspect_err(|e| {
                if e.kind() == std::io::ErrorKind::InvalidData {
                    seen.set(Some(i + 1));
                }
            })
        });
    let reader = RecordReader::open(lines, &origin, oldest, limits);
    let reader = reader.map_err(|e| text_error(e, &bad_text))?;
    Ok((reader, bad_text))
}

/// `e`, a corrupt trace rather than an unreadable file when its cause was text that is not
/// UTF-8.
fn text_error(e: CoreError, bad_text: &BadText) -> CoreError {
    match (e, bad_text.get()) {
        (CoreError::Io { path, message }, Some(line)) => CoreError::Parse {
            path,
            line,
            column: 1,
            message,
        },
        (e, _) => e,
    }
}

/// Reads the whole trace file at `path` (any version this crate ever wrote) within its
/// limits ([`trace_records`]), the loaded-bytes limit included.
fn read_trace(path: &Path) -> Result<CoreTrace, CoreError> {
    let (reader, bad_text) = trace_records(path, OLDEST_READABLE_TRACE_VERSION)?;
    let mut reader = reader.holding();
    let mut records = Vec::new();
    for r in &mut reader {
        records.push(r.map_err(|e| text_error(e, &bad_text))?);
    }
    Ok(CoreTrace {
        header: reader.header().clone(),
        records,
    })
}

/// The durations of the timing sidecar next to `path` (none when it is absent or unreadable).
fn read_timing(path: &Path) -> Timing {
    let sidecar = sidecar_path(path);
    match std::fs::metadata(&sidecar) {
        Ok(m) if m.is_file() => std::fs::read_to_string(&sidecar)
            .map(|t| Timing::from_sidecar(&t))
            .unwrap_or_default(),
        _ => Timing::default(),
    }
}

/// A JSON value as a Python object (objects as dicts, arrays as lists).
fn to_py(py: Python<'_>, v: &Value) -> PyResult<PyObject> {
    match v {
        Value::Null => Ok(py.None()),
        Value::Bool(b) => b.into_py_any(py),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_py_any(py)
            } else if let Some(u) = n.as_u64() {
                u.into_py_any(py)
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_py_any(py)
            }
        }
        Value::String(s) => s.into_py_any(py),
        Value::Array(a) => {
            let list = PyList::empty(py);
            for x in a {
                list.append(to_py(py, x)?)?;
            }
            list.into_py_any(py)
        }
        Value::Object(o) => {
            let dict = PyDict::new(py);
            for (k, x) in o {
                dict.set_item(k, to_py(py, x)?)?;
            }
            dict.into_py_any(py)
        }
    }
}

/// The table named `name`, or a `ValueError` listing the names.
fn table_of(name: &str) -> PyResult<Table> {
    Table::from_name(name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown table `{name}` (tables: {})",
            Table::ALL.map(Table::name).join(", ")
        ))
    })
}

/// Rows of `table` as a dict of columns (name → list), in the order of [`columns`].
fn column_dict<'a>(
    py: Python<'_>,
    table: Table,
    rows: impl IntoIterator<Item = &'a Vec<Value>>,
) -> PyResult<PyObject> {
    let names = columns(table);
    let lists: Vec<Bound<'_, PyList>> = names.iter().map(|_| PyList::empty(py)).collect();
    for row in rows {
        for (list, v) in lists.iter().zip(row) {
            list.append(to_py(py, v)?)?;
        }
    }
    let dict = PyDict::new(py);
    for (name, list) in names.iter().zip(lists) {
        dict.set_item(name, list)?;
    }
    dict.into_py_any(py)
}

/// A pandas DataFrame of a dict of columns; pandas is imported here only, so the package
/// imports without it.
fn data_frame(py: Python<'_>, columns: PyObject) -> PyResult<PyObject> {
    let pandas = py.import("pandas").map_err(|e| {
        PyImportError::new_err(format!(
            "agentloop's DataFrame methods need pandas (pip install pandas): {e}"
        ))
    })?;
    pandas
        .getattr("DataFrame")?
        .call1((columns,))?
        .into_py_any(py)
}

/// The trace files `paths` name, sorted and without duplicates (each file as given, each
/// directory walked for `*.jsonl` without following links, timing sidecars skipped — the
/// corpus walk of `agentloop replay DIR`), and the paths that could not be listed.
fn collect(paths: &[PathBuf]) -> (Vec<PathBuf>, Vec<(PathBuf, String)>) {
    agentloop_store::corpus::trace_files(paths, TIMES_SUFFIX)
}

/// A what-if setting's value as the text `--set KEY=VALUE` takes.
fn setting_text(v: &Bound<'_, PyAny>) -> PyResult<String> {
    if v.is_none() {
        return Ok("none".into());
    }
    if let Ok(b) = v.extract::<bool>() {
        return Ok(b.to_string());
    }
    Ok(v.str()?.to_string())
}

/// The `--set` key of a keyword argument: `retry_max_retries` → `retry.max_retries` (a
/// Python name cannot hold a dot); dotted keys as given.
fn setting_key(k: &str) -> String {
    match k.strip_prefix("retry_") {
        Some(rest) => format!("retry.{rest}"),
        None => k.to_string(),
    }
}

/// A what-if replay's settings: `KEY=VALUE` texts, and the decider named, if any.
struct Settings {
    set: Vec<String>,
    decider: Option<String>,
}

impl Settings {
    fn of(
        settings: Option<&Bound<'_, PyDict>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Settings> {
        let mut s = Settings {
            set: Vec::new(),
            decider: None,
        };
        for dict in [settings, kwargs].into_iter().flatten() {
            for (k, v) in dict.iter() {
                let key = setting_key(&k.str()?.to_string());
                let value = setting_text(&v)?;
                if key == "decider" {
                    s.decider = Some(value);
                } else {
                    s.set.push(format!("{key}={value}"));
                }
            }
        }
        if s.set.is_empty() && s.decider.is_none() {
            return Err(SettingError::new_err(
                "what_if needs at least one setting, e.g. what_if(max_steps=2)",
            ));
        }
        Ok(s)
    }

    /// The settings as the CLI prints them.
    fn texts(&self) -> Vec<String> {
        let mut t = self.set.clone();
        if let Some(d) = &self.decider {
            t.push(format!("decider={d}"));
        }
        t
    }

    /// `config` changed by the settings.
    fn apply(
        &self,
        mut config: agentloop_core::react::RunConfig,
        registry: &DeciderRegistry,
    ) -> Result<agentloop_core::react::RunConfig, String> {
        for s in &self.set {
            parse_assignment(s)
                .and_then(|(k, v)| apply_setting(&mut config, k, v))
                .map_err(|e| format!("{s}: {e}"))?;
        }
        if let Some(name) = &self.decider {
            let f = registry.get(name).ok_or_else(|| {
                format!(
                    "decider={name}: unknown decider (this package has: {})",
                    registry.names().join(", ")
                )
            })?;
            config.decider = DeciderRef::new(name.clone(), f);
        }
        Ok(config)
    }
}

/// The result of one what-if replay, as JSON.
fn what_if_json(trace: &CoreTrace, settings: &Settings) -> Result<Value, CoreError> {
    let registry = DeciderRegistry::new();
    let config = match settings.apply(trace.header.config.clone(), &registry) {
        Ok(c) => c,
        Err(e) => return Ok(json!({"setting_error": e})),
    };
    let w = what_if(trace, config, &registry)?;
    let (before, after) = (Figures::of(&w.recorded), Figures::of(&w.replayed));
    Ok(json!({
        "settings": settings.texts(),
        "changed": w.divergence.is_some() || w.missing.is_some(),
        "index": w.divergence.as_ref().map(|d| d.index),
        "cause": w.cause.as_ref().map(|(i, n)| json!({"index": i, "input": n})),
        "missing": w.missing.as_ref().map(|m| m.to_string()),
        "unused_inputs": w.unused_inputs,
        "changes": before.changes(&after),
        "before": before.json(),
        "after": after.json(),
        "diff": w.diff,
    }))
}

/// A trace read (any version ever written) but too old to replay (versions 1 and 2 lack
/// inputs later versions record).
fn too_old_to_replay(trace: &CoreTrace, path: &str) -> Option<String> {
    (trace.header.version < OLDEST_TRACE_VERSION).then(|| {
        format!(
            "{path}: trace version {} is read but not replayed (this build replays versions \
             {OLDEST_TRACE_VERSION} and later)",
            trace.header.version
        )
    })
}

/// The result of replaying one trace: `None` when identical, else the divergence as JSON.
/// The caller checks the version first ([`too_old_to_replay`]).
fn replay_json(trace: &CoreTrace) -> Result<Option<Value>, CoreError> {
    let Some(d) = replay_with(trace, &DeciderRegistry::new())? else {
        return Ok(None);
    };
    let record = |r: &Option<TraceRecord>| {
        r.as_ref()
            .and_then(|r| serde_json::to_value(r).ok())
            .unwrap_or(Value::Null)
    };
    let cause = input_before(trace, d.index as usize);
    Ok(Some(json!({
        "index": d.index,
        "input": cause.as_ref().map(|(i, _)| i),
        "input_name": cause.as_ref().map(|(_, n)| n),
        "recorded": record(&d.recorded),
        "replayed": record(&d.replayed),
        "diff": d.diff(),
    })))
}

/// A recorded trace: its records, the durations of its timing sidecar (when there is one),
/// and where it was read from.
#[pyclass(module = "agentloop", name = "Trace", frozen)]
struct PyTrace {
    trace: Arc<CoreTrace>,
    timing: Arc<Timing>,
    path: String,
    /// What an import could not carry over (empty for a recorded trace).
    findings: Vec<String>,
}

impl PyTrace {
    fn read(path: &Path) -> Result<PyTrace, CoreError> {
        let trace = read_trace(path)?;
        Ok(PyTrace {
            trace: Arc::new(trace),
            timing: Arc::new(read_timing(path)),
            path: path.display().to_string(),
            findings: Vec::new(),
        })
    }

    fn rows(&self, table: Table) -> Vec<Vec<Value>> {
        rows(&self.trace, &self.path, table, &self.timing)
    }

    fn table(&self, py: Python<'_>, name: &str) -> PyResult<PyObject> {
        let table = table_of(name)?;
        let rows = guarded("building the table", || Ok(self.rows(table)))?;
        column_dict(py, table, &rows)
    }
}

#[pymethods]
impl PyTrace {
    /// Reads the trace file at `path` (a version this package reads; the timing sidecar
    /// `NAME.times.jsonl` next to it, if any, fills the latency columns).
    ///
    /// Raises TraceReadError (cannot read the file), TraceCorruptError (not a valid trace),
    /// TraceVersionError (a format version this build does not read).
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<PyTrace> {
        py.allow_threads(|| {
            guarded("reading the trace", || {
                PyTrace::read(&path).map_err(trace_err)
            })
        })
    }

    /// Parses a trace from JSON Lines text (`name` names it in errors and in the tables).
    #[staticmethod]
    #[pyo3(signature = (text, name = "<string>"))]
    fn loads(py: Python<'_>, text: &str, name: &str) -> PyResult<PyTrace> {
        py.allow_threads(|| {
            guarded("parsing the trace", || {
                let trace = CoreTrace::read_lines(
                    text.lines().map(Ok::<_, std::convert::Infallible>),
                    name,
                )
                .map_err(trace_err)?;
                Ok(PyTrace {
                    trace: Arc::new(trace),
                    timing: Arc::new(Timing::default()),
                    path: name.to_string(),
                    findings: Vec::new(),
                })
            })
        })
    }

    /// Where the trace was read from.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// What the import of this trace could not carry over (`import_inspect`; empty for a
    /// recorded trace).
    #[getter]
    fn findings(&self) -> Vec<String> {
        self.findings.clone()
    }

    /// The trace format version.
    #[getter]
    fn version(&self) -> u32 {
        self.trace.header.version
    }

    /// The session the run belongs to.
    #[getter]
    fn session(&self) -> &str {
        &self.trace.header.session
    }

    /// The header (version, session, configuration, tools) as a dict.
    #[getter]
    fn header(&self, py: Python<'_>) -> PyResult<PyObject> {
        let v = serde_json::to_value(&self.trace.header)
            .map_err(|e| InternalError::new_err(e.to_string()))?;
        to_py(py, &v)
    }

    /// The records after the header, as dicts.
    fn records(&self, py: Python<'_>) -> PyResult<PyObject> {
        let v = serde_json::to_value(&self.trace.records)
            .map_err(|e| InternalError::new_err(e.to_string()))?;
        to_py(py, &v)
    }

    /// The number of records after the header.
    fn __len__(&self) -> usize {
        self.trace.records.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "<agentloop.Trace {:?}: version {}, session {:?}, {} records>",
            self.path,
            self.trace.header.version,
            self.trace.header.session,
            self.trace.records.len()
        )
    }

    /// How the run went: outcome, steps, tool calls, tokens in and out (a dict).
    fn summary(&self, py: Python<'_>) -> PyResult<PyObject> {
        let v = guarded("summarizing the trace", || {
            Ok(Figures::of(&Transcript::from_trace(&self.trace).summary).json())
        })?;
        to_py(py, &v)
    }

    /// The trace as a readable transcript (`agentloop trace show`); `markdown=True` for
    /// Markdown, `states=False` to leave out the machines' state changes.
    #[pyo3(signature = (markdown = false, states = true, indexes = true))]
    fn transcript(&self, markdown: bool, states: bool, indexes: bool) -> PyResult<String> {
        guarded("rendering the transcript", || {
            Ok(Transcript::from_trace(&self.trace).render(RenderOptions {
                style: if markdown {
                    Style::Markdown
                } else {
                    Style::Text
                },
                states,
                indexes,
                schemas: false,
            }))
        })
    }

    /// Replays the trace against fresh machines (`agentloop replay T`). `None` when it
    /// replays identically; else the first divergence: a dict with `index` (the record),
    /// `input` and `input_name` (the input whose step holds it), `recorded` and `replayed`
    /// (the two records, `None` for a missing one) and `diff` (a unified diff of them).
    ///
    /// Raises UnknownDeciderError (recorded with a decision function this package does not
    /// have) or TraceVersionError (a version too old to replay: 1 and 2).
    fn replay(&self, py: Python<'_>) -> PyResult<PyObject> {
        if let Some(e) = too_old_to_replay(&self.trace, &self.path) {
            return Err(TraceVersionError::new_err(e));
        }
        let trace = Arc::clone(&self.trace);
        let d = py.allow_threads(|| {
            guarded("replaying the trace", || {
                replay_json(&trace).map_err(trace_err)
            })
        })?;
        match d {
            None => Ok(py.None()),
            Some(v) => to_py(py, &v),
        }
    }

    /// Replays the recorded inputs against a changed configuration (`agentloop replay T
    /// --set KEY=VALUE`): `what_if(max_steps=2)`, `what_if({"retry.max_retries": 0})`
    /// (`retry_max_retries=0` works too), `decider="default"`. Returns a dict: `changed`,
    /// `index` (where behaviour first differs, or None), `cause`, `missing` (what the
    /// changed run waited for when the inputs ran out), `before` and `after` (outcome,
    /// steps, tool_calls, tokens_in, tokens_out), `changes` (`"steps 2 → 1"`, …), `diff`.
    ///
    /// Raises SettingError for a key or value the configuration cannot take.
    #[pyo3(signature = (settings = None, **kwargs))]
    fn what_if(
        &self,
        py: Python<'_>,
        settings: Option<&Bound<'_, PyDict>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyObject> {
        let settings = Settings::of(settings, kwargs)?;
        let trace = Arc::clone(&self.trace);
        let v = py.allow_threads(|| {
            guarded("the what-if replay", || {
                what_if_json(&trace, &settings).map_err(trace_err)
            })
        })?;
        if let Some(e) = v.get("setting_error").and_then(Value::as_str) {
            return Err(SettingError::new_err(e.to_string()));
        }
        to_py(py, &v)
    }

    /// The rows of a table (`runs`, `steps`, `tool_calls`, `events`) as a dict of columns
    /// (name → list): the columns of `agentloop trace export --table NAME`, without pandas.
    fn columns(&self, py: Python<'_>, table: &str) -> PyResult<PyObject> {
        self.table(py, table)
    }

    /// One row per run (a pandas DataFrame): outcome, reason, steps, tool calls, retries,
    /// tokens, latency.
    fn runs(&self, py: Python<'_>) -> PyResult<PyObject> {
        let c = self.table(py, "runs")?;
        data_frame(py, c)
    }

    /// One row per committed model step (a pandas DataFrame): finish reason, tool calls,
    /// tokens, text, latency, time to first token.
    fn steps(&self, py: Python<'_>) -> PyResult<PyObject> {
        let c = self.table(py, "steps")?;
        data_frame(py, c)
    }

    /// One row per tool call (a pandas DataFrame): tool, status, arguments, result, latency.
    fn tool_calls(&self, py: Python<'_>) -> PyResult<PyObject> {
        let c = self.table(py, "tool_calls")?;
        data_frame(py, c)
    }

    /// One row per record (a pandas DataFrame): index, kind (input, transition, effect),
    /// name, detail.
    fn events(&self, py: Python<'_>) -> PyResult<PyObject> {
        let c = self.table(py, "events")?;
        data_frame(py, c)
    }

    /// The trace's OpenTelemetry GenAI spans as an OTLP/JSON export request (a dict:
    /// `{"resourceSpans": [...]}`), as `agentloop trace export --format otlp` writes them. With
    /// `include_content`, the spans carry the messages, tool arguments and results and the
    /// tools' definitions (off by default: they may hold personal or secret data); the export
    /// then imports back with `agentloop.import_otel`. Span times come from the timing sidecar;
    /// without one, from the record order after the file's modification time.
    #[pyo3(signature = (include_content = false))]
    fn to_otlp(&self, py: Python<'_>, include_content: bool) -> PyResult<PyObject> {
        use agentloop_trace_tools::export_otlp::{otlp_export, otlp_spans, OtlpOptions, SpanTimes};
        let export = py.allow_threads(|| {
            guarded("exporting the spans", || {
                let path = Path::new(&self.path);
                let times = std::fs::read_to_string(sidecar_path(path))
                    .map(|t| SpanTimes::from_sidecar(&t))
                    .unwrap_or_default();
                let options = OtlpOptions {
                    include_content,
                    base_ms: modified_ms(path),
                };
                let spans = otlp_spans(&self.trace, &times, &options);
                Ok(otlp_export(spans, env!("CARGO_PKG_VERSION")))
            })
        })?;
        to_py(py, &export)
    }

    /// The trace as an Inspect AI eval log of one sample (a dict, the log's JSON form), as
    /// `agentloop trace export --format inspect` writes it: the sample is named by the file's
    /// stem, the log's time is the file's modification time.
    fn to_inspect(&self, py: Python<'_>) -> PyResult<PyObject> {
        use agentloop_trace_tools::export_inspect::{
            inspect_log_fields, inspect_sample, rfc3339_utc,
        };
        let log = py.allow_threads(|| {
            guarded("exporting the eval log", || {
                let path = Path::new(&self.path);
                let id = path
                    .file_name()
                    .map(|n| n.to_string_lossy().trim_end_matches(".jsonl").to_string())
                    .unwrap_or_else(|| "trace".into());
                let (sample, totals) = inspect_sample(&id, &self.trace);
                let created = rfc3339_utc(modified_ms(path) / 1000);
                let mut log = json!({"samples": [sample]});
                if let (Value::Object(log), Value::Object(fields)) = (
                    &mut log,
                    inspect_log_fields(&[totals], &created, env!("CARGO_PKG_VERSION")),
                ) {
                    log.extend(fields);
                }
                Ok(log)
            })
        })?;
        to_py(py, &log)
    }
}

/// When the file at `path` was last modified, in milliseconds since the Unix epoch (0 when it
/// cannot be told: an imported or parsed trace has no file).
fn modified_ms(path: &Path) -> u64 {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Every trace of `paths` read in parallel (the GIL released): per file, the trace or why it
/// could not be read, in path order; listing errors first.
fn read_corpus(
    py: Python<'_>,
    paths: Vec<PathBuf>,
) -> PyResult<Vec<(String, Result<PyTrace, PyErr>)>> {
    py.allow_threads(|| {
        let (files, errors) = collect(&paths);
        if files.is_empty() && errors.is_empty() {
            return Err(TraceReadError::new_err(format!(
                "no *.jsonl traces found in {}",
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let read = par_map(&files, |p| PyTrace::read(p));
        let mut out: Vec<(String, Result<PyTrace, PyErr>)> = errors
            .into_iter()
            .map(|(p, e)| {
                let name = p.display().to_string();
                let err = TraceReadError::new_err(format!("{name}: {e}"));
                (name, Err(err))
            })
            .collect();
        out.extend(files.iter().zip(read).map(|(p, r)| {
            let name = p.display().to_string();
            let r = match r {
                Some(Ok(t)) => Ok(t),
                Some(Err(e)) => Err(trace_err(e)),
                None => Err(InternalError::new_err(format!(
                    "{name}: reading the trace panicked (a bug in agentloop: please report it)"
                ))),
            };
            (name, r)
        }));
        Ok(out)
    })
}

/// The traces of `paths` (files, or directories walked for `*.jsonl`), in path order.
/// `skip_unreadable`: leave out a trace that cannot be read instead of raising its error.
#[pyfunction]
#[pyo3(signature = (paths, skip_unreadable = false))]
fn _load(py: Python<'_>, paths: Vec<PathBuf>, skip_unreadable: bool) -> PyResult<Vec<PyTrace>> {
    let mut out = Vec::new();
    for (_, r) in read_corpus(py, paths)? {
        match r {
            Ok(t) => out.push(t),
            Err(_) if skip_unreadable => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// A table of every trace of `paths`, concatenated in path order, as a dict of columns.
#[pyfunction]
#[pyo3(signature = (paths, table, skip_unreadable = false))]
fn _columns(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    table: &str,
    skip_unreadable: bool,
) -> PyResult<PyObject> {
    let table = table_of(table)?;
    let traces = _load(py, paths, skip_unreadable)?;
    let rows: Vec<Vec<Value>> = py.allow_threads(|| {
        par_map(&traces, |t| t.rows(table))
            .into_iter()
            .flat_map(Option::unwrap_or_default)
            .collect()
    });
    column_dict(py, table, &rows)
}

/// Replays every trace of `paths` in parallel (`agentloop replay DIR --json`): a dict with
/// `traces`, `identical`, `diverged`, `unreadable` and `files` (per trace: `path`, `status`,
/// and `records`, the divergence's `index` and `input`, or the `error`).
#[pyfunction]
fn _replay_corpus(py: Python<'_>, paths: Vec<PathBuf>) -> PyResult<PyObject> {
    let (files, errors) = py.allow_threads(|| collect(&paths));
    if files.is_empty() && errors.is_empty() {
        return Err(TraceReadError::new_err("no *.jsonl traces found"));
    }
    let results = py.allow_threads(|| {
        // A record at a time (`agentloop replay DIR`): a trace of any length within the file
        // and line limits replays holding one step of it.
        par_map(&files, |p| {
            let (reader, bad_text) =
                trace_records(p, OLDEST_TRACE_VERSION).map_err(|e| e.to_string())?;
            let r = replay_reader(reader, &DeciderRegistry::new()).map_err(|e| match e {
                CoreError::UnknownDecider { .. } | CoreError::UnknownRetryDecider { .. } => {
                    format!("{}: {e}", p.display())
                }
                e => text_error(e, &bad_text).to_string(),
            })?;
            let d = r
                .divergence
                .map(|d| json!({"index": d.index, "input": r.input}));
            Ok::<_, String>((r.records, d))
        })
    });
    let mut entries: Vec<Value> = errors
        .iter()
        .map(|(p, e)| json!({"path": p.display().to_string(), "status": "unreadable", "error": format!("{}: {e}", p.display())}))
        .collect();
    for (p, r) in files.iter().zip(results) {
        let path = p.display().to_string();
        entries.push(match r {
            Some(Ok((records, None))) => {
                json!({"path": path, "status": "identical", "records": records})
            }
            Some(Ok((_, Some(d)))) => json!({
                "path": path, "status": "diverged", "index": d["index"], "input": d["input"],
            }),
            Some(Err(error)) => json!({"path": path, "status": "unreadable", "error": error}),
            None => json!({
                "path": path, "status": "unreadable",
                "error": format!("{path}: the replay panicked (a bug in agentloop: please report it)"),
            }),
        });
    }
    let count = |s: &str| entries.iter().filter(|e| e["status"] == s).count();
    let summary = json!({
        "traces": entries.len(),
        "identical": count("identical"),
        "diverged": count("diverged"),
        "unreadable": count("unreadable"),
        "files": entries,
    });
    to_py(py, &summary)
}

/// What-if replays every trace of `paths` in parallel (`agentloop replay DIR --set … --json`
/// in spirit): a dict with `settings`, `traces`, `changed`, `unchanged`, `unreadable`,
/// `totals` (per figure: before, after) and `files` (per trace: the what-if's dict, or the
/// `error`).
#[pyfunction]
#[pyo3(signature = (paths, settings = None, **kwargs))]
fn _what_if_corpus(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    settings: Option<&Bound<'_, PyDict>>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<PyObject> {
    let settings = Settings::of(settings, kwargs)?;
    if let Err(e) = settings.apply(Default::default(), &DeciderRegistry::new()) {
        return Err(SettingError::new_err(e));
    }
    let (files, errors) = py.allow_threads(|| collect(&paths));
    if files.is_empty() && errors.is_empty() {
        return Err(TraceReadError::new_err("no *.jsonl traces found"));
    }
    let results = py.allow_threads(|| {
        par_map(&files, |p| {
            let trace = read_trace(p).map_err(|e| e.to_string())?;
            what_if_json(&trace, &settings).map_err(|e| format!("{}: {e}", p.display()))
        })
    });
    let mut entries: Vec<Value> = errors
        .iter()
        .map(|(p, e)| json!({"path": p.display().to_string(), "status": "unreadable", "error": format!("{}: {e}", p.display())}))
        .collect();
    const FIGURES: [&str; 4] = ["steps", "tool_calls", "tokens_in", "tokens_out"];
    let mut totals = [[0u64; 2]; 4];
    for (p, r) in files.iter().zip(results) {
        let path = p.display().to_string();
        let mut entry = match r {
            Some(Ok(v)) if v.get("setting_error").is_some() => json!({
                "status": "unreadable", "error": format!("{path}: {}", v["setting_error"]),
            }),
            Some(Ok(mut v)) => {
                for (i, side) in ["before", "after"].into_iter().enumerate() {
                    for (t, f) in totals.iter_mut().zip(FIGURES) {
                        t[i] += v[side][f].as_u64().unwrap_or(0);
                    }
                }
                let changed = v["changed"].as_bool().unwrap_or(false);
                v["status"] = json!(if changed { "changed" } else { "unchanged" });
                v
            }
            Some(Err(error)) => json!({"status": "unreadable", "error": error}),
            None => json!({
                "status": "unreadable",
                "error": format!("{path}: the what-if replay panicked (a bug in agentloop: please report it)"),
            }),
        };
        entry["path"] = json!(path);
        entries.push(entry);
    }
    let count = |s: &str| entries.iter().filter(|e| e["status"] == s).count();
    let totals: serde_json::Map<String, Value> = FIGURES
        .iter()
        .zip(totals)
        .map(|(n, [b, a])| (n.to_string(), json!({"before": b, "after": a})))
        .collect();
    let summary = json!({
        "settings": settings.texts(),
        "traces": entries.len(),
        "changed": count("changed"),
        "unchanged": count("unchanged"),
        "unreadable": count("unreadable"),
        "totals": totals,
        "files": entries,
    });
    to_py(py, &summary)
}

/// The most bytes an Inspect `.eval` log may hold once inflated (256 MiB, as the command's).
const INSPECT_UNCOMPRESSED_LIMIT: u64 = 256 << 20;

/// Every sample of the Inspect AI eval log at `path` (its `.eval` zip or its JSON, with the
/// samples) imported as a trace (`agentloop trace import --from inspect-eval`), named
/// `PATH#ID_epochN`, with the import's findings.
#[pyfunction]
fn _import_inspect(py: Python<'_>, path: PathBuf) -> PyResult<Vec<PyTrace>> {
    use agentloop_trace_tools::import_inspect::{inspect_eval, read_log};
    let parse =
        |bytes: Vec<u8>| read_log(&bytes, INSPECT_UNCOMPRESSED_LIMIT).map_err(|e| e.to_string());
    imported_traces(py, path, "the eval log", parse, |log, options| {
        inspect_eval(log, options)
            .map(|samples| {
                samples
                    .into_iter()
                    .map(|s| (s.file_stem(), s.imported))
                    .collect()
            })
            .map_err(|e| e.to_string())
    })
}

/// Every trace id of the OpenTelemetry GenAI export (OTLP JSON) at `path` imported as a trace
/// (`agentloop trace import --from otel-genai`), named `PATH#TRACE_ID`, with the import's
/// findings.
#[pyfunction]
fn _import_otel(py: Python<'_>, path: PathBuf) -> PyResult<Vec<PyTrace>> {
    use agentloop_trace_tools::import_otel::otel_genai;
    let parse = |bytes: Vec<u8>| {
        let text = String::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
        serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))
    };
    imported_traces(py, path, "the spans", parse, |export, options| {
        otel_genai(export, options)
            .map(|traces| {
                traces
                    .into_iter()
                    .map(|t| (t.file_stem(), t.imported))
                    .collect()
            })
            .map_err(|e| e.to_string())
    })
}

/// The bytes of the file an import reads: a regular file ([`open_input`]) of at most the
/// trace file limit (`AGENTLOOP_TRACE_MAX_BYTES`).
fn read_import(path: &Path) -> PyResult<Vec<u8>> {
    use std::io::Read as _;
    let name = path.display().to_string();
    let limits = trace_limits(&name).map_err(trace_err)?;
    let unreadable = |e: std::io::Error| TraceReadError::new_err(format!("{name}: {e}"));
    let file = open_input(path).map_err(unreadable)?;
    let mut bytes = Vec::new();
    file.take(limits.file_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > limits.file_bytes {
        return Err(TraceTooLargeError::new_err(format!(
            "{name}: over the file limit of {} bytes (raise it with AGENTLOOP_TRACE_MAX_BYTES)",
            limits.file_bytes
        )));
    }
    Ok(bytes)
}

/// The results of one import (each named by its file stem) of the file at `path` (its bytes
/// read as JSON by `parse`), as traces named `PATH#STEM` with their findings: an unreadable
/// file is a `TraceReadError`, one `parse` or the import refuses a `TraceCorruptError`.
fn imported_traces(
    py: Python<'_>,
    path: PathBuf,
    what: &str,
    parse: impl FnOnce(Vec<u8>) -> Result<Value, String> + Send,
    import: impl FnOnce(
            &Value,
            &agentloop_trace_tools::import::ImportOptions,
        ) -> Result<Vec<(String, agentloop_trace_tools::import::Imported)>, String>
        + Send,
) -> PyResult<Vec<PyTrace>> {
    use agentloop_trace_tools::import::ImportOptions;
    py.allow_threads(|| {
        guarded(&format!("importing {what}"), || {
            let name = path.display().to_string();
            let bytes = read_import(&path)?;
            let value: Value =
                parse(bytes).map_err(|e| TraceCorruptError::new_err(format!("{name}: {e}")))?;
            let options = ImportOptions {
                agentloop: env!("CARGO_PKG_VERSION").into(),
                ..ImportOptions::default()
            };
            let imported = import(&value, &options)
                .map_err(|e| TraceCorruptError::new_err(format!("{name}: {e}")))?;
            Ok(imported
                .into_iter()
                .map(|(stem, imported)| PyTrace {
                    path: format!("{name}#{stem}"),
                    findings: imported.findings.iter().map(|f| f.to_string()).collect(),
                    trace: Arc::new(imported.trace),
                    timing: Arc::new(Timing::default()),
                })
                .collect())
        })
    })
}

/// A pandas DataFrame of a dict of columns (pandas imported only here).
#[pyfunction]
fn _data_frame(py: Python<'_>, columns: PyObject) -> PyResult<PyObject> {
    data_frame(py, columns)
}

/// The native module.
#[pymodule]
fn _agentloop(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyTrace>()?;
    m.add("TraceError", py.get_type::<TraceError>())?;
    m.add("TraceReadError", py.get_type::<TraceReadError>())?;
    m.add("TraceCorruptError", py.get_type::<TraceCorruptError>())?;
    m.add("TraceVersionError", py.get_type::<TraceVersionError>())?;
    m.add("TraceTooLargeError", py.get_type::<TraceTooLargeError>())?;
    m.add("UnknownDeciderError", py.get_type::<UnknownDeciderError>())?;
    m.add("SettingError", py.get_type::<SettingError>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    m.add("TRACE_VERSION", agentloop_core::trace::TRACE_VERSION)?;
    m.add(
        "SETTINGS",
        agentloop_trace_tools::whatif::SETTINGS
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>(),
    )?;
    m.add(
        "TABLES",
        Table::ALL
            .iter()
            .map(|t| {
                (
                    t.name().to_string(),
                    columns(*t)
                        .iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>(),
                )
            })
            .collect::<Vec<_>>(),
    )?;
    m.add_function(wrap_pyfunction!(_load, m)?)?;
    m.add_function(wrap_pyfunction!(_columns, m)?)?;
    m.add_function(wrap_pyfunction!(_replay_corpus, m)?)?;
    m.add_function(wrap_pyfunction!(_what_if_corpus, m)?)?;
    m.add_function(wrap_pyfunction!(_data_frame, m)?)?;
    m.add_function(wrap_pyfunction!(_import_inspect, m)?)?;
    m.add_function(wrap_pyfunction!(_import_otel, m)?)?;
    Ok(())
}
