//! The `read_file` built-in tool (placeholder: being implemented).

use async_trait::async_trait;

use super::{Tool, ToolContext, ToolError, ToolSpec};

/// The `read_file` tool.
#[derive(Debug, Default)]
pub struct ReadFile;

#[async_trait]
impl Tool for ReadFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read_file".into(),
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
