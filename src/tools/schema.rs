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

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use agentloop_core::process::call_ids::CallIds;
use agentloop_core::tool_check::{ArgumentsRejected, SchemaViolation};
use serde_json::Value;

use crate::message::{MessageDelta, ToolCall};
use crate::tools::{Tool, ToolSpec};

/// How many compiled schemas the process-wide cache keeps before it starts afresh (a bound
/// for a process that meets many MCP servers' tools; a miss only costs a compile).
#[cfg(feature = "json-schema")]
const SHARED_CAPACITY: usize = 1024;

/// A tool's schema and, once a call of the tool was checked, its validator (`None`: the
/// schema does not compile and is not checked).
struct LazySchema {
    spec: Arc<ToolSpec>,
    compiled: OnceLock<Option<Arc<Validator>>>,
    /// The tool, when its own type checks its arguments ([`Tool::check_by_type`]) and its
    /// schema asserts nothing that type does not ([`asserts_only_types`]): then no validator is
    /// compiled for it.
    by_type: Option<Arc<dyn Tool>>,
}

/// The compiled argument schemas of a tool set, by tool name. Cloning shares them.
#[derive(Clone, Default)]
pub(crate) struct ArgumentSchemas(Arc<BTreeMap<String, Arc<LazySchema>>>);

impl std::fmt::Debug for ArgumentSchemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// A compiled JSON Schema (feature `json-schema`).
#[cfg(feature = "json-schema")]
pub(crate) type Validator = jsonschema::Validator;
/// Without feature `json-schema` no schema is compiled: a typed answer's schema is checked by
/// deserializing into its Rust type ([`register_type`]), any other schema not at all.
#[cfg(not(feature = "json-schema"))]
pub(crate) struct Validator(fn(&Value) -> Result<(), (String, String)>);

/// Checkers by schema JSON text, of the types whose schemas [`register_type`] took.
#[cfg(not(feature = "json-schema"))]
static BY_TYPE: OnceLock<std::sync::Mutex<BTreeMap<String, Arc<Validator>>>> = OnceLock::new();

/// Without feature `json-schema`: `schema` (`T`'s) is checked from now on by deserializing
/// into `T` (what `run_typed::<T>` does with its answer's schema; the verdict of a schema that
/// asserts only what the type does).
#[cfg(not(feature = "json-schema"))]
pub(crate) fn register_type<T: serde::de::DeserializeOwned>(schema: &Value) {
    let checker = Arc::new(Validator(deserializes::<T>));
    let by_type = BY_TYPE.get_or_init(Default::default);
    if let Ok(mut m) = by_type.lock() {
        m.insert(schema.to_string(), checker);
    }
}

/// Whether `value` deserializes into `T`; else the first mismatch's JSON Pointer and reason
/// (a typed tool's check of its arguments, and without feature `json-schema` a typed answer's).
pub(crate) fn deserializes<T: serde::de::DeserializeOwned>(
    value: &Value,
) -> Result<(), (String, String)> {
    serde_path_to_error::deserialize::<_, T>(value)
        .map(drop)
        .map_err(|e| (json_pointer(e.path()), e.into_inner().to_string()))
}

/// Where `value` breaks `validator`'s schema, every violation.
pub(crate) fn violations<'a>(
    validator: &'a Validator,
    value: &'a Value,
) -> impl Iterator<Item = SchemaViolation> + 'a {
    #[cfg(feature = "json-schema")]
    return validator.iter_errors(value).map(|e| SchemaViolation {
        path: e.instance_path().to_string(),
        reason: e.to_string(),
    });
    #[cfg(not(feature = "json-schema"))]
    (validator.0)(value)
        .err()
        .map(|(path, reason)| SchemaViolation { path, reason })
        .into_iter()
}

/// Compiled validators by schema JSON text, shared by every registry of the process.
#[cfg(feature = "json-schema")]
type Shared = std::sync::Mutex<std::collections::HashMap<String, Arc<Validator>>>;
#[cfg(feature = "json-schema")]
static SHARED: OnceLock<Shared> = OnceLock::new();

/// The validator of `schema` (of the tool or typed answer `name`): from the process-wide
/// cache, or compiled and cached. A schema the validator cannot compile (not a JSON Schema,
/// an unresolvable `$ref`) is logged and gives `None`. Without feature `json-schema`: the
/// checker of a [registered](register_type) type's schema, else `None` (logged).
#[cfg(not(feature = "json-schema"))]
pub(crate) fn compile_shared(name: &str, schema: &Value) -> Option<Arc<Validator>> {
    let found = BY_TYPE
        .get()
        .and_then(|m| m.lock().ok()?.get(&schema.to_string()).cloned());
    if found.is_none() {
        tracing::warn!(schema = %name, "built without feature json-schema; not checked");
    }
    found
}

/// See the other `compile_shared`.
#[cfg(feature = "json-schema")]
pub(crate) fn compile_shared(name: &str, schema: &Value) -> Option<Arc<Validator>> {
    let key = schema.to_string();
    let shared = SHARED.get_or_init(Default::default);
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

impl LazySchema {
    /// The tool's validator, compiled on first use.
    fn validator(&self) -> Option<&Validator> {
        self.compiled
            .get_or_init(|| compile_shared(&self.spec.name, &self.spec.parameters))
            .as_deref()
    }
}

impl ArgumentSchemas {
    /// Takes the parameters schema of `spec`'s tool (replacing an earlier one), to be compiled
    /// when a call of the tool is first checked. A schema that does not compile is not
    /// checked, and a tool with an empty or `true` schema accepts everything.
    ///
    /// `tool`, when given, may check its calls itself: a [`TypedTool`](crate::tools::TypedTool)
    /// whose schema [asserts only types](asserts_only_types) is checked by deserializing the
    /// arguments into its type (the same verdict, and no validator to build: compiling the
    /// first JSON Schema validator of a process builds the draft 2020-12 meta-schema's, about a
    /// millisecond).
    pub(crate) fn set(&mut self, spec: Arc<ToolSpec>, tool: Option<Arc<dyn Tool>>) {
        let by_type = tool.filter(|t| {
            t.check_by_type(&Value::Null).is_some() && asserts_only_types(&spec.parameters)
        });
        Arc::make_mut(&mut self.0).insert(
            spec.name.clone(),
            Arc::new(LazySchema {
                spec,
                compiled: OnceLock::new(),
                by_type,
            }),
        );
    }

    /// Tool `name`'s validator, compiled on first use.
    #[cfg(test)]
    fn validator(&self, name: &str) -> Option<&Validator> {
        self.0.get(name)?.validator()
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
        let lazy = self.0.get(&call.name)?;
        let by_type = lazy.by_type.as_ref();
        if let Some(verdict) = by_type.and_then(|t| t.check_by_type(&call.arguments)) {
            let (path, reason) = verdict.err()?;
            return ArgumentsRejected::new(call.id.clone(), [SchemaViolation { path, reason }]);
        }
        let validator = lazy.validator()?;
        ArgumentsRejected::new(call.id.clone(), violations(validator, &call.arguments))
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
        // The ids the machine commits the calls under (a repeated id is derived).
        let mut ids = CallIds::new();
        deltas
            .into_iter()
            .filter_map(|d| match d {
                MessageDelta::ToolCall {
                    id,
                    name,
                    arguments,
                } => self.check(&ToolCall::from_raw(ids.assign(id), name, arguments)),
                _ => None,
            })
            .collect()
    }
}

/// Whether `schema` asserts nothing a `Deserialize` impl of the type it was generated from does
/// not check itself: only types, properties, required fields, `additionalProperties: false`,
/// enums and consts, `$ref`s, `anyOf`/`oneOf`/`allOf` of such schemas, tuples, and integer
/// bounds that are the bounds of the integer `format` beside them (what `schemars` derives
/// from plain Rust types). Formats are annotations in draft 2020-12 and annotations assert
/// nothing. Anything else (a `pattern`, a length, a range, `uniqueItems`, `not`, `if`, an
/// unknown keyword) answers `false`, and the tool's calls go through the JSON Schema validator.
fn asserts_only_types(schema: &Value) -> bool {
    let Value::Object(map) = schema else {
        return schema == &Value::Bool(true);
    };
    map.iter().all(|(key, value)| match key.as_str() {
        "$schema" | "$ref" | "$comment" | "title" | "description" | "default" | "examples"
        | "deprecated" | "readOnly" | "writeOnly" | "format" | "type" | "required" | "enum"
        | "const" | "nullable" => true,
        "properties" | "$defs" | "definitions" => value
            .as_object()
            .is_some_and(|m| m.values().all(asserts_only_types)),
        "items" => asserts_only_types(value),
        "additionalProperties" => value == &Value::Bool(false) || asserts_only_types(value),
        "anyOf" | "oneOf" | "allOf" | "prefixItems" => value
            .as_array()
            .is_some_and(|a| a.iter().all(asserts_only_types)),
        "minItems" | "maxItems" => {
            let len = map
                .get("prefixItems")
                .and_then(Value::as_array)
                .map(Vec::len);
            len.is_some() && value.as_u64() == len.map(|n| n as u64)
        }
        "minimum" | "maximum" => integer_format_bound(map.get("format"), key == "minimum")
            .is_some_and(|bound| value.as_number() == Some(&bound)),
        _ => false,
    })
}

/// The least (`min`) or greatest value of the integer `format` `schemars` writes for a Rust
/// integer type, when the format is one.
fn integer_format_bound(format: Option<&Value>, min: bool) -> Option<serde_json::Number> {
    let (lo, hi): (i64, u64) = match format?.as_str()? {
        "uint8" => (0, u8::MAX.into()),
        "uint16" => (0, u16::MAX.into()),
        "uint32" => (0, u32::MAX.into()),
        "uint64" | "uint" => (0, u64::MAX),
        "int8" => (i8::MIN.into(), i8::MAX as u64),
        "int16" => (i16::MIN.into(), i16::MAX as u64),
        "int32" => (i32::MIN.into(), i32::MAX as u64),
        "int64" | "int" => (i64::MIN, i64::MAX as u64),
        _ => return None,
    };
    Some(if min { lo.into() } else { hi.into() })
}

/// `path` (where deserializing failed) as a JSON Pointer: `/items/0/name`, empty for the whole
/// value.
fn json_pointer(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        let part = match segment {
            Segment::Seq { index } => index.to_string(),
            Segment::Map { key } => key.replace('~', "~0").replace('/', "~1"),
            Segment::Enum { variant } => variant.replace('~', "~0").replace('/', "~1"),
            Segment::Unknown => continue,
        };
        out.push('/');
        out.push_str(&part);
    }
    out
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
        s.set(
            spec(
                "count",
                json!({
                    "type": "object",
                    "properties": {"n": {"type": "integer"}, "label": {"type": "string"}},
                    "required": ["n"],
                    "additionalProperties": false
                }),
            ),
            None,
        );
        s
    }

    fn call(name: &str, raw: &str) -> ToolCall {
        ToolCall::from_raw("c1", name, raw)
    }

    #[cfg(feature = "json-schema")]
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

    #[cfg(feature = "json-schema")]
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
    #[cfg(feature = "json-schema")]
    fn shared(schema: &Value) -> bool {
        SHARED
            .get()
            .and_then(|m| m.lock().ok().map(|m| m.contains_key(&schema.to_string())))
            .unwrap_or(false)
    }

    /// A schema is compiled when a call of its tool is first checked, not when the tool is
    /// inserted, and two tool sets with the same schema share one validator.
    #[cfg(feature = "json-schema")]
    #[test]
    fn r_tool_1_schemas_compile_on_first_use_and_are_shared() {
        let unique = json!({
            "type": "object",
            "title": "r_tool_1_schemas_compile_on_first_use_and_are_shared",
            "properties": {"n": {"type": "integer"}}
        });
        let mut a = ArgumentSchemas::default();
        a.set(spec("t", unique.clone()), None);
        let mut b = ArgumentSchemas::default();
        b.set(spec("u", unique.clone()), None);
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
        s.set(spec("count", json!({"type": 7})), None);
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

    #[cfg(feature = "json-schema")]
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

    mod by_type {
        use super::*;
        use crate::tools::{ToolContext, ToolError, TypedTool};
        use schemars::JsonSchema;
        use serde::Deserialize;
        use std::collections::HashSet;

        #[derive(Deserialize, JsonSchema)]
        #[allow(dead_code)]
        enum Mode {
            Fast,
            Slow { by: u32 },
        }

        #[derive(Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Inner {
            n: i64,
            small: u8,
            tiny: i8,
        }

        /// Plain Rust types: what `schemars` derives asserts only what serde checks.
        #[derive(Deserialize, JsonSchema)]
        #[allow(dead_code)]
        struct Plain {
            name: String,
            inner: Inner,
            label: Option<String>,
            counts: Vec<u32>,
            pair: (i32, String),
            mode: Mode,
            #[serde(default)]
            flag: bool,
        }

        #[derive(Deserialize, JsonSchema)]
        #[allow(dead_code)]
        struct Ranged {
            #[schemars(range(min = 1, max = 10))]
            n: i64,
        }

        #[derive(Deserialize, JsonSchema)]
        #[allow(dead_code)]
        struct Lengthy {
            #[schemars(length(min = 1))]
            name: String,
        }

        #[derive(Deserialize, JsonSchema)]
        #[allow(dead_code)]
        struct Unique {
            tags: HashSet<String>,
        }

        fn schema<T: JsonSchema>() -> Value {
            serde_json::to_value(schemars::schema_for!(T)).expect("schema")
        }

        #[test]
        fn r_tool_1_plain_types_assert_only_types() {
            assert!(
                asserts_only_types(&schema::<Plain>()),
                "{}",
                schema::<Plain>()
            );
        }

        #[test]
        fn r_tool_1_attributes_serde_does_not_check_go_to_the_validator() {
            assert!(!asserts_only_types(&schema::<Ranged>()));
            assert!(!asserts_only_types(&schema::<Lengthy>()));
            assert!(!asserts_only_types(&schema::<Unique>()));
            assert!(!asserts_only_types(
                &json!({"type": "string", "pattern": "^a"})
            ));
            assert!(!asserts_only_types(&json!({"not": {"type": "string"}})));
            assert!(!asserts_only_types(&json!(false)));
            assert!(!asserts_only_types(
                &json!({"type": "integer", "format": "uint8", "maximum": 100})
            ));
        }

        struct Typed<A>(std::marker::PhantomData<A>);

        #[async_trait::async_trait]
        impl<A: serde::de::DeserializeOwned + JsonSchema + Send + Sync + 'static> TypedTool for Typed<A> {
            type Args = A;
            const NAME: &'static str = "typed";
            const DESCRIPTION: &'static str = "A typed tool";
            async fn run(&self, _ctx: ToolContext, _args: A) -> Result<String, ToolError> {
                Ok(String::new())
            }
        }

        fn registry<A: serde::de::DeserializeOwned + JsonSchema + Send + Sync + 'static>(
        ) -> ArgumentSchemas {
            let mut r = crate::tools::ToolRegistry::new();
            r.insert(Arc::new(Typed::<A>(std::marker::PhantomData)));
            r.schemas()
        }

        /// A typed tool with a plain schema is checked by its type: the failing field's
        /// path, serde's reason, and no validator compiled.
        #[test]
        fn r_tool_1_a_typed_tool_is_checked_by_its_type() {
            let s = registry::<Plain>();
            let bad = r#"{"name":"x","inner":{"n":"abc","small":1,"tiny":1},"counts":[],
                "pair":[1,"a"],"mode":"Fast"}"#;
            let r = s.check(&call("typed", bad)).expect("rejected");
            assert_eq!(r.violations.len(), 1);
            assert_eq!(r.violations[0].path, "/inner/n");
            assert!(
                r.violations[0]
                    .reason
                    .contains("invalid type: string \"abc\", expected i64"),
                "{r:?}"
            );
            for bad in [
                r#"{"name":"x","inner":{"n":1,"small":300,"tiny":1},"counts":[],"pair":[1,"a"],"mode":"Fast"}"#,
                r#"{"name":"x","inner":{"n":1,"small":1,"tiny":1,"extra":0},"counts":[],"pair":[1,"a"],"mode":"Fast"}"#,
                r#"{"name":"x","inner":{"n":1,"small":1,"tiny":1},"counts":[-1],"pair":[1,"a"],"mode":"Fast"}"#,
                r#"{"name":"x","inner":{"n":1,"small":1,"tiny":1},"counts":[],"pair":[1],"mode":"Fast"}"#,
                r#"{"name":"x","inner":{"n":1,"small":1,"tiny":1},"counts":[],"pair":[1,"a"],"mode":"Medium"}"#,
                r#"{"inner":{"n":1,"small":1,"tiny":1},"counts":[],"pair":[1,"a"],"mode":"Fast"}"#,
            ] {
                assert!(s.check(&call("typed", bad)).is_some(), "accepted {bad}");
            }
            let good = r#"{"name":"x","inner":{"n":1,"small":255,"tiny":-128},"counts":[7],
                "pair":[1,"a"],"mode":{"Slow":{"by":2}},"label":null}"#;
            assert_eq!(s.check(&call("typed", good)), None);
            assert!(
                s.0["typed"].compiled.get().is_none(),
                "a validator was compiled"
            );
        }

        /// A typed tool whose schema asserts more than its type checks goes through the
        /// validator, which enforces the attribute.
        #[cfg(feature = "json-schema")]
        #[test]
        fn r_tool_1_a_typed_tools_ranges_are_enforced_by_the_validator() {
            let s = registry::<Ranged>();
            let r = s.check(&call("typed", r#"{"n":0}"#)).expect("rejected");
            assert_eq!(r.violations[0].path, "/n");
            assert!(r.violations[0].reason.contains("minimum"), "{r:?}");
            assert_eq!(s.check(&call("typed", r#"{"n":5}"#)), None);
        }

        #[test]
        fn r_tool_1_json_pointers_escape_keys() {
            #[derive(Deserialize, Debug)]
            #[allow(dead_code)]
            struct Odd {
                #[serde(rename = "a/b~c")]
                x: Vec<i64>,
            }
            let v = json!({"a/b~c": [1, "x"]});
            let e = serde_path_to_error::deserialize::<_, Odd>(&v).expect_err("fails");
            assert_eq!(json_pointer(e.path()), "/a~1b~0c/1");
        }
    }
}
