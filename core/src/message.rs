//! Conversation data: messages, tool calls, tool results, usage and the normalized stream delta.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ModelError;

/// One message of the conversation, as the model sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// A system prompt.
    System {
        /// The prompt text.
        content: String,
    },
    /// Input from the user (prompt or steering).
    User {
        /// The user's text.
        content: String,
    },
    /// A committed assistant turn.
    Assistant(AssistantMessage),
    /// The result of one tool call.
    Tool(ToolResult),
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message::System {
            content: content.into(),
        }
    }
}

/// An assistant message assembled from stream deltas.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AssistantMessage {
    /// Visible text.
    #[serde(default)]
    pub text: String,
    /// Reasoning ("thinking") text, if the provider streamed any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reasoning: String,
    /// Signature over the reasoning (Anthropic), kept so it can be sent back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_signature: Option<String>,
    /// Opaque redacted reasoning blocks (Anthropic `redacted_thinking`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redacted_reasoning: Vec<String>,
    /// A refusal, if the model refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// Tool calls, in the model's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// Token usage the provider reported for this turn (`None` when it sent none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// A request from the model to run a tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCall {
    /// Provider-assigned id, unique within the session.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Parsed JSON arguments (`{}` when the model sent none; `null` when invalid).
    pub arguments: Value,
    /// Set when the raw arguments were not valid JSON or were truncated (R-STR-6):
    /// the call is never executed and gets an error result instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_arguments: Option<String>,
}

impl ToolCall {
    /// Builds a call from raw argument text: empty or whitespace means `{}`,
    /// invalid JSON is kept in `invalid_arguments`.
    pub fn from_raw(id: impl Into<String>, name: impl Into<String>, raw: &str) -> Self {
        let (arguments, invalid_arguments) = if raw.trim().is_empty() {
            (Value::Object(Default::default()), None)
        } else {
            match serde_json::from_str::<Value>(raw) {
                Ok(v) => (v, None),
                Err(e) => (
                    Value::Null,
                    Some(format!("invalid JSON arguments ({e}): {raw}")),
                ),
            }
        };
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
            invalid_arguments,
        }
    }
}

/// How a tool call ended (R-IDEM-7: every call has exactly one terminal result).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    /// The tool ran and succeeded.
    Completed,
    /// The tool failed, panicked, timed out, or its arguments were invalid.
    Error,
    /// A human (or policy) denied the call.
    Denied,
    /// Skipped (steering, max steps).
    Skipped,
    /// The run was aborted before the tool finished.
    Aborted,
    /// The call started before a crash and its outcome is unknown.
    OutcomeUnknown,
}

impl ToolStatus {
    /// The snake_case name (as serialized).
    pub fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Completed => "completed",
            ToolStatus::Error => "error",
            ToolStatus::Denied => "denied",
            ToolStatus::Skipped => "skipped",
            ToolStatus::Aborted => "aborted",
            ToolStatus::OutcomeUnknown => "outcome_unknown",
        }
    }
}

/// The result of one tool call, as the model sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolResult {
    /// The call this answers.
    pub tool_call_id: String,
    /// Tool name.
    pub name: String,
    /// Output text (or error text).
    pub content: String,
    /// Terminal status.
    pub status: ToolStatus,
}

impl ToolResult {
    /// True unless the tool completed successfully.
    pub fn is_error(&self) -> bool {
        self.status != ToolStatus::Completed
    }
}

/// Why a model turn ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// Natural end of the turn.
    Stop,
    /// Output token limit hit (tool arguments may be truncated).
    Length,
    /// The model asked for tools.
    ToolCalls,
    /// A provider content filter stopped the turn.
    ContentFilter,
    /// Anything else.
    Other,
}

/// Token usage of one turn or one run (R-CTX-3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    /// Prompt tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Prompt tokens served from cache.
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    /// Prompt tokens written to cache.
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    /// Reasoning tokens (part of output).
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Adds another usage to this one (per-run totals).
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_input_tokens += other.cache_read_input_tokens;
        self.cache_creation_input_tokens += other.cache_creation_input_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

/// One normalized streaming increment (R-STR-1). Every provider's wire format becomes
/// a sequence of these before the machine sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum MessageDelta {
    /// A model step started.
    StartStep,
    /// A text block starts.
    TextStart,
    /// Visible text.
    TextDelta {
        /// The text piece.
        text: String,
    },
    /// The text block ended.
    TextEnd,
    /// A reasoning block starts.
    ReasoningStart,
    /// Reasoning text.
    ReasoningDelta {
        /// The reasoning piece.
        text: String,
    },
    /// Signature of the reasoning block (Anthropic `signature_delta`).
    ReasoningSignature {
        /// The signature piece.
        signature: String,
    },
    /// An opaque redacted reasoning block.
    RedactedReasoning {
        /// Opaque data.
        data: String,
    },
    /// The reasoning block ended.
    ReasoningEnd,
    /// Refusal text (OpenAI `refusal`).
    Refusal {
        /// The refusal piece.
        text: String,
    },
    /// A tool call's arguments start streaming.
    ToolInputStart {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// A fragment of a tool call's raw JSON arguments.
    ToolInputDelta {
        /// Call id.
        id: String,
        /// Raw JSON fragment.
        delta: String,
    },
    /// A tool call's arguments are complete.
    ToolInputEnd {
        /// Call id.
        id: String,
    },
    /// A complete tool call; the committed message takes its calls only from these.
    ToolCall {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Complete raw JSON arguments.
        arguments: String,
    },
    /// The step finished, with the reason and usage.
    FinishStep {
        /// Normalized reason.
        finish_reason: Option<FinishReason>,
        /// The provider's own reason string.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        raw_finish_reason: Option<String>,
        /// Usage, if the provider sent any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    /// The response is complete (terminal evidence seen).
    Finish,
    /// An error reported inside the stream.
    Error {
        /// The classified error.
        error: ModelError,
    },
}
