//! R-IDEM-6, at the core level: resuming a step interrupted while its calls ran never runs
//! again a call that had started and is not retry-safe (it gets an `outcome_unknown` result),
//! re-runs a started retry-safe one, and runs the calls that never started. The log is
//! repaired with `repair_with`, the step handed to `Run` as `Resume`, and the `RunTool`
//! effects are the calls that run. (A hand-seeded bug re-running the started, non-retry-safe
//! call was caught only by the root crate's tests before these.)

use agentloop_core::entry::{Entry, Repair};
use agentloop_core::event::PendingStep;
use agentloop_core::message::{AssistantMessage, Message, ToolCall, ToolResult, ToolStatus};
use agentloop_core::session_log::{check, pending, repair_with};
use agentloop_core::{Effect, Event, Run, RunConfig, ToolSpec};

/// `append_once` has a side effect (not retry-safe); `read` may run twice.
fn retry_safe(name: &str) -> bool {
    name == "read"
}

fn call(id: &str, name: &str) -> ToolCall {
    ToolCall::from_raw(id, name, "{}")
}

/// The step the crash interrupted: c1 (`append_once`) started, c2 (`read`) started, c3
/// (`append_once`) never started, c4 (`append_once`) finished; none of the others has a result.
fn interrupted() -> (AssistantMessage, Vec<Entry>) {
    let message = AssistantMessage {
        tool_calls: vec![
            call("c1", "append_once"),
            call("c2", "read"),
            call("c3", "append_once"),
            call("c4", "append_once"),
        ],
        ..Default::default()
    };
    let started = |id: &str, name: &str| Entry::ToolStarted {
        run_id: "r1".into(),
        tool_call_id: id.into(),
        name: name.into(),
    };
    let entries = vec![
        Entry::UserInput {
            run_id: "r1".into(),
            message: Message::user("go"),
        },
        Entry::Assistant {
            run_id: "r1".into(),
            model_call_index: 1,
            message: message.clone(),
        },
        started("c1", "append_once"),
        started("c2", "read"),
        started("c4", "append_once"),
        Entry::ToolResult {
            run_id: "r1".into(),
            result: ToolResult {
                tool_call_id: "c4".into(),
                name: "append_once".into(),
                content: "appended".into(),
                status: ToolStatus::Completed,
            },
        },
    ];
    (message, entries)
}

#[test]
fn r_idem_6_repair_fills_only_the_started_call_that_is_not_retry_safe() {
    let (_, entries) = interrupted();
    let r = repair_with(&entries, retry_safe);
    let filled: Vec<(&str, ToolStatus)> = r
        .repairs
        .iter()
        .filter_map(|x| match x {
            Repair::MissingResultFilled {
                tool_call_id,
                status,
                ..
            } => Some((tool_call_id.as_str(), *status)),
            _ => None,
        })
        .collect();
    assert_eq!(filled, [("c1", ToolStatus::OutcomeUnknown)]);
    let mut after = entries.clone();
    after.extend(r.into_entries("r1"));
    // c2 and c3 stay pending for the resume to run; c1 is answered.
    let left: Vec<(String, bool)> = pending(&after)
        .into_iter()
        .map(|c| (c.tool_call_id, c.started))
        .collect();
    assert_eq!(left, [("c2".into(), true), ("c3".into(), false)]);
    assert!(check(&after)
        .iter()
        .all(|v| v.to_string().contains("c2") || v.to_string().contains("c3")));
}

#[test]
fn r_idem_6_resume_never_reruns_a_started_call_that_is_not_retry_safe() {
    let (message, entries) = interrupted();
    let mut after = entries.clone();
    after.extend(repair_with(&entries, retry_safe).into_entries("r1"));
    // The pending step's results, as the log now holds them (the repaired one included).
    let results: Vec<ToolResult> = after
        .iter()
        .filter_map(|e| match e {
            Entry::ToolResult { result, .. } => Some(result.clone()),
            _ => None,
        })
        .collect();
    let cfg = RunConfig {
        tools: ["append_once", "read"]
            .iter()
            .map(|n| ToolSpec {
                name: (*n).into(),
                description: String::new(),
                parameters: serde_json::json!({}),
            })
            .collect(),
        ..RunConfig::default()
    };
    let mut run = Run::new(cfg);
    let s = run.handle(Event::Resume {
        run_id: "r1".into(),
        history: vec![Message::user("go")],
        session_turns: 1,
        committed_steps: 1,
        pending: Some(PendingStep {
            model_call_index: 1,
            message,
            results,
        }),
    });
    assert!(!s.unhandled, "{s:?}");
    let runs: Vec<&str> = s
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::RunTool { call } => Some(call.id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(runs, ["c2", "c3"], "c1 started and may not run twice");
}
