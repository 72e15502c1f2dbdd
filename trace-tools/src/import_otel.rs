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
//! (agentloop's export writes it for a call that did not complete) is the result's status.
//!
//! Spans are grouped by `traceId`, in the order the ids first appear. Within a trace the chat
//! spans are taken in start-time order (`startTimeUnixNano`); the last one's input followed by
//! its output is the conversation, each earlier span's input being a prefix of it. That
//! conversation is rewritten as an OpenAI chat-completions message array and imported by
//! [`crate::import::openai_chat`], so the machines, the findings and the trace are those of
//! the chat import. What the trace cannot hold is named in a finding: parts other than text
//! and tool calls (reasoning, blobs, files), an earlier call's input that is not a prefix of
//! the conversation, more than one output choice. Spans of other operations
//! (`execute_tool`, `embeddings`, agents) are not imported. Pure: the caller reads the file
//! and writes the traces.

use serde_json::{json, Map, Value};

use agentloop_core::tool_spec::ToolSpec;

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
    /// The tools offered (`gen_ai.tool.definitions`).
    tools: Option<Vec<ToolSpec>>,
    input: Vec<Value>,
    output: Vec<Value>,
    findings: Vec<String>,
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
                    let arguments = match p.get("arguments") {
                        Some(Value::String(s)) => s.clone(),
                        None | Some(Value::Null) => "{}".into(),
                        Some(v) => v.to_string(),
                    };
                    let mut call = json!({
                        "type": "function",
                        "function": {"name": name, "arguments": arguments},
                    });
                    if let Some(id) = p.get("id").and_then(Value::as_str) {
                        call["id"] = json!(id);
                    }
                    calls.push(call);
                }
                Some("tool_call_response") => {
                    let content = match p.get("response") {
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
                    let arguments = match f.get("arguments") {
                        Some(Value::String(s)) => s.clone(),
                        None | Some(Value::Null) => "{}".into(),
                        Some(v) => v.to_string(),
                    };
                    let mut call = json!({
                        "type": "function",
                        "function": {"name": f.get("name").cloned().unwrap_or(Value::Null),
                                     "arguments": arguments},
                    });
                    if let Some(id) = c.get("id").and_then(Value::as_str) {
                        call["id"] = json!(id);
                    }
                    call
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
        "cache_read_input_tokens": n("gen_ai.usage.cache_read.input_tokens").unwrap_or(0),
        "cache_creation_input_tokens": n("gen_ai.usage.cache_creation.input_tokens").unwrap_or(0),
        "reasoning_tokens": n("gen_ai.usage.reasoning.output_tokens").unwrap_or(0),
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
    let mut tools = Vec::new();
    for (i, t) in list.iter().enumerate() {
        // The conventions' flat form, or the chat-completions one (`{type, function: {...}}`).
        let t = t.get("function").unwrap_or(t);
        let Some(name) = t.get("name").and_then(Value::as_str) else {
            findings.push(format!(
                "`gen_ai.tool.definitions` entry {i} has no name; not imported"
            ));
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
    Ok(Some(tools))
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
    let model = ["gen_ai.response.model", "gen_ai.request.model"]
        .iter()
        .find_map(|k| attributes.get(*k)?.as_str().map(str::to_string));
    let mut input = Vec::new();
    let mut output = Vec::new();
    let mut findings = Vec::new();
    let has_attributes = attributes.contains_key("gen_ai.input.messages")
        || attributes.contains_key("gen_ai.output.messages");
    if has_attributes {
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
    Ok(ChatSpan {
        start,
        order,
        model,
        usage: span_usage(attributes),
        tools: tool_definitions(attributes, &mut findings)?,
        input,
        output,
        findings,
    })
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
                if attributes
                    .get("gen_ai.operation.name")
                    .and_then(Value::as_str)
                    != Some("chat")
                {
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
            "no span with `gen_ai.operation.name` = `chat` (an export of other spans only)",
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
        let trace_options = ImportOptions {
            agentloop: options.agentloop.clone(),
            model: last.model.unwrap_or_else(|| options.model.clone()),
            session: options.session.clone(),
            run_id: format!("{}-{trace_id}", options.run_id),
            tools: tools.unwrap_or_else(|| options.tools.clone()),
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
        // The final answer's reasoning part is not imported: a finding.
        assert_eq!(
            first.imported.findings.len(),
            1,
            "{:?}",
            first.imported.findings
        );
        assert!(first.imported.findings[0].text.contains("reasoning"));
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
        assert_eq!(imported.findings, []);
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
