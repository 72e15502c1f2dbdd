//! Names and keys of the plain data types: event names (the `type` a trace records), agent
//! event type names, outcomes, session-entry keys and run ids (R-IDEM-1, R-IDEM-3), and the
//! repair notes (R-IDEM-7).

use agentloop_core::entry::Repair;
use agentloop_core::event::KillPolicy;
use agentloop_core::{
    AgentEvent, ApprovalDecision, AssistantMessage, AttemptId, Entry, EntryKey, ErrorKind, Event,
    Message, MessageDelta, ModelError, Outcome, ToolResult, ToolStatus,
};
use serde_json::json;

fn attempt() -> AttemptId {
    AttemptId {
        run_id: "r".into(),
        model_call_index: 0,
        attempt: 0,
    }
}

/// Every event, with the name it must report and whether it is for the process machine.
fn all_events() -> Vec<(Event, &'static str, bool)> {
    let err = ModelError::new(ErrorKind::Timeout, "t");
    vec![
        (
            Event::Start {
                run_id: "r".into(),
                history: vec![],
                input: vec![Message::user("hi")],
                session_turns: 0,
            },
            "start",
            false,
        ),
        (
            Event::Resume {
                run_id: "r".into(),
                history: vec![],
                session_turns: 0,
                committed_steps: 0,
                pending: None,
            },
            "resume",
            false,
        ),
        (
            Event::StreamOpened { attempt: attempt() },
            "stream_opened",
            true,
        ),
        (
            Event::Delta {
                attempt: attempt(),
                seq: 0,
                delta: MessageDelta::TextStart,
            },
            "delta",
            true,
        ),
        (Event::done(attempt()), "done", true),
        (
            Event::TransportError {
                attempt: attempt(),
                error: err.clone(),
            },
            "transport_error",
            true,
        ),
        (
            Event::ContextOverflow {
                attempt: attempt(),
                error: err,
            },
            "context_overflow",
            true,
        ),
        (
            Event::StreamStalled {
                attempt: attempt(),
                after_ms: 5,
            },
            "stream_stalled",
            true,
        ),
        (Event::TimerElapsed { timer_id: 1 }, "timer_elapsed", true),
        (
            Event::ToolFinished {
                tool_call_id: "c".into(),
                status: ToolStatus::Completed,
                content: "ok".into(),
            },
            "tool_finished",
            true,
        ),
        (
            Event::Approval {
                tool_call_id: "c".into(),
                decision: ApprovalDecision::Approved,
            },
            "approval",
            true,
        ),
        (
            Event::CompactionDone {
                messages: vec![],
                removed: 1,
            },
            "compaction_done",
            false,
        ),
        (
            Event::CompactionFailed { error: "e".into() },
            "compaction_failed",
            false,
        ),
        (
            Event::Abort {
                reason: "stop".into(),
                kill: KillPolicy::Killable,
            },
            "abort",
            false,
        ),
        (
            Event::StoreWriteFailed { error: "e".into() },
            "store_write_failed",
            false,
        ),
        (Event::Steer { text: "s".into() }, "steer", false),
        (
            Event::Subtask {
                tool: "task".into(),
                arguments: serde_json::json!({}),
            },
            "subtask",
            false,
        ),
        (
            Event::SwitchModel { model: "m".into() },
            "switch_model",
            false,
        ),
        (
            Event::SetTools {
                tools: Default::default(),
                immune: Default::default(),
            },
            "set_tools",
            false,
        ),
    ]
}

#[test]
fn r_trace_event_names_are_their_serialized_type() {
    let events = all_events();
    assert_eq!(events.len(), 19);
    for (e, name, _) in &events {
        assert_eq!(e.name(), *name);
        assert_eq!(serde_json::to_value(e).unwrap()["type"], json!(name));
    }
}

#[test]
fn only_stream_tool_and_approval_events_go_to_the_process_machine() {
    for (e, name, process) in all_events() {
        // The outer machine takes every other input itself (and hands abort and steering on).
        let route = agentloop_core::route::route(&e);
        assert_eq!(route.react.is_none(), process, "{name}");
        assert!(route.react.is_some() || route.process.is_some(), "{name}");
    }
}

#[test]
fn outcomes_and_agent_event_type_names() {
    assert_eq!(Outcome::Completed.as_str(), "completed");
    assert_eq!(Outcome::Failed.as_str(), "failed");
    assert_eq!(Outcome::Aborted.as_str(), "aborted");
    let end = AgentEvent::RunEnd {
        outcome: Outcome::Completed,
        reason: "final_answer".into(),
        usage: None,
        final_text: None,
    };
    assert_eq!(end.type_name(), "run_end");
    assert_eq!(AgentEvent::RunStart {}.type_name(), "run_start");
}

fn all_repairs() -> Vec<(Repair, &'static str, Option<usize>, &'static str)> {
    vec![
        (
            Repair::MissingResultFilled {
                index: 3,
                run_id: "r1".into(),
                model_call_index: 2,
                tool_call_id: "c1".into(),
                name: "ls".into(),
                status: ToolStatus::OutcomeUnknown,
            },
            "missing_result_filled",
            Some(3),
            "entry 3: tool call c1 (ls) of run r1 step 2 had no result; recorded outcome_unknown",
        ),
        (
            Repair::OrphanResultDropped {
                index: 4,
                tool_call_id: "c2".into(),
            },
            "orphan_result_dropped",
            Some(4),
            "entry 4: result for tool call c2, which no earlier turn made, dropped from the context",
        ),
        (
            Repair::DuplicateResultDropped {
                index: 5,
                tool_call_id: "c3".into(),
            },
            "duplicate_result_dropped",
            Some(5),
            "entry 5: second result for tool call c3 dropped from the context",
        ),
        (
            Repair::DuplicateTurnDropped {
                index: 6,
                run_id: "r2".into(),
                model_call_index: 7,
            },
            "duplicate_turn_dropped",
            Some(6),
            "entry 6: duplicate assistant turn (run r2, step 7) dropped from the context",
        ),
        (
            Repair::DuplicateToolCallDropped {
                index: 8,
                tool_call_id: "c4".into(),
            },
            "duplicate_tool_call_dropped",
            Some(8),
            "entry 8: second use of tool call id c4 dropped from its assistant message",
        ),
        (
            Repair::StrayStartIgnored {
                index: 9,
                tool_call_id: "c5".into(),
            },
            "stray_start_ignored",
            Some(9),
            "entry 9: stray start marker for tool call c5 ignored",
        ),
        (
            Repair::InterruptedRunEnded {
                run_id: "r3".into(),
                outcome: agentloop_core::Outcome::Aborted,
            },
            "interrupted_run_ended",
            None,
            "run r3 was interrupted and superseded by a new prompt; recorded its run end (aborted)",
        ),
        (
            Repair::ContextResultFilled {
                index: 2,
                source: agentloop_core::entry::ContextSource::Start,
                tool_call_id: "c7".into(),
                name: "t".into(),
            },
            "context_result_filled",
            Some(2),
            "start context, message 2: tool call c7 (t) had no result; added an outcome_unknown result",
        ),
        (
            Repair::ContextResultDropped {
                index: 3,
                source: agentloop_core::entry::ContextSource::Compaction,
                tool_call_id: "c8".into(),
            },
            "context_result_dropped",
            Some(3),
            "compaction context, message 3: result for tool call c8, which the message before it did not make (or answered already), dropped",
        ),
    ]
}

#[test]
fn r_idem_7_repairs_report_index_kind_and_a_readable_note() {
    for (r, kind, index, note) in all_repairs() {
        assert_eq!(r.kind(), kind);
        assert_eq!(serde_json::to_value(&r).unwrap()["kind"], json!(kind));
        assert_eq!(r.index(), index, "{kind}");
        assert_eq!(r.to_string(), note);
    }
}

#[test]
fn r_idem_7_filled_results_name_every_status() {
    for (status, name) in [
        (ToolStatus::Completed, "completed"),
        (ToolStatus::Error, "error"),
        (ToolStatus::Denied, "denied"),
        (ToolStatus::Skipped, "skipped"),
        (ToolStatus::Aborted, "aborted"),
        (ToolStatus::OutcomeUnknown, "outcome_unknown"),
    ] {
        let r = Repair::MissingResultFilled {
            index: 0,
            run_id: "r".into(),
            model_call_index: 0,
            tool_call_id: "c".into(),
            name: "t".into(),
            status,
        };
        assert!(
            r.to_string().ends_with(&format!("; recorded {name}")),
            "{r}"
        );
        assert_eq!(serde_json::to_value(status).unwrap(), json!(name));
    }
}

fn result(id: &str) -> ToolResult {
    ToolResult {
        tool_call_id: id.into(),
        name: "t".into(),
        content: "ok".into(),
        status: ToolStatus::Completed,
    }
}

#[test]
fn r_idem_1_r_idem_3_entry_keys_and_run_ids() {
    let turn = Entry::Assistant {
        run_id: "run-a".into(),
        model_call_index: 4,
        message: AssistantMessage::default(),
    };
    assert_eq!(
        turn.idempotency_key(),
        Some(EntryKey::Turn {
            run_id: "run-a".into(),
            model_call_index: 4
        })
    );
    assert_eq!(turn.run_id(), Some("run-a"));
    let started = Entry::ToolStarted {
        run_id: "run-b".into(),
        tool_call_id: "c9".into(),
        name: "t".into(),
    };
    assert_eq!(
        started.idempotency_key(),
        Some(EntryKey::ToolStarted {
            tool_call_id: "c9".into()
        })
    );
    assert_eq!(started.run_id(), Some("run-b"));
    let done = Entry::ToolResult {
        run_id: "run-c".into(),
        result: result("c9"),
    };
    assert_eq!(
        done.idempotency_key(),
        Some(EntryKey::ToolResult {
            tool_call_id: "c9".into()
        })
    );
    assert_eq!(done.run_id(), Some("run-c"));
    let meta = Entry::Metadata {
        model: "m".into(),
        config: json!({}),
    };
    assert_eq!(meta.idempotency_key(), None);
    assert_eq!(meta.run_id(), None);
    for (e, run) in [
        (
            Entry::UserInput {
                run_id: "u1".into(),
                message: Message::user("x"),
            },
            "u1",
        ),
        (
            Entry::Compaction {
                run_id: "u2".into(),
                removed: 1,
                messages: vec![],
            },
            "u2",
        ),
        (
            Entry::RunEnd {
                run_id: "u3".into(),
                outcome: agentloop_core::Outcome::Completed,
                reason: "final_answer".into(),
            },
            "u3",
        ),
        (
            Entry::Repair {
                run_id: "u4".into(),
                repairs: vec![],
            },
            "u4",
        ),
    ] {
        assert_eq!(e.idempotency_key(), None, "{run}: may repeat");
        assert_eq!(e.run_id(), Some(run));
    }
}

#[test]
fn tool_status_names_are_their_wire_names() {
    use agentloop_core::ToolStatus;
    for s in [
        ToolStatus::Completed,
        ToolStatus::Error,
        ToolStatus::Denied,
        ToolStatus::Skipped,
        ToolStatus::Aborted,
        ToolStatus::OutcomeUnknown,
    ] {
        assert_eq!(
            serde_json::to_value(s).expect("serializes"),
            serde_json::Value::String(s.as_str().to_string())
        );
    }
}
