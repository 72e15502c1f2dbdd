//! OpenAI Responses API (`POST {base}/responses`): the stream normalizer
//! (`ResponsesNormalizer`), the request body (`request_body`), both public with feature
//! `wire`, and, with the feature `openai-responses`, the [`Model`](crate::model::Model)
//! implementation (made by
//! [`build_model`](crate::provider::http::build_model)).
//!
//! The request is stateless: `store: false` and the whole conversation as `input` items on
//! every step. For a reasoning model (see `HttpConfig::encrypted_reasoning`) it also asks for
//! `include: ["reasoning.encrypted_content"]`, so the model's reasoning comes back encrypted,
//! is kept in the assistant message and is sent back with it on the next step (what a
//! reasoning model needs to keep its reasoning across tool calls). `reasoning: {effort,
//! summary}` is sent when set. `previous_response_id` chaining is not used.
//!
//! The reading of the `response.*` event stream (each event's JSON `type`, else the SSE
//! `event:` name):
//!
//! - `response.created` / `response.in_progress` → `start-step` (any event starts the step).
//! - `response.output_item.added` with a `message` item: nothing yet; `output_text.delta` →
//!   text, `refusal.delta` → refusal.
//! - `response.output_item.added` with a `function_call` item (`call_id`, `name`) →
//!   `tool-input-start` under the **`call_id`** (the id a `function_call_output` answers);
//!   `function_call_arguments.delta` → `tool-input-delta`; the item's `output_item.done` →
//!   `tool-input-end` + `tool-call` (with `function_call_arguments.done`'s or the finished
//!   item's arguments when no delta carried them).
//! - `reasoning` items: `reasoning_summary_text.delta` (and `reasoning_text.delta`, the raw
//!   reasoning some servers stream) → reasoning, a `\n\n` between two summary parts; the
//!   item's `output_item.done`, when it carries `encrypted_content`, → one
//!   `redacted-reasoning` delta whose data is the item as JSON (`{"type": "reasoning", "id",
//!   "encrypted_content", "summary"}`): the assistant message keeps it and `request_body`
//!   sends it back.
//! - `response.completed` → `finish-step` (usage: `input_tokens`, `output_tokens`,
//!   `input_tokens_details.cached_tokens`, `output_tokens_details.reasoning_tokens`; finish
//!   reason `tool_calls` when the response called tools, else `stop`) + `finish`.
//!   `response.incomplete` ends the same way with `incomplete_details.reason` as the raw
//!   reason (`max_output_tokens` → `length`, `content_filter` → `content_filter`).
//! - `response.failed` (`response.error {code, message}`) and `error` events (`{code,
//!   message}`) are classified like the other providers' in-stream errors
//!   (`classify_stream_error`): `rate_limit_exceeded` → rate limited,
//!   `context_length_exceeded` → context overflow (compaction), `server_error` → server
//!   error, `invalid_request_error` → bad request.
//! - Other events (`content_part.*`, `output_text.done`, `*.annotation.added`, web search…)
//!   are ignored. A data event that is not a JSON object, or a delta event without its
//!   `delta` or for an item that never started, is a `malformed_response`; EOF before
//!   `response.completed` / `response.incomplete` is `incomplete_stream`.
//!
//! # Example
//!
//! The client (nothing is sent before a run asks the model):
//!
//! ```
//! use agentloop::provider::http::{build_model, HttpConfig, ProviderKind};
//!
//! let config = HttpConfig::new(ProviderKind::OpenAiResponses).with_api_key("key");
//! let model = build_model("gpt-5-mini", config)?;
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
    complete_tool_call, error_event_body, start_tool_input, typed_error_event, Block, Stream,
    TokenDetails,
};
use crate::provider::request::{arguments_text, file_name, set_tools, user_parts};
use crate::provider::sse::{SseEof, SseEvent, SseNormalizer};
use crate::tools::ToolSpec;

/// One `response.*` event, the fields the normalizer reads. The per-token events (`delta`)
/// are borrowed; the item and response objects are rare and kept as JSON.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", default, borrow)]
    ty: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    item_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    delta: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
    summary_index: Option<u64>,
    item: Option<Box<Value>>,
    response: Option<Box<Value>>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    input_tokens_details: Option<TokenDetails>,
    output_tokens_details: Option<TokenDetails>,
}

impl WireUsage {
    fn normalize(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens.unwrap_or(0),
            output_tokens: self.output_tokens.unwrap_or(0),
            cache_read_input_tokens: self
                .input_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0),
            cache_creation_input_tokens: 0,
            reasoning_tokens: self
                .output_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
        }
    }
}

#[derive(Debug, Clone)]
struct CallAcc {
    call_id: String,
    name: String,
    args: String,
    done: bool,
}

wire_pub! {
/// Maps a Responses end (`completed`, or `response.incomplete`'s `incomplete_details.reason`)
/// to the normalized reason; `called_tools` says whether the response has function calls.
pub fn map_finish_reason(raw: &str, called_tools: bool) -> FinishReason {
    match raw {
        "completed" if called_tools => FinishReason::ToolCalls,
        "completed" | "stop" => FinishReason::Stop,
        "max_output_tokens" | "max_tokens" | "length" => FinishReason::Length,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}
}

wire_pub! {
/// The Responses stream normalizer: SSE events in, [`MessageDelta`]s out. Pure; see the
/// module docs.
#[derive(Debug, Clone, Default)]
pub struct ResponsesNormalizer {
    stream: Stream,
    block: Block,
    /// The reasoning item whose summary is being streamed, and its last summary part.
    reasoning_part: Option<(String, u64)>,
    calls: Vec<CallAcc>,
    /// Function-call item id (`fc_…`) → index in `calls`.
    by_item: HashMap<String, usize>,
    /// Output items seen (bounded by [`ResponseLimits::max_content_blocks`]).
    items: usize,
    limits: ResponseLimits,
}
}

impl ResponsesNormalizer {
    wire_pub! {
    /// A fresh normalizer for one response.
    pub fn new() -> Self {
        Self::default()
    }
    }

    /// Makes `want` the open run; the summary part is forgotten when the reasoning run ends.
    fn open_block(&mut self, want: Block, out: &mut Vec<MessageDelta>) {
        if self.block != want {
            self.reasoning_part = None;
        }
        self.block.open(want, out);
    }

    fn close_block(&mut self, out: &mut Vec<MessageDelta>) {
        self.open_block(Block::None, out);
    }

    fn count_item(&mut self, out: &mut Vec<MessageDelta>) -> bool {
        self.items += 1;
        if self.items > self.limits.max_content_blocks {
            self.stream
                .fail(too_many_blocks(self.limits.max_content_blocks), out);
            return false;
        }
        true
    }

    fn item_added(&mut self, ev: &SseEvent, item: &Value, out: &mut Vec<MessageDelta>) {
        if !self.count_item(out) {
            return;
        }
        if item.get("type").and_then(Value::as_str) != Some("function_call") {
            return;
        }
        let (Some(item_id), Some(call_id), Some(name)) = (
            item.get("id").and_then(Value::as_str),
            item.get("call_id").and_then(Value::as_str),
            item.get("name").and_then(Value::as_str),
        ) else {
            return self.stream.malformed(
                ev,
                "function_call item without id, call_id or name",
                out,
            );
        };
        self.close_block(out);
        let args = item
            .get("arguments")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        start_tool_input(call_id, name, &args, out);
        self.by_item.insert(item_id.to_string(), self.calls.len());
        self.calls.push(CallAcc {
            call_id: call_id.to_string(),
            name: name.to_string(),
            args,
            done: false,
        });
    }

    fn complete_call(call: &mut CallAcc, final_args: Option<&str>, out: &mut Vec<MessageDelta>) {
        if call.done {
            return;
        }
        call.done = true;
        if call.args.is_empty() {
            if let Some(a) = final_args.filter(|a| !a.is_empty()) {
                call.args = a.to_string();
                out.push(MessageDelta::ToolInputDelta {
                    id: call.call_id.clone(),
                    delta: call.args.clone(),
                });
            }
        }
        let args = std::mem::take(&mut call.args);
        complete_tool_call(call.call_id.clone(), call.name.clone(), args, out);
    }

    fn item_done(&mut self, item: &Value, out: &mut Vec<MessageDelta>) {
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                let pos = item
                    .get("id")
                    .and_then(Value::as_str)
                    .and_then(|id| self.by_item.get(id).copied());
                if let Some(pos) = pos {
                    let args = item.get("arguments").and_then(Value::as_str);
                    Self::complete_call(&mut self.calls[pos], args, out);
                }
            }
            Some("reasoning") => {
                if self.block == Block::Reasoning {
                    self.close_block(out);
                }
                if let Some(enc) = item.get("encrypted_content").and_then(Value::as_str) {
                    let mut kept = Map::new();
                    kept.insert("type".into(), json!("reasoning"));
                    if let Some(id) = item.get("id") {
                        kept.insert("id".into(), id.clone());
                    }
                    kept.insert("encrypted_content".into(), json!(enc));
                    kept.insert(
                        "summary".into(),
                        item.get("summary").cloned().unwrap_or_else(|| json!([])),
                    );
                    out.push(MessageDelta::RedactedReasoning {
                        data: Value::Object(kept).to_string(),
                    });
                }
            }
            Some("message") if self.block == Block::Text => self.close_block(out),
            _ => {}
        }
    }

    fn end(&mut self, response: Option<&Value>, raw: String, out: &mut Vec<MessageDelta>) {
        self.stream.start_step(out);
        self.close_block(out);
        for call in &mut self.calls {
            Self::complete_call(call, None, out);
        }
        let called = !self.calls.is_empty();
        let usage = response
            .and_then(|r| r.get("usage"))
            .filter(|u| u.is_object())
            .and_then(|u| WireUsage::deserialize(u).ok())
            .map(|u| u.normalize());
        let reason = Some(map_finish_reason(&raw, called));
        self.stream.finish_step(reason, Some(raw), usage, out);
    }

    fn event(&mut self, ev: &SseEvent, e: Event<'_>, ty: &str, out: &mut Vec<MessageDelta>) {
        match ty {
            "response.output_text.delta" | "response.refusal.delta" => {
                let Some(delta) = e.delta else {
                    return self.stream.malformed(ev, "delta event without delta", out);
                };
                if delta.is_empty() {
                    return;
                }
                if ty == "response.refusal.delta" {
                    out.push(MessageDelta::Refusal {
                        text: delta.into_owned(),
                    });
                } else {
                    self.open_block(Block::Text, out);
                    out.push(MessageDelta::TextDelta {
                        text: delta.into_owned(),
                    });
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let Some(delta) = e.delta else {
                    return self.stream.malformed(ev, "delta event without delta", out);
                };
                let item = e.item_id.as_deref().unwrap_or_default().to_string();
                let part = e.summary_index.unwrap_or(0);
                let next_part = matches!(&self.reasoning_part,
                    Some((i, p)) if *i == item && *p != part);
                self.open_block(Block::Reasoning, out);
                if next_part {
                    out.push(MessageDelta::ReasoningDelta {
                        text: "\n\n".into(),
                    });
                }
                self.reasoning_part = Some((item, part));
                if !delta.is_empty() {
                    out.push(MessageDelta::ReasoningDelta {
                        text: delta.into_owned(),
                    });
                }
            }
            "response.function_call_arguments.delta" => {
                let (Some(item), Some(delta)) = (e.item_id, e.delta) else {
                    return self.stream.malformed(
                        ev,
                        "arguments delta without item_id or delta",
                        out,
                    );
                };
                let Some(&pos) = self.by_item.get(item.as_ref()) else {
                    return self.stream.malformed(
                        ev,
                        "arguments delta for an item that never started",
                        out,
                    );
                };
                let call = &mut self.calls[pos];
                if call.done || delta.is_empty() {
                    return;
                }
                call.args.push_str(&delta);
                if call.args.len() > self.limits.max_tool_argument_bytes {
                    let err = tool_arguments_too_large(
                        &call.call_id,
                        self.limits.max_tool_argument_bytes,
                    );
                    return self.stream.fail(err, out);
                }
                out.push(MessageDelta::ToolInputDelta {
                    id: call.call_id.clone(),
                    delta: delta.into_owned(),
                });
            }
            "response.function_call_arguments.done" => {
                let pos = e
                    .item_id
                    .as_deref()
                    .and_then(|i| self.by_item.get(i).copied());
                if let Some(pos) = pos {
                    Self::complete_call(&mut self.calls[pos], e.arguments.as_deref(), out);
                }
            }
            "response.output_item.added" => match e.item {
                Some(item) => self.item_added(ev, &item, out),
                None => self
                    .stream
                    .malformed(ev, "output_item.added without item", out),
            },
            "response.output_item.done" => match e.item {
                Some(item) => self.item_done(&item, out),
                None => self
                    .stream
                    .malformed(ev, "output_item.done without item", out),
            },
            "response.completed" => self.end(e.response.as_deref(), "completed".into(), out),
            "response.incomplete" => {
                let raw = e
                    .response
                    .as_deref()
                    .and_then(|r| r.pointer("/incomplete_details/reason"))
                    .and_then(Value::as_str)
                    .unwrap_or("incomplete")
                    .to_string();
                self.end(e.response.as_deref(), raw, out);
            }
            "response.failed" => {
                let err = e
                    .response
                    .as_deref()
                    .and_then(|r| r.get("error"))
                    .filter(|e| e.is_object())
                    .cloned()
                    .unwrap_or_else(|| json!({"message": "response.failed without an error"}));
                self.stream
                    .fail(classify_stream_error(&json!({ "error": err })), out);
            }
            // response.created, in_progress, content parts, *.done, annotations, others.
            _ => {}
        }
    }
}

impl SseNormalizer for ResponsesNormalizer {
    fn feed_into(&mut self, ev: &SseEvent, out: &mut Vec<MessageDelta>) {
        let data = ev.data.trim();
        if !self.stream.next_event() || data.is_empty() || data == "[DONE]" {
            return;
        }
        if ev.event.as_deref() == Some("error") {
            let e = classify_stream_error(&error_event_body(data));
            return self.stream.fail(e, out);
        }
        let shape = "a Responses stream event";
        let Some(mut e) = self.stream.parse::<Event<'_>>(ev, data, shape, out) else {
            return;
        };
        self.stream.start_step(out);
        let ty = e.ty.take().unwrap_or(Cow::Borrowed(ev.event_type()));
        if ty == "error" {
            return self.stream.fail(typed_error_event(data), out);
        }
        self.event(ev, e, &ty, out);
    }

    fn finish(&mut self, eof: SseEof) -> Vec<MessageDelta> {
        self.stream.cut_short(eof, "response.completed")
    }

    fn set_limits(&mut self, limits: &ResponseLimits) {
        self.limits = *limits;
    }
}

wire_pub! {
/// The reasoning settings of a Responses request: [`HttpConfig`]'s
/// `reasoning_effort`, `reasoning_summary` and `encrypted_reasoning` (CLI
/// `--reasoning-effort`, `--reasoning-summary`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResponsesReasoning {
    /// `reasoning.effort`; `None` sends none.
    pub effort: Option<String>,
    /// `reasoning.summary`; `None` asks for none.
    pub summary: Option<String>,
    /// Whether to ask for `reasoning.encrypted_content` and send kept reasoning items back;
    /// `None`: for the reasoning models by name.
    pub encrypted: Option<bool>,
}
}

/// Whether `model` (after a `vendor/` prefix) is one of OpenAI's reasoning model families:
/// `o1`, `o3`, `o4`, `gpt-5`, alone or followed by `-` or `.` (`o4-mini`, `gpt-5.1-codex`).
/// These ask for encrypted reasoning here, and take their output cap as
/// `max_completion_tokens` over Chat Completions (they refuse `max_tokens`).
pub(crate) fn is_reasoning_model(model: &str) -> bool {
    let m = model.rsplit('/').next().unwrap_or(model);
    ["o1", "o3", "o4", "gpt-5"].iter().any(|p| {
        m.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '.']))
    })
}

wire_pub! {
/// The reasoning item kept in an assistant message's `redacted_reasoning` entry `data`, if it
/// is one (a JSON object of type `reasoning`, as [`ResponsesNormalizer`] stores it); other
/// providers' opaque data is not.
pub fn reasoning_item(data: &str) -> Option<Value> {
    if !data.starts_with('{') {
        return None;
    }
    let v: Value = serde_json::from_str(data).ok()?;
    (v.get("type").and_then(Value::as_str) == Some("reasoning")).then_some(v)
}
}

/// A user message's `content`: the plain string without parts, else `input_text`,
/// `input_image` (`image_url`: a URL or a `data:` URL) and `input_file` (`file_data` with a
/// filename, or `file_url`) parts.
fn user_content(content: &str, parts: &[UserPart]) -> Value {
    if parts.is_empty() {
        return json!(content);
    }
    let text = |text: &str| json!({"type": "input_text", "text": text});
    Value::Array(user_parts(content, parts, text, |p| match p {
        UserPart::Text { text: t } => text(t),
        UserPart::Image { source } => json!({"type": "input_image", "image_url": source.to_url()}),
        UserPart::File {
            source: MediaSource::Url { url },
            ..
        } => json!({"type": "input_file", "file_url": url}),
        UserPart::File { source, filename } => {
            let filename = file_name(filename, source);
            json!({"type": "input_file", "filename": filename, "file_data": source.to_url()})
        }
    }))
}

wire_pub! {
/// The Responses request body for `req` with the default [`ResponsesReasoning`] (see
/// [`request_body_with`]).
pub fn request_body(req: &ModelRequest, model: &str) -> Value {
    request_body_with(req, model, &ResponsesReasoning::default())
}
}

wire_pub! {
/// The Responses request body for `req`: `instructions` from the system prompt, the history
/// as `input` items, `stream: true`, `store: false`, and as `reasoning` says:
/// `include: ["reasoning.encrypted_content"]` and `reasoning: {effort, summary}`.
///
/// Items: a system message of the history → `{role: system}`; a user message → `{role:
/// user}` with its parts; an assistant message → its kept reasoning items (see
/// [`reasoning_item`], only when encrypted reasoning is on), its text as `{role: assistant}`, its tool calls as `function_call`
/// items `{call_id, name, arguments}`; a tool result → `function_call_output {call_id,
/// output}`. Tools are `function` tools with `strict: false` (the API's default is strict,
/// which refuses schemas that do not meet its rules; the runtime checks arguments itself);
/// a typed answer asks for `text.format` `json_schema` (not strict either).
pub fn request_body_with(req: &ModelRequest, model: &str, reasoning: &ResponsesReasoning) -> Value {
    let model = crate::provider::http::wire_model(
        crate::provider::http::ProviderKind::OpenAiResponses,
        &req.model,
        model,
    );
    let encrypted = reasoning
        .encrypted
        .unwrap_or_else(|| is_reasoning_model(model));
    let mut input = Vec::new();
    for m in req.messages.iter() {
        match m {
            Message::System { content } => {
                input.push(json!({"role": "system", "content": content}));
            }
            Message::User { content, parts } => {
                input.push(json!({"role": "user", "content": user_content(content, parts)}));
            }
            Message::Assistant(a) => {
                if encrypted {
                    input.extend(
                        a.redacted_reasoning
                            .iter()
                            .map(String::as_str)
                            .filter_map(reasoning_item),
                    );
                }
                let text = if a.text.is_empty() {
                    a.refusal.clone().unwrap_or_default()
                } else {
                    a.text.clone()
                };
                if !text.is_empty() {
                    input.push(json!({"role": "assistant", "content": text}));
                }
                for c in &a.tool_calls {
                    let args = arguments_text(&c.arguments);
                    input.push(json!({"type": "function_call", "call_id": c.id,
                                      "name": c.name, "arguments": args}));
                }
            }
            Message::Tool(r) => input.push(json!({
                "type": "function_call_output",
                "call_id": r.tool_call_id,
                "output": r.content,
            })),
        }
    }
    let mut body = json!({
        "model": model,
        "input": input,
        "stream": true,
        "store": false,
    });
    if encrypted {
        body["include"] = json!(["reasoning.encrypted_content"]);
    }
    if reasoning.effort.is_some() || reasoning.summary.is_some() {
        let mut r = Map::new();
        if let Some(e) = &reasoning.effort {
            r.insert("effort".into(), json!(e));
        }
        if let Some(s) = &reasoning.summary {
            r.insert("summary".into(), json!(s));
        }
        body["reasoning"] = Value::Object(r);
    }
    if let Some(system) = &req.system {
        body["instructions"] = json!(system);
    }
    let tool = |t: &ToolSpec| {
        json!({"type": "function", "name": t.name, "description": t.description,
               "parameters": t.parameters, "strict": false})
    };
    set_tools(&mut body, req, tool, tool_choice);
    if let Some(t) = req.params.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(m) = req.params.max_tokens {
        body["max_output_tokens"] = json!(m);
    }
    if let Some(output) = &req.params.output {
        body["text"] = json!({"format": {
            "type": "json_schema",
            "name": crate::provider::openai::schema_name(&output.name),
            "schema": output.schema,
            "strict": false,
        }});
    }
    body
}
}

/// The Responses API's `tool_choice` for `choice`.
fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Tool(name) => json!({"type": "function", "name": name}),
    }
}

/// The Responses API as a [`Provider`]: `POST {base}/responses` with a bearer key; its own
/// settings are the reasoning ones.
#[derive(Clone, Debug)]
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) struct Responses {
    reasoning: ResponsesReasoning,
}

impl Provider for Responses {
    const NAME: &'static str = "openai-responses";
    const KEY_ENV: &'static [&'static str] = &["OPENAI_API_KEY"];
    const BASE_URL_ENV: &'static str = "OPENAI_BASE_URL";
    const DEFAULT_BASE_URL: &'static str = "https://api.openai.com/v1";
    const ENABLED: bool = cfg!(feature = "openai-responses");
    type Normalizer = ResponsesNormalizer;

    fn from_config(config: &HttpConfig) -> Self {
        Responses {
            reasoning: config.responses_reasoning(),
        }
    }

    fn endpoint(&self, base_url: &str, _model: &str) -> String {
        format!("{base_url}/responses")
    }

    fn headers(&self, api_key: Option<&str>) -> Vec<(String, String)> {
        crate::provider::openai::bearer(api_key)
    }

    fn body(&self, request: &ModelRequest, model: &str) -> Result<Value, ModelError> {
        Ok(request_body_with(request, model, &self.reasoning))
    }
}

#[cfg(test)]
mod tests;
