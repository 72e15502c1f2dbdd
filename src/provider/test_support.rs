//! What the normalizers' unit tests share: a whole body decoded, and the text, reasoning,
//! finish-step and error read back from the deltas.

use crate::error::ModelError;
use crate::message::{FinishReason, MessageDelta, Usage};
use crate::provider::sse::{SseNormalizer, SsePipeline};

/// The deltas of a whole SSE `body` read by `normalizer`.
pub(crate) fn decode<N: SseNormalizer>(normalizer: N, body: &str) -> Vec<MessageDelta> {
    let mut pipe = SsePipeline::new(normalizer);
    let mut out = pipe.feed(body.as_bytes());
    out.extend(pipe.finish());
    out
}

/// The text of all text deltas.
pub(crate) fn text_of(deltas: &[MessageDelta]) -> String {
    deltas
        .iter()
        .filter_map(|d| match d {
            MessageDelta::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The text of all reasoning deltas.
pub(crate) fn reasoning_of(deltas: &[MessageDelta]) -> String {
    deltas
        .iter()
        .filter_map(|d| match d {
            MessageDelta::ReasoningDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The id, name and arguments of every tool call.
pub(crate) fn calls_of(deltas: &[MessageDelta]) -> Vec<(&str, &str, &str)> {
    deltas
        .iter()
        .filter_map(|d| match d {
            MessageDelta::ToolCall {
                id,
                name,
                arguments,
            } => Some((id.as_str(), name.as_str(), arguments.as_str())),
            _ => None,
        })
        .collect()
}

/// The first finish-step's reason, raw reason and usage.
pub(crate) fn finish_of(
    deltas: &[MessageDelta],
) -> (Option<FinishReason>, Option<String>, Option<Usage>) {
    deltas
        .iter()
        .find_map(|d| match d {
            MessageDelta::FinishStep {
                finish_reason,
                raw_finish_reason,
                usage,
            } => Some((*finish_reason, raw_finish_reason.clone(), *usage)),
            _ => None,
        })
        .expect("a finish-step")
}

/// The error the deltas end with.
pub(crate) fn error_of(deltas: &[MessageDelta]) -> &ModelError {
    match deltas.last() {
        Some(MessageDelta::Error { error }) => error,
        other => panic!("expected an error last, got {other:?}"),
    }
}
