//! Traces (R-TRACE): versioned JSON Lines — a header, then every input event, every transition
//! and every effect, indexed — plus the reader, the JSON Schema and replay with first-divergence
//! reporting.
//!
//! Replay needs no model, tools or network: the machines are pure, so feeding the recorded
//! inputs into fresh machines must reproduce the recorded transitions and effects exactly.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::effect::Effect;
use crate::event::Event;
use crate::process::UnknownRetryDecider;
use crate::react::{DeciderRegistry, Run, RunConfig, UnknownDecider};
use crate::step::{Step, Transition};
use crate::tool_spec::ToolSpecs;

/// The trace format version this build writes and reads. Version 2: `response_complete`
/// carries the committed message and `run_end` the final text. Version 3: a run commits its
/// run-end entry in `Finishing` and reports its end on `run_end_committed`, an input event
/// older traces lack. An older trace would replay with a false divergence; it is rejected as
/// unsupported instead. Version 4: each tool call's lifecycle is recorded as `tool_call`
/// transitions (`statecharts/tool_call.toml`); a version-3 trace still loads and replays, with
/// those transitions left out of the comparison.
///
/// Still version 4 since `done` gained `rejected_arguments` (R-TOOL-1): the field is omitted
/// when empty and defaults to empty, so a trace without schema verdicts is exactly what an
/// earlier version-4 writer wrote and an earlier trace reads as "no verdicts". A trace with
/// verdicts also records tool-call transitions on row `commit_schema_invalid`, which an older
/// reader refuses to parse (unknown row) rather than replaying it wrongly.
///
/// Version 5: `tool_end` carries the call's result (bounded, `result_truncated`,
/// `result_bytes`), and `run_start`, `run_end`, `run_error` and `agent_abort` no longer carry
/// a `run_id` of their own (the envelope's is the one). A version-3 or 4 trace still loads and
/// replays: its `run_id` fields are ignored and its `tool_end` results read as empty, so the
/// replayed `tool_end` is compared without its result.
///
/// Version 6: a server's `retry-after` overrides the backoff instead of only lengthening it
/// (R-IN-1, [`RetryAfterRule::Override`](crate::process::RetryAfterRule)), and `retry` events
/// carry the hint their delay came from (`retry_after_ms`). The reader sets
/// [`RetryAfterRule::Floor`](crate::process::RetryAfterRule) on an older trace's configuration,
/// so it replays with the delays it recorded, and the replayed `retry` events are compared
/// without the hint.
///
/// Version 7: a trace grows with the run, not with its square. A `call_model` effect records
/// only the messages appended since the previous `call_model` effect of the trace, and the
/// record's `prefix` says how many of that request's messages come first (absent: the request's
/// messages are all recorded). [`TraceEncoder`] writes this form and [`RecordReader`] rebuilds
/// each full request, so a [`Trace`] in memory, replay and every comparison see whole
/// requests. Older versions record every request in full and read as before.
pub const TRACE_VERSION: u32 = 7;

/// The first version whose `call_model` records may reference the previous request's messages.
const PREFIX_VERSION: u32 = 7;

/// The oldest trace version this build reads and replays.
pub const OLDEST_TRACE_VERSION: u32 = 3;

/// The oldest trace version this build can show, diff and view (every version it ever wrote):
/// versions 1 and 2 lack inputs later versions record, so they are not replayed.
pub const OLDEST_READABLE_TRACE_VERSION: u32 = 1;

/// The first line of a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TraceHeader {
    /// Format version ([`TRACE_VERSION`]).
    pub version: u32,
    /// The crate version that wrote it.
    pub agentloop: String,
    /// The session.
    pub session: String,
    /// The runtime's deadlines and tool-completion order (absent in traces built by hand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<crate::timeouts::Timeouts>,
    /// The run's configuration (the machines are rebuilt from it on replay).
    pub config: RunConfig,
    /// The tools offered.
    pub tools: ToolSpecs,
}

/// One line of a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TraceRecord {
    /// The header (first line; boxed, so the many other records stay small).
    Header(Box<TraceHeader>),
    /// An input event.
    Input {
        /// Position in the trace (0 = first record after the header).
        index: u64,
        /// The event.
        event: Event,
    },
    /// A transition the input caused.
    Transition {
        /// Position.
        index: u64,
        /// The transition.
        transition: Transition,
    },
    /// An effect the input caused.
    Effect {
        /// Position.
        index: u64,
        /// The effect.
        effect: Effect,
    },
}

impl TraceRecord {
    /// The record's index (`None` for the header).
    pub fn index(&self) -> Option<u64> {
        match self {
            TraceRecord::Header(_) => None,
            TraceRecord::Input { index, .. }
            | TraceRecord::Transition { index, .. }
            | TraceRecord::Effect { index, .. } => Some(*index),
        }
    }
}

/// Errors reading or replaying a trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// Reading the trace's source failed (the message of the IO error).
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        message: String,
    },
    /// A line is not a valid record.
    #[error("{path}:{line}:{column}: invalid trace record: {message}")]
    Parse {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// The header's version is not supported.
    #[error(
        "{path}:1: unsupported trace version {found} (this build reads versions {OLDEST_TRACE_VERSION} to {TRACE_VERSION})"
    )]
    Version {
        /// The file.
        path: String,
        /// The version found.
        found: u64,
    },
    /// The trace does not start with a header.
    #[error("{path}:1: the trace does not start with a header record")]
    NoHeader {
        /// The file.
        path: String,
    },
    /// The records are out of order.
    #[error("{path}:{line}: record index {found} where {expected} was expected")]
    Index {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// Index found.
        found: u64,
        /// Index expected.
        expected: u64,
    },
    /// The header's tool rules break the bounds of [`crate::tool_rules::validate_rules`] (a
    /// pattern too long, too many rules): a rule set no run could have been configured with.
    #[error("{path}:1: {error}")]
    ToolRules {
        /// The file.
        path: String,
        /// Which rule and why.
        error: crate::tool_rules::RulesError,
    },
    /// The trace is over one of the reader's [`TraceLimits`]: nothing past the limit was held.
    #[error(
        "{path}:{line}: the trace is over its {limit_name} limit of {limit} bytes (raise it \
         with {env})",
        env = .limit_name.env()
    )]
    TooLarge {
        /// The file.
        path: String,
        /// 1-based line where the limit was passed.
        line: usize,
        /// Which limit.
        limit_name: Limit,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The trace was recorded with a decision function (R-OUT-3) the replaying registry does
    /// not have; replaying it with another function would report a false divergence.
    #[error(
        "the trace was recorded with decider `{name}`, which is not registered (registered: \
         {}); replay it with a DeciderRegistry that has `{name}`",
        .known.join(", ")
    )]
    UnknownDecider {
        /// The decider name in the trace header.
        name: String,
        /// The names the registry has.
        known: Vec<String>,
    },
    /// The trace was recorded with a retry decision function (R-EXT-3) the replaying registry
    /// does not have; replaying it with another function would report a false divergence.
    #[error(
        "the trace was recorded with retry decider `{name}`, which is not registered \
         (registered: {}); replay it with a DeciderRegistry that has it (`with_retry`)",
        .known.join(", ")
    )]
    UnknownRetryDecider {
        /// The retry decider name in the trace header (`config.step.retry.decider`).
        name: String,
        /// The retry decider names the registry has.
        known: Vec<String>,
    },
}

impl From<UnknownRetryDecider> for TraceError {
    fn from(e: UnknownRetryDecider) -> Self {
        TraceError::UnknownRetryDecider {
            name: e.name,
            known: e.known,
        }
    }
}

impl From<UnknownDecider> for TraceError {
    fn from(e: UnknownDecider) -> Self {
        TraceError::UnknownDecider {
            name: e.name,
            known: e.known,
        }
    }
}

/// A trace in memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// The header.
    pub header: TraceHeader,
    /// Every record after the header, in order.
    pub records: Vec<TraceRecord>,
}

impl Trace {
    /// A new trace with no records.
    pub fn new(header: TraceHeader) -> Self {
        Trace {
            header,
            records: Vec::new(),
        }
    }

    /// Appends the records of one input and the step it caused.
    pub fn record(&mut self, event: &Event, step: &Step) {
        let start = self.records.len() as u64;
        push_step(&mut self.records, start, event, step);
    }

    /// Serializes as JSON Lines (with [`TraceEncoder`]: a version-7 trace records each
    /// request's new messages only).
    pub fn to_jsonl(&self) -> String {
        let mut out = Vec::new();
        let mut encoder = TraceEncoder::new();
        let header = TraceRecord::Header(Box::new(self.header.clone()));
        for r in std::iter::once(&header).chain(&self.records) {
            // Serializing these types cannot fail (no maps with non-string keys).
            let _ = encoder.encode(r, &mut out);
        }
        String::from_utf8(out).unwrap_or_default()
    }

    /// Parses JSON Lines text; `origin` names the source in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Trace, TraceError> {
        Self::from_lines(text.lines().map(Ok::<_, std::convert::Infallible>), origin)
    }

    /// Reads JSON Lines from any source of lines (a file's `BufRead::lines()`, say); a line
    /// that could not be read ends the read with [`TraceError::Io`]. Never panics on bad input.
    /// Holds at most [`TraceLimits::DEFAULT`].
    pub fn from_lines<S, E>(
        lines: impl IntoIterator<Item = Result<S, E>>,
        origin: &str,
    ) -> Result<Trace, TraceError>
    where
        S: AsRef<str>,
        E: std::fmt::Display,
    {
        Self::read_limited(lines, origin, OLDEST_TRACE_VERSION, TraceLimits::DEFAULT)
    }

    /// [`Trace::from_lines`] accepting every version this crate ever wrote (from
    /// [`OLDEST_READABLE_TRACE_VERSION`]), for reading a trace rather than replaying it.
    pub fn read_lines<S, E>(
        lines: impl IntoIterator<Item = Result<S, E>>,
        origin: &str,
    ) -> Result<Trace, TraceError>
    where
        S: AsRef<str>,
        E: std::fmt::Display,
    {
        Self::read_limited(
            lines,
            origin,
            OLDEST_READABLE_TRACE_VERSION,
            TraceLimits::DEFAULT,
        )
    }

    /// Reads a whole trace of a version from `oldest` on into memory, within `limits`
    /// ([`TraceLimits::loaded_bytes`] included: each request is counted with the messages it
    /// references, as it is held).
    pub fn read_limited<S, E>(
        lines: impl IntoIterator<Item = Result<S, E>>,
        origin: &str,
        oldest: u32,
        limits: TraceLimits,
    ) -> Result<Trace, TraceError>
    where
        S: AsRef<str>,
        E: std::fmt::Display,
    {
        let mut reader = RecordReader::open(lines, origin, oldest, limits)?.holding();
        let records = (&mut reader).collect::<Result<_, _>>()?;
        Ok(Trace {
            header: reader.header,
            records,
        })
    }

    /// The JSON Schema of a trace line (R-TRACE-4).
    pub fn schema() -> serde_json::Value {
        serde_json::to_value(schemars::schema_for!(Line)).unwrap_or_default()
    }
}

/// Appends to `records` the records of `event` and the `step` it caused, indexed from `start`.
fn push_step(records: &mut impl Extend<TraceRecord>, start: u64, event: &Event, step: &Step) {
    let after = start + 1;
    let effects_from = after + step.transitions.len() as u64;
    let input = TraceRecord::Input {
        index: start,
        event: event.clone(),
    };
    let transitions = (after..)
        .zip(&step.transitions)
        .map(|(index, t)| TraceRecord::Transition {
            index,
            transition: t.clone(),
        });
    let effects = (effects_from..)
        .zip(&step.effects)
        .map(|(index, e)| TraceRecord::Effect {
            index,
            effect: e.clone(),
        });
    records.extend(std::iter::once(input).chain(transitions).chain(effects));
}

/// Which of [`TraceLimits`] a trace passed ([`TraceError::TooLarge`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// [`TraceLimits::file_bytes`].
    File,
    /// [`TraceLimits::line_bytes`].
    Line,
    /// [`TraceLimits::loaded_bytes`].
    Loaded,
}

impl Limit {
    /// The environment variable that sets this limit for the `agentloop` command and the
    /// Python package ([`TraceLimits::from_vars`]).
    pub fn env(self) -> &'static str {
        match self {
            Limit::File => "AGENTLOOP_TRACE_MAX_BYTES",
            Limit::Line => "AGENTLOOP_TRACE_MAX_LINE_BYTES",
            Limit::Loaded => "AGENTLOOP_TRACE_MAX_LOADED_BYTES",
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Limit::File => "file",
            Limit::Line => "line",
            Limit::Loaded => "loaded",
        })
    }
}

/// The memory bound of a trace reader: a trace over one of these is
/// [`TraceError::TooLarge`], and a reader holds no more than the limits allow (the code that
/// reads the file reads at most one byte past `file_bytes` and `line_bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceLimits {
    /// Bytes of the file: every line with its newline.
    pub file_bytes: u64,
    /// Bytes of one line.
    pub line_bytes: u64,
    /// Bytes of the records held in memory at once by a reader that keeps them all (a
    /// [`Trace`]): each line's bytes, a `call_model` record's counted with the earlier
    /// messages it references (as if recorded in full). Replay that streams
    /// ([`replay_reader`]) holds one step at a time and is bounded by the other two.
    pub loaded_bytes: u64,
}

impl TraceLimits {
    /// 256 MiB of file, 64 MiB a line, 512 MiB held (about 800 MiB of memory: records in memory
    /// take about one and a half times their JSON).
    pub const DEFAULT: TraceLimits = TraceLimits {
        file_bytes: 256 << 20,
        line_bytes: 64 << 20,
        loaded_bytes: 512 << 20,
    };

    /// The defaults, each replaced by its variable ([`Limit::env`]) when `var` has it: a
    /// number of bytes. `var` looks a name up (`|k| std::env::var(k).ok()`); a value that is
    /// not a number is an error naming the variable.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<TraceLimits, String> {
        let mut limits = TraceLimits::DEFAULT;
        for (limit, slot) in [
            (Limit::File, &mut limits.file_bytes),
            (Limit::Line, &mut limits.line_bytes),
            (Limit::Loaded, &mut limits.loaded_bytes),
        ] {
            if let Some(v) = var(limit.env()) {
                *slot = v
                    .trim()
                    .parse()
                    .map_err(|_| format!("{}={v}: not a number of bytes", limit.env()))?;
            }
        }
        Ok(limits)
    }
}

impl Default for TraceLimits {
    fn default() -> Self {
        TraceLimits::DEFAULT
    }
}

/// One line of a trace file as written: a [`TraceRecord`], with the `prefix` of a version-7
/// `call_model` record. Its schema is the trace format's (R-TRACE-4).
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[schemars(rename = "TraceRecord")]
enum Line {
    /// The header (first line).
    Header(Box<TraceHeader>),
    /// An input event.
    Input {
        /// Position in the trace (0 = first record after the header).
        index: u64,
        /// The event.
        event: Event,
    },
    /// A transition the input caused.
    Transition {
        /// Position.
        index: u64,
        /// The transition.
        transition: Transition,
    },
    /// An effect the input caused.
    Effect {
        /// Position.
        index: u64,
        /// Only on a `call_model` effect (version 7 on): the request's messages are the first
        /// `prefix` messages of the previous `call_model` request in the trace, then the
        /// messages recorded here. Absent: the recorded messages are all of them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefix: Option<u64>,
        /// The effect.
        effect: Effect,
    },
}

/// Writes trace records as JSON lines, each request's messages once: from a version-7 header
/// on, a `call_model` record holds only the messages after those it shares with the previous
/// request (see [`TRACE_VERSION`]). Feed it every record of one trace, header first.
#[derive(Debug, Default)]
pub struct TraceEncoder {
    version: u32,
    previous: Option<crate::model::SharedMessages>,
}

impl TraceEncoder {
    /// An encoder before the header.
    pub fn new() -> Self {
        TraceEncoder::default()
    }

    /// Appends `record` as one JSON line (with its newline) to `out`.
    pub fn encode(&mut self, record: &TraceRecord, out: &mut Vec<u8>) -> serde_json::Result<()> {
        match record {
            TraceRecord::Header(h) => self.version = h.version,
            TraceRecord::Effect {
                index,
                effect: Effect::CallModel { request },
            } => {
                let messages = &request.messages;
                let shared = match &self.previous {
                    _ if self.version < PREFIX_VERSION => 0,
                    Some(p) if crate::model::SharedMessages::ptr_eq(p, messages) => p.len(),
                    Some(p) => p
                        .iter()
                        .zip(messages.iter())
                        .take_while(|(a, b)| a == b)
                        .count(),
                    None => 0,
                };
                self.previous = Some(messages.clone());
                if shared > 0 {
                    let mut rest = request.clone();
                    rest.messages = messages[shared..].to_vec().into();
                    let line = Line::Effect {
                        index: *index,
                        prefix: Some(shared as u64),
                        effect: Effect::CallModel { request: rest },
                    };
                    serde_json::to_writer(&mut *out, &line)?;
                    out.push(b'\n');
                    return Ok(());
                }
            }
            _ => {}
        }
        serde_json::to_writer(&mut *out, record)?;
        out.push(b'\n');
        Ok(())
    }
}

/// The records of a trace read one at a time from its lines, checked as a whole trace is (a
/// header of a supported version first, then the indexes in order), with each `call_model`
/// request rebuilt in full and the [`TraceLimits`] enforced. Holds the previous request's
/// messages, not the records it returned.
pub struct RecordReader<I> {
    lines: I,
    header: TraceHeader,
    decoder: Decoder,
    failed: bool,
}

/// A [`RecordReader`]'s state: where it is, what it counted, the previous request.
struct Decoder {
    origin: String,
    lineno: usize,
    version: u32,
    expected: u64,
    limits: TraceLimits,
    file_bytes: u64,
    /// Bytes held so far, when the caller keeps every record.
    loaded_bytes: Option<u64>,
    /// The previous request's messages, and (when the caller keeps every record) the bytes of
    /// its first `i` messages at `i`.
    previous: Option<(crate::model::SharedMessages, Vec<u64>)>,
}

impl<I, S, E> RecordReader<I>
where
    I: Iterator<Item = Result<S, E>>,
    S: AsRef<str>,
    E: std::fmt::Display,
{
    /// Reads up to the header: of a version from `oldest` to [`TRACE_VERSION`].
    pub fn open(
        lines: impl IntoIterator<IntoIter = I>,
        origin: &str,
        oldest: u32,
        limits: TraceLimits,
    ) -> Result<Self, TraceError> {
        let mut lines = lines.into_iter();
        let mut d = Decoder {
            origin: origin.to_string(),
            lineno: 0,
            version: 0,
            expected: 0,
            limits,
            file_bytes: 0,
            loaded_bytes: None,
            previous: None,
        };
        let Some(line) = d.next_line(&mut lines)? else {
            return Err(d.no_header());
        };
        let v: serde_json::Value = serde_json::from_str(line.as_ref()).map_err(|e| d.parse(&e))?;
        if v.get("kind").and_then(|k| k.as_str()) != Some("header") {
            return Err(d.no_header());
        }
        let found = v.get("version").and_then(|x| x.as_u64()).unwrap_or(0);
        if !(u64::from(oldest)..=u64::from(TRACE_VERSION)).contains(&found) {
            return Err(TraceError::Version {
                path: d.origin,
                found,
            });
        }
        let Line::Header(mut h) = serde_json::from_value(v).map_err(|e| d.parse(&e))? else {
            return Err(d.no_header());
        };
        crate::tool_rules::validate_rules(&h.config.step.tool_rules).map_err(|error| {
            TraceError::ToolRules {
                path: d.origin.clone(),
                error,
            }
        })?;
        if h.version < 6 {
            // Recorded when a hint only lengthened the backoff (R-IN-1).
            h.config.step.retry.retry_after = crate::process::RetryAfterRule::Floor;
        }
        d.version = h.version;
        Ok(RecordReader {
            lines,
            header: *h,
            decoder: d,
            failed: false,
        })
    }
}

impl<I> RecordReader<I> {
    /// The trace's header.
    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    /// The reader of a caller that keeps every record: [`TraceLimits::loaded_bytes`] applies.
    pub fn holding(mut self) -> Self {
        self.decoder.loaded_bytes = Some(self.decoder.file_bytes);
        self
    }
}

impl Decoder {
    fn no_header(&self) -> TraceError {
        TraceError::NoHeader {
            path: self.origin.clone(),
        }
    }

    fn parse(&self, e: &serde_json::Error) -> TraceError {
        self.parse_at(e.column(), e.to_string())
    }

    fn parse_at(&self, column: usize, message: String) -> TraceError {
        TraceError::Parse {
            path: self.origin.clone(),
            line: self.lineno,
            column,
            message,
        }
    }

    fn too_large(&self, limit_name: Limit, limit: u64) -> TraceError {
        TraceError::TooLarge {
            path: self.origin.clone(),
            line: self.lineno,
            limit_name,
            limit,
        }
    }

    /// Adds `bytes` to what the caller holds.
    fn hold(&mut self, bytes: u64) -> Result<(), TraceError> {
        if let Some(held) = &mut self.loaded_bytes {
            *held = held.saturating_add(bytes);
            if *held > self.limits.loaded_bytes {
                return Err(self.too_large(Limit::Loaded, self.limits.loaded_bytes));
            }
        }
        Ok(())
    }

    /// The next non-blank line of `lines`; every line, blank or not, is counted against the
    /// file and line limits.
    fn next_line<J, S, E>(&mut self, lines: &mut J) -> Result<Option<S>, TraceError>
    where
        J: Iterator<Item = Result<S, E>>,
        S: AsRef<str>,
        E: std::fmt::Display,
    {
        for line in lines {
            self.lineno += 1;
            let line = line.map_err(|e| TraceError::Io {
                path: self.origin.clone(),
                message: e.to_string(),
            })?;
            let len = line.as_ref().len() as u64;
            if len > self.limits.line_bytes {
                return Err(self.too_large(Limit::Line, self.limits.line_bytes));
            }
            self.file_bytes = self.file_bytes.saturating_add(len + 1);
            // The last line may lack its newline: one byte of slack.
            if self.file_bytes > self.limits.file_bytes.saturating_add(1) {
                return Err(self.too_large(Limit::File, self.limits.file_bytes));
            }
            self.hold(len + 1)?;
            if !line.as_ref().trim().is_empty() {
                return Ok(Some(line));
            }
        }
        Ok(None)
    }

    /// The record of one body line.
    fn record(&mut self, line: &str) -> Result<TraceRecord, TraceError> {
        let record = match serde_json::from_str::<Line>(line).map_err(|e| self.parse(&e))? {
            Line::Header(_) => return Err(self.parse_at(1, "a second header record".into())),
            Line::Input { index, event } => TraceRecord::Input { index, event },
            Line::Transition { index, transition } => TraceRecord::Transition { index, transition },
            Line::Effect {
                index,
                prefix,
                effect: Effect::CallModel { mut request },
            } => {
                self.rebuild(prefix.unwrap_or(0), &mut request.messages)?;
                TraceRecord::Effect {
                    index,
                    effect: Effect::CallModel { request },
                }
            }
            Line::Effect {
                prefix: Some(_), ..
            } => return Err(self.parse_at(1, "a prefix on an effect other than call_model".into())),
            Line::Effect { index, effect, .. } => TraceRecord::Effect { index, effect },
        };
        let found = record.index().unwrap_or(self.expected);
        if found != self.expected {
            return Err(TraceError::Index {
                path: self.origin.clone(),
                line: self.lineno,
                found,
                expected: self.expected,
            });
        }
        self.expected += 1;
        Ok(record)
    }

    /// `messages` (those a `call_model` line records) preceded by the first `shared` messages
    /// of the previous request.
    fn rebuild(
        &mut self,
        shared: u64,
        messages: &mut crate::model::SharedMessages,
    ) -> Result<(), TraceError> {
        if shared > 0 && self.version < PREFIX_VERSION {
            return Err(self.parse_at(
                1,
                format!("a request prefix in a version {} trace", self.version),
            ));
        }
        let (mut full, mut sizes) = self.previous.take().unwrap_or_default();
        let available = full.len() as u64;
        if shared > available {
            return Err(self.parse_at(
                1,
                format!(
                    "the request's prefix of {shared} messages is longer than the previous \
                     request ({available} messages)"
                ),
            ));
        }
        let shared = shared as usize;
        // The bytes of the referenced messages count before any is copied (when the caller
        // keeps the records); `sizes[i]` is the bytes of the first `i` messages.
        sizes.truncate(shared + 1);
        if sizes.is_empty() {
            sizes.push(0);
        }
        self.hold(sizes.last().copied().unwrap_or(0))?;
        if self.loaded_bytes.is_some() {
            for m in messages.iter() {
                let size = serde_json::to_vec(m).map_or(0, |v| v.len() as u64);
                sizes.push(sizes.last().copied().unwrap_or(0).saturating_add(size));
            }
        }
        // Changed in place when the caller dropped the previous request; copied when it
        // still holds it (`SharedMessages` copies on write).
        if shared < full.len() {
            full.truncate(shared);
        }
        if !messages.is_empty() {
            full.extend(messages.iter().cloned());
        }
        *messages = full.clone();
        self.previous = Some((full, sizes));
        Ok(())
    }
}

impl<I, S, E> Iterator for RecordReader<I>
where
    I: Iterator<Item = Result<S, E>>,
    S: AsRef<str>,
    E: std::fmt::Display,
{
    type Item = Result<TraceRecord, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let r = match self.decoder.next_line(&mut self.lines) {
            Ok(None) => None,
            Ok(Some(l)) => Some(self.decoder.record(l.as_ref())),
            Err(e) => Some(Err(e)),
        };
        self.failed = matches!(r, Some(Err(_)));
        r
    }
}

/// Where replay first differed from the recording.
#[derive(Clone, Debug, PartialEq)]
pub struct Divergence {
    /// Index of the first differing record.
    pub index: u64,
    /// The recorded record (`None` if replay produced more records).
    pub recorded: Option<TraceRecord>,
    /// The replayed record (`None` if replay produced fewer records).
    pub replayed: Option<TraceRecord>,
}

impl Divergence {
    /// A unified diff of the two records, pretty-printed.
    pub fn diff(&self) -> String {
        let pretty = |r: &Option<TraceRecord>| {
            r.as_ref()
                .map(|r| serde_json::to_string_pretty(r).unwrap_or_default())
                .unwrap_or_else(|| "<none>".into())
        };
        let (a, b) = (pretty(&self.recorded), pretty(&self.replayed));
        similar::TextDiff::from_lines(&a, &b)
            .unified_diff()
            .header("recorded", "replayed")
            .to_string()
    }
}

/// Leaves out of a replayed `step` what a trace of `version` did not record: tool-call
/// transitions before version 4, `tool_end` results before version 5, the hint of `retry`
/// events before version 6. Replay applies it to every replayed step; a replay of its own
/// (what-if in `agentloop-trace-tools`) must too, to compare like with like.
pub fn as_recorded_by(version: u32, step: &mut Step) {
    if version < 4 {
        step.transitions
            .retain(|t| !matches!(t, Transition::ToolCall { .. }));
    }
    use crate::agent_event::AgentEvent;
    for effect in &mut step.effects {
        match effect {
            Effect::Emit {
                event:
                    AgentEvent::ToolEnd {
                        result,
                        result_truncated,
                        result_bytes,
                        ..
                    },
            } if version < 5 => {
                result.clear();
                *result_truncated = false;
                *result_bytes = 0;
            }
            Effect::Emit {
                event: AgentEvent::Retry { retry_after_ms, .. },
            } if version < 6 => *retry_after_ms = None,
            _ => {}
        }
    }
}

/// Replays a trace recorded with the built-in deciders (the default ones): [`replay_with`]
/// with [`DeciderRegistry::new`]. Returns the first divergence, if any.
///
/// A trace recorded with another decider or retry decider is never replayed with a substitute
/// function: it is reported as diverging at its first record, with nothing replayed
/// (`replayed: None`). Use [`replay_with`] and a registry that has the functions to replay it,
/// or to get the typed [`TraceError::UnknownDecider`] / [`TraceError::UnknownRetryDecider`].
pub fn replay(trace: &Trace) -> Option<Divergence> {
    match replay_with(trace, &DeciderRegistry::new()) {
        Ok(divergence) => divergence,
        Err(_) => Some(Divergence {
            index: 0,
            recorded: trace.records.first().cloned(),
            replayed: None,
        }),
    }
}

/// Replays a trace: feeds its inputs into fresh machines built from its header — with the
/// decision functions `registry` has under the header's decider and retry decider names — and
/// compares every transition and effect (R-TRACE-2). Returns the first divergence, if any, or
/// [`TraceError::UnknownDecider`] / [`TraceError::UnknownRetryDecider`] when the registry
/// lacks one of the trace's functions.
pub fn replay_with(
    trace: &Trace,
    registry: &DeciderRegistry,
) -> Result<Option<Divergence>, TraceError> {
    let records = trace.records.iter().cloned().map(Ok);
    Ok(replay_records(&trace.header, records, registry)?.divergence)
}

/// What a streaming replay ([`replay_reader`]) found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Replayed {
    /// The records read (up to the divergence, when there is one).
    pub records: u64,
    /// The first divergence, if any.
    pub divergence: Option<Divergence>,
    /// The input records read.
    pub inputs: u64,
    /// The index of the input whose step holds the divergence.
    pub input: Option<u64>,
}

impl Replayed {
    /// What was read, with the divergence found at `index`.
    fn diverged(
        self,
        index: u64,
        recorded: Option<TraceRecord>,
        replayed: Option<TraceRecord>,
    ) -> Replayed {
        let divergence = Some(Divergence {
            index,
            recorded,
            replayed,
        });
        Replayed { divergence, ..self }
    }
}

/// [`replay_with`] over a trace read one record at a time: a trace of any length is replayed
/// holding one step of it (and the run's context), so only the reader's file and line limits
/// bound it. A record the reader refuses ends the replay with its error.
pub fn replay_reader<I, S, E>(
    reader: RecordReader<I>,
    registry: &DeciderRegistry,
) -> Result<Replayed, TraceError>
where
    I: Iterator<Item = Result<S, E>>,
    S: AsRef<str>,
    E: std::fmt::Display,
{
    let header = reader.header.clone();
    replay_records(&header, reader, registry)
}

/// Replays `records`, comparing each with what the machines answer to the inputs before it.
fn replay_records(
    header: &TraceHeader,
    records: impl IntoIterator<Item = Result<TraceRecord, TraceError>>,
    registry: &DeciderRegistry,
) -> Result<Replayed, TraceError> {
    let mut config = header.config.clone();
    config.resolve_decider(registry)?;
    config.step.retry.resolve_decider(registry.retry())?;
    let mut run = Run::new(config);
    // The records the step of the latest input produced, not yet compared.
    let mut pending = std::collections::VecDeque::new();
    let mut step_of = |event: &Event, index: u64, pending: &mut std::collections::VecDeque<_>| {
        let mut step = run.handle(event.clone());
        as_recorded_by(header.version, &mut step);
        push_step(pending, index, event, &step);
    };
    let mut records = records.into_iter();
    let mut out = Replayed::default();
    while let Some(recorded) = records.next() {
        let recorded = recorded?;
        out.records += 1;
        let index = recorded.index().unwrap_or(0);
        if let TraceRecord::Input { event, .. } = &recorded {
            if let Some(extra) = pending.pop_front() {
                return Ok(out.diverged(index, Some(recorded), Some(extra)));
            }
            out.input = Some(index);
            out.inputs += 1;
            step_of(event, index, &mut pending);
        }
        match pending.pop_front() {
            Some(replayed) if replayed == recorded => {}
            Some(replayed) => return Ok(out.diverged(index, Some(recorded), Some(replayed))),
            None => {
                // The recording has more: replayed there is the next input's record.
                let mut replayed = None;
                for next in records.by_ref() {
                    if let TraceRecord::Input { event, .. } = next? {
                        step_of(&event, index, &mut pending);
                        replayed = pending.pop_front();
                        break;
                    }
                }
                return Ok(out.diverged(index, Some(recorded), replayed));
            }
        }
    }
    Ok(match pending.pop_front() {
        Some(extra) => out.diverged(extra.index().unwrap_or(0), None, Some(extra)),
        None => Replayed { input: None, ..out },
    })
}
