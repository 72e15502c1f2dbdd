//! What the four request encoders (Chat Completions, Responses, Messages, Gemini) share: the
//! turns of one role merged, a tool call's arguments as each format writes them, the tools
//! offered with the tool choice, a file part's default name, generated call ids. Pure.

use serde_json::{json, Value};

use crate::message::{ContentPart, MediaSource};
use crate::model::{ModelRequest, ToolChoice};
use crate::tools::ToolSpec;

/// The turns of a request body in order, consecutive turns of one role merged into one (the
/// Messages and Gemini APIs require the roles to alternate).
#[derive(Debug, Default)]
pub(crate) struct Turns(Vec<(&'static str, Vec<Value>)>);

impl Turns {
    /// Appends `items` as a turn of `role`, to the last turn when it has that role; nothing
    /// when `items` is empty.
    pub(crate) fn push(&mut self, role: &'static str, items: Vec<Value>) {
        if items.is_empty() {
            return;
        }
        match self.0.last_mut() {
            Some((r, i)) if *r == role => i.extend(items),
            _ => self.0.push((role, items)),
        }
    }

    /// The turns as `{"role": role, key: items}` objects.
    pub(crate) fn into_json(self, key: &str) -> Vec<Value> {
        self.0
            .into_iter()
            .map(|(role, items)| json!({"role": role, key: items}))
            .collect()
    }
}

/// A tool call's arguments as an object, `{}` when they are not one (Messages' `input`,
/// Gemini's `args`).
pub(crate) fn arguments_object(arguments: &Value) -> Value {
    Some(arguments)
        .filter(|a| a.is_object())
        .map_or_else(|| json!({}), Value::clone)
}

/// A tool call's arguments as JSON text, `{}` when there are none (both OpenAI formats).
pub(crate) fn arguments_text(arguments: &Value) -> String {
    if arguments.is_null() {
        "{}".to_string()
    } else {
        arguments.to_string()
    }
}

/// Sets `tools` (each tool as `tool` writes it) and `tool_choice` (as `choice` writes it)
/// when the request offers tools (Chat Completions, Responses, Messages).
pub(crate) fn set_tools(
    body: &mut Value,
    req: &ModelRequest,
    tool: impl Fn(&ToolSpec) -> Value,
    choice: fn(&ToolChoice) -> Value,
) {
    if req.tools.is_empty() {
        return;
    }
    body["tools"] = req.tools.iter().map(tool).collect();
    if let Some(c) = &req.params.tool_choice {
        body["tool_choice"] = choice(c);
    }
}

/// A file part's name: its own, else `document.pdf` for PDF bytes and `document` otherwise
/// (both OpenAI formats want a name with file data).
pub(crate) fn file_name(filename: &Option<String>, source: &MediaSource) -> String {
    filename.clone().unwrap_or_else(|| match source {
        MediaSource::Base64 { media_type, .. } if media_type == "application/pdf" => {
            "document.pdf".into()
        }
        _ => "document".into(),
    })
}

/// A user message's text, then each of its content parts as `part` writes it: the text (as
/// `text` writes it) is left out when it is empty and the message has parts (the APIs refuse
/// empty text parts). All four encoders.
pub(crate) fn user_parts(
    content: &str,
    parts: &[ContentPart],
    text: impl Fn(&str) -> Value,
    part: impl Fn(&ContentPart) -> Value,
) -> Vec<Value> {
    let text = (parts.is_empty() || !content.is_empty()).then(|| text(content));
    text.into_iter().chain(parts.iter().map(part)).collect()
}

/// The prefix of the call ids a normalizer makes up for one model call (for servers whose
/// calls carry none): unique per run and step.
pub(crate) fn call_id_prefix(request: &ModelRequest) -> String {
    format!("call_{}_{}_", request.run_id, request.model_call_index)
}
