//! Subtask parts, as in OpenCode. A subtask queued in the session runs as a
//! subagent before the next model step (rows `active_subtask`, `planning_subtask`), as
//! OpenCode's outer loop runs a pending subtask part with the task tool before the next LLM
//! call: the history gets an assistant tool call and its result, and the model sees both.
//! The subtask's synthetic message is a committed assistant turn of the session: a scripted
//! model (served by `session_turn`) skips a turn for it, never served.

mod support;

use agentloop_testkit::agent::model_requests;
use std::sync::Arc;

use agentloop::attachment::Prompt;
use agentloop::session::{Ack, Session, SessionConfig};
use agentloop::subagent::SubagentTool;
use agentloop::trace::{replay, Trace};
use agentloop::Message;
use agentloop_core::event::Event;
use agentloop_core::trace::TraceRecord;
use serde_json::json;
use support::*;

fn child_tool() -> SubagentTool {
    SubagentTool::new("delegate", "Delegate a task to a subagent", || {
        builder(Slow::new(r#"{"turns": [{"text": "five"}]}"#)).build()
    })
}

fn recording(agent: agentloop::runtime::Agent) -> Session {
    Session::spawn(
        agent,
        SessionConfig::new("s")
            .event_buffer_size(1024)
            .record_traces(true),
    )
}

/// The messages of each model request the trace recorded, in order.
fn requests(trace: &Trace) -> Vec<Vec<Message>> {
    model_requests(trace)
        .into_iter()
        .map(|r| r.messages.to_vec())
        .collect()
}

/// Whether `messages` hold the subtask's call (`delegate`) followed by its result `content`.
fn saw_subtask(messages: &[Message], content: &str) -> bool {
    messages.windows(2).any(|w| match (&w[0], &w[1]) {
        (Message::Assistant(a), Message::Tool(t)) => {
            a.tool_calls.len() == 1
                && a.tool_calls[0].name == "delegate"
                && a.tool_calls[0].id.starts_with("subtask-")
                && t.tool_call_id == a.tool_calls[0].id
                && t.content == content
        }
        _ => false,
    })
}

#[tokio::test(start_paused = true)]
async fn seed_004_issue_13_a_prompts_subtask_runs_as_a_subagent_before_the_first_model_step() {
    let parent = recording(
        builder(Slow::new(
            r#"{"turns": [{"text": "(the subtask's turn)"}, {"text": "The child said: {{last_tool_result}}"}]}"#,
        ))
        .build(),
    );
    parent
        .attach_tool(Arc::new(child_tool().forward_to(&parent)))
        .await
        .expect("attached");
    parent
        .prompt_with(Prompt::new("ask the child").subtask("delegate", json!({"task": "2+3?"})))
        .await
        .expect("started");
    parent.wait_idle().await;
    let r = parent.last_result().expect("result");
    // The parent's one model step answered from the child's answer.
    assert_eq!(r.final_text(), Some("The child said: five"));
    assert_eq!(count(&history(&parent), "subagent_start"), 1);
    let trace = parent.last_trace().expect("recorded");
    // The subtask was queued before the start, and ran before any model call.
    let inputs: Vec<&str> = trace
        .records
        .iter()
        .filter_map(|r| match r {
            TraceRecord::Input { event, .. } => Some(event.name()),
            _ => None,
        })
        .collect();
    assert_eq!(&inputs[..2], ["subtask", "start"]);
    let reqs = requests(&trace);
    assert_eq!(reqs.len(), 1, "one model step");
    assert!(matches!(&reqs[0][0], Message::User { content, .. } if content == "ask the child"));
    assert!(saw_subtask(&reqs[0], "five"), "{:?}", reqs[0]);
    assert_eq!(replay(&trace), None, "the trace replays");
}

#[tokio::test(start_paused = true)]
async fn seed_004_issue_13_a_subtask_queued_in_a_busy_session_runs_before_the_next_model_step() {
    // Step 1 calls a slow tool; the subtask arrives meanwhile and runs before step 3.
    let script = r#"{"turns": [
        {"tool_calls": [{"id": "w1", "name": "wait", "arguments": {}}]},
        {"text": "(the subtask's turn)"},
        {"text": "The child said: {{last_tool_result}}"}
    ]}"#;
    let parent = recording(
        builder(Slow::new(script))
            .tool(Arc::new(SleepTool::new("wait", 1_000)))
            .build(),
    );
    parent
        .attach_tool(Arc::new(child_tool()))
        .await
        .expect("attached");
    let mut sub = parent.subscribe(None, None);
    parent.prompt("go").await.expect("started");
    wait_for(&mut sub, "tool_start").await;
    let ack = parent
        .subtask("delegate", json!({"task": "2+3?"}))
        .await
        .expect("queued");
    assert_eq!(ack, Ack::SubtaskQueued);
    parent.wait_idle().await;
    let r = parent.last_result().expect("result");
    assert_eq!(r.final_text(), Some("The child said: five"));
    let trace = parent.last_trace().expect("recorded");
    let reqs = requests(&trace);
    assert_eq!(reqs.len(), 2);
    assert!(!saw_subtask(&reqs[0], "five"));
    assert!(saw_subtask(&reqs[1], "five"), "{:?}", reqs[1]);
    assert!(trace
        .records
        .iter()
        .any(|r| matches!(r, TraceRecord::Input { event: Event::Subtask { tool, .. }, .. } if tool == "delegate")));
    assert_eq!(replay(&trace), None, "the trace replays");
}

#[tokio::test(start_paused = true)]
async fn seed_004_issue_13_a_subtask_in_an_idle_session_starts_a_run() {
    let parent = recording(
        builder(Slow::new(
            r#"{"turns": [{"text": "(the subtask's turn)"}, {"text": "The child said: {{last_tool_result}}"}]}"#,
        ))
        .build(),
    );
    parent
        .attach_tool(Arc::new(child_tool()))
        .await
        .expect("attached");
    let ack = parent
        .subtask("delegate", json!({"task": "2+3?"}))
        .await
        .expect("started");
    assert_eq!(ack, Ack::Started);
    parent.wait_idle().await;
    let r = parent.last_result().expect("result");
    assert_eq!(r.final_text(), Some("The child said: five"));
    let trace = parent.last_trace().expect("recorded");
    assert_eq!(replay(&trace), None, "the trace replays");
}
