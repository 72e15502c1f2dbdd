//! Subagents (R-EXT-2): a tool runs a child session; its events are forwarded wrapped; aborting
//! the parent aborts the child; a running child is visible from the parent.

mod support;

use std::sync::Arc;

use agentloop::session::{KillTools, Status};
use agentloop::subagent::SubagentTool;
use agentloop::{AgentEvent, Outcome};
use agentloop::{Message, ToolStatus};
use support::*;

const PARENT: &str = r#"{"turns": [
    {"tool_calls": [{"id": "d1", "name": "delegate", "arguments": {"task": "what is 2+3?"}}]},
    {"text": "The child said: {{last_tool_result}}"}
]}"#;

fn child_tool(child_script: &'static str, open_ms: u64) -> SubagentTool {
    SubagentTool::new("delegate", "Delegate a task to a subagent", move || {
        let mut model = Slow::new(child_script);
        model.open_ms = open_ms;
        builder(model).build()
    })
}

#[tokio::test(start_paused = true)]
async fn r_ext_2_subagent_runs_a_child_session_and_forwards_its_events() {
    let parent = session(builder(Slow::new(PARENT)).build());
    let tool = child_tool(r#"{"turns": [{"text": "five"}]}"#, 100).forward_to(&parent);
    parent.attach_tool(Arc::new(tool)).await.expect("attached");
    parent.prompt("ask the child").await.expect("started");
    parent.wait_idle().await;
    let r = parent.last_result().expect("result");
    assert_eq!(r.final_text(), Some("The child said: five"));
    let ev = history(&parent);
    assert_eq!(count(&ev, "subagent_start"), 1);
    assert_eq!(count(&ev, "subagent_end"), 1);
    let wrapped: Vec<String> = ev
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::SubagentEvent {
                event,
                child_session,
                tool_call_id,
            } => {
                assert_eq!(child_session, "delegate-d1");
                assert_eq!(tool_call_id, "d1");
                Some(event.event.type_name())
            }
            _ => None,
        })
        .collect();
    assert!(wrapped.contains(&"run_start".to_string()));
    assert!(wrapped.contains(&"run_end".to_string()));
    let start = ev
        .iter()
        .position(|e| e.event.type_name() == "subagent_start");
    let end = ev
        .iter()
        .position(|e| e.event.type_name() == "subagent_end");
    let first_wrapped = ev
        .iter()
        .position(|e| e.event.type_name() == "subagent_event");
    assert!(start < first_wrapped && first_wrapped < end);
}

#[tokio::test(start_paused = true)]
async fn r_ext_2_aborting_the_parent_aborts_the_child() {
    let parent = session(builder(Slow::new(PARENT)).build());
    // The child's model takes a minute to answer: the child is "stuck".
    let tool = child_tool(r#"{"turns": [{"text": "too late"}]}"#, 60_000).forward_to(&parent);
    let handle = tool.clone();
    parent.attach_tool(Arc::new(tool)).await.expect("attached");
    let mut sub = parent.subscribe(None, None);
    parent.prompt("ask the child").await.expect("started");
    wait_for(&mut sub, "subagent_start").await;
    // Detectable from the parent: the live child and its status.
    let children = handle.children();
    assert_eq!(children.len(), 1);
    let child = children[0].1.clone();
    assert_ne!(child.status(), Status::Idle);
    parent
        .abort("user abort", KillTools::Killable, false)
        .await
        .expect("abort");
    parent.wait_idle().await;
    child.wait_idle().await;
    assert_eq!(
        child.last_result().map(|r| r.outcome),
        Some(Outcome::Aborted)
    );
    assert!(handle.children().is_empty());
    let results: Vec<ToolStatus> = parent
        .last_result()
        .expect("result")
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r.status),
            _ => None,
        })
        .collect();
    assert_eq!(results, vec![ToolStatus::Aborted]);
}
