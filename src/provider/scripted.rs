//! The offline scripted model: replies come from a JSON script, so runs need no key and no
//! network, and are deterministic.
//!
//! A script is `{"turns": [...]}` (and an optional `"description"` for its reader). Turn `k` answers the session's `k`-th model step: the turn
//! served is `turns[request.session_turn]`, where `session_turn` counts the assistant turns the
//! session has already committed, so a resumed session continues the script where it left off.
//! With `"per_prompt": true` the script starts again at every prompt instead: turn `k` answers
//! the `k`-th model step since the request's last user message, so a session can go on for as
//! many prompts as the user likes (the built-in demo is such a script).
//! The model keeps no counters: the reply is a pure function of the request.
//!
//! ```json
//! {"turns": [
//!   {"text": "Let me calculate that.",
//!    "tool_calls": [{"name": "calculator", "arguments": {"expression": "{{prompt_expression}}"}}]},
//!   {"errors": [{"status": 429, "retry_after_ms": 20}, {"stall": true}],
//!    "text": "The answer is {{last_tool_result}}.", "chunk_chars": 4}
//! ]}
//! ```
//!
//! Each turn may have:
//! - `text`, `reasoning`: streamed in deltas of `chunk_chars` characters (default 8).
//! - `when`: a condition, or a list of conditions that must all hold, for the turn to exist
//!   for a request; turns are numbered among those whose conditions hold.
//!   `"prompt_has_expression"` / `"prompt_has_no_expression"`: the prompt (the request's last
//!   user message) has (or has no) arithmetic expression (the longest run of
//!   `0-9 . + - * / % ^ ( )` and spaces that holds a digit, a run with an operator winning over
//!   a bare number: `"What is 2+3?"` → `2+3`). `"tools_offered"` / `"no_tools_offered"`: the
//!   request offers tools (or none, as on a run's last allowed step).
//!
//! The built-in reminders the run appends as user messages on its last step (the max-steps and
//! the usage-limit reminder) are not prompts: the prompt, and the steps since it, are read as if
//! they were not there. (A reminder configured with other text counts as a prompt.)
//! - `tool_calls`: `[{"id"?, "name", "arguments"?}]`; ids default to `call_<session_turn>_<i>`,
//!   arguments to `{}`. A JSON *string* as `arguments` is sent verbatim as the raw argument text,
//!   so a script can exercise invalid or truncated arguments (R-STR-6).
//! - `errors`: failures served to the step's first attempts, in order: attempt `a` (from 1) gets
//!   `errors[a-1]` while there is one, then the reply. `{"status": 429, "retry_after_ms"?: 20}`
//!   fails [`Model::stream`] with the error kind the status implies (optionally overridden with
//!   `"kind": "context_overflow"` etc., and `"message"`); `{"stall": true}` opens a stream that
//!   yields `start-step` and then nothing, ever; `{"disconnect_after_chars": N}` streams up to `N`
//!   characters of the text and then fails with a `connection` error.
//!
//! Templates, in `text` and in the string values of tool `arguments`: `{{last_tool_result}}`
//! becomes the content of the last tool message of the request (empty if none), and
//! `{{prompt_expression}}` the arithmetic expression in the last user message (as for `when`).
//!
//! [`ScriptedModel::from_json`] takes a script as a JSON value, [`ScriptedModel::from_file`]
//! and [`ScriptedModel::from_json_str`] as text; a script that does not parse is a
//! [`ScriptLoadError`] naming where.

use std::num::NonZeroUsize;
use std::path::Path;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ErrorKind, ModelError};
use crate::message::{FinishReason, Message, MessageDelta, Usage};
use crate::model::{DeltaStream, Model, ModelRequest};
use crate::provider::normalize::{complete_tool_call, start_tool_input};

/// Characters per delta when a turn sets no `chunk_chars`.
pub(crate) const DEFAULT_CHUNK_CHARS: usize = 8;

/// Template replaced by the content of the request's last tool message.
pub(crate) const LAST_TOOL_RESULT: &str = "{{last_tool_result}}";
/// Template replaced by the arithmetic expression in the request's last user message.
pub(crate) const PROMPT_EXPRESSION: &str = "{{prompt_expression}}";

/// A whole script (the JSON format of the module docs): one [`Turn`] per model step of the
/// session.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Script {
    /// Free text for the reader of the script; ignored by the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    /// Whether the turns start again at every prompt (numbered from the request's last user
    /// message) instead of running once through the session.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) per_prompt: bool,
    /// The replies, in session order.
    pub(crate) turns: Vec<Turn>,
}

/// When a [`Turn`] applies, judged on the request it answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TurnCondition {
    /// The request's prompt holds an arithmetic expression.
    PromptHasExpression,
    /// The request's prompt holds no arithmetic expression.
    PromptHasNoExpression,
    /// The request offers tools.
    ToolsOffered,
    /// The request offers no tools (a run's last allowed step).
    NoToolsOffered,
}

/// A turn's `when`: one condition, or a list that must all hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum TurnWhen {
    /// One condition.
    One(TurnCondition),
    /// Every condition of the list.
    All(Vec<TurnCondition>),
}

impl TurnWhen {
    /// The conditions, as a slice.
    fn conditions(&self) -> &[TurnCondition] {
        match self {
            TurnWhen::One(c) => std::slice::from_ref(c),
            TurnWhen::All(cs) => cs,
        }
    }
}

/// The reply to one model step, and the failures served before it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Turn {
    /// The turn exists only for requests where this holds (default: always).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) when: Option<TurnWhen>,
    /// Visible text (templates allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) text: Option<String>,
    /// Reasoning text, streamed before the visible text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reasoning: Option<String>,
    /// Tool calls, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) tool_calls: Vec<ScriptToolCall>,
    /// Characters per text/reasoning/argument delta (default 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) chunk_chars: Option<NonZeroUsize>,
    /// Failures served to the first attempts of this step, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) errors: Vec<ScriptFailure>,
}

/// One tool call in a script.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScriptToolCall {
    /// Call id; defaults to `call_<session_turn>_<index>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<String>,
    /// Tool name.
    pub(crate) name: String,
    /// Arguments: a JSON value (serialized), or a string sent verbatim as raw argument text.
    #[serde(default = "empty_object")]
    pub(crate) arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// A failure served instead of the reply to one attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "RawFailure", into = "RawFailure")]
pub(crate) enum ScriptFailure {
    /// `stream()` fails with an HTTP-like error.
    Status {
        /// HTTP status, 400..=599.
        status: u16,
        /// Retry-after hint in milliseconds.
        retry_after_ms: Option<u64>,
        /// Overrides the kind derived from the status (e.g. `context_overflow`).
        kind: Option<ErrorKind>,
        /// Overrides the error message.
        message: Option<String>,
    },
    /// The stream opens, yields `start-step`, then never yields again.
    Stall,
    /// The stream yields up to this many characters of text, then fails with `connection`.
    DisconnectAfterChars(usize),
}

/// The JSON shape of a [`ScriptFailure`]: exactly one of `status`, `stall`,
/// `disconnect_after_chars`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawFailure {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<ErrorKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stall: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    disconnect_after_chars: Option<usize>,
}

impl TryFrom<RawFailure> for ScriptFailure {
    type Error = String;

    fn try_from(raw: RawFailure) -> Result<Self, String> {
        let status_only =
            raw.retry_after_ms.is_some() || raw.kind.is_some() || raw.message.is_some();
        match (raw.status, raw.stall, raw.disconnect_after_chars) {
            (Some(status), None, None) => {
                if !(400..=599).contains(&status) {
                    return Err(format!(
                        "error status {status} is not an HTTP error status (400..=599)"
                    ));
                }
                Ok(ScriptFailure::Status {
                    status,
                    retry_after_ms: raw.retry_after_ms,
                    kind: raw.kind,
                    message: raw.message,
                })
            }
            (None, Some(true), None) if !status_only => Ok(ScriptFailure::Stall),
            (None, Some(false), None) => Err("`stall` must be true when present".into()),
            (None, None, Some(n)) if !status_only => Ok(ScriptFailure::DisconnectAfterChars(n)),
            (None, None, None) => {
                Err("an error needs one of `status`, `stall` or `disconnect_after_chars`".into())
            }
            _ => Err(
                "an error has exactly one of `status` (with optional `retry_after_ms`, \
                 `kind`, `message`), `stall` or `disconnect_after_chars`"
                    .into(),
            ),
        }
    }
}

impl From<ScriptFailure> for RawFailure {
    fn from(f: ScriptFailure) -> Self {
        match f {
            ScriptFailure::Status {
                status,
                retry_after_ms,
                kind,
                message,
            } => RawFailure {
                status: Some(status),
                retry_after_ms,
                kind,
                message,
                ..Default::default()
            },
            ScriptFailure::Stall => RawFailure {
                stall: Some(true),
                ..Default::default()
            },
            ScriptFailure::DisconnectAfterChars(n) => RawFailure {
                disconnect_after_chars: Some(n),
                ..Default::default()
            },
        }
    }
}

/// The error kind a scripted HTTP status stands for: the providers' classifier with an empty
/// error body, so a scripted failure and a real one with the same status agree.
pub(crate) fn kind_for_status(status: u16) -> ErrorKind {
    crate::provider::classify::kind_for_status(status, &Default::default())
}

/// A script that could not be loaded; names the file and, for JSON errors, line and column.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptLoadError {
    /// The file could not be read.
    #[error("cannot read script {origin}: {source}")]
    Io {
        /// The file.
        origin: String,
        /// The IO error.
        source: std::io::Error,
    },
    /// The JSON is malformed or does not match the script format.
    #[error("invalid script {origin}:{line}:{column}: {message}")]
    Parse {
        /// The file (or other origin name).
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
}

impl ScriptLoadError {
    /// The `Parse` error for `e` (its message without serde's position suffix).
    fn parse(origin: &str, e: &serde_json::Error) -> Self {
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        ScriptLoadError::Parse {
            origin: origin.to_string(),
            line: e.line(),
            column: e.column(),
            message: full.strip_suffix(&suffix).unwrap_or(&full).to_string(),
        }
    }
}

impl Script {
    /// Parses a script; `origin` names it in errors (usually the file path).
    pub(crate) fn from_json_str(json: &str, origin: &str) -> Result<Script, ScriptLoadError> {
        serde_json::from_str(json).map_err(|e| ScriptLoadError::parse(origin, &e))
    }

    /// Reads and parses a script file.
    pub(crate) fn from_file(path: impl AsRef<Path>) -> Result<Script, ScriptLoadError> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ScriptLoadError::Io {
            origin: origin.clone(),
            source,
        })?;
        Script::from_json_str(&text, &origin)
    }

    /// The script of [`ScriptedModel::demo`].
    pub(crate) fn demo() -> Script {
        Script {
            description: Some(
                "The built-in demo: compute the expression in each prompt with the calculator tool."
                    .into(),
            ),
            per_prompt: true,
            turns: vec![
                Turn {
                    when: Some(TurnWhen::All(vec![
                        TurnCondition::PromptHasExpression,
                        TurnCondition::ToolsOffered,
                    ])),
                    text: Some("Let me calculate that.".into()),
                    tool_calls: vec![ScriptToolCall {
                        id: None,
                        name: "calculator".into(),
                        arguments: serde_json::json!({ "expression": PROMPT_EXPRESSION }),
                    }],
                    ..Turn::default()
                },
                Turn {
                    when: Some(TurnWhen::All(vec![
                        TurnCondition::PromptHasExpression,
                        TurnCondition::NoToolsOffered,
                    ])),
                    text: Some(format!(
                        "This step offers no tools, so I cannot work out {PROMPT_EXPRESSION} \
                         with the calculator."
                    )),
                    ..Turn::default()
                },
                Turn {
                    when: Some(TurnWhen::One(TurnCondition::PromptHasExpression)),
                    text: Some(format!("The answer is {LAST_TOOL_RESULT}.")),
                    ..Turn::default()
                },
                Turn {
                    when: Some(TurnWhen::One(TurnCondition::PromptHasNoExpression)),
                    text: Some(DEMO_NO_EXPRESSION.into()),
                    ..Turn::default()
                },
            ],
        }
    }
}

/// The demo's reply to a prompt with no arithmetic in it.
const DEMO_NO_EXPRESSION: &str = "I am agentloop's offline demo model: ask me some arithmetic, \
     such as \"What is 2+3?\", and I will work it out with the calculator tool. \
     For a real model, pass --model and a provider's key.";

/// A [`Model`] that serves a script (the JSON format of the [module docs](self)), from a file
/// ([`from_file`](Self::from_file)), JSON text ([`from_json_str`](Self::from_json_str)) or a
/// JSON value ([`from_json`](Self::from_json)); or the built-in [`demo`](Self::demo).
///
/// ```
/// use agentloop::provider::scripted::ScriptedModel;
///
/// let model = ScriptedModel::from_json(serde_json::json!({"turns": [
///     {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]},
///     {"text": "It is {{last_tool_result}}."}
/// ]}))?;
/// assert_eq!(model.turns(), 2);
/// # Ok::<(), agentloop::provider::scripted::ScriptLoadError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptedModel {
    script: Script,
}

impl ScriptedModel {
    /// A model serving `script`.
    pub(crate) fn new(script: Script) -> Self {
        ScriptedModel { script }
    }

    /// A model serving the script `script` (a JSON value of the script format, e.g. from
    /// `serde_json::json!`). Errors are [`ScriptLoadError::Parse`] with line and column 0.
    pub fn from_json(script: Value) -> Result<Self, ScriptLoadError> {
        serde_json::from_value(script)
            .map(Self::new)
            .map_err(|e| ScriptLoadError::parse("script value", &e))
    }

    /// The script as JSON (what [`from_json`](Self::from_json) reads back).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(&self.script).unwrap_or(Value::Null)
    }

    /// How many turns the script has (with `per_prompt`, per prompt).
    pub fn turns(&self) -> usize {
        self.script.turns.len()
    }

    /// Loads a script file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ScriptLoadError> {
        Script::from_file(path).map(Self::new)
    }

    /// Parses a script; `origin_name` names it in errors.
    pub fn from_json_str(json: &str, origin_name: &str) -> Result<Self, ScriptLoadError> {
        Script::from_json_str(json, origin_name).map(Self::new)
    }

    /// The built-in demo, for every prompt of a session: a prompt with arithmetic in it gets a
    /// `calculator` call on the expression, then an answer with its result; any other prompt
    /// gets a short reply saying what the demo can do. `examples/scripts/demo.json` holds the
    /// same script.
    pub fn demo() -> Self {
        Self::new(Script::demo())
    }

    wire_pub! {
    /// What `stream` serves for `request`, fully materialized: `Err` for a failure before the
    /// stream opens, otherwise the stream's items and whether it then stalls forever.
    pub fn plan(&self, request: &ModelRequest) -> Result<Served, ModelError> {
        let has_expression =
            last_user_text(request).is_some_and(|p| !prompt_expression(p).is_empty());
        let tools_offered = !request.tools.is_empty();
        let holds = |c: &TurnCondition| match c {
            TurnCondition::PromptHasExpression => has_expression,
            TurnCondition::PromptHasNoExpression => !has_expression,
            TurnCondition::ToolsOffered => tools_offered,
            TurnCondition::NoToolsOffered => !tools_offered,
        };
        let applies = |turn: &&Turn| {
            turn.when
                .as_ref()
                .is_none_or(|w| w.conditions().iter().all(holds))
        };
        let index = if self.script.per_prompt {
            steps_since_last_prompt(request)
        } else {
            request.session_turn as usize
        };
        let Some(turn) = self.script.turns.iter().filter(applies).nth(index) else {
            let scope = if self.script.per_prompt {
                "this prompt's"
            } else {
                "the session's"
            };
            return Err(ModelError::new(
                ErrorKind::BadRequest,
                format!(
                    "script exhausted at turn {index} (the script has {} turns for {scope} requests)",
                    self.script.turns.iter().filter(applies).count()
                ),
            ));
        };
        let chunk = turn
            .chunk_chars
            .map_or(DEFAULT_CHUNK_CHARS, NonZeroUsize::get);
        let attempt = request.attempt.max(1) as usize;
        let templates = Templates::from_request(request);
        let text = turn.text.as_deref().map(|t| templates.apply(t));
        match turn.errors.get(attempt - 1) {
            Some(ScriptFailure::Status {
                status,
                retry_after_ms,
                kind,
                message,
            }) => {
                let kind = kind.unwrap_or_else(|| kind_for_status(*status));
                let message = message.clone().unwrap_or_else(|| {
                    format!("scripted HTTP {status} at turn {index}, attempt {attempt}")
                });
                Err(ModelError::new(kind, message)
                    .with_status(*status)
                    .with_retry_after_ms(*retry_after_ms))
            }
            Some(ScriptFailure::Stall) => Ok(Served {
                items: vec![Ok(MessageDelta::StartStep)],
                stalls: true,
            }),
            Some(ScriptFailure::DisconnectAfterChars(n)) => {
                let mut items = vec![Ok(MessageDelta::StartStep)];
                let partial: String = text.unwrap_or_default().chars().take(*n).collect();
                if !partial.is_empty() {
                    items.push(Ok(MessageDelta::TextStart));
                    items.extend(
                        chunks(&partial, chunk).map(|text| Ok(MessageDelta::TextDelta { text })),
                    );
                }
                items.push(Err(ModelError::new(
                    ErrorKind::Connection,
                    format!(
                        "scripted disconnect after {} characters at turn {index}, attempt {attempt}",
                        partial.chars().count()
                    ),
                )));
                Ok(Served {
                    items,
                    stalls: false,
                })
            }
            None => Ok(Served {
                items: reply(turn, text, request, &templates, chunk)
                    .into_iter()
                    .map(Ok)
                    .collect(),
                stalls: false,
            }),
        }
    }
    }
}

wire_pub! {
/// The stream items of one attempt, as `ScriptedModel::plan` computes them.
#[derive(Clone, Debug, PartialEq)]
pub struct Served {
    /// Items yielded in order.
    pub items: Vec<Result<MessageDelta, ModelError>>,
    /// Whether the stream stays pending forever after the items (a stall).
    pub stalls: bool,
}
}

#[async_trait]
impl Model for ScriptedModel {
    fn name(&self) -> String {
        "scripted".into()
    }

    async fn stream(&self, request: ModelRequest) -> Result<DeltaStream, ModelError> {
        use futures::StreamExt;
        let served = self.plan(&request)?;
        let items = futures::stream::iter(served.items);
        if served.stalls {
            Ok(Box::pin(items.chain(futures::stream::pending())))
        } else {
            Ok(Box::pin(items))
        }
    }
}

/// The deltas of a successful reply.
fn reply(
    turn: &Turn,
    text: Option<String>,
    request: &ModelRequest,
    templates: &Templates,
    chunk: usize,
) -> Vec<MessageDelta> {
    let mut out = vec![MessageDelta::StartStep];
    let mut output_chars = 0usize;
    if let Some(reasoning) = &turn.reasoning {
        output_chars += reasoning.chars().count();
        out.push(MessageDelta::ReasoningStart);
        out.extend(chunks(reasoning, chunk).map(|text| MessageDelta::ReasoningDelta { text }));
        out.push(MessageDelta::ReasoningEnd);
    }
    if let Some(text) = text {
        output_chars += text.chars().count();
        out.push(MessageDelta::TextStart);
        out.extend(chunks(&text, chunk).map(|text| MessageDelta::TextDelta { text }));
        out.push(MessageDelta::TextEnd);
    }
    for (i, call) in turn.tool_calls.iter().enumerate() {
        let id = call
            .id
            .clone()
            .unwrap_or_else(|| format!("call_{}_{i}", request.session_turn));
        let arguments = match &call.arguments {
            Value::String(raw) => templates.apply(raw),
            other => templates.apply_to_value(other).to_string(),
        };
        output_chars += call.name.chars().count() + arguments.chars().count();
        start_tool_input(&id, &call.name, "", &mut out);
        out.extend(
            chunks(&arguments, chunk).map(|delta| MessageDelta::ToolInputDelta {
                id: id.clone(),
                delta,
            }),
        );
        complete_tool_call(id, call.name.clone(), arguments, &mut out);
    }
    let finish_reason = if turn.tool_calls.is_empty() {
        FinishReason::Stop
    } else {
        FinishReason::ToolCalls
    };
    out.push(MessageDelta::FinishStep {
        finish_reason: Some(finish_reason),
        raw_finish_reason: None,
        usage: Some(Usage {
            input_tokens: (request_chars(request) / 4) as u64,
            output_tokens: (output_chars / 4) as u64,
            ..Usage::default()
        }),
    });
    out.push(MessageDelta::Finish);
    out
}

/// Splits `s` into pieces of `n` characters (the last may be shorter).
fn chunks(s: &str, n: usize) -> impl Iterator<Item = String> + '_ {
    let n = n.max(1);
    let mut rest = s;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = rest.char_indices().nth(n).map_or(rest.len(), |(i, _)| i);
        let (head, tail) = rest.split_at(end);
        rest = tail;
        Some(head.to_string())
    })
}

/// Whether `m` is a built-in reminder the run appended (not a prompt; module docs).
fn is_builtin_reminder(m: &Message) -> bool {
    matches!(m, Message::User { content, parts } if parts.is_empty()
        && (content == agentloop_core::react::FINAL_REMINDER
            || content == agentloop_core::react::LIMIT_REMINDER))
}

/// The request's messages without the built-in reminders, newest first.
fn conversation_rev(request: &ModelRequest) -> impl Iterator<Item = &Message> {
    request
        .messages
        .iter()
        .rev()
        .filter(|m| !is_builtin_reminder(m))
}

/// The text of the request's prompt (its last user message), if it has one.
fn last_user_text(request: &ModelRequest) -> Option<&str> {
    conversation_rev(request).find_map(|m| match m {
        Message::User { content, .. } => Some(content.as_str()),
        _ => None,
    })
}

/// The model steps already taken for the request's prompt: its assistant messages after it.
fn steps_since_last_prompt(request: &ModelRequest) -> usize {
    conversation_rev(request)
        .take_while(|m| !matches!(m, Message::User { .. }))
        .filter(|m| matches!(m, Message::Assistant(_)))
        .count()
}

/// Total characters of the request's prompt: the deterministic basis of the usage estimate.
fn request_chars(request: &ModelRequest) -> usize {
    let system = request.system.as_deref().map_or(0, |s| s.chars().count());
    system
        + request
            .messages
            .iter()
            .map(|m| match m {
                Message::System { content } | Message::User { content, .. } => {
                    content.chars().count()
                }
                Message::Assistant(a) => {
                    a.text.chars().count()
                        + a.reasoning.chars().count()
                        + a.tool_calls
                            .iter()
                            .map(|c| {
                                c.name.chars().count() + c.arguments.to_string().chars().count()
                            })
                            .sum::<usize>()
                }
                Message::Tool(r) => r.content.chars().count(),
            })
            .sum::<usize>()
}

/// Template values taken from a request.
struct Templates {
    last_tool_result: String,
    prompt_expression: String,
}

impl Templates {
    fn from_request(request: &ModelRequest) -> Self {
        let last_tool_result = request
            .messages
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::Tool(r) => Some(r.content.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let prompt_expression = last_user_text(request)
            .map(prompt_expression)
            .unwrap_or_default();
        Templates {
            last_tool_result,
            prompt_expression,
        }
    }

    fn apply(&self, s: &str) -> String {
        s.replace(LAST_TOOL_RESULT, &self.last_tool_result)
            .replace(PROMPT_EXPRESSION, &self.prompt_expression)
    }

    fn apply_to_value(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.apply(s)),
            Value::Array(items) => {
                Value::Array(items.iter().map(|i| self.apply_to_value(i)).collect())
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), self.apply_to_value(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

/// The arithmetic expression in a prompt: the longest run of characters from
/// `0-9 . + - * / % ^ ( )` and spaces, trimmed, that contains a digit; runs that also contain an
/// operator win over bare numbers. Empty when there is none.
///
/// `"What is 2+3?"` → `"2+3"`; `"In 2024, what is (1+2)*3?"` → `"(1+2)*3"`.
pub(crate) fn prompt_expression(prompt: &str) -> String {
    fn allowed(c: char) -> bool {
        c.is_ascii_digit() || " .+-*/%^()".contains(c)
    }
    let mut best: Option<(bool, usize, &str)> = None;
    for run in prompt.split(|c: char| !allowed(c)) {
        let run = run.trim();
        if !run.chars().any(|c| c.is_ascii_digit()) {
            continue;
        }
        let has_operator = run.chars().any(|c| "+-*/%^".contains(c));
        let key = (has_operator, run.len());
        if best.is_none_or(|(op, len, _)| key > (op, len)) {
            best = Some((has_operator, run.len(), run));
        }
    }
    best.map(|(_, _, run)| run.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::test_support::{self, finish_of, text_of};

    #[test]
    fn chunks_split_by_chars_not_bytes() {
        let v: Vec<String> = chunks("héllo wörld", 3).collect();
        assert_eq!(v, ["hél", "lo ", "wör", "ld"]);
        let v: Vec<String> = chunks("🦀🦀🦀", 2).collect();
        assert_eq!(v, ["🦀🦀", "🦀"]);
        assert_eq!(chunks("", 3).count(), 0);
    }

    #[test]
    fn prompt_expression_picks_the_arithmetic() {
        assert_eq!(prompt_expression("What is 2+3?"), "2+3");
        assert_eq!(prompt_expression("In 2024, what is (1+2)*3?"), "(1+2)*3");
        assert_eq!(prompt_expression("compute 12.5 / 5 please"), "12.5 / 5");
        assert_eq!(prompt_expression("just 42"), "42");
        assert_eq!(prompt_expression("no numbers - here"), "");
    }

    #[test]
    fn status_kinds() {
        assert_eq!(kind_for_status(429), ErrorKind::RateLimited);
        assert_eq!(kind_for_status(502), ErrorKind::ServerError);
        assert_eq!(kind_for_status(529), ErrorKind::Overloaded);
        assert_eq!(kind_for_status(413), ErrorKind::RequestTooLarge);
        assert_eq!(kind_for_status(418), ErrorKind::BadRequest);
        // One classifier: the statuses the two used to disagree on.
        assert_eq!(kind_for_status(402), ErrorKind::QuotaExhausted);
        assert_eq!(kind_for_status(408), ErrorKind::Timeout);
    }

    fn request(prompt: &str) -> ModelRequest {
        ModelRequest {
            run_id: "run-1".into(),
            model_call_index: 1,
            attempt: 1,
            session_turn: 0,
            model: "scripted".into(),
            system: None,
            messages: vec![Message::user(prompt)].into(),
            tools: Default::default(),
            params: Default::default(),
        }
    }

    fn serve(model: &ScriptedModel, request: &ModelRequest) -> Vec<MessageDelta> {
        let served = model.plan(request).unwrap();
        served.items.into_iter().map(Result::unwrap).collect()
    }

    fn served(script: &str, prompt: &str) -> Vec<MessageDelta> {
        let model = ScriptedModel::from_json_str(script, "inline").unwrap();
        serve(&model, &request(prompt))
    }

    fn calls_of(deltas: &[MessageDelta]) -> Vec<(&str, Value)> {
        let calls = test_support::calls_of(deltas).into_iter();
        calls
            .map(|(_, name, args)| (name, serde_json::from_str(args).unwrap()))
            .collect()
    }

    fn output_tokens(deltas: &[MessageDelta]) -> u64 {
        finish_of(deltas).2.expect("usage").output_tokens
    }

    #[test]
    fn a_call_without_arguments_gets_an_empty_object() {
        let d = served(r#"{"turns": [{"tool_calls": [{"name": "now"}]}]}"#, "time?");
        assert_eq!(calls_of(&d), [("now", serde_json::json!({}))]);
    }

    #[test]
    fn templates_fill_argument_values_at_any_depth() {
        let script = r#"{"turns": [{"tool_calls": [{"name": "calculator", "arguments":
            {"expression": "{{prompt_expression}}", "also": ["{{prompt_expression}}", 7, true]}}]}]}"#;
        let d = served(script, "What is 2+3?");
        assert_eq!(
            calls_of(&d),
            [(
                "calculator",
                serde_json::json!({"expression": "2+3", "also": ["2+3", 7, true]})
            )]
        );
    }

    #[test]
    fn turns_are_chosen_by_whether_the_prompt_has_an_expression() {
        let script = r#"{"turns": [
            {"when": "prompt_has_expression", "text": "calculating"},
            {"when": "prompt_has_no_expression", "text": "chatting"}]}"#;
        assert_eq!(text_of(&served(script, "What is 6*7?")), "calculating");
        assert_eq!(text_of(&served(script, "Hello there")), "chatting");
    }

    #[test]
    fn the_usage_estimate_counts_every_output_character() {
        // A quarter of the characters: 40 of text alone is 10 tokens.
        let text = "t".repeat(40);
        let d = served(&format!(r#"{{"turns": [{{"text": "{text}"}}]}}"#), "hi");
        assert_eq!(output_tokens(&d), 10);
        // 8 of reasoning + 40 of text + "calculator" (10) + `{"expression":"2+3"}` (20) = 78.
        let script = format!(
            r#"{{"turns": [{{"reasoning": "rrrrrrrr", "text": "{text}",
                "tool_calls": [{{"name": "calculator", "arguments": {{"expression": "2+3"}}}}]}}]}}"#
        );
        assert_eq!(output_tokens(&served(&script, "hi")), 19);
        // The input estimate is a quarter of the prompt's characters too.
        let d = served(r#"{"turns": [{"text": "ok"}]}"#, &"p".repeat(44));
        let input = finish_of(&d).2.map(|u| u.input_tokens);
        assert_eq!(input, Some(11));
    }

    #[test]
    fn failures_round_trip_through_the_script_json() {
        let script = serde_json::json!({"turns": [{"text": "ok", "errors": [
            {"status": 429, "retry_after_ms": 1500, "kind": "rate_limited", "message": "slow down"},
            {"stall": true},
            {"disconnect_after_chars": 3}
        ]}]});
        let model = ScriptedModel::from_json(script.clone()).unwrap();
        assert_eq!(model.to_json(), script);
    }

    #[test]
    fn a_failure_is_exactly_one_kind_and_status_fields_go_only_with_a_status() {
        for bad in [
            r#"{"stall": true, "message": "m"}"#,
            r#"{"stall": true, "retry_after_ms": 5}"#,
            r#"{"disconnect_after_chars": 3, "kind": "timeout"}"#,
        ] {
            let script = format!(r#"{{"turns": [{{"text": "x", "errors": [{bad}]}}]}}"#);
            let e = ScriptedModel::from_json_str(&script, "inline").unwrap_err();
            assert!(e.to_string().contains("exactly one of"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_demo_file_is_the_built_in_demo() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/scripts/demo.json");
        let from_file = ScriptedModel::from_file(path).unwrap();
        assert_eq!(from_file.to_json(), ScriptedModel::demo().to_json());
        assert!(from_file.turns() > 0);
    }

    #[test]
    fn a_per_prompt_script_counts_the_steps_since_the_prompt() {
        let script = r#"{"per_prompt": true, "turns": [{"text": "first"}, {"text": "second"}]}"#;
        let model = ScriptedModel::from_json_str(script, "inline").unwrap();
        let text = |req: &ModelRequest| text_of(&serve(&model, req));
        // A prompt's first step: the first turn, whatever the session's turn.
        let mut req = request("q0");
        req.session_turn = 3;
        assert_eq!(text(&req), "first");
        // One step of this prompt done (and one of an earlier prompt): the second turn.
        let step = || Message::Assistant(crate::message::AssistantMessage::default());
        req.messages = vec![Message::user("q0"), step(), Message::user("q1"), step()].into();
        assert_eq!(text(&req), "second");
    }
}
