//! The model request: what one attempt of one step asks of a model (plain data, recorded in traces).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::message::Message;
use crate::tool_spec::ToolSpecs;

/// Sampling parameters passed through to the provider.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelParams {
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Maximum output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Whether and which tool the model must call; sent only on steps that offer tools
    /// (none is offered on the final step, R-OUT-5). `None`: the provider's default (auto).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// The typed final answer the run asks for (structured output): OpenAI-compatible
    /// providers send it as `response_format` (`json_schema`), Anthropic as an instruction in
    /// the system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<crate::output::OutputSpec>,
}

/// Whether the model may, must or must not call a tool. Serialized as `"auto"`, `"none"`,
/// `"required"` or `{"tool": NAME}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides (OpenAI `"auto"`, Anthropic `{"type":"auto"}`).
    Auto,
    /// The model must not call a tool (OpenAI `"none"`, Anthropic `{"type":"none"}`).
    None,
    /// The model must call some tool (OpenAI `"required"`, Anthropic `{"type":"any"}`).
    Required,
    /// The model must call this tool (OpenAI `{"type":"function","function":{"name":..}}`,
    /// Anthropic `{"type":"tool","name":..}`).
    Tool(String),
}

impl std::str::FromStr for ToolChoice {
    type Err = String;

    /// `auto`, `none`, `required`, or any other non-empty word: that tool's name.
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            "" => return Err("empty tool choice: use auto, none, required or a tool name".into()),
            name => ToolChoice::Tool(name.to_string()),
        })
    }
}

impl std::fmt::Display for ToolChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolChoice::Auto => f.write_str("auto"),
            ToolChoice::None => f.write_str("none"),
            ToolChoice::Required => f.write_str("required"),
            ToolChoice::Tool(name) => f.write_str(name),
        }
    }
}

/// A request's conversation: shared, so a request is cloned (into an effect, a hook's view,
/// a retry) in O(1) whatever the session's length. Reads through `Deref`; a write
/// (`DerefMut`) copies the messages only while another request still shares them.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct SharedMessages(std::sync::Arc<Vec<Message>>);

impl SharedMessages {
    /// Whether `a` and `b` are the same shared messages (no comparison of contents).
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        std::sync::Arc::ptr_eq(&a.0, &b.0)
    }
}

impl PartialEq for SharedMessages {
    fn eq(&self, other: &Self) -> bool {
        Self::ptr_eq(self, other) || self.0 == other.0
    }
}

impl std::ops::Deref for SharedMessages {
    type Target = Vec<Message>;
    fn deref(&self) -> &Vec<Message> {
        &self.0
    }
}

impl std::ops::DerefMut for SharedMessages {
    fn deref_mut(&mut self) -> &mut Vec<Message> {
        std::sync::Arc::make_mut(&mut self.0)
    }
}

impl From<Vec<Message>> for SharedMessages {
    fn from(v: Vec<Message>) -> Self {
        SharedMessages(std::sync::Arc::new(v))
    }
}

impl<'a> IntoIterator for &'a SharedMessages {
    type Item = &'a Message;
    type IntoIter = std::slice::Iter<'a, Message>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl FromIterator<Message> for SharedMessages {
    fn from_iter<I: IntoIterator<Item = Message>>(iter: I) -> Self {
        Self::from(iter.into_iter().collect::<Vec<_>>())
    }
}

/// One request for one attempt of one model step. Produced by the pure machine
/// (inside `Effect::CallModel`), so it is recorded in traces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelRequest {
    /// The run this step belongs to.
    pub run_id: String,
    /// Step number within the run, from 1 (R-IDEM-1).
    pub model_call_index: u32,
    /// Attempt number within the step, from 1; a retry keeps `model_call_index` (R-IN-6).
    pub attempt: u32,
    /// How many assistant turns the session had committed before this step, over all runs.
    /// Scripted models pick their turn from this, so a resumed session continues its script.
    pub session_turn: u32,
    /// Model name.
    pub model: String,
    /// System prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Conversation context (after compaction), oldest first.
    pub messages: SharedMessages,
    /// Tools offered for this step (empty on the final step, R-OUT-5).
    #[serde(default)]
    pub tools: ToolSpecs,
    /// Sampling parameters.
    #[serde(default)]
    pub params: ModelParams,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_choice_parses_displays_and_serializes() {
        for (text, choice, json) in [
            ("auto", ToolChoice::Auto, "\"auto\""),
            ("none", ToolChoice::None, "\"none\""),
            ("required", ToolChoice::Required, "\"required\""),
            (
                "calculator",
                ToolChoice::Tool("calculator".into()),
                "{\"tool\":\"calculator\"}",
            ),
        ] {
            assert_eq!(text.parse::<ToolChoice>(), Ok(choice.clone()));
            assert_eq!(choice.to_string(), text);
            assert_eq!(serde_json::to_string(&choice).ok().as_deref(), Some(json));
        }
        assert!("".parse::<ToolChoice>().is_err());
        // Absent from params when unset, so traces recorded before it read and compare the same.
        assert_eq!(
            serde_json::to_value(ModelParams::default()).ok(),
            Some(serde_json::json!({}))
        );
    }
}
