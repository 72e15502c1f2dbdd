//! Rebuilding a run's starting context from stored session entries.

use crate::message::Message;
use crate::store::Entry;

/// The model context a session's entries describe, and how many assistant turns it committed.
/// A compaction marker replaces everything before it; tool results follow their assistant
/// message in the model's call order (R-IN-4), whatever order they were persisted in.
pub fn session_context(entries: &[Entry]) -> (Vec<Message>, u32) {
    let mut messages: Vec<Message> = Vec::new();
    let mut turns = 0u32;
    for e in entries {
        match e {
            Entry::UserInput { message, .. } => messages.push(message.clone()),
            Entry::Assistant { message, .. } => {
                turns += 1;
                messages.push(Message::Assistant(message.clone()));
            }
            Entry::ToolResult { result, .. } => {
                // Insert in call order among the results that follow the matching assistant message.
                let owner = messages.iter().rposition(|m| match m {
                    Message::Assistant(a) => {
                        a.tool_calls.iter().any(|c| c.id == result.tool_call_id)
                    }
                    _ => false,
                });
                let Some(owner) = owner else { continue };
                let Message::Assistant(a) = &messages[owner] else {
                    continue;
                };
                let order: Vec<&str> = a.tool_calls.iter().map(|c| c.id.as_str()).collect();
                let rank = |id: &str| order.iter().position(|x| *x == id).unwrap_or(usize::MAX);
                let my = rank(&result.tool_call_id);
                let mut at = owner + 1;
                while at < messages.len() {
                    match &messages[at] {
                        Message::Tool(r) if rank(&r.tool_call_id) < my => at += 1,
                        _ => break,
                    }
                }
                if messages[owner + 1..]
                    .iter()
                    .any(|m| matches!(m, Message::Tool(r) if r.tool_call_id == result.tool_call_id))
                {
                    continue;
                }
                messages.insert(at, Message::Tool(result.clone()));
            }
            Entry::Compaction { messages: m, .. } => messages = m.clone(),
            Entry::Metadata { .. } | Entry::ToolStarted { .. } | Entry::RunEnd { .. } => {}
        }
    }
    (messages, turns)
}
