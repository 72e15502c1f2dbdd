//! Loop metrics (R-OBS) and usage cost (R-CTX-3), computed from the event stream: the session
//! observes every event on its bus, so metrics need no extra hooks in the machines.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::agent_event::AgentEvent;
use crate::message::{ToolStatus, Usage};
use crate::runtime::RunMetrics;
use crate::EventEnvelope;

/// Prices of one model, in USD per million tokens. Reasoning tokens are part of output tokens
/// (the providers' convention), so they are not priced separately.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Price {
    /// Per million input tokens (not served from cache).
    pub input_per_mtok: f64,
    /// Per million output tokens.
    pub output_per_mtok: f64,
    /// Per million input tokens served from cache.
    #[serde(default)]
    pub cache_read_per_mtok: f64,
    /// Per million input tokens written to cache.
    #[serde(default)]
    pub cache_write_per_mtok: f64,
}

impl Price {
    /// The cost of `usage`. `input_tokens` is taken to include neither cache reads nor writes.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let m = 1_000_000.0;
        usage.input_tokens as f64 * self.input_per_mtok / m
            + usage.output_tokens as f64 * self.output_per_mtok / m
            + usage.cache_read_input_tokens as f64 * self.cache_read_per_mtok / m
            + usage.cache_creation_input_tokens as f64 * self.cache_write_per_mtok / m
    }
}

/// Prices by model name (configurable; empty by default: no cost is reported).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PriceTable(pub BTreeMap<String, Price>);

impl PriceTable {
    /// Adds a model's price.
    pub fn with(mut self, model: impl Into<String>, price: Price) -> Self {
        self.0.insert(model.into(), price);
        self
    }

    /// The cost of `usage` on `model`, if the model is priced.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.0.get(model).map(|p| p.cost(usage))
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

/// Metrics of a session (R-OBS): readable at any time from [`Session::metrics`](super::Session::metrics).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Metrics {
    /// Runs started.
    pub runs: u64,
    /// Runs by outcome (`completed`, `failed`, `aborted`).
    pub outcomes: BTreeMap<String, u64>,
    /// Model steps committed (iterations), over all runs.
    pub steps: u64,
    /// Transitions taken, keyed `machine:From->To`.
    pub transitions: BTreeMap<String, u64>,
    /// Time spent in each state (left at least once), keyed `machine:State`, in ms.
    pub time_in_state_ms: BTreeMap<String, u64>,
    /// Retries scheduled.
    pub retries: u64,
    /// Retries by reason.
    pub retry_reasons: BTreeMap<String, u64>,
    /// Compactions finished.
    pub compactions: u64,
    /// Messages removed by compaction.
    pub messages_removed: u64,
    /// Per tool.
    pub tools: BTreeMap<String, ToolStats>,
    /// Loop detections.
    pub loops_detected: u64,
    /// Token usage of the session.
    pub usage: Usage,
    /// Cost of the session in USD (priced steps only).
    pub cost_usd: f64,
    /// Every run's [`RunMetrics`] over the session (R-OBS): step and tool latency
    /// percentiles, time to first token, tokens in/out/cached/reasoning, retries by kind,
    /// compactions, folded from the same events (compaction tokens removed are only counted
    /// on each run's own [`RunOutput::metrics`](crate::runtime::RunOutput::metrics)).
    #[serde(default)]
    pub runs_detail: RunMetrics,
    #[serde(skip)]
    entered: BTreeMap<String, u64>,
}

impl Metrics {
    /// Folds one event into the metrics.
    pub(crate) fn observe(&mut self, env: &EventEnvelope) {
        self.runs_detail.observe(env);
        match &env.event {
            AgentEvent::RunStart { .. } => self.runs += 1,
            AgentEvent::RunEnd { outcome, .. } => {
                *self.outcomes.entry(outcome.as_str().into()).or_default() += 1
            }
            AgentEvent::RunError { .. } => *self.outcomes.entry("failed".into()).or_default() += 1,
            AgentEvent::AgentAbort { .. } if !env.run_id.is_empty() => {
                *self.outcomes.entry("aborted".into()).or_default() += 1
            }
            AgentEvent::ResponseComplete { .. } => self.steps += 1,
            AgentEvent::StateChanged {
                machine, from, to, ..
            } => {
                let m = format!("{machine:?}").to_lowercase();
                *self
                    .transitions
                    .entry(format!("{m}:{from}->{to}"))
                    .or_default() += 1;
                let left = format!("{m}:{from}");
                if let Some(t) = self.entered.remove(&left) {
                    *self.time_in_state_ms.entry(left).or_default() += env.ts_ms.saturating_sub(t);
                }
                self.entered.insert(format!("{m}:{to}"), env.ts_ms);
            }
            AgentEvent::Retry { reason, .. } => {
                self.retries += 1;
                *self.retry_reasons.entry(reason.clone()).or_default() += 1;
            }
            AgentEvent::CompactEnd { removed } => {
                self.compactions += 1;
                self.messages_removed += *removed as u64;
            }
            AgentEvent::ToolEnd { name, status, .. } => {
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
            AgentEvent::UsageReport {
                model_call_index: Some(_),
                usage,
                cost_usd,
                ..
            } => {
                self.usage.add(usage);
                self.cost_usd += cost_usd.unwrap_or(0.0);
            }
            _ => {
                if env.event.type_name() == "loop_detected" {
                    self.loops_detected += 1;
                }
            }
        }
    }
}

/// Per-run usage, accumulated from step reports; kept on abort.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RunUsage {
    pub(crate) model: String,
    pub(crate) usage: Usage,
    pub(crate) cost_usd: Option<f64>,
    /// Some step reported usage (without one, the run's usage is unknown: no total is
    /// reported rather than zeros).
    pub(crate) reported: bool,
}

impl RunUsage {
    /// Folds a step's usage; returns the step's `usage_report` event.
    pub(crate) fn step(
        &mut self,
        prices: &PriceTable,
        model: &str,
        model_call_index: u32,
        usage: &Usage,
    ) -> AgentEvent {
        let cost = prices.cost(model, usage);
        self.model = model.to_string();
        self.usage.add(usage);
        self.reported = true;
        if let Some(c) = cost {
            *self.cost_usd.get_or_insert(0.0) += c;
        }
        AgentEvent::UsageReport {
            model_call_index: Some(model_call_index),
            model: model.to_string(),
            usage: *usage,
            cost_usd: cost,
        }
    }

    /// The run total's `usage_report` event, if some step reported usage.
    pub(crate) fn total(&self) -> Option<AgentEvent> {
        self.reported.then(|| AgentEvent::UsageReport {
            model_call_index: None,
            model: self.model.clone(),
            usage: self.usage,
            cost_usd: self.cost_usd,
        })
    }
}
