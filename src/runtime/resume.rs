//! Finding an interrupted run in stored entries and building the `Resume` event (R-IDEM-5).
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//!
//! use agentloop::prelude::*;
//! use agentloop::runtime::resume::interrupted_run;
//! use agentloop::store::SessionStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(MemoryStore::new());
//! let agent = Agent::builder()
//!     .model(ScriptedModel::demo())
//!     .builtin_tools()
//!     .store(store.clone())
//!     .build();
//! agent.run("session-1", "What is 6*7?").await?;
//! // The run ended: nothing to resume. After a crash this names the run that
//! // `Agent::resume` continues.
//! assert_eq!(interrupted_run(&store.load("session-1").await?), None);
//! # Ok(())
//! # }
//! ```

use std::collections::HashSet;

use crate::event::{Event, PendingStep};
use crate::message::{AssistantMessage, Message, ToolResult, ToolStatus};
use crate::store::Entry;
use agentloop_core::session_log::{Repair, Repaired};

/// The last run that started (user input) but has no run end, if any.
pub fn interrupted_run(entries: &[Entry]) -> Option<String> {
    let ended: HashSet<&str> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::RunEnd { run_id, .. } => Some(run_id.as_str()),
            _ => None,
        })
        .collect();
    entries.iter().rev().find_map(|e| match e {
        Entry::UserInput { run_id, .. } if !ended.contains(run_id.as_str()) => Some(run_id.clone()),
        _ => None,
    })
}

fn results_of<'a>(entries: &'a [Entry], m: &AssistantMessage) -> Vec<&'a ToolResult> {
    m.tool_calls
        .iter()
        .filter_map(|c| {
            entries.iter().find_map(|e| match e {
                Entry::ToolResult { result, .. } if result.tool_call_id == c.id => Some(result),
                _ => None,
            })
        })
        .collect()
}

/// The last committed message of `run_id`, if some of its tool calls have no result, or if
/// it has no tool calls at all: then it is the run's final answer and only the run end is
/// missing (the crash came between the two writes), so resume settles an empty step and
/// ends the run instead of asking the model for a step the run never needed.
fn pending_step(entries: &[Entry], run_id: &str) -> Option<PendingStep> {
    let (index, message) = entries.iter().rev().find_map(|e| match e {
        Entry::Assistant {
            run_id: r,
            model_call_index,
            message,
        } if r == run_id => Some((*model_call_index, message)),
        _ => None,
    })?;
    let results = results_of(entries, message);
    let unfinished = results.len() < message.tool_calls.len() || message.tool_calls.is_empty();
    unfinished.then(|| PendingStep {
        model_call_index: index,
        message: message.clone(),
        results: results.into_iter().cloned().collect(),
    })
}

/// The `Resume` event for the interrupted `run_id`.
pub(crate) fn resume_event(entries: &[Entry], run_id: &str) -> Event {
    let mut history = agentloop_core::session_log::history(entries);
    let pending = pending_step(entries, run_id);
    if let Some(p) = &pending {
        // The pending step's message and results come back through the step, not the history.
        if let Some(pos) = history
            .iter()
            .rposition(|m| matches!(m, Message::Assistant(a) if *a == p.message))
        {
            history.truncate(pos);
        }
    }
    let committed_steps = entries
        .iter()
        .filter(|e| matches!(e, Entry::Assistant { run_id: r, .. } if r == run_id))
        .count() as u32;
    Event::Resume {
        run_id: run_id.to_string(),
        history,
        session_turns: agentloop_core::session_log::committed_turns(entries),
        committed_steps,
        pending,
    }
}

/// For a new run on a session with an interrupted one: closes the interrupted step's calls
/// that never started (`aborted`) and ends the interrupted run, so the pairing invariant holds
/// (R-IDEM-7). `repaired` is what [`repair_with`](agentloop_core::session_log::repair_with) already appends.
pub(crate) fn supersede(entries: &[Entry], repaired: &[Entry]) -> Repaired {
    let mut out = Repaired::default();
    let Some(run_id) = interrupted_run(entries) else {
        return out;
    };
    let all: Vec<Entry> = entries.iter().chain(repaired).cloned().collect();
    let pending = pending_step(&all, &run_id);
    if pending
        .as_ref()
        .is_some_and(|p| p.message.tool_calls.is_empty())
    {
        // The final answer was committed, only the run end is missing.
        let reason = "final_answer (run end recorded on repair)";
        return run_ended(out, run_id, crate::agent_event::Outcome::Completed, reason);
    }
    if let Some(p) = pending {
        // The assistant entry's position, for the repair record.
        let index = entries
            .iter()
            .position(|e| {
                matches!(e, Entry::Assistant { run_id: r, model_call_index, .. }
                    if *r == run_id && *model_call_index == p.model_call_index)
            })
            .unwrap_or_default();
        for c in &p.message.tool_calls {
            if p.results.iter().any(|r| r.tool_call_id == c.id) {
                continue;
            }
            out.repairs.push(Repair::MissingResultFilled {
                index,
                run_id: run_id.clone(),
                model_call_index: p.model_call_index,
                tool_call_id: c.id.clone(),
                name: c.name.clone(),
                status: ToolStatus::Aborted,
            });
            out.entries.push(Entry::ToolResult {
                run_id: run_id.clone(),
                result: ToolResult {
                    tool_call_id: c.id.clone(),
                    name: c.name.clone(),
                    content: "aborted: the run was interrupted and a new prompt superseded it"
                        .into(),
                    status: ToolStatus::Aborted,
                },
            });
        }
    }
    let reason = "interrupted; superseded by a new prompt";
    run_ended(out, run_id, crate::agent_event::Outcome::Aborted, reason)
}

/// `out` with the interrupted run `run_id` ended (`outcome`, `reason`): its run end, and the
/// repair that says so.
fn run_ended(
    mut out: Repaired,
    run_id: String,
    outcome: crate::agent_event::Outcome,
    reason: &str,
) -> Repaired {
    out.entries.push(Entry::RunEnd {
        run_id: run_id.clone(),
        outcome,
        reason: reason.into(),
    });
    out.repairs
        .push(Repair::InterruptedRunEnded { run_id, outcome });
    out
}
