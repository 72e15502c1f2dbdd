//! `ToolSpec`: what the model is told about a tool (name, description, JSON Schema).

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the model is told about a tool (R-TOOL-1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolSpec {
    /// Unique name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

/// The tools offered to a model, shared: an agent, its sessions, their runs and every model
/// request hold one copy of the schemas. Serializes as a plain JSON array,
/// like a `Vec<ToolSpec>`; build one from a vector with `.into()`.
pub type ToolSpecs = Arc<[ToolSpec]>;
