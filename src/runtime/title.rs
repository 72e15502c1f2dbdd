//! The title model's call (a session's title, made once on its first run): what the runtime does for the
//! machine's `generate_title` effect. One request to the small model, its text collected (at
//! most [`MAX_TITLE_RESPONSE_BYTES`]), cleaned to one line of at most [`MAX_TITLE_CHARS`]
//! characters. Any failure is `None`: a title is never worth failing a run for.

use std::sync::Arc;

use futures::StreamExt;

use crate::message::{Message, MessageDelta};
use crate::model::{Model, ModelRequest};

/// The longest title kept, in characters.
pub(crate) const MAX_TITLE_CHARS: usize = 80;

/// The most text read from the title model, in bytes (then the stream is dropped).
pub(crate) const MAX_TITLE_RESPONSE_BYTES: usize = 4 * 1024;

/// What the title model is told.
const TITLE_SYSTEM: &str = "You write a short title for a conversation: at most eight words, \
                            no quotes, no trailing period. Answer with the title only.";

/// The request for a title of the conversation that starts with `text` (the first user
/// message, cut to 2,000 characters).
pub(crate) fn request(run_id: &str, model: &str, text: &str) -> ModelRequest {
    // Routed by `model` (`openai:gpt-4o-mini`: the client sends it without the prefix).
    one_shot(
        run_id,
        model,
        TITLE_SYSTEM,
        text.chars().take(2_000).collect(),
    )
}

/// A request outside the run's steps (a title, a compaction's summary) to `model`: the
/// instructions `system` and one user message of `text`.
pub(crate) fn one_shot(run_id: &str, model: &str, system: &str, text: String) -> ModelRequest {
    ModelRequest {
        run_id: run_id.to_string(),
        model_call_index: 0,
        attempt: 1,
        session_turn: 0,
        model: model.to_string(),
        system: Some(system.to_string()),
        messages: vec![Message::user(text)].into(),
        tools: Default::default(),
        params: Default::default(),
    }
}

/// Asks `model` and cleans its answer; `None` on any failure or an empty answer.
pub(crate) async fn ask(model: Arc<dyn Model>, request: ModelRequest) -> Option<String> {
    let mut stream = model.stream(request).await.ok()?;
    let mut text = String::new();
    while let Some(delta) = stream.next().await {
        match delta.ok()? {
            MessageDelta::TextDelta { text: t } => {
                text.push_str(&t);
                if text.len() > MAX_TITLE_RESPONSE_BYTES {
                    break;
                }
            }
            MessageDelta::Finish => break,
            MessageDelta::Error { .. } => return None,
            _ => {}
        }
    }
    clean(&text)
}

/// The first non-empty line, without markdown heading marks, quotes or a trailing period,
/// cut to [`MAX_TITLE_CHARS`].
fn clean(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = line.trim_start_matches('#').trim();
    let line = line
        .trim_matches(|c| matches!(c, '"' | '\'' | '`' | '*'))
        .trim_end_matches('.')
        .trim();
    let title: String = line.chars().take(MAX_TITLE_CHARS).collect();
    (!title.is_empty()).then_some(title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_004_titles_are_one_clean_bounded_line() {
        assert_eq!(
            clean("\n  ## \"Adding numbers.\"\nmore").as_deref(),
            Some("Adding numbers")
        );
        assert_eq!(clean("   \n\n"), None);
        assert_eq!(clean("**Sum**").as_deref(), Some("Sum"));
        let long = "x".repeat(500);
        assert_eq!(
            clean(&long).map(|t| t.chars().count()),
            Some(MAX_TITLE_CHARS)
        );
        let r = request("r1", "openai:gpt-4o-mini", &"é".repeat(3_000));
        assert_eq!(r.model, "openai:gpt-4o-mini");
        assert_eq!(r.model_call_index, 0);
        assert!(r.tools.is_empty());
        match &r.messages[0] {
            Message::User { content, .. } => assert_eq!(content.chars().count(), 2_000),
            other => panic!("{other:?}"),
        }
    }
}
