//! Assembling stream deltas into the assistant message (R-STR-2, R-STR-4, R-STR-6). One
//! implementation serves the machine (what is committed and what the partial-message snapshot
//! shows) and `agentloop decode` (what is reported), so they cannot disagree; it also applies
//! the inline-tag option to the text.

use serde_json::Value;

use super::call_ids::CallIds;
use crate::error::ModelError;
use crate::inline_tags::{InlinePiece, InlineTagFilter, InlineTags};
use crate::message::{AssistantMessage, FinishReason, MessageDelta, ToolCall};

/// Assembles [`MessageDelta`]s into the message the runtime commits (R-STR-2, R-STR-4,
/// R-STR-6): tool calls only from `tool-call` deltas; arguments parsed with
/// [`ToolCall::from_raw`]; when the turn ended with `length`, every tool call is marked
/// invalid, because the model was cut off and its arguments (or its plan) may be incomplete.
/// Inline `<status>`/`<title>` tags in the text are handled as its [`InlineTags`] mode says
/// ([`new`](Self::new): [`InlineTags::Strip`], as the machine by default): the
/// message holds the visible text, never the text still held back.
#[derive(Clone, Debug, Default)]
pub struct MessageAssembler {
    pub(crate) message: AssistantMessage,
    pub(crate) raw_calls: Vec<(String, String, String)>,
    pub(crate) raw_finish_reason: Option<String>,
    pub(crate) finished: bool,
    pub(crate) error: Option<ModelError>,
    pub(crate) any: bool,
    /// Deltas that changed the message so far (see [`MessageAssembler::revision`]).
    pub(crate) revision: u64,
    /// What to do with inline tags in the text.
    pub(crate) inline_tags: InlineTags,
    /// The inline-tag filter of the current text block.
    pub(crate) tags: InlineTagFilter,
    /// The ids the message's tool calls got so far (unique within the message).
    pub(crate) call_ids: CallIds,
    /// Calls whose provider id an earlier call had: (provided, derived).
    pub(crate) derived_ids: Vec<(String, String)>,
    /// The provider's id of each call, in order.
    pub(crate) provided_ids: Vec<String>,
}

impl MessageAssembler {
    /// An empty assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty assembler that handles inline tags as `mode` says.
    pub fn with_inline_tags(mode: InlineTags) -> Self {
        MessageAssembler {
            inline_tags: mode,
            ..Self::default()
        }
    }

    /// An empty assembler that handles inline tags as `mode` says and takes the call ids
    /// `earlier` (the run's context) as used ([`CallIds::after`]).
    pub fn with_earlier_call_ids(
        mode: InlineTags,
        earlier: std::sync::Arc<std::collections::HashSet<String>>,
    ) -> Self {
        MessageAssembler {
            inline_tags: mode,
            call_ids: CallIds::after(earlier),
            ..Self::default()
        }
    }

    /// Applies one delta.
    pub fn push(&mut self, d: &MessageDelta) {
        let _ = self.push_observed(d);
    }

    /// Applies one delta and returns what observers see of its text, in order: for
    /// a `text-delta`, the visible text and the inline tags it closed (with
    /// [`InlineTags::Off`] or [`Keep`](InlineTags::Keep) the delta's text as it is, then any
    /// tags); for a `text-end` or `finish`, the text held back until then
    /// ([`end_text`](Self::end_text)); for other deltas nothing.
    pub fn push_observed(&mut self, d: &MessageDelta) -> Vec<InlinePiece> {
        self.any = true;
        if !matches!(
            d,
            MessageDelta::StartStep
                | MessageDelta::TextStart
                | MessageDelta::TextEnd
                | MessageDelta::ReasoningStart
                | MessageDelta::ReasoningEnd
                | MessageDelta::ToolInputStart { .. }
                | MessageDelta::ToolInputDelta { .. }
                | MessageDelta::ToolInputEnd { .. }
                | MessageDelta::Finish
                | MessageDelta::Error { .. }
        ) {
            self.revision += 1;
        }
        let m = &mut self.message;
        let mut observed = Vec::new();
        match d {
            MessageDelta::TextDelta { text } => match self.inline_tags {
                InlineTags::Strip if text.is_empty() => {
                    // As without the option: an empty delta is observed as it came.
                    observed.push(InlinePiece::Text(String::new()));
                }
                InlineTags::Strip => {
                    observed = self.tags.push(text);
                    for piece in &observed {
                        if let InlinePiece::Text(t) = piece {
                            m.text.push_str(t);
                        }
                    }
                }
                InlineTags::Keep | InlineTags::Off => {
                    m.text.push_str(text);
                    observed.push(InlinePiece::Text(text.clone()));
                    if self.inline_tags == InlineTags::Keep {
                        let tags = self.tags.push(text).into_iter();
                        observed.extend(tags.filter(|p| matches!(p, InlinePiece::Tag(..))));
                    }
                }
            },
            MessageDelta::ReasoningDelta { text } => m.reasoning.push_str(text),
            MessageDelta::ReasoningSignature { signature } => m
                .reasoning_signature
                .get_or_insert_with(String::new)
                .push_str(signature),
            MessageDelta::RedactedReasoning { data } => m.redacted_reasoning.push(data.clone()),
            MessageDelta::Refusal { text } => {
                m.refusal.get_or_insert_with(String::new).push_str(text)
            }
            MessageDelta::ToolCall {
                id,
                name,
                arguments,
            } => {
                let unique = self.call_ids.assign(id);
                if unique != *id {
                    self.derived_ids.push((id.clone(), unique.clone()));
                }
                self.provided_ids.push(id.clone());
                self.raw_calls
                    .push((unique, name.clone(), arguments.clone()))
            }
            MessageDelta::FinishStep {
                finish_reason,
                raw_finish_reason,
                usage,
            } => {
                m.finish_reason = *finish_reason;
                m.usage = *usage;
                self.raw_finish_reason.clone_from(raw_finish_reason);
            }
            MessageDelta::Finish => {
                self.finished = true;
                observed = released(self.end_text());
            }
            MessageDelta::TextEnd => observed = released(self.end_text()),
            MessageDelta::Error { error } => self.error = Some(error.clone()),
            MessageDelta::StartStep
            | MessageDelta::TextStart
            | MessageDelta::ReasoningStart
            | MessageDelta::ReasoningEnd
            | MessageDelta::ToolInputStart { .. }
            | MessageDelta::ToolInputDelta { .. }
            | MessageDelta::ToolInputEnd { .. } => {}
        }
        observed
    }

    /// The end of the text (a `text-end`, `finish`, or the commit): with
    /// [`InlineTags::Strip`], the text held back (after a `<` that might have opened a tag, or
    /// an unclosed tag) is released into the message and returned; else nothing is.
    pub fn end_text(&mut self) -> String {
        let rest = self.tags.finish();
        if self.inline_tags != InlineTags::Strip || rest.is_empty() {
            return String::new();
        }
        self.message.text.push_str(&rest);
        self.revision += 1;
        rest
    }

    /// Whether `finish` arrived without an error (the message may be committed).
    pub fn is_complete(&self) -> bool {
        self.finished && self.error.is_none()
    }

    /// The error delta, if one arrived.
    pub fn error(&self) -> Option<&ModelError> {
        self.error.as_ref()
    }

    /// The tool calls whose provider id an earlier call of the message already had, as
    /// (provided id, derived id), in call order ([`CallIds`]: the message carries the derived
    /// ids).
    pub fn derived_ids(&self) -> &[(String, String)] {
        &self.derived_ids
    }

    /// Each call's id as a reader of this message alone derives it ([`CallIds::new`]: the
    /// runtime's argument checks, `agentloop decode`), in call order; the message's calls
    /// have the ids this assembler derived, which also avoid the run's earlier ones.
    pub fn message_local_ids(&self) -> Vec<String> {
        let mut local = CallIds::new();
        self.provided_ids
            .iter()
            .map(|id| local.assign(id))
            .collect()
    }

    /// The provider's raw finish reason.
    pub fn raw_finish_reason(&self) -> Option<&str> {
        self.raw_finish_reason.as_deref()
    }

    /// The message so far, with tool calls built from the `tool-call` deltas.
    pub fn message(&self) -> AssistantMessage {
        let mut m = self.message.clone();
        let truncated = self.truncated();
        m.tool_calls = self
            .raw_calls
            .iter()
            .map(|(id, name, raw)| tool_call(id, name, raw, truncated))
            .collect();
        m
    }

    fn truncated(&self) -> bool {
        self.message.finish_reason == Some(FinishReason::Length)
    }

    /// How many deltas changed the message: two states of one assembler with the same
    /// revision have the same [`message`](Self::message). Deltas that change nothing the
    /// message shows (`text-start`, `tool-input-delta`, `finish`, ...) do not count; the end
    /// of the text counts when it releases held-back text.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Brings `snapshot`, a message this assembler returned earlier (from
    /// [`message`](Self::message) or this method), up to [`message`](Self::message), in time
    /// proportional to what arrived since: the message only grows while deltas arrive
    /// (text is appended, tool calls are added), so only the new part is copied and only the
    /// new tool calls are parsed. When the turn turned out truncated (every call is then marked
    /// invalid), or `snapshot` is not an earlier state of this message, it is rebuilt.
    pub fn update_snapshot(&self, snapshot: &mut AssistantMessage) {
        let m = &self.message;
        let truncated = self.truncated();
        let was_truncated = snapshot.finish_reason == Some(FinishReason::Length);
        let grown = truncated == was_truncated
            && snapshot.tool_calls.len() <= self.raw_calls.len()
            && snapshot.redacted_reasoning.len() <= m.redacted_reasoning.len()
            && append_rest(&mut snapshot.text, &m.text)
            && append_rest(&mut snapshot.reasoning, &m.reasoning)
            && append_rest_opt(&mut snapshot.reasoning_signature, &m.reasoning_signature)
            && append_rest_opt(&mut snapshot.refusal, &m.refusal);
        if !grown {
            *snapshot = self.message();
            return;
        }
        let known = snapshot.redacted_reasoning.len();
        snapshot
            .redacted_reasoning
            .extend_from_slice(&m.redacted_reasoning[known..]);
        let known = snapshot.tool_calls.len();
        snapshot.tool_calls.extend(
            self.raw_calls[known..]
                .iter()
                .map(|(id, name, raw)| tool_call(id, name, raw, truncated)),
        );
        snapshot.finish_reason = m.finish_reason;
        snapshot.usage = m.usage;
    }
}

/// The text [`MessageAssembler::end_text`] released, as observed pieces.
fn released(rest: String) -> Vec<InlinePiece> {
    if rest.is_empty() {
        Vec::new()
    } else {
        vec![InlinePiece::Text(rest)]
    }
}

/// One tool call of the message: parsed arguments, or marked invalid when the turn was cut
/// off by the output token limit.
fn tool_call(id: &str, name: &str, raw: &str, truncated: bool) -> ToolCall {
    let mut call = ToolCall::from_raw(id, name, raw);
    if truncated {
        call.arguments = Value::Null;
        call.invalid_arguments = Some(format!(
            "not executed: the response was cut off by the output token limit \
             (finish_reason length), so the arguments may be incomplete: {raw}"
        ));
    }
    call
}

/// Appends to `known` what `full` has beyond it; `false` when `known` is longer (it cannot be
/// an earlier state of `full`).
fn append_rest(known: &mut String, full: &str) -> bool {
    match full.get(known.len()..) {
        Some(rest) => {
            known.push_str(rest);
            true
        }
        None => false,
    }
}

fn append_rest_opt(known: &mut Option<String>, full: &Option<String>) -> bool {
    match (known.as_mut(), full) {
        (None, None) => true,
        (None, Some(f)) => {
            *known = Some(f.clone());
            true
        }
        (Some(k), Some(f)) => append_rest(k, f),
        (Some(_), None) => false,
    }
}

impl MessageAssembler {
    /// A snapshot of the message so far, for observers (R-STR-2).
    pub fn snapshot(&self) -> AssistantMessage {
        self.message()
    }

    /// Whether the message so far has tool calls.
    pub fn has_tool_calls(&self) -> bool {
        !self.raw_calls.is_empty()
    }

    /// Whether any delta arrived.
    pub fn received_any(&self) -> bool {
        self.any
    }

    /// The raw (unparsed) argument text of each tool call, in call order.
    pub fn raw_arguments(&self) -> impl Iterator<Item = &str> {
        self.raw_calls.iter().map(|(_, _, raw)| raw.as_str())
    }

    /// Whether no content (text, reasoning, refusal, tool calls) arrived.
    pub fn has_no_content(&self) -> bool {
        let m = &self.message;
        m.text.is_empty()
            && m.reasoning.is_empty()
            && m.reasoning_signature.is_none()
            && m.redacted_reasoning.is_empty()
            && m.refusal.is_none()
            && self.raw_calls.is_empty()
    }
}
