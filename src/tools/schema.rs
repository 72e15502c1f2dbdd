//! Checking tool arguments against the tools' JSON Schemas before a call runs (R-TOOL-1).
//!
//! A registry takes each tool's schema when the tool is inserted
//! ([`ToolRegistry::insert`](super::ToolRegistry::insert)) and compiles it the first time a
//! call of that tool is checked: a run compiles the validators of the tools it calls, not of
//! every tool it was given. Compiled validators are shared by schema across registries, runs
//! and sessions (a process-wide cache keyed by the schema's JSON text), so a session's second
//! run or a subagent with the same tools compiles nothing. The runtime checks an attempt's
//! completed tool calls when its stream ends and sends the verdicts with the `done` event
//! ([`Event::Done`](crate::event::Event::Done)). The machine decides on them (row
//! `commit_schema_invalid` of `statecharts/tool_call.toml`), so the trace records the verdicts
//! and a replay needs no validator.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use agentloop_core::tool_check::{ArgumentsRejected, SchemaViolation};
use serde_json::Value;

use crate::message::{MessageDelta, ToolCall};
use crate::tools::ToolSpec;

/// How many compiled schemas the process-wide cache keeps before it starts afresh (a bound
/// for a process that meets many MCP servers' tools; a miss only costs a compile).
const SHARED_CAPACITY: usize = 1024;

/// A tool's schema and, once a call of the tool was checked, its validator (`None`: the
/// schema does not compile and is not checked).
struct LazySchema {
    spec: Arc<ToolSpec>,
    compiled: OnceLock<Option<Arc<jsonschema::Validator>>>,
}

/// The compiled argument schemas of a tool set, by tool name. Cloning shares them.
#[derive(Clone, Default)]
pub(crate) struct ArgumentSchemas(Arc<BTreeMap<String, Arc<LazySchema>>>);

impl std::fmt::Debug for ArgumentSchemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// Compiled validators by schema JSON text, shared by every registry of the process.
type Shared = Mutex<HashMap<String, Arc<jsonschema::Validator>>>;
static SHARED: OnceLock<Shared> = OnceLock::new();

/// The validator of `schema` (of the tool or typed answer `name`): from the process-wide
/// cache, or compiled and cached. A schema the validator cannot compile (not a JSON Schema,
/// an unresolvable `$ref`) is logged and gives `None`.
pub(crate) fn compile_shared(name: &str, schema: &Value) -> Option<Arc<jsonschema::Validator>> {
    let key = schema.to_string();
    let shared = SHARED.get_or_init(Mutex::default);
    if let Some(v) = shared.lock().ok().and_then(|m| m.get(&key).cloned()) {
        return Some(v);
    }
    match jsonschema::validator_for(schema) {
        Ok(v) => {
            let v = Arc::new(v);
            if let Ok(mut m) = shared.lock() {
                if m.len() >= SHARED_CAPACITY {
                    m.clear();
                }
                m.insert(key, v.clone());
            }
            Some(v)
        }
        Err(e) => {
            tracing::warn!(schema = %name, error = %e, "schema not compiled; not checked");
            None
        }
    }
}

impl ArgumentSchemas {
    /// Takes the parameters schema of `spec`'s tool (replacing an earlier one), to be compiled
    /// when a call of the tool is first checked. A schema that does not compile is not
    /// checked, and a tool with an empty or `true` schema accepts everything.
    pub(crate) fn set(&mut self, spec: Arc<ToolSpec>) {
        Arc::make_mut(&mut self.0).insert(
            spec.name.clone(),
            Arc::new(LazySchema {
                spec,
                compiled: OnceLock::new(),
            }),
        );
    }

    /// Tool `name`'s validator, compiled on first use.
    fn validator(&self, name: &str) -> Option<&jsonschema::Validator> {
        let lazy = self.0.get(name)?;
        lazy.compiled
            .get_or_init(|| compile_shared(name, &lazy.spec.parameters))
            .as_deref()
    }

    /// Forgets tool `name`'s schema.
    pub(crate) fn remove(&mut self, name: &str) {
        Arc::make_mut(&mut self.0).remove(name);
    }

    /// The verdict on `call`: `Some` when its arguments break its tool's schema. Calls of an
    /// unknown tool, and calls whose arguments are not JSON, get none: the machine fails them
    /// on rows of their own.
    pub(crate) fn check(&self, call: &ToolCall) -> Option<ArgumentsRejected> {
        if call.invalid_arguments.is_some() {
            return None;
        }
        let validator = self.validator(&call.name)?;
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
    pub(crate) fn check_deltas<'a>(
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

    fn spec(name: &str, parameters: Value) -> Arc<ToolSpec> {
        Arc::new(ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters,
        })
    }

    fn schemas() -> ArgumentSchemas {
        let mut s = ArgumentSchemas::default();
        s.set(spec(
            "count",
            json!({
                "type": "object",
                "properties": {"n": {"type": "integer"}, "label": {"type": "string"}},
                "required": ["n"],
                "additionalProperties": false
            }),
        ));
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

    /// Whether `schema` has a validator in the process-wide cache.
    fn shared(schema: &Value) -> bool {
        SHARED
            .get()
            .and_then(|m| m.lock().ok().map(|m| m.contains_key(&schema.to_string())))
            .unwrap_or(false)
    }

    /// A schema is compiled when a call of its tool is first checked, not when the tool is
    /// inserted, and two tool sets with the same schema share one validator.
    #[test]
    fn r_tool_1_schemas_compile_on_first_use_and_are_shared() {
        let unique = json!({
            "type": "object",
            "title": "r_tool_1_schemas_compile_on_first_use_and_are_shared",
            "properties": {"n": {"type": "integer"}}
        });
        let mut a = ArgumentSchemas::default();
        a.set(spec("t", unique.clone()));
        let mut b = ArgumentSchemas::default();
        b.set(spec("u", unique.clone()));
        assert!(!shared(&unique), "compiled before any call was checked");
        assert!(a.check(&call("t", r#"{"n":"x"}"#)).is_some());
        assert!(shared(&unique), "not in the shared cache after a check");
        assert!(b.check(&call("u", r#"{"n":1}"#)).is_none());
        let (va, vb) = (a.validator("t").expect("a"), b.validator("u").expect("b"));
        assert!(std::ptr::eq(va, vb), "the same schema compiled twice");
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
        s.set(spec("count", json!({"type": 7})));
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
