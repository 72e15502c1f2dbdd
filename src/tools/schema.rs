//! Checking tool arguments against the tools' JSON Schemas before a call runs (R-TOOL-1).
//!
//! A registry compiles each tool's schema once, when the tool is inserted
//! ([`ToolRegistry::insert`](super::ToolRegistry::insert)); the runtime checks an attempt's
//! completed tool calls when its stream ends and sends the verdicts with the `done` event
//! ([`Event::Done`](crate::event::Event::Done)). The machine decides on them (row
//! `commit_schema_invalid` of `statecharts/tool_call.toml`), so the trace records the verdicts
//! and a replay needs no validator.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentloop_core::tool_check::{ArgumentsRejected, SchemaViolation};
use serde_json::Value;

use crate::message::{MessageDelta, ToolCall};

/// The compiled argument schemas of a tool set, by tool name. Cloning shares them.
#[derive(Clone, Default)]
pub struct ArgumentSchemas(Arc<BTreeMap<String, Arc<jsonschema::Validator>>>);

impl std::fmt::Debug for ArgumentSchemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

impl ArgumentSchemas {
    /// Compiles `schema` for tool `name` (replacing an earlier one). A schema the validator
    /// cannot compile (not a JSON Schema, an unresolvable `$ref`) is not checked, and a tool
    /// with an empty or `true` schema accepts everything; both are logged.
    pub(crate) fn set(&mut self, name: &str, schema: &Value) {
        let map = Arc::make_mut(&mut self.0);
        match jsonschema::validator_for(schema) {
            Ok(v) => {
                map.insert(name.to_string(), Arc::new(v));
            }
            Err(e) => {
                map.remove(name);
                tracing::warn!(tool = %name, error = %e, "tool schema not compiled; its arguments are not checked");
            }
        }
    }

    /// Forgets tool `name`'s schema.
    pub(crate) fn remove(&mut self, name: &str) {
        Arc::make_mut(&mut self.0).remove(name);
    }

    /// The verdict on `call`: `Some` when its arguments break its tool's schema. Calls of an
    /// unknown tool, and calls whose arguments are not JSON, get none: the machine fails them
    /// on rows of their own.
    pub fn check(&self, call: &ToolCall) -> Option<ArgumentsRejected> {
        if call.invalid_arguments.is_some() {
            return None;
        }
        let validator = self.0.get(&call.name)?;
        ArgumentsRejected::new(
            call.id.clone(),
            validator
                .iter_errors(&call.arguments)
                .map(|e| SchemaViolation {
                    path: e.instance_path().to_string(),
                    reason: e.to_string(),
                }),
        )
    }

    /// The verdicts on the tool calls among an attempt's `deltas`, for its `done` event. The
    /// calls are built as the machine builds them ([`ToolCall::from_raw`]).
    pub fn check_deltas<'a>(
        &self,
        deltas: impl IntoIterator<Item = &'a MessageDelta>,
    ) -> Vec<ArgumentsRejected> {
        if self.0.is_empty() {
            return Vec::new();
        }
        deltas
            .into_iter()
            .filter_map(|d| match d {
                MessageDelta::ToolCall {
                    id,
                    name,
                    arguments,
                } => self.check(&ToolCall::from_raw(id, name, arguments)),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schemas() -> ArgumentSchemas {
        let mut s = ArgumentSchemas::default();
        s.set(
            "count",
            &json!({
                "type": "object",
                "properties": {"n": {"type": "integer"}, "label": {"type": "string"}},
                "required": ["n"],
                "additionalProperties": false
            }),
        );
        s
    }

    fn call(name: &str, raw: &str) -> ToolCall {
        ToolCall::from_raw("c1", name, raw)
    }

    #[test]
    fn r_tool_1_a_wrong_type_is_reported_with_its_path() {
        let r = schemas()
            .check(&call("count", r#"{"n":"abc"}"#))
            .expect("rejected");
        assert_eq!(r.tool_call_id, "c1");
        assert_eq!(r.violations.len(), 1);
        assert_eq!(r.violations[0].path, "/n");
        assert!(r.violations[0].reason.contains("integer"), "{r:?}");
        let m = r.message("count");
        assert!(
            m.contains("- /n: \"abc\" is not of type \"integer\""),
            "{m}"
        );
    }

    #[test]
    fn r_tool_1_every_violation_is_listed() {
        let r = schemas()
            .check(&call("count", r#"{"label":3,"extra":true}"#))
            .expect("rejected");
        let paths: Vec<&str> = r.violations.iter().map(|v| v.path.as_str()).collect();
        assert!(paths.contains(&"/label"), "{r:?}");
        assert!(paths.contains(&""), "{r:?}");
        assert!(r.message("count").contains("(root)"));
    }

    #[test]
    fn r_tool_1_valid_unknown_and_unparsed_calls_get_no_verdict() {
        let s = schemas();
        assert_eq!(s.check(&call("count", r#"{"n":3}"#)), None);
        assert_eq!(s.check(&call("other", r#"{"n":"abc"}"#)), None);
        assert_eq!(s.check(&call("count", r#"{"n":"#)), None);
    }

    #[test]
    fn r_tool_1_an_uncompilable_schema_is_not_checked() {
        let mut s = schemas();
        s.set("count", &json!({"type": 7}));
        assert_eq!(s.check(&call("count", r#"{"n":"abc"}"#)), None);
    }

    #[cfg(feature = "builtin-tools")]
    #[test]
    fn r_tool_1_the_builtin_tools_schemas_compile() {
        let s = crate::tools::ToolRegistry::builtin().schemas();
        assert_eq!(
            format!("{s:?}"),
            r#"["append_line", "calculator", "read_file"]"#
        );
        let r = s
            .check(&call("calculator", r#"{"expression":2}"#))
            .expect("rejected");
        assert_eq!(r.violations[0].path, "/expression");
        assert_eq!(s.check(&call("calculator", r#"{"expression":"2"}"#)), None);
    }

    #[test]
    fn r_tool_1_deltas_are_checked_as_the_machine_builds_calls() {
        let deltas = [
            MessageDelta::TextDelta { text: "hi".into() },
            MessageDelta::ToolCall {
                id: "a".into(),
                name: "count".into(),
                arguments: r#"{"n":1}"#.into(),
            },
            MessageDelta::ToolCall {
                id: "b".into(),
                name: "count".into(),
                arguments: String::new(),
            },
        ];
        let v = schemas().check_deltas(&deltas);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].tool_call_id, "b");
    }
}
