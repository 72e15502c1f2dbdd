//! Accumulating stream deltas into an assistant message (R-STR-2, R-STR-4).

use crate::message::{AssistantMessage, FinishReason, MessageDelta, ToolCall};

/// The partial message of the current attempt. Tool calls are taken only from complete
/// `tool-call` deltas, never from raw fragments (R-STR-4); fragments are kept for snapshots.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Accumulator {
    /// The message so far.
    pub message: AssistantMessage,
    /// Raw argument fragments of calls still streaming: (id, name, text).
    pub partial_calls: Vec<(String, String, String)>,
    /// Whether the provider reported `finish-step`.
    pub finished_step: bool,
}

impl Accumulator {
    /// Applies one delta.
    pub fn apply(&mut self, delta: &MessageDelta) {
        let m = &mut self.message;
        match delta {
            MessageDelta::TextDelta { text } => m.text.push_str(text),
            MessageDelta::ReasoningDelta { text } => m.reasoning.push_str(text),
            MessageDelta::ReasoningSignature { signature } => m
                .reasoning_signature
                .get_or_insert_with(String::new)
                .push_str(signature),
            MessageDelta::RedactedReasoning { data } => m.redacted_reasoning.push(data.clone()),
            MessageDelta::Refusal { text } => {
                m.refusal.get_or_insert_with(String::new).push_str(text)
            }
            MessageDelta::ToolInputStart { id, name } => {
                self.partial_calls
                    .push((id.clone(), name.clone(), String::new()))
            }
            MessageDelta::ToolInputDelta { id, delta } => {
                if let Some(c) = self.partial_calls.iter_mut().rev().find(|c| &c.0 == id) {
                    c.2.push_str(delta);
                }
            }
            MessageDelta::ToolCall {
                id,
                name,
                arguments,
            } => {
                self.partial_calls.retain(|c| &c.0 != id);
                m.tool_calls
                    .push(ToolCall::from_raw(id.clone(), name.clone(), arguments));
            }
            MessageDelta::FinishStep {
                finish_reason,
                usage,
                ..
            } => {
                self.finished_step = true;
                if finish_reason.is_some() {
                    m.finish_reason = *finish_reason;
                }
                if usage.is_some() {
                    m.usage = *usage;
                }
            }
            MessageDelta::StartStep
            | MessageDelta::TextStart
            | MessageDelta::TextEnd
            | MessageDelta::ReasoningStart
            | MessageDelta::ReasoningEnd
            | MessageDelta::ToolInputEnd { .. }
            | MessageDelta::Finish
            | MessageDelta::Error { .. } => {}
        }
    }

    /// The message to commit. When the turn was cut by the output limit, tool calls are marked
    /// invalid so they are never executed (R-STR-6).
    pub fn finish(&self) -> AssistantMessage {
        let mut m = self.message.clone();
        if m.finish_reason == Some(FinishReason::Length) {
            for c in &mut m.tool_calls {
                if c.invalid_arguments.is_none() {
                    c.invalid_arguments = Some(
                        "tool arguments may be truncated (finish_reason length); not executed"
                            .into(),
                    );
                }
            }
        }
        m
    }
}
