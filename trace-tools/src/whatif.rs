//! What-if replay: the recorded inputs of a trace fed to machines built from a *changed*
//! configuration (`agentloop replay T --set max_steps=2`). Pure: it reports where behaviour
//! first differs from the recording, how the outcome changes, and — when the changed run asks
//! for something the recording never answered (a model reply for a step that never happened) —
//! what it was waiting for.

use agentloop_core::agent_event::AgentEvent;
use agentloop_core::effect::Effect;
use agentloop_core::event::{AttemptId, Event};
use agentloop_core::inline_tags::InlineTags;
use agentloop_core::react::{DeciderRegistry, Run, RunConfig, SteeringPolicy};
use agentloop_core::trace::{Divergence, Trace, TraceError, TraceRecord};

use crate::trace_diff::{input_before, record_diff};
use crate::transcript::{Summary, Transcript};

/// The keys [`apply_setting`] accepts, with the values each takes.
pub const SETTINGS: &[(&str, &str)] = &[
    ("max_steps", "an integer ≥ 1"),
    ("retry.max_retries", "an integer ≥ 0"),
    ("retry.initial_backoff_ms", "an integer ≥ 0 (milliseconds)"),
    ("retry.max_backoff_ms", "an integer ≥ 0 (milliseconds)"),
    ("parallel_tools", "true or false"),
    ("compact_threshold", "an integer ≥ 1, or none"),
    ("context_budget_tokens", "an integer ≥ 1, or none"),
    ("steering", "deliver_at_boundary or skip_remaining"),
    ("inline_tags", "strip, keep or off"),
];

/// A `--set KEY=VALUE` the configuration cannot take.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettingError {
    /// Not of the form `KEY=VALUE`.
    #[error("`{0}` is not KEY=VALUE")]
    Malformed(String),
    /// No such key.
    #[error("unknown setting `{key}` (known: {})", SETTINGS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", "))]
    UnknownKey {
        /// The key.
        key: String,
    },
    /// The value does not fit the key.
    #[error("bad value `{value}` for `{key}`: expected {expected}")]
    BadValue {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// What the key takes.
        expected: &'static str,
    },
}

/// Splits `KEY=VALUE`.
pub fn parse_assignment(s: &str) -> Result<(&str, &str), SettingError> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim(), v.trim())),
        _ => Err(SettingError::Malformed(s.to_string())),
    }
}

/// Sets one field of `config` from its textual value (see [`SETTINGS`]).
pub fn apply_setting(config: &mut RunConfig, key: &str, value: &str) -> Result<(), SettingError> {
    let expected = SETTINGS
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, e)| *e)
        .ok_or_else(|| SettingError::UnknownKey {
            key: key.to_string(),
        })?;
    let bad = || SettingError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        expected,
    };
    let optional = |v: &str| -> Result<Option<u64>, SettingError> {
        match v {
            "none" | "off" => Ok(None),
            n => n
                .parse::<u64>()
                .ok()
                .filter(|n| *n >= 1)
                .map(Some)
                .ok_or_else(bad),
        }
    };
    match key {
        "max_steps" => {
            config.max_steps = value.parse().ok().filter(|n| *n >= 1).ok_or_else(bad)?;
        }
        "retry.max_retries" => config.step.retry.max_retries = value.parse().map_err(|_| bad())?,
        "retry.initial_backoff_ms" => {
            config.step.retry.initial_backoff_ms = value.parse().map_err(|_| bad())?
        }
        "retry.max_backoff_ms" => {
            config.step.retry.max_backoff_ms = value.parse().map_err(|_| bad())?
        }
        "parallel_tools" => config.step.parallel_tools = value.parse().map_err(|_| bad())?,
        "compact_threshold" => {
            config.compact_threshold = optional(value)?
                .map(usize::try_from)
                .transpose()
                .map_err(|_| bad())?
        }
        "context_budget_tokens" => config.context_budget_tokens = optional(value)?,
        "steering" => {
            config.steering = match value {
                "deliver_at_boundary" => SteeringPolicy::DeliverAtBoundary,
                "skip_remaining" => SteeringPolicy::SkipRemaining,
                _ => return Err(bad()),
            }
        }
        "inline_tags" => {
            config.step.inline_tags = match value {
                "strip" => InlineTags::Strip,
                "keep" => InlineTags::Keep,
                "off" => InlineTags::Off,
                _ => return Err(bad()),
            }
        }
        _ => {
            return Err(SettingError::UnknownKey {
                key: key.to_string(),
            })
        }
    }
    Ok(())
}

/// Something the changed run asked for that the recording never answered.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missing {
    /// A model reply.
    ModelReply {
        /// The step (model call index).
        step: u32,
        /// The attempt.
        attempt: u32,
    },
    /// A tool call's result.
    ToolResult {
        /// The call.
        id: String,
        /// The tool.
        name: String,
    },
    /// A human's approval of a call.
    Approval {
        /// The call.
        id: String,
    },
    /// The hooks' verdict on a call.
    Gate {
        /// The call.
        id: String,
    },
    /// The result of a compaction.
    Compaction,
    /// The store's acknowledgement of the run-end entry.
    RunEndCommit,
    /// Nothing requested is outstanding, but the run has not ended (it waits for a timer).
    Timer {
        /// The state it waits in.
        state: String,
    },
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missing::ModelReply { step, attempt: 1 } => {
                write!(f, "trace has no answer for step {step}")
            }
            Missing::ModelReply { step, attempt } => {
                write!(f, "trace has no answer for step {step} (attempt {attempt})")
            }
            Missing::ToolResult { id, name } => {
                write!(f, "trace has no result for tool call {id} ({name})")
            }
            Missing::Approval { id } => write!(f, "trace has no approval decision for {id}"),
            Missing::Gate { id } => write!(f, "trace has no hook verdict for {id}"),
            Missing::Compaction => f.write_str("trace has no compaction result"),
            Missing::RunEndCommit => {
                f.write_str("trace has no acknowledgement of the run-end commit")
            }
            Missing::Timer { state } => write!(
                f,
                "trace has no further input: the changed run waits in {state} for a timer"
            ),
        }
    }
}

/// What a what-if replay found.
#[derive(Clone, Debug, PartialEq)]
pub struct WhatIf {
    /// Where the changed run first behaved differently (`None`: identical).
    pub divergence: Option<Divergence>,
    /// A unified diff of the two records at the divergence (tool lists shortened to names).
    pub diff: String,
    /// The input whose step holds the divergence (index in the changed run's trace, name).
    pub cause: Option<(u64, String)>,
    /// What the changed run still waited for when the recorded inputs ran out.
    pub missing: Option<Missing>,
    /// Recorded inputs not fed because the changed run had already ended.
    pub unused_inputs: usize,
    /// The recording's summary.
    pub recorded: Summary,
    /// The changed run's summary.
    pub replayed: Summary,
    /// The changed run's trace (its header carries the changed configuration).
    pub trace: Trace,
}

/// Feeds the recorded inputs of `trace` to machines built from `config` (the decider and the
/// retry decider are resolved in `registry`) and compares. Inputs after the changed run has ended are not fed.
pub fn what_if(
    trace: &Trace,
    mut config: RunConfig,
    registry: &DeciderRegistry,
) -> Result<WhatIf, TraceError> {
    config.resolve_decider(registry)?;
    config.step.retry.resolve_decider(registry.retry())?;
    let mut header = trace.header.clone();
    header.config = config.clone();
    let mut replayed = Trace::new(header);
    let mut run = Run::new(config);
    let mut pending: Vec<Pending> = Vec::new();
    let mut unused_inputs = 0;
    for r in &trace.records {
        let TraceRecord::Input { event, .. } = r else {
            continue;
        };
        if run.is_terminal() {
            unused_inputs += 1;
            continue;
        }
        pending.retain(|p| !p.answered_by(event));
        let mut step = run.handle(event.clone());
        agentloop_core::trace::as_recorded_by(trace.header.version, &mut step);
        for e in &step.effects {
            if let Effect::CallModel { request } = e {
                // The retry this attempt was scheduled for is no longer outstanding.
                pending.retain(|p| {
                    !matches!(p, Pending::Retry(s, a)
                        if *s == request.model_call_index && *a == request.attempt)
                });
            }
            if let Some(p) = Pending::of(e) {
                pending.push(p);
            }
        }
        replayed.record(event, &step);
    }
    let missing = (!run.is_terminal()).then(|| {
        pending
            .into_iter()
            .map(Pending::missing)
            .min_by_key(Missing::rank)
            .unwrap_or(Missing::Timer {
                state: run.state().to_string(),
            })
    });
    let n = trace.records.len().max(replayed.records.len());
    let divergence = (0..n).find_map(|i| {
        let (a, b) = (trace.records.get(i), replayed.records.get(i));
        (a != b).then(|| Divergence {
            index: i as u64,
            recorded: a.cloned(),
            replayed: b.cloned(),
        })
    });
    let diff = divergence
        .as_ref()
        .map(|d| {
            let value =
                |r: &Option<TraceRecord>| r.as_ref().and_then(|r| serde_json::to_value(r).ok());
            record_diff(
                value(&d.recorded).as_ref(),
                value(&d.replayed).as_ref(),
                ("recorded", "changed"),
            )
        })
        .unwrap_or_default();
    let cause = divergence
        .as_ref()
        .and_then(|d| input_before(&replayed, d.index as usize));
    Ok(WhatIf {
        divergence,
        diff,
        cause,
        missing,
        unused_inputs,
        recorded: Transcript::from_trace(trace).summary,
        replayed: Transcript::from_trace(&replayed).summary,
        trace: replayed,
    })
}

/// A request of the changed run that an input must answer.
enum Pending {
    Model(AttemptId),
    /// A retry scheduled (its timer pending): the step and the attempt it will send.
    Retry(u32, u32),
    Tool(String, String),
    Approval(String),
    Gate(String),
    Compaction,
    RunEnd,
}

impl Pending {
    fn of(effect: &Effect) -> Option<Pending> {
        Some(match effect {
            Effect::CallModel { request } => Pending::Model(AttemptId {
                run_id: request.run_id.clone(),
                model_call_index: request.model_call_index,
                attempt: request.attempt,
            }),
            Effect::RunTool { call } => Pending::Tool(call.id.clone(), call.name.clone()),
            Effect::RequestApproval { call } => Pending::Approval(call.id.clone()),
            Effect::GateTool { call } => Pending::Gate(call.id.clone()),
            Effect::Compact { .. } => Pending::Compaction,
            Effect::CommitRunEnd { .. } => Pending::RunEnd,
            Effect::Emit {
                event:
                    AgentEvent::Retry {
                        model_call_index,
                        attempt,
                        ..
                    },
            } => Pending::Retry(*model_call_index, *attempt),
            _ => return None,
        })
    }

    fn answered_by(&self, event: &Event) -> bool {
        match (self, event) {
            (
                Pending::Model(a),
                Event::Done { attempt, .. }
                | Event::TransportError { attempt, .. }
                | Event::ContextOverflow { attempt, .. }
                | Event::StreamStalled { attempt, .. },
            ) => a == attempt,
            // A cancelled attempt (abort, timer) needs no answer.
            (Pending::Model(_), Event::Abort { .. } | Event::TimerElapsed { .. }) => true,
            (Pending::Tool(id, _), Event::ToolFinished { tool_call_id, .. })
            | (Pending::Approval(id), Event::Approval { tool_call_id, .. })
            | (Pending::Gate(id), Event::ToolGated { tool_call_id, .. }) => id == tool_call_id,
            (
                Pending::Compaction,
                Event::CompactionDone { .. }
                | Event::CompactionFailed { .. }
                | Event::CompactionVetoed { .. },
            ) => true,
            (Pending::RunEnd, Event::RunEndCommitted | Event::StoreWriteFailed { .. }) => true,
            _ => false,
        }
    }

    fn missing(self) -> Missing {
        match self {
            Pending::Model(a) => Missing::ModelReply {
                step: a.model_call_index,
                attempt: a.attempt,
            },
            Pending::Retry(step, attempt) => Missing::ModelReply { step, attempt },
            Pending::Tool(id, name) => Missing::ToolResult { id, name },
            Pending::Approval(id) => Missing::Approval { id },
            Pending::Gate(id) => Missing::Gate { id },
            Pending::Compaction => Missing::Compaction,
            Pending::RunEnd => Missing::RunEndCommit,
        }
    }
}

impl Missing {
    /// Which missing answer to name first: the model's, then tools', then the rest.
    fn rank(&self) -> u8 {
        match self {
            Missing::ModelReply { .. } => 0,
            Missing::ToolResult { .. } => 1,
            Missing::Approval { .. } | Missing::Gate { .. } => 2,
            Missing::Compaction => 3,
            Missing::RunEndCommit => 4,
            Missing::Timer { .. } => 5,
        }
    }
}

/// The figures of a run a what-if compares: outcome, steps, tool calls, tokens.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Figures {
    /// The outcome and its reason (`completed (final_answer)`), or `not finished`.
    pub outcome: String,
    /// Committed model steps.
    pub steps: u64,
    /// Tool calls that finished.
    pub tool_calls: u64,
    /// Input tokens reported.
    pub tokens_in: u64,
    /// Output tokens reported.
    pub tokens_out: u64,
}

impl Figures {
    /// The figures of a run's summary.
    pub fn of(s: &Summary) -> Figures {
        let outcome = match (&s.outcome, &s.reason) {
            (Some(o), Some(r)) => format!("{o} ({r})"),
            (Some(o), None) => o.to_string(),
            _ => "not finished".into(),
        };
        Figures {
            outcome,
            steps: u64::from(s.steps),
            tool_calls: s.tool_calls as u64,
            tokens_in: s.usage.as_ref().map_or(0, |u| u.input_tokens),
            tokens_out: s.usage.as_ref().map_or(0, |u| u.output_tokens),
        }
    }

    /// The figures as a JSON object (`outcome`, `steps`, `tool_calls`, `tokens_in`,
    /// `tokens_out`).
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "outcome": self.outcome,
            "steps": self.steps,
            "tool_calls": self.tool_calls,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
        })
    }

    /// `before → after` for each field that changed from `self` to `after`.
    pub fn changes(&self, after: &Figures) -> Vec<String> {
        let mut o = Vec::new();
        if self.outcome != after.outcome {
            o.push(format!("outcome {} → {}", self.outcome, after.outcome));
        }
        for (name, a, b) in [
            ("steps", self.steps, after.steps),
            ("tool calls", self.tool_calls, after.tool_calls),
            ("tokens in", self.tokens_in, after.tokens_in),
            ("tokens out", self.tokens_out, after.tokens_out),
        ] {
            if a != b {
                o.push(format!("{name} {a} → {b}"));
            }
        }
        o
    }
}
