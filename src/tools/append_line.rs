//! The `append_line` built-in tool (placeholder: being implemented).

use async_trait::async_trait;

use super::{Tool, ToolContext, ToolError, ToolSpec};

/// The `append_line` tool.
#[derive(Debug, Default)]
pub struct AppendLine;

#[async_trait]
impl Tool for AppendLine {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "append_line".into(),
            description: String::new(),
            parameters: serde_json::Value::Null,
        }
    }
    async fn call(
        &self,
        _ctx: ToolContext,
        _arguments: serde_json::Value,
    ) -> Result<String, ToolError> {
        Err(ToolError::Failed("not implemented yet".into()))
    }
}
