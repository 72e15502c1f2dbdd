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

/// A model request of run `r`'s first step offering `tools`.
fn request(tools: &[&str]) -> ModelRequest {
    ModelRequest {
        run_id: "r".into(),
        model_call_index: 1,
        attempt: 1,
        session_turn: 0,
        model: "m".into(),
        system: None,
        messages: vec![Message::user("hi")].into(),
        tools: tools.iter().map(|t| spec(t)).collect::<Vec<_>>().into(),
        params: Default::default(),
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
    let request = request(&["calc"]);
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

/// A step over `tools` under `cfg` whose model committed `calls` (`(id, name, arguments)`);
/// returns the step and what the commit produced.
fn committed(
    cfg: StepConfig,
    tools: &[&str],
    calls: &[(&str, &str, &str)],
) -> (Process, agentloop_core::process::ProcessStep) {
    let request = request(tools);
    let mut p = Process::new(cfg, request, BTreeSet::new());
    let _ = p.begin();
    let _ = p.handle(&Event::StreamOpened {
        attempt: attempt("r", 1),
    });
    let mut deltas: Vec<MessageDelta> = calls
        .iter()
        .map(|(id, name, arguments)| MessageDelta::ToolCall {
            id: (*id).into(),
            name: (*name).into(),
            arguments: (*arguments).into(),
        })
        .collect();
    deltas.extend(turn(&[]));
    for (seq, d) in deltas.into_iter().enumerate() {
        let _ = p.handle(&Event::Delta {
            attempt: attempt("r", 1),
            seq: seq as u64,
            delta: d,
        });
    }
    let s = p.handle(&Event::done(attempt("r", 1)));
    (p, s)
}

/// The calls named by `tool_rule_matched` events.
fn rule_matched(effects: &[Effect]) -> Vec<String> {
    use agentloop_core::agent_event::AgentEvent;
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Emit {
                event: AgentEvent::ToolRuleMatched { tool_call_id, .. },
            } => Some(tool_call_id.clone()),
            _ => None,
        })
        .collect()
}

/// The results persisted, as `(call, status, content)`.
fn results(effects: &[Effect]) -> Vec<(String, ToolStatus, String)> {
    use agentloop_core::entry::Entry;
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Persist {
                entry: Entry::ToolResult { result, .. },
            } => Some((
                result.tool_call_id.clone(),
                result.status,
                result.content.clone(),
            )),
            _ => None,
        })
        .collect()
}

/// Rows that act on the tool rules' decision announce the deciding rule: a queued call, a
/// doom loop put to a human (`commit_loop_ask`), and a resumed call that must be asked about
/// (`restore_approval`).
#[test]
fn r_tool_3_rows_acting_on_a_rule_announce_it() {
    use agentloop_core::process::{DoomLoopPolicy, LoopAction};
    use agentloop_core::tool_rules::ToolRule;
    let cfg = StepConfig {
        doom_loop: Some(DoomLoopPolicy {
            threshold: 2,
            action: LoopAction::Ask,
        }),
        tool_rules: vec![ToolRule::allow("calc")],
        ..StepConfig::default()
    };
    let (_, s) = committed(
        cfg,
        &["calc"],
        &[("c1", "calc", "{}"), ("c2", "calc", "{}")],
    );
    assert_eq!(rule_matched(&s.effects), ["c1", "c2"]);

    let cfg = StepConfig {
        tool_rules: vec![ToolRule::ask("calc")],
        ..StepConfig::default()
    };
    let request = request(&["calc"]);
    let mut p = Process::new(cfg, request, BTreeSet::new());
    let message = agentloop_core::AssistantMessage {
        tool_calls: vec![agentloop_core::ToolCall {
            id: "c1".into(),
            name: "calc".into(),
            arguments: serde_json::json!({}),
            invalid_arguments: None,
        }],
        ..Default::default()
    };
    let s = p.resume(message, vec![]);
    assert_eq!(rule_matched(&s.effects), ["c1"]);
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::RequestApproval { call } if call.id == "c1")));
}

/// The text a call's result carries comes from what ended it: the person's answer, the hooks'
/// reason for a block, a steering skip.
#[test]
fn r_in_3_results_carry_the_answer_the_block_reason_and_the_skip() {
    use agentloop_core::event::GateVerdict;
    let cfg = StepConfig {
        ask_user: true,
        ..StepConfig::default()
    };
    let (mut p, _) = committed(
        cfg,
        &["ask_user"],
        &[("q1", "ask_user", r#"{"question":"Color?"}"#)],
    );
    let s = p.handle(&Event::UserAnswered {
        tool_call_id: "q1".into(),
        answer: Some("blue".into()),
    });
    assert_eq!(
        results(&s.effects),
        [("q1".into(), ToolStatus::Completed, "blue".into())]
    );

    let cfg = StepConfig {
        gate_tools: true,
        ..StepConfig::default()
    };
    let (mut p, _) = committed(cfg, &["calc"], &[("c1", "calc", "{}")]);
    let s = p.handle(&Event::ToolGated {
        tool_call_id: "c1".into(),
        verdict: GateVerdict::Block {
            reason: "not today".into(),
        },
    });
    assert_eq!(
        results(&s.effects),
        [("c1".into(), ToolStatus::Denied, "blocked: not today".into())]
    );

    // Sequential tools: c2 has not started when the steering arrives.
    let cfg = StepConfig {
        parallel_tools: false,
        ..StepConfig::default()
    };
    let (mut p, _) = committed(
        cfg,
        &["calc"],
        &[("c1", "calc", r#"{"a":1}"#), ("c2", "calc", r#"{"a":2}"#)],
    );
    let s = p.handle(&Event::Steer {
        text: "stop that".into(),
    });
    let skipped = "skipped: the user sent a steering message";
    assert_eq!(
        results(&s.effects),
        [
            ("c1".into(), ToolStatus::Skipped, skipped.into()),
            ("c2".into(), ToolStatus::Skipped, skipped.into())
        ]
    );
}

/// An abort closes a call that waits for a person or for an approval and stops that wait's
/// timer (row `abort_unstarted`).
#[test]
fn r_ctl_3_an_abort_stops_the_timer_of_a_waiting_call() {
    use agentloop_core::event::KillPolicy;
    use agentloop_core::tool_rules::ToolRule;
    let abort = Event::Abort {
        reason: "stop".into(),
        kill: KillPolicy::All,
    };
    let cancels = |effects: &[Effect]| {
        effects
            .iter()
            .filter(|e| matches!(e, Effect::CancelTimer { .. }))
            .count()
    };
    let cfg = StepConfig {
        ask_user: true,
        ask_user_timeout_ms: Some(5_000),
        ..StepConfig::default()
    };
    let (mut p, s) = committed(
        cfg,
        &["ask_user"],
        &[("q1", "ask_user", r#"{"question":"Color?"}"#)],
    );
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::StartTimer { .. })));
    let s = p.handle(&abort);
    assert_eq!(cancels(&s.effects), 1, "{:?}", s.effects);
    assert_eq!(results(&s.effects)[0].1, ToolStatus::Aborted);

    let cfg = StepConfig {
        tool_rules: vec![ToolRule::ask("calc")],
        approval_timeout_ms: Some(5_000),
        ..StepConfig::default()
    };
    let (mut p, s) = committed(cfg, &["calc"], &[("c1", "calc", "{}")]);
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::RequestApproval { .. })));
    let s = p.handle(&abort);
    assert_eq!(cancels(&s.effects), 1, "{:?}", s.effects);
    assert_eq!(
        results(&s.effects),
        [("c1".into(), ToolStatus::Aborted, "aborted".into())]
    );
}

/// The `before_tool` hooks' verdicts on sequential calls: a blocked call lets the next one be
/// gated; an asked call that the session's "approve always" covers runs without a question.
#[test]
fn r_ext_1_gate_verdicts_move_the_next_call_and_respect_the_whitelist() {
    use agentloop_core::event::GateVerdict;
    let gates = |effects: &[Effect]| -> Vec<String> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::GateTool { call } => Some(call.id.clone()),
                _ => None,
            })
            .collect()
    };
    let cfg = StepConfig {
        gate_tools: true,
        parallel_tools: false,
        ..StepConfig::default()
    };
    let (mut p, s) = committed(
        cfg,
        &["calc"],
        &[("c1", "calc", r#"{"a":1}"#), ("c2", "calc", r#"{"a":2}"#)],
    );
    assert_eq!(gates(&s.effects), ["c1"]);
    let s = p.handle(&Event::ToolGated {
        tool_call_id: "c1".into(),
        verdict: GateVerdict::Block {
            reason: "no".into(),
        },
    });
    assert_eq!(gates(&s.effects), ["c2"], "{:?}", s.effects);

    // The session approved `calc` "always" before this run: the hooks' question is answered.
    let request = request(&["calc"]);
    let cfg = StepConfig {
        gate_tools: true,
        ..StepConfig::default()
    };
    let mut p = Process::new(cfg, request, BTreeSet::from(["calc".to_string()]));
    let message = agentloop_core::AssistantMessage {
        tool_calls: vec![agentloop_core::ToolCall {
            id: "c1".into(),
            name: "calc".into(),
            arguments: serde_json::json!({}),
            invalid_arguments: None,
        }],
        ..Default::default()
    };
    let s = p.resume(message, vec![]);
    assert_eq!(gates(&s.effects), ["c1"]);
    let s = p.handle(&Event::ToolGated {
        tool_call_id: "c1".into(),
        verdict: GateVerdict::Ask,
    });
    assert!(
        s.effects
            .iter()
            .any(|e| matches!(e, Effect::RunTool { call } if call.id == "c1")),
        "{:?}",
        s.effects
    );
    assert!(!s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::RequestApproval { .. })));
}

/// Sequential tools: a call approved while another runs waits for it (R-IN-4, R-CTL-4).
#[test]
fn r_ctl_4_an_approved_call_waits_for_the_running_one_when_tools_are_sequential() {
    use agentloop_core::tool_rules::ToolRule;
    let runs = |effects: &[Effect]| -> Vec<String> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::RunTool { call } => Some(call.id.clone()),
                _ => None,
            })
            .collect()
    };
    let cfg = StepConfig {
        parallel_tools: false,
        tool_rules: vec![ToolRule::ask("rm")],
        ..StepConfig::default()
    };
    let (mut p, s) = committed(
        cfg,
        &["calc", "rm"],
        &[("c1", "calc", "{}"), ("c2", "rm", "{}")],
    );
    assert_eq!(runs(&s.effects), ["c1"]);
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::RequestApproval { call } if call.id == "c2")));
    let s = p.handle(&Event::Approval {
        tool_call_id: "c2".into(),
        decision: agentloop_core::ApprovalDecision::Approved,
    });
    assert!(runs(&s.effects).is_empty(), "{:?}", s.effects);
    let s = p.handle(&Event::ToolFinished {
        tool_call_id: "c1".into(),
        status: ToolStatus::Completed,
        content: "5".into(),
    });
    assert_eq!(runs(&s.effects), ["c2"]);
}
