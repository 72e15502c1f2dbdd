//! The session machine's data: what spans its states.

use std::collections::{BTreeSet, VecDeque};

use crate::agent_event::AgentEvent;
use crate::chart::SessionRow;

use super::SessionEffect;

/// The session machine's data (statig context).
#[derive(Debug, Clone, Default)]
pub struct SessionData {
    /// The model the next run uses (and a switch compares with).
    pub(crate) model: String,
    /// Steering queue capacity (R-CTL-2).
    pub(crate) steering_capacity: usize,
    /// The last steering reference given out.
    pub(crate) steering_ref: u64,
    /// Steering messages forwarded into the running run.
    pub(crate) steers_sent: u64,
    /// The texts of the queued prompts, oldest first (the actor keeps their payloads).
    pub(crate) queued: VecDeque<String>,
    /// The reason of the first abort forwarded into the running run.
    pub(crate) abort: Option<String>,
    /// Approval scopes approved "always": every run the session starts is seeded with them.
    pub(crate) whitelist: BTreeSet<String>,
    /// The row the current input took.
    row: Option<SessionRow>,
    /// The effects of the current input.
    out: Vec<SessionEffect>,
}

impl SessionData {
    pub(crate) fn new(model: String, steering_capacity: usize) -> Self {
        SessionData {
            model,
            steering_capacity,
            ..SessionData::default()
        }
    }

    /// The model the next run uses.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The queued prompts' texts, oldest first.
    pub fn queued(&self) -> impl Iterator<Item = &str> {
        self.queued.iter().map(String::as_str)
    }

    /// The session's approval whitelist.
    pub fn whitelist(&self) -> &BTreeSet<String> {
        &self.whitelist
    }

    /// The reason of the abort forwarded into the running run, if any.
    pub fn abort_reason(&self) -> Option<&str> {
        self.abort.as_deref()
    }

    /// Records the row the generated dispatch took.
    pub(crate) fn take(&mut self, row: SessionRow) {
        self.row = Some(row);
    }

    pub(crate) fn push(&mut self, effect: SessionEffect) {
        self.out.push(effect);
    }

    pub(crate) fn publish(&mut self, event: AgentEvent) {
        self.out.push(SessionEffect::Publish(event));
    }

    pub(crate) fn begin(&mut self) {
        self.row = None;
        self.out.clear();
    }

    pub(crate) fn finish(&mut self) -> (Option<SessionRow>, Vec<SessionEffect>) {
        (self.row.take(), std::mem::take(&mut self.out))
    }
}
