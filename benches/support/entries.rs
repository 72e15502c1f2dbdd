//! Sample session entries shared by the store benchmark and the `store_latency` example.

use agentloop::store::Entry;
use agentloop::{AssistantMessage, Message, ToolCall, ToolResult, ToolStatus};

/// A realistic mix: user input, assistant turn with one tool call, start marker, result.
pub fn entry(i: u64) -> Entry {
    let run_id = format!("run-{}", i / 400);
    let step = (i / 4) as u32 + 1;
    let id = format!("call-{}", i / 4);
    match i % 4 {
        0 => Entry::UserInput {
            run_id,
            message: Message::user(format!("please append line {i} to the notes file")),
        },
        1 => Entry::Assistant {
            run_id,
            model_call_index: step,
            message: AssistantMessage {
                text: "I will append the line now.".into(),
                tool_calls: vec![ToolCall::from_raw(
                    id,
                    "append_line",
                    r#"{"path":"notes.txt","line":"hello world"}"#,
                )],
                ..Default::default()
            },
        },
        2 => Entry::ToolStarted {
            run_id,
            tool_call_id: id,
            name: "append_line".into(),
        },
        _ => Entry::ToolResult {
            run_id,
            result: ToolResult {
                tool_call_id: id,
                name: "append_line".into(),
                content: "appended 1 line (12 bytes) to notes.txt".into(),
                status: ToolStatus::Completed,
            },
        },
    }
}
