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
        /// Images, files and more text sent after `content`, in order (content parts). Absent
        /// when empty, so a plain-text message is stored, traced and sent as it always was.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        parts: Vec<ContentPart>,
    },
    /// A committed assistant turn.
    Assistant(AssistantMessage),
    /// The result of one tool call.
    Tool(ToolResult),
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::user_with_parts(content, Vec::new())
    }

    /// The user's text, then each content part described ([`ContentPart::describe`]) on its
    /// own line: what transcripts, summaries and exports show of a user message (never the
    /// data). `None` for other roles.
    pub fn user_text(&self) -> Option<String> {
        let Message::User { content, parts } = self else {
            return None;
        };
        let mut text = content.clone();
        for part in parts {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&part.describe());
        }
        Some(text)
    }

    /// A user message with content parts (images, files) after its text.
    pub fn user_with_parts(content: impl Into<String>, parts: Vec<ContentPart>) -> Self {
        Message::User {
            content: content.into(),
            parts,
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message::System {
            content: content.into(),
        }
    }
}

/// One part of a user message after its text: more text, an image or a file. Serialized as
/// `{"type": "text", "text"}`, `{"type": "image", "source"}` or
/// `{"type": "file", "source", "filename"?}`; each provider's request body maps it to its own
/// wire format (OpenAI-compatible: `text` / `image_url` / `file` parts; Anthropic: `text` /
/// `image` / `document` blocks).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image (PNG, JPEG, GIF or WebP are what both providers take).
    Image {
        /// Where the image is.
        source: MediaSource,
    },
    /// A document, e.g. a PDF.
    File {
        /// Where the file is.
        source: MediaSource,
        /// The file's name, if known (OpenAI-compatible servers take one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
    },
}

impl ContentPart {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        ContentPart::Text { text: text.into() }
    }

    /// An image given as base64 `data` of `media_type` (e.g. `image/png`).
    pub fn image_base64(media_type: impl Into<String>, data: impl Into<String>) -> Self {
        ContentPart::Image {
            source: MediaSource::Base64 {
                media_type: media_type.into(),
                data: data.into(),
            },
        }
    }

    /// An image the provider fetches from `url`.
    pub fn image_url(url: impl Into<String>) -> Self {
        ContentPart::Image {
            source: MediaSource::Url { url: url.into() },
        }
    }

    /// A file given as base64 `data` of `media_type` (e.g. `application/pdf`).
    pub fn file_base64(
        media_type: impl Into<String>,
        data: impl Into<String>,
        filename: Option<String>,
    ) -> Self {
        ContentPart::File {
            source: MediaSource::Base64 {
                media_type: media_type.into(),
                data: data.into(),
            },
            filename,
        }
    }

    /// A file the provider fetches from `url` (Anthropic only: OpenAI-compatible servers take
    /// files as data, and the client refuses the request).
    pub fn file_url(url: impl Into<String>) -> Self {
        ContentPart::File {
            source: MediaSource::Url { url: url.into() },
            filename: None,
        }
    }

    /// A short description for transcripts and summaries: the text itself, or
    /// `[image image/png, 12 KiB]`, `[file report.pdf application/pdf, 1.2 MiB]`,
    /// `[image https://…]` (never the data).
    pub fn describe(&self) -> String {
        let source = |s: &MediaSource| match s {
            MediaSource::Base64 { media_type, data } => {
                format!("{media_type}, {}", size_text(base64_decoded_len(data)))
            }
            MediaSource::Url { url } => url.clone(),
        };
        match self {
            ContentPart::Text { text } => text.clone(),
            ContentPart::Image { source: s } => format!("[image {}]", source(s)),
            ContentPart::File {
                source: s,
                filename,
            } => match filename {
                Some(name) => format!("[file {name} {}]", source(s)),
                None => format!("[file {}]", source(s)),
            },
        }
    }
}

/// Where an image's or file's bytes are. Serialized as Anthropic's `source` is:
/// `{"type": "base64", "media_type", "data"}` or `{"type": "url", "url"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MediaSource {
    /// The bytes, base64-encoded (standard alphabet, padded), with their media type.
    Base64 {
        /// IANA media type, e.g. `image/png`, `application/pdf`.
        media_type: String,
        /// The base64 text.
        data: String,
    },
    /// A URL the provider fetches.
    Url {
        /// The URL.
        url: String,
    },
}

impl MediaSource {
    /// The `data:` URL of base64 bytes (`data:image/png;base64,…`), or the URL itself.
    pub fn to_url(&self) -> String {
        match self {
            MediaSource::Base64 { media_type, data } => {
                format!("data:{media_type};base64,{data}")
            }
            MediaSource::Url { url } => url.clone(),
        }
    }
}

/// How many bytes base64 `data` decodes to (padding and line breaks not counted).
pub fn base64_decoded_len(data: &str) -> usize {
    let digits = data
        .bytes()
        .filter(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_'))
        .count();
    digits * 3 / 4
}

fn size_text(bytes: usize) -> String {
    const KIB: usize = 1024;
    if bytes < KIB {
        format!("{bytes} B")
    } else if bytes < KIB * KIB {
        format!("{:.1} KiB", bytes as f64 / KIB as f64)
    } else {
        format!("{:.1} MiB", bytes as f64 / (KIB * KIB) as f64)
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
