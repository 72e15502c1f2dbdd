//! Anthropic Messages: the stream normalizer (`AnthropicNormalizer`) and the request body
//! (`request_body`), public with feature `wire`, and the [`Model`](crate::model::Model)
//! implementation (made by
//! [`build_model`](crate::provider::http::build_model)).
//!
//! The reading of the wire format:
//!
//! - `message_start` → `start-step`; its `usage` is the first usage snapshot.
//! - `content_block_start` / `content_block_delta` / `content_block_stop` by `index`:
//!   `text` (`text_delta`) → text; `tool_use` (`input_json_delta`) → tool input, completed at
//!   the block's stop as one `tool-call`; `thinking` (`thinking_delta`, `signature_delta`) →
//!   reasoning and its signature; `redacted_thinking` → one redacted-reasoning delta. Other
//!   block types (server tools, citations) and other delta types are ignored.
//! - `message_delta` carries `stop_reason` and *cumulative* usage: each field it has replaces
//!   the earlier value, never adds to it.
//! - `message_stop` is the terminal evidence → `finish-step` + `finish`. A clean EOF before it
//!   is `incomplete_stream`.
//! - `ping` and unknown events are ignored; `event: error` (e.g. `overloaded_error`) under
//!   HTTP 200 is a classified error (`overloaded`, retryable).
//! - A data event that is not JSON, or whose JSON lacks what its type needs (a delta for a
//!   block that never started, a `text_delta` inside a `tool_use` block…), is a
//!   `malformed_response` naming the event (not retried).
//! - A block `index` at or beyond the content-block bound
//!   ([`HttpConfig::with_max_content_blocks`](crate::provider::http::HttpConfig::with_max_content_blocks))
//!   is `response_too_large` (not retried): the block table is indexed by it, so the bound is
//!   checked before anything is stored.
//!
//! # Example
//!
//! The client (nothing is sent before a run asks the model):
//!
//! ```
//! use agentloop::provider::http::{build_model, HttpConfig, ProviderKind};
//!
//! let config = HttpConfig::new(ProviderKind::Anthropic).with_api_key("key");
//! let model = build_model("claude-sonnet-4-5", config)?;
//! # let _ = model;
//! # Ok::<(), agentloop::ModelError>(())
//! ```

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ModelError;
use crate::message::{ContentPart, FinishReason, Message, MessageDelta, Usage};
use crate::model::{ModelRequest, ToolChoice};
use crate::provider::classify::classify_stream_error;
use crate::provider::http::{HttpConfig, Provider};
use crate::provider::limits::{too_many_blocks, ResponseLimits};
use crate::provider::normalize::{
    complete_tool_call, error_event_body, start_tool_input, typed_error_event, Stream,
};
use crate::provider::request::{arguments_object, set_tools, user_parts, Turns};
use crate::provider::sse::{SseEof, SseEvent, SseNormalizer};
use crate::tools::ToolSpec;

/// The `anthropic-version` header sent with every request.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) const ANTHROPIC_VERSION: &str = "2023-06-01";

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", default, borrow)]
    ty: Option<Cow<'a, str>>,
    index: Option<usize>,
    // Boxed: they appear once per message/block, and keeping `Event` small keeps the hot
    // per-delta parse cheap.
    message: Option<Box<StartMessage>>,
    #[serde(default, borrow)]
    content_block: Option<Box<ContentBlock<'a>>>,
    #[serde(default, borrow)]
    delta: Option<EventDelta<'a>>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct StartMessage {
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct ContentBlock<'a> {
    #[serde(rename = "type", borrow)]
    ty: Cow<'a, str>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    signature: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    data: Option<Cow<'a, str>>,
    input: Option<Value>,
}

#[derive(Deserialize)]
struct EventDelta<'a> {
    #[serde(rename = "type", default, borrow)]
    ty: Option<Cow<'a, str>>,
    /// The payload of `text_delta` (`text`), `input_json_delta` (`partial_json`),
    /// `thinking_delta` (`thinking`) or `signature_delta` (`signature`): one field, because a
    /// delta carries exactly one of them and its `type` says which.
    #[serde(
        default,
        borrow,
        alias = "partial_json",
        alias = "thinking",
        alias = "signature"
    )]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Cumulative semantics: every field present replaces the old value.
    fn apply(&self, usage: &mut Usage) {
        if let Some(v) = self.input_tokens {
            usage.input_tokens = v;
        }
        if let Some(v) = self.output_tokens {
            usage.output_tokens = v;
        }
        if let Some(v) = self.cache_read_input_tokens {
            usage.cache_read_input_tokens = v;
        }
        if let Some(v) = self.cache_creation_input_tokens {
            usage.cache_creation_input_tokens = v;
        }
    }
}

#[derive(Debug, Clone)]
enum BlockKind {
    Text,
    Tool {
        id: String,
        name: String,
        args: String,
    },
    Thinking,
    Redacted,
    /// A block type this client does not represent (server tools, …).
    Other,
}

#[derive(Debug, Clone)]
struct BlockState {
    kind: BlockKind,
    open: bool,
}

wire_pub! {
/// Maps an Anthropic `stop_reason` to the normalized reason.
pub fn map_stop_reason(raw: &str) -> FinishReason {
    match raw {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}
}

wire_pub! {
/// The Messages stream normalizer. Pure; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct AnthropicNormalizer {
    stream: Stream,
    blocks: Vec<Option<BlockState>>,
    raw_stop_reason: Option<String>,
    usage: Option<Usage>,
    limits: ResponseLimits,
}
}

impl AnthropicNormalizer {
    wire_pub! {
    /// A fresh normalizer for one response.
    pub fn new() -> Self {
        Self::default()
    }
    }

    fn close(block: &mut BlockState, out: &mut Vec<MessageDelta>) {
        if !block.open {
            return;
        }
        block.open = false;
        match &mut block.kind {
            BlockKind::Text => out.push(MessageDelta::TextEnd),
            BlockKind::Thinking => out.push(MessageDelta::ReasoningEnd),
            BlockKind::Tool { id, name, args } => {
                complete_tool_call(id.clone(), name.clone(), std::mem::take(args), out);
            }
            BlockKind::Redacted | BlockKind::Other => {}
        }
    }

    fn block_start(&mut self, ev: &SseEvent, e: Event<'_>, out: &mut Vec<MessageDelta>) {
        let (Some(index), Some(cb)) = (e.index, e.content_block) else {
            return self.stream.malformed(
                ev,
                "content_block_start without index or content_block",
                out,
            );
        };
        let cb = *cb;
        if index >= self.limits.max_content_blocks {
            return self
                .stream
                .fail(too_many_blocks(self.limits.max_content_blocks), out);
        }
        if self.blocks.get(index).is_some_and(Option::is_some) {
            return self
                .stream
                .malformed(ev, "content_block_start for an index already used", out);
        }
        self.stream.start_step(out);
        let kind = match cb.ty.as_ref() {
            "text" => {
                out.push(MessageDelta::TextStart);
                if let Some(t) = cb.text.filter(|t| !t.is_empty()) {
                    out.push(MessageDelta::TextDelta {
                        text: t.into_owned(),
                    });
                }
                BlockKind::Text
            }
            "thinking" => {
                out.push(MessageDelta::ReasoningStart);
                if let Some(t) = cb.thinking.filter(|t| !t.is_empty()) {
                    out.push(MessageDelta::ReasoningDelta {
                        text: t.into_owned(),
                    });
                }
                if let Some(s) = cb.signature.filter(|s| !s.is_empty()) {
                    out.push(MessageDelta::ReasoningSignature {
                        signature: s.into_owned(),
                    });
                }
                BlockKind::Thinking
            }
            "redacted_thinking" => {
                out.push(MessageDelta::RedactedReasoning {
                    data: cb.data.map(Cow::into_owned).unwrap_or_default(),
                });
                BlockKind::Redacted
            }
            "tool_use" => {
                let (Some(id), Some(name)) = (cb.id, cb.name) else {
                    return self
                        .stream
                        .malformed(ev, "tool_use block without id or name", out);
                };
                let (id, name) = (id.into_owned(), name.into_owned());
                // Streaming sends `input: {}` and the arguments as deltas; a non-empty input
                // in the start event is the complete arguments.
                let args = match cb.input {
                    Some(Value::Object(m)) if !m.is_empty() => Value::Object(m).to_string(),
                    _ => String::new(),
                };
                start_tool_input(&id, &name, &args, out);
                BlockKind::Tool { id, name, args }
            }
            _ => BlockKind::Other,
        };
        if self.blocks.len() <= index {
            self.blocks.resize(index + 1, None);
        }
        self.blocks[index] = Some(BlockState { kind, open: true });
    }

    fn block_delta(&mut self, ev: &SseEvent, e: Event<'_>, out: &mut Vec<MessageDelta>) {
        let (Some(index), Some(delta)) = (e.index, e.delta) else {
            return self
                .stream
                .malformed(ev, "content_block_delta without index or delta", out);
        };
        let Some(Some(block)) = self.blocks.get_mut(index) else {
            return self.stream.malformed(
                ev,
                "content_block_delta for a block that never started",
                out,
            );
        };
        if !block.open {
            return self
                .stream
                .malformed(ev, "content_block_delta after content_block_stop", out);
        }
        let ty = delta.ty.as_deref().unwrap_or("");
        let fits = match (ty, &mut block.kind, delta.text) {
            ("text_delta", BlockKind::Text, Some(t)) => {
                if !t.is_empty() {
                    out.push(MessageDelta::TextDelta { text: t.into() });
                }
                true
            }
            ("input_json_delta", BlockKind::Tool { id, args, .. }, Some(p)) => {
                if !p.is_empty() {
                    args.push_str(&p);
                    let id = id.clone();
                    out.push(MessageDelta::ToolInputDelta {
                        id,
                        delta: p.into(),
                    });
                }
                true
            }
            ("thinking_delta", BlockKind::Thinking, Some(t)) => {
                if !t.is_empty() {
                    out.push(MessageDelta::ReasoningDelta { text: t.into() });
                }
                true
            }
            ("signature_delta", BlockKind::Thinking, Some(s)) => {
                out.push(MessageDelta::ReasoningSignature {
                    signature: s.into(),
                });
                true
            }
            // A known delta without its text, or for a block of another type, is malformed;
            // any delta of a block this client does not represent carries nothing for it.
            ("text_delta" | "input_json_delta" | "thinking_delta" | "signature_delta", kind, _) => {
                matches!(kind, BlockKind::Other)
            }
            // citations_delta and future delta types carry nothing this client represents.
            _ => true,
        };
        if !fits {
            let reason = format!("{ty} does not fit content block {index}");
            self.stream.malformed(ev, &reason, out);
        }
    }

    fn finish_message(&mut self, out: &mut Vec<MessageDelta>) {
        self.stream.start_step(out);
        for block in self.blocks.iter_mut().flatten() {
            Self::close(block, out);
        }
        let reason = self.raw_stop_reason.as_deref().map(map_stop_reason);
        let raw = self.raw_stop_reason.clone();
        self.stream.finish_step(reason, raw, self.usage, out);
    }
}

impl SseNormalizer for AnthropicNormalizer {
    fn feed_into(&mut self, ev: &SseEvent, out: &mut Vec<MessageDelta>) {
        if !self.stream.next_event() || ev.data.trim().is_empty() {
            return;
        }
        if ev.event.as_deref() == Some("error") {
            let e = classify_stream_error(&error_event_body(&ev.data));
            return self.stream.fail(e, out);
        }
        let shape = "a Messages stream event";
        let Some(mut e) = self.stream.parse::<Event<'_>>(ev, &ev.data, shape, out) else {
            return;
        };
        let ty = e.ty.take().unwrap_or(Cow::Borrowed(ev.event_type()));
        match ty.as_ref() {
            "message_start" => {
                self.stream.start_step(out);
                if let Some(u) = e.message.and_then(|m| m.usage) {
                    u.apply(self.usage.get_or_insert_with(Usage::default));
                }
            }
            "content_block_start" => self.block_start(ev, e, out),
            "content_block_delta" => self.block_delta(ev, e, out),
            "content_block_stop" => {
                let Some(index) = e.index else {
                    self.stream
                        .malformed(ev, "content_block_stop without index", out);
                    return;
                };
                match self.blocks.get_mut(index) {
                    Some(Some(block)) => Self::close(block, out),
                    _ => self.stream.malformed(
                        ev,
                        "content_block_stop for a block that never started",
                        out,
                    ),
                }
            }
            "message_delta" => {
                let Some(delta) = e.delta else {
                    self.stream
                        .malformed(ev, "message_delta without delta", out);
                    return;
                };
                if let Some(r) = delta.stop_reason {
                    self.raw_stop_reason = Some(r.into_owned());
                }
                if let Some(u) = e.usage {
                    u.apply(self.usage.get_or_insert_with(Usage::default));
                }
            }
            "message_stop" => self.finish_message(out),
            "error" => self.stream.fail(typed_error_event(&ev.data), out),
            // ping and anything new
            _ => {}
        }
    }

    fn finish(&mut self, eof: SseEof) -> Vec<MessageDelta> {
        self.stream.cut_short(eof, "message_stop")
    }

    fn set_limits(&mut self, limits: &ResponseLimits) {
        self.limits = *limits;
    }
}

wire_pub! {
/// The Messages request body for `req` (`stream: true`). System messages in the history join
/// the `system` parameter; consecutive messages of one role are merged (the API requires
/// alternation); tool results travel as `tool_result` blocks of a user message; a user
/// message's content parts become `image` / `document` blocks after its text.
///
/// An assistant turn goes back as its `thinking` block (the reasoning with its signature),
/// its `redacted_thinking` blocks, then its text and `tool_use` blocks: with extended thinking
/// on, the API requires the last assistant turn's thinking, unmodified and first, when it
/// answers with tool results. Reasoning without a signature (another provider's, or a stream
/// cut before the signature) is left out: the API refuses a thinking block it cannot verify.
/// One thinking block per turn is kept ([`AssistantMessage`](crate::message::AssistantMessage)
/// holds one reasoning text and one signature), which is what the API returns without
/// server tools.
pub fn request_body(req: &ModelRequest, model: &str, default_max_tokens: u32) -> Value {
    let mut system: Vec<&str> = req.system.iter().map(String::as_str).collect();
    let mut turns = Turns::default();
    for m in &req.messages {
        match m {
            Message::System { content } => system.push(content),
            Message::User { content, parts } => turns.push("user", user_blocks(content, parts)),
            Message::Assistant(a) => {
                let mut blocks = Vec::new();
                if !a.reasoning.is_empty() {
                    if let Some(sig) = &a.reasoning_signature {
                        blocks.push(
                            json!({"type": "thinking", "thinking": a.reasoning, "signature": sig}),
                        );
                    }
                }
                // An OpenAI Responses reasoning item kept in the same list is not Anthropic's.
                for data in &a.redacted_reasoning {
                    if crate::provider::openai_responses::reasoning_item(data).is_none() {
                        blocks.push(json!({"type": "redacted_thinking", "data": data}));
                    }
                }
                if !a.text.is_empty() {
                    blocks.push(json!({"type": "text", "text": a.text}));
                }
                for c in &a.tool_calls {
                    let input = arguments_object(&c.arguments);
                    blocks.push(
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                    );
                }
                turns.push("assistant", blocks);
            }
            Message::Tool(r) => turns.push(
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": r.tool_call_id,
                    "content": r.content,
                    "is_error": r.is_error(),
                })],
            ),
        }
    }
    let messages = turns.into_json("content");
    let model = crate::provider::http::wire_model(
        crate::provider::http::ProviderKind::Anthropic,
        &req.model,
        model,
    );
    let mut body = json!({
        "model": model,
        "max_tokens": req.params.max_tokens.unwrap_or(default_max_tokens),
        "messages": messages,
        "stream": true,
    });
    // A typed final answer: the Messages API has no JSON-schema response format, so the
    // schema goes into the system prompt (the runtime checks the answer).
    let instruction = req.params.output.as_ref().map(|o| o.instruction());
    system.extend(instruction.as_deref());
    if !system.is_empty() {
        body["system"] = json!(system.join("\n\n"));
    }
    let tool = |t: &ToolSpec| json!({"name": t.name, "description": t.description, "input_schema": t.parameters});
    set_tools(&mut body, req, tool, tool_choice);
    if let Some(t) = req.params.temperature {
        body["temperature"] = json!(t);
    }
    body
}
}

/// A user message's content blocks: its text (as it always was for a plain message; left out
/// when empty and the message has parts, since the API refuses empty text blocks), then one
/// block per part: `text`, `image` or `document`, each `source` as the part has it
/// (`{type: base64, media_type, data}` or `{type: url, url}`); a file's name is the
/// document's `title`.
fn user_blocks(content: &str, parts: &[ContentPart]) -> Vec<Value> {
    let text = |text: &str| json!({"type": "text", "text": text});
    user_parts(content, parts, text, |p| match p {
        ContentPart::Text { text: t } => text(t),
        ContentPart::Image { source } => json!({"type": "image", "source": source}),
        ContentPart::File { source, filename } => {
            let mut doc = json!({"type": "document", "source": source});
            if let Some(name) = filename {
                doc["title"] = json!(name);
            }
            doc
        }
    })
}

/// The Messages API's `tool_choice` for `choice`.
fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!({"type": "auto"}),
        ToolChoice::None => json!({"type": "none"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
    }
}

/// The Messages API as a [`Provider`]: `POST {base}/v1/messages` with `x-api-key` and
/// `anthropic-version`; its own settings are the default `max_tokens` and the thinking budget.
#[derive(Clone, Debug)]
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) struct Messages {
    default_max_tokens: u32,
    thinking_budget: Option<u32>,
}

impl Provider for Messages {
    const NAME: &'static str = "anthropic";
    const KEY_ENV: &'static [&'static str] = &["ANTHROPIC_API_KEY"];
    const BASE_URL_ENV: &'static str = "ANTHROPIC_BASE_URL";
    const DEFAULT_BASE_URL: &'static str = "https://api.anthropic.com";
    const ENABLED: bool = cfg!(feature = "anthropic");
    type Normalizer = AnthropicNormalizer;

    fn from_config(config: &HttpConfig) -> Self {
        Messages {
            default_max_tokens: config.default_max_tokens,
            thinking_budget: config.thinking_budget,
        }
    }

    fn endpoint(&self, base_url: &str, _model: &str) -> String {
        if base_url.ends_with("/v1") {
            format!("{base_url}/messages")
        } else {
            format!("{base_url}/v1/messages")
        }
    }

    fn headers(&self, api_key: Option<&str>) -> Vec<(String, String)> {
        let mut headers = vec![(
            "anthropic-version".to_string(),
            ANTHROPIC_VERSION.to_string(),
        )];
        if let Some(key) = api_key {
            headers.push(("x-api-key".to_string(), key.to_string()));
        }
        headers
    }

    fn body(&self, request: &ModelRequest, model: &str) -> Result<Value, ModelError> {
        let mut body = request_body(request, model, self.default_max_tokens);
        if let Some(budget) = self.thinking_budget {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
        Ok(body)
    }
}
