//! The tool-call lifecycle's dispatch is generated from `statecharts/tool_call.toml`: each
//! call is fed chart events and the chart picks its row; each row's action produces its own
//! effects, checked against the row's typed `effects` (debug builds), and those checks reach
//! the step and the run whichever machine moved.

use std::collections::BTreeSet;

use agentloop_core::chart::{MachineKind, ToolCallRow};
use agentloop_core::message::FinishReason;
use agentloop_core::process::{Process, StepConfig};
use agentloop_core::{
    AttemptId, Effect, Event, Message, MessageDelta, ModelRequest, Run, RunConfig, ToolSpec,
    ToolStatus,
};

fn spec(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: String::new(),
        parameters: serde_json::json!({"type": "object"}),
    }
}

fn attempt(run_id: &str, index: u32) -> AttemptId {
    AttemptId {
        run_id: run_id.into(),
        model_call_index: index,
        attempt: 1,
    }
}

/// The deltas of a turn that calls `calls` (`(id, name)`), then ends.
fn turn(calls: &[(&str, &str)]) -> Vec<MessageDelta> {
    let mut out: Vec<MessageDelta> = calls
        .iter()
        .map(|(id, name)| MessageDelta::ToolCall {
            id: (*id).into(),
            name: (*name).into(),
            arguments: "{}".into(),
        })
        .collect();
    out.push(MessageDelta::FinishStep {
        finish_reason: Some(FinishReason::ToolCalls),
        raw_finish_reason: None,
        usage: None,
    });
    out.push(MessageDelta::Finish);
    out
}

/// A short name for each effect: `unknown:c1`, `result:c1`, `end:c1`, `run:c3`, ….
fn describe(effects: &[Effect]) -> Vec<String> {
    use agentloop_core::agent_event::AgentEvent;
    use agentloop_core::entry::Entry;
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Emit {
                event: AgentEvent::ToolCallUnknown { tool_call_id, .. },
            } => Some(format!("unknown:{tool_call_id}")),
            Effect::Emit {
                event: AgentEvent::ToolEnd { tool_call_id, .. },
            } => Some(format!("end:{tool_call_id}")),
            Effect::Persist {
                entry: Entry::ToolResult { result, .. },
            } => Some(format!("result:{}", result.tool_call_id)),
            Effect::RunTool { call } => Some(format!("run:{}", call.id)),
            _ => None,
        })
        .collect()
}

/// Each call's row runs its own action when the chart picks it, in call order: an unknown
/// tool's `tool_call_unknown`, its error result and its `tool_end` come together, before the
/// next call's; and every tool-call row's effect check holds and names its row.
#[test]
fn r_arch_3_each_calls_row_produces_its_effects_in_call_order() {
    let request = ModelRequest {
        run_id: "r".into(),
        model_call_index: 1,
        attempt: 1,
        session_turn: 0,
        model: "m".into(),
        system: None,
        messages: vec![Message::user("hi")].into(),
        tools: vec![spec("calc")].into(),
        params: Default::default(),
    };
    let mut p = Process::new(StepConfig::default(), request, BTreeSet::new());
    let _ = p.begin();
    let _ = p.handle(&Event::StreamOpened {
        attempt: attempt("r", 1),
    });
    for (seq, d) in turn(&[("c1", "nope"), ("c2", "nada"), ("c3", "calc")])
        .into_iter()
        .enumerate()
    {
        let _ = p.handle(&Event::Delta {
            attempt: attempt("r", 1),
            seq: seq as u64,
            delta: d,
        });
    }
    let s = p.handle(&Event::done(attempt("r", 1)));
    assert_eq!(
        describe(&s.effects),
        [
            "unknown:c1",
            "result:c1",
            "end:c1",
            "unknown:c2",
            "result:c2",
            "end:c2",
            "run:c3"
        ]
    );
    let rows: Vec<&str> = s
        .effect_checks
        .iter()
        .filter(|c| c.machine == MachineKind::ToolCall)
        .map(|c| c.row)
        .collect();
    if cfg!(debug_assertions) {
        assert_eq!(
            rows,
            [
                "commit_unknown",
                "commit_unknown",
                "commit_queued",
                "start_run"
            ]
        );
        for c in &s.effect_checks {
            assert!(c.holds(), "{c}");
        }
    }
    // The rows the transitions record are the rows the checks name.
    let moved: Vec<&str> = s
        .transitions
        .iter()
        .filter_map(|t| match t {
            agentloop_core::step::Transition::ToolCall { row, .. } => Some(row.spec().id),
            _ => None,
        })
        .collect();
    assert_eq!(
        moved,
        [
            "commit_unknown",
            "commit_unknown",
            "commit_queued",
            "start_run"
        ]
    );
    assert!(ToolCallRow::ALL.iter().all(|r| r.effects().is_some()));
}

/// A tool's result is an event only the inner machine takes (the outer machine stays in
/// Executing): the effect checks of the process row and of the call's `finished_ok` row still
/// reach `Run::effect_checks`.
#[test]
fn r_arch_3_effect_checks_reach_the_run_when_only_the_inner_machine_moves() {
    let cfg = RunConfig {
        tools: vec![spec("calc")].into(),
        ..RunConfig::default()
    };
    let mut run = Run::new(cfg);
    let _ = run.handle(Event::Start {
        run_id: "r".into(),
        history: vec![],
        input: vec![Message::user("2+3?")],
        session_turns: 0,
    });
    let opened = run.handle(Event::StreamOpened {
        attempt: attempt("r", 1),
    });
    assert!(!opened.effects.is_empty());
    if cfg!(debug_assertions) {
        assert!(
            run.effect_checks()
                .iter()
                .any(|c| c.machine == MachineKind::Process),
            "Calling -> Streaming is a process row: {:?}",
            run.effect_checks()
        );
    }
    for (seq, d) in turn(&[("c1", "calc")]).into_iter().enumerate() {
        let _ = run.handle(Event::Delta {
            attempt: attempt("r", 1),
            seq: seq as u64,
            delta: d,
        });
    }
    let _ = run.handle(Event::done(attempt("r", 1)));
    let _ = run.handle(Event::ToolFinished {
        tool_call_id: "c1".into(),
        status: ToolStatus::Completed,
        content: "5".into(),
    });
    if cfg!(debug_assertions) {
        let rows: Vec<(MachineKind, &str)> = run
            .effect_checks()
            .iter()
            .map(|c| (c.machine, c.row))
            .collect();
        assert!(
            rows.contains(&(MachineKind::ToolCall, "finished_ok")),
            "{rows:?}"
        );
        assert!(
            rows.iter().any(|(m, _)| *m == MachineKind::Process),
            "{rows:?}"
        );
        for c in run.effect_checks() {
            assert!(c.holds(), "{c}");
        }
    }
}
