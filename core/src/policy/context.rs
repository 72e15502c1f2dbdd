//! The context manager's pure parts: token estimates and compaction by truncation that never
//! splits a tool call from its result (R-OUT-6, R-CTX).

use crate::message::Message;

/// A rough token estimate: characters / 4, plus a little per message. A user message's image
/// counts [`IMAGE_TOKENS`] (whatever its size: providers scale images down), a file its
/// decoded bytes / 4, a URL its length.
pub fn estimate_tokens(messages: &[Message]) -> u64 {
    messages.iter().map(message_tokens).sum()
}

fn message_tokens(m: &Message) -> u64 {
    let chars = match m {
        Message::System { content } => content.len(),
        Message::User { content, parts } => {
            content.len() + parts.iter().map(part_chars).sum::<usize>()
        }
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

/// What one image counts in [`estimate_tokens`]: about what Anthropic charges for an image at
/// the largest size it keeps (1092 x 1092 px; its documented cost is width x height / 750).
pub const IMAGE_TOKENS: u64 = 1_600;

/// Characters a content part counts as (four per token).
fn part_chars(p: &crate::message::ContentPart) -> usize {
    use crate::message::{base64_decoded_len, ContentPart, MediaSource};
    let tokens_as_chars = (IMAGE_TOKENS * 4) as usize;
    match p {
        ContentPart::Text { text } => text.len(),
        ContentPart::Image { .. } => tokens_as_chars,
        ContentPart::File {
            source: MediaSource::Base64 { data, .. },
            ..
        } => base64_decoded_len(data),
        ContentPart::File {
            source: MediaSource::Url { url },
            ..
        } => url.len(),
    }
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

/// Compaction by truncation: keeps the pinned groups ([`pinned`]: system messages, the first
/// and the latest user message, the most recent group) and drops the oldest other groups (an
/// assistant message together with its tool results) until the context fits `budget_tokens`
/// and `max_messages`. Fails instead of looping when it cannot fit (R-OUT-6). Returns the new
/// context and how many messages were removed. The same grouping and pins serve every
/// strategy ([`SlidingWindow`] and the runtime's LLM summary).
pub fn truncate(
    messages: &[Message],
    budget_tokens: Option<u64>,
    max_messages: Option<usize>,
) -> Result<(Vec<Message>, usize), CompactionError> {
    let groups = groups(messages);
    let pinned = pinned(messages, &groups);
    let mut keep = vec![true; groups.len()];
    let mut removed = 0;
    let mut kept = collect(messages, &groups, &keep);
    for gi in 0..groups.len() {
        if fits(&kept, budget_tokens, max_messages) {
            break;
        }
        if pinned[gi] {
            continue;
        }
        keep[gi] = false;
        removed += groups[gi].len();
        kept = collect(messages, &groups, &keep);
    }
    if !fits(&kept, budget_tokens, max_messages) || removed == 0 {
        return Err(CompactionError::CannotFit {
            messages: kept.len(),
            tokens: estimate_tokens(&kept),
        });
    }
    Ok((kept, removed))
}

/// Context windows (input plus output tokens) of well-known models, by name prefix: the
/// longest prefix that starts the model's name wins ([`known_context_window`]), so a more
/// specific name (`gpt-4.5-preview`, `o1-preview`) overrides its family's (`gpt-4`, `o1`). A
/// run whose [`RunConfig`](crate::react::RunConfig) names no `context_window` (and no
/// `context_budget_tokens`) takes its budget from here: it starts compacting at
/// `compact_ratio` of it (R-CTX-3), and a context that cannot be compacted but still fits is
/// sent. Names not listed (local models, proxies' aliases) have no budget unless configured; a
/// provider's overflow still shrinks the context.
///
/// Where the figures come from: each provider's model reference, as it lists the model's
/// context window — OpenAI's model pages (`platform.openai.com/docs/models/<name>`),
/// Anthropic's models overview (`docs.anthropic.com/en/docs/about-claude/models`) and
/// Google's Gemini model list (`ai.google.dev/gemini-api/docs/models`). A dated snapshot of a
/// name (`gpt-4-0613`, `claude-3-5-haiku-20241022`) has its family's window unless listed.
/// A provider that raises a window (or a beta header that does) is not seen here: configure
/// `context_window` for it.
pub const KNOWN_CONTEXT_WINDOWS: &[(&str, u64)] = &[
    // OpenAI
    ("gpt-3.5-turbo", 16_385),
    ("gpt-3.5-turbo-instruct", 4_096),
    ("gpt-4", 8_192),
    ("gpt-4-32k", 32_768),
    ("gpt-4-turbo", 128_000),
    ("gpt-4-1106", 128_000),
    ("gpt-4-0125", 128_000),
    ("gpt-4-vision", 128_000),
    ("gpt-4o", 128_000),
    ("chatgpt-4o", 128_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4.5", 128_000),
    ("gpt-5", 400_000),
    ("gpt-5-chat", 128_000),
    ("gpt-oss", 131_072),
    ("o1", 200_000),
    ("o1-preview", 128_000),
    ("o1-mini", 128_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("codex-mini", 200_000),
    // Anthropic
    ("claude-", 200_000),
    ("claude-2.0", 100_000),
    ("claude-instant", 100_000),
    // Google
    ("gemini-1.5-pro", 2_097_152),
    ("gemini-1.5-flash", 1_048_576),
    ("gemini-2", 1_048_576),
];

/// The context window of `model` from [`KNOWN_CONTEXT_WINDOWS`] (case-insensitive; a
/// provider or router prefix such as `openai:` or `openai/` is skipped), or `None`.
///
/// ```
/// use agentloop_core::context::known_context_window;
/// assert_eq!(known_context_window("openai:gpt-4o-mini"), Some(128_000));
/// assert_eq!(known_context_window("anthropic/claude-sonnet-4-5"), Some(200_000));
/// assert_eq!(known_context_window("gpt-4-0613"), Some(8_192));
/// assert_eq!(known_context_window("llama3.2"), None);
/// ```
pub fn known_context_window(model: &str) -> Option<u64> {
    let name = model.rsplit([':', '/']).next().unwrap_or(model);
    let name = name.to_ascii_lowercase();
    KNOWN_CONTEXT_WINDOWS
        .iter()
        .filter(|(prefix, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|&(_, window)| window)
}

/// The two sizes a provider's context-overflow message names, as `(limit, sent)` tokens:
/// OpenAI's "maximum context length is 8192 tokens. However, your messages resulted in 9000
/// tokens", Anthropic's "prompt is too long: 208310 tokens > 200000 maximum", vLLM's
/// "... is 4096 tokens. However, you requested 5000 tokens". The first two numbers followed
/// by `token` or `maximum` count; `None` unless one is smaller than the other.
pub fn overflow_figures(message: &str) -> Option<(u64, u64)> {
    let lower = message.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() && found.len() < 2 {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b',') {
            i += 1;
        }
        let digits: String = lower[start..i]
            .chars()
            .filter(char::is_ascii_digit)
            .collect();
        let rest = lower[i..].trim_start();
        if rest.starts_with("token") || rest.starts_with("maximum") {
            if let Ok(n) = digits.parse::<u64>() {
                found.push(n);
            }
        }
    }
    match found[..] {
        [a, b] if a != b && a.min(b) > 0 => Some((a.min(b), a.max(b))),
        _ => None,
    }
}

/// The token budget of the compaction that answers a provider's context overflow (R-OUT-6):
/// below what was sent (`sent_tokens`, this crate's estimate of the refused context), so the
/// oldest whole groups go even when no budget is configured. When the provider's message
/// names its limit and the request's size ([`overflow_figures`]), the context shrinks by that
/// ratio with a tenth to spare; otherwise to three quarters. Each overflow shrinks the
/// context again, until only the pinned messages are left and compaction fails.
///
/// ```
/// use agentloop_core::context::overflow_budget;
/// assert_eq!(overflow_budget(1000, "request too large"), 750);
/// assert_eq!(overflow_budget(1000, "prompt is too long: 2000 tokens > 1000 maximum"), 450);
/// ```
pub fn overflow_budget(sent_tokens: u64, message: &str) -> u64 {
    match overflow_figures(message) {
        Some((limit, sent)) => {
            let scaled = u128::from(sent_tokens) * u128::from(limit) * 9 / (u128::from(sent) * 10);
            u64::try_from(scaled).unwrap_or(u64::MAX)
        }
        None => sent_tokens / 4 * 3 + sent_tokens % 4 * 3 / 4,
    }
}

/// Tokens of the context that compaction cannot go below: the pinned groups ([`pinned`])
/// alone.
pub fn pinned_tokens(messages: &[Message]) -> u64 {
    let groups = groups(messages);
    let keep = pinned(messages, &groups);
    estimate_tokens(&collect(messages, &groups, &keep))
}

/// The prefix of the message that replaces summarized entries (an LLM summary).
pub const SUMMARY_PREFIX: &str = "[Summary of the earlier conversation]\n";

/// Messages grouped so tool results stay with their call; each group is a list of indices.
pub fn groups(messages: &[Message]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match (m, groups.last_mut()) {
            (Message::Tool(_), Some(g)) => g.push(i),
            _ => groups.push(vec![i]),
        }
    }
    groups
}

/// Which groups must stay: system prompt, first and latest user message (earlier summaries
/// excluded), the most recent group.
pub fn pinned(messages: &[Message], groups: &[Vec<usize>]) -> Vec<bool> {
    // An earlier summary is a user message too, but not a pin: a later summary folds it in.
    let is_user = |m: &Message| matches!(m, Message::User { content, .. } if !content.starts_with(SUMMARY_PREFIX));
    let first_user = messages.iter().position(is_user);
    let last_user = messages.iter().rposition(is_user);
    let last = groups.len().saturating_sub(1);
    groups
        .iter()
        .enumerate()
        .map(|(gi, g)| {
            gi == last
                || g.iter().any(|&i| {
                    matches!(messages[i], Message::System { .. })
                        || Some(i) == first_user
                        || Some(i) == last_user
                })
        })
        .collect()
}

/// Whether `kept` is within the token budget and the message cap.
pub fn fits(kept: &[Message], budget_tokens: Option<u64>, max_messages: Option<usize>) -> bool {
    budget_tokens.is_none_or(|b| estimate_tokens(kept) <= b)
        && max_messages.is_none_or(|n| kept.len() <= n)
}

/// The messages of the groups marked `keep`, in order.
pub fn collect(messages: &[Message], groups: &[Vec<usize>], keep: &[bool]) -> Vec<Message> {
    groups
        .iter()
        .zip(keep)
        .filter(|(_, k)| **k)
        .flat_map(|(g, _)| g.iter().map(|&i| messages[i].clone()))
        .collect()
}

/// The error text when even the pinned groups do not fit.
pub fn cannot_fit(kept: &[Message]) -> String {
    CompactionError::CannotFit {
        messages: kept.len(),
        tokens: estimate_tokens(kept),
    }
    .to_string()
}

/// Keeps the pinned groups and the most recent `window` groups; drops everything older. If
/// that is still over budget, the window shrinks until it fits; if even the pinned groups
/// alone do not fit, compaction fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow {
    /// Recent groups to keep (an assistant turn with its tool results is one group).
    pub window: usize,
}

impl SlidingWindow {
    /// The pure computation behind the compactor.
    pub fn apply(
        &self,
        messages: &[Message],
        budget_tokens: Option<u64>,
        max_messages: Option<usize>,
    ) -> Result<(Vec<Message>, usize), String> {
        let groups = groups(messages);
        let pinned = pinned(messages, &groups);
        let n = groups.len();
        let mut window = self.window.min(n);
        loop {
            let keep: Vec<bool> = (0..n).map(|gi| pinned[gi] || gi + window >= n).collect();
            let kept = collect(messages, &groups, &keep);
            if fits(&kept, budget_tokens, max_messages) {
                let removed = messages.len() - kept.len();
                if removed == 0 {
                    return Err(cannot_fit(&kept));
                }
                return Ok((kept, removed));
            }
            if window == 0 {
                return Err(cannot_fit(&kept));
            }
            window -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AssistantMessage, ToolCall, ToolResult, ToolStatus};

    fn turn(i: usize) -> Vec<Message> {
        let id = format!("c{i}");
        let mut a = AssistantMessage::default();
        a.tool_calls.push(ToolCall::from_raw(
            &id,
            "calculator",
            "{\"expression\":\"1+1\"}",
        ));
        vec![
            Message::Assistant(a),
            Message::Tool(ToolResult {
                tool_call_id: id,
                name: "calculator".into(),
                content: "2".repeat(200),
                status: ToolStatus::Completed,
            }),
        ]
    }

    #[test]
    fn every_strategy_pins_the_same_messages() {
        // An earlier summary is a user message but not a pin: truncation (like the sliding
        // window and the LLM summary) may drop it; the goal and the latest user message stay.
        let mut m = vec![
            Message::System {
                content: "sys".into(),
            },
            Message::user("the goal"),
            Message::user(format!("{SUMMARY_PREFIX}old summary")),
        ];
        for i in 0..6 {
            m.extend(turn(i));
        }
        m.push(Message::user("latest"));
        m.extend(turn(9));
        let (kept, removed) = truncate(&m, Some(150), None).expect("fits");
        assert!(removed > 0);
        let texts: Vec<String> = kept
            .iter()
            .filter_map(|x| match x {
                Message::User { content, .. } | Message::System { content } => {
                    Some(content.clone())
                }
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["sys", "the goal", "latest"]);
        // Tool results never lose their call.
        let g = groups(&kept);
        assert!(g.iter().all(|g| !matches!(kept[g[0]], Message::Tool(_))));
        let window = SlidingWindow { window: 1 }
            .apply(&m, Some(150), None)
            .expect("fits");
        assert_eq!(window.0, kept, "the two strategies agree on what stays");
    }
}
