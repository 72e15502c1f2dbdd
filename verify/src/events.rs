//! What a run's event stream must say about its work, written from SPEC.md's events section
//! (R-EVT) and the typed-answer contract, never from the charts: each request, compaction,
//! approval and tool start or end is announced once, where it happens; a repair is announced
//! only where a run starts from a broken history; a run that asks for a typed answer completes
//! only with an answer that passed its check.
//!
//! [`EventLedger`] is fed each (input, step) of a run by [`crate::properties::RunSpec`] and
//! reports the first violation of [`run::EVENTS_MATCH_WORK`] and [`run::TYPED_ANSWER_CHECKED`].

use std::collections::{BTreeMap, BTreeSet};

use agentloop_core::agent_event::AgentEvent;
use agentloop_core::effect::Effect;
use agentloop_core::entry::Entry;
use agentloop_core::event::Event;
use agentloop_core::outcome::Outcome;
use agentloop_core::Step;

use crate::properties::{context_paired, run, Violations};

/// The event stream's bookkeeping across a run.
#[derive(Clone, Debug, Default)]
pub struct EventLedger {
    /// `compact_start` events not yet closed by a `compact_end`.
    compactions_open: u32,
    /// Calls whose `tool_start` was emitted.
    started: BTreeSet<String>,
    /// Calls whose `tool_end` was emitted.
    ended: BTreeSet<String>,
    /// Per call, approvals asked (`approval_required`) less those resolved
    /// (`approval_resolved`): a call may be asked again (its policy, then a hook's `Ask`).
    unresolved: BTreeMap<String, u32>,
    /// Whether the current attempt's answer (a `Done` without tool calls) failed the typed
    /// answer check.
    answer_rejected: bool,
}

/// How many effects of a step satisfy `f`.
fn count(effects: &[Effect], f: impl Fn(&Effect) -> bool) -> usize {
    effects.iter().filter(|e| f(e)).count()
}

fn emitted(e: &Effect, f: impl Fn(&AgentEvent) -> bool) -> bool {
    matches!(e, Effect::Emit { event } if f(event))
}

impl EventLedger {
    /// Observes one input and the step it produced; `outcome` is the run's outcome after it.
    pub fn observe(
        &mut self,
        event: &Event,
        step: &Step,
        outcome: Option<Outcome>,
        violations: &mut Violations,
    ) {
        let effects = &step.effects;
        let mut bad = |detail: String| violations.record(run::EVENTS_MATCH_WORK, || detail);
        // One announcement per piece of work, in the step that starts it.
        let pairs: [(&str, usize, usize); 3] = [
            (
                "request_start / model requests",
                count(effects, |e| {
                    emitted(e, |a| matches!(a, AgentEvent::RequestStart { .. }))
                }),
                count(effects, |e| matches!(e, Effect::CallModel { .. })),
            ),
            (
                "compact_start / compactions",
                count(effects, |e| {
                    emitted(e, |a| matches!(a, AgentEvent::CompactStart { .. }))
                }),
                count(effects, |e| matches!(e, Effect::Compact { .. })),
            ),
            (
                "approval_required / approval requests",
                count(effects, |e| {
                    emitted(e, |a| matches!(a, AgentEvent::ApprovalRequired { .. }))
                }),
                count(effects, |e| matches!(e, Effect::RequestApproval { .. })),
            ),
        ];
        for (what, events, work) in pairs {
            if events != work {
                bad(format!(
                    "{what}: {events} events for {work} on {}",
                    event.name()
                ));
            }
        }
        let results: BTreeSet<&str> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Persist {
                    entry: Entry::ToolResult { result, .. },
                } => Some(result.tool_call_id.as_str()),
                _ => None,
            })
            .collect();
        let runs: BTreeSet<&str> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::RunTool { call } => Some(call.id.as_str()),
                _ => None,
            })
            .collect();
        for e in effects {
            let Effect::Emit { event: a } = e else {
                continue;
            };
            match a {
                AgentEvent::ToolStart { tool_call_id, .. } => {
                    if !runs.contains(tool_call_id.as_str()) {
                        bad(format!(
                            "tool_start of {tool_call_id}, which this step does not run"
                        ));
                    }
                    if !self.started.insert(tool_call_id.clone()) {
                        bad(format!("a second tool_start of {tool_call_id}"));
                    }
                }
                AgentEvent::ToolEnd { tool_call_id, .. } => {
                    if !results.contains(tool_call_id.as_str()) {
                        bad(format!(
                            "tool_end of {tool_call_id} in a step that records no result for it"
                        ));
                    }
                    if !self.ended.insert(tool_call_id.clone()) {
                        bad(format!("a second tool_end of {tool_call_id}"));
                    }
                }
                AgentEvent::ApprovalRequired { tool_call_id, .. } => {
                    *self.unresolved.entry(tool_call_id.clone()).or_default() += 1;
                }
                AgentEvent::ApprovalResolved { tool_call_id, .. } => {
                    match self.unresolved.get_mut(tool_call_id) {
                        Some(n) if *n > 0 => *n -= 1,
                        _ => bad(format!(
                            "approval_resolved of {tool_call_id}, which is not being asked"
                        )),
                    }
                }
                AgentEvent::CompactStart { .. } => self.compactions_open += 1,
                AgentEvent::CompactEnd { .. } => {
                    if self.compactions_open == 0 {
                        bad(format!(
                            "compact_end without compact_start on {}",
                            event.name()
                        ));
                    }
                    self.compactions_open = self.compactions_open.saturating_sub(1);
                }
                AgentEvent::SessionRepaired { .. } => {
                    // R-IDEM-7: a loaded session that breaks pairing is repaired, with an
                    // event saying so; nothing else is a repair.
                    let broken = match event {
                        Event::Start { history, .. } | Event::Resume { history, .. } => {
                            context_paired(history.iter()).is_err()
                        }
                        _ => false,
                    };
                    if !broken {
                        bad(format!(
                            "session_repaired on {}, which brought no broken history",
                            event.name()
                        ));
                    }
                }
                _ => {}
            }
        }
        // A compaction announces its end (compact_end) before the next request. (A run that
        // ends meanwhile, by abort, deadline or store failure, closes it with its end event.)
        let requests = effects
            .iter()
            .any(|e| matches!(e, Effect::CallModel { .. }));
        if requests && self.compactions_open > 0 {
            let open = self.compactions_open;
            bad(format!(
                "{open} compaction(s) never announced their end before the next request"
            ));
        }
        if let Event::Done {
            output_rejected, ..
        } = event
        {
            if !step.unhandled {
                self.answer_rejected = output_rejected.is_some();
            }
        }
        if requests {
            self.answer_rejected = false;
        }
        if outcome == Some(Outcome::Completed) && self.answer_rejected {
            violations.record(run::TYPED_ANSWER_CHECKED, || {
                format!(
                    "completed on {} with an answer the typed check rejected",
                    event.name()
                )
            });
        }
    }
}
