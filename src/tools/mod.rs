//! The tool port: tool specs (schemas from `schemars`), the `Tool` trait, the registry, and the
//! built-in tools ([`calculator()`], [`read_file()`], [`append_line()`] with feature
//! `builtin-tools`; [`ask_user()`], [`write_todos()`]), each a constructor returning the tool.
//!
//! # Example
//!
//! A tool with typed arguments: the JSON Schema the model sees is derived from the argument
//! type, and every call's arguments are checked against it before the tool runs.
//!
//! ```
//! use std::sync::Arc;
//!
//! use agentloop::prelude::*;
//! use agentloop::schemars::JsonSchema;
//! use agentloop::serde::Deserialize;
//!
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(crate = "agentloop::serde")]
//! #[schemars(crate = "agentloop::schemars")]
//! struct ShoutArgs {
//!     /// The text to shout.
//!     text: String,
//! }
//!
//! struct Shout;
//!
//! #[async_trait]
//! impl TypedTool for Shout {
//!     type Args = ShoutArgs;
//!     const NAME: &'static str = "shout";
//!     const DESCRIPTION: &'static str = "The text in capitals";
//!
//!     async fn run(&self, _ctx: ToolContext, args: ShoutArgs) -> Result<String, ToolError> {
//!         Ok(args.text.to_uppercase())
//!     }
//! }
//!
//! let agent = Agent::builder().model(ScriptedModel::demo()).tool(Arc::new(Shout)).build();
//! assert_eq!(agent.config().tools[0].name, "shout");
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use serde_json::Value;

pub use agentloop_core::tool_spec::ToolSpec;
use agentloop_core::tool_spec::ToolSpecs;
pub(crate) use schema::ArgumentSchemas;

mod schema;
#[cfg(not(feature = "json-schema"))]
pub(crate) use schema::register_type;
pub(crate) use schema::{compile_shared, violations, Validator};

/// What a tool invocation knows besides its arguments.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// The tool call id: the idempotency key of side-effecting tools (R-IDEM-3).
    pub call_id: String,
    /// The directory file tools are confined to.
    pub root: PathBuf,
    /// A key that makes a side-effecting call idempotent across re-executions, when the
    /// runtime may run the same call twice (the Restate adapter re-runs the effect in flight
    /// after a crash and passes `<session>/<call_id>` here). `None` (the tokio runtime, which
    /// reports `outcome_unknown` instead of re-running): the tool behaves as before.
    /// The built-in [`append_line`](fn@append_line) honours it.
    pub idempotency_key: Option<String>,
    /// Whether the file tools may write instruction, agent and rule files (see
    /// [`protected`]): false unless the agent allows it
    /// ([`AgentBuilder::allow_instruction_writes`](crate::runtime::AgentBuilder::allow_instruction_writes)).
    pub allow_instruction_writes: bool,
}

#[cfg(test)]
impl ToolContext {
    /// A unit test's context: call `call_id` confined to `root`, unkeyed, instruction files
    /// protected.
    pub(crate) fn for_test(root: impl Into<PathBuf>, call_id: &str) -> Self {
        ToolContext {
            call_id: call_id.into(),
            root: root.into(),
            idempotency_key: None,
            allow_instruction_writes: false,
        }
    }
}

/// A tool failure; it becomes an error result the model sees, never a machine error (R-IN-3).
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// Arguments did not match the schema.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
}

/// A tool the runtime can execute.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The spec offered to the model.
    fn spec(&self) -> ToolSpec;
    /// Whether abort may kill it mid-run (R-TOOL-3). Immune tools finish and keep their results.
    fn killable(&self) -> bool {
        true
    }
    /// Whether running it twice is harmless, so a crash-interrupted call may be re-run (R-IDEM-6).
    fn retry_safe(&self) -> bool {
        false
    }
    /// Whether it is pure: the same arguments always give the same result, and running it
    /// has no side effect. An identical call later in the session is then answered from the
    /// cache of its results instead of running (row `commit_cached`, event `tool_cache_hit`;
    /// R-TOOL-6).
    fn pure(&self) -> bool {
        false
    }
    /// For a tool whose arguments are a Rust type: checks `arguments` by deserializing them
    /// into it, `Some(Err((path, reason)))` naming the first mismatch (`path` a JSON Pointer).
    /// [`TypedTool`]s answer it; `None` (the default) leaves the check to the JSON Schema.
    ///
    /// The runtime asks it instead of compiling the tool's schema when the schema asserts
    /// nothing a `Deserialize` impl does not (types, properties, required fields, enums,
    /// integer ranges of the type, tuples; see `tools/schema.rs`): the verdict is the same and
    /// no JSON Schema validator is built. A schema with more (a pattern, a length, a range
    /// from `#[schemars(...)]`) is checked by the validator as any other tool's.
    fn check_by_type(&self, arguments: &Value) -> Option<Result<(), (String, String)>> {
        let _ = arguments;
        None
    }
    /// Runs the tool.
    async fn call(&self, ctx: ToolContext, arguments: Value) -> Result<String, ToolError>;
}

/// Convenience for tools with typed arguments: the schema comes from `Args`. The runtime checks
/// the arguments against it before the call runs (R-TOOL-1), and they are deserialized into
/// `Args` (a second line: a schema cannot say everything a `Deserialize` impl checks).
#[async_trait]
pub trait TypedTool: Send + Sync + 'static {
    /// The argument type.
    type Args: DeserializeOwned + JsonSchema + Send;
    /// Tool name.
    const NAME: &'static str;
    /// Tool description.
    const DESCRIPTION: &'static str;
    /// See [`Tool::killable`].
    fn killable(&self) -> bool {
        true
    }
    /// See [`Tool::retry_safe`].
    fn retry_safe(&self) -> bool {
        false
    }
    /// See [`Tool::pure`].
    fn pure(&self) -> bool {
        false
    }
    /// Runs with validated arguments.
    async fn run(&self, ctx: ToolContext, args: Self::Args) -> Result<String, ToolError>;
}

#[async_trait]
impl<T: TypedTool> Tool for T {
    fn spec(&self) -> ToolSpec {
        let schema = schemars::schema_for!(T::Args);
        ToolSpec {
            name: T::NAME.to_string(),
            description: T::DESCRIPTION.to_string(),
            parameters: serde_json::to_value(schema).unwrap_or(Value::Null),
        }
    }
    fn killable(&self) -> bool {
        TypedTool::killable(self)
    }
    fn retry_safe(&self) -> bool {
        TypedTool::retry_safe(self)
    }
    fn pure(&self) -> bool {
        TypedTool::pure(self)
    }
    fn check_by_type(&self, arguments: &Value) -> Option<Result<(), (String, String)>> {
        Some(schema::deserializes::<T::Args>(arguments))
    }
    async fn call(&self, ctx: ToolContext, arguments: Value) -> Result<String, ToolError> {
        let args: T::Args = serde_json::from_value(arguments)
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        self.run(ctx, args).await
    }
}

/// The tools of an agent, by name (sorted, so specs are deterministic).
///
/// A tool's spec is taken once, when it is inserted; the specs are shared (`Arc<[ToolSpec]>`), so
/// cloning a registry (one per agent) and handing its specs to agents, sessions and runs
/// copies no schema. Its parameters schema is compiled when a call of the tool is first checked
/// (compiled validators are shared by schema across the process): every call's arguments are
/// checked against it before the call runs (R-TOOL-1; [`check_arguments`](Self::check_arguments)).
///
/// Inserting is O(log n): the shared spec list is built on the first [`specs`](Self::specs)
/// after a change, so adding n tools one by one (an MCP server's thousands) costs O(n log n),
/// not O(n²). A clone shares the spec list, the specs and the compiled schemas (an idle agent
/// holds a registry: cloning one copies no schema).
#[derive(Default)]
pub struct ToolRegistry {
    /// The tools and their specs (taken once, at insert), by name.
    tools: BTreeMap<String, (Arc<dyn Tool>, Arc<ToolSpec>)>,
    /// The specs of `tools` in name order, built when first asked for after a change.
    specs: std::sync::OnceLock<ToolSpecs>,
    /// The tools' compiled parameters schemas.
    schemas: ArgumentSchemas,
}

impl Clone for ToolRegistry {
    fn clone(&self) -> Self {
        // The list is built here once, in the original, so every clone shares it instead of
        // building a copy of its own on its first `specs()`.
        ToolRegistry {
            tools: self.tools.clone(),
            specs: std::sync::OnceLock::from(self.specs()),
            schemas: self.schemas.clone(),
        }
    }
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// What the command line offers: the built-in tools with feature `builtin-tools`
    /// (default), else none. (An [`Agent`](crate::runtime::Agent) built by the library starts
    /// with no tools.)
    pub fn defaults() -> Self {
        #[cfg(feature = "builtin-tools")]
        return Self::builtin();
        #[cfg(not(feature = "builtin-tools"))]
        return Self::new();
    }

    /// The built-in tools: `calculator`, `read_file`, `append_line` (feature `builtin-tools`).
    #[cfg(feature = "builtin-tools")]
    pub fn builtin() -> Self {
        let mut r = Self::new();
        r.insert(Arc::new(calculator::Calculator));
        r.insert(Arc::new(read_file::ReadFile));
        r.insert(Arc::new(append_line::AppendLine));
        r
    }

    /// Adds (or replaces) a tool.
    pub fn insert(&mut self, tool: Arc<dyn Tool>) {
        let spec = Arc::new(tool.spec());
        self.schemas.set(spec.clone(), Some(tool.clone()));
        self.tools.insert(spec.name.clone(), (tool, spec));
        self.specs = std::sync::OnceLock::new();
    }

    /// Removes a tool by name.
    pub fn remove(&mut self, name: &str) -> Option<Arc<dyn Tool>> {
        let (removed, _) = self.tools.remove(name)?;
        self.schemas.remove(name);
        self.specs = std::sync::OnceLock::new();
        Some(removed)
    }

    /// Adds (or replaces) every tool of `other`.
    pub fn extend(&mut self, other: ToolRegistry) {
        for (tool, _) in other.tools.into_values() {
            self.insert(tool);
        }
    }

    /// Looks a tool up.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name).map(|(tool, _)| tool)
    }

    /// Specs of every tool, sorted by name (shared, not copied; built once after a change).
    pub fn specs(&self) -> Arc<[ToolSpec]> {
        self.specs
            .get_or_init(|| {
                self.tools
                    .values()
                    .map(|(_, spec)| ToolSpec::clone(spec))
                    .collect()
            })
            .clone()
    }

    /// The tools' compiled parameters schemas (shared, not copied): what the runtime checks
    /// each call's arguments against before it runs (R-TOOL-1).
    pub(crate) fn schemas(&self) -> ArgumentSchemas {
        self.schemas.clone()
    }

    /// The verdicts of the tools' parameters schemas on the tool calls among a model
    /// attempt's `deltas` (R-TOOL-1): one [`ArgumentsRejected`] per call whose arguments break
    /// its tool's schema, what the machine's `done` event carries. Calls of an unknown tool and
    /// calls whose arguments are not JSON get none (the machine fails them on rows of their
    /// own). For a driver of the machines other than this crate's runtime (the Restate adapter).
    ///
    /// [`ArgumentsRejected`]: agentloop_core::tool_check::ArgumentsRejected
    pub fn check_arguments<'a>(
        &self,
        deltas: impl IntoIterator<Item = &'a crate::MessageDelta>,
    ) -> Vec<agentloop_core::tool_check::ArgumentsRejected> {
        self.schemas.check_deltas(deltas)
    }
}

/// The built-in `calculator` tool (feature `builtin-tools`): evaluates an arithmetic expression
/// (`(2+3)*4`, `2^10 / 3`, `math::sqrt(2)`); integer literals are evaluated as floating point,
/// so `7/2` is `3.5`. Pure, so an identical call is answered from the session's cache, and safe
/// to retry.
#[cfg(feature = "builtin-tools")]
pub fn calculator() -> Arc<dyn Tool> {
    Arc::new(calculator::Calculator)
}

/// The built-in `read_file` tool (feature `builtin-tools`): the text of a file under the
/// tool root ([`ToolContext::root`]; a path may not leave it), at most 1 MiB. Read-only, so
/// safe to retry.
#[cfg(feature = "builtin-tools")]
pub fn read_file() -> Arc<dyn Tool> {
    Arc::new(read_file::ReadFile)
}

/// The built-in `append_line` tool (feature `builtin-tools`): appends one line to a file under
/// the tool root, creating the file if needed. Side-effecting: killable, not safe to retry;
/// with a [`ToolContext::idempotency_key`] a re-run of the same call appends nothing.
#[cfg(feature = "builtin-tools")]
pub fn append_line() -> Arc<dyn Tool> {
    Arc::new(append_line::AppendLine)
}

/// The built-in `ask_user` tool: the model asks the person a question, with options. It never
/// runs: the machine puts the question to the person instead (offer it with
/// [`AgentBuilder::ask_user`](crate::runtime::AgentBuilder::ask_user), which also turns the
/// question handling on).
pub fn ask_user() -> Arc<dyn Tool> {
    Arc::new(ask_user::AskUser)
}

/// The built-in `write_todos` tool: the model keeps its todo list, each call sending the whole
/// list, reported as a `todo_change` event ([`AgentBuilder::write_todos`](crate::runtime::AgentBuilder::write_todos)
/// offers it).
pub fn write_todos() -> Arc<dyn Tool> {
    Arc::new(write_todos::WriteTodos)
}

#[cfg(feature = "builtin-tools")]
mod append_line;
mod ask_user;
#[cfg(feature = "builtin-tools")]
mod calculator;
pub mod protected;
#[cfg(feature = "builtin-tools")]
mod read_file;
mod write_todos;

// The built-in tools are named by their constructors above; the runtime inserts the two it
// offers through the builder by type.
pub(crate) use ask_user::AskUser;
pub(crate) use write_todos::WriteTodos;
