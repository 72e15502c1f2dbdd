//! Traces as OpenTelemetry spans in the GenAI semantic conventions, OTLP/JSON (`agentloop
//! trace export --format otlp`, and `agentloop run --otlp-endpoint URL`, which sends the same
//! spans to a collector when the run ends).
//!
//! Each trace becomes one OpenTelemetry trace: per run an `invoke_agent` span (the root), per
//! committed model step a `chat {model}` span and per tool call an `execute_tool {name}`
//! span, both children of the run's. The attributes are the conventions':
//!
//! * every span: `gen_ai.operation.name`, `gen_ai.conversation.id` (the session),
//!   `agentloop.run_id`;
//! * `invoke_agent`: `gen_ai.agent.name` (`agentloop`), `gen_ai.request.model`, the run's
//!   summed `gen_ai.usage.*`, `agentloop.outcome` and `agentloop.reason`; status ERROR with the
//!   reason when the run did not complete;
//! * `chat`: `gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.provider.name` (when the
//!   model is named `provider:model`), `gen_ai.request.max_tokens` and
//!   `gen_ai.request.temperature` (when set), `gen_ai.response.finish_reasons`, and the step's
//!   tokens: `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`,
//!   `gen_ai.usage.cache_read.input_tokens`, `gen_ai.usage.cache_creation.input_tokens`,
//!   `gen_ai.usage.reasoning.output_tokens` (the last three when not zero), `agentloop.step`,
//!   `agentloop.attempt`;
//! * `execute_tool`: `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type`
//!   (`function`), `agentloop.tool.status`; status ERROR when the call did not complete.
//!
//! Content is opt-in ([`OtlpOptions::include_content`]), as the conventions ask: then a chat
//! span also carries `gen_ai.system_instructions`, `gen_ai.input.messages`,
//! `gen_ai.output.messages` (JSON text in the conventions' `{role, parts}` form, the parts
//! `text`, `reasoning`, `tool_call` and `tool_call_response`; a response that did not complete
//! carries agentloop's `status`) and `gen_ai.tool.definitions`, and a tool span
//! `gen_ai.tool.call.arguments` and `gen_ai.tool.call.result`. Such an export imports back
//! with [`crate::import_otel`] (`trace import --from otel-genai`) as the same conversation,
//! with each step's usage and the tools' schemas.
//!
//! Ids are derived from the trace (a hash of its session and first run id, and of each span's
//! run, step or call id), so exporting a trace twice gives the same file. Times come from
//! [`SpanTimes`]: a run's timing sidecar (`T.times.jsonl`) or the events of a live run. A span
//! the timing does not cover is placed by the trace's own order: its first and last trace
//! records' indices, as milliseconds after [`OtlpOptions::base_ms`]. Pure: the caller reads
//! the files, the clock and the network.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Map, Value};

use agentloop_core::agent_event::{AgentEvent, EventEnvelope, Outcome};
use agentloop_core::effect::Effect;
use agentloop_core::entry::Entry;
use agentloop_core::event::Event;
use agentloop_core::message::{
    AssistantMessage, FinishReason, Message, ToolResult, ToolStatus, Usage,
};
use agentloop_core::model::ModelRequest;
use agentloop_core::trace::{Trace, TraceRecord};

/// The instrumentation scope the spans are reported under.
pub const SCOPE_NAME: &str = "agentloop";

/// Settings of an export.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OtlpOptions {
    /// Whether the spans carry the messages, tool arguments and results, and the tools'
    /// definitions (off by default: they may hold personal or secret data).
    pub include_content: bool,
    /// Milliseconds since the Unix epoch that a span without timing is placed after (see the
    /// module docs): the trace file's modification time, or the live run's start.
    pub base_ms: u64,
}

/// Wall-clock start and end, in milliseconds since the Unix epoch, of the runs, steps and
/// tool calls a run's timing recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpanTimes {
    runs: HashMap<String, (Option<u64>, Option<u64>)>,
    steps: HashMap<(String, u32), (Option<u64>, Option<u64>)>,
    tools: HashMap<(String, String), (Option<u64>, Option<u64>)>,
}

impl SpanTimes {
    /// The times of a timing sidecar's text (one JSON object a line, `{"ts_ms", "run_id",
    /// "type", "step"?, "tool_call_id"?}`); malformed lines are skipped.
    pub fn from_sidecar(text: &str) -> SpanTimes {
        let mut t = SpanTimes::default();
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let (Some(ts), Some(run), Some(kind)) = (
                v["ts_ms"].as_u64(),
                v["run_id"].as_str(),
                v["type"].as_str(),
            ) else {
                continue;
            };
            let step = v["step"].as_u64().and_then(|s| u32::try_from(s).ok());
            t.mark(ts, run, kind, step, v["tool_call_id"].as_str());
        }
        t
    }

    /// Notes the time of one event of a live run (its envelope's `ts_ms`); events other than
    /// a run's, a request's and a tool call's start and end are ignored.
    pub fn observe(&mut self, env: &EventEnvelope) {
        let (kind, step, call) = match &env.event {
            AgentEvent::RunStart {} => ("run_start", None, None),
            AgentEvent::RunEnd { .. } => ("run_end", None, None),
            AgentEvent::RequestStart {
                model_call_index, ..
            } => ("request_start", Some(*model_call_index), None),
            AgentEvent::ResponseComplete {
                model_call_index, ..
            } => ("response_complete", Some(*model_call_index), None),
            AgentEvent::ToolStart { tool_call_id, .. } => {
                ("tool_start", None, Some(tool_call_id.as_str()))
            }
            AgentEvent::ToolEnd { tool_call_id, .. } => {
                ("tool_end", None, Some(tool_call_id.as_str()))
            }
            _ => return,
        };
        self.mark(env.ts_ms, &env.run_id, kind, step, call);
    }

    /// The earliest time noted, if any.
    pub fn earliest(&self) -> Option<u64> {
        let starts = self.runs.values().chain(self.steps.values());
        starts.chain(self.tools.values()).filter_map(|s| s.0).min()
    }

    fn mark(&mut self, ts: u64, run: &str, kind: &str, step: Option<u32>, call: Option<&str>) {
        // A start is the first one seen (a retried step starts at its first request), an end
        // the last.
        fn start(slot: &mut (Option<u64>, Option<u64>), ts: u64) {
            slot.0.get_or_insert(ts);
        }
        fn end(slot: &mut (Option<u64>, Option<u64>), ts: u64) {
            slot.1 = Some(ts);
        }
        let run = run.to_string();
        match (kind, step, call) {
            ("run_start", _, _) => start(self.runs.entry(run).or_default(), ts),
            ("run_end", _, _) => end(self.runs.entry(run).or_default(), ts),
            ("request_start", Some(s), _) => start(self.steps.entry((run, s)).or_default(), ts),
            ("response_complete", Some(s), _) => end(self.steps.entry((run, s)).or_default(), ts),
            ("tool_start", _, Some(c)) => {
                start(self.tools.entry((run, c.to_string())).or_default(), ts)
            }
            ("tool_end", _, Some(c)) => {
                end(self.tools.entry((run, c.to_string())).or_default(), ts)
            }
            _ => {}
        }
    }
}

/// FNV-1a over `parts` (each followed by a 0 byte), from `seed`.
fn fnv(seed: u64, parts: &[&str]) -> u64 {
    let mut h = seed;
    for p in parts {
        for b in p.bytes().chain([0]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    // An all-zero id is invalid in OpenTelemetry.
    h.max(1)
}

/// A 16-byte trace id (32 hex digits) derived from `parts`.
fn trace_id(parts: &[&str]) -> String {
    format!(
        "{:016x}{:016x}",
        fnv(0xcbf2_9ce4_8422_2325, parts),
        fnv(0x8422_2325_cbf2_9ce4, parts)
    )
}

/// An 8-byte span id (16 hex digits) derived from `parts`.
fn span_id(parts: &[&str]) -> String {
    format!("{:016x}", fnv(0xcbf2_9ce4_8422_2325, parts))
}

/// An OTLP attribute `{key, value}` of a JSON value (strings, integers, doubles, booleans;
/// arrays of them; anything else as JSON text).
fn attribute(key: &str, value: Value) -> Value {
    json!({"key": key, "value": any_value(value)})
}

fn any_value(value: Value) -> Value {
    match value {
        Value::String(s) => json!({"stringValue": s}),
        Value::Bool(b) => json!({"boolValue": b}),
        Value::Number(n) => match n.as_i64() {
            // OTLP/JSON writes 64-bit integers as strings.
            Some(i) => json!({"intValue": i.to_string()}),
            None => json!({"doubleValue": n.as_f64()}),
        },
        Value::Array(a) => {
            json!({"arrayValue": {"values": a.into_iter().map(any_value).collect::<Vec<_>>()}})
        }
        other => json!({"stringValue": other.to_string()}),
    }
}

/// The attributes of a step's (or a run's) tokens.
fn usage_attributes(u: &Usage, out: &mut Vec<Value>) {
    out.push(attribute(
        "gen_ai.usage.input_tokens",
        json!(u.input_tokens),
    ));
    out.push(attribute(
        "gen_ai.usage.output_tokens",
        json!(u.output_tokens),
    ));
    for (key, n) in [
        (
            "gen_ai.usage.cache_read.input_tokens",
            u.cache_read_input_tokens,
        ),
        (
            "gen_ai.usage.cache_creation.input_tokens",
            u.cache_creation_input_tokens,
        ),
        ("gen_ai.usage.reasoning.output_tokens", u.reasoning_tokens),
    ] {
        if n > 0 {
            out.push(attribute(key, json!(n)));
        }
    }
}

fn finish_reason(f: Option<FinishReason>) -> &'static str {
    match f {
        Some(FinishReason::Stop) => "stop",
        Some(FinishReason::Length) => "length",
        Some(FinishReason::ToolCalls) => "tool_calls",
        Some(FinishReason::ContentFilter) => "content_filter",
        Some(FinishReason::Other) | None => "other",
    }
}

/// An assistant message in the conventions' `{role, parts}` form.
fn assistant_parts(m: &AssistantMessage) -> Value {
    let mut parts = Vec::new();
    if !m.reasoning.is_empty() {
        parts.push(json!({"type": "reasoning", "content": m.reasoning}));
    }
    if !m.text.is_empty() {
        parts.push(json!({"type": "text", "content": m.text}));
    }
    for c in &m.tool_calls {
        parts.push(
            json!({"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}),
        );
    }
    let mut out = json!({"role": "assistant", "parts": parts});
    if m.finish_reason.is_some() {
        out["finish_reason"] = json!(finish_reason(m.finish_reason));
    }
    out
}

fn tool_response(r: &ToolResult) -> Value {
    let mut part =
        json!({"type": "tool_call_response", "id": r.tool_call_id, "response": r.content});
    if r.status != ToolStatus::Completed {
        part["status"] = json!(r.status.as_str());
    }
    json!({"role": "tool", "parts": [part]})
}

/// A message in the conventions' `{role, parts}` form.
fn message_parts(m: &Message) -> Value {
    match m {
        Message::System { content } => {
            json!({"role": "system", "parts": [{"type": "text", "content": content}]})
        }
        user @ Message::User { .. } => json!({"role": "user", "parts": [
            {"type": "text", "content": user.user_text().unwrap_or_default()}]}),
        Message::Assistant(a) => assistant_parts(a),
        Message::Tool(r) => tool_response(r),
    }
}

/// A span in OTLP/JSON.
struct Span {
    trace_id: String,
    span_id: String,
    parent: Option<String>,
    name: String,
    /// OTLP `SpanKind`: 1 internal, 3 client.
    kind: u8,
    start_ms: u64,
    end_ms: u64,
    attributes: Vec<Value>,
    /// An error's description (status ERROR), or none (status OK).
    error: Option<String>,
}

impl Span {
    fn into_json(self) -> Value {
        let nanos = |ms: u64| (u128::from(ms) * 1_000_000).to_string();
        let mut out = json!({
            "traceId": self.trace_id,
            "spanId": self.span_id,
            "name": self.name,
            "kind": self.kind,
            "startTimeUnixNano": nanos(self.start_ms),
            "endTimeUnixNano": nanos(self.end_ms.max(self.start_ms)),
            "attributes": self.attributes,
            "status": match self.error {
                Some(message) => json!({"code": 2, "message": message}),
                None => json!({"code": 1}),
            },
        });
        if let Some(p) = self.parent {
            out["parentSpanId"] = json!(p);
        }
        out
    }
}

/// What the records say about one run.
#[derive(Default)]
struct RunSpans {
    first: u64,
    last: u64,
    end: Option<(Outcome, String)>,
    usage: Option<Usage>,
    model: String,
}

/// The spans of one trace, in OTLP/JSON (see the module docs): each run's `invoke_agent`
/// span followed by its `chat` and `execute_tool` spans in trace order.
pub fn otlp_spans(trace: &Trace, times: &SpanTimes, options: &OtlpOptions) -> Vec<Value> {
    let header = &trace.header;
    let session = header.session.as_str();
    let first_run = trace.records.iter().find_map(|r| match r {
        TraceRecord::Input {
            event: Event::Start { run_id, .. },
            ..
        } => Some(run_id.as_str()),
        _ => None,
    });
    let tid = trace_id(&[session, first_run.unwrap_or_default()]);
    let at = |index: u64| options.base_ms.saturating_add(index);
    let mut runs: BTreeMap<String, RunSpans> = BTreeMap::new();
    let mut run_order: Vec<String> = Vec::new();
    // The latest request of each step, and the index of its first.
    let mut requests: HashMap<(String, u32), (ModelRequest, u64)> = HashMap::new();
    // Tool calls: (run id, arguments, index of the request to run it).
    let mut calls: HashMap<String, (String, Value, u64)> = HashMap::new();
    let mut current_run = String::new();
    let mut children: HashMap<String, Vec<Span>> = HashMap::new();
    for r in &trace.records {
        let index = r.index().unwrap_or_default();
        if let TraceRecord::Input {
            event: Event::Start { run_id, .. },
            ..
        } = r
        {
            current_run = run_id.clone();
            if !runs.contains_key(run_id) {
                run_order.push(run_id.clone());
            }
            let run = runs.entry(run_id.clone()).or_default();
            run.first = index;
            run.model = header.config.model.clone();
        }
        if let Some(run) = runs.get_mut(&current_run) {
            run.last = index;
        }
        let TraceRecord::Effect { effect, .. } = r else {
            continue;
        };
        match effect {
            Effect::CallModel { request } => {
                let key = (request.run_id.clone(), request.model_call_index);
                let first = requests.get(&key).map_or(index, |(_, i)| *i);
                requests.insert(key, (request.clone(), first));
            }
            Effect::RunTool { call } => {
                calls.entry(call.id.clone()).or_insert((
                    current_run.clone(),
                    call.arguments.clone(),
                    index,
                ));
            }
            Effect::Emit {
                event:
                    AgentEvent::RunEnd {
                        outcome, reason, ..
                    },
            } => {
                if let Some(run) = runs.get_mut(&current_run) {
                    run.end = Some((*outcome, reason.clone()));
                }
            }
            Effect::Persist {
                entry:
                    Entry::Assistant {
                        run_id,
                        model_call_index,
                        message,
                    },
            } => {
                let step = *model_call_index;
                let request = requests.get(&(run_id.clone(), step));
                let model = request.map_or(header.config.model.as_str(), |(r, _)| &r.model);
                let step_text = step.to_string();
                let (start, end) = times
                    .steps
                    .get(&(run_id.clone(), step))
                    .copied()
                    .unwrap_or_default();
                let start = start.unwrap_or_else(|| at(request.map_or(index, |(_, i)| *i)));
                let end = end.unwrap_or_else(|| at(index)).max(start);
                let mut a = vec![
                    attribute("gen_ai.operation.name", json!("chat")),
                    attribute("gen_ai.conversation.id", json!(session)),
                    attribute("agentloop.run_id", json!(run_id)),
                    attribute("agentloop.step", json!(step)),
                    attribute("gen_ai.request.model", json!(model)),
                    attribute("gen_ai.response.model", json!(model)),
                ];
                if let Some((provider, _)) = model.split_once(':') {
                    a.push(attribute("gen_ai.provider.name", json!(provider)));
                }
                a.push(attribute(
                    "gen_ai.response.finish_reasons",
                    json!([finish_reason(message.finish_reason)]),
                ));
                if let Some(u) = &message.usage {
                    usage_attributes(u, &mut a);
                    if let Some(run) = runs.get_mut(run_id) {
                        run.usage.get_or_insert_with(Usage::default).add(u);
                    }
                }
                if let Some((request, _)) = request {
                    a.push(attribute("agentloop.attempt", json!(request.attempt)));
                    if let Some(n) = request.params.max_tokens {
                        a.push(attribute("gen_ai.request.max_tokens", json!(n)));
                    }
                    if let Some(t) = request.params.temperature {
                        a.push(attribute("gen_ai.request.temperature", json!(t)));
                    }
                    if options.include_content {
                        if let Some(system) = &request.system {
                            a.push(attribute(
                                "gen_ai.system_instructions",
                                json!(json!([{"type": "text", "content": system}]).to_string()),
                            ));
                        }
                        let input: Vec<Value> =
                            request.messages.iter().map(message_parts).collect();
                        a.push(attribute(
                            "gen_ai.input.messages",
                            json!(Value::Array(input).to_string()),
                        ));
                        let tools: Vec<Value> = request
                            .tools
                            .iter()
                            .map(|t| {
                                json!({"type": "function", "name": t.name,
                                       "description": t.description, "parameters": t.parameters})
                            })
                            .collect();
                        a.push(attribute(
                            "gen_ai.tool.definitions",
                            json!(Value::Array(tools).to_string()),
                        ));
                    }
                }
                if options.include_content {
                    a.push(attribute(
                        "gen_ai.output.messages",
                        json!(json!([assistant_parts(message)]).to_string()),
                    ));
                }
                children.entry(run_id.clone()).or_default().push(Span {
                    trace_id: tid.clone(),
                    span_id: span_id(&[&tid, "chat", run_id, &step_text]),
                    parent: None,
                    name: format!("chat {model}"),
                    kind: 3,
                    start_ms: start,
                    end_ms: end,
                    attributes: a,
                    error: None,
                });
            }
            Effect::Persist {
                entry: Entry::ToolResult { run_id, result },
            } => {
                let call = calls.get(&result.tool_call_id);
                let (start, end) = times
                    .tools
                    .get(&(run_id.clone(), result.tool_call_id.clone()))
                    .copied()
                    .unwrap_or_default();
                let start = start.unwrap_or_else(|| at(call.map_or(index, |c| c.2)));
                let end = end.unwrap_or_else(|| at(index)).max(start);
                let mut a = vec![
                    attribute("gen_ai.operation.name", json!("execute_tool")),
                    attribute("gen_ai.conversation.id", json!(session)),
                    attribute("agentloop.run_id", json!(run_id)),
                    attribute("gen_ai.tool.name", json!(result.name)),
                    attribute("gen_ai.tool.call.id", json!(result.tool_call_id)),
                    attribute("gen_ai.tool.type", json!("function")),
                    attribute("agentloop.tool.status", json!(result.status.as_str())),
                ];
                if options.include_content {
                    if let Some((_, arguments, _)) = call {
                        a.push(attribute(
                            "gen_ai.tool.call.arguments",
                            json!(arguments.to_string()),
                        ));
                    }
                    a.push(attribute(
                        "gen_ai.tool.call.result",
                        json!(result.content.clone()),
                    ));
                }
                children.entry(run_id.clone()).or_default().push(Span {
                    trace_id: tid.clone(),
                    span_id: span_id(&[&tid, "execute_tool", run_id, &result.tool_call_id]),
                    parent: None,
                    name: format!("execute_tool {}", result.name),
                    kind: 1,
                    start_ms: start,
                    end_ms: end,
                    attributes: a,
                    error: (result.status != ToolStatus::Completed)
                        .then(|| result.status.as_str().to_string()),
                });
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for run_id in &run_order {
        let Some(run) = runs.get(run_id) else {
            continue;
        };
        let root = span_id(&[&tid, "invoke_agent", run_id]);
        let (start, end) = times.runs.get(run_id).copied().unwrap_or_default();
        let start = start.unwrap_or_else(|| at(run.first));
        let end = end.unwrap_or_else(|| at(run.last)).max(start);
        let mut a = vec![
            attribute("gen_ai.operation.name", json!("invoke_agent")),
            attribute("gen_ai.agent.name", json!("agentloop")),
            attribute("gen_ai.conversation.id", json!(session)),
            attribute("agentloop.run_id", json!(run_id)),
            attribute("gen_ai.request.model", json!(run.model)),
        ];
        if let Some(u) = &run.usage {
            usage_attributes(u, &mut a);
        }
        let mut error = None;
        if let Some((outcome, reason)) = &run.end {
            a.push(attribute("agentloop.outcome", json!(outcome.to_string())));
            a.push(attribute("agentloop.reason", json!(reason)));
            if *outcome != Outcome::Completed {
                error = Some(format!("{outcome}: {reason}"));
            }
        }
        out.push(
            Span {
                trace_id: tid.clone(),
                span_id: root.clone(),
                parent: None,
                name: "invoke_agent agentloop".into(),
                kind: 1,
                start_ms: start,
                end_ms: end,
                attributes: a,
                error,
            }
            .into_json(),
        );
        for mut span in children.remove(run_id).unwrap_or_default() {
            span.parent = Some(root.clone());
            out.push(span.into_json());
        }
    }
    out
}

/// An OTLP/JSON export request (`{"resourceSpans": [...]}`) of `spans`, reported by the
/// service `agentloop` at `version` under the scope [`SCOPE_NAME`].
pub fn otlp_export(spans: Vec<Value>, version: &str) -> Value {
    let mut resource = Map::new();
    resource.insert(
        "attributes".into(),
        json!([
            attribute("service.name", json!("agentloop")),
            attribute("service.version", json!(version)),
        ]),
    );
    json!({"resourceSpans": [{
        "resource": resource,
        "scopeSpans": [{
            "scope": {"name": SCOPE_NAME, "version": version},
            "spans": spans,
        }],
    }]})
}

/// Protobuf wire encoding of an OTLP/JSON export request ([`otlp_export`]'s shape): the body
/// of an OTLP/HTTP `application/x-protobuf` request, which every OTLP receiver accepts (some,
/// Arize Phoenix among them, accept no JSON). Hex ids become bytes, nanosecond strings
/// `fixed64`; fields this module never writes (events, links, kvlists) are left out.
pub fn otlp_protobuf(export: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    for rs in array(export.get("resourceSpans")) {
        message(&mut out, 1, |b| {
            if let Some(resource) = rs.get("resource") {
                message(b, 1, |r| key_values_pb(r, 1, resource.get("attributes")));
            }
            for ss in array(rs.get("scopeSpans")) {
                message(b, 2, |s| {
                    if let Some(scope) = ss.get("scope") {
                        message(s, 1, |sc| {
                            string(sc, 1, str_of(scope.get("name")));
                            string(sc, 2, str_of(scope.get("version")));
                        });
                    }
                    for span in array(ss.get("spans")) {
                        message(s, 2, |sp| span_pb(sp, span));
                    }
                });
            }
        });
    }
    out
}

fn array(v: Option<&Value>) -> impl Iterator<Item = &Value> {
    v.and_then(Value::as_array).into_iter().flatten()
}

fn str_of(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or_default()
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn bytes_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    tag(out, field, 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn string(out: &mut Vec<u8>, field: u32, s: &str) {
    if !s.is_empty() {
        bytes_field(out, field, s.as_bytes());
    }
}

fn message(out: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    body(&mut inner);
    bytes_field(out, field, &inner);
}

fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .filter_map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

fn any_value_pb(out: &mut Vec<u8>, v: &Value) {
    if let Some(s) = v.get("stringValue").and_then(Value::as_str) {
        // Written even when empty: an empty string is a value.
        bytes_field(out, 1, s.as_bytes());
    } else if let Some(b) = v.get("boolValue").and_then(Value::as_bool) {
        tag(out, 2, 0);
        varint(out, u64::from(b));
    } else if let Some(i) = v.get("intValue") {
        let n = match i {
            Value::String(s) => s.parse::<i64>().unwrap_or(0),
            other => other.as_i64().unwrap_or(0),
        };
        tag(out, 3, 0);
        // int64: two's complement as a 64-bit varint.
        varint(out, n as u64);
    } else if let Some(d) = v.get("doubleValue").and_then(Value::as_f64) {
        tag(out, 4, 1);
        out.extend_from_slice(&d.to_le_bytes());
    } else if let Some(a) = v.get("arrayValue") {
        message(out, 5, |arr| {
            for item in array(a.get("values")) {
                message(arr, 1, |x| any_value_pb(x, item));
            }
        });
    }
}

fn key_values_pb(out: &mut Vec<u8>, field: u32, list: Option<&Value>) {
    for kv in array(list) {
        message(out, field, |b| {
            string(b, 1, str_of(kv.get("key")));
            if let Some(v) = kv.get("value") {
                message(b, 2, |x| any_value_pb(x, v));
            }
        });
    }
}

fn span_pb(out: &mut Vec<u8>, span: &Value) {
    let nanos = |k: &str| -> u64 {
        match span.get(k) {
            Some(Value::String(s)) => s.parse().unwrap_or(0),
            Some(v) => v.as_u64().unwrap_or(0),
            None => 0,
        }
    };
    bytes_field(out, 1, &hex_bytes(str_of(span.get("traceId"))));
    bytes_field(out, 2, &hex_bytes(str_of(span.get("spanId"))));
    if let Some(p) = span.get("parentSpanId").and_then(Value::as_str) {
        bytes_field(out, 4, &hex_bytes(p));
    }
    string(out, 5, str_of(span.get("name")));
    if let Some(k) = span.get("kind").and_then(Value::as_u64) {
        tag(out, 6, 0);
        varint(out, k);
    }
    tag(out, 7, 1);
    out.extend_from_slice(&nanos("startTimeUnixNano").to_le_bytes());
    tag(out, 8, 1);
    out.extend_from_slice(&nanos("endTimeUnixNano").to_le_bytes());
    key_values_pb(out, 9, span.get("attributes"));
    if let Some(status) = span.get("status") {
        message(out, 15, |s| {
            string(s, 2, str_of(status.get("message")));
            if let Some(c) = status.get("code").and_then(Value::as_u64) {
                tag(s, 3, 0);
                varint(s, c);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::ImportOptions;
    use crate::import_otel::otel_genai;
    use crate::transcript::Transcript;

    /// A run with a tool round, recorded by the import (which drives the real machines).
    fn trace() -> Trace {
        let conversation = json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 2+3?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "calculator", "arguments": "{\"expression\":\"2+3\"}"}}],
             "usage": {"input_tokens": 12, "output_tokens": 5, "cache_read_input_tokens": 4}},
            {"role": "tool", "tool_call_id": "c1", "content": "5"},
            {"role": "assistant", "content": "5.", "usage": {"input_tokens": 20, "output_tokens": 2}},
        ]);
        let options = ImportOptions {
            tools: vec![agentloop_core::tool_spec::ToolSpec {
                name: "calculator".into(),
                description: "Evaluates arithmetic.".into(),
                parameters: json!({"type": "object", "properties": {"expression": {"type": "string"}}}),
            }],
            ..ImportOptions::default()
        };
        crate::import::openai_chat(&conversation, &options)
            .expect("import")
            .trace
    }

    fn attr<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
        span["attributes"]
            .as_array()?
            .iter()
            .find(|a| a["key"] == key)
            .map(|a| &a["value"])
    }

    #[test]
    fn a_run_is_an_invoke_agent_span_with_chat_and_tool_children() {
        let options = OtlpOptions {
            include_content: false,
            base_ms: 1_000,
        };
        let spans = otlp_spans(&trace(), &SpanTimes::default(), &options);
        let names: Vec<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();
        assert_eq!(
            names,
            [
                "invoke_agent agentloop",
                "chat imported",
                "execute_tool calculator",
                "chat imported"
            ]
        );
        let root = &spans[0];
        assert!(root.get("parentSpanId").is_none());
        for s in &spans[1..] {
            assert_eq!(s["parentSpanId"], root["spanId"]);
            assert_eq!(s["traceId"], root["traceId"]);
        }
        assert_eq!(root["traceId"].as_str().map(str::len), Some(32));
        assert_eq!(
            attr(root, "gen_ai.usage.input_tokens"),
            Some(&json!({"intValue": "32"}))
        );
        assert_eq!(
            attr(&spans[1], "gen_ai.usage.cache_read.input_tokens"),
            Some(&json!({"intValue": "4"}))
        );
        assert_eq!(
            attr(&spans[1], "gen_ai.response.finish_reasons"),
            Some(&json!({"arrayValue": {"values": [{"stringValue": "tool_calls"}]}}))
        );
        assert_eq!(
            attr(&spans[2], "gen_ai.tool.call.id"),
            Some(&json!({"stringValue": "c1"}))
        );
        // No content without the opt-in.
        for s in &spans {
            for key in [
                "gen_ai.input.messages",
                "gen_ai.output.messages",
                "gen_ai.tool.call.arguments",
                "gen_ai.tool.definitions",
            ] {
                assert!(attr(s, key).is_none(), "{key} in {s}");
            }
        }
        // Synthetic times: the record indices after base_ms, in order.
        let start = |s: &Value| s["startTimeUnixNano"].as_str().unwrap_or("").to_string();
        assert_eq!(start(root), "1000000000");
        assert!(start(&spans[1]) < start(&spans[2]));
        // Deterministic.
        assert_eq!(spans, otlp_spans(&trace(), &SpanTimes::default(), &options));
    }

    #[test]
    fn sidecar_times_place_the_spans() {
        let t = trace();
        let run_id = match &t.records[0] {
            TraceRecord::Input {
                event: Event::Start { run_id, .. },
                ..
            } => run_id.clone(),
            other => panic!("{other:?}"),
        };
        let sidecar = [
            format!(r#"{{"ts_ms":5000,"run_id":"{run_id}","type":"run_start"}}"#),
            format!(r#"{{"ts_ms":5010,"run_id":"{run_id}","type":"request_start","step":1}}"#),
            format!(r#"{{"ts_ms":5050,"run_id":"{run_id}","type":"response_complete","step":1}}"#),
            format!(
                r#"{{"ts_ms":5060,"run_id":"{run_id}","type":"tool_start","tool_call_id":"c1"}}"#
            ),
            format!(
                r#"{{"ts_ms":5070,"run_id":"{run_id}","type":"tool_end","tool_call_id":"c1"}}"#
            ),
            format!(r#"{{"ts_ms":5100,"run_id":"{run_id}","type":"run_end"}}"#),
        ]
        .join("\n");
        let times = SpanTimes::from_sidecar(&sidecar);
        assert_eq!(times.earliest(), Some(5000));
        let spans = otlp_spans(&t, &times, &OtlpOptions::default());
        let ms = |s: &Value, k: &str| s[k].as_str().unwrap_or("").to_string();
        assert_eq!(ms(&spans[0], "startTimeUnixNano"), "5000000000");
        assert_eq!(ms(&spans[0], "endTimeUnixNano"), "5100000000");
        assert_eq!(ms(&spans[1], "endTimeUnixNano"), "5050000000");
        assert_eq!(ms(&spans[2], "startTimeUnixNano"), "5060000000");
    }

    #[test]
    fn with_content_the_export_imports_back_as_the_same_run() {
        let original = trace();
        let options = OtlpOptions {
            include_content: true,
            base_ms: 0,
        };
        let export = otlp_export(
            otlp_spans(&original, &SpanTimes::default(), &options),
            "0.1.0",
        );
        let back = otel_genai(&export, &ImportOptions::default()).expect("import");
        assert_eq!(back.len(), 1);
        let imported = &back[0].imported;
        assert_eq!(imported.findings, []);
        assert_eq!(agentloop_core::trace::replay(&imported.trace), None);
        let a = Transcript::from_trace(&original);
        let b = Transcript::from_trace(&imported.trace);
        assert_eq!(a.summary.final_text, b.summary.final_text);
        assert_eq!(a.summary.tool_calls, b.summary.tool_calls);
        assert_eq!(a.summary.usage, b.summary.usage);
        assert_eq!(imported.trace.header.tools, original.header.tools);
        assert_eq!(
            imported.trace.header.config.system,
            original.header.config.system
        );
    }

    #[test]
    fn protobuf_encodes_ids_as_bytes_and_times_as_fixed64() {
        let export = otlp_export(
            vec![
                json!({"traceId": "0102", "spanId": "ff", "name": "x", "kind": 1,
                "startTimeUnixNano": "1", "endTimeUnixNano": "2",
                "attributes": [attribute("n", json!(-1))], "status": {"code": 1}}),
            ],
            "v",
        );
        let pb = otlp_protobuf(&export);
        // The span's trace id field (1, bytes) holds the two bytes.
        assert!(pb.windows(4).any(|w| w == [0x0a, 0x02, 0x01, 0x02]));
        // Field 7 (fixed64) = 1.
        assert!(pb.windows(9).any(|w| w == [0x39, 1, 0, 0, 0, 0, 0, 0, 0]));
        // An int64 of -1 is a 10-byte varint.
        assert!(pb
            .windows(11)
            .any(|w| w == [0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]));
    }
}
