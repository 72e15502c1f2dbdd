//! OpenAI-compatible Chat Completions: the stream normalizer (`OpenAiNormalizer`) and the
//! request body (`request_body`), public with feature `wire`, and the
//! [`Model`](crate::model::Model) implementation (made by
//! [`build_model`](crate::provider::http::build_model)).
//!
//! One reading of the wire format that works with OpenAI, Azure, OpenRouter, Ollama, vLLM,
//! llama.cpp and DeepSeek (`stream: true`, `stream_options.include_usage`):
//!
//! - `delta.content` → text; `delta.reasoning_content` (DeepSeek, vLLM) or `delta.reasoning`
//!   (OpenRouter, Ollama) → reasoning; `delta.refusal` → refusal. Empty strings and `null`s are
//!   nothing. Only choice 0 is read (the client never asks for `n > 1`).
//! - `delta.content` may also be an array of typed parts (Mistral's magistral reasoning
//!   models): `{"type": "text", "text": …}` → text, `{"type": "thinking", "thinking": …}` →
//!   reasoning, where `thinking` is itself a string or an array of text parts; parts of other
//!   types (references, images) are ignored. The parts are read in order.
//! - Tool calls are assembled by `index` from fragments; parallel calls may interleave.
//!   Quirks handled: servers that reuse index 0 for every parallel call (Ollama) — a fragment
//!   with a *new* id *and* a name starts a new call when the current call's arguments already
//!   form complete JSON or the name differs; servers that send a new id on every fragment of
//!   one call — the first id is kept; `name` is assigned, never appended; fragments without
//!   `index` continue the call with their id, else the last call; a call without any id gets
//!   `call_<n>` (n = its position in the response).
//! - Empty or whitespace arguments mean `{}` (see [`crate::message::ToolCall::from_raw`]).
//! - `finish_reason` closes the open text/reasoning block and completes every tool call
//!   (`tool-input-end` + `tool-call`), but `finish-step`/`finish` wait for `[DONE]` (or EOF
//!   after a `finish_reason`), because usage arrives on a `choices: []` chunk after it.
//! - `{"error": …}` chunks are terminal errors even when `[DONE]` follows.
//! - Azure chunks with empty `choices`, without `delta`, or with only filter results are
//!   accepted and contribute nothing.
//! - Content after `finish_reason`, a data event that is not JSON, or JSON of an unexpected
//!   shape is a `malformed_response` naming the event (not retried); EOF before `[DONE]` and
//!   before any `finish_reason` is `incomplete_stream`.
//! - More tool calls than the content-block bound
//!   ([`HttpConfig::with_max_content_blocks`](crate::provider::http::HttpConfig::with_max_content_blocks)),
//!   or arguments beyond the tool-argument bound
//!   ([`HttpConfig::with_max_tool_argument_bytes`](crate::provider::http::HttpConfig::with_max_tool_argument_bytes))
//!   gathered before a call's name arrives, are
//!   `response_too_large` (the pipeline counts everything that was emitted).
//!
//! The request (`request_body_with`): a user message with content parts has an array
//! `content` of `text`, `image_url` (`{url}`: the image's URL or a `data:` URL) and `file`
//! (`{filename, file_data}`: a `data:` URL) parts; without parts it is the plain string. An
//! assistant message's reasoning goes back as `reasoning_content` as [`ReasoningReplay`] says.
//!
//! # Example
//!
//! The client (nothing is sent before a run asks the model):
//!
//! ```
//! use agentloop::provider::http::{build_model, HttpConfig, ProviderKind};
//!
//! let config = HttpConfig::new(ProviderKind::OpenAi).with_api_key("key");
//! let model = build_model("gpt-4o-mini", config)?;
//! # let _ = model;
//! # Ok::<(), agentloop::ModelError>(())
//! ```

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::error::ModelError;
use crate::message::{
    ContentPart as UserPart, FinishReason, MediaSource, Message, MessageDelta, Usage,
};
use crate::model::{ModelRequest, ToolChoice};
use crate::provider::classify::classify_stream_error;
use crate::provider::http::{HttpConfig, Provider};
use crate::provider::limits::{too_many_blocks, tool_arguments_too_large, ResponseLimits};
use crate::provider::normalize::{
    complete_tool_call, error_event_body, start_tool_input, Block, Stream, TokenDetails,
};
use crate::provider::request::{arguments_text, call_id_prefix, file_name, set_tools, user_parts};
use crate::provider::sse::{SseEof, SseEvent, SseNormalizer};
use crate::tools::ToolSpec;

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Option<FirstChoice<'a>>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

/// The `choices` array reduced to choice 0, without collecting the array (one allocation less
/// per chunk on the hot path).
struct FirstChoice<'a>(Option<Choice<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for FirstChoice<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Seq<'a>(std::marker::PhantomData<Choice<'a>>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Seq<'a> {
            type Value = FirstChoice<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut first = None;
                while let Some(c) = seq.next_element::<Choice<'a>>()? {
                    if first.is_none() && c.index.unwrap_or(0) == 0 {
                        first = Some(c);
                    }
                }
                Ok(FirstChoice(first))
            }
        }
        d.deserialize_seq(Seq(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct Choice<'a> {
    index: Option<u32>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Content<'a>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    refusal: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolFragment<'a>>>,
}

/// `delta.content`: a string, or an array of typed parts (see the module docs).
enum Content<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<ContentPart<'a>>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor<'a>(std::marker::PhantomData<ContentPart<'a>>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visitor<'a> {
            type Value = Content<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an array of content parts")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Owned(v)))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut parts = Vec::new();
                while let Some(p) = seq.next_element::<ContentPart<'a>>()? {
                    parts.push(p);
                }
                Ok(Content::Parts(parts))
            }
        }
        d.deserialize_any(Visitor(std::marker::PhantomData))
    }
}

impl Content<'_> {
    /// Hands each piece of text to `f` in order, with whether it is reasoning (`thinking`
    /// parts, and everything inside them).
    fn walk(&self, reasoning: bool, f: &mut impl FnMut(bool, &str)) {
        match self {
            Content::Text(t) => f(reasoning, t),
            Content::Parts(parts) => {
                for p in parts {
                    match p.ty.as_deref() {
                        Some("text") | None => {
                            if let Some(t) = &p.text {
                                f(reasoning, t);
                            }
                        }
                        Some("thinking") => {
                            if let Some(t) = &p.thinking {
                                t.walk(true, f);
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    fn has_text(&self) -> bool {
        let mut any = false;
        self.walk(false, &mut |_, t| any |= !t.is_empty());
        any
    }
}

/// One element of an array `content`.
#[derive(Deserialize)]
struct ContentPart<'a> {
    #[serde(rename = "type", default, borrow)]
    ty: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    thinking: Option<Content<'a>>,
}

#[derive(Deserialize)]
struct ToolFragment<'a> {
    index: Option<u32>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<FunctionFragment<'a>>,
}

#[derive(Deserialize)]
struct FunctionFragment<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<TokenDetails>,
    completion_tokens_details: Option<TokenDetails>,
    /// DeepSeek's name for cached prompt tokens.
    prompt_cache_hit_tokens: Option<u64>,
}

impl WireUsage {
    fn normalize(&self) -> Usage {
        Usage {
            input_tokens: self.prompt_tokens.unwrap_or(0),
            output_tokens: self.completion_tokens.unwrap_or(0),
            cache_read_input_tokens: self
                .prompt_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens)
                .or(self.prompt_cache_hit_tokens)
                .unwrap_or(0),
            cache_creation_input_tokens: 0,
            reasoning_tokens: self
                .completion_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
        }
    }
}

#[derive(Debug, Clone)]
struct CallAcc {
    id: String,
    /// The id was made up (`call_<n>`) because the server sent none yet.
    id_generated: bool,
    name: String,
    args: String,
    /// `tool-input-start` was emitted (needs a name).
    started: bool,
}

wire_pub! {
/// The Chat Completions stream normalizer: SSE events in, [`MessageDelta`]s out. Pure; see
/// the module docs for the quirks it handles.
#[derive(Debug, Clone)]
pub struct OpenAiNormalizer {
    stream: Stream,
    block: Block,
    calls: Vec<CallAcc>,
    /// The last call with each wire `index` (a call's index never changes), so a fragment
    /// finds its call in O(1) however many calls came before.
    by_index: HashMap<u32, usize>,
    raw_finish_reason: Option<String>,
    usage: Option<Usage>,
    /// `finish_reason` seen: waiting for usage and `[DONE]`.
    finishing: bool,
    id_prefix: String,
    limits: ResponseLimits,
}
}

impl Default for OpenAiNormalizer {
    fn default() -> Self {
        Self::new()
    }
}

wire_pub! {
/// Maps a Chat Completions `finish_reason` to the normalized reason.
pub fn map_finish_reason(raw: &str) -> FinishReason {
    match raw {
        "stop" | "eos" | "end_turn" => FinishReason::Stop,
        "length" | "max_tokens" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}
}

impl OpenAiNormalizer {
    wire_pub! {
    /// Sets the prefix of ids generated for calls that arrive without one (default `call_`).
    /// The client passes one that names the run and step, so generated ids never repeat
    /// across the turns of a session (tool results are keyed by call id, R-IDEM-3).
    pub fn with_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.id_prefix = prefix.into();
        self
    }
    }

    wire_pub! {
    /// A fresh normalizer for one response.
    pub fn new() -> Self {
        OpenAiNormalizer {
            stream: Stream::default(),
            block: Block::None,
            calls: Vec::new(),
            by_index: HashMap::new(),
            raw_finish_reason: None,
            usage: None,
            finishing: false,
            id_prefix: "call_".into(),
            limits: ResponseLimits::default(),
        }
    }
    }

    fn start_call(call: &mut CallAcc, out: &mut Vec<MessageDelta>) {
        call.started = true;
        start_tool_input(&call.id, &call.name, &call.args, out);
    }

    fn tool_fragment(&mut self, f: ToolFragment<'_>, out: &mut Vec<MessageDelta>) {
        let id = f.id.as_deref().filter(|s| !s.is_empty());
        let (name, args) = match &f.function {
            Some(func) => (
                func.name.as_deref().filter(|s| !s.is_empty()),
                func.arguments.as_deref().unwrap_or(""),
            ),
            None => (None, ""),
        };
        let target = match f.index {
            Some(i) => self.by_index.get(&i).copied(),
            None => {
                let by_id = id.and_then(|id| self.calls.iter().rposition(|c| c.id == id));
                match (by_id, name) {
                    (Some(pos), _) => Some(pos),
                    // A new id with a name and no index: a new call.
                    (None, Some(_)) if id.is_some() => None,
                    // Otherwise a continuation of the last call.
                    _ => self.calls.len().checked_sub(1),
                }
            }
        };
        let pos = match target {
            Some(pos) if !starts_new_call(&self.calls[pos], id, name) => pos,
            _ => {
                let ordinal = self.calls.len();
                if ordinal >= self.limits.max_content_blocks {
                    return self
                        .stream
                        .fail(too_many_blocks(self.limits.max_content_blocks), out);
                }
                if let Some(i) = f.index {
                    self.by_index.insert(i, ordinal);
                }
                self.calls.push(CallAcc {
                    id: id.map_or_else(|| format!("{}{ordinal}", self.id_prefix), str::to_string),
                    id_generated: id.is_none(),
                    name: String::new(),
                    args: String::new(),
                    started: false,
                });
                ordinal
            }
        };
        self.block.close(out);
        let call = &mut self.calls[pos];
        if let Some(id) = id {
            // A call created without an id adopts the first real one, unless already announced.
            if !call.started && call.id_generated {
                call.id = id.to_string();
                call.id_generated = false;
            }
        }
        if let Some(name) = name {
            if !call.started {
                call.name = name.to_string();
            }
        }
        if call.started {
            if !args.is_empty() {
                call.args.push_str(args);
                out.push(MessageDelta::ToolInputDelta {
                    id: call.id.clone(),
                    delta: args.to_string(),
                });
            }
        } else {
            call.args.push_str(args);
            if call.args.len() > self.limits.max_tool_argument_bytes {
                let e = tool_arguments_too_large(&call.id, self.limits.max_tool_argument_bytes);
                return self.stream.fail(e, out);
            }
            if !call.name.is_empty() {
                Self::start_call(call, out);
            }
        }
    }

    /// Closes blocks and completes every tool call (at `finish_reason` or `[DONE]`).
    fn complete_content(&mut self, out: &mut Vec<MessageDelta>) {
        self.block.close(out);
        for mut call in self.calls.drain(..) {
            if !call.started {
                Self::start_call(&mut call, out);
            }
            complete_tool_call(call.id, call.name, call.args, out);
        }
        self.by_index.clear();
    }

    fn end(&mut self, out: &mut Vec<MessageDelta>) {
        if !self.finishing {
            self.complete_content(out);
        }
        let reason = self.raw_finish_reason.as_deref().map(map_finish_reason);
        let raw = self.raw_finish_reason.clone();
        self.stream.finish_step(reason, raw, self.usage, out);
    }

    fn chunk(&mut self, ev: &SseEvent, chunk: Chunk<'_>, out: &mut Vec<MessageDelta>) {
        if let Some(err) = chunk.error {
            if !err.is_null() {
                let error = classify_stream_error(&json!({ "error": err }));
                return self.stream.fail(error, out);
            }
        }
        self.stream.start_step(out);
        if let Some(u) = &chunk.usage {
            self.usage = Some(u.normalize());
        }
        if let Some(choice) = chunk.choices.and_then(|c| c.0) {
            if let Some(delta) = choice.delta {
                let has_content = [&delta.reasoning_content, &delta.reasoning, &delta.refusal]
                    .iter()
                    .any(|c| c.as_deref().is_some_and(|s| !s.is_empty()))
                    || delta.content.as_ref().is_some_and(Content::has_text)
                    || delta.tool_calls.as_ref().is_some_and(|t| !t.is_empty());
                if has_content && self.finishing {
                    return self
                        .stream
                        .malformed(ev, "content after finish_reason", out);
                }
                // Servers that send both names send the same text twice: take one.
                let reasoning = delta
                    .reasoning_content
                    .filter(|r| !r.is_empty())
                    .or(delta.reasoning.filter(|r| !r.is_empty()));
                if let Some(reasoning) = reasoning {
                    self.block.push(true, reasoning.into_owned(), out);
                }
                match delta.content {
                    Some(Content::Text(text)) if !text.is_empty() => {
                        self.block.push(false, text.into_owned(), out);
                    }
                    Some(parts @ Content::Parts(_)) => parts.walk(false, &mut |reasoning, text| {
                        if !text.is_empty() {
                            self.block.push(reasoning, text.into(), out);
                        }
                    }),
                    _ => {}
                }
                if let Some(refusal) = delta.refusal.filter(|t| !t.is_empty()) {
                    out.push(MessageDelta::Refusal {
                        text: refusal.into_owned(),
                    });
                }
                for frag in delta.tool_calls.into_iter().flatten() {
                    self.tool_fragment(frag, out);
                    if self.stream.ended {
                        return;
                    }
                }
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                if !self.finishing {
                    self.raw_finish_reason = Some(reason.into_owned());
                    self.complete_content(out);
                    self.finishing = true;
                }
            }
        }
    }
}

/// Whether a fragment that maps to `call` (same index) actually begins a different call.
fn starts_new_call(call: &CallAcc, id: Option<&str>, name: Option<&str>) -> bool {
    let (Some(id), Some(name)) = (id, name) else {
        return false;
    };
    if id == call.id {
        return false;
    }
    call.name != name
        || (!call.args.trim().is_empty()
            && serde_json::from_str::<serde::de::IgnoredAny>(&call.args).is_ok())
}

impl SseNormalizer for OpenAiNormalizer {
    fn feed_into(&mut self, ev: &SseEvent, out: &mut Vec<MessageDelta>) {
        if !self.stream.next_event() {
            return;
        }
        let data = ev.data.trim();
        if data == "[DONE]" {
            self.end(out);
            return;
        }
        if ev.event.as_deref() == Some("error") {
            let v = error_event_body(data);
            let v = if v.get("error").is_some() {
                v
            } else {
                json!({ "error": v })
            };
            return self.stream.fail(classify_stream_error(&v), out);
        }
        if data.is_empty() {
            // `data:` with nothing: no content, but no evidence of a broken stream either.
            return;
        }
        let shape = "a chat.completion.chunk";
        if let Some(chunk) = self.stream.parse::<Chunk<'_>>(ev, data, shape, out) {
            self.chunk(ev, chunk, out);
        }
    }

    fn finish(&mut self, eof: SseEof) -> Vec<MessageDelta> {
        if self.stream.ended || !self.finishing {
            return self
                .stream
                .cut_short(eof, "[DONE] and before any finish_reason");
        }
        let mut out = Vec::new();
        self.end(&mut out);
        out
    }

    fn set_limits(&mut self, limits: &ResponseLimits) {
        self.limits = *limits;
    }
}

/// Which assistant messages of the history carry their reasoning back to an OpenAI-compatible
/// server, as `reasoning_content` (the field DeepSeek, Moonshot, Z.ai, vLLM and llama.cpp use).
/// Servers disagree, so it is a setting (`HttpConfig::reasoning_replay`, `agentloop run
/// --reasoning-replay`):
///
/// - DeepSeek's thinking mode (V3.2, V4) requires the reasoning of every assistant message
///   that called tools, in all later requests (HTTP 400 "The `reasoning_content` in the
///   thinking mode must be passed back to the API" without it) and ignores the others;
///   Moonshot (Kimi) and Z.ai (GLM) ask for it too. Vercel AI SDK's OpenAI-compatible
///   provider, and pydantic-ai's profiles for these servers, send it on every message:
///   [`All`](Self::All), the default.
/// - The first `deepseek-reasoner` (R1) refused reasoning of earlier turns in its input, and
///   Qwen's templates drop it before the last user message anyway:
///   [`CurrentTurn`](Self::CurrentTurn) sends only that of the messages after the last user
///   message (the tool loop in progress), as Vercel AI SDK's DeepSeek provider does for R1.
/// - [`Off`](Self::Off) for a server that refuses unknown fields, or to save input tokens.
///
/// A message without reasoning text never gets the field. OpenAI's own models stream no
/// reasoning text over Chat Completions, so their requests do not change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReasoningReplay {
    /// Never sent.
    Off,
    /// Sent on the assistant messages after the last user message.
    CurrentTurn,
    /// Sent on every assistant message that has reasoning (the default).
    #[default]
    All,
}

impl std::str::FromStr for ReasoningReplay {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(ReasoningReplay::Off),
            "current-turn" => Ok(ReasoningReplay::CurrentTurn),
            "all" => Ok(ReasoningReplay::All),
            other => Err(format!(
                "unknown reasoning replay {other:?} (expected off, current-turn or all)"
            )),
        }
    }
}

wire_pub! {
/// Refuses what Chat Completions cannot carry, before anything is sent: a file given by URL
/// (`file` parts take `file_data` or an uploaded `file_id`, not a URL). A
/// [`ErrorKind::BadRequest`](crate::error::ErrorKind::BadRequest), not retried.
pub fn check_request(req: &ModelRequest) -> Result<(), ModelError> {
    for m in req.messages.iter() {
        let Message::User { parts, .. } = m else {
            continue;
        };
        for p in parts {
            if let UserPart::File {
                source: MediaSource::Url { url },
                ..
            } = p
            {
                return Err(ModelError::new(
                    crate::error::ErrorKind::BadRequest,
                    format!(
                        "an OpenAI-compatible request cannot carry a file by URL ({url}): give \
                         its bytes (ContentPart::file_base64)"
                    ),
                ));
            }
        }
    }
    Ok(())
}
}

/// A user message's `content`: the plain string when it has no parts (the wire format it
/// always had), else an array of `text`, `image_url` and `file` parts.
fn user_content(content: &str, parts: &[UserPart]) -> Value {
    if parts.is_empty() {
        return json!(content);
    }
    let text = |text: &str| json!({"type": "text", "text": text});
    Value::Array(user_parts(content, parts, text, |p| match p {
        UserPart::Text { text: t } => text(t),
        UserPart::Image { source } => {
            json!({"type": "image_url", "image_url": {"url": source.to_url()}})
        }
        UserPart::File { source, filename } => {
            let filename = file_name(filename, source);
            json!({"type": "file", "file": {"filename": filename, "file_data": source.to_url()}})
        }
    }))
}

wire_pub! {
/// The Chat Completions request body for `req` (`stream: true`, usage included), reasoning
/// sent back as [`ReasoningReplay::default`] says.
pub fn request_body(req: &ModelRequest, model: &str) -> Value {
    request_body_with(req, model, ReasoningReplay::default())
}
}

wire_pub! {
/// [`request_body`] with the reasoning of earlier assistant messages sent back as `replay` says.
pub fn request_body_with(req: &ModelRequest, model: &str, replay: ReasoningReplay) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = &req.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    let last_user = req
        .messages
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }));
    for (i, m) in req.messages.iter().enumerate() {
        messages.push(match m {
            Message::System { content } => json!({"role": "system", "content": content}),
            Message::User { content, parts } => {
                json!({"role": "user", "content": user_content(content, parts)})
            }
            Message::Assistant(a) => {
                let mut obj = Map::new();
                obj.insert("role".into(), json!("assistant"));
                let send_reasoning = match replay {
                    ReasoningReplay::Off => false,
                    ReasoningReplay::CurrentTurn => last_user.is_none_or(|u| i > u),
                    ReasoningReplay::All => true,
                };
                if send_reasoning && !a.reasoning.is_empty() {
                    obj.insert("reasoning_content".into(), json!(a.reasoning));
                }
                let content = if a.text.is_empty() {
                    a.refusal.clone().map_or(Value::Null, Value::String)
                } else {
                    Value::String(a.text.clone())
                };
                // A tool-calls-only message has `"content": ""`: OpenAI accepts null, absent
                // or empty, but llama.cpp's server (llama-cpp-python 0.3) refuses null (HTTP
                // 500, validation) and its chatml-function-calling template fails on absent.
                let content = if content.is_null() && !a.tool_calls.is_empty() {
                    Value::String(String::new())
                } else {
                    content
                };
                obj.insert("content".into(), content);
                if !a.tool_calls.is_empty() {
                    let calls: Vec<Value> = a
                        .tool_calls
                        .iter()
                        .map(|c| {
                            let args = arguments_text(&c.arguments);
                            json!({"id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": args}})
                        })
                        .collect();
                    obj.insert("tool_calls".into(), Value::Array(calls));
                }
                Value::Object(obj)
            }
            Message::Tool(r) => json!({
                "role": "tool",
                "tool_call_id": r.tool_call_id,
                "content": r.content,
            }),
        });
    }
    let model = crate::provider::http::wire_model(
        crate::provider::http::ProviderKind::OpenAi,
        &req.model,
        model,
    );
    let mut body = json!({
        "model": model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let tool = |t: &ToolSpec| {
        json!({"type": "function", "function": {
            "name": t.name, "description": t.description, "parameters": t.parameters}})
    };
    set_tools(&mut body, req, tool, tool_choice);
    if let Some(t) = req.params.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(m) = req.params.max_tokens {
        body["max_tokens"] = json!(m);
    }
    if let Some(output) = &req.params.output {
        // Structured output: the typed final answer's schema (not `strict`: a schema from
        // `schemars` need not meet strict mode's rules; the runtime checks the answer).
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {"name": schema_name(&output.name), "schema": output.schema},
        });
    }
    body
}
}

/// `name` as `response_format.json_schema.name` accepts it: `[a-zA-Z0-9_-]`, at most 64.
pub(crate) fn schema_name(name: &str) -> String {
    let n: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if n.is_empty() {
        "output".into()
    } else {
        n
    }
}

/// Chat Completions' `tool_choice` for `choice`.
fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
    }
}

/// Chat Completions as a [`Provider`]: `POST {base}/chat/completions` with a bearer key; its
/// own settings are the reasoning replay and the output-cap field.
#[derive(Clone, Debug)]
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) struct ChatCompletions {
    reasoning_replay: ReasoningReplay,
    max_completion_tokens: Option<bool>,
}

impl Provider for ChatCompletions {
    const NAME: &'static str = "openai";
    const KEY_ENV: &'static [&'static str] = &["OPENAI_API_KEY"];
    const BASE_URL_ENV: &'static str = "OPENAI_BASE_URL";
    const DEFAULT_BASE_URL: &'static str = "https://api.openai.com/v1";
    const ENABLED: bool = cfg!(feature = "openai");
    type Normalizer = OpenAiNormalizer;

    fn from_config(config: &HttpConfig) -> Self {
        ChatCompletions {
            reasoning_replay: config.reasoning_replay,
            max_completion_tokens: config.max_completion_tokens,
        }
    }

    fn endpoint(&self, base_url: &str, _model: &str) -> String {
        format!("{base_url}/chat/completions")
    }

    fn headers(&self, api_key: Option<&str>) -> Vec<(String, String)> {
        bearer(api_key)
    }

    fn body(&self, request: &ModelRequest, model: &str) -> Result<Value, ModelError> {
        check_request(request)?;
        let mut body = request_body_with(request, model, self.reasoning_replay);
        let wire = body["model"].as_str().unwrap_or_default();
        let completion = self
            .max_completion_tokens
            .unwrap_or_else(|| crate::provider::openai_responses::is_reasoning_model(wire));
        if completion {
            if let Some(m) = body.as_object_mut().and_then(|b| b.remove("max_tokens")) {
                body["max_completion_tokens"] = m;
            }
        }
        Ok(body)
    }

    fn normalizer_for(&self, request: &ModelRequest) -> OpenAiNormalizer {
        OpenAiNormalizer::new().with_id_prefix(call_id_prefix(request))
    }
}

/// The `authorization: Bearer` header for a key (both OpenAI wire formats).
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) fn bearer(api_key: Option<&str>) -> Vec<(String, String)> {
    api_key
        .map(|key| ("authorization".to_string(), format!("Bearer {key}")))
        .into_iter()
        .collect()
}
