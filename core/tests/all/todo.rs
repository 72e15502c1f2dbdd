//! The todo list of the built-in `write_todos` tool: the arguments that
//! set a list, and how a list reads.

use agentloop_core::todo::{render, todos_of, Todo, TodoStatus};
use serde_json::json;

#[test]
fn issue13_each_status_has_its_mark() {
    assert_eq!(TodoStatus::Completed.mark(), "[x]");
    assert_eq!(TodoStatus::InProgress.mark(), "[~]");
    assert_eq!(TodoStatus::Pending.mark(), "[ ]");
}

#[test]
fn issue13_only_well_formed_arguments_set_a_list() {
    let list = todos_of(&json!({"todos": [
        {"content": "Read the config", "status": "completed"},
        {"content": "Fix the parser", "status": "in_progress"},
        {"content": "Write the test", "status": "pending"},
    ]}));
    assert_eq!(
        list,
        Some(vec![
            Todo {
                content: "Read the config".into(),
                status: TodoStatus::Completed
            },
            Todo {
                content: "Fix the parser".into(),
                status: TodoStatus::InProgress
            },
            Todo {
                content: "Write the test".into(),
                status: TodoStatus::Pending
            },
        ])
    );
    assert_eq!(todos_of(&json!({"todos": []})), Some(vec![]));
    for bad in [
        json!({}),
        json!({"todos": [{"content": "x", "status": "done"}]}),
        json!({"todos": [{"content": "x", "status": "pending", "extra": 1}]}),
        json!({"todos": [], "more": true}),
        json!("todos"),
    ] {
        assert_eq!(todos_of(&bad), None, "{bad}");
    }
}

#[test]
fn issue13_a_list_reads_one_marked_line_per_item() {
    assert_eq!(render(&[]), "The todo list is empty.");
    let list = [
        Todo {
            content: "Read the config".into(),
            status: TodoStatus::Completed,
        },
        Todo {
            content: "Fix the parser".into(),
            status: TodoStatus::InProgress,
        },
        Todo {
            content: "Write the test".into(),
            status: TodoStatus::Pending,
        },
    ];
    assert_eq!(
        render(&list),
        "[x] Read the config\n[~] Fix the parser\n[ ] Write the test"
    );
}
