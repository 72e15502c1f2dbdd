//! Usage cost (R-CTX-3), computed from the event stream: the session observes every event on
//! its bus and prices each step's usage. The metrics themselves are
//! [`RunMetrics`](crate::runtime::RunMetrics), folded from the same events.

use std::collections::BTreeMap;

use crate::agent_event::AgentEvent;
use crate::message::Usage;

/// Prices of one model, in USD per million tokens. Reasoning tokens are part of output tokens
/// (the providers' convention), so they are not priced separately.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Price {
    /// Per million input tokens (not served from cache).
    pub(crate) input_per_mtok: f64,
    /// Per million output tokens.
    pub(crate) output_per_mtok: f64,
    /// Per million input tokens served from cache.
    pub(crate) cache_read_per_mtok: f64,
    /// Per million input tokens written to cache.
    pub(crate) cache_write_per_mtok: f64,
}

impl Price {
    /// The cost of `usage`. `input_tokens` is taken to include neither cache reads nor writes.
    pub(crate) fn cost(&self, usage: &Usage) -> f64 {
        let m = 1_000_000.0;
        usage.input_tokens as f64 * self.input_per_mtok / m
            + usage.output_tokens as f64 * self.output_per_mtok / m
            + usage.cache_read_input_tokens as f64 * self.cache_read_per_mtok / m
            + usage.cache_creation_input_tokens as f64 * self.cache_write_per_mtok / m
    }
}

/// Prices by model name ([`SessionConfig::price`](super::SessionConfig::price); empty by
/// default: no cost is reported).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PriceTable(BTreeMap<String, Price>);

impl PriceTable {
    /// `model`'s price (a new one is all zeros).
    pub(crate) fn price_mut(&mut self, model: String) -> &mut Price {
        self.0.entry(model).or_default()
    }

    /// The cost of `usage` on `model`, if the model is priced.
    pub(crate) fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.0.get(model).map(|p| p.cost(usage))
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
