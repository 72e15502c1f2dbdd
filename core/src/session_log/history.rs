//! The model context reconstructed from session entries (start and resume of a session).

use std::collections::HashSet;

use crate::entry::{Entry, EntryKey};
use crate::message::Message;

/// The conversation as the model sees it: user inputs, assistant turns and tool results
/// (each placed after its assistant message in the model's call order, R-IN-4, whatever order
/// they finished and were persisted in). A [`Entry::Compaction`] replaces everything before it
/// with its `messages`. Metadata, start markers, run ends and repair markers carry no message.
///
/// The context keeps the pairing invariant whatever the log holds (R-IDEM-7): an entry whose
/// idempotency key already appeared (which a store never writes, but a hand-edited file may
/// hold) is skipped, the first one wins; a tool call reusing an earlier call's id is left out
/// of its message; and a tool result whose call is not in the context — an orphan, whose call
/// no earlier turn made, or one whose call a compaction removed — is left out.
/// [`check`](fn@super::check) reports the broken entries and
/// [`repair`](fn@super::repair) records each as dropped.
pub fn history(entries: &[Entry]) -> Vec<Message> {
    let mut seen: HashSet<EntryKey> = HashSet::new();
    let mut call_ids: HashSet<&str> = HashSet::new();
    let mut messages = Vec::new();
    for entry in entries {
        match entry {
            Entry::UserInput { message, .. } => messages.push(message.clone()),
            Entry::Assistant { message, .. } => {
                if entry.idempotency_key().is_some_and(|key| !seen.insert(key)) {
                    continue;
                }
                let fresh: Vec<bool> = message
                    .tool_calls
                    .iter()
                    .map(|c| call_ids.insert(c.id.as_str()))
                    .collect();
                let mut message = message.clone();
                if fresh.contains(&false) {
                    let mut keep = fresh.into_iter();
                    message.tool_calls.retain(|_| keep.next().unwrap_or(true));
                }
                messages.push(Message::Assistant(message));
            }
            Entry::ToolResult { result, .. } => {
                if !call_ids.contains(result.tool_call_id.as_str()) {
                    continue; // an orphan: it claims no key, a later real call may answer
                }
                if entry.idempotency_key().is_some_and(|key| !seen.insert(key)) {
                    continue;
                }
                insert_result(&mut messages, result);
            }
            Entry::Compaction {
                messages: replacement,
                ..
            } => messages = replacement.clone(),
            Entry::Metadata { .. }
            | Entry::ToolStarted { .. }
            | Entry::RunEnd { .. }
            | Entry::Title { .. }
            | Entry::Repair { .. } => {}
        }
    }
    messages
}

/// Places a tool result after its assistant message, among that message's results, in call
/// order. A result whose call is not in the context is left out.
fn insert_result(messages: &mut Vec<Message>, result: &crate::message::ToolResult) {
    let owner = messages.iter().rposition(|m| match m {
        Message::Assistant(a) => a.tool_calls.iter().any(|c| c.id == result.tool_call_id),
        _ => false,
    });
    let (Some(owner), Some(Message::Assistant(a))) = (owner, owner.and_then(|o| messages.get(o)))
    else {
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

/// The `(run_id, model_call_index)` of every assistant turn, in entry order.
fn turns(entries: &[Entry]) -> impl Iterator<Item = (&str, u32)> {
    entries.iter().filter_map(|e| match e {
        Entry::Assistant {
            run_id,
            model_call_index,
            ..
        } => Some((run_id.as_str(), *model_call_index)),
        _ => None,
    })
}

/// The number of committed assistant turns (distinct `(run_id, model_call_index)` keys).
pub fn committed_turns(entries: &[Entry]) -> u32 {
    let turns: HashSet<(&str, u32)> = turns(entries).collect();
    u32::try_from(turns.len()).unwrap_or(u32::MAX)
}

/// The `model_call_index` the next step of `run_id` uses: one past the highest committed
/// step of that run, or 1 (R-IDEM-5: an uncommitted step is re-requested with this index).
pub fn next_model_call_index(entries: &[Entry], run_id: &str) -> u32 {
    turns(entries)
        .filter_map(|(r, i)| (r == run_id).then_some(i))
        .max()
        .map_or(1, |i| i.saturating_add(1))
}
