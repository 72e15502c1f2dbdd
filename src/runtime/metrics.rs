//! Metrics of one run (R-OBS), folded from the run's own events as they are emitted: step and
//! tool latency, time to first token, tokens, retries by kind, compactions.
//!
//! Every time is a difference of two envelope timestamps, which come from the agent's `Clock`
//! port (never the wall clock directly), so a run on a virtual clock has virtual latencies.
//! [`RunOutput::metrics`](crate::runtime::RunOutput::metrics) holds a run's figures;
//! [`Session::metrics`](crate::session::Session::metrics) aggregates them over the session's
//! runs. At a run's end they are also emitted through `tracing` (target
//! `agentloop::metrics`) under the names of the OpenTelemetry GenAI semantic conventions:
//!
//! | field | OpenTelemetry GenAI name | what |
//! |---|---|---|
//! | `gen_ai.client.operation.duration` | histogram, s | a model step, first request to committed message (p50/p90/p99/max, ms here) |
//! | `gen_ai.server.time_to_first_token` | histogram, s | a model attempt, request sent to first streamed token |
//! | `gen_ai.client.token.usage` | histogram, `gen_ai.token.type` = `input` / `output` | tokens of the run (plus cached and reasoning) |
//! | `gen_ai.tool.duration` | (tool spans: `execute_tool`) | a tool call, start to result |
//!
//! No OpenTelemetry dependency: a `tracing` subscriber (an OTLP layer, say) maps the fields.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::agent_event::AgentEvent;
use crate::error::ErrorKind;
use crate::message::{ToolStatus, Usage};
use crate::EventEnvelope;

/// A latency's distribution: nearest-rank percentiles of its samples, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LatencySummary {
    /// Samples.
    pub(crate) count: usize,
    /// Median.
    pub(crate) p50_ms: u64,
    /// 90th percentile.
    pub(crate) p90_ms: u64,
    /// 99th percentile.
    pub(crate) p99_ms: u64,
    /// Largest sample.
    pub(crate) max_ms: u64,
    /// Mean (rounded down).
    #[allow(dead_code)] // the unit tests read it
    pub(crate) mean_ms: u64,
}

impl LatencySummary {
    /// Count, percentiles (nearest rank) and maximum of `samples` (milliseconds); `None`
    /// without samples. Sorts a copy: O(n log n).
    pub(crate) fn of(samples: &[u64]) -> Option<LatencySummary> {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let max_ms = *sorted.last()?;
        let rank = |p| nearest_rank(&sorted, p).unwrap_or(max_ms);
        let total: u64 = sorted.iter().sum();
        Some(LatencySummary {
            count: sorted.len(),
            p50_ms: rank(50),
            p90_ms: rank(90),
            p99_ms: rank(99),
            max_ms,
            mean_ms: total / sorted.len() as u64,
        })
    }
}

/// The `p`th percentile of `sorted` by nearest rank: the smallest sample with at least p % of
/// the samples at or below it; `None` without samples.
fn nearest_rank(sorted: &[u64], p: usize) -> Option<u64> {
    let n = sorted.len();
    let r = (p * n).div_ceil(100).clamp(1, n.max(1));
    sorted.get(r - 1).copied()
}

impl std::fmt::Display for LatencySummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "p50 {} ms, p90 {} ms, p99 {} ms, max {} ms (n={})",
            self.p50_ms, self.p90_ms, self.p99_ms, self.max_ms, self.count
        )
    }
}

/// Counters of one tool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolStats {
    /// Calls that got a terminal result.
    pub calls: u64,
    /// Completed.
    pub completed: u64,
    /// Errors (failures, panics, timeouts, invalid arguments, unknown tool).
    pub errors: u64,
    /// Denied, blocked or skipped.
    pub denied: u64,
    /// Aborted or outcome unknown.
    pub aborted: u64,
    /// Total run time of the calls that ran (from `tool_metrics`).
    pub total_ms: u64,
}

impl ToolStats {
    /// Completed / calls (1.0 when there were none).
    pub fn success_rate(&self) -> f64 {
        if self.calls == 0 {
            1.0
        } else {
            self.completed as f64 / self.calls as f64
        }
    }
}

/// Metrics of one run ([`RunOutput::metrics`](crate::runtime::RunOutput::metrics)), or of
/// every run of a session ([`Session::metrics`](crate::session::Session::metrics)), folded
/// from the same events (R-OBS): latencies from the `Clock` port's timestamps, token totals,
/// retries, compactions, outcomes, transitions and time per state, per-tool counters, and the
/// cost of the steps a session priced.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct RunMetrics {
    /// Runs folded in (1 for a run's own metrics).
    pub runs: u64,
    /// Model steps whose message was committed.
    pub steps: u64,
    /// Model requests sent (attempts, retries included).
    pub model_requests: u64,
    /// Milliseconds per committed step, in order: from its first request to its committed
    /// message (`request_start` of attempt 1 to `response_complete`, backoffs included).
    /// [`RunMetrics::percentile_ms`] gives the percentiles.
    pub step_latency: Vec<u64>,
    /// Milliseconds per attempt that streamed something: from its `request_start` to its
    /// first text, reasoning or tool-call delta.
    pub time_to_first_token: Vec<u64>,
    /// Milliseconds per tool call that ran: from its `tool_start` to its `tool_end`.
    pub tool_latency: Vec<u64>,
    /// Tool calls that got a result (ran or not: denied, skipped, ...).
    pub tool_calls: u64,
    /// Of those, the ones that failed (status `error`).
    pub tool_errors: u64,
    /// Tokens of the committed steps (each `response_complete`'s usage, as the run's result
    /// sums them): input, output, cached (cache reads and writes), reasoning.
    pub usage: Usage,
    /// Retries scheduled.
    pub retries: u64,
    /// Retries by kind: the error kind (`rate_limited`, `server_error`, ...), `timeout` for a
    /// request deadline, `stalled` for a first-chunk or stall deadline.
    pub retries_by_kind: BTreeMap<String, u64>,
    /// Retries whose delay was the server's `retry-after` hint (R-IN-1).
    pub retries_after_hint: u64,
    /// Compactions finished.
    pub compactions: u64,
    /// Messages compactions removed.
    pub compaction_messages_removed: u64,
    /// Tokens compactions removed, by the runtime's estimate of the context before and after
    /// (counted by the run itself; a session's aggregate, folded from events alone, has none).
    pub compaction_tokens_removed: u64,
    /// Runs by outcome (`completed`, `failed`, `aborted`).
    #[serde(default)]
    pub outcomes: BTreeMap<String, u64>,
    /// Transitions taken, keyed `machine:From->To`.
    #[serde(default)]
    pub transitions: BTreeMap<String, u64>,
    /// Time spent in each state (left at least once), keyed `machine:State`, in ms.
    #[serde(default)]
    pub time_in_state_ms: BTreeMap<String, u64>,
    /// Retries by the reason their event gave.
    #[serde(default)]
    pub retry_reasons: BTreeMap<String, u64>,
    /// Per tool.
    #[serde(default)]
    pub tools: BTreeMap<String, ToolStats>,
    /// Loop detections.
    #[serde(default)]
    pub loops_detected: u64,
    /// Cost in USD of the steps a session priced
    /// ([`SessionConfig::price`](crate::session::SessionConfig::price); 0 without prices and
    /// for a run outside a session).
    #[serde(default)]
    pub cost_usd: f64,
    /// When each state was entered, keyed `machine:State` (for `time_in_state_ms`).
    #[serde(skip)]
    entered: BTreeMap<String, u64>,
    /// In flight: first `request_start` per step, per attempt, per tool call.
    #[serde(skip)]
    open: Open,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Open {
    step_started: BTreeMap<u32, u64>,
    attempt_started: BTreeMap<(u32, u32), u64>,
    tool_started: BTreeMap<String, u64>,
    latest: Option<(u32, u32)>,
}

impl RunMetrics {
    /// Folds one event of the run (its envelope's `ts_ms` is the clock port's reading).
    pub fn observe(&mut self, env: &EventEnvelope) {
        self.observe_at(&env.event, !env.run_id.is_empty(), || env.ts_ms);
    }

    /// Folds one event of a run (`in_run`: it carries a run id) and reads the time from `now`
    /// only for the events the metrics time: a text delta after an attempt's first costs no
    /// clock reading (the driver's path when no sink takes envelopes).
    pub(crate) fn observe_at(&mut self, event: &AgentEvent, in_run: bool, now: impl Fn() -> u64) {
        let ts = &now;
        match event {
            AgentEvent::RunStart {} => {
                // What an earlier run left open (an abort mid-step) is not this run's.
                self.open = Open::default();
                self.runs += 1;
            }
            AgentEvent::RequestStart {
                model_call_index,
                attempt,
                ..
            } => {
                self.model_requests += 1;
                self.open
                    .step_started
                    .entry(*model_call_index)
                    .or_insert_with(ts);
                self.open
                    .attempt_started
                    .insert((*model_call_index, *attempt), ts());
                self.open.latest = Some((*model_call_index, *attempt));
            }
            token if token.is_token() => {
                // Tool-call deltas name no attempt: they belong to the latest request.
                let at = match token {
                    AgentEvent::TextDelta {
                        model_call_index,
                        attempt,
                        ..
                    }
                    | AgentEvent::ReasoningDelta {
                        model_call_index,
                        attempt,
                        ..
                    } => Some((*model_call_index, *attempt)),
                    _ => self.open.latest,
                };
                // Only the first delta of the attempt counts: the start is taken out then.
                if let Some(t) = at.and_then(|at| self.open.attempt_started.remove(&at)) {
                    self.time_to_first_token.push(ts().saturating_sub(t));
                }
            }
            AgentEvent::ResponseComplete {
                model_call_index,
                usage,
                ..
            } => {
                self.steps += 1;
                if let Some(usage) = usage {
                    self.usage.add(usage);
                }
                if let Some(t) = self.open.step_started.remove(model_call_index) {
                    self.step_latency.push(ts().saturating_sub(t));
                }
                self.open
                    .attempt_started
                    .retain(|(step, _), _| step != model_call_index);
            }
            AgentEvent::Retry {
                reason,
                retry_after_ms,
                ..
            } => {
                self.retries += 1;
                *self.retries_by_kind.entry(retry_kind(reason)).or_default() += 1;
                *self.retry_reasons.entry(reason.clone()).or_default() += 1;
                if retry_after_ms.is_some() {
                    self.retries_after_hint += 1;
                }
            }
            AgentEvent::ToolStart { tool_call_id, .. } => {
                self.open.tool_started.insert(tool_call_id.clone(), ts());
            }
            AgentEvent::ToolEnd {
                tool_call_id,
                name,
                status,
                ..
            } => {
                self.tool_calls += 1;
                if *status == ToolStatus::Error {
                    self.tool_errors += 1;
                }
                if let Some(t) = self.open.tool_started.remove(tool_call_id) {
                    self.tool_latency.push(ts().saturating_sub(t));
                }
                let t = self.tools.entry(name.clone()).or_default();
                t.calls += 1;
                match status {
                    ToolStatus::Completed => t.completed += 1,
                    ToolStatus::Error => t.errors += 1,
                    ToolStatus::Denied | ToolStatus::Skipped => t.denied += 1,
                    ToolStatus::Aborted | ToolStatus::OutcomeUnknown => t.aborted += 1,
                }
            }
            AgentEvent::ToolMetrics {
                name, duration_ms, ..
            } => self.tools.entry(name.clone()).or_default().total_ms += duration_ms,
            AgentEvent::CompactEnd { removed } => {
                self.compactions += 1;
                self.compaction_messages_removed += *removed as u64;
            }
            AgentEvent::RunEnd { outcome, .. } => {
                *self.outcomes.entry(outcome.as_str().into()).or_default() += 1
            }
            AgentEvent::RunError { .. } => *self.outcomes.entry("failed".into()).or_default() += 1,
            AgentEvent::AgentAbort { .. } if in_run => {
                *self.outcomes.entry("aborted".into()).or_default() += 1
            }
            AgentEvent::StateChanged {
                machine, from, to, ..
            } => {
                let m = format!("{machine:?}").to_lowercase();
                *self
                    .transitions
                    .entry(format!("{m}:{from}->{to}"))
                    .or_default() += 1;
                let left = format!("{m}:{from}");
                let now = ts();
                if let Some(t) = self.entered.remove(&left) {
                    *self.time_in_state_ms.entry(left).or_default() += now.saturating_sub(t);
                }
                self.entered.insert(format!("{m}:{to}"), now);
            }
            AgentEvent::UsageReport {
                model_call_index: Some(_),
                cost_usd,
                ..
            } => self.cost_usd += cost_usd.unwrap_or(0.0),
            AgentEvent::LoopDetected { .. } => self.loops_detected += 1,
            _ => {}
        }
    }

    /// Counts the tokens one compaction removed (the runtime's estimate).
    pub(crate) fn compacted_tokens(&mut self, removed: u64) {
        self.compaction_tokens_removed += removed;
    }

    /// Adds another run's figures (a session's aggregate).
    pub fn merge(&mut self, other: &RunMetrics) {
        self.runs += other.runs;
        self.steps += other.steps;
        self.model_requests += other.model_requests;
        self.step_latency.extend_from_slice(&other.step_latency);
        self.time_to_first_token
            .extend_from_slice(&other.time_to_first_token);
        self.tool_latency.extend_from_slice(&other.tool_latency);
        self.tool_calls += other.tool_calls;
        self.tool_errors += other.tool_errors;
        self.usage.add(&other.usage);
        self.retries += other.retries;
        self.retries_after_hint += other.retries_after_hint;
        self.compactions += other.compactions;
        self.compaction_messages_removed += other.compaction_messages_removed;
        self.compaction_tokens_removed += other.compaction_tokens_removed;
        let add = |to: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>| {
            for (k, n) in from {
                *to.entry(k.clone()).or_default() += n;
            }
        };
        add(&mut self.retries_by_kind, &other.retries_by_kind);
        add(&mut self.outcomes, &other.outcomes);
        add(&mut self.transitions, &other.transitions);
        add(&mut self.time_in_state_ms, &other.time_in_state_ms);
        add(&mut self.retry_reasons, &other.retry_reasons);
        for (name, t) in &other.tools {
            let mine = self.tools.entry(name.clone()).or_default();
            mine.calls += t.calls;
            mine.completed += t.completed;
            mine.errors += t.errors;
            mine.denied += t.denied;
            mine.aborted += t.aborted;
            mine.total_ms += t.total_ms;
        }
        self.loops_detected += other.loops_detected;
        self.cost_usd += other.cost_usd;
    }

    /// Emits the figures as one `tracing` event (target `agentloop::metrics`, level info),
    /// with the OpenTelemetry GenAI semantic-convention names as field prefixes.
    pub fn trace(&self, run_id: &str) {
        let step = LatencySummary::of(&self.step_latency);
        let ttft = LatencySummary::of(&self.time_to_first_token);
        let tool = LatencySummary::of(&self.tool_latency);
        let p = |s: Option<LatencySummary>, f: fn(&LatencySummary) -> u64| s.as_ref().map(f);
        tracing::info!(
            target: "agentloop::metrics",
            run_id,
            gen_ai.operation.name = "invoke_agent",
            gen_ai.client.operation.duration.count = step.map(|s| s.count),
            gen_ai.client.operation.duration.p50_ms = p(step, |s| s.p50_ms),
            gen_ai.client.operation.duration.p90_ms = p(step, |s| s.p90_ms),
            gen_ai.client.operation.duration.p99_ms = p(step, |s| s.p99_ms),
            gen_ai.client.operation.duration.max_ms = p(step, |s| s.max_ms),
            gen_ai.server.time_to_first_token.p50_ms = p(ttft, |s| s.p50_ms),
            gen_ai.server.time_to_first_token.p90_ms = p(ttft, |s| s.p90_ms),
            gen_ai.server.time_to_first_token.max_ms = p(ttft, |s| s.max_ms),
            gen_ai.tool.duration.count = tool.map(|s| s.count),
            gen_ai.tool.duration.p50_ms = p(tool, |s| s.p50_ms),
            gen_ai.tool.duration.p90_ms = p(tool, |s| s.p90_ms),
            gen_ai.tool.duration.p99_ms = p(tool, |s| s.p99_ms),
            gen_ai.tool.duration.max_ms = p(tool, |s| s.max_ms),
            gen_ai.client.token.usage.input = self.usage.input_tokens,
            gen_ai.client.token.usage.output = self.usage.output_tokens,
            gen_ai.client.token.usage.cached = self.cached_tokens(),
            gen_ai.client.token.usage.reasoning = self.usage.reasoning_tokens,
            agentloop.steps = self.steps,
            agentloop.model_requests = self.model_requests,
            agentloop.retries = self.retries,
            agentloop.compactions = self.compactions,
            agentloop.compaction.tokens_removed = self.compaction_tokens_removed,
            "run_metrics"
        );
    }

    /// The `p`th percentile (nearest rank; `p` from 1 to 100, 100 is the largest sample) of a
    /// latency's samples in milliseconds, such as [`step_latency`](Self::step_latency); `None`
    /// without samples. Sorts a copy: O(n log n).
    ///
    /// ```
    /// use agentloop::runtime::RunMetrics;
    /// let samples = [30, 10, 20, 40];
    /// assert_eq!(RunMetrics::percentile_ms(&samples, 50), Some(20));
    /// assert_eq!(RunMetrics::percentile_ms(&samples, 100), Some(40));
    /// assert_eq!(RunMetrics::percentile_ms(&[], 50), None);
    /// ```
    pub fn percentile_ms(samples: &[u64], p: u32) -> Option<u64> {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        nearest_rank(&sorted, p as usize)
    }

    /// Input tokens served from or written to the provider's prompt cache.
    pub fn cached_tokens(&self) -> u64 {
        self.usage.cache_read_input_tokens + self.usage.cache_creation_input_tokens
    }

    /// A few lines for a person: latencies, tokens, retries, compactions (what
    /// `agentloop run --metrics` prints).
    pub fn summary_text(&self) -> String {
        use std::fmt::Write;
        let latency = |h: &[u64]| match LatencySummary::of(h) {
            Some(s) => s.to_string(),
            None => "none".to_string(),
        };
        let (steps, requests) = (self.steps, self.model_requests);
        let mut out = format!("metrics:\n  steps: {steps} ({requests} model requests)\n");
        let _ = writeln!(out, "  step latency: {}", latency(&self.step_latency));
        let ttft = latency(&self.time_to_first_token);
        let _ = writeln!(out, "  time to first token: {ttft}");
        let _ = writeln!(
            out,
            "  tool latency: {} ({} calls, {} errors)",
            latency(&self.tool_latency),
            self.tool_calls,
            self.tool_errors
        );
        let u = &self.usage;
        let _ = writeln!(
            out,
            "  tokens: {} in, {} out, {} cached, {} reasoning",
            u.input_tokens,
            u.output_tokens,
            self.cached_tokens(),
            u.reasoning_tokens
        );
        let kinds: Vec<String> = self
            .retries_by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let kinds = if kinds.is_empty() {
            String::new()
        } else {
            format!(" ({})", kinds.join(", "))
        };
        let _ = writeln!(out, "  retries: {}{kinds}", self.retries);
        let _ = writeln!(
            out,
            "  compactions: {} ({} messages, ~{} tokens removed)",
            self.compactions, self.compaction_messages_removed, self.compaction_tokens_removed
        );
        out
    }
}

/// The kind of a retry from its reason: the error kind a model error's text starts with
/// (`rate_limited: ...`), `timeout` for a request deadline, `stalled` for a first-chunk or
/// stall deadline, else `other`.
fn retry_kind(reason: &str) -> String {
    if let Some((prefix, _)) = reason.split_once(':') {
        let known = serde_json::from_value::<ErrorKind>(serde_json::Value::String(
            prefix.trim().to_string(),
        ));
        if let Ok(kind) = known {
            return kind.as_str().to_string();
        }
    }
    if reason.starts_with("request exceeded") {
        "timeout".into()
    } else if reason.starts_with("stream stalled") {
        "stalled".into()
    } else {
        "other".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolStatus;

    fn env(ts_ms: u64, event: AgentEvent) -> EventEnvelope {
        EventEnvelope {
            index: 0,
            ts_ms,
            run_id: "r".into(),
            event,
        }
    }

    fn request(step: u32, attempt: u32) -> AgentEvent {
        AgentEvent::RequestStart {
            model_call_index: step,
            attempt,
            model: "m".into(),
            messages: None,
        }
    }

    fn text(step: u32, attempt: u32) -> AgentEvent {
        AgentEvent::TextDelta {
            model_call_index: step,
            attempt,
            text: "x".into(),
        }
    }

    fn complete(step: u32, usage: Option<Usage>) -> AgentEvent {
        AgentEvent::ResponseComplete {
            model_call_index: step,
            usage,
            tool_calls: 0,
            message: Default::default(),
        }
    }

    fn retry(step: u32, delay_ms: u64, reason: &str, retry_after_ms: Option<u64>) -> AgentEvent {
        AgentEvent::Retry {
            model_call_index: step,
            attempt: 2,
            delay_ms,
            reason: reason.into(),
            retry_after_ms,
        }
    }

    #[test]
    fn r_obs_percentiles_are_nearest_rank_over_the_samples() {
        assert_eq!(LatencySummary::of(&[]), None);
        let h: Vec<u64> = (1..=100).rev().collect();
        let s = LatencySummary::of(&h).expect("samples");
        assert_eq!(
            (s.count, s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms, s.mean_ms),
            (100, 50, 90, 99, 100, 50)
        );
        let s = LatencySummary::of(&[7]).expect("one");
        assert_eq!((s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms), (7, 7, 7, 7));
        let s = LatencySummary::of(&[10, 1_000]).expect("two");
        assert_eq!((s.p50_ms, s.p90_ms, s.max_ms), (10, 1_000, 1_000));
    }

    #[test]
    fn r_obs_step_latency_and_ttft_from_the_clock_timestamps_of_the_events() {
        let mut m = RunMetrics::default();
        for e in [
            env(1_000, AgentEvent::RunStart {}),
            // Step 1: attempt 1 fails, attempt 2 streams after 40 ms, commits at 1 300.
            env(1_000, request(1, 1)),
            env(1_010, retry(1, 150, "server_error: HTTP 503", Some(150))),
            env(1_160, request(1, 2)),
            env(1_200, text(1, 2)),
            env(1_250, text(1, 2)),
            env(1_300, complete(1, None)),
            // A tool call of 75 ms.
            env(
                1_300,
                AgentEvent::ToolStart {
                    tool_call_id: "c1".into(),
                    name: "calc".into(),
                    arguments: serde_json::json!({}),
                },
            ),
            env(
                1_375,
                AgentEvent::ToolEnd {
                    tool_call_id: "c1".into(),
                    name: "calc".into(),
                    status: ToolStatus::Completed,
                    result: "5".into(),
                    result_truncated: false,
                    result_bytes: 1,
                },
            ),
            // Step 2: 10 ms to first token, 30 ms in all; a stall retry.
            env(1_400, request(2, 1)),
            env(1_405, retry(2, 1_000, "stream stalled for 30000 ms", None)),
            env(1_410, text(2, 1)),
            env(
                1_430,
                complete(
                    2,
                    Some(Usage {
                        input_tokens: 100,
                        output_tokens: 20,
                        cache_read_input_tokens: 60,
                        cache_creation_input_tokens: 0,
                        reasoning_tokens: 5,
                    }),
                ),
            ),
            // A session's usage reports repeat the steps' usage: not counted again.
            env(
                1_430,
                AgentEvent::UsageReport {
                    model_call_index: None,
                    model: "m".into(),
                    usage: Usage {
                        input_tokens: 999,
                        ..Usage::default()
                    },
                    cost_usd: None,
                },
            ),
            env(1_440, AgentEvent::CompactEnd { removed: 4 }),
        ] {
            m.observe(&e);
        }
        assert_eq!((m.runs, m.steps, m.model_requests), (1, 2, 3));
        assert_eq!(m.step_latency, [300, 30]);
        assert_eq!(m.time_to_first_token, [40, 10]);
        assert_eq!(m.tool_latency, [75]);
        assert_eq!((m.tool_calls, m.tool_errors), (1, 0));
        assert_eq!(m.retries, 2);
        assert_eq!(
            m.retries_by_kind,
            BTreeMap::from([("server_error".into(), 1), ("stalled".into(), 1)])
        );
        assert_eq!(m.retries_after_hint, 1);
        assert_eq!(
            (
                m.usage.input_tokens,
                m.usage.output_tokens,
                m.cached_tokens()
            ),
            (100, 20, 60),
            "committed steps only, not the usage reports"
        );
        assert_eq!((m.compactions, m.compaction_messages_removed), (1, 4));
        let text = m.summary_text();
        assert!(text.contains("step latency: p50 30 ms"), "{text}");
        assert!(
            text.contains("retries: 2 (server_error 1, stalled 1)"),
            "{text}"
        );
        assert!(
            text.contains("tokens: 100 in, 20 out, 60 cached, 5 reasoning"),
            "{text}"
        );

        let mut all = RunMetrics::default();
        all.merge(&m);
        all.merge(&m);
        assert_eq!((all.runs, all.steps, all.retries), (2, 4, 4));
        assert_eq!(all.step_latency.len(), 4);
        assert_eq!(all.retries_by_kind["stalled"], 2);
    }

    #[test]
    fn r_obs_retry_kinds_name_the_error_or_the_deadline() {
        assert_eq!(retry_kind("rate_limited: slow down"), "rate_limited");
        assert_eq!(retry_kind("request exceeded 1000 ms"), "timeout");
        assert_eq!(retry_kind("stream stalled for 30000 ms"), "stalled");
        assert_eq!(retry_kind("weird: thing"), "other");
    }
}
