//! `ask_user`: the built-in tool the model calls to ask the person a question, with options.
//! It never runs: with `StepConfig::ask_user` set (the agent builder's
//! [`ask_user`](crate::runtime::AgentBuilder::ask_user)) the machine puts the question to the
//! person instead (row `start_ask_user`, effect `ask_user`) and the answer is the result.

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{Tool, ToolContext, ToolError, ToolSpec};
use crate::process::ASK_USER_TOOL;

/// The `ask_user` tool (see the module doc).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AskUser;

#[async_trait]
impl Tool for AskUser {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: ASK_USER_TOOL.to_string(),
            description: "Asks the user a question and waits for the answer. Use it when you \
                          need a decision or information only the user has; offer options when \
                          the answer is one of a few choices."
                .to_string(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "question": {"type": "string", "description": "The question."},
                    "options": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Choices to offer (optional)."
                    }
                },
                "required": ["question"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, _ctx: ToolContext, _arguments: Value) -> Result<String, ToolError> {
        Err(ToolError::Failed(
            "ask_user is answered by the person, not run: build the agent with \
             AgentBuilder::ask_user"
                .into(),
        ))
    }
}
