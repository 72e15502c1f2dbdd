//! Typed final answers (structured output): the run asks for a final answer that
//! matches a JSON Schema ([`OutputSpec`]), the runtime checks the answer when the model's
//! stream ends and passes its verdict ([`OutputRejected`]) with the `done` input event, and
//! Observing decides on it: `observing_complete` (valid), `observing_retry_output` (invalid,
//! the error goes back to the model), `observing_output_invalid` (invalid, retries used up).
//! The verdict is recorded input, so a replay needs no validator.
//!
//! Pure: the validator lives in the runtime; [`output_json`] is the one reading of an answer
//! as JSON that the runtime's check and `run_typed`'s parse share.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tool_check::{bounded_violations, violation_lines, SchemaViolation};

/// The final answer a run asks for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OutputSpec {
    /// A name for the schema (the Rust type's name; OpenAI's `json_schema.name`).
    pub name: String,
    /// The JSON Schema the answer must match.
    pub schema: Value,
    /// How many times an invalid answer is sent back with its errors before the run fails
    /// with reason `output_invalid`.
    #[serde(default = "default_retries")]
    pub retries: u32,
}

fn default_retries() -> u32 {
    1
}

impl OutputSpec {
    /// A spec for `schema` named `name`, with one retry.
    pub fn new(name: impl Into<String>, schema: Value) -> Self {
        OutputSpec {
            name: name.into(),
            schema,
            retries: default_retries(),
        }
    }

    /// The instruction a provider without a native structured-output mode puts in the system
    /// prompt.
    pub fn instruction(&self) -> String {
        format!(
            "Give your final answer as a single JSON value (no other text) that matches this \
             JSON Schema:\n{}",
            self.schema
        )
    }
}

/// The runtime's verdict that a final answer does not match the run's [`OutputSpec`]: it is
/// not JSON, or it breaks the schema. Bounded like a tool call's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OutputRejected {
    /// The first violations (a JSON error is one violation at the root).
    pub violations: Vec<SchemaViolation>,
    /// How many more the validator reported.
    #[serde(default, skip_serializing_if = "crate::vocab::is_zero")]
    pub omitted: u32,
}

impl OutputRejected {
    /// The verdict from the validator's violations (bounded); `None` when there are none.
    pub fn new(violations: impl IntoIterator<Item = SchemaViolation>) -> Option<Self> {
        let (violations, omitted) = bounded_violations(violations);
        (!violations.is_empty()).then_some(OutputRejected {
            violations,
            omitted,
        })
    }

    /// The message the model gets with the retry (and the run's error when retries are used
    /// up):
    ///
    /// ```text
    /// the answer does not match the required JSON Schema:
    /// - /n: "abc" is not of type "integer"
    /// Answer again with only a JSON value that matches the schema.
    /// ```
    pub fn message(&self) -> String {
        format!(
            "the answer does not match the required JSON Schema:\n{}Answer again with only a \
             JSON value that matches the schema.",
            violation_lines(&self.violations, self.omitted)
        )
    }
}

/// Reads a final answer as JSON: the text, trimmed, without one surrounding Markdown code
/// fence (```` ```json ... ``` ````), parsed. The error is serde_json's, for the verdict.
pub fn output_json(text: &str) -> Result<Value, String> {
    let t = text.trim();
    let inner = t
        .strip_prefix("```")
        .and_then(|rest| rest.strip_suffix("```"))
        .map(|body| {
            // Drop the fence's info string (`json`) up to the first line break.
            match body.split_once('\n') {
                Some((info, rest)) if !info.trim_start().starts_with(['{', '[', '"']) => rest,
                _ => body,
            }
        })
        .unwrap_or(t);
    serde_json::from_str(inner.trim()).map_err(|e| format!("not JSON: {e}"))
}
