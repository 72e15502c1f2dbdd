//! The context manager's pure parts: token estimates and compaction by truncation that never
//! splits a tool call from its result (R-OUT-6, R-CTX).

use crate::message::Message;

/// A rough token estimate: characters / 4, plus a little per message.
pub fn estimate_tokens(messages: &[Message]) -> u64 {
    messages.iter().map(message_tokens).sum()
}

fn message_tokens(m: &Message) -> u64 {
    let chars = match m {
        Message::System { content } | Message::User { content } => content.len(),
        Message::Assistant(a) => {
            a.text.len()
                + a.reasoning.len()
                + a.tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.to_string().len())
                    .sum::<usize>()
        }
        Message::Tool(r) => r.content.len() + r.name.len(),
    };
    (chars as u64).div_ceil(4) + 4
}

/// Why compaction failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactionError {
    /// Nothing can be removed without dropping pinned messages or splitting a tool pair.
    #[error("cannot compact below budget: {messages} messages / ~{tokens} tokens remain after removing everything removable")]
    CannotFit {
        /// Messages left.
        messages: usize,
        /// Estimated tokens left.
        tokens: u64,
    },
}

/// Compaction by truncation: keeps system messages, the first user message (the original goal)
/// and the most recent user message (the task frontier); drops the oldest other messages, in
/// whole groups (an assistant message together with its tool results), until the context fits
/// `budget_tokens` and `max_messages`. Fails instead of looping when it cannot fit (R-OUT-6).
/// Returns the new context and how many messages were removed.
pub fn truncate(
    messages: &[Message],
    budget_tokens: Option<u64>,
    max_messages: Option<usize>,
) -> Result<(Vec<Message>, usize), CompactionError> {
    // Group messages: an assistant message with the tool results that follow it is one unit.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match m {
            Message::Tool(_) if !groups.is_empty() => {
                if let Some(g) = groups.last_mut() {
                    g.push(i)
                }
            }
            _ => groups.push(vec![i]),
        }
    }
    let first_user = messages
        .iter()
        .position(|m| matches!(m, Message::User { .. }));
    let last_user = messages
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }));
    let pinned = |g: &Vec<usize>| {
        g.iter().any(|&i| {
            matches!(messages[i], Message::System { .. })
                || Some(i) == first_user
                || Some(i) == last_user
        })
    };
    let fits = |kept: &[Message]| {
        budget_tokens.is_none_or(|b| estimate_tokens(kept) <= b)
            && max_messages.is_none_or(|n| kept.len() <= n)
    };
    let mut keep = vec![true; groups.len()];
    // The most recent group stays: it is the step the model must continue from.
    let last = groups.len().saturating_sub(1);
    let mut removed = 0;
    let collect = |keep: &[bool]| -> Vec<Message> {
        groups
            .iter()
            .zip(keep)
            .filter(|(_, k)| **k)
            .flat_map(|(g, _)| g.iter().map(|&i| messages[i].clone()))
            .collect()
    };
    let mut kept = collect(&keep);
    for gi in 0..groups.len() {
        if fits(&kept) {
            break;
        }
        if gi == last || pinned(&groups[gi]) {
            continue;
        }
        keep[gi] = false;
        removed += groups[gi].len();
        kept = collect(&keep);
    }
    if !fits(&kept) || removed == 0 {
        return Err(CompactionError::CannotFit {
            messages: kept.len(),
            tokens: estimate_tokens(&kept),
        });
    }
    Ok((kept, removed))
}
