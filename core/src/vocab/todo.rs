//! The todo list the model keeps with the built-in `write_todos` tool: each completed call replaces the whole list, and the inner
//! machine reports the new list as a `todo_change` event, from the call's (schema-checked)
//! arguments — so the list is in the trace and the session history, and replays.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The name of the built-in todo tool.
pub const WRITE_TODOS_TOOL: &str = "write_todos";

/// How far a todo is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on (at most one at a time, by convention).
    InProgress,
    /// Done.
    Completed,
}

impl TodoStatus {
    /// The item's mark where a list is shown: `[x]` done, `[~]` in progress, `[ ]` pending.
    pub fn mark(self) -> &'static str {
        match self {
            TodoStatus::Completed => "[x]",
            TodoStatus::InProgress => "[~]",
            TodoStatus::Pending => "[ ]",
        }
    }
}

/// One item of the list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Todo {
    /// What is to be done, imperative ("Read the config").
    pub content: String,
    /// How far it is.
    pub status: TodoStatus,
}

/// Arguments of `write_todos`: the whole new list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteTodosArgs {
    /// The complete todo list, replacing the previous one (send every item, in order).
    pub todos: Vec<Todo>,
}

/// The list a `write_todos` call sets, if its arguments are one.
pub fn todos_of(arguments: &serde_json::Value) -> Option<Vec<Todo>> {
    WriteTodosArgs::deserialize(arguments).ok().map(|a| a.todos)
}

/// The list as the tool reports it to the model: one line per item, `[x]` done, `[~]` in
/// progress, `[ ]` pending.
pub fn render(todos: &[Todo]) -> String {
    if todos.is_empty() {
        return "The todo list is empty.".into();
    }
    todos
        .iter()
        .map(|t| format!("{} {}", t.status.mark(), t.content))
        .collect::<Vec<_>>()
        .join("\n")
}
