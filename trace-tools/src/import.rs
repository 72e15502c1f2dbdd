//! Importing a conversation recorded elsewhere as a trace (`agentloop trace import`).
//!
//! An OpenAI chat-completions message array (`system`, `user`, `assistant` with `tool_calls`,
//! `tool` results) is turned into the inputs the machines would have received — each assistant
//! message streamed as one model reply, each `tool` message as the result of its call — and fed
//! to fresh machines, which record the trace. An assistant message may carry the `usage` of the
//! response it came from (not part of a chat message, but where a recorder has it): OpenAI's
//! `prompt_tokens`, `completion_tokens`, `prompt_tokens_details.cached_tokens` and
//! `completion_tokens_details.reasoning_tokens`, or agentloop's own [`Usage`] fields; the
//! step's `finish_step` carries it, so the trace reports each step's tokens. The tools' schemas
//! come from [`ImportOptions::tools`] when the recorder kept them, and a `tool` message may
//! carry the call's `status` (agentloop's [`ToolStatus`] names; `completed` when absent) (a tool called but not
//! listed there is offered with a permissive `{"type": "object"}`). Where the machines act
//! differently from the
//! recording (a call without a result, a reply after the run would have ended, a result nobody
//! asked for), the import says so in a [`Finding`]. Pure: the caller reads and writes files.
//!
//! [`openai_chat_to`] hands each record to a sink as the machines produce it and keeps none
//! of the requests, so the memory it needs is linear in the recording (a caller writing the
//! records to a file holds one at a time). Written with
//! [`TraceEncoder`](agentloop_core::trace::TraceEncoder), the file is linear too: each
//! `call_model` record holds only the messages added since the previous request. In memory a
//! request holds the whole conversation so far, so [`openai_chat`], which collects the records
//! into a [`Trace`], is quadratic in the turns.

use std::collections::{BTreeMap, VecDeque};

use serde_json::Value;

use agentloop_core::effect::Effect;
use agentloop_core::event::{ApprovalDecision, AttemptId, Event};
use agentloop_core::message::{FinishReason, Message, MessageDelta, ToolStatus, Usage};
use agentloop_core::react::{Run, RunConfig};
use agentloop_core::tool_spec::ToolSpec;
use agentloop_core::trace::{Trace, TraceHeader, TraceRecord, TRACE_VERSION};
use agentloop_core::ModelParams;
use agentloop_core::Step;

use crate::transcript::{Summary, Transcript};

/// One recorded assistant reply.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// Index of the message in the input array.
    pub message: usize,
    /// Visible text.
    pub text: String,
    /// Tool calls: id, name, raw argument text.
    pub tool_calls: Vec<(String, String, String)>,
    /// The tokens the response used, when the recording has them.
    pub usage: Option<Usage>,
}

/// Where the machines acted differently from the recording, or what was not imported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The message of the input array it concerns, if one.
    pub message: Option<usize>,
    /// The step (model call index) it concerns, if one.
    pub step: Option<u32>,
    /// What happened.
    pub text: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.step, self.message) {
            (Some(s), Some(m)) => write!(f, "step {s} (message {m}): {}", self.text),
            (Some(s), None) => write!(f, "step {s}: {}", self.text),
            (None, Some(m)) => write!(f, "message {m}: {}", self.text),
            (None, None) => f.write_str(&self.text),
        }
    }
}

/// The result of an import.
#[derive(Clone, Debug, PartialEq)]
pub struct Imported {
    /// The trace the machines recorded.
    pub trace: Trace,
    /// The assistant replies, in order (for a scripted model's script).
    pub replies: Vec<Reply>,
    /// Differences between the machines and the recording.
    pub findings: Vec<Finding>,
}

/// The result of a streamed import ([`openai_chat_to`]): what [`Imported`] has but the
/// records, which went to the sink.
#[derive(Clone, Debug, PartialEq)]
pub struct Streamed {
    /// How many records followed the header.
    pub records: u64,
    /// The assistant replies, in order (for a scripted model's script).
    pub replies: Vec<Reply>,
    /// Differences between the machines and the recording.
    pub findings: Vec<Finding>,
    /// The trace's summary ([`Transcript`]'s).
    pub summary: Summary,
}

/// Why a streamed import stopped: bad input, or the sink's own error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError<E> {
    /// The input is not a chat-completions message array.
    #[error(transparent)]
    Import(#[from] ImportError),
    /// The sink refused a record (a write failed).
    #[error("{0}")]
    Sink(E),
}

/// The input is not a chat-completions message array.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("message {index}: {message}")]
pub struct ImportError {
    /// Index of the offending message (0 for the array itself).
    pub index: usize,
    /// What is wrong.
    pub message: String,
}

/// Settings of an import.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportOptions {
    /// The crate version recorded in the header.
    pub agentloop: String,
    /// The model name recorded.
    pub model: String,
    /// The session name recorded.
    pub session: String,
    /// The run id recorded.
    pub run_id: String,
    /// The tools the recording offered, with their schemas, in order (empty: the recording
    /// kept none). A tool the recording calls that is not here is offered with a permissive
    /// schema after them.
    pub tools: Vec<ToolSpec>,
    /// The sampling parameters the recording asked for (temperature, max tokens), recorded in
    /// the header's configuration and so in every model request of the trace.
    pub params: ModelParams,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            agentloop: String::new(),
            model: "imported".into(),
            session: "imported".into(),
            run_id: "run-imported".into(),
            tools: Vec::new(),
            params: ModelParams::default(),
        }
    }
}

/// The text of a `content` field: a string, `null`, or an array of `{type: text, text}` parts.
fn content_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The `usage` of an assistant message: OpenAI's fields (`prompt_tokens`, …) or agentloop's
/// [`Usage`] fields; `None` when absent or neither.
fn usage_of(v: Option<&Value>) -> Option<Usage> {
    let v = v.filter(|v| v.is_object())?;
    let n = |v: Option<&Value>| v.and_then(Value::as_u64);
    if v.get("prompt_tokens").is_some() || v.get("completion_tokens").is_some() {
        return Some(Usage {
            input_tokens: n(v.get("prompt_tokens")).unwrap_or(0),
            output_tokens: n(v.get("completion_tokens")).unwrap_or(0),
            cache_read_input_tokens: n(v.pointer("/prompt_tokens_details/cached_tokens"))
                .unwrap_or(0),
            cache_creation_input_tokens: 0,
            reasoning_tokens: n(v.pointer("/completion_tokens_details/reasoning_tokens"))
                .unwrap_or(0),
        });
    }
    if v.get("input_tokens").is_some() || v.get("output_tokens").is_some() {
        return serde_json::from_value(v.clone()).ok();
    }
    None
}

struct Recording {
    system: Option<String>,
    input: Vec<Message>,
    replies: Vec<Reply>,
    /// Tool results by call id: (message index, content, status).
    results: BTreeMap<String, (usize, String, ToolStatus)>,
    findings: Vec<Finding>,
}

fn read(messages: &Value) -> Result<Recording, ImportError> {
    let array = messages.as_array().ok_or_else(|| ImportError {
        index: 0,
        message: "the input is not a JSON array of messages".into(),
    })?;
    let mut r = Recording {
        system: None,
        input: Vec::new(),
        replies: Vec::new(),
        results: BTreeMap::new(),
        findings: Vec::new(),
    };
    for (index, m) in array.iter().enumerate() {
        let err = |message: String| ImportError { index, message };
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| err("no `role`".into()))?;
        let content = content_text(m.get("content"));
        match role {
            "system" | "developer" if r.system.is_none() && r.replies.is_empty() => {
                r.system = Some(content)
            }
            "system" | "developer" => r.findings.push(Finding {
                message: Some(index),
                step: None,
                text: "a later system message is not imported (one system prompt per run)".into(),
            }),
            "user" if r.replies.is_empty() => r.input.push(Message::user(content)),
            "user" => {
                r.findings.push(Finding {
                    message: Some(index),
                    step: None,
                    text: format!(
                        "a user message after the first reply starts another run; messages \
                         {index}..{} are not imported (one run per trace)",
                        array.len().saturating_sub(1)
                    ),
                });
                break;
            }
            "assistant" => {
                let mut tool_calls = Vec::new();
                for (i, c) in m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .enumerate()
                {
                    let f = c.get("function");
                    let name = f
                        .and_then(|f| f.get("name"))
                        .and_then(Value::as_str)
                        .ok_or_else(|| err(format!("tool call {i} has no function.name")))?;
                    let arguments = match f.and_then(|f| f.get("arguments")) {
                        Some(Value::String(s)) => s.clone(),
                        Some(v) => v.to_string(),
                        None => "{}".into(),
                    };
                    let id = c
                        .get("id")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("call_{}_{i}", r.replies.len()));
                    tool_calls.push((id, name.to_string(), arguments));
                }
                if m.get("function_call").is_some() {
                    r.findings.push(Finding {
                        message: Some(index),
                        step: None,
                        text: "the legacy `function_call` is not imported (use `tool_calls`)"
                            .into(),
                    });
                }
                r.replies.push(Reply {
                    message: index,
                    text: content,
                    tool_calls,
                    usage: usage_of(m.get("usage")),
                });
            }
            "tool" => {
                let id = m
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| err("a tool message without `tool_call_id`".into()))?;
                // Not a chat-completions field: where a recorder knows the call failed, its
                // `status` (agentloop's names: `error`, `denied`, …); completed otherwise.
                let status = m
                    .get("status")
                    .cloned()
                    .and_then(|s| serde_json::from_value(s).ok())
                    .unwrap_or(ToolStatus::Completed);
                r.results.insert(id.to_string(), (index, content, status));
            }
            other => return Err(err(format!("unknown role `{other}`"))),
        }
    }
    if r.input.is_empty() {
        return Err(ImportError {
            index: 0,
            message: "no user message before the first assistant message".into(),
        });
    }
    Ok(r)
}

/// The deltas a provider would have streamed for `reply`.
fn deltas(reply: &Reply) -> Vec<MessageDelta> {
    let mut out = vec![MessageDelta::StartStep];
    if !reply.text.is_empty() {
        out.push(MessageDelta::TextStart);
        out.push(MessageDelta::TextDelta {
            text: reply.text.clone(),
        });
        out.push(MessageDelta::TextEnd);
    }
    for (id, name, arguments) in &reply.tool_calls {
        out.push(MessageDelta::ToolInputStart {
            id: id.clone(),
            name: name.clone(),
        });
        out.push(MessageDelta::ToolInputDelta {
            id: id.clone(),
            delta: arguments.clone(),
        });
        out.push(MessageDelta::ToolInputEnd { id: id.clone() });
        out.push(MessageDelta::ToolCall {
            id: id.clone(),
            name: name.clone(),
            arguments: arguments.clone(),
        });
    }
    out.push(MessageDelta::FinishStep {
        finish_reason: Some(if reply.tool_calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        }),
        raw_finish_reason: None,
        usage: reply.usage,
    });
    out
}

/// Imports an OpenAI chat-completions message array (see the module docs) into a trace held
/// in memory (O(n²) in the turns: see [`openai_chat_to`] for a file).
pub fn openai_chat(messages: &Value, options: &ImportOptions) -> Result<Imported, ImportError> {
    let mut trace: Option<Trace> = None;
    let streamed = openai_chat_to(messages, options, |record| {
        match (record, trace.as_mut()) {
            (TraceRecord::Header(h), None) => trace = Some(Trace::new((**h).clone())),
            (r, Some(t)) => t.records.push(r.clone()),
            (_, None) => {}
        }
        Ok::<(), std::convert::Infallible>(())
    })
    .map_err(|e| match e {
        StreamError::Import(e) => e,
        StreamError::Sink(never) => match never {},
    })?;
    let trace = trace.ok_or_else(|| ImportError {
        index: 0,
        message: "no trace header was produced".into(),
    })?;
    Ok(Imported {
        trace,
        replies: streamed.replies,
        findings: streamed.findings,
    })
}

/// Hands a trace's records, in order and indexed, to `sink`: the header first, then each
/// input with the transitions and effects it caused.
struct Recorder<S> {
    sink: S,
    next: u64,
    /// The records without the requests' conversations, for the summary (linear in size).
    light: Trace,
}

impl<S, E> Recorder<S>
where
    S: FnMut(&TraceRecord) -> Result<(), E>,
{
    fn send(&mut self, record: TraceRecord) -> Result<(), E> {
        (self.sink)(&record)?;
        let mut record = record;
        if let TraceRecord::Effect {
            effect: Effect::CallModel { request },
            ..
        } = &mut record
        {
            request.messages = Default::default();
        }
        self.light.records.push(record);
        Ok(())
    }

    fn record(&mut self, event: Event, step: &Step) -> Result<(), E> {
        let index = self.next;
        self.next += 1;
        self.send(TraceRecord::Input { index, event })?;
        for t in &step.transitions {
            let index = self.next;
            self.next += 1;
            self.send(TraceRecord::Transition {
                index,
                transition: t.clone(),
            })?;
        }
        for e in &step.effects {
            let index = self.next;
            self.next += 1;
            self.send(TraceRecord::Effect {
                index,
                effect: e.clone(),
            })?;
        }
        Ok(())
    }
}

/// Imports an OpenAI chat-completions message array (see the module docs), handing each
/// record of the trace to `sink` as it is made (the header first) and keeping none: memory
/// linear in the recording. Stops at the sink's first error.
pub fn openai_chat_to<S, E>(
    messages: &Value,
    options: &ImportOptions,
    sink: S,
) -> Result<Streamed, StreamError<E>>
where
    S: FnMut(&TraceRecord) -> Result<(), E>,
{
    let Recording {
        system,
        input,
        replies,
        mut results,
        mut findings,
    } = read(messages)?;
    // The tools the recording offered (with their schemas), then the ones it calls without
    // having listed them, with permissive schemas.
    let mut tools: Vec<ToolSpec> = options.tools.clone();
    let mut names: Vec<String> = replies
        .iter()
        .flat_map(|r| r.tool_calls.iter().map(|(_, n, _)| n.clone()))
        .filter(|n| !options.tools.iter().any(|t| &t.name == n))
        .collect();
    names.sort();
    names.dedup();
    tools.extend(names.into_iter().map(|name| ToolSpec {
        name,
        description: String::new(),
        parameters: serde_json::json!({"type": "object"}),
    }));
    let config = RunConfig {
        model: options.model.clone(),
        system,
        tools: tools.clone().into(),
        // One step more than recorded: the last recorded step is not the final-reminder step.
        max_steps: replies.len() as u32 + 1,
        params: options.params.clone(),
        // The recorder compacted nothing: recorded usage near the model's window must not
        // make the machines compact (no budget is exceeded).
        context_budget_tokens: Some(u64::MAX),
        ..RunConfig::default()
    };
    let header = TraceHeader {
        version: TRACE_VERSION,
        agentloop: options.agentloop.clone(),
        session: options.session.clone(),
        timeouts: None,
        config: config.clone(),
        tools: tools.into(),
    };
    let mut sink = sink;
    sink(&TraceRecord::Header(Box::new(header.clone()))).map_err(StreamError::Sink)?;
    let mut trace = Recorder {
        sink,
        next: 0,
        light: Trace::new(header),
    };
    let mut run = Run::new(config);
    let mut queue: VecDeque<Event> = VecDeque::from([Event::Start {
        run_id: options.run_id.clone(),
        history: Vec::new(),
        input,
        session_turns: 0,
    }]);
    let mut used = 0usize;
    // The step whose tool calls are being answered.
    let mut current: Option<u32> = None;
    while let Some(event) = queue.pop_front() {
        let step = run.handle(event.clone());
        trace.record(event, &step).map_err(StreamError::Sink)?;
        for effect in &step.effects {
            match effect {
                Effect::CallModel { request } => {
                    let k = request.model_call_index;
                    let Some(reply) = replies.get(k.saturating_sub(1) as usize) else {
                        findings.push(Finding {
                            message: None,
                            step: Some(k),
                            text: "the machines would call the model again, but the recording \
                                   has no further assistant message; the trace ends here"
                                .into(),
                        });
                        continue;
                    };
                    used = used.max(k as usize);
                    current = Some(k);
                    let attempt = AttemptId {
                        run_id: request.run_id.clone(),
                        model_call_index: k,
                        attempt: request.attempt,
                    };
                    queue.push_back(Event::StreamOpened {
                        attempt: attempt.clone(),
                    });
                    for (seq, delta) in deltas(reply).into_iter().enumerate() {
                        queue.push_back(Event::Delta {
                            attempt: attempt.clone(),
                            seq: seq as u64,
                            delta,
                        });
                    }
                    queue.push_back(Event::done(attempt));
                }
                Effect::RunTool { call } => match results.remove(&call.id) {
                    Some((_, content, status)) => queue.push_back(Event::ToolFinished {
                        tool_call_id: call.id.clone(),
                        status,
                        content,
                    }),
                    None => {
                        findings.push(Finding {
                            message: None,
                            step: current,
                            text: format!(
                                "tool call {} ({}) has no result in the recording; imported as \
                                 an error result",
                                call.id, call.name
                            ),
                        });
                        queue.push_back(Event::ToolFinished {
                            tool_call_id: call.id.clone(),
                            status: ToolStatus::Error,
                            content: "no result recorded".into(),
                        });
                    }
                },
                Effect::RequestApproval { call } => {
                    findings.push(Finding {
                        message: None,
                        step: current,
                        text: format!(
                            "the machines would ask a human about call {} ({}) (a repeated \
                             call); imported as approved",
                            call.id, call.name
                        ),
                    });
                    queue.push_back(Event::Approval {
                        tool_call_id: call.id.clone(),
                        decision: ApprovalDecision::Approved,
                    });
                }
                Effect::CommitRunEnd { .. } => queue.push_back(Event::RunEndCommitted),
                _ => {}
            }
        }
        if run.is_terminal() {
            break;
        }
    }
    for r in replies.iter().skip(used) {
        findings.push(Finding {
            message: Some(r.message),
            step: None,
            text: "the machines had ended the run before this assistant message; not imported"
                .into(),
        });
    }
    for (id, (index, _, _)) in results {
        findings.push(Finding {
            message: Some(index),
            step: None,
            text: format!("the result of tool call {id} was never asked for; not imported"),
        });
    }
    Ok(Streamed {
        records: trace.next,
        summary: Transcript::from_trace(&trace.light).summary,
        replies,
        findings,
    })
}

/// The longest stem [`safe_stem`] returns, in bytes: with the suffixes the importers add
/// (`_epochN`, `-N`, `.script.json`) a file name stays well under the 255 bytes file systems
/// take.
pub(crate) const MAX_STEM_BYTES: usize = 120;

/// `id` as a file name: characters other than ASCII letters, digits, `-`, `_` and `.` replaced
/// by `_`, leading dots dropped; `fallback` when nothing is left. A longer stem than
/// [`MAX_STEM_BYTES`] is cut and ends in `-` and 16 hex digits of a hash of the whole `id`, so
/// two long ids that share their start still get two names. Names the per-sample and
/// per-trace files of the multi-trace imports.
pub(crate) fn safe_stem(id: &str, fallback: &str) -> String {
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let safe = safe.trim_start_matches('.');
    if safe.is_empty() {
        return fallback.into();
    }
    if safe.len() <= MAX_STEM_BYTES {
        return safe.into();
    }
    // FNV-1a: stable across builds and platforms (the name must not change between imports).
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    // Every character of `safe` is ASCII, so any byte offset is a character boundary.
    format!("{}-{hash:016x}", &safe[..MAX_STEM_BYTES - 17])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_id_is_shortened_with_a_hash_of_the_whole_id() {
        assert_eq!(safe_stem("a b/c", "x"), "a_b_c");
        assert_eq!(safe_stem("...", "x"), "x");
        let long = "é".repeat(3_000);
        let a = safe_stem(&long, "x");
        let b = safe_stem(&format!("{long}!"), "x");
        assert_eq!(a.len(), MAX_STEM_BYTES);
        assert_eq!(b.len(), MAX_STEM_BYTES);
        assert_ne!(a, b, "two ids sharing their start get two names");
        assert_eq!(a, safe_stem(&long, "x"), "the same id gets the same name");
        assert!(a.starts_with("___"), "{a}");
        let exact = "y".repeat(MAX_STEM_BYTES);
        assert_eq!(safe_stem(&exact, "x"), exact);
    }
}
