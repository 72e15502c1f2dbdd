//! Importing an [Inspect AI](https://inspect.aisi.org.uk) eval log (its JSON format) as
//! traces, one per sample (`agentloop trace import --from inspect-eval`).
//!
//! An eval log is one JSON object: `eval` (the task, the model, …), `plan`, `results`,
//! `stats`, and `samples`, each with an `id`, an `epoch` and the sample's whole conversation in
//! `messages`. An Inspect message is a chat message with a `role` (`system`, `user`,
//! `assistant`, `tool`) and a `content` that is a string or a list of content parts (`{type:
//! "text", text}`, `{type: "reasoning", reasoning}`, images, …); an assistant's `tool_calls`
//! are `{id, function, arguments}` with the tool's name in `function` and the arguments as a
//! JSON object; a tool message names its call in `tool_call_id` and may carry an `error`
//! (`{type, message}`; `tool_error`, a string, in older logs).
//!
//! Each sample's messages are rewritten as an OpenAI chat-completions message array and
//! imported by [`crate::import::openai_chat`], so the machines, the findings and the trace are
//! those of the chat import. What the trace cannot hold is named in a finding: content parts
//! other than text (reasoning, images, audio), which are left out, and a sample that Inspect
//! recorded as ended by an `error` or a `limit` (the trace holds the conversation up to there).
//! Pure: the caller reads the log and writes the traces.

use serde_json::{json, Value};

use crate::import::{openai_chat, Finding, ImportError, ImportOptions, Imported};

/// One sample of an eval log, imported.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The sample's id (a number or a string in the log), as text.
    pub id: String,
    /// The epoch (1 when the log gives none).
    pub epoch: u64,
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

/// Why an eval log could not be imported: the log's shape, or one sample's messages.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// The log is not an eval log with samples.
    #[error("not an Inspect eval log: {0}")]
    Log(String),
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

/// A sample's Inspect messages as an OpenAI chat-completions message array, and the findings
/// about what was left out (by message index).
fn chat_messages(messages: &[Value]) -> Result<(Value, Vec<Finding>), ImportError> {
    let mut out = Vec::with_capacity(messages.len());
    let mut findings = Vec::new();
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
                let calls = m
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
                if !calls.is_empty() {
                    chat["tool_calls"] = Value::Array(calls);
                }
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
                if let Some(error) = error.filter(|_| text.is_empty()) {
                    text = error;
                    chat["content"] = json!(text);
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

/// Imports every sample of the eval log `log` (see the module docs), in the log's order.
/// Each trace records the log's model (`eval.model`; `options.model` when the log has none)
/// and task (`eval.task` as the session; else `options.session`), and the run id
/// `options.run_id-ID-epochN`.
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
        let (chat, mut findings) = chat_messages(messages).map_err(failed)?;
        let sample_options = ImportOptions {
            agentloop: options.agentloop.clone(),
            model: model.unwrap_or(&options.model).to_string(),
            session: task.unwrap_or(&options.session).to_string(),
            run_id: format!("{}-{id}-epoch{epoch}", options.run_id),
        };
        let mut imported = openai_chat(&chat, &sample_options).map_err(failed)?;
        findings.append(&mut imported.findings);
        findings.extend(sample_end(s));
        imported.findings = findings;
        out.push(Sample {
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
