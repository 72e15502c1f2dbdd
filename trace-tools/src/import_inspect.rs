//! Importing an [Inspect AI](https://inspect.aisi.org.uk) eval log as traces, one per sample
//! (`agentloop trace import --from inspect-eval`).
//!
//! Inspect writes a log in one of two forms, both read here ([`read_log`]): its default
//! `.eval`, a zip (entries compressed with zstd, or deflate in older logs; read by a small
//! reader of our own over `ruzstd` and `miniz_oxide`) holding `header.json` (the task, the model, the results) and one
//! `samples/ID_epoch_N.json` per sample (a log still being written has `_journal/start.json`
//! instead of the header), and the `.json` log, one JSON object with `eval`, `plan`,
//! `results`, `stats` and `samples`. Each sample has an `id`, an `epoch` and the whole
//! conversation in `messages`. An Inspect message is a chat message with a `role` (`system`,
//! `user`, `assistant`, `tool`) and a `content` that is a string or a list of content parts
//! (`{type: "text", text}`, `{type: "reasoning", reasoning}`, images, …); an assistant's
//! `tool_calls` are `{id, function, arguments}` with the tool's name in `function` and the
//! arguments as a JSON object; a tool message names its call in `tool_call_id` and may carry
//! an `error` (`{type, message}`; `tool_error`, a string, in older logs), which makes the
//! call's result an error (denied, for an `approval` error), its text the content or else the
//! error's message.
//!
//! A sample's `events` record each model call (`event: "model"`): the tools offered with their
//! JSON schemas (`tools: [{name, description, parameters}]`) and the output with its token
//! `usage` (`input_tokens`, `output_tokens`, `input_tokens_cache_read`,
//! `input_tokens_cache_write`, `reasoning_tokens`). The import keeps both: each step's
//! `finish_step` carries the usage of the model call whose output is that assistant message
//! (matched by message id, else by order), Inspect's counts as they are (its `input_tokens`
//! exclude the cached ones), and the trace offers the tools with their recorded schemas.
//!
//! Each sample's messages are rewritten as an OpenAI chat-completions message array and
//! imported by [`crate::import::openai_chat`], so the machines, the findings and the trace are
//! those of the chat import. What the trace cannot hold is named in a finding: content parts
//! other than text (reasoning, images, audio), which are left out, and a sample that Inspect
//! recorded as ended by an `error` or a `limit` (the trace holds the conversation up to there).
//! What Inspect knows about the sample beyond the conversation (its target, scores, metadata,
//! per-model usage) has no place in a trace; it is kept in [`Sample::metadata`].
//! Pure: the caller reads the log's bytes and writes the traces.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use agentloop_core::message::Usage;
use agentloop_core::tool_spec::ToolSpec;

use crate::import::{openai_chat, Finding, ImportError, ImportOptions, Imported};

/// One sample of an eval log, imported.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The sample's id (a number or a string in the log), as text.
    pub id: String,
    /// The epoch (1 when the log gives none).
    pub epoch: u64,
    /// What Inspect recorded about the sample that a trace has no place for: `id`, `epoch`,
    /// `target`, `scores`, `metadata`, `model_usage` (the sample's totals per model), and the
    /// `error` or `limit` it ended with, each when the log has it.
    pub metadata: Value,
    /// The trace, the replies and the findings of the import.
    pub imported: Imported,
}

impl Sample {
    /// A file name for the sample's trace: `ID_epochN`, with characters other than ASCII
    /// letters, digits, `-`, `_` and `.` replaced by `_`.
    pub fn file_stem(&self) -> String {
        format!(
            "{}_epoch{}",
            crate::import::safe_stem(&self.id, "sample"),
            self.epoch
        )
    }
}

/// Why an eval log could not be imported: the log's shape, its size, or one sample's messages.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// The log is not an eval log with samples.
    #[error("not an Inspect eval log: {0}")]
    Log(String),
    /// The `.eval` zip could not be read (a damaged archive, a compression it does not use).
    #[error("not a readable Inspect .eval log (zip): {0}")]
    Zip(String),
    /// The log holds more than the limit (uncompressed, for a `.eval`): refused before it is
    /// all read, so a small zip that inflates to gigabytes (a zip bomb) takes no more memory
    /// than the limit.
    #[error(
        "the log holds more than {limit} bytes{}: refused",
        if *.uncompressed { " uncompressed" } else { "" }
    )]
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
        /// Whether it is the `.eval`'s uncompressed contents that are over it.
        uncompressed: bool,
    },
    /// A sample's messages could not be imported.
    #[error("sample {id} (epoch {epoch}): {error}")]
    Sample {
        /// The sample's id.
        id: String,
        /// Its epoch.
        epoch: u64,
        /// Why.
        error: ImportError,
    },
}

/// Reads an Inspect log's bytes — a `.eval` zip or a `.json` log, told apart by their first
/// bytes — as the JSON log's object (`eval`, `plan`, `results`, `stats`, `samples`, …), which
/// [`inspect_eval`] imports. A `.eval`'s samples are `samples/*.json`, ordered as Inspect
/// orders a log's samples (by epoch, then id). `max_bytes` bounds what is read: the `.json`
/// itself, or everything a `.eval` holds once inflated (every entry's size is checked against
/// what is left before it is read, and its reading stops there whatever the zip declares).
pub fn read_log(bytes: &[u8], max_bytes: u64) -> Result<Value, InspectError> {
    if bytes.starts_with(b"PK") {
        return read_eval_zip(bytes, max_bytes);
    }
    if bytes.len() as u64 > max_bytes {
        return Err(InspectError::TooLarge {
            limit: max_bytes,
            uncompressed: false,
        });
    }
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => {
            serde_json::from_slice(bytes).map_err(|e| InspectError::Log(format!("not JSON: {e}")))
        }
        _ => Err(InspectError::Log(
            "neither a JSON log (an object) nor a .eval log (a zip)".into(),
        )),
    }
}

/// The entries of a `.eval` zip that [`read_log`] reads: the header (or the journal's start
/// when there is no header) and the samples, each inflated within what is left of
/// `max_bytes` ([`crate::zip_read`]).
fn read_eval_zip(bytes: &[u8], max_bytes: u64) -> Result<Value, InspectError> {
    use crate::zip_read::{entries, inflate, ZipError};
    let zip_err = |e: ZipError| match e {
        ZipError::Bad(e) => InspectError::Zip(e),
        ZipError::TooLarge => InspectError::TooLarge {
            limit: max_bytes,
            uncompressed: true,
        },
    };
    let entries = entries(bytes).map_err(zip_err)?;
    let mut left = max_bytes;
    let mut read_entry = |entry: &crate::zip_read::Entry<'_>| -> Result<Value, InspectError> {
        let text = inflate(entry, left).map_err(zip_err)?;
        left -= text.len() as u64;
        serde_json::from_slice(&text)
            .map_err(|e| InspectError::Log(format!("{}: not JSON: {e}", entry.name)))
    };
    let named = |wanted: &str| entries.iter().find(|e| e.name == wanted);
    let header = match named("header.json").or_else(|| named("_journal/start.json")) {
        Some(entry) => read_entry(entry)?,
        None => {
            return Err(InspectError::Log(
                "a zip without header.json or _journal/start.json".into(),
            ))
        }
    };
    let mut log = match header {
        Value::Object(map) => map,
        _ => return Err(InspectError::Log("header.json is not an object".into())),
    };
    let mut samples = Vec::new();
    for entry in &entries {
        if entry.name.starts_with("samples/") && entry.name.ends_with(".json") {
            samples.push(read_entry(entry)?);
        }
    }
    samples.sort_by_cached_key(sample_order);
    log.insert("samples".into(), Value::Array(samples));
    Ok(Value::Object(log))
}

/// Inspect's order of a log's samples: by epoch, then by id (a number as 20 zero-padded
/// digits, so numbers sort by value).
fn sample_order(sample: &Value) -> (u64, String) {
    let epoch = sample.get("epoch").and_then(Value::as_u64).unwrap_or(1);
    let id = match sample.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => format!("{:0>20}", n.to_string()),
        _ => String::new(),
    };
    (epoch, id)
}

/// The text of an Inspect `content` (a string, or content parts: their `text` parts joined)
/// and the types of the parts left out.
fn content(v: Option<&Value>) -> (String, Vec<String>) {
    match v {
        Some(Value::String(s)) => (s.clone(), Vec::new()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            let mut dropped = Vec::new();
            for p in parts {
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("text") | None, Some(Value::String(t))) => text.push_str(t),
                    (kind, _) => dropped.push(kind.unwrap_or("untyped").to_string()),
                }
            }
            (text, dropped)
        }
        _ => (String::new(), Vec::new()),
    }
}

/// An Inspect `usage` (`ModelUsage`) as a step's [`Usage`]; `None` when it is not an object.
fn inspect_usage(v: &Value) -> Option<Usage> {
    let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    v.is_object().then(|| Usage {
        input_tokens: n("input_tokens"),
        output_tokens: n("output_tokens"),
        cache_read_input_tokens: n("input_tokens_cache_read"),
        cache_creation_input_tokens: n("input_tokens_cache_write"),
        reasoning_tokens: n("reasoning_tokens"),
    })
}

/// A string of an event, with Inspect's `attachment://HASH` references (long text it stores
/// once per sample) replaced by the attachment.
fn resolved<'a>(s: &'a str, attachments: Option<&'a Value>) -> &'a str {
    s.strip_prefix("attachment://")
        .and_then(|hash| attachments?.get(hash)?.as_str())
        .unwrap_or(s)
}

/// What a sample's model events recorded: each call's usage, by the id of its output message
/// and in order, and the tools offered (first definition of each name, in order).
#[derive(Default)]
struct ModelCalls {
    by_message: BTreeMap<String, Usage>,
    in_order: Vec<Option<Usage>>,
    tools: Vec<ToolSpec>,
}

fn model_calls(sample: &Value) -> ModelCalls {
    let mut calls = ModelCalls::default();
    let attachments = sample.get("attachments");
    let events = sample.get("events").and_then(Value::as_array);
    for e in events.into_iter().flatten() {
        if e.get("event").and_then(Value::as_str) != Some("model") {
            continue;
        }
        let output = e.get("output");
        let usage = output.and_then(|o| o.get("usage")).and_then(inspect_usage);
        if let (Some(id), Some(u)) = (
            output
                .and_then(|o| o.pointer("/choices/0/message/id"))
                .and_then(Value::as_str),
            &usage,
        ) {
            calls.by_message.insert(id.to_string(), *u);
        }
        calls.in_order.push(usage);
        for t in e
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(name) = t.get("name").and_then(Value::as_str) else {
                continue;
            };
            if calls.tools.iter().any(|x| x.name == name) {
                continue;
            }
            calls.tools.push(ToolSpec {
                name: name.to_string(),
                description: t
                    .get("description")
                    .and_then(Value::as_str)
                    .map(|d| resolved(d, attachments).to_string())
                    .unwrap_or_default(),
                parameters: t
                    .get("parameters")
                    .filter(|p| p.is_object())
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
            });
        }
    }
    calls
}

/// A sample's Inspect messages as an OpenAI chat-completions message array (each assistant
/// message with the `usage` of its model call, when `calls` has it), and the findings about
/// what was left out (by message index).
fn chat_messages(
    messages: &[Value],
    calls: &ModelCalls,
) -> Result<(Value, Vec<Finding>), ImportError> {
    let mut out = Vec::with_capacity(messages.len());
    let mut findings = Vec::new();
    // Without message ids, the n-th assistant message is the n-th model call's output (when
    // the counts agree: a call whose output was not kept would shift every later one).
    let assistants = messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .count();
    let by_order = assistants == calls.in_order.len();
    let mut nth_assistant = 0usize;
    for (index, m) in messages.iter().enumerate() {
        let err = |message: String| ImportError { index, message };
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| err("no `role`".into()))?;
        let (mut text, dropped) = content(m.get("content"));
        if !dropped.is_empty() {
            findings.push(Finding {
                message: Some(index),
                step: None,
                text: format!(
                    "content parts not imported (a trace holds text): {}",
                    dropped.join(", ")
                ),
            });
        }
        let mut chat = json!({"role": role, "content": text});
        match role {
            "assistant" => {
                let calls_of_message = m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .map(|(i, c)| {
                        // Inspect: `function` is the tool's name, `arguments` an object.
                        let name = c
                            .get("function")
                            .and_then(|f| f.as_str().or_else(|| f.get("name")?.as_str()))
                            .ok_or_else(|| err(format!("tool call {i} has no `function`")))?;
                        let arguments = match c.get("arguments") {
                            Some(Value::String(s)) => s.clone(),
                            Some(v) => v.to_string(),
                            None => "{}".into(),
                        };
                        let mut call = json!({
                            "type": "function",
                            "function": {"name": name, "arguments": arguments},
                        });
                        if let Some(id) = c.get("id").and_then(Value::as_str) {
                            call["id"] = json!(id);
                        }
                        Ok(call)
                    })
                    .collect::<Result<Vec<_>, ImportError>>()?;
                if !calls_of_message.is_empty() {
                    chat["tool_calls"] = Value::Array(calls_of_message);
                }
                let by_id = m
                    .get("id")
                    .and_then(Value::as_str)
                    .and_then(|id| calls.by_message.get(id));
                let usage = by_id.or_else(|| {
                    by_order
                        .then(|| calls.in_order.get(nth_assistant)?.as_ref())
                        .flatten()
                });
                if let Some(u) = usage {
                    chat["usage"] = serde_json::to_value(u).unwrap_or(Value::Null);
                }
                nth_assistant += 1;
            }
            "tool" => {
                if let Some(id) = m.get("tool_call_id") {
                    chat["tool_call_id"] = id.clone();
                }
                // `error: {type, message}`; older logs: `tool_error`, the message alone.
                let error = match (m.get("error"), m.get("tool_error")) {
                    (Some(e), _) if e.is_object() => Some(format!(
                        "{}: {}",
                        e.get("type").and_then(Value::as_str).unwrap_or("error"),
                        e.get("message").and_then(Value::as_str).unwrap_or("")
                    )),
                    (_, Some(Value::String(e))) => Some(format!("error: {e}")),
                    _ => None,
                };
                if let Some(error) = error {
                    // A denied call (Inspect's `approval` error) or another failure.
                    let status = match m.pointer("/error/type").and_then(Value::as_str) {
                        Some("approval") => "denied",
                        _ => "error",
                    };
                    chat["status"] = json!(status);
                    if text.is_empty() {
                        text = error;
                        chat["content"] = json!(text);
                    }
                }
            }
            _ => {}
        }
        out.push(chat);
    }
    Ok((Value::Array(out), findings))
}

/// What ended the sample early, as Inspect recorded it: an `error` (`{message, traceback}`)
/// or a `limit` it hit (`{type, limit}`: messages, tokens, time, …); the trace holds the
/// conversation up to there, so each is a finding.
fn sample_end(sample: &Value) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(error) = sample.get("error").filter(|e| !e.is_null()) {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| error.to_string(), str::to_string);
        out.push(Finding {
            message: None,
            step: None,
            text: format!("the sample ended in an error in Inspect: {message}"),
        });
    }
    if let Some(limit) = sample.get("limit").filter(|l| !l.is_null()) {
        let kind = limit.get("type").and_then(Value::as_str).unwrap_or("a");
        let bound = limit
            .get("limit")
            .map(|l| format!(" ({l})"))
            .unwrap_or_default();
        out.push(Finding {
            message: None,
            step: None,
            text: format!("the sample stopped at its {kind} limit{bound} in Inspect"),
        });
    }
    out
}

/// [`Sample::metadata`]: the sample's fields a trace has no place for.
fn sample_metadata(sample: &Value, id: &str, epoch: u64) -> Value {
    let mut out = Map::new();
    out.insert(
        "id".into(),
        sample.get("id").cloned().unwrap_or_else(|| json!(id)),
    );
    out.insert("epoch".into(), json!(epoch));
    for key in [
        "target",
        "scores",
        "metadata",
        "model_usage",
        "error",
        "limit",
    ] {
        if let Some(v) = sample.get(key).filter(|v| !v.is_null()) {
            // An error's traceback (often longer than the whole conversation) stays in the log.
            let v = match (key, v) {
                ("error", Value::Object(e)) => json!({"message": e.get("message")}),
                _ => v.clone(),
            };
            out.insert(key.into(), v);
        }
    }
    Value::Object(out)
}

/// Imports every sample of the eval log `log` (the JSON log's object; [`read_log`] reads
/// either form), in the log's order. Each trace records the log's model (`eval.model`;
/// `options.model` when the log has none) and task (`eval.task` as the session; else
/// `options.session`), the run id `options.run_id-ID-epochN`, the tools the sample's model
/// calls were offered (with their schemas) and each step's usage.
pub fn inspect_eval(log: &Value, options: &ImportOptions) -> Result<Vec<Sample>, InspectError> {
    let log_err = |m: &str| InspectError::Log(m.to_string());
    let object = log
        .as_object()
        .ok_or_else(|| log_err("not a JSON object"))?;
    let eval = object
        .get("eval")
        .ok_or_else(|| log_err("no `eval` (the task and model)"))?;
    let samples = match object.get("samples") {
        Some(Value::Array(s)) => s,
        None | Some(Value::Null) => {
            return Err(log_err(
                "no `samples` (a log read with header_only, or one whose samples were not \
                 written: export it with its samples)",
            ))
        }
        Some(_) => return Err(log_err("`samples` is not an array")),
    };
    let model = eval.get("model").and_then(Value::as_str);
    let task = eval.get("task").and_then(Value::as_str);
    let mut out = Vec::with_capacity(samples.len());
    for (i, s) in samples.iter().enumerate() {
        let id = match s.get("id") {
            Some(Value::String(id)) => id.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => (i + 1).to_string(),
        };
        let epoch = s.get("epoch").and_then(Value::as_u64).unwrap_or(1);
        let failed = |error: ImportError| InspectError::Sample {
            id: id.clone(),
            epoch,
            error,
        };
        let messages = s.get("messages").and_then(Value::as_array).ok_or_else(|| {
            failed(ImportError {
                index: 0,
                message: "the sample has no `messages` array".into(),
            })
        })?;
        let calls = model_calls(s);
        let (chat, mut findings) = chat_messages(messages, &calls).map_err(failed)?;
        let sample_options = ImportOptions {
            agentloop: options.agentloop.clone(),
            model: model.unwrap_or(&options.model).to_string(),
            session: task.unwrap_or(&options.session).to_string(),
            run_id: format!("{}-{id}-epoch{epoch}", options.run_id),
            tools: calls.tools,
            params: options.params.clone(),
        };
        let mut imported = openai_chat(&chat, &sample_options).map_err(failed)?;
        findings.append(&mut imported.findings);
        findings.extend(sample_end(s));
        imported.findings = findings;
        out.push(Sample {
            metadata: sample_metadata(s, &id, epoch),
            id,
            epoch,
            imported,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::Transcript;

    fn log() -> Value {
        serde_json::from_str(include_str!("../../tests/fixtures/inspect/eval.json"))
            .expect("the fixture is JSON")
    }

    /// The logs `scripts/fixtures/inspect_fixtures.py` wrote with Inspect itself.
    const REAL_EVAL: &[u8] = include_bytes!("../../tests/fixtures/inspect/arithmetic.eval");
    const REAL_JSON: &[u8] = include_bytes!("../../tests/fixtures/inspect/arithmetic.json");

    fn real(bytes: &[u8]) -> Vec<Sample> {
        let log = read_log(bytes, 64 << 20).expect("the log reads");
        inspect_eval(&log, &ImportOptions::default()).expect("import")
    }

    fn step_usage(trace: &agentloop_core::trace::Trace) -> Vec<(u32, Option<Usage>)> {
        Transcript::from_trace(trace)
            .items
            .into_iter()
            .filter_map(|i| match i {
                crate::transcript::Item::Assistant { step, usage, .. } => Some((step, usage)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn inspects_own_eval_and_json_logs_import_to_the_same_traces() {
        let (zip, json) = (real(REAL_EVAL), real(REAL_JSON));
        let ids: Vec<&str> = zip.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["add", "divide", "loop"]);
        assert_eq!(zip.len(), json.len());
        for (a, b) in zip.iter().zip(&json) {
            assert_eq!(a.imported, b.imported, "sample {}", a.id);
            assert_eq!(a.metadata, b.metadata, "sample {}", a.id);
            assert_eq!(agentloop_core::trace::replay(&a.imported.trace), None);
        }
    }

    #[test]
    fn the_clean_sample_keeps_its_usage_per_step_its_tools_schemas_and_its_scores() {
        for bytes in [REAL_EVAL, REAL_JSON] {
            let samples = real(bytes);
            let add = &samples[0];
            assert_eq!(add.imported.findings, []);
            let trace = &add.imported.trace;
            assert_eq!(trace.header.session, "arithmetic");
            assert_eq!(trace.header.config.model, "mockllm/model");
            assert_eq!(
                step_usage(trace),
                [
                    (
                        1,
                        Some(Usage {
                            input_tokens: 52,
                            output_tokens: 18,
                            cache_read_input_tokens: 10,
                            ..Usage::default()
                        })
                    ),
                    (
                        2,
                        Some(Usage {
                            input_tokens: 87,
                            output_tokens: 7,
                            reasoning_tokens: 3,
                            ..Usage::default()
                        })
                    ),
                ]
            );
            let t = Transcript::from_trace(trace);
            assert_eq!(t.summary.final_text.as_deref(), Some("The answer is 5."));
            let names: Vec<&str> = trace.header.tools.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(names, ["add", "divide"]);
            let add_tool = &trace.header.tools[0];
            assert_eq!(add_tool.description, "Add two integers.");
            assert_eq!(
                add_tool.parameters["properties"]["a"],
                json!({"type": "integer", "description": "The first number."})
            );
            assert_eq!(add_tool.parameters["required"], json!(["a", "b"]));
            assert_eq!(trace.header.config.tools, trace.header.tools);
            assert_eq!(add.metadata["target"], "5");
            assert_eq!(add.metadata["scores"]["includes"]["value"], "C");
            assert_eq!(
                add.metadata["model_usage"]["mockllm/model"]["input_tokens"],
                139
            );
        }
    }

    #[test]
    fn the_errored_and_the_limited_sample_are_imported_with_a_finding_each() {
        let samples = real(REAL_EVAL);
        let texts = |s: &Sample| -> Vec<String> {
            s.imported.findings.iter().map(|f| f.to_string()).collect()
        };
        let divide = &samples[1];
        assert!(
            texts(divide).contains(
                &"the sample ended in an error in Inspect: ZeroDivisionError('division by zero')"
                    .to_string()
            ),
            "{:?}",
            texts(divide)
        );
        assert_eq!(
            divide.metadata["error"]["message"],
            "ZeroDivisionError('division by zero')"
        );
        assert_eq!(
            step_usage(&divide.imported.trace)[0]
                .1
                .map(|u| u.output_tokens),
            Some(16)
        );
        let looped = &samples[2];
        assert!(
            texts(looped)
                .iter()
                .any(|t| t.starts_with("the sample stopped at its message limit")),
            "{:?}",
            texts(looped)
        );
        let usage = step_usage(&looped.imported.trace);
        let inputs: Vec<u64> = usage
            .iter()
            .filter_map(|(_, u)| Some(u.as_ref()?.input_tokens))
            .collect();
        assert_eq!(inputs, [40, 50, 60]);
        for s in &samples {
            assert_eq!(agentloop_core::trace::replay(&s.imported.trace), None);
        }
    }

    /// A zip of `entries` (name, text), deflated.
    fn zip_of(entries: &[(&str, &str)]) -> Vec<u8> {
        zip_with(entries, false)
    }

    /// A zip of `entries`, deflated, with ZIP64 fields when `zip64`.
    fn zip_with(entries: &[(&str, &str)], zip64: bool) -> Vec<u8> {
        use std::io::Write as _;
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .large_file(zip64);
        for (name, text) in entries {
            w.start_file(*name, options).expect("entry");
            w.write_all(text.as_bytes()).expect("write");
        }
        w.finish().expect("zip").into_inner()
    }

    #[test]
    fn a_deflated_or_zip64_eval_reads_like_inspects_own() {
        // Older Inspect versions deflate; a large log has ZIP64 fields.
        let log = read_log(REAL_JSON, 64 << 20).expect("json");
        let header = json!({"version": 2, "eval": log["eval"].clone()}).to_string();
        let samples: Vec<String> = log["samples"]
            .as_array()
            .expect("samples")
            .iter()
            .map(Value::to_string)
            .collect();
        for zip64 in [false, true] {
            // The samples in reverse: read back in Inspect's order all the same.
            let mut entries = vec![("header.json", header.as_str())];
            let names = [
                "samples/loop_epoch_1.json",
                "samples/divide_epoch_1.json",
                "samples/add_epoch_1.json",
            ];
            for (name, text) in names.iter().zip(samples.iter().rev()) {
                entries.push((name, text.as_str()));
            }
            let bytes = zip_with(&entries, zip64);
            let from_zip = inspect_eval(
                &read_log(&bytes, 64 << 20).expect("zip"),
                &ImportOptions::default(),
            )
            .expect("import");
            let from_json = real(REAL_JSON);
            for (a, b) in from_zip.iter().zip(&from_json) {
                assert_eq!(a.imported, b.imported, "sample {} (zip64 {zip64})", a.id);
            }
        }
    }

    #[test]
    fn a_zip_that_inflates_past_the_limit_is_refused() {
        let sample = format!(
            "{}{}",
            " ".repeat(1 << 20),
            r#"{"id": 1, "epoch": 1, "messages": []}"#
        );
        let bomb = zip_of(&[
            ("header.json", r#"{"eval": {"task": "t"}}"#),
            ("samples/1_epoch_1.json", &sample),
        ]);
        assert!(bomb.len() < 10_000, "{}", bomb.len());
        assert_eq!(
            read_log(&bomb, 100_000),
            Err(InspectError::TooLarge {
                limit: 100_000,
                uncompressed: true
            })
        );
        assert!(read_log(&bomb, 2 << 20).is_ok());
        assert_eq!(
            read_log(REAL_JSON, 1_000),
            Err(InspectError::TooLarge {
                limit: 1_000,
                uncompressed: false
            })
        );
    }

    /// The real `.eval` with every central-directory entry declaring `size` bytes inflated.
    fn declaring(size: u32) -> Vec<u8> {
        let mut bytes = REAL_EVAL.to_vec();
        let mut i = 0;
        while let Some(at) = bytes[i..].windows(4).position(|w| w == b"PK\x01\x02") {
            let at = i + at;
            bytes[at + 24..at + 28].copy_from_slice(&size.to_le_bytes());
            i = at + 4;
        }
        bytes
    }

    #[test]
    fn a_zstd_entry_larger_than_it_declares_or_than_the_limit_is_refused() {
        // Inspect's entries are zstd: a size that lies small overflows its buffer.
        match read_log(&declaring(100), 64 << 20) {
            Err(InspectError::Zip(e)) => assert!(e.contains("more than the 100 bytes"), "{e}"),
            other => panic!("{other:?}"),
        }
        // A size over the limit is refused before anything is inflated.
        assert_eq!(
            read_log(&declaring(u32::MAX - 1), 64 << 20),
            Err(InspectError::TooLarge {
                limit: 64 << 20,
                uncompressed: true
            })
        );
        // All entries together over the limit: refused too.
        let all = read_log(REAL_EVAL, 20_000);
        assert!(matches!(all, Err(InspectError::TooLarge { .. })), "{all:?}");
    }

    #[test]
    fn a_damaged_or_foreign_file_is_a_typed_error() {
        let half = &REAL_EVAL[..REAL_EVAL.len() / 2];
        assert!(matches!(read_log(half, 1 << 20), Err(InspectError::Zip(_))));
        assert!(matches!(
            read_log(b"PK\x03\x04 not really", 1 << 20),
            Err(InspectError::Zip(_))
        ));
        assert!(matches!(
            read_log(b"hello", 1 << 20),
            Err(InspectError::Log(_))
        ));
        assert!(matches!(
            read_log(b"{oops", 1 << 20),
            Err(InspectError::Log(_))
        ));
        let no_header = zip_of(&[("samples/1_epoch_1.json", "{}")]);
        assert!(matches!(
            read_log(&no_header, 1 << 20),
            Err(InspectError::Log(_))
        ));
        let bad_sample = zip_of(&[("header.json", r#"{"eval": {}}"#), ("samples/x.json", "{")]);
        assert!(matches!(
            read_log(&bad_sample, 1 << 20),
            Err(InspectError::Log(_))
        ));
        // Damaged bytes anywhere: an error or a log, never a panic.
        for i in (0..REAL_EVAL.len()).step_by(97) {
            let mut bytes = REAL_EVAL.to_vec();
            bytes[i] ^= 0x5a;
            if let Ok(log) = read_log(&bytes, 1 << 20) {
                let _ = inspect_eval(&log, &ImportOptions::default());
            }
        }
    }

    #[test]
    fn an_errored_or_limited_sample_names_why_it_ended() {
        let mut log = log();
        log["samples"][0]["error"] = json!({
            "message": "RuntimeError('sandbox died')",
            "traceback": "Traceback ...",
        });
        log["samples"][1]["limit"] = json!({"type": "token", "limit": 1000});
        let samples = inspect_eval(&log, &ImportOptions::default()).expect("import");
        let texts = |i: usize| -> Vec<String> {
            samples[i]
                .imported
                .findings
                .iter()
                .map(|f| f.to_string())
                .collect()
        };
        assert_eq!(
            texts(0),
            ["the sample ended in an error in Inspect: RuntimeError('sandbox died')"]
        );
        assert!(
            texts(1).contains(&"the sample stopped at its token limit (1000) in Inspect".into()),
            "{:?}",
            texts(1)
        );
        // The conversation up to there is still imported and replays.
        assert_eq!(
            agentloop_core::trace::replay(&samples[0].imported.trace),
            None
        );
    }

    #[test]
    fn every_sample_becomes_a_trace_that_replays() {
        let samples = inspect_eval(&log(), &ImportOptions::default()).expect("import");
        assert_eq!(samples.len(), 2);
        for s in &samples {
            assert_eq!(agentloop_core::trace::replay(&s.imported.trace), None);
            assert_eq!(s.imported.trace.header.session, "arithmetic");
            assert_eq!(s.imported.trace.header.config.model, "openai/gpt-4o-mini");
        }
        let first = &samples[0];
        assert_eq!((first.id.as_str(), first.epoch), ("1", 1));
        assert_eq!(first.file_stem(), "1_epoch1");
        assert_eq!(first.imported.findings, []);
        let t = Transcript::from_trace(&first.imported.trace);
        assert_eq!(t.summary.steps, 2);
        assert_eq!(t.summary.tool_calls, 1);
        assert_eq!(t.summary.final_text.as_deref(), Some("The answer is 5."));
        assert_eq!(t.tools.len(), 1);
        assert_eq!(t.tools[0].name, "calculator");
        assert_eq!(first.imported.replies[0].tool_calls[0].0, "call_a1");
        assert_eq!(
            first.imported.replies[0].tool_calls[0].2,
            r#"{"expression":"2+3"}"#
        );
    }

    #[test]
    fn what_a_trace_cannot_hold_is_a_finding() {
        let samples = inspect_eval(&log(), &ImportOptions::default()).expect("import");
        let second = &samples[1];
        assert_eq!((second.id.as_str(), second.epoch), ("two words", 2));
        assert_eq!(second.file_stem(), "two_words_epoch2");
        assert_eq!(
            second.imported.findings.len(),
            1,
            "{:?}",
            second.imported.findings
        );
        assert_eq!(second.imported.findings[0].message, Some(2));
        assert!(second.imported.findings[0].text.contains("reasoning"));
        let t = Transcript::from_trace(&second.imported.trace);
        assert_eq!(
            t.summary.final_text.as_deref(),
            Some("I could not divide by zero.")
        );
        // The tool's error is the call's result.
        assert!(serde_json::to_string(&second.imported.trace.records)
            .expect("json")
            .contains("parsing: division by zero"));
    }

    #[test]
    fn a_log_without_samples_or_a_bad_sample_is_an_error() {
        let o = ImportOptions::default();
        assert!(matches!(
            inspect_eval(&json!({"eval": {"task": "t"}}), &o),
            Err(InspectError::Log(_))
        ));
        assert!(matches!(
            inspect_eval(&json!([]), &o),
            Err(InspectError::Log(_))
        ));
        let bad = json!({"eval": {}, "samples": [{"id": 7, "messages": [{"content": "x"}]}]});
        match inspect_eval(&bad, &o) {
            Err(e @ InspectError::Sample { .. }) => {
                assert_eq!(e.to_string(), "sample 7 (epoch 1): message 0: no `role`")
            }
            other => panic!("{other:?}"),
        }
    }
}
