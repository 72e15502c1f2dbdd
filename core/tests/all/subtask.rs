//! As in OpenCode, a subtask part queued in the session runs as a tool call
//! (a subagent tool) before the next model step. Rows `active_subtask` (queue it) and
//! `planning_subtask` (a synthetic step: its assistant message, one call, persisted like a
//! committed turn, and run by the inner machine as a resumed step's calls are).

use agentloop_core::chart::ReactRow;
use agentloop_core::entry::Entry;
use agentloop_core::message::ToolStatus;
use agentloop_core::{Effect, Event, Message, Outcome, Run, RunConfig};

use crate::steps::{answer, react_rows, request_of, start};

#[test]
fn seed_004_issue_13_a_queued_subtask_runs_before_the_next_model_step() {
    let mut run = Run::new(RunConfig::default());
    // Queued before the run starts (Init is inside Active).
    let s = run.handle(Event::Subtask {
        tool: "task".into(),
        arguments: serde_json::json!({"agent": "explore", "prompt": "count the files"}),
    });
    assert_eq!(react_rows(&s), [ReactRow::ActiveSubtask]);
    assert!(!s.unhandled);
    assert!(s.effects.is_empty());

    let s = start(&mut run, "hi");
    assert_eq!(
        react_rows(&s),
        [ReactRow::InitStart, ReactRow::PlanningSubtask]
    );
    assert!(request_of(&s).is_none(), "no model call before the subtask");
    // The synthetic assistant message: one call, persisted as step 1.
    let (index, message) = s
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::Persist {
                entry:
                    Entry::Assistant {
                        model_call_index,
                        message,
                        ..
                    },
            } => Some((*model_call_index, message.clone())),
            _ => None,
        })
        .expect("the synthetic message is persisted");
    assert_eq!(index, 1);
    assert_eq!(message.text, "");
    assert_eq!(message.tool_calls.len(), 1);
    let call = &message.tool_calls[0];
    assert_eq!(call.id, "subtask-r1-1");
    assert_eq!(call.name, "task");
    assert_eq!(call.arguments["agent"], "explore");
    // Its call runs under the normal tool pipeline.
    let ran = s
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::RunTool { call } => Some(call.clone()),
            _ => None,
        })
        .expect("the subtask's call runs");
    assert_eq!(&ran, call);
    assert_eq!(s.to.to_string(), "Executing.RunningTools");

    // The child's answer: committed, then the next (model) step sees the call and its result.
    let s = run.handle(Event::ToolFinished {
        tool_call_id: call.id.clone(),
        status: ToolStatus::Completed,
        content: "42 files".into(),
    });
    assert_eq!(
        react_rows(&s),
        [
            ReactRow::ExecutingSuccess,
            ReactRow::ObservingContinue,
            ReactRow::PlanningExecute
        ]
    );
    assert!(s.effects.iter().any(|e| matches!(
        e,
        Effect::Persist {
            entry: Entry::ToolResult { result, .. }
        } if result.tool_call_id == call.id && result.content == "42 files"
    )));
    let r = request_of(&s).expect("the next model step");
    assert_eq!(r.model_call_index, 2);
    assert_eq!(r.messages.len(), 3, "{:?}", r.messages);
    assert!(matches!(&r.messages[0], Message::User { .. }));
    assert!(matches!(&r.messages[1], Message::Assistant(m) if m.tool_calls[0].id == call.id));
    assert!(matches!(&r.messages[2], Message::Tool(t) if t.content == "42 files"));

    let done = answer(&mut run, &r, "there are 42 files", None);
    assert_eq!(done.to.to_string(), "Finishing");
    let _ = run.handle(Event::RunEndCommitted);
    let result = run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Completed);
    assert_eq!(run.steps().len(), 2);
}

#[test]
fn seed_004_issue_13_a_subtask_queued_mid_run_runs_at_the_next_boundary() {
    let mut run = Run::new(RunConfig::default());
    let r = request_of(&start(&mut run, "hi")).expect("step 1");
    let s = run.handle(Event::Subtask {
        tool: "task".into(),
        arguments: serde_json::json!({"prompt": "look"}),
    });
    assert_eq!(react_rows(&s), [ReactRow::ActiveSubtask]);
    // Step 1 is a final answer, but the queued subtask keeps the run going (as queued
    // steering does): it runs, then the model answers again.
    let done = answer(&mut run, &r, "hello", None);
    assert_eq!(
        react_rows(&done),
        [
            ReactRow::ExecutingSuccess,
            ReactRow::ObservingContinue,
            ReactRow::PlanningSubtask
        ]
    );
    let call = done
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::RunTool { call } => Some(call.clone()),
            _ => None,
        })
        .expect("the subtask runs");
    assert_eq!(call.id, "subtask-r1-1");
    let s = run.handle(Event::ToolFinished {
        tool_call_id: call.id,
        status: ToolStatus::Completed,
        content: "seen".into(),
    });
    let r = request_of(&s).expect("step 3 asks the model");
    assert_eq!(r.model_call_index, 3);
    assert!(matches!(r.messages.last(), Some(Message::Tool(t)) if t.content == "seen"));
}
