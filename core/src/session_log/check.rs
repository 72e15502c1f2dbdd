//! Session invariants: the pairing invariant and idempotency keys (`check`) and the calls a
//! resume still has to settle (`pending`). The repair of what `check` finds is in
//! [`repair`](mod@super::repair).
//!
//! Positions (`index`) are 0-based indexes into the entry list, which is the file's line
//! number minus one for a [`FileStore`](https://docs.rs/agentloop/latest/agentloop/store/struct.FileStore.html) session.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::entry::{Entry, EntryKey, Repair};

/// A broken session invariant (R-IDEM-1, R-IDEM-3, R-IDEM-6, R-IDEM-7).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Violation {
    /// A tool call of a committed assistant turn has no terminal result, and the turn is
    /// not the last, still-running step.
    #[error(
        "entry {index}: tool call {tool_call_id} ({name}) of run {run_id} step \
         {model_call_index} has no result"
    )]
    MissingToolResult {
        /// Position of the assistant entry.
        index: usize,
        /// The run.
        run_id: String,
        /// The step.
        model_call_index: u32,
        /// The call.
        tool_call_id: String,
        /// Tool name.
        name: String,
    },
    /// A second assistant entry with the same `(run_id, model_call_index)`.
    #[error("entry {index}: duplicate assistant turn (run {run_id}, step {model_call_index})")]
    DuplicateTurn {
        /// Position of the duplicate.
        index: usize,
        /// The run.
        run_id: String,
        /// The step.
        model_call_index: u32,
    },
    /// A tool call id used by two calls.
    #[error("entry {index}: tool call id {tool_call_id} used twice")]
    DuplicateToolCallId {
        /// Position of the assistant entry with the second use.
        index: usize,
        /// The call id.
        tool_call_id: String,
    },
    /// A second result for the same call.
    #[error("entry {index}: second result for tool call {tool_call_id}")]
    DuplicateToolResult {
        /// Position of the duplicate.
        index: usize,
        /// The call id.
        tool_call_id: String,
    },
    /// A second start marker for the same call.
    #[error("entry {index}: second start marker for tool call {tool_call_id}")]
    DuplicateToolStarted {
        /// Position of the duplicate.
        index: usize,
        /// The call id.
        tool_call_id: String,
    },
    /// A result for a call no earlier assistant turn made.
    #[error("entry {index}: result for tool call {tool_call_id}, which no earlier turn made")]
    OrphanToolResult {
        /// Position of the result.
        index: usize,
        /// The call id.
        tool_call_id: String,
    },
    /// A start marker for a call no earlier assistant turn made.
    #[error(
        "entry {index}: start marker for tool call {tool_call_id}, which no earlier turn \
         made"
    )]
    OrphanToolStarted {
        /// Position of the marker.
        index: usize,
        /// The call id.
        tool_call_id: String,
    },
    /// A start marker after the call's result.
    #[error("entry {index}: tool call {tool_call_id} marked started after its result")]
    StartedAfterResult {
        /// Position of the marker.
        index: usize,
        /// The call id.
        tool_call_id: String,
    },
}

impl Violation {
    /// The position of the entry concerned.
    pub fn index(&self) -> usize {
        match self {
            Violation::MissingToolResult { index, .. }
            | Violation::DuplicateTurn { index, .. }
            | Violation::DuplicateToolCallId { index, .. }
            | Violation::DuplicateToolResult { index, .. }
            | Violation::DuplicateToolStarted { index, .. }
            | Violation::OrphanToolResult { index, .. }
            | Violation::OrphanToolStarted { index, .. }
            | Violation::StartedAfterResult { index, .. } => *index,
        }
    }

    /// The repair that settles this violation by leaving the entry out (recorded in an
    /// [`Entry::Repair`] marker), or `None` for a missing result, which a repair settles by
    /// appending one ([`Repair::MissingResultFilled`]).
    pub fn drop_repair(&self) -> Option<Repair> {
        match self {
            Violation::MissingToolResult { .. } => None,
            Violation::DuplicateTurn {
                index,
                run_id,
                model_call_index,
            } => Some(Repair::DuplicateTurnDropped {
                index: *index,
                run_id: run_id.clone(),
                model_call_index: *model_call_index,
            }),
            Violation::DuplicateToolCallId {
                index,
                tool_call_id,
            } => Some(Repair::DuplicateToolCallDropped {
                index: *index,
                tool_call_id: tool_call_id.clone(),
            }),
            Violation::DuplicateToolResult {
                index,
                tool_call_id,
            } => Some(Repair::DuplicateResultDropped {
                index: *index,
                tool_call_id: tool_call_id.clone(),
            }),
            Violation::OrphanToolResult {
                index,
                tool_call_id,
            } => Some(Repair::OrphanResultDropped {
                index: *index,
                tool_call_id: tool_call_id.clone(),
            }),
            Violation::DuplicateToolStarted {
                index,
                tool_call_id,
            }
            | Violation::OrphanToolStarted {
                index,
                tool_call_id,
            }
            | Violation::StartedAfterResult {
                index,
                tool_call_id,
            } => Some(Repair::StrayStartIgnored {
                index: *index,
                tool_call_id: tool_call_id.clone(),
            }),
        }
    }
}

/// A tool call of the last, still-running step that has no result yet: resume settles it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PendingCall {
    /// Position of the assistant entry.
    pub index: usize,
    /// The run.
    pub run_id: String,
    /// The step.
    pub model_call_index: u32,
    /// The call.
    pub tool_call_id: String,
    /// Tool name.
    pub name: String,
    /// Whether its start was persisted (then its outcome is unknown, R-IDEM-6).
    pub started: bool,
}

pub(super) struct Analysis {
    /// Broken invariants that no [`Entry::Repair`] marker settled, in entry order.
    pub(super) violations: Vec<Violation>,
    /// Calls without a result, each with whether it is of the still-running step.
    pub(super) unanswered: Vec<(PendingCall, bool)>,
}

/// The drops recorded by [`Entry::Repair`] markers, each only for an entry before its marker.
fn recorded_drops(entries: &[Entry]) -> Vec<&Repair> {
    entries
        .iter()
        .enumerate()
        .filter_map(|(at, e)| match e {
            Entry::Repair { repairs, .. } => Some((at, repairs)),
            _ => None,
        })
        .flat_map(|(at, repairs)| {
            repairs
                .iter()
                .filter(move |r| r.index().is_some_and(|i| i < at))
        })
        .collect()
}

pub(super) fn analyze(entries: &[Entry]) -> Analysis {
    let mut violations = Vec::new();
    let mut calls: Vec<PendingCall> = Vec::new();
    let mut call_ids: HashSet<&str> = HashSet::new();
    let mut turns: HashSet<(&str, u32)> = HashSet::new();
    let mut started: HashSet<&str> = HashSet::new();
    let mut results: HashSet<&str> = HashSet::new();
    // Index of the last (first-seen) assistant turn, and its run.
    let mut last_turn: Option<(usize, &str)> = None;
    // Whether the last turn's run is still running at the end of the log.
    let mut last_turn_open = false;

    for (index, entry) in entries.iter().enumerate() {
        if let (Some((_, run)), Some(entry_run)) = (last_turn, entry.run_id()) {
            // The step stops running when its run ends or another run does something. A late
            // result or start marker of another run (an appended repair), or a repair marker,
            // does not stop it.
            let ends_run = matches!(entry, Entry::RunEnd { .. }) && entry_run == run;
            let other_run_acts = entry_run != run
                && !matches!(
                    entry,
                    Entry::ToolResult { .. } | Entry::ToolStarted { .. } | Entry::Repair { .. }
                );
            if ends_run || other_run_acts {
                last_turn_open = false;
            }
        }
        match entry {
            Entry::Assistant {
                run_id,
                model_call_index,
                message,
            } => {
                if !turns.insert((run_id, *model_call_index)) {
                    violations.push(Violation::DuplicateTurn {
                        index,
                        run_id: run_id.clone(),
                        model_call_index: *model_call_index,
                    });
                    continue;
                }
                last_turn = Some((index, run_id));
                last_turn_open = true;
                for call in &message.tool_calls {
                    if !call_ids.insert(&call.id) {
                        violations.push(Violation::DuplicateToolCallId {
                            index,
                            tool_call_id: call.id.clone(),
                        });
                        continue;
                    }
                    calls.push(PendingCall {
                        index,
                        run_id: run_id.clone(),
                        model_call_index: *model_call_index,
                        tool_call_id: call.id.clone(),
                        name: call.name.clone(),
                        started: false,
                    });
                }
            }
            Entry::ToolStarted { tool_call_id, .. } => {
                let id = tool_call_id.as_str();
                if !call_ids.contains(id) {
                    // Like an orphan result, it claims nothing: a later call with this id
                    // has not started.
                    violations.push(Violation::OrphanToolStarted {
                        index,
                        tool_call_id: id.to_string(),
                    });
                    continue;
                } else if started.contains(id) {
                    violations.push(Violation::DuplicateToolStarted {
                        index,
                        tool_call_id: id.to_string(),
                    });
                } else if results.contains(id) {
                    violations.push(Violation::StartedAfterResult {
                        index,
                        tool_call_id: id.to_string(),
                    });
                }
                started.insert(id);
            }
            Entry::ToolResult { result, .. } => {
                let id = result.tool_call_id.as_str();
                if !call_ids.contains(id) {
                    violations.push(Violation::OrphanToolResult {
                        index,
                        tool_call_id: id.to_string(),
                    });
                } else if !results.insert(id) {
                    violations.push(Violation::DuplicateToolResult {
                        index,
                        tool_call_id: id.to_string(),
                    });
                }
            }
            _ => {}
        }
    }

    let pending_index = last_turn.filter(|_| last_turn_open).map(|(i, _)| i);
    let mut unanswered = Vec::new();
    for mut call in calls {
        if results.contains(call.tool_call_id.as_str()) {
            continue;
        }
        call.started = started.contains(call.tool_call_id.as_str());
        let is_pending = Some(call.index) == pending_index;
        if !is_pending {
            violations.push(Violation::MissingToolResult {
                index: call.index,
                run_id: call.run_id.clone(),
                model_call_index: call.model_call_index,
                tool_call_id: call.tool_call_id.clone(),
                name: call.name.clone(),
            });
        }
        unanswered.push((call, is_pending));
    }
    violations.sort_by_key(Violation::index);
    let drops = recorded_drops(entries);
    if !drops.is_empty() {
        violations.retain(|v| !v.drop_repair().is_some_and(|r| drops.contains(&&r)));
    }
    Analysis {
        violations,
        unanswered,
    }
}

/// Every broken invariant of a session, in entry order (R-IDEM-7). Calls of the last,
/// still-running step (its run has not ended and no other run took a turn, got user input,
/// compacted or ended since) that lack results are
/// *not* violations: see [`pending`]. An entry that a later [`Entry::Repair`] marker records
/// as dropped is not reported again: [`repair`](fn@super::repair) settles every violation
/// reported here, so after it `check` reports nothing.
pub fn check(entries: &[Entry]) -> Vec<Violation> {
    analyze(entries).violations
}

/// The tool calls of the last, still-running step that have no result yet.
pub fn pending(entries: &[Entry]) -> Vec<PendingCall> {
    analyze(entries)
        .unanswered
        .into_iter()
        .filter_map(|(call, is_pending)| is_pending.then_some(call))
        .collect()
}

/// Idempotency keys stored more than once (a subset of [`check`], for quick tests).
pub fn duplicate_keys(entries: &[Entry]) -> Vec<EntryKey> {
    let mut seen = HashMap::new();
    let mut dups = Vec::new();
    for key in entries.iter().filter_map(Entry::idempotency_key) {
        let count = seen.entry(key.clone()).or_insert(0u32);
        *count += 1;
        if *count == 2 {
            dups.push(key);
        }
    }
    dups
}
