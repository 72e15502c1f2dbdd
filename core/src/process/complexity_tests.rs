//! Complexity guards for a step with many tool calls, without timing: the
//! slots count every slot their lookups and iterations look at (`Slots::visits`), and these
//! tests check that a step's n calls cost O(n) visits in all — admission, every completion,
//! every settle, every approval — where a scan per event would cost O(n²).

use std::collections::BTreeSet;

use crate::chart::ProcessState;
use crate::effect::Effect;
use crate::event::{ApprovalDecision, AttemptId, Event};
use crate::message::{MessageDelta, ToolStatus};
use crate::model::ModelRequest;
use crate::process::{ApprovalPolicy, Process, StepConfig};
use crate::tool_spec::ToolSpec;

fn request() -> ModelRequest {
    ModelRequest {
        run_id: "r".into(),
        model_call_index: 1,
        attempt: 1,
        session_turn: 0,
        model: "m".into(),
        system: None,
        messages: Vec::new().into(),
        tools: vec![ToolSpec {
            name: "calc".into(),
            description: String::new(),
            parameters: serde_json::json!({}),
        }]
        .into(),
        params: Default::default(),
    }
}

fn attempt() -> AttemptId {
    AttemptId {
        run_id: "r".into(),
        model_call_index: 1,
        attempt: 1,
    }
}

fn id(i: usize) -> String {
    format!("call_{i}")
}

/// Streams `n` distinct calls and commits them; returns the step in ToolExecuting.
fn committed(cfg: StepConfig, n: usize) -> Process {
    let mut p = Process::new(cfg, request(), BTreeSet::new());
    let _ = p.begin();
    let _ = p.handle(&Event::StreamOpened { attempt: attempt() });
    for i in 0..n {
        let _ = p.handle(&Event::Delta {
            attempt: attempt(),
            seq: i as u64,
            delta: MessageDelta::ToolCall {
                id: id(i),
                name: "calc".into(),
                arguments: format!(r#"{{"expression":"{i} + 1"}}"#),
            },
        });
    }
    let _ = p.handle(&Event::done(attempt()));
    p
}

fn finish(p: &mut Process, i: usize) {
    let s = p.handle(&Event::ToolFinished {
        tool_call_id: id(i),
        status: ToolStatus::Completed,
        content: i.to_string(),
    });
    assert!(!s.unhandled);
}

fn visits(p: &Process) -> u64 {
    p.data.tools.slots.visits.get()
}

/// Checks that the results are complete and in call order (R-IN-4), and that the visits
/// stayed within `per_call` per call.
fn check(p: &Process, n: usize, per_call: u64) {
    assert_eq!(p.state(), ProcessState::Success);
    let order: Vec<String> = p.results().into_iter().map(|r| r.tool_call_id).collect();
    assert_eq!(order, (0..n).map(id).collect::<Vec<_>>());
    let v = visits(p);
    assert!(
        v <= per_call * n as u64,
        "{n} calls looked at {v} slots (more than {per_call} per call): per-event scans are back"
    );
}

#[test]
fn parallel_calls_finishing_in_reverse_order_cost_linear_visits() {
    for n in [64, 1024, 4096] {
        let mut p = committed(StepConfig::default(), n);
        assert_eq!(p.state(), ProcessState::RunningTools);
        for i in (0..n).rev() {
            finish(&mut p, i);
        }
        check(&p, n, 8);
    }
}

#[test]
fn sequential_calls_cost_linear_visits() {
    let cfg = StepConfig {
        parallel_tools: false,
        ..StepConfig::default()
    };
    for n in [64, 1024, 4096] {
        let mut p = committed(cfg.clone(), n);
        for i in 0..n {
            finish(&mut p, i);
        }
        check(&p, n, 8);
    }
}

#[test]
fn calls_approved_one_by_one_cost_linear_visits() {
    let mut cfg = StepConfig::default();
    cfg.approval.insert("calc".into(), ApprovalPolicy::Always);
    for n in [64, 1024, 4096] {
        let mut p = committed(cfg.clone(), n);
        for i in 0..n {
            assert_eq!(p.state(), ProcessState::AwaitingApproval);
            let s = p.handle(&Event::Approval {
                tool_call_id: id(i),
                decision: ApprovalDecision::Approved,
            });
            assert!(s
                .effects
                .iter()
                .any(|e| matches!(e, Effect::RunTool { call } if call.id == id(i))));
        }
        for i in (0..n).rev() {
            finish(&mut p, i);
        }
        check(&p, n, 12);
    }
}

#[test]
fn the_partial_message_is_updated_incrementally_and_equals_a_fresh_one() {
    let mut p = Process::new(StepConfig::default(), request(), BTreeSet::new());
    let _ = p.begin();
    let _ = p.handle(&Event::StreamOpened { attempt: attempt() });
    let mut snapshot = p.partial();
    let mut mark = p.partial_mark();
    let deltas = (0..50).flat_map(|i| {
        [
            MessageDelta::TextDelta {
                text: format!("t{i} é "),
            },
            MessageDelta::ToolInputStart {
                id: id(i),
                name: "calc".into(),
            },
            MessageDelta::ToolCall {
                id: id(i),
                name: "calc".into(),
                arguments: format!(r#"{{"expression":"{i}"}}"#),
            },
        ]
    });
    for (seq, delta) in deltas.enumerate() {
        let changes = !matches!(delta, MessageDelta::ToolInputStart { .. });
        let _ = p.handle(&Event::Delta {
            attempt: attempt(),
            seq: seq as u64,
            delta,
        });
        let now = p.partial_mark();
        assert_eq!(
            now != mark,
            changes,
            "the mark moves exactly when the message does"
        );
        assert!(now.same_source(&mark));
        p.update_partial(&mut snapshot);
        assert_eq!(snapshot, p.partial());
        mark = now;
    }
}
