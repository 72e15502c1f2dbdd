//! Importing OpenTelemetry GenAI spans (OTLP JSON) as traces, one per OpenTelemetry trace
//! (`agentloop trace import --from otel-genai`).
//!
//! The file is an OTLP/JSON export, `{"resourceSpans": [{"scopeSpans": [{"spans": [...]}]}]}`.
//! A span whose attribute `gen_ai.operation.name` is `chat` is one model call. Its
//! conversation is read from the GenAI semantic conventions' attributes
//! `gen_ai.input.messages` and `gen_ai.output.messages` (JSON text, or an OTLP array: a list
//! of `{role, parts}` with parts `{type: "text", content}`, `{type: "tool_call", id, name,
//! arguments}` and `{type: "tool_call_response", id, response}`), preceded by
//! `gen_ai.system_instructions` when present; or, from older instrumentations, from the span
//! events `gen_ai.system.message`, `gen_ai.user.message`, `gen_ai.assistant.message`,
//! `gen_ai.tool.message` (the input) and `gen_ai.choice` (the output), whose body (the event
//! attribute `body`, `gen_ai.event.content` as JSON text, or the event's attributes
//! themselves) is `{content, tool_calls, id}` (a choice: `{message: {...}}`).
//!
//! A chat span's tokens (`gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, and the
//! cache and reasoning counts `gen_ai.usage.cache_read.input_tokens`,
//! `gen_ai.usage.cache_creation.input_tokens`, `gen_ai.usage.reasoning.output_tokens`) become
//! its step's usage, and the tools it offered (`gen_ai.tool.definitions`) the trace's tools with
//! their schemas (the last span's that has them). A `tool_call_response` part's `status`
//! (agentloop's export writes it for a call that did not complete) is the result's status; its
//! text is `response` (pydantic-ai writes `result`). pydantic-ai's
//! `gen_ai.usage.details.{cache_read,cache_write,reasoning}_tokens` stand in for the
//! conventions' cache and reasoning counts.
//!
//! An OpenInference LLM span (`openinference.span.kind` = `LLM`, as
//! `openinference-instrumentation-openai` writes) is a chat span too: its conversation is read
//! from the flattened `llm.input_messages.N.message.*` and `llm.output_messages.N.message.*`
//! (`role`, `content`, `contents.K.message_content.{type,text}`,
//! `tool_calls.M.tool_call.{id,function.name,function.arguments}`, `tool_call_id`), its tokens
//! from `llm.token_count.{prompt,completion,prompt_details.cache_read,prompt_details.cache_write,
//! completion_details.reasoning}`, its tools from `llm.tools.N.tool.json_schema`, its model from
//! `llm.model_name`.
//!
//! The request settings (`gen_ai.request.*` but the model; OpenInference's
//! `llm.invocation_parameters`) of the last chat span become the trace's model parameters
//! (`temperature`; `max_tokens` or `max_completion_tokens`), so every model request of the
//! trace carries them; any other setting (`seed`, `top_p`, …) is named in a finding, as are
//! settings that differ between the chat spans and tool calls made without any tool
//! definition on the spans (the tools are then offered with permissive schemas).
//!
//! Spans are grouped by `traceId`, in the order the ids first appear. Within a trace the chat
//! spans are taken in start-time order (`startTimeUnixNano`); the last one's input followed by
//! its output is the conversation, each earlier span's input being a prefix of it. That
//! conversation is rewritten as an OpenAI chat-completions message array and imported by
//! [`crate::import::openai_chat`], so the machines, the findings and the trace are those of
//! the chat import. What the trace cannot hold is named in a finding: parts other than text
//! and tool calls (reasoning, blobs, files, images), an earlier call's input that is not a prefix of
//! the conversation, more than one output choice. Spans of other operations
//! (`execute_tool`, `embeddings`, agents) are not imported. Pure: the caller reads the file
//! and writes the traces.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use agentloop_core::tool_spec::ToolSpec;
use agentloop_core::ModelParams;

use crate::import::{openai_chat, Finding, ImportError, ImportOptions, Imported};

/// One OpenTelemetry trace of the export, imported.
#[derive(Clone, Debug, PartialEq)]
pub struct OtelTrace {
    /// The trace id (hex, as in the export).
    pub trace_id: String,
    /// How many chat spans the trace has.
    pub chat_spans: usize,
    /// The trace, the replies and the findings of the import.
    pub imported: Imported,
}

impl OtelTrace {
    /// A file name for the trace: its trace id, with characters other than ASCII letters,
    /// digits, `-`, `_` and `.` replaced by `_`.
    pub fn file_stem(&self) -> String {
        crate::import::safe_stem(&self.trace_id, "trace")
    }
}

/// Why an export could not be imported: its shape, or one trace's messages.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// The file is not an OTLP JSON export with GenAI chat spans.
    #[error("not OTLP JSON with GenAI chat spans: {0}")]
    Export(String),
    /// A trace's conversation could not be imported.
    #[error("trace {trace_id}: {error}")]
    Trace {
        /// The trace id.
        trace_id: String,
        /// Why (the index is that of the rewritten chat message, 0 for the trace itself).
        error: ImportError,
    },
}

/// An OTLP `AnyValue` (`{stringValue}`, `{intValue}`, `{arrayValue: {values}}`, …) as JSON.
fn any_value(v: &Value) -> Value {
    let Some(o) = v.as_object() else {
        return v.clone();
    };
    if let Some(s) = o.get("stringValue") {
        return s.clone();
    }
    if let Some(b) = o.get("boolValue") {
        return b.clone();
    }
    if let Some(i) = o.get("intValue") {
        return match i {
            Value::String(s) => s.parse::<i64>().map(Value::from).unwrap_or(i.clone()),
            other => other.clone(),
        };
    }
    if let Some(d) = o.get("doubleValue") {
        return d.clone();
    }
    if let Some(b) = o.get("bytesValue") {
        return b.clone();
    }
    if let Some(a) = o.get("arrayValue") {
        return Value::Array(
            a.get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(any_value)
                .collect(),
        );
    }
    if let Some(kv) = o.get("kvlistValue") {
        return Value::Object(key_values(kv.get("values")));
    }
    Value::Null
}

/// An OTLP list of `{key, value}` as a JSON object.
fn key_values(list: Option<&Value>) -> Map<String, Value> {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|kv| {
            let key = kv.get("key")?.as_str()?;
            Some((
                key.to_string(),
                kv.get("value").map(any_value).unwrap_or(Value::Null),
            ))
        })
        .collect()
}

/// A structured attribute: JSON text parsed, anything else as it is.
fn structured(v: &Value, what: &str) -> Result<Value, String> {
    match v {
        Value::String(s) => {
            serde_json::from_str(s).map_err(|e| format!("`{what}` is not JSON text: {e}"))
        }
        other => Ok(other.clone()),
    }
}

/// One chat span: its order key and its conversation as chat-completions messages.
struct ChatSpan {
    start: u128,
    order: usize,
    model: Option<String>,
    /// The span's tokens (`gen_ai.usage.*`), as agentloop's `Usage` fields.
    usage: Option<Value>,
    /// The tools offered (`gen_ai.tool.definitions`, `llm.tools`).
    tools: Option<Vec<ToolSpec>>,
    /// The request settings (`gen_ai.request.*`, `llm.invocation_parameters`), by short name.
    settings: Map<String, Value>,
    input: Vec<Value>,
    output: Vec<Value>,
    findings: Vec<String>,
}

/// A chat-completions tool call: its arguments as JSON text (`{}` when absent).
fn chat_tool_call(name: Value, arguments: Option<&Value>, id: Option<&str>) -> Value {
    let arguments = match arguments {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => "{}".into(),
        Some(v) => v.to_string(),
    };
    let mut call = json!({
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    });
    if let Some(id) = id {
        call["id"] = json!(id);
    }
    call
}

/// Rewrites semantic-convention messages (`{role, parts}`) as chat-completions messages,
/// noting what was left out.
fn semconv_messages(
    messages: &Value,
    what: &str,
    out: &mut Vec<Value>,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let list = messages
        .as_array()
        .ok_or_else(|| format!("`{what}` is not a list of messages"))?;
    for (i, m) in list.iter().enumerate() {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("`{what}` message {i} has no `role`"))?;
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut responses = Vec::new();
        let mut dropped = Vec::new();
        for p in m
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match p.get("type").and_then(Value::as_str) {
                Some("text") => match p.get("content") {
                    Some(Value::String(t)) => text.push_str(t),
                    Some(other) => text.push_str(&other.to_string()),
                    None => {}
                },
                Some("tool_call") => {
                    let name = p.get("name").and_then(Value::as_str).ok_or_else(|| {
                        format!("`{what}` message {i}: a tool call has no `name`")
                    })?;
                    calls.push(chat_tool_call(
                        json!(name),
                        p.get("arguments"),
                        p.get("id").and_then(Value::as_str),
                    ));
                }
                Some("tool_call_response") => {
                    // `response` in the conventions; pydantic-ai writes `result`.
                    let content = match p.get("response").or_else(|| p.get("result")) {
                        Some(Value::String(s)) => s.clone(),
                        None | Some(Value::Null) => String::new(),
                        Some(v) => v.to_string(),
                    };
                    let mut msg = json!({"role": "tool", "content": content});
                    if let Some(id) = p.get("id").and_then(Value::as_str) {
                        msg["tool_call_id"] = json!(id);
                    }
                    // agentloop's export names a call that did not complete.
                    if let Some(status) = p.get("status").and_then(Value::as_str) {
                        msg["status"] = json!(status);
                    }
                    responses.push(msg);
                }
                kind => dropped.push(kind.unwrap_or("untyped").to_string()),
            }
        }
        if !dropped.is_empty() {
            notes.push(format!(
                "`{what}` message {i} ({role}): parts not imported (a trace holds text and tool \
                 calls): {}",
                dropped.join(", ")
            ));
        }
        if !responses.is_empty() {
            if !text.is_empty() || !calls.is_empty() {
                notes.push(format!(
                    "`{what}` message {i} ({role}): text or tool calls beside tool responses \
                     not imported"
                ));
            }
            out.extend(responses);
            continue;
        }
        let mut chat = json!({"role": role, "content": text});
        if !calls.is_empty() {
            chat["tool_calls"] = Value::Array(calls);
        }
        out.push(chat);
    }
    Ok(())
}

/// The body of an older GenAI span event: the `body` attribute, `gen_ai.event.content` as
/// JSON text, or the event's attributes themselves.
fn event_body(attributes: &Map<String, Value>) -> Value {
    for key in ["body", "gen_ai.event.content"] {
        if let Some(v) = attributes.get(key) {
            return match v {
                Value::String(s) => serde_json::from_str(s)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({"content": s})),
                other => other.clone(),
            };
        }
    }
    Value::Object(attributes.clone())
}

/// An older event body (`{content, tool_calls, id}`) as a chat-completions message.
fn event_message(role: &str, body: &Value) -> Value {
    let content = match body.get("content") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => String::new(),
        Some(v) => v.to_string(),
    };
    let mut chat = json!({"role": role, "content": content});
    match role {
        "assistant" => {
            let calls: Vec<Value> = body
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| {
                    let f = c.get("function").unwrap_or(c);
                    chat_tool_call(
                        f.get("name").cloned().unwrap_or(Value::Null),
                        f.get("arguments"),
                        c.get("id").and_then(Value::as_str),
                    )
                })
                .collect();
            if !calls.is_empty() {
                chat["tool_calls"] = Value::Array(calls);
            }
        }
        "tool" => {
            if let Some(id) = body.get("id").and_then(Value::as_str) {
                chat["tool_call_id"] = json!(id);
            }
        }
        _ => {}
    }
    chat
}

/// A chat span's tokens (`gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`,
/// `gen_ai.usage.cache_read.input_tokens`, `gen_ai.usage.cache_creation.input_tokens`,
/// `gen_ai.usage.reasoning.output_tokens`) as agentloop's `Usage` fields; `None` without the
/// first two.
fn span_usage(attributes: &Map<String, Value>) -> Option<Value> {
    let n = |k: &str| attributes.get(k).and_then(Value::as_u64);
    // pydantic-ai's names for the cache and reasoning counts.
    let either = |a: &str, b: &str| n(a).or_else(|| n(b));
    let (input, output) = (
        n("gen_ai.usage.input_tokens"),
        n("gen_ai.usage.output_tokens"),
    );
    if input.is_none() && output.is_none() {
        return None;
    }
    Some(json!({
        "input_tokens": input.unwrap_or(0),
        "output_tokens": output.unwrap_or(0),
        "cache_read_input_tokens": either("gen_ai.usage.cache_read.input_tokens",
            "gen_ai.usage.details.cache_read_tokens").unwrap_or(0),
        "cache_creation_input_tokens": either("gen_ai.usage.cache_creation.input_tokens",
            "gen_ai.usage.details.cache_write_tokens").unwrap_or(0),
        "reasoning_tokens": either("gen_ai.usage.reasoning.output_tokens",
            "gen_ai.usage.details.reasoning_tokens").unwrap_or(0),
    }))
}

/// The tools a chat span offered (`gen_ai.tool.definitions`: `{type, name, description,
/// parameters}` each, JSON text or an OTLP array); `None` without the attribute. A definition
/// without a name is a finding.
fn tool_definitions(
    attributes: &Map<String, Value>,
    findings: &mut Vec<String>,
) -> Result<Option<Vec<ToolSpec>>, String> {
    let Some(v) = attributes.get("gen_ai.tool.definitions") else {
        return Ok(None);
    };
    let list = structured(v, "gen_ai.tool.definitions")?;
    let list = list
        .as_array()
        .ok_or("`gen_ai.tool.definitions` is not a list")?;
    Ok(Some(tool_specs(list, "gen_ai.tool.definitions", findings)))
}

/// Tool definitions, in the conventions' flat form (`{type, name, description, parameters}`)
/// or the chat-completions one (`{type, function: {...}}`), as tool specs; one without a name
/// is a finding.
fn tool_specs(list: &[Value], what: &str, findings: &mut Vec<String>) -> Vec<ToolSpec> {
    let mut tools = Vec::new();
    for (i, t) in list.iter().enumerate() {
        // The conventions' flat form, or the chat-completions one (`{type, function: {...}}`).
        let t = t.get("function").unwrap_or(t);
        let Some(name) = t.get("name").and_then(Value::as_str) else {
            findings.push(format!("`{what}` entry {i} has no name; not imported"));
            continue;
        };
        tools.push(ToolSpec {
            name: name.to_string(),
            description: t
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            parameters: t
                .get("parameters")
                .cloned()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({"type": "object"})),
        });
    }
    tools
}

/// A chat span's request settings by their short names (`temperature`, `max_tokens`, `seed`,
/// …): the attributes `gen_ai.request.*` but the model, and the keys of OpenInference's
/// `llm.invocation_parameters` (JSON text) but the model and what a request carries anyway
/// (`messages`, `tools`, `stream`, `stream_options`).
fn request_settings(
    attributes: &Map<String, Value>,
    findings: &mut Vec<String>,
) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, v) in attributes {
        if let Some(name) = k.strip_prefix("gen_ai.request.") {
            if name != "model" {
                out.insert(name.to_string(), v.clone());
            }
        }
    }
    if let Some(v) = attributes.get("llm.invocation_parameters") {
        match structured(v, "llm.invocation_parameters") {
            Ok(Value::Object(o)) => out.extend(o.into_iter().filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "model" | "messages" | "tools" | "stream" | "stream_options"
                )
            })),
            _ => findings
                .push("`llm.invocation_parameters` is not a JSON object; not imported".into()),
        }
    }
    out
}

/// The request settings a trace has a place for (its model parameters: `temperature`, and
/// `max_tokens` or `max_completion_tokens`), and the others as `name = value`.
fn model_params(settings: &Map<String, Value>) -> (ModelParams, Vec<String>) {
    let mut params = ModelParams::default();
    let mut rest = Vec::new();
    for (k, v) in settings {
        let tokens = v.as_u64().and_then(|n| u32::try_from(n).ok());
        match k.as_str() {
            "temperature" if v.as_f64().is_some() => params.temperature = v.as_f64(),
            "max_tokens" | "max_completion_tokens" if tokens.is_some() => {
                params.max_tokens = tokens
            }
            _ => rest.push(format!("{k} = {v}")),
        }
    }
    (params, rest)
}

/// The text of an OpenInference `content`: a string as it is, anything else as JSON.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The attributes under `PREFIX.N.` grouped by `N` (in index order), each group keyed by the
/// rest of the name; a name whose `N` is not a number is a finding.
fn indexed(
    attributes: &Map<String, Value>,
    prefix: &str,
    findings: &mut Vec<String>,
) -> BTreeMap<usize, Map<String, Value>> {
    let mut out: BTreeMap<usize, Map<String, Value>> = BTreeMap::new();
    let lead = format!("{prefix}.");
    for (k, v) in attributes {
        let Some(rest) = k.strip_prefix(&lead) else {
            continue;
        };
        match rest
            .split_once('.')
            .and_then(|(n, f)| Some((n.parse().ok()?, f)))
        {
            Some((n, field)) => {
                out.entry(n)
                    .or_default()
                    .insert(field.to_string(), v.clone());
            }
            None => findings.push(format!("`{k}` is not `{prefix}.N.…`; not imported")),
        }
    }
    out
}

/// OpenInference's flattened messages under `prefix` (`llm.input_messages` or
/// `llm.output_messages`: `N.message.role`, `.content`, `.contents.K.message_content.{type,
/// text}`, `.tool_calls.M.tool_call.{id, function.name, function.arguments}`,
/// `.tool_call_id`) as chat-completions messages, noting what was left out.
fn flattened_messages(
    attributes: &Map<String, Value>,
    prefix: &str,
    out: &mut Vec<Value>,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    for (n, fields) in indexed(attributes, prefix, notes) {
        let role = fields
            .get("message.role")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("`{prefix}.{n}` has no `message.role`"))?;
        let mut text = fields
            .get("message.content")
            .map(text_of)
            .unwrap_or_default();
        let mut dropped = Vec::new();
        let parts = indexed(&fields, "message.contents", notes);
        for (k, part) in &parts {
            match part.get("message_content.type").and_then(Value::as_str) {
                None | Some("text") => text.push_str(
                    &part
                        .get("message_content.text")
                        .map(text_of)
                        .unwrap_or_default(),
                ),
                Some(kind) => dropped.push(format!("contents {k} ({kind})")),
            }
        }
        let mut calls = Vec::new();
        for (m, call) in indexed(&fields, "message.tool_calls", notes) {
            let name = call
                .get("tool_call.function.name")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("`{prefix}.{n}` tool call {m} has no name"))?;
            calls.push(chat_tool_call(
                json!(name),
                call.get("tool_call.function.arguments"),
                call.get("tool_call.id").and_then(Value::as_str),
            ));
        }
        for field in fields.keys() {
            let known = matches!(
                field.as_str(),
                "message.role" | "message.content" | "message.tool_call_id" | "message.name"
            ) || field.starts_with("message.contents.")
                || field.starts_with("message.tool_calls.");
            if !known {
                dropped.push(field.clone());
            }
        }
        if !dropped.is_empty() {
            notes.push(format!(
                "`{prefix}.{n}` ({role}): not imported (a trace holds text and tool calls): {}",
                dropped.join(", ")
            ));
        }
        let mut chat = json!({"role": role, "content": text});
        if !calls.is_empty() {
            chat["tool_calls"] = Value::Array(calls);
        }
        if let Some(id) = fields.get("message.tool_call_id").and_then(Value::as_str) {
            chat["tool_call_id"] = json!(id);
        }
        out.push(chat);
    }
    Ok(())
}

/// An OpenInference span's tokens (`llm.token_count.prompt`, `.completion`,
/// `.prompt_details.cache_read`, `.prompt_details.cache_write`,
/// `.completion_details.reasoning`) as agentloop's `Usage` fields; `None` without the first two.
fn openinference_usage(attributes: &Map<String, Value>) -> Option<Value> {
    let n = |k: &str| {
        attributes
            .get(&format!("llm.token_count.{k}"))
            .and_then(Value::as_u64)
    };
    let (input, output) = (n("prompt"), n("completion"));
    if input.is_none() && output.is_none() {
        return None;
    }
    Some(json!({
        "input_tokens": input.unwrap_or(0),
        "output_tokens": output.unwrap_or(0),
        "cache_read_input_tokens": n("prompt_details.cache_read").unwrap_or(0),
        "cache_creation_input_tokens": n("prompt_details.cache_write").unwrap_or(0),
        "reasoning_tokens": n("completion_details.reasoning").unwrap_or(0),
    }))
}

/// The tools an OpenInference span offered (`llm.tools.N.tool.json_schema`, JSON text in the
/// chat-completions form); `None` without them.
fn openinference_tools(
    attributes: &Map<String, Value>,
    findings: &mut Vec<String>,
) -> Result<Option<Vec<ToolSpec>>, String> {
    let tools = indexed(attributes, "llm.tools", findings);
    if tools.is_empty() {
        return Ok(None);
    }
    let mut list = Vec::new();
    for (i, t) in tools {
        match t.get("tool.json_schema") {
            Some(v) => list.push(structured(v, "llm.tools")?),
            None => findings.push(format!(
                "`llm.tools.{i}` has no `tool.json_schema`; not imported"
            )),
        }
    }
    Ok(Some(tool_specs(&list, "llm.tools", findings)))
}

/// One chat span's model and conversation (see the module docs).
fn chat_span(
    span: &Value,
    attributes: &Map<String, Value>,
    order: usize,
) -> Result<ChatSpan, String> {
    let start = match span.get("startTimeUnixNano") {
        Some(Value::String(s)) => s.parse::<u128>().unwrap_or(0),
        Some(Value::Number(n)) => n.as_u64().map(u128::from).unwrap_or(0),
        _ => 0,
    };
    let model = [
        "gen_ai.response.model",
        "gen_ai.request.model",
        "llm.model_name",
    ]
    .iter()
    .find_map(|k| attributes.get(*k)?.as_str().map(str::to_string));
    let mut input = Vec::new();
    let mut output = Vec::new();
    let mut findings = Vec::new();
    let has_attributes = attributes.contains_key("gen_ai.input.messages")
        || attributes.contains_key("gen_ai.output.messages");
    let openinference = is_openinference_llm(attributes);
    if openinference && !has_attributes {
        flattened_messages(attributes, "llm.input_messages", &mut input, &mut findings)?;
        flattened_messages(
            attributes,
            "llm.output_messages",
            &mut output,
            &mut findings,
        )?;
    } else if has_attributes {
        if let Some(v) = attributes.get("gen_ai.system_instructions") {
            let parts = structured(v, "gen_ai.system_instructions")?;
            let system = json!([{"role": "system", "parts": parts}]);
            semconv_messages(
                &system,
                "gen_ai.system_instructions",
                &mut input,
                &mut findings,
            )?;
        }
        if let Some(v) = attributes.get("gen_ai.input.messages") {
            let v = structured(v, "gen_ai.input.messages")?;
            semconv_messages(&v, "gen_ai.input.messages", &mut input, &mut findings)?;
        }
        if let Some(v) = attributes.get("gen_ai.output.messages") {
            let v = structured(v, "gen_ai.output.messages")?;
            semconv_messages(&v, "gen_ai.output.messages", &mut output, &mut findings)?;
        }
    } else {
        for e in span
            .get("events")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let attrs = key_values(e.get("attributes"));
            let body = event_body(&attrs);
            let role = match e.get("name").and_then(Value::as_str) {
                Some("gen_ai.system.message") => "system",
                Some("gen_ai.user.message") => "user",
                Some("gen_ai.assistant.message") => "assistant",
                Some("gen_ai.tool.message") => "tool",
                Some("gen_ai.choice") => {
                    let message = body.get("message").unwrap_or(&body);
                    output.push(event_message("assistant", message));
                    continue;
                }
                _ => continue,
            };
            input.push(event_message(role, &body));
        }
    }
    if output.len() > 1 {
        findings.push(format!(
            "{} output messages (choices): only the first imported",
            output.len()
        ));
        output.truncate(1);
    }
    let (usage, tools) = if openinference && !has_attributes {
        (
            openinference_usage(attributes),
            openinference_tools(attributes, &mut findings)?,
        )
    } else {
        (
            span_usage(attributes),
            tool_definitions(attributes, &mut findings)?,
        )
    };
    Ok(ChatSpan {
        start,
        order,
        model,
        usage,
        tools,
        settings: request_settings(attributes, &mut findings),
        input,
        output,
        findings,
    })
}

/// Whether a span is an OpenInference LLM span (`openinference.span.kind` = `LLM`).
fn is_openinference_llm(attributes: &Map<String, Value>) -> bool {
    attributes
        .get("openinference.span.kind")
        .and_then(Value::as_str)
        == Some("LLM")
}

/// Imports every OpenTelemetry trace of the OTLP JSON export `export` that has GenAI chat
/// spans (see the module docs), in the order their ids first appear. Each trace records the
/// last chat span's model (`gen_ai.response.model`, else `gen_ai.request.model`, else
/// `options.model`), `options.session`, and the run id `options.run_id-TRACEID`.
pub fn otel_genai(export: &Value, options: &ImportOptions) -> Result<Vec<OtelTrace>, OtelError> {
    let bad = |m: &str| OtelError::Export(m.to_string());
    let resource_spans = export
        .as_object()
        .ok_or_else(|| bad("not a JSON object"))?
        .get("resourceSpans")
        .ok_or_else(|| bad("no `resourceSpans`"))?
        .as_array()
        .ok_or_else(|| bad("`resourceSpans` is not an array"))?;
    // Trace ids in first-seen order, with their chat spans.
    let mut traces: Vec<(String, Vec<ChatSpan>)> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut order = 0usize;
    for rs in resource_spans {
        let scopes = match rs.get("scopeSpans") {
            Some(Value::Array(s)) => s,
            None | Some(Value::Null) => continue,
            Some(_) => return Err(bad("`scopeSpans` is not an array")),
        };
        for scope in scopes {
            let spans = match scope.get("spans") {
                Some(Value::Array(s)) => s,
                None | Some(Value::Null) => continue,
                Some(_) => return Err(bad("`spans` is not an array")),
            };
            for span in spans {
                order += 1;
                let attributes = key_values(span.get("attributes"));
                let chat = attributes
                    .get("gen_ai.operation.name")
                    .and_then(Value::as_str)
                    == Some("chat");
                if !chat && !is_openinference_llm(&attributes) {
                    continue;
                }
                let trace_id = span
                    .get("traceId")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("a chat span has no `traceId`"))?
                    .to_string();
                let chat =
                    chat_span(span, &attributes, order).map_err(|message| OtelError::Trace {
                        trace_id: trace_id.clone(),
                        error: ImportError { index: 0, message },
                    })?;
                match index.get(&trace_id) {
                    Some(&i) => traces[i].1.push(chat),
                    None => {
                        index.insert(trace_id.clone(), traces.len());
                        traces.push((trace_id, vec![chat]));
                    }
                }
            }
        }
    }
    if traces.is_empty() {
        return Err(bad(
            "no span with `gen_ai.operation.name` = `chat` or `openinference.span.kind` = `LLM` \
             (an export of other spans only)",
        ));
    }
    let mut out = Vec::with_capacity(traces.len());
    for (trace_id, mut spans) in traces {
        spans.sort_by_key(|s| (s.start, s.order));
        let failed = |error: ImportError| OtelError::Trace {
            trace_id: trace_id.clone(),
            error,
        };
        let chat_spans = spans.len();
        // Each span's tokens go to its output: the n-th assistant message of the conversation
        // when there are as many as spans, else only the last span's to the last message.
        let usages: Vec<Option<Value>> = spans.iter().map(|s| s.usage.clone()).collect();
        let tools = spans.iter().rev().find_map(|s| s.tools.clone());
        let Some(last) = spans.pop() else {
            continue;
        };
        let (params, unkept) = model_params(&last.settings);
        let mut conversation = last.input;
        conversation.extend(last.output);
        let assistants: Vec<usize> = conversation
            .iter()
            .enumerate()
            .filter(|(_, m)| m["role"] == "assistant")
            .map(|(i, _)| i)
            .collect();
        if assistants.len() == usages.len() {
            for (i, u) in assistants.iter().zip(&usages) {
                if let Some(u) = u {
                    conversation[*i]["usage"] = u.clone();
                }
            }
        } else if let (Some(i), Some(Some(u))) = (assistants.last(), usages.last()) {
            conversation[*i]["usage"] = u.clone();
        }
        if conversation.is_empty() {
            return Err(failed(ImportError {
                index: 0,
                message: "the chat spans carry no messages (was content capture on?)".into(),
            }));
        }
        let mut findings = Vec::new();
        let mut note = |text: String| {
            findings.push(Finding {
                message: None,
                step: None,
                text,
            })
        };
        for (n, s) in spans.iter().enumerate() {
            for f in &s.findings {
                note(format!("chat span {}: {f}", n + 1));
            }
            let is_prefix =
                s.input.len() <= conversation.len() && conversation[..s.input.len()] == s.input[..];
            if !is_prefix {
                note(format!(
                    "chat span {}'s input is not a prefix of the last span's conversation; \
                     only the last span's is imported",
                    n + 1
                ));
            }
        }
        for f in &last.findings {
            note(format!("chat span {chat_spans}: {f}"));
        }
        if spans.iter().any(|s| s.settings != last.settings) {
            note("the chat spans' request settings differ; the last span's are kept".to_string());
        }
        if !unkept.is_empty() {
            note(format!(
                "request settings not kept (a trace's model parameters are the temperature and \
                 max tokens): {}",
                unkept.join(", ")
            ));
        }
        let calls_tools = conversation.iter().any(|m| {
            m.get("tool_calls")
                .is_some_and(|c| c.as_array().is_some_and(|c| !c.is_empty()))
        });
        if tools.is_none() && options.tools.is_empty() && calls_tools {
            note(
                "the spans carry no tool definitions: the tools called are offered with \
                 permissive schemas"
                    .to_string(),
            );
        }
        let trace_options = ImportOptions {
            agentloop: options.agentloop.clone(),
            model: last.model.unwrap_or_else(|| options.model.clone()),
            session: options.session.clone(),
            run_id: format!("{}-{trace_id}", options.run_id),
            tools: tools.unwrap_or_else(|| options.tools.clone()),
            params,
        };
        let mut imported =
            openai_chat(&Value::Array(conversation), &trace_options).map_err(failed)?;
        findings.append(&mut imported.findings);
        imported.findings = findings;
        out.push(OtelTrace {
            trace_id,
            chat_spans,
            imported,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::Transcript;

    fn export() -> Value {
        serde_json::from_str(include_str!("../../tests/fixtures/otel/genai.json"))
            .expect("the fixture is JSON")
    }

    /// A fixture the instrumentation itself wrote (scripts/fixtures/otel_fixtures.py).
    fn fixture(name: &str) -> Value {
        let path = format!(
            "{}/../tests/fixtures/otel/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).expect("the fixture is there");
        serde_json::from_str(&text).expect("the fixture is JSON")
    }

    /// Imports a real fixture: one trace of two model calls, the tool round, and the answer,
    /// replaying identically; returns it with its findings' texts.
    fn import_fixture(name: &str) -> (OtelTrace, Vec<String>) {
        let mut traces = otel_genai(&fixture(name), &ImportOptions::default()).expect("import");
        assert_eq!(traces.len(), 1, "{name}");
        let t = traces.remove(0);
        assert_eq!(
            agentloop_core::trace::replay(&t.imported.trace),
            None,
            "{name}"
        );
        assert_eq!(t.chat_spans, 2, "{name}");
        let transcript = Transcript::from_trace(&t.imported.trace);
        assert_eq!(transcript.summary.steps, 2, "{name}");
        assert_eq!(transcript.summary.tool_calls, 1, "{name}");
        assert_eq!(
            transcript.summary.final_text.as_deref(),
            Some("It is 18°C and sunny in Paris."),
            "{name}"
        );
        let call = &t.imported.replies[0].tool_calls[0];
        assert_eq!(
            (call.0.as_str(), call.1.as_str()),
            ("call_weather_1", "get_weather")
        );
        assert_eq!(call.2, r#"{"city":"Paris"}"#, "{name}");
        let records = serde_json::to_string(&t.imported.trace.records).expect("json");
        assert!(
            records.contains("18°C and sunny in Paris."),
            "{name}: the tool result"
        );
        assert!(
            records.contains("You are a weather assistant."),
            "{name}: the system prompt"
        );
        // Usage per step, as the mock server reported it.
        let usage: Vec<(u64, u64)> = t
            .imported
            .replies
            .iter()
            .map(|r| {
                let u = r.usage.as_ref().expect("usage on every step");
                (u.input_tokens, u.output_tokens)
            })
            .collect();
        assert_eq!(usage, [(61, 17), (98, 12)], "{name}");
        let header = &t.imported.trace.header;
        assert_eq!(header.config.model, "gpt-4o-mini-2024-07-18", "{name}");
        assert_eq!(header.config.params.temperature, Some(0.2), "{name}");
        assert_eq!(header.config.params.max_tokens, Some(200), "{name}");
        let findings = t.imported.findings.iter().map(|f| f.text.clone()).collect();
        (t, findings)
    }

    const SEED: &str = "request settings not kept (a trace's model parameters are the temperature \
                        and max tokens): seed = 7";

    fn tool_schema(t: &OtelTrace) -> Value {
        let tools = &t.imported.trace.header.config.tools;
        assert_eq!(tools.len(), 1);
        let tool = tools.iter().next().expect("one tool");
        assert_eq!(tool.name, "get_weather");
        tool.parameters.clone()
    }

    #[test]
    fn pydantic_ai_spans_import_with_usage_tool_schemas_and_settings() {
        let (t, findings) = import_fixture("pydantic_ai");
        assert_eq!(findings, [SEED]);
        assert_eq!(tool_schema(&t)["required"], json!(["city"]));
        assert_eq!(
            t.imported
                .trace
                .header
                .config
                .tools
                .iter()
                .next()
                .map(|t| t.description.as_str()),
            Some("The current weather in a city.")
        );
    }

    #[test]
    fn openinference_spans_import_with_usage_tool_schemas_and_settings() {
        let (t, findings) = import_fixture("openinference");
        assert_eq!(findings, [SEED]);
        assert_eq!(tool_schema(&t)["properties"]["city"]["type"], "string");
    }

    #[test]
    fn openai_v2_spans_carry_no_tool_definitions_a_finding() {
        let (t, findings) = import_fixture("openai_v2");
        assert_eq!(
            findings,
            [
                SEED,
                "the spans carry no tool definitions: the tools called are offered with \
                 permissive schemas"
            ]
        );
        assert_eq!(tool_schema(&t), json!({"type": "object"}));
    }

    /// An OpenInference LLM span from its flattened attributes.
    fn openinference_span(attributes: &[(&str, Value)]) -> Value {
        let mut list = vec![json!({"key": "openinference.span.kind",
                                   "value": {"stringValue": "LLM"}})];
        list.extend(
            attributes
                .iter()
                .map(|(k, v)| json!({"key": k, "value": v})),
        );
        json!({"resourceSpans": [{"scopeSpans": [{"spans": [
            {"traceId": "oi", "attributes": list}]}]}]})
    }

    #[test]
    fn openinference_parts_and_settings_it_cannot_hold_are_findings() {
        let s = |t: &str| json!({"stringValue": t});
        let export = openinference_span(&[
            ("llm.input_messages.0.message.role", s("user")),
            (
                "llm.input_messages.0.message.contents.0.message_content.type",
                s("text"),
            ),
            (
                "llm.input_messages.0.message.contents.0.message_content.text",
                s("What is this?"),
            ),
            (
                "llm.input_messages.0.message.contents.1.message_content.type",
                s("image"),
            ),
            ("llm.output_messages.0.message.role", s("assistant")),
            ("llm.output_messages.0.message.content", s("A cat.")),
            (
                "llm.invocation_parameters",
                s(r#"{"model":"m","top_p":0.5,"temperature":1}"#),
            ),
        ]);
        let traces = otel_genai(&export, &ImportOptions::default()).expect("import");
        let t = &traces[0].imported;
        assert_eq!(agentloop_core::trace::replay(&t.trace), None);
        assert_eq!(t.trace.header.config.params.temperature, Some(1.0));
        let findings: Vec<&str> = t.findings.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(
            findings,
            [
                "chat span 1: `llm.input_messages.0` (user): not imported (a trace holds text \
                 and tool calls): contents 1 (image)",
                "request settings not kept (a trace's model parameters are the temperature and \
                 max tokens): top_p = 0.5"
            ]
        );
        assert_eq!(
            Transcript::from_trace(&t.trace)
                .summary
                .final_text
                .as_deref(),
            Some("A cat.")
        );
    }

    #[test]
    fn a_malformed_openinference_span_is_a_typed_error() {
        let s = |t: &str| json!({"stringValue": t});
        for attributes in [
            vec![("llm.input_messages.0.message.content", s("no role"))],
            vec![
                ("llm.input_messages.0.message.role", s("assistant")),
                (
                    "llm.input_messages.0.message.tool_calls.0.tool_call.id",
                    s("c1"),
                ),
            ],
            vec![
                ("llm.input_messages.0.message.role", s("user")),
                ("llm.tools.0.tool.json_schema", s("{not json")),
            ],
        ] {
            let export = openinference_span(&attributes);
            assert!(
                matches!(
                    otel_genai(&export, &ImportOptions::default()),
                    Err(OtelError::Trace { .. })
                ),
                "{attributes:?}"
            );
        }
    }

    #[test]
    fn every_trace_id_becomes_a_trace_that_replays() {
        let traces = otel_genai(&export(), &ImportOptions::default()).expect("import");
        assert_eq!(traces.len(), 2);
        for t in &traces {
            assert_eq!(agentloop_core::trace::replay(&t.imported.trace), None);
            assert_eq!(t.imported.trace.header.config.model, "gpt-4o-mini");
        }
        let first = &traces[0];
        assert_eq!(first.trace_id, "5b8efff798038103d269b633813fc60c");
        assert_eq!(first.file_stem(), "5b8efff798038103d269b633813fc60c");
        assert_eq!(first.chat_spans, 2);
        // The final answer's reasoning part is not imported, and the spans name no tool
        // definitions: two findings.
        assert_eq!(
            first.imported.findings.len(),
            2,
            "{:?}",
            first.imported.findings
        );
        assert!(first.imported.findings[0].text.contains("reasoning"));
        assert!(first.imported.findings[1]
            .text
            .contains("no tool definitions"));
        let t = Transcript::from_trace(&first.imported.trace);
        assert_eq!(t.summary.steps, 2);
        assert_eq!(t.summary.tool_calls, 1);
        assert_eq!(
            t.summary.final_text.as_deref(),
            Some("It is 18°C in Paris.")
        );
        assert_eq!(t.tools.len(), 1);
        assert_eq!(t.tools[0].name, "get_weather");
        let call = &first.imported.replies[0].tool_calls[0];
        assert_eq!(call.0, "call_w1");
        assert_eq!(call.2, r#"{"city":"Paris"}"#);
        // The tool's result is in the trace.
        assert!(serde_json::to_string(&first.imported.trace.records)
            .expect("json")
            .contains("18°C, sunny"));
        assert!(serde_json::to_string(&first.imported.trace.records)
            .expect("json")
            .contains("run-imported-5b8efff798038103d269b633813fc60c"));
    }

    #[test]
    fn older_span_events_are_read_too() {
        let traces = otel_genai(&export(), &ImportOptions::default()).expect("import");
        let second = &traces[1];
        assert_eq!(second.trace_id, "0af7651916cd43dd8448eb211c80319c");
        let t = Transcript::from_trace(&second.imported.trace);
        assert_eq!(
            t.summary.final_text.as_deref(),
            Some("Hello! How can I help?")
        );
        assert_eq!(t.summary.tool_calls, 0);
        assert_eq!(second.imported.findings, []);
        assert_eq!(second.chat_spans, 1);
        let json = serde_json::to_string(&second.imported.trace.records).expect("json");
        assert!(json.contains("You are friendly.") && json.contains("Hi there"));
    }

    /// An older span-event export of a tool round: the tool message names its call by `id`,
    /// and the import pairs the result with that call.
    #[test]
    fn older_span_events_carry_a_tool_round() {
        let event = |name: &str, content: Value| {
            json!({"name": name, "attributes": [
                {"key": "gen_ai.event.content", "value": {"stringValue": content.to_string()}}]})
        };
        let call = json!({"id": "call_w1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}});
        let export = json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "aa", "spanId": "01", "name": "chat gpt-4o-mini",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o-mini"}}],
        "events": [
            event("gen_ai.user.message", json!({"content": "Weather in Paris?"})),
            event("gen_ai.assistant.message", json!({"content": null, "tool_calls": [call]})),
            event("gen_ai.tool.message", json!({"content": "18°C, sunny", "id": "call_w1"})),
            event("gen_ai.choice", json!({"index": 0, "finish_reason": "stop",
                "message": {"content": "It is 18°C in Paris."}})),
        ]}]}]}]});
        let traces = otel_genai(&export, &ImportOptions::default()).expect("import");
        assert_eq!(traces.len(), 1);
        let imported = &traces[0].imported;
        assert_eq!(agentloop_core::trace::replay(&imported.trace), None);
        let findings: Vec<&str> = imported.findings.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(
            findings,
            [
                "the spans carry no tool definitions: the tools called are offered with \
              permissive schemas"
            ]
        );
        let t = Transcript::from_trace(&imported.trace);
        let tools: Vec<(String, String, Option<String>)> = t
            .items
            .iter()
            .filter_map(|i| match i {
                crate::transcript::Item::Tool {
                    id, name, result, ..
                } => Some((id.clone(), name.clone(), result.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            tools,
            [(
                "call_w1".to_string(),
                "get_weather".to_string(),
                Some("18°C, sunny".to_string())
            )]
        );
        assert_eq!(
            t.summary.final_text.as_deref(),
            Some("It is 18°C in Paris.")
        );
    }

    #[test]
    fn an_earlier_input_that_is_not_a_prefix_and_extra_choices_are_findings() {
        let span = |start: &str, input: &str, output: &str| {
            json!({"traceId": "t1", "startTimeUnixNano": start, "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                {"key": "gen_ai.input.messages", "value": {"stringValue": input}},
                {"key": "gen_ai.output.messages", "value": {"stringValue": output}}
            ]})
        };
        let user =
            |t: &str| format!(r#"{{"role":"user","parts":[{{"type":"text","content":"{t}"}}]}}"#);
        let answer = |t: &str| {
            format!(r#"{{"role":"assistant","parts":[{{"type":"text","content":"{t}"}}]}}"#)
        };
        let export = json!({"resourceSpans": [{"scopeSpans": [{"spans": [
            span("2", &format!("[{}]", user("b")), &format!("[{},{}]", answer("B"), answer("C"))),
            span("1", &format!("[{}]", user("a")), &format!("[{}]", answer("A"))),
        ]}]}]});
        let traces = otel_genai(&export, &ImportOptions::default()).expect("import");
        assert_eq!(traces.len(), 1);
        let t = &traces[0];
        let texts: Vec<&str> = t
            .imported
            .findings
            .iter()
            .map(|f| f.text.as_str())
            .collect();
        assert_eq!(texts.len(), 2, "{texts:?}");
        assert!(
            texts[0].contains("chat span 1's input is not a prefix"),
            "{texts:?}"
        );
        assert!(texts[1].contains("2 output messages"), "{texts:?}");
        let transcript = Transcript::from_trace(&t.imported.trace);
        assert_eq!(transcript.summary.final_text.as_deref(), Some("B"));
    }

    #[test]
    fn a_malformed_export_is_a_typed_error() {
        let o = ImportOptions::default();
        for bad in [
            json!([]),
            json!({}),
            json!({"resourceSpans": 3}),
            json!({"resourceSpans": [{"scopeSpans": [{"spans": "x"}]}]}),
            json!({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "a"}]}]}]}),
        ] {
            assert!(
                matches!(otel_genai(&bad, &o), Err(OtelError::Export(_))),
                "{bad}"
            );
        }
        let span = |messages: &str| {
            json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
            "traceId": "ab", "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                {"key": "gen_ai.input.messages", "value": {"stringValue": messages}}
            ]}]}]}]})
        };
        match otel_genai(&span("[{\"parts\": []}]"), &o) {
            Err(e @ OtelError::Trace { .. }) => assert_eq!(
                e.to_string(),
                "trace ab: message 0: `gen_ai.input.messages` message 0 has no `role`"
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            otel_genai(&span("{not json"), &o),
            Err(OtelError::Trace { .. })
        ));
        assert!(matches!(
            otel_genai(&span("[]"), &o),
            Err(OtelError::Trace { .. })
        ));
    }
}
