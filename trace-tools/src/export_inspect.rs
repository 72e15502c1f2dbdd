//! Traces as an [Inspect AI](https://inspect.aisi.org.uk) eval log (`agentloop trace export
//! --format inspect`), one sample per trace, which Inspect's `read_eval_log` and its log
//! viewer read.
//!
//! A sample ([`inspect_sample`]) holds the trace's conversation as Inspect chat messages
//! (`messages`: the system prompt, the runs' history and input, each committed assistant
//! message with its tool calls, each tool result, errors as a tool message's `error`), the last
//! assistant message as its `output`, and its `events`: a `model` event per committed step
//! (the model, the tools offered with their schemas, the step's input, its output with the
//! step's token `usage`) and a `tool` event per tool call. The tokens are the trace's, as
//! they are: agentloop's `input_tokens`, `output_tokens`, `cache_read_input_tokens`,
//! `cache_creation_input_tokens` and `reasoning_tokens` become Inspect's `input_tokens`,
//! `output_tokens`, `input_tokens_cache_read`, `input_tokens_cache_write` and
//! `reasoning_tokens` (`total_tokens` is input plus output), the same mapping the import
//! reads back. A model event's input is stored as Inspect stores it, as a range of the sample's
//! messages (`input_refs` into `events_data`) when it is a prefix of them, and in full when not
//! (a reminder or a compaction made the request differ). A run that did not complete is the
//! sample's `error`.
//!
//! The log around the samples ([`inspect_log_fields`]) names the task (the traces' session),
//! the model, the sample ids and the usage per model. The caller writes the JSON: the samples
//! first, one at a time, then these fields, so a corpus is never held whole; or the `.eval`
//! form, a zip, whose bytes [`EvalZip`] gives entry by entry. Pure: the time of creation comes
//! from the caller, and so does the writing.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use agentloop_core::agent_event::{AgentEvent, Outcome};
use agentloop_core::effect::Effect;
use agentloop_core::entry::Entry;
use agentloop_core::event::Event;
use agentloop_core::message::{
    AssistantMessage, FinishReason, Message, ToolResult, ToolStatus, Usage,
};
use agentloop_core::model::ModelRequest;
use agentloop_core::trace::{Trace, TraceRecord};

/// The Inspect log format version written (`version` of the log).
pub const INSPECT_LOG_VERSION: u32 = 2;

/// What one exported sample adds to the log around it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SampleTotals {
    /// The sample's id.
    pub id: String,
    /// The model of the trace (its header's).
    pub model: String,
    /// The session the trace belongs to.
    pub session: String,
    /// Its usage per model (the models its steps ran on).
    pub usage: BTreeMap<String, Usage>,
    /// Whether the sample records an error (a run that did not complete).
    pub error: bool,
}

/// Inspect's `ModelUsage` of a [`Usage`] (see the module docs for the mapping).
pub fn inspect_usage(u: &Usage) -> Value {
    let mut out = json!({
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
    });
    for (key, n) in [
        ("input_tokens_cache_read", u.cache_read_input_tokens),
        ("input_tokens_cache_write", u.cache_creation_input_tokens),
        ("reasoning_tokens", u.reasoning_tokens),
    ] {
        if n > 0 {
            out[key] = json!(n);
        }
    }
    out
}

/// Inspect's `stop_reason` of a finish reason.
fn stop_reason(f: Option<FinishReason>) -> &'static str {
    match f {
        Some(FinishReason::Stop) => "stop",
        Some(FinishReason::Length) => "max_tokens",
        Some(FinishReason::ToolCalls) => "tool_calls",
        Some(FinishReason::ContentFilter) => "content_filter",
        Some(FinishReason::Other) | None => "unknown",
    }
}

fn assistant_message(m: &AssistantMessage, model: &str) -> Value {
    let mut out =
        json!({"role": "assistant", "content": m.text, "source": "generate", "model": model});
    if !m.reasoning.is_empty() {
        out["content"] = json!([
            {"type": "reasoning", "reasoning": m.reasoning},
            {"type": "text", "text": m.text},
        ]);
    }
    if !m.tool_calls.is_empty() {
        out["tool_calls"] = m
            .tool_calls
            .iter()
            .map(|c| {
                let mut call = json!({
                    "id": c.id,
                    "function": c.name,
                    "arguments": if c.arguments.is_object() { c.arguments.clone() } else { json!({}) },
                    "type": "function",
                });
                if let Some(raw) = &c.invalid_arguments {
                    call["parse_error"] = json!(format!("invalid arguments: {raw}"));
                }
                call
            })
            .collect();
    }
    out
}

fn tool_error(r: &ToolResult) -> Option<Value> {
    (r.status != ToolStatus::Completed).then(|| {
        let kind = match r.status {
            ToolStatus::Denied => "approval",
            _ => "unknown",
        };
        json!({"type": kind, "message": format!("{}: {}", r.status.as_str(), r.content)})
    })
}

fn tool_message(r: &ToolResult) -> Value {
    let mut out = json!({
        "role": "tool",
        "content": r.content,
        "tool_call_id": r.tool_call_id,
        "function": r.name,
    });
    if let Some(e) = tool_error(r) {
        out["error"] = e;
    }
    out
}

/// An agentloop message as an Inspect chat message (`model` names an assistant's).
fn chat_message(m: &Message, model: &str) -> Value {
    match m {
        Message::System { content } => json!({"role": "system", "content": content}),
        user @ Message::User { .. } => {
            json!({"role": "user", "content": user.user_text().unwrap_or_default(), "source": "input"})
        }
        Message::Assistant(a) => assistant_message(a, model),
        Message::Tool(r) => tool_message(r),
    }
}

/// The step's model output, as Inspect's `ModelOutput`.
fn model_output(m: &AssistantMessage, model: &str) -> Value {
    let mut out = json!({
        "model": model,
        "choices": [{
            "message": assistant_message(m, model),
            "stop_reason": stop_reason(m.finish_reason),
        }],
        "completion": m.text,
    });
    if let Some(u) = &m.usage {
        out["usage"] = inspect_usage(u);
    }
    out
}

/// One trace as one Inspect sample (`EvalSample`, epoch 1, id `id`), and what it adds to the
/// log's totals.
pub fn inspect_sample(id: &str, trace: &Trace) -> (Value, SampleTotals) {
    let header = &trace.header;
    let mut messages: Vec<Value> = Vec::new();
    if let Some(system) = &header.config.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    let mut input_text: Option<String> = None;
    let mut events: Vec<Value> = Vec::new();
    // Whether a model event refers to the conversation (`input_refs`) for its input.
    let mut refers = false;
    // The latest request of each step (a retried step's last attempt).
    let mut requests: BTreeMap<(String, u32), ModelRequest> = BTreeMap::new();
    let mut arguments: BTreeMap<String, Value> = BTreeMap::new();
    let mut usage: BTreeMap<String, Usage> = BTreeMap::new();
    let mut last: Option<(AssistantMessage, String)> = None;
    let mut run_end: Option<(Outcome, String)> = None;
    for r in &trace.records {
        match r {
            TraceRecord::Input {
                event: Event::Start { history, input, .. },
                ..
            } => {
                let model = &header.config.model;
                for m in history {
                    messages.push(chat_message(m, model));
                }
                if input_text.is_none() {
                    input_text = Some(
                        input
                            .iter()
                            .filter_map(Message::user_text)
                            .collect::<Vec<_>>()
                            .join("\n"),
                    );
                }
                // The input itself is persisted (`user_input`) and added there.
            }
            TraceRecord::Effect { effect, .. } => match effect {
                Effect::CallModel { request } => {
                    requests.insert(
                        (request.run_id.clone(), request.model_call_index),
                        request.clone(),
                    );
                }
                Effect::Persist { entry } => match entry {
                    Entry::UserInput { message, .. } => {
                        messages.push(chat_message(message, &header.config.model));
                    }
                    Entry::Assistant {
                        run_id,
                        model_call_index,
                        message,
                    } => {
                        let request = requests.get(&(run_id.clone(), *model_call_index));
                        let model = request.map_or(header.config.model.as_str(), |r| &r.model);
                        if let Some(u) = &message.usage {
                            usage.entry(model.to_string()).or_default().add(u);
                        }
                        for c in &message.tool_calls {
                            arguments.insert(c.id.clone(), c.arguments.clone());
                        }
                        let mut event = json!({
                            "event": "model",
                            "model": model,
                            "input": [],
                            "tools": [],
                            "tool_choice": "auto",
                            "config": {},
                            "output": model_output(message, model),
                        });
                        if let Some(request) = request {
                            let mut input: Vec<Value> = Vec::new();
                            if let Some(system) = &request.system {
                                input.push(json!({"role": "system", "content": system}));
                            }
                            input.extend(request.messages.iter().map(|m| chat_message(m, model)));
                            if messages.len() >= input.len() && messages[..input.len()] == input[..]
                            {
                                // A prefix of the conversation: a range of it (the
                                // conversation only grows), as Inspect writes it.
                                refers = true;
                                event["input_refs"] = json!([[0, input.len()]]);
                            } else {
                                event["input"] = Value::Array(input);
                            }
                            event["tools"] = request
                                .tools
                                .iter()
                                .map(|t| {
                                    json!({
                                        "name": t.name,
                                        "description": t.description,
                                        "parameters": t.parameters,
                                    })
                                })
                                .collect();
                        }
                        events.push(event);
                        messages.push(assistant_message(message, model));
                        last = Some((message.clone(), model.to_string()));
                    }
                    Entry::ToolResult { result, .. } => {
                        let mut event = json!({
                            "event": "tool",
                            "type": "function",
                            "id": result.tool_call_id,
                            "function": result.name,
                            "arguments": arguments
                                .get(&result.tool_call_id)
                                .filter(|a| a.is_object())
                                .cloned()
                                .unwrap_or_else(|| json!({})),
                            "result": result.content,
                        });
                        if let Some(e) = tool_error(result) {
                            event["error"] = e;
                        }
                        events.push(event);
                        messages.push(tool_message(result));
                    }
                    _ => {}
                },
                Effect::Emit {
                    event:
                        AgentEvent::RunEnd {
                            outcome, reason, ..
                        },
                } => run_end = Some((*outcome, reason.clone())),
                _ => {}
            },
            _ => {}
        }
    }
    let output = match &last {
        Some((m, model)) => model_output(m, model),
        None => json!({"model": header.config.model, "choices": []}),
    };
    let model_usage: Map<String, Value> = usage
        .iter()
        .map(|(m, u)| (m.clone(), inspect_usage(u)))
        .collect();
    let mut sample = json!({
        "id": id,
        "epoch": 1,
        "input": input_text.unwrap_or_default(),
        "target": "",
        "messages": messages,
        "output": output,
        "events": events,
        "model_usage": model_usage,
        "metadata": {
            "session": header.session,
            "outcome": run_end.as_ref().map(|(o, _)| o.to_string()),
            "reason": run_end.as_ref().map(|(_, r)| r.clone()),
        },
    });
    if refers {
        sample["events_data"] = json!({"messages": sample["messages"].clone(), "calls": []});
    }
    let error = match &run_end {
        Some((Outcome::Completed, _)) => None,
        Some((outcome, reason)) => Some(format!("the agentloop run {outcome}: {reason}")),
        None => Some("the agentloop trace ends before its run did".to_string()),
    };
    if let Some(message) = &error {
        sample["error"] = json!({"message": message, "traceback": "", "traceback_ansi": ""});
    }
    let totals = SampleTotals {
        id: id.to_string(),
        model: header.config.model.clone(),
        session: header.session.clone(),
        usage,
        error: error.is_some(),
    };
    (sample, totals)
}

/// The fields of the log around its samples (`version`, `status`, `eval`, `plan`, `results`,
/// `stats`), from the samples' totals in order. `created` is the log's creation time (ISO
/// 8601, as Inspect writes it); `agentloop` the version that wrote it.
pub fn inspect_log_fields(samples: &[SampleTotals], created: &str, agentloop: &str) -> Value {
    let first = |f: fn(&SampleTotals) -> &str| {
        let mut names: Vec<&str> = samples.iter().map(f).collect();
        names.dedup();
        match names.as_slice() {
            [one] => one.to_string(),
            [] => "agentloop".to_string(),
            _ => names.join(","),
        }
    };
    let mut usage: BTreeMap<String, Usage> = BTreeMap::new();
    for s in samples {
        for (m, u) in &s.usage {
            usage.entry(m.clone()).or_default().add(u);
        }
    }
    let model_usage: Map<String, Value> = usage
        .iter()
        .map(|(m, u)| (m.clone(), inspect_usage(u)))
        .collect();
    let errors = samples.iter().filter(|s| s.error).count();
    json!({
        "version": INSPECT_LOG_VERSION,
        "status": "success",
        "eval": {
            "created": created,
            "task": first(|s| &s.session),
            "task_version": 0,
            "dataset": {
                "name": "agentloop traces",
                "samples": samples.len(),
                "sample_ids": samples.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
                "shuffled": false,
            },
            "model": first(|s| &s.model),
            "config": {"epochs": 1},
            "packages": {"agentloop": agentloop},
            "metadata": {"exported_by": "agentloop trace export --format inspect"},
        },
        "plan": {"name": "plan", "steps": [{"solver": "agentloop", "params": {}}]},
        "results": {
            "total_samples": samples.len(),
            "completed_samples": samples.len() - errors,
            "scores": [],
        },
        "stats": {
            "started_at": created,
            "completed_at": created,
            "model_usage": model_usage,
        },
    })
}

/// An Inspect `.eval` log (a zip) written sample by sample: [`EvalZip::sample`] gives the
/// bytes of one sample's entry (`samples/ID_epoch_1.json`), [`EvalZip::finish`] the log's last
/// bytes (`header.json` with the log's fields, `summaries.json`, the zip's central directory).
/// The caller writes them in order; the entries are deflated (Inspect reads deflate and zstd).
#[derive(Default)]
pub struct EvalZip {
    zip: crate::zip_read::ZipBuilder,
    summaries: Vec<Value>,
}

/// The `.eval` would pass what a zip without ZIP64 holds (4 GiB, 65,535 entries): export fewer
/// traces, or as JSON.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the .eval log would pass 4 GiB or 65,535 samples, more than this writer's zip holds: export fewer traces, or as .json")]
pub struct EvalZipTooLarge;

impl EvalZip {
    /// A log with no sample yet.
    pub fn new() -> EvalZip {
        EvalZip::default()
    }

    /// The bytes of the entry of `sample` ([`inspect_sample`]'s).
    pub fn sample(&mut self, sample: &Value) -> Result<Vec<u8>, EvalZipTooLarge> {
        let id = match &sample["id"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let epoch = sample["epoch"].as_u64().unwrap_or(1);
        let mut summary = json!({
            "id": sample["id"],
            "epoch": epoch,
            "input": sample["input"],
            "target": sample["target"],
            "metadata": sample["metadata"],
            "model_usage": sample["model_usage"],
            "message_count": sample["messages"].as_array().map_or(0, Vec::len),
            "completed": true,
        });
        if let Some(message) = sample.pointer("/error/message") {
            summary["error"] = message.clone();
        }
        self.summaries.push(summary);
        let text = serde_json::to_vec(sample).unwrap_or_default();
        self.zip
            .entry(&format!("samples/{id}_epoch_{epoch}.json"), &text)
            .map_err(|_| EvalZipTooLarge)
    }

    /// The log's last bytes: `header.json` (`fields`: [`inspect_log_fields`]'s),
    /// `summaries.json` and the central directory.
    pub fn finish(mut self, fields: &Value) -> Result<Vec<u8>, EvalZipTooLarge> {
        let header = serde_json::to_vec(fields).unwrap_or_default();
        let summaries = serde_json::to_vec(&self.summaries).unwrap_or_default();
        let mut out = self
            .zip
            .entry("summaries.json", &summaries)
            .map_err(|_| EvalZipTooLarge)?;
        out.extend(
            self.zip
                .entry("header.json", &header)
                .map_err(|_| EvalZipTooLarge)?,
        );
        out.extend(self.zip.finish().map_err(|_| EvalZipTooLarge)?);
        Ok(out)
    }
}

/// `secs` since the Unix epoch as an RFC 3339 UTC time, `2026-12-01T22:09:29Z` (the proleptic
/// Gregorian calendar, days to civil date as in Howard Hinnant's `civil_from_days`).
pub fn rfc3339_utc(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (hour, minute, second) = (rem / 3_600, rem % 3_600 / 60, rem % 60);
    // Days from 0000-03-01, so that a leap day ends its 400-year era's years.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::ImportOptions;
    use crate::import_inspect::{inspect_eval, read_log};

    fn imported() -> Vec<crate::import_inspect::Sample> {
        let bytes = include_bytes!("../../tests/fixtures/inspect/arithmetic.eval");
        let log = read_log(bytes, 64 << 20).expect("read");
        inspect_eval(&log, &ImportOptions::default()).expect("import")
    }

    fn log_of(samples: &[crate::import_inspect::Sample]) -> Value {
        let mut all = Vec::new();
        let mut totals = Vec::new();
        for s in samples {
            let (sample, t) = inspect_sample(&s.id, &s.imported.trace);
            all.push(sample);
            totals.push(t);
        }
        let mut log = inspect_log_fields(&totals, "2026-01-01T00:00:00Z", "0.1.0");
        log["samples"] = Value::Array(all);
        log
    }

    #[test]
    fn a_sample_holds_the_conversation_the_model_calls_with_usage_and_the_tool_calls() {
        let samples = imported();
        let (sample, totals) = inspect_sample("add", &samples[0].imported.trace);
        let roles: Vec<&str> = sample["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["role"].as_str())
            .collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant"]);
        assert_eq!(sample["input"], "What is 2 + 3? Use the add tool.");
        assert_eq!(sample["messages"][2]["tool_calls"][0]["function"], "add");
        assert_eq!(
            sample["messages"][2]["tool_calls"][0]["arguments"],
            json!({"a": 2, "b": 3})
        );
        assert_eq!(sample["output"]["completion"], "The answer is 5.");
        let kinds: Vec<&str> = sample["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["event"].as_str())
            .collect();
        assert_eq!(kinds, ["model", "tool", "model"]);
        let first = &sample["events"][0];
        assert_eq!(
            first["output"]["usage"],
            json!({"input_tokens": 52, "output_tokens": 18, "total_tokens": 70,
                   "input_tokens_cache_read": 10})
        );
        assert_eq!(first["tools"][0]["name"], "add");
        assert_eq!(
            first["tools"][0]["parameters"]["required"],
            json!(["a", "b"])
        );
        assert_eq!(first["input_refs"], json!([[0, 2]]));
        assert_eq!(sample["events"][1]["result"], "5");
        assert_eq!(sample["model_usage"]["mockllm/model"]["input_tokens"], 139);
        assert!(sample.get("error").is_none());
        assert!(!totals.error);
        // The errored sample's run did not complete.
        let (divide, t) = inspect_sample("divide", &samples[1].imported.trace);
        assert!(t.error);
        assert!(divide["error"]["message"].is_string());
    }

    #[test]
    fn an_exported_eval_zip_reads_back_like_the_json_log() {
        let samples = imported();
        let mut zip = EvalZip::new();
        let mut bytes = Vec::new();
        let mut totals = Vec::new();
        for s in &samples {
            let (sample, t) = inspect_sample(&s.id, &s.imported.trace);
            bytes.extend(zip.sample(&sample).expect("entry"));
            totals.push(t);
        }
        let fields = inspect_log_fields(&totals, "2026-01-01T00:00:00Z", "0.1.0");
        bytes.extend(zip.finish(&fields).expect("finish"));
        let from_zip = read_log(&bytes, 64 << 20).expect("the zip reads");
        assert_eq!(from_zip, log_of(&samples));
    }

    #[test]
    fn an_exported_log_imports_back_to_the_same_traces() {
        let samples = imported();
        let log = log_of(&samples);
        assert_eq!(log["eval"]["task"], "arithmetic");
        assert_eq!(log["eval"]["model"], "mockllm/model");
        assert_eq!(
            log["eval"]["dataset"]["sample_ids"],
            json!(["add", "divide", "loop"])
        );
        assert_eq!(log["results"]["completed_samples"], 1);
        assert_eq!(
            log["stats"]["model_usage"]["mockllm/model"]["output_tokens"],
            25 + 16 + 36
        );
        let again = inspect_eval(&log, &ImportOptions::default()).expect("import");
        assert_eq!(again.len(), samples.len());
        for (a, b) in samples.iter().zip(&again) {
            assert_eq!(a.imported.trace, b.imported.trace, "sample {}", a.id);
        }
        assert_eq!(again[0].imported.findings, []);
    }
}
