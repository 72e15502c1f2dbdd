//! What the four stream normalizers (Chat Completions, Responses, Messages, Gemini) share:
//! the progress of one response ([`Stream`]: events read, `start-step` emitted, ended), its
//! typed errors (malformed event, in-stream error event, cut short), the open text/reasoning
//! run ([`Block`]) and the deltas that announce and complete one tool call. Pure.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ModelError;
use crate::message::{FinishReason, MessageDelta, Usage};
use crate::provider::classify::{classify_stream_error, incomplete_stream, malformed_event};
use crate::provider::sse::{SseEof, SseEvent};

/// The progress of one response, common to every normalizer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stream {
    /// Events read so far (a malformed event is named by its number).
    pub(crate) events: usize,
    /// `start-step` was emitted.
    started: bool,
    /// `finish` or an error was emitted: nothing more is read.
    pub(crate) ended: bool,
}

impl Stream {
    /// Counts the next event; `false` once the response ended (the event is then ignored).
    pub(crate) fn next_event(&mut self) -> bool {
        if self.ended {
            return false;
        }
        self.events += 1;
        true
    }

    /// Ends the response with `error`.
    pub(crate) fn fail(&mut self, error: ModelError, out: &mut Vec<MessageDelta>) {
        self.ended = true;
        out.push(MessageDelta::Error { error });
    }

    /// Ends the response with a `malformed_response` naming the event `ev` and `reason`.
    pub(crate) fn malformed(&mut self, ev: &SseEvent, reason: &str, out: &mut Vec<MessageDelta>) {
        let e = malformed_event(self.events, ev.event_type(), reason, &ev.data);
        self.fail(e, out);
    }

    /// Emits `start-step` once.
    pub(crate) fn start_step(&mut self, out: &mut Vec<MessageDelta>) {
        if !self.started {
            self.started = true;
            out.push(MessageDelta::StartStep);
        }
    }

    /// Ends the response: `start-step` if none was emitted, `finish-step`, `finish`.
    pub(crate) fn finish_step(
        &mut self,
        finish_reason: Option<FinishReason>,
        raw_finish_reason: Option<String>,
        usage: Option<Usage>,
        out: &mut Vec<MessageDelta>,
    ) {
        self.start_step(out);
        out.push(MessageDelta::FinishStep {
            finish_reason,
            raw_finish_reason,
            usage,
        });
        out.push(MessageDelta::Finish);
        self.ended = true;
    }

    /// What the end of the body (`eof`) adds: nothing once the response ended, else
    /// `incomplete_stream` (the body ended before `what`).
    pub(crate) fn cut_short(&mut self, eof: SseEof, what: &str) -> Vec<MessageDelta> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        let mid = if eof == SseEof::MidEvent {
            " (it ended inside an event)"
        } else {
            ""
        };
        let e = incomplete_stream(&format!("the stream ended before {what}{mid}"));
        self.fail(e, &mut out);
        out
    }

    /// `data` (of the event `ev`) parsed as a `T`; else the response ends with a
    /// `malformed_response` that names `shape` when the JSON is valid but not a `T`.
    pub(crate) fn parse<'a, T: Deserialize<'a>>(
        &mut self,
        ev: &SseEvent,
        data: &'a str,
        shape: &str,
        out: &mut Vec<MessageDelta>,
    ) -> Option<T> {
        match serde_json::from_str::<T>(data) {
            Ok(t) => Some(t),
            Err(err) => {
                let reason = if err.is_data() {
                    format!("unexpected JSON shape for {shape}: {err}")
                } else {
                    format!("not valid JSON: {err}")
                };
                self.malformed(ev, &reason, out);
                None
            }
        }
    }
}

/// The body of an `event: error` SSE event as JSON: the data itself, or, when it is not JSON,
/// `{"error": {"message": data}}`.
pub(crate) fn error_event_body(data: &str) -> Value {
    serde_json::from_str::<Value>(data).unwrap_or_else(|_| json!({ "error": { "message": data } }))
}

/// A data event whose JSON `type` is `error`, classified (anything else classifies as an
/// error without details).
pub(crate) fn typed_error_event(data: &str) -> ModelError {
    let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
    classify_stream_error(&v)
}

/// The `*_tokens_details` objects of the usage of both OpenAI wire formats: the cached input
/// tokens and the reasoning output tokens.
#[derive(Deserialize, Default)]
pub(crate) struct TokenDetails {
    pub(crate) cached_tokens: Option<u64>,
    pub(crate) reasoning_tokens: Option<u64>,
}

/// The text or reasoning run open at the moment (a normalizer without per-index blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Block {
    /// No run is open.
    #[default]
    None,
    /// Text deltas are being emitted.
    Text,
    /// Reasoning deltas are being emitted.
    Reasoning,
}

impl Block {
    /// Makes `want` the open run: closes the open one when it is another, then opens `want`.
    pub(crate) fn open(&mut self, want: Block, out: &mut Vec<MessageDelta>) {
        if *self == want {
            return;
        }
        match self {
            Block::Text => out.push(MessageDelta::TextEnd),
            Block::Reasoning => out.push(MessageDelta::ReasoningEnd),
            Block::None => {}
        }
        match want {
            Block::Text => out.push(MessageDelta::TextStart),
            Block::Reasoning => out.push(MessageDelta::ReasoningStart),
            Block::None => {}
        }
        *self = want;
    }

    /// Closes the open run, if any.
    pub(crate) fn close(&mut self, out: &mut Vec<MessageDelta>) {
        self.open(Block::None, out);
    }

    /// Emits `text` in a text run, or in a reasoning run when `reasoning`.
    pub(crate) fn push(&mut self, reasoning: bool, text: String, out: &mut Vec<MessageDelta>) {
        if reasoning {
            self.open(Block::Reasoning, out);
            out.push(MessageDelta::ReasoningDelta { text });
        } else {
            self.open(Block::Text, out);
            out.push(MessageDelta::TextDelta { text });
        }
    }
}

/// Announces the tool call `id` (`tool-input-start`) with the arguments known so far, if any
/// (one `tool-input-delta`).
pub(crate) fn start_tool_input(id: &str, name: &str, args: &str, out: &mut Vec<MessageDelta>) {
    out.push(MessageDelta::ToolInputStart {
        id: id.to_string(),
        name: name.to_string(),
    });
    if !args.is_empty() {
        out.push(MessageDelta::ToolInputDelta {
            id: id.to_string(),
            delta: args.to_string(),
        });
    }
}

/// Completes the tool call `id`: `tool-input-end`, then the whole `tool-call`.
pub(crate) fn complete_tool_call(
    id: String,
    name: String,
    arguments: String,
    out: &mut Vec<MessageDelta>,
) {
    out.push(MessageDelta::ToolInputEnd { id: id.clone() });
    out.push(MessageDelta::ToolCall {
        id,
        name,
        arguments,
    });
}
