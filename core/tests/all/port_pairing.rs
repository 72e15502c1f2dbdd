//! R-IDEM-7, every request well paired whatever built it: the history a run starts from (a
//! context manager's) and a compaction's new context (a compactor's) go through the machine's
//! pairing repair before any model request — an orphan result is dropped, an unanswered call
//! gets an `outcome_unknown` result, and each repair is one `session_repaired` event.

use crate::steps::{attempt_id, request_of};
use agentloop_core::agent_event::AgentEvent;
use agentloop_core::entry::{ContextSource, Repair};
use agentloop_core::error::{ErrorKind, ModelError};
use agentloop_core::message::{AssistantMessage, ToolCall, ToolResult};
use agentloop_core::{Effect, Event, Message, Run, RunConfig, Step, ToolStatus};

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "t".into(),
        arguments: serde_json::json!({}),
        invalid_arguments: None,
    }
}

fn assistant(calls: &[&str]) -> Message {
    Message::Assistant(AssistantMessage {
        text: "calling".into(),
        tool_calls: calls.iter().map(|c| call(c)).collect(),
        ..Default::default()
    })
}

fn result(id: &str) -> Message {
    Message::Tool(ToolResult {
        tool_call_id: id.into(),
        name: "t".into(),
        content: format!("result of {id}"),
        status: ToolStatus::Completed,
    })
}

/// An unpaired history: call `a` has no result, `ghost` answers nothing, and `late` follows a
/// user message instead of its call.
fn unpaired() -> Vec<Message> {
    vec![
        Message::user("go"),
        assistant(&["a", "b"]),
        result("b"),
        result("ghost"),
        Message::user("more"),
        result("late"),
    ]
}

/// Whether every call in `messages` is answered exactly once by the tool block right after
/// its message, and every tool message answers such a call.
fn well_paired(messages: &[Message]) -> bool {
    let mut i = 0;
    while let Some(m) = messages.get(i) {
        i += 1;
        match m {
            Message::Assistant(a) => {
                let mut ids = Vec::new();
                while let Some(Message::Tool(r)) = messages.get(i) {
                    ids.push(r.tool_call_id.clone());
                    i += 1;
                }
                let calls: Vec<String> = a.tool_calls.iter().map(|c| c.id.clone()).collect();
                if ids != calls {
                    return false;
                }
            }
            Message::Tool(_) => return false,
            _ => {}
        }
    }
    true
}

fn repairs(step: &Step) -> Vec<Repair> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Emit {
                event: AgentEvent::SessionRepaired { repair },
            } => Some(repair.clone()),
            _ => None,
        })
        .collect()
}

fn expected(source: ContextSource) -> Vec<Repair> {
    vec![
        Repair::ContextResultDropped {
            index: 3,
            source,
            tool_call_id: "ghost".into(),
        },
        Repair::ContextResultFilled {
            index: 1,
            source,
            tool_call_id: "a".into(),
            name: "t".into(),
        },
        Repair::ContextResultDropped {
            index: 5,
            source,
            tool_call_id: "late".into(),
        },
    ]
}

#[test]
fn r_idem_7_a_start_history_is_repaired_before_the_first_request() {
    let mut run = Run::new(RunConfig::default());
    let s = run.handle(Event::Start {
        run_id: "r1".into(),
        history: unpaired(),
        input: vec![Message::user("now")],
        session_turns: 1,
    });
    assert_eq!(repairs(&s), expected(ContextSource::Start));
    let request = request_of(&s).expect("first request");
    assert!(well_paired(&request.messages), "{:#?}", request.messages);
    let filled = request.messages.iter().find_map(|m| match m {
        Message::Tool(r) if r.tool_call_id == "a" => Some(r.status),
        _ => None,
    });
    assert_eq!(filled, Some(ToolStatus::OutcomeUnknown));
    assert!(!request.messages.iter().any(|m| matches!(m,
        Message::Tool(r) if r.tool_call_id == "ghost" || r.tool_call_id == "late")));
}

#[test]
fn r_idem_7_a_well_paired_start_history_is_left_alone() {
    let history = vec![Message::user("go"), assistant(&["a"]), result("a")];
    let mut run = Run::new(RunConfig::default());
    let s = run.handle(Event::Start {
        run_id: "r1".into(),
        history: history.clone(),
        input: vec![Message::user("now")],
        session_turns: 1,
    });
    assert!(repairs(&s).is_empty());
    let request = request_of(&s).expect("first request");
    assert_eq!(request.messages[..3], history[..]);
}

#[test]
fn r_idem_7_a_compactions_new_context_is_repaired_and_stored_repaired() {
    let mut run = Run::new(RunConfig::default());
    let s = crate::steps::start(&mut run, "go");
    let r1 = request_of(&s).expect("step 1");
    let _ = run.handle(Event::ContextOverflow {
        attempt: attempt_id(&r1),
        error: ModelError::new(ErrorKind::ContextOverflow, "too long"),
    });
    let s = run.handle(Event::CompactionDone {
        messages: unpaired(),
        removed: 0,
    });
    assert_eq!(repairs(&s), expected(ContextSource::Compaction));
    let stored = s.effects.iter().find_map(|e| match e {
        Effect::Persist {
            entry: agentloop_core::entry::Entry::Compaction { messages, .. },
        } => Some(messages.clone()),
        _ => None,
    });
    assert!(well_paired(&stored.expect("compaction stored")));
    let request = request_of(&s).expect("step 1 again");
    assert!(well_paired(&request.messages), "{:#?}", request.messages);
}
