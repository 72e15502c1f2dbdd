//! `write_todos`: the built-in tool the model keeps its todo list with. Each call sends the whole list; the tool answers with the list as the model
//! will see it, and the inner machine reports it as a `todo_change` event (see
//! [`agentloop_core::todo`]). Offered by [`AgentBuilder::write_todos`](crate::runtime::AgentBuilder::write_todos)
//! and `agentloop run --todos`.

use async_trait::async_trait;

use super::{ToolContext, ToolError, TypedTool};
use agentloop_core::todo::{WriteTodosArgs, WRITE_TODOS_TOOL};

/// The `write_todos` tool (see the module doc).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct WriteTodos;

#[async_trait]
impl TypedTool for WriteTodos {
    type Args = WriteTodosArgs;
    const NAME: &'static str = WRITE_TODOS_TOOL;
    const DESCRIPTION: &'static str =
        "Replaces your todo list for this task with the list given (send every item, with its \
         status: pending, in_progress or completed). Use it to plan multi-step work and to \
         mark progress; keep one item in_progress at a time.";

    /// Setting the same list twice is harmless.
    fn retry_safe(&self) -> bool {
        true
    }

    async fn run(&self, _ctx: ToolContext, args: WriteTodosArgs) -> Result<String, ToolError> {
        Ok(agentloop_core::todo::render(&args.todos))
    }
}
