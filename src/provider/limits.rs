//! Bounds on one model response and the meter that enforces them on the normalized deltas.
//! They are set on [`HttpConfig`](crate::provider::http::HttpConfig) (`with_max_response_bytes`,
//! `with_max_tool_argument_bytes`, `with_max_content_blocks`, `with_max_deltas`); the struct
//! that carries them, `ResponseLimits`, is public only with feature `wire` (the SSE pipeline
//! takes it).
//!
//! A server that streams without end (a runaway model, a broken proxy, a hostile endpoint)
//! must not grow the client's memory without bound. Each limit ends the attempt with a
//! [`ErrorKind::ResponseTooLarge`] error, which is not retried: the same request would most
//! likely run into the same bound again.
//!
//! The bounds are counted on the normalized deltas, after each server-sent event, so what is
//! held at any time is at most the limit plus one event; one event is bounded on its own by
//! the SSE decoder (`provider::sse::DEFAULT_MAX_EVENT_BYTES`, also
//! `response_too_large`). The normalizers check what they hold before emitting it (Anthropic's
//! block table is indexed by the block number; OpenAI gathers arguments until a call's name
//! arrives).
//!
//! | limit | default | why |
//! |---|---|---|
//! | `max_response_bytes` | 32 MiB | text + reasoning + refusal + tool arguments (+ signatures, redacted reasoning). The largest output budgets offered today are ~128k tokens (≈ 0.5 MiB of text); even a 1M-token output (≈ 4 MiB) fits 8 times. The bound is on memory: a response is held several times over (observers' deltas, the assembled message, the trace). |
//! | `max_tool_argument_bytes` | 8 MiB | one tool call's argument text; the largest legitimate case is a call that writes a whole file. |
//! | `max_deltas` | 262,144 | normalized deltas of one response (every text, reasoning, tool-argument… delta). Each delta is an input event of the machines, an observer event and, with a trace, three trace records (~0.9 KB), so a server streaming a million one-character deltas (well under `max_response_bytes`) cost 1.47 GB with `--trace`. Providers send about a token per delta: 2× the largest output budget offered today (128k tokens). |
//! | `max_content_blocks` | 1024 | content blocks of one response: every Anthropic content block (text, thinking, tool use, server tools…), every OpenAI tool call and text/reasoning run. Real turns carry tens of parallel tool calls; each one is run, persisted and answered, so a thousand is already far beyond use. |
//!
//! # Example
//!
//! ```
//! use agentloop::provider::http::{HttpConfig, ProviderKind};
//!
//! let cfg = HttpConfig::new(ProviderKind::OpenAi).with_max_response_bytes(4 << 20);
//! # let _ = cfg;
//! ```

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::{ErrorKind, ModelError};
use crate::message::MessageDelta;

/// Default `max_response_bytes`: 32 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;
/// Default `max_tool_argument_bytes`: 8 MiB.
pub const DEFAULT_MAX_TOOL_ARGUMENT_BYTES: usize = 8 * 1024 * 1024;
/// Default `max_deltas`: 262,144 (256 Ki).
pub const DEFAULT_MAX_DELTAS: usize = 256 * 1024;
/// Default `max_content_blocks`: 1024.
pub const DEFAULT_MAX_CONTENT_BLOCKS: usize = 1024;

wire_pub! {
/// Bounds on one model response; see the module docs for the defaults and their reasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResponseLimits {
    /// Total bytes of text, reasoning, refusal and tool-argument deltas (plus reasoning
    /// signatures and redacted reasoning) in one response.
    pub max_response_bytes: usize,
    /// Bytes of one tool call's arguments.
    pub max_tool_argument_bytes: usize,
    /// Content blocks in one response: Anthropic content blocks of any type; OpenAI tool
    /// calls and text/reasoning runs. This bounds the tool calls of one turn.
    pub max_content_blocks: usize,
    /// Normalized deltas in one response (of any kind but the final `Finish`/`Error`): bounds
    /// what a flood of tiny deltas costs per delta (machine inputs, observer events, trace
    /// records), which `max_response_bytes` does not.
    pub max_deltas: usize,
}
}

impl Default for ResponseLimits {
    fn default() -> Self {
        ResponseLimits {
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_tool_argument_bytes: DEFAULT_MAX_TOOL_ARGUMENT_BYTES,
            max_content_blocks: DEFAULT_MAX_CONTENT_BLOCKS,
            max_deltas: DEFAULT_MAX_DELTAS,
        }
    }
}

/// The error for a crossed bound: `response_too_large`, naming what and the field.
pub(crate) fn exceeded(field: &str, limit: usize, what: &str) -> ModelError {
    ModelError::new(
        ErrorKind::ResponseTooLarge,
        format!("response limit exceeded: {what} (ResponseLimits::{field} = {limit})"),
    )
}

/// The error for one content block too many.
pub(crate) fn too_many_blocks(limit: usize) -> ModelError {
    exceeded(
        "max_content_blocks",
        limit,
        &format!("more than {limit} content blocks / tool calls in one response"),
    )
}

/// The error for a tool call's arguments beyond the bound.
pub(crate) fn tool_arguments_too_large(id: &str, limit: usize) -> ModelError {
    exceeded(
        "max_tool_argument_bytes",
        limit,
        &format!("the arguments of tool call {id:?} are longer than {limit} bytes"),
    )
}

/// Counts a response's normalized deltas against [`ResponseLimits`]. Used by
/// [`crate::provider::sse::SsePipeline`], so every stream (HTTP clients, `decode`, fuzz
/// targets) is bounded the same way.
#[derive(Clone, Debug)]
pub(crate) struct ResponseMeter {
    limits: ResponseLimits,
    bytes: usize,
    blocks: usize,
    deltas: usize,
    /// Argument bytes per tool call id (of the latest call with that id; at most
    /// `max_content_blocks` entries), found in O(1) per delta.
    args: HashMap<String, usize>,
}

impl ResponseMeter {
    pub(crate) fn new(limits: ResponseLimits) -> Self {
        ResponseMeter {
            limits,
            bytes: 0,
            blocks: 0,
            deltas: 0,
            args: HashMap::new(),
        }
    }

    pub(crate) fn limits(&self) -> &ResponseLimits {
        &self.limits
    }

    fn block(&mut self) -> Result<(), ModelError> {
        self.blocks += 1;
        if self.blocks > self.limits.max_content_blocks {
            return Err(too_many_blocks(self.limits.max_content_blocks));
        }
        Ok(())
    }

    /// Counts one delta; the error when it crosses a bound.
    pub(crate) fn count(&mut self, delta: &MessageDelta) -> Result<(), ModelError> {
        if !matches!(delta, MessageDelta::Finish | MessageDelta::Error { .. }) {
            self.deltas += 1;
            let limit = self.limits.max_deltas;
            if self.deltas > limit {
                return Err(exceeded(
                    "max_deltas",
                    limit,
                    &format!("more than {limit} deltas in one response"),
                ));
            }
        }
        let bytes = match delta {
            MessageDelta::TextStart | MessageDelta::ReasoningStart => {
                self.block()?;
                0
            }
            MessageDelta::ToolInputStart { id, .. } => {
                self.block()?;
                self.args.insert(id.clone(), 0);
                0
            }
            MessageDelta::RedactedReasoning { data } => {
                self.block()?;
                data.len()
            }
            MessageDelta::TextDelta { text }
            | MessageDelta::ReasoningDelta { text }
            | MessageDelta::Refusal { text } => text.len(),
            MessageDelta::ReasoningSignature { signature } => signature.len(),
            MessageDelta::ToolInputDelta { id, delta } => {
                let limit = self.limits.max_tool_argument_bytes;
                if let Some(n) = self.args.get_mut(id) {
                    *n = n.saturating_add(delta.len());
                    if *n > limit {
                        return Err(tool_arguments_too_large(id, limit));
                    }
                } else if delta.len() > limit {
                    return Err(tool_arguments_too_large(id, limit));
                }
                delta.len()
            }
            _ => 0,
        };
        self.bytes = self.bytes.saturating_add(bytes);
        let limit = self.limits.max_response_bytes;
        if self.bytes > limit {
            return Err(exceeded(
                "max_response_bytes",
                limit,
                &format!("more than {limit} bytes of text, reasoning and tool arguments"),
            ));
        }
        Ok(())
    }

    /// Counts the deltas `out[start..]`; at the first one that crosses a bound, drops it and
    /// everything after it and appends the error. Returns whether it did.
    pub(crate) fn count_new(&mut self, out: &mut Vec<MessageDelta>, start: usize) -> bool {
        for i in start..out.len() {
            if let Err(error) = self.count(&out[i]) {
                out.truncate(i);
                out.push(MessageDelta::Error { error });
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Argument bytes of a call the meter saw no start of are bounded on their own: a delta may
    /// reach `max_tool_argument_bytes`, not pass it.
    #[test]
    fn an_argument_delta_without_its_start_is_bounded_too() {
        let limits = ResponseLimits {
            max_tool_argument_bytes: 4,
            ..ResponseLimits::default()
        };
        let delta = |d: &str| MessageDelta::ToolInputDelta {
            id: "x".into(),
            delta: d.into(),
        };
        assert!(ResponseMeter::new(limits).count(&delta("abcd")).is_ok());
        let e = ResponseMeter::new(limits)
            .count(&delta("abcde"))
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::ResponseTooLarge);
        assert!(e.message.contains("max_tool_argument_bytes = 4"), "{e}");
    }
}
