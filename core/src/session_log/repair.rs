//! The repair of a session log (R-IDEM-6, R-IDEM-7): what to append so that every tool call
//! has exactly one terminal result and [`check`](fn@super::check) reports nothing, and a typed
//! list of what was repaired (one `session_repaired` event each).
//!
//! The log is append-only, so nothing is rewritten: a missing result is *appended*, and an
//! entry that cannot count (an orphan or duplicate result, a duplicate turn or call id, a stray
//! start marker) stays in the log but is left out of the model's context by
//! [`history`](fn@super::history) and recorded as dropped in an [`Entry::Repair`] marker.

use crate::entry::{Entry, Repair};
use crate::message::{ToolResult, ToolStatus};

use super::check::analyze;

/// What a repair appends, and what it repaired.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Repaired {
    /// Entries to append before the marker: the terminal results of unanswered calls (and,
    /// for a superseded run, its run end).
    pub entries: Vec<Entry>,
    /// Every repair, in entry order.
    pub repairs: Vec<Repair>,
}

impl Repaired {
    /// Whether nothing needs repairing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.repairs.is_empty()
    }

    /// Adds another repair's entries and repairs after these.
    pub fn extend(&mut self, other: Repaired) {
        self.entries.extend(other.entries);
        self.repairs.extend(other.repairs);
    }

    /// Everything to append, in order: [`entries`](Self::entries), then one
    /// [`Entry::Repair`] marker of `run_id` listing every repair (nothing when nothing was
    /// repaired).
    pub fn into_entries(self, run_id: &str) -> Vec<Entry> {
        let mut out = self.entries;
        if !self.repairs.is_empty() {
            out.push(Entry::Repair {
                run_id: run_id.to_string(),
                repairs: self.repairs,
            });
        }
        out
    }
}

/// [`repair_with`] where no tool is retry-safe.
pub fn repair(entries: &[Entry]) -> Repaired {
    repair_with(entries, |_| false)
}

/// The repair a run applies before its next model request (R-IDEM-6, R-IDEM-7): every
/// violation [`check`](fn@super::check) reports is settled, so `check` of `entries` followed by
/// [`Repaired::into_entries`] reports nothing.
///
/// - A call that was started but has no result gets an [`ToolStatus::OutcomeUnknown`] error
///   result — unless it belongs to the still-running step and `retry_safe(tool_name)` says the
///   tool may simply run again.
/// - A call of an earlier (not still-running) step that never started gets an
///   [`ToolStatus::Aborted`] result: it never ran.
/// - A call of the still-running step that never started is left alone: resume runs it.
/// - Every other violation (an orphan or duplicate result, a duplicate turn or tool call id,
///   a stray start marker) is an entry [`history`](fn@super::history) leaves out of the
///   context; the repair records it as dropped.
pub fn repair_with(entries: &[Entry], retry_safe: impl Fn(&str) -> bool) -> Repaired {
    let analysis = analyze(entries);
    // Each repair with the position it concerns, the dropped entries' first.
    let mut repairs: Vec<(usize, Repair)> = analysis
        .violations
        .iter()
        .filter_map(|v| v.drop_repair().map(|r| (v.index(), r)))
        .collect();
    let mut filled = Vec::new();
    for (call, is_pending) in analysis.unanswered {
        let (status, content) = if call.started {
            if is_pending && retry_safe(&call.name) {
                continue;
            }
            (
                ToolStatus::OutcomeUnknown,
                format!(
                    "outcome unknown: `{}` was started before the session was interrupted and \
                     its result was never recorded; it was not run again. Check its effects \
                     before retrying.",
                    call.name
                ),
            )
        } else if is_pending {
            continue;
        } else {
            (
                ToolStatus::Aborted,
                format!(
                    "aborted: `{}` never ran; the run was interrupted before it started",
                    call.name
                ),
            )
        };
        let repair = Repair::MissingResultFilled {
            index: call.index,
            run_id: call.run_id.clone(),
            model_call_index: call.model_call_index,
            tool_call_id: call.tool_call_id.clone(),
            name: call.name.clone(),
            status,
        };
        repairs.push((call.index, repair));
        filled.push(Entry::ToolResult {
            run_id: call.run_id,
            result: ToolResult {
                tool_call_id: call.tool_call_id,
                name: call.name,
                content,
                status,
            },
        });
    }
    repairs.sort_by_key(|(i, _)| *i);
    Repaired {
        entries: filled,
        repairs: repairs.into_iter().map(|(_, r)| r).collect(),
    }
}
