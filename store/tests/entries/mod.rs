//! Entry builders shared by the store tests (`store_file`, `store_conformance`).
#![allow(dead_code)]

use agentloop_core::{AssistantMessage, Message, ToolCall, ToolResult, ToolStatus};
use agentloop_store::Entry;

pub fn user(run: &str, text: &str) -> Entry {
    Entry::UserInput {
        run_id: run.into(),
        message: Message::user(text),
    }
}

pub fn assistant(run: &str, step: u32, calls: &[(&str, &str)]) -> Entry {
    Entry::Assistant {
        run_id: run.into(),
        model_call_index: step,
        message: AssistantMessage {
            text: format!("step {step}"),
            tool_calls: calls
                .iter()
                .map(|(id, name)| ToolCall::from_raw(*id, *name, r#"{"line":"x"}"#))
                .collect(),
            ..Default::default()
        },
    }
}

pub fn started(run: &str, id: &str, name: &str) -> Entry {
    Entry::ToolStarted {
        run_id: run.into(),
        tool_call_id: id.into(),
        name: name.into(),
    }
}

pub fn result(run: &str, id: &str, name: &str, status: ToolStatus) -> Entry {
    Entry::ToolResult {
        run_id: run.into(),
        result: ToolResult {
            tool_call_id: id.into(),
            name: name.into(),
            content: format!("{name} done"),
            status,
        },
    }
}

pub fn run_end(run: &str) -> Entry {
    Entry::RunEnd {
        run_id: run.into(),
        outcome: agentloop_core::Outcome::Completed,
        reason: String::new(),
    }
}

/// One of every entry kind: a complete run with one tool call and a compaction.
pub fn sample() -> Vec<Entry> {
    vec![
        Entry::Metadata {
            model: "scripted".into(),
            config: serde_json::json!({"max_steps": 8}),
        },
        user("r1", "append a line"),
        assistant("r1", 1, &[("c1", "append_line")]),
        started("r1", "c1", "append_line"),
        result("r1", "c1", "append_line", ToolStatus::Completed),
        Entry::Compaction {
            run_id: "r1".into(),
            removed: 2,
            messages: vec![Message::user("summary: a line was appended")],
        },
        assistant("r1", 2, &[]),
        run_end("r1"),
    ]
}
