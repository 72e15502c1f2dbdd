//! Compaction strategies (R-OUT-4, R-OUT-6) as [`Compactor`]s over the core's one grouping and
//! pinning ([`groups`], [`pinned`]): [`Truncate`] (in
//! `runtime::ports`), [`SlidingWindow`] and [`LlmSummary`].
//!
//! Every strategy works on *groups*: an assistant message together with the tool results that
//! follow it is one unit, so a tool call is never separated from its result. Pinned groups are
//! always kept: system messages, the first user message (the original goal) and the latest user
//! message (the task frontier), and the most recent group (the step the model continues from).
//! A strategy that cannot bring the context under budget fails with a clear error, which fails
//! the run instead of looping. After a provider's context overflow the machine asks for a
//! budget below what was sent (but not below the pinned messages while anything else is
//! left), so a strategy always has something to drop until only pins remain.

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;

pub use crate::context::{cannot_fit, collect, fits, groups, pinned};
pub use crate::context::{SlidingWindow, SUMMARY_PREFIX};
use crate::message::{Message, MessageDelta};
use crate::model::{Model, ModelRequest};
use crate::runtime::Compactor;

pub use crate::runtime::Truncate;

#[async_trait]
impl Compactor for SlidingWindow {
    async fn compact(
        &self,
        messages: &[Message],
        budget_tokens: Option<u64>,
        max_messages: Option<usize>,
    ) -> Result<(Vec<Message>, usize), String> {
        self.apply(messages, budget_tokens, max_messages)
    }
}

/// The instructions of the summary call.
pub const SUMMARY_PROMPT: &str = "Summarize the conversation below for your own later use. Keep \
every fact, decision, file name, number and open question that the task still needs; drop \
chatter. Answer with the summary only.";

/// LLM summary: one extra model call through the [`Model`] port summarizes the older,
/// unpinned groups; the summary (one user message after the pinned goal) replaces them, the
/// most recent `keep_recent` groups stay verbatim. The machine persists the result as a
/// compaction marker: earlier entries stay in the store but leave the context.
pub struct LlmSummary {
    /// The model (usually the agent's own, shared as `Arc`).
    pub model: Arc<dyn Model>,
    /// The model name put in the request (the registry key).
    pub model_name: String,
    /// Recent groups kept verbatim.
    pub keep_recent: usize,
    /// The summary instructions.
    pub prompt: String,
}

impl std::fmt::Debug for LlmSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmSummary")
            .field("model", &self.model_name)
            .field("keep_recent", &self.keep_recent)
            .finish()
    }
}

impl LlmSummary {
    /// A summary compactor over `model`, keeping the 2 most recent groups.
    pub fn new(model: Arc<dyn Model>) -> Self {
        let model_name = model.name();
        LlmSummary {
            model,
            model_name,
            keep_recent: 2,
            prompt: SUMMARY_PROMPT.into(),
        }
    }

    async fn summarize(&self, transcript: String) -> Result<String, String> {
        let request = ModelRequest {
            run_id: "compaction".into(),
            model_call_index: 0,
            attempt: 1,
            session_turn: 0,
            model: self.model_name.clone(),
            system: Some(self.prompt.clone()),
            messages: vec![Message::user(transcript)].into(),
            tools: Default::default(),
            params: Default::default(),
        };
        let mut stream = self
            .model
            .stream(request)
            .await
            .map_err(|e| format!("summary call failed: {}", e.message))?;
        let mut text = String::new();
        while let Some(item) = stream.next().await {
            match item.map_err(|e| format!("summary call failed: {}", e.message))? {
                MessageDelta::TextDelta { text: t } => text.push_str(&t),
                MessageDelta::Finish => break,
                MessageDelta::Error { error } => {
                    return Err(format!("summary call failed: {}", error.message))
                }
                _ => {}
            }
        }
        if text.trim().is_empty() {
            return Err("summary call returned no text".into());
        }
        Ok(text)
    }
}

/// Renders messages as plain text for the summary request.
pub fn render(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        let line = match m {
            Message::System { content } => format!("system: {content}"),
            user @ Message::User { .. } => {
                format!("user: {}", user.user_text().unwrap_or_default())
            }
            Message::Assistant(a) => {
                let calls: Vec<String> = a
                    .tool_calls
                    .iter()
                    .map(|c| format!("{}({})", c.name, c.arguments))
                    .collect();
                if calls.is_empty() {
                    format!("assistant: {}", a.text)
                } else {
                    format!("assistant: {} [calls: {}]", a.text, calls.join(", "))
                }
            }
            Message::Tool(r) => format!("tool {} ({:?}): {}", r.name, r.status, r.content),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[async_trait]
impl Compactor for LlmSummary {
    async fn compact(
        &self,
        messages: &[Message],
        budget_tokens: Option<u64>,
        max_messages: Option<usize>,
    ) -> Result<(Vec<Message>, usize), String> {
        let groups = groups(messages);
        let pinned = pinned(messages, &groups);
        let n = groups.len();
        let recent = |gi: usize| gi + self.keep_recent >= n;
        let old: Vec<usize> = (0..n).filter(|&gi| !pinned[gi] && !recent(gi)).collect();
        if old.is_empty() {
            return Err(cannot_fit(messages));
        }
        let old_messages: Vec<Message> = old
            .iter()
            .flat_map(|&gi| groups[gi].iter().map(|&i| messages[i].clone()))
            .collect();
        let summary = self.summarize(render(&old_messages)).await?;
        // The summary takes the place of the first summarized group.
        let mut kept = Vec::new();
        let mut placed = false;
        for (gi, g) in groups.iter().enumerate() {
            if old.contains(&gi) {
                if !placed {
                    kept.push(Message::user(format!("{SUMMARY_PREFIX}{summary}")));
                    placed = true;
                }
                continue;
            }
            kept.extend(g.iter().map(|&i| messages[i].clone()));
        }
        if !fits(&kept, budget_tokens, max_messages) {
            return Err(cannot_fit(&kept));
        }
        let removed = old_messages.len();
        Ok((kept, removed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AssistantMessage, ToolCall, ToolResult, ToolStatus};

    fn call(id: &str) -> Message {
        Message::Assistant(AssistantMessage {
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "t".into(),
                arguments: serde_json::json!({}),
                invalid_arguments: None,
            }],
            ..Default::default()
        })
    }

    fn result(id: &str) -> Message {
        Message::Tool(ToolResult {
            tool_call_id: id.into(),
            name: "t".into(),
            content: "x".repeat(40),
            status: ToolStatus::Completed,
        })
    }

    #[test]
    fn groups_keep_results_with_their_call() {
        let m = vec![
            Message::user("goal"),
            call("a"),
            result("a"),
            call("b"),
            result("b"),
        ];
        assert_eq!(groups(&m), vec![vec![0], vec![1, 2], vec![3, 4]]);
    }
}
