//! The model context reconstructed from session entries (start and resume of a session).

use std::collections::HashSet;

use crate::entry::{Entry, EntryKey};
use crate::message::Message;

/// The conversation as the model sees it: user inputs, assistant turns and tool results
/// (each placed after its assistant message in the model's call order, R-IN-4, whatever order
/// they finished and were persisted in). A [`Entry::Compaction`] replaces everything before it with its
/// `messages`. Metadata, start markers and run ends carry no message. An entry whose
/// idempotency key already appeared (which a store never writes, but a hand-edited file
/// may hold) is skipped, the first one wins; [`check`](fn@super::check) reports it.
pub fn history(entries: &[Entry]) -> Vec<Message> {
    let mut seen: HashSet<EntryKey> = HashSet::new();
    let mut messages = Vec::new();
    for entry in entries {
        if let Some(key) = entry.idempotency_key() {
            if !seen.insert(key) {
                continue;
            }
        }
        match entry {
            Entry::UserInput { message, .. } => messages.push(message.clone()),
            Entry::Assistant { message, .. } => messages.push(Message::Assistant(message.clone())),
            Entry::ToolResult { result, .. } => insert_result(&mut messages, result),
            Entry::Compaction {
                messages: replacement,
                ..
            } => messages = replacement.clone(),
            Entry::Metadata { .. } | Entry::ToolStarted { .. } | Entry::RunEnd { .. } => {}
        }
    }
    messages
}

/// Places a tool result after its assistant message, among that message's results, in call
/// order. A result with no matching call is appended (`check` reports it).
fn insert_result(messages: &mut Vec<Message>, result: &crate::message::ToolResult) {
    let owner = messages.iter().rposition(|m| match m {
        Message::Assistant(a) => a.tool_calls.iter().any(|c| c.id == result.tool_call_id),
        _ => false,
    });
    let (Some(owner), Some(Message::Assistant(a))) = (owner, owner.and_then(|o| messages.get(o)))
    else {
        messages.push(Message::Tool(result.clone()));
        return;
    };
    let rank = |id: &str| {
        a.tool_calls
            .iter()
            .position(|c| c.id == id)
            .unwrap_or(usize::MAX)
    };
    let mine = rank(&result.tool_call_id);
    let mut at = owner + 1;
    while let Some(Message::Tool(r)) = messages.get(at) {
        if rank(&r.tool_call_id) >= mine {
            break;
        }
        at += 1;
    }
    messages.insert(at, Message::Tool(result.clone()));
}

/// The number of committed assistant turns (distinct `(run_id, model_call_index)` keys).
pub fn committed_turns(entries: &[Entry]) -> u32 {
    let turns: HashSet<(&str, u32)> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::Assistant {
                run_id,
                model_call_index,
                ..
            } => Some((run_id.as_str(), *model_call_index)),
            _ => None,
        })
        .collect();
    u32::try_from(turns.len()).unwrap_or(u32::MAX)
}

/// The `model_call_index` the next step of `run_id` uses: one past the highest committed
/// step of that run, or 1 (R-IDEM-5: an uncommitted step is re-requested with this index).
pub fn next_model_call_index(entries: &[Entry], run_id: &str) -> u32 {
    entries
        .iter()
        .filter_map(|e| match e {
            Entry::Assistant {
                run_id: r,
                model_call_index,
                ..
            } if r == run_id => Some(*model_call_index),
            _ => None,
        })
        .max()
        .map_or(1, |i| i.saturating_add(1))
}
