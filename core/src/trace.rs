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
pub const TRACE_VERSION: u32 = 6;

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
        let mut index = self.records.len() as u64;
        let mut next = || {
            let i = index;
            index += 1;
            i
        };
        self.records.push(TraceRecord::Input {
            index: next(),
            event: event.clone(),
        });
        for t in &step.transitions {
            self.records.push(TraceRecord::Transition {
                index: next(),
                transition: t.clone(),
            });
        }
        for e in &step.effects {
            self.records.push(TraceRecord::Effect {
                index: next(),
                effect: e.clone(),
            });
        }
    }

    /// Serializes as JSON Lines.
    pub fn to_jsonl(&self) -> String {
        let mut out = String::new();
        let lines = std::iter::once(TraceRecord::Header(Box::new(self.header.clone())))
            .chain(self.records.iter().cloned());
        for r in lines {
            out.push_str(&serde_json::to_string(&r).unwrap_or_default());
            out.push('\n');
        }
        out
    }

    /// Parses JSON Lines text; `origin` names the source in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Trace, TraceError> {
        Self::from_lines(text.lines().map(Ok::<_, std::convert::Infallible>), origin)
    }

    /// Reads JSON Lines from any source of lines (a file's `BufRead::lines()`, say); a line
    /// that could not be read ends the read with [`TraceError::Io`]. Never panics on bad input.
    pub fn from_lines<S, E>(
        lines: impl IntoIterator<Item = Result<S, E>>,
        origin: &str,
    ) -> Result<Trace, TraceError>
    where
        S: AsRef<str>,
        E: std::fmt::Display,
    {
        Self::from_lines_since(lines, origin, OLDEST_TRACE_VERSION)
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
        Self::from_lines_since(lines, origin, OLDEST_READABLE_TRACE_VERSION)
    }

    fn from_lines_since<S, E>(
        lines: impl IntoIterator<Item = Result<S, E>>,
        origin: &str,
        oldest: u32,
    ) -> Result<Trace, TraceError>
    where
        S: AsRef<str>,
        E: std::fmt::Display,
    {
        let mut header = None;
        let mut records = Vec::new();
        for (i, line) in lines.into_iter().enumerate() {
            let line = line.map_err(|e| TraceError::Io {
                path: origin.to_string(),
                message: e.to_string(),
            })?;
            let line = line.as_ref();
            let lineno = i + 1;
            if line.trim().is_empty() {
                continue;
            }
            if header.is_none() {
                let v: serde_json::Value =
                    serde_json::from_str(line).map_err(|e| TraceError::Parse {
                        path: origin.to_string(),
                        line: lineno,
                        column: e.column(),
                        message: e.to_string(),
                    })?;
                if v.get("kind").and_then(|k| k.as_str()) != Some("header") {
                    return Err(TraceError::NoHeader {
                        path: origin.to_string(),
                    });
                }
                let found = v.get("version").and_then(|x| x.as_u64()).unwrap_or(0);
                if !(u64::from(oldest)..=u64::from(TRACE_VERSION)).contains(&found) {
                    return Err(TraceError::Version {
                        path: origin.to_string(),
                        found,
                    });
                }
            }
            let rec: TraceRecord = serde_json::from_str(line).map_err(|e| TraceError::Parse {
                path: origin.to_string(),
                line: lineno,
                column: e.column(),
                message: e.to_string(),
            })?;
            match rec {
                TraceRecord::Header(mut h) if header.is_none() => {
                    crate::tool_rules::validate_rules(&h.config.step.tool_rules).map_err(
                        |error| TraceError::ToolRules {
                            path: origin.to_string(),
                            error,
                        },
                    )?;
                    if h.version < 6 {
                        // Recorded when a hint only lengthened the backoff (R-IN-1).
                        h.config.step.retry.retry_after = crate::process::RetryAfterRule::Floor;
                    }
                    header = Some(*h)
                }
                TraceRecord::Header(_) => {
                    return Err(TraceError::Parse {
                        path: origin.to_string(),
                        line: lineno,
                        column: 1,
                        message: "a second header record".into(),
                    })
                }
                r => {
                    let expected = records.len() as u64;
                    let found = r.index().unwrap_or(expected);
                    if found != expected {
                        return Err(TraceError::Index {
                            path: origin.to_string(),
                            line: lineno,
                            found,
                            expected,
                        });
                    }
                    records.push(r)
                }
            }
        }
        let header = header.ok_or_else(|| TraceError::NoHeader {
            path: origin.to_string(),
        })?;
        Ok(Trace { header, records })
    }

    /// The JSON Schema of a trace line (R-TRACE-4).
    pub fn schema() -> serde_json::Value {
        serde_json::to_value(schemars::schema_for!(TraceRecord)).unwrap_or_default()
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
    if version < 5 {
        for effect in &mut step.effects {
            if let Effect::Emit {
                event:
                    crate::agent_event::AgentEvent::ToolEnd {
                        result,
                        result_truncated,
                        result_bytes,
                        ..
                    },
            } = effect
            {
                result.clear();
                *result_truncated = false;
                *result_bytes = 0;
            }
        }
    }
    if version < 6 {
        for effect in &mut step.effects {
            if let Effect::Emit {
                event: crate::agent_event::AgentEvent::Retry { retry_after_ms, .. },
            } = effect
            {
                *retry_after_ms = None;
            }
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
    let mut config = trace.header.config.clone();
    config.resolve_decider(registry)?;
    config.step.retry.resolve_decider(registry.retry())?;
    let mut run = Run::new(config);
    let mut regenerated = Trace::new(trace.header.clone());
    for r in &trace.records {
        if let TraceRecord::Input { event, .. } = r {
            let mut step = run.handle(event.clone());
            as_recorded_by(trace.header.version, &mut step);
            regenerated.record(event, &step);
        }
    }
    let n = trace.records.len().max(regenerated.records.len());
    Ok((0..n).find_map(|i| {
        let a = trace.records.get(i);
        let b = regenerated.records.get(i);
        (a != b).then(|| Divergence {
            index: i as u64,
            recorded: a.cloned(),
            replayed: b.cloned(),
        })
    }))
}
