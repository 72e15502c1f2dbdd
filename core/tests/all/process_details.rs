//! The inner machine driven directly through `Process`: retries with backoff timers (R-IN-1,
//! R-IN-2), stale-event filtering, the streamed snapshot (R-STR-2), running calls and their
//! results in call order (R-IN-4), sequential tools, approvals, aborts that drain immune
//! tools (R-CTL-3), and the event-kind mappings of both machines.

use std::collections::BTreeSet;

use agentloop_core::chart::{ProcessEventKind, ProcessRow, ProcessState, ReactEventKind};
use agentloop_core::event::KillPolicy;
use agentloop_core::message::FinishReason;
use agentloop_core::process::{self, Process, StepConfig, StepOutcome};
use agentloop_core::{
    ApprovalDecision, AttemptId, Effect, ErrorKind, Event, MessageDelta, ModelError, ModelRequest,
    ToolSpec, ToolStatus,
};

fn request() -> ModelRequest {
    ModelRequest {
        run_id: "r1".into(),
        model_call_index: 2,
        attempt: 1,
        session_turn: 0,
        model: "m".into(),
        system: None,
        messages: vec![agentloop_core::Message::user("hi")].into(),
        tools: ["calc", "ls", "sleep"]
            .iter()
            .map(|n| ToolSpec {
                name: (*n).into(),
                description: String::new(),
                parameters: serde_json::json!({}),
            })
            .collect(),
        params: Default::default(),
    }
}

fn attempt(n: u32) -> AttemptId {
    AttemptId {
        run_id: "r1".into(),
        model_call_index: 2,
        attempt: n,
    }
}

fn delta(n: u32, seq: u64, d: MessageDelta) -> Event {
    Event::Delta {
        attempt: attempt(n),
        seq,
        delta: d,
    }
}

/// Streams a turn calling `calls` (ids `c1`, `c2`, ...) on attempt `n` and sends `Done`.
fn stream_calls(p: &mut Process, n: u32, names: &[&str]) -> Vec<Effect> {
    let _ = p.handle(&Event::StreamOpened {
        attempt: attempt(n),
    });
    let mut seq = 0;
    for (i, name) in names.iter().enumerate() {
        let _ = p.handle(&delta(
            n,
            seq,
            MessageDelta::ToolCall {
                id: format!("c{}", i + 1),
                name: (*name).into(),
                arguments: format!("{{\"i\":{i}}}"),
            },
        ));
        seq += 1;
    }
    let _ = p.handle(&delta(
        n,
        seq,
        MessageDelta::FinishStep {
            finish_reason: Some(FinishReason::ToolCalls),
            raw_finish_reason: None,
            usage: None,
        },
    ));
    let _ = p.handle(&delta(n, seq + 1, MessageDelta::Finish));
    p.handle(&Event::done(attempt(n))).effects
}

fn finished(p: &mut Process, id: &str) -> process::ProcessStep {
    p.handle(&Event::ToolFinished {
        tool_call_id: id.into(),
        status: ToolStatus::Completed,
        content: format!("out:{id}"),
    })
}

#[test]
fn r_in_1_a_retryable_error_retries_after_the_backoff_timer() {
    let mut p = Process::new(StepConfig::default(), request(), BTreeSet::new());
    assert_eq!(p.state(), ProcessState::Idle);
    let s = p.begin();
    assert_eq!(s.to, ProcessState::Calling);
    assert_eq!(p.retries(), 0);
    let s = p.handle(&Event::TransportError {
        attempt: attempt(1),
        error: ModelError::new(ErrorKind::Overloaded, "busy"),
    });
    assert_eq!(s.to, ProcessState::Retrying);
    assert_eq!(p.retries(), 1);
    assert_eq!(p.request().attempt, 2);
    let timer = s
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::StartTimer { timer_id, delay_ms } => Some((*timer_id, *delay_ms)),
            _ => None,
        })
        .expect("a backoff timer");
    assert_eq!(timer, (2_000_002, 1_000));
    // Another timer is not ours.
    let s = p.handle(&Event::TimerElapsed { timer_id: 1 });
    assert_eq!(s.to, ProcessState::Retrying);
    let s = p.handle(&Event::TimerElapsed { timer_id: timer.0 });
    assert_eq!(s.to, ProcessState::Calling);
    assert!(s.effects.iter().any(
        |e| matches!(e, Effect::CallModel { request } if request.attempt == 2 && request.model_call_index == 2)
    ));
    // A second failure doubles the delay.
    let s = p.handle(&Event::TransportError {
        attempt: attempt(2),
        error: ModelError::new(ErrorKind::Timeout, "slow"),
    });
    assert!(s.effects.iter().any(|e| matches!(
        e,
        Effect::StartTimer {
            delay_ms: 2_000,
            ..
        }
    )));
    assert_eq!(p.retries(), 2);
}

#[test]
fn r_in_2_a_non_retryable_error_fails_the_step() {
    let mut p = Process::new(StepConfig::default(), request(), BTreeSet::new());
    let _ = p.begin();
    let err = ModelError::new(ErrorKind::Authentication, "bad key");
    let s = p.handle(&Event::TransportError {
        attempt: attempt(1),
        error: err.clone(),
    });
    assert_eq!(s.to, ProcessState::Error);
    assert_eq!(p.outcome(), Some(&StepOutcome::Failed(err)));
    assert_eq!(p.retries(), 0);
}

#[test]
fn r_str_2_events_of_another_attempt_are_ignored_and_the_snapshot_grows() {
    let mut p = Process::new(StepConfig::default(), request(), BTreeSet::new());
    let _ = p.begin();
    let _ = p.handle(&Event::StreamOpened {
        attempt: attempt(1),
    });
    assert_eq!(p.state(), ProcessState::Streaming);
    let _ = p.handle(&delta(1, 0, MessageDelta::TextDelta { text: "ab".into() }));
    // Stale: another attempt, or a repeated seq.
    let _ = p.handle(&delta(9, 1, MessageDelta::TextDelta { text: "X".into() }));
    let _ = p.handle(&delta(1, 0, MessageDelta::TextDelta { text: "Y".into() }));
    let _ = p.handle(&delta(1, 1, MessageDelta::TextDelta { text: "cd".into() }));
    assert_eq!(p.partial().text, "abcd");
    assert!(p.committed().is_none());
    let s = p.handle(&Event::done(attempt(9)));
    assert_eq!(
        s.to,
        ProcessState::Streaming,
        "a stale Done changes nothing"
    );
}

#[test]
fn r_in_4_running_calls_and_results_in_call_order() {
    let mut p = Process::new(StepConfig::default(), request(), BTreeSet::new());
    let _ = p.begin();
    let effects = stream_calls(&mut p, 1, &["calc", "ls", "calc"]);
    let runs: Vec<_> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::RunTool { call } => Some(call.id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(runs, ["c1", "c2", "c3"], "parallel: all start at once");
    assert_eq!(p.state(), ProcessState::RunningTools);
    assert_eq!(p.running_calls(), ["c1", "c2", "c3"]);
    assert_eq!(p.committed().map(|m| m.tool_calls.len()), Some(3));
    let _ = finished(&mut p, "c3");
    assert_eq!(p.running_calls(), ["c1", "c2"]);
    let _ = finished(&mut p, "c1");
    assert_eq!(p.running_calls(), ["c2"]);
    let s = finished(&mut p, "c2");
    assert_eq!(s.to, ProcessState::Success);
    assert!(p.running_calls().is_empty());
    let ids: Vec<_> = p.results().into_iter().map(|r| r.tool_call_id).collect();
    assert_eq!(ids, ["c1", "c2", "c3"]);
    assert_eq!(p.outcome(), Some(&StepOutcome::Success));
}

#[test]
fn sequential_tools_start_one_after_another() {
    let cfg = StepConfig {
        parallel_tools: false,
        ..StepConfig::default()
    };
    let mut p = Process::new(cfg, request(), BTreeSet::new());
    let _ = p.begin();
    stream_calls(&mut p, 1, &["calc", "ls"]);
    assert_eq!(p.running_calls(), ["c1"]);
    let s = finished(&mut p, "c1");
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::RunTool { call } if call.id == "c2")));
    assert_eq!(p.running_calls(), ["c2"]);
    let _ = finished(&mut p, "c2");
    assert_eq!(p.state(), ProcessState::Success);
}

#[test]
fn r_tool_3_approved_always_adds_the_tool_to_the_whitelist() {
    let mut cfg = StepConfig::default();
    cfg.approval.insert(
        "calc".into(),
        agentloop_core::process::ApprovalPolicy::Always,
    );
    let mut p = Process::new(cfg.clone(), request(), BTreeSet::new());
    let _ = p.begin();
    let effects = stream_calls(&mut p, 1, &["calc"]);
    assert!(effects
        .iter()
        .any(|e| matches!(e, Effect::RequestApproval { call } if call.id == "c1")));
    assert_eq!(p.state(), ProcessState::AwaitingApproval);
    assert!(p.whitelist().is_empty());
    let s = p.handle(&Event::Approval {
        tool_call_id: "c1".into(),
        decision: ApprovalDecision::ApprovedAlways,
    });
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::RunTool { .. })));
    assert_eq!(p.whitelist(), &BTreeSet::from(["calc".to_string()]));
    // A step created with the whitelist does not ask.
    let mut p = Process::new(cfg, request(), BTreeSet::from(["calc".to_string()]));
    let _ = p.begin();
    let effects = stream_calls(&mut p, 1, &["calc"]);
    assert!(!effects
        .iter()
        .any(|e| matches!(e, Effect::RequestApproval { .. })));
    assert_eq!(p.running_calls(), ["c1"]);
}

/// A step whose message called `sleep` (immune to abort) and `calc`, both running.
fn sleep_and_calc_running() -> Process {
    let cfg = StepConfig {
        immune: BTreeSet::from(["sleep".to_string()]),
        ..StepConfig::default()
    };
    let mut p = Process::new(cfg, request(), BTreeSet::new());
    let _ = p.begin();
    stream_calls(&mut p, 1, &["sleep", "calc"]);
    p
}

#[test]
fn r_ctl_3_an_abort_drains_immune_tools_and_kills_the_rest() {
    let mut p = sleep_and_calc_running();
    assert!(p.abort_would_drain(KillPolicy::Killable));
    assert!(p.abort_would_drain(KillPolicy::None));
    assert!(!p.abort_would_drain(KillPolicy::All));
    let s = p.handle(&Event::Abort {
        reason: "stop".into(),
        kill: KillPolicy::Killable,
    });
    assert_eq!(s.to, ProcessState::Draining);
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::KillTool { tool_call_id } if tool_call_id == "c2")));
    assert!(!s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::KillTool { tool_call_id } if tool_call_id == "c1")));
    assert_eq!(p.running_calls(), ["c1"]);
    let s = finished(&mut p, "c1");
    assert_eq!(s.to, ProcessState::Error);
    assert_eq!(p.outcome(), Some(&StepOutcome::Aborted));
    let results = p.results();
    assert_eq!(results[0].status, ToolStatus::Completed);
    assert_eq!(results[1].status, ToolStatus::Aborted);
}

/// R-CTL-3: a second abort while immune tools drain does not drain again (row
/// `tools_abort_drain`'s guard `tools_to_drain` excludes `Draining`): it takes `live_abort`,
/// which kills whatever still runs, immune or not, and ends the step.
#[test]
fn r_ctl_3_a_second_abort_while_draining_kills_the_immune_tools() {
    let mut p = sleep_and_calc_running();
    let abort = Event::Abort {
        reason: "stop".into(),
        kill: KillPolicy::Killable,
    };
    assert_eq!(p.handle(&abort).to, ProcessState::Draining);
    let s = p.handle(&abort);
    assert!(s.guard_checks.iter().all(|c| c.holds()), "{s:?}");
    assert_eq!(
        crate::steps::process_rows_in(&s.transitions),
        [ProcessRow::LiveAbort]
    );
    assert_eq!(s.to, ProcessState::Error);
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::KillTool { tool_call_id } if tool_call_id == "c1")));
    assert_eq!(p.results()[0].status, ToolStatus::Aborted);
}

#[test]
fn no_running_tools_means_an_abort_does_not_drain() {
    let mut p = Process::new(StepConfig::default(), request(), BTreeSet::new());
    let _ = p.begin();
    assert!(!p.abort_would_drain(KillPolicy::None));
    assert!(!p.stop_requested());
}

#[test]
fn process_debug_names_the_state_and_step() {
    let mut p = Process::new(StepConfig::default(), request(), BTreeSet::new());
    assert_eq!(format!("{p:?}"), "Process { state: Idle, request: 2 }");
    let _ = p.begin();
    assert_eq!(format!("{p:?}"), "Process { state: Calling, request: 2 }");
}

#[test]
fn events_map_to_their_chart_kinds() {
    let a = attempt(1);
    let err = ModelError::new(ErrorKind::Timeout, "t");
    let cases: Vec<(Event, Option<ProcessEventKind>, Option<ReactEventKind>)> = vec![
        (
            Event::StreamOpened { attempt: a.clone() },
            Some(ProcessEventKind::StreamOpened),
            None,
        ),
        (
            delta(1, 0, MessageDelta::Finish),
            Some(ProcessEventKind::Delta),
            None,
        ),
        (Event::done(a.clone()), Some(ProcessEventKind::Done), None),
        (
            Event::TransportError {
                attempt: a.clone(),
                error: err.clone(),
            },
            Some(ProcessEventKind::TransportError),
            None,
        ),
        (
            Event::ContextOverflow {
                attempt: a.clone(),
                error: err,
            },
            Some(ProcessEventKind::ContextOverflow),
            None,
        ),
        (
            Event::StreamStalled {
                attempt: a,
                after_ms: 1,
            },
            Some(ProcessEventKind::StreamStalled),
            None,
        ),
        (
            Event::TimerElapsed { timer_id: 1 },
            Some(ProcessEventKind::TimerElapsed),
            None,
        ),
        (
            Event::ToolFinished {
                tool_call_id: "c".into(),
                status: ToolStatus::Completed,
                content: String::new(),
            },
            Some(ProcessEventKind::ToolFinished),
            None,
        ),
        (
            Event::Approval {
                tool_call_id: "c".into(),
                decision: ApprovalDecision::Approved,
            },
            Some(ProcessEventKind::Approved),
            None,
        ),
        (
            Event::Approval {
                tool_call_id: "c".into(),
                decision: ApprovalDecision::ApprovedAlways,
            },
            Some(ProcessEventKind::ApprovedAlways),
            None,
        ),
        (
            Event::Approval {
                tool_call_id: "c".into(),
                decision: ApprovalDecision::Rejected { reason: "n".into() },
            },
            Some(ProcessEventKind::Rejected),
            None,
        ),
        (
            Event::Approval {
                tool_call_id: "c".into(),
                decision: ApprovalDecision::Modified {
                    arguments: serde_json::json!({}),
                },
            },
            Some(ProcessEventKind::Modified),
            None,
        ),
        (
            Event::Abort {
                reason: "r".into(),
                kill: KillPolicy::Killable,
            },
            Some(ProcessEventKind::Abort),
            Some(ReactEventKind::Abort),
        ),
        (
            Event::Steer { text: "s".into() },
            Some(ProcessEventKind::Steer),
            Some(ReactEventKind::Steer),
        ),
        (
            Event::Start {
                run_id: "r".into(),
                history: vec![],
                input: vec![],
                session_turns: 0,
            },
            None,
            Some(ReactEventKind::Start),
        ),
        (
            Event::Resume {
                run_id: "r".into(),
                history: vec![],
                session_turns: 0,
                committed_steps: 0,
                pending: None,
            },
            None,
            Some(ReactEventKind::Resume),
        ),
        (
            Event::CompactionDone {
                messages: vec![],
                removed: 0,
            },
            None,
            Some(ReactEventKind::CompactionDone),
        ),
        (
            Event::CompactionFailed { error: "e".into() },
            None,
            Some(ReactEventKind::CompactionFailed),
        ),
        (
            Event::StoreWriteFailed { error: "e".into() },
            None,
            Some(ReactEventKind::StoreWriteFailed),
        ),
        (
            Event::SwitchModel { model: "m".into() },
            None,
            Some(ReactEventKind::SwitchModel),
        ),
        (
            Event::SetTools {
                tools: Default::default(),
                immune: Default::default(),
            },
            None,
            Some(ReactEventKind::SetTools),
        ),
    ];
    for (e, p, r) in cases {
        let route = agentloop_core::route::route(&e);
        assert_eq!(route.process, p, "{}", e.name());
        assert_eq!(route.react, r, "{}", e.name());
    }
}

#[test]
fn a_non_process_event_is_reported_unhandled_by_the_step() {
    let mut p = Process::new(StepConfig::default(), request(), BTreeSet::new());
    let _ = p.begin();
    let s = p.handle(&Event::SwitchModel { model: "x".into() });
    assert!(s.unhandled);
    assert_eq!(
        (s.from, s.to),
        (ProcessState::Calling, ProcessState::Calling)
    );
    assert!(s.effects.is_empty() && s.transitions.is_empty());
}

#[test]
fn r_in_1_retries_stop_at_the_budget_and_honour_the_server_hint() {
    let mut cfg = StepConfig::default();
    cfg.retry.max_retries = 1;
    let mut p = Process::new(cfg, request(), BTreeSet::new());
    let _ = p.begin();
    let s = p.handle(&Event::TransportError {
        attempt: attempt(1),
        error: ModelError::new(ErrorKind::RateLimited, "slow down")
            .with_retry_after_ms(Some(7_500)),
    });
    assert!(s.effects.iter().any(|e| matches!(
        e,
        Effect::StartTimer {
            delay_ms: 7_500,
            ..
        }
    )));
    let timer = p.request().model_call_index as u64 * 1_000_000 + 2;
    let _ = p.handle(&Event::TimerElapsed { timer_id: timer });
    assert_eq!(p.state(), ProcessState::Calling);
    let err = ModelError::new(ErrorKind::ServerError, "boom");
    let s = p.handle(&Event::TransportError {
        attempt: attempt(2),
        error: err.clone(),
    });
    assert_eq!(s.to, ProcessState::Error, "retries exhausted");
    assert_eq!(p.outcome(), Some(&StepOutcome::Failed(err)));
    assert_eq!(p.retries(), 1);
}

/// R-IN-1: a server hint shorter than the backoff overrides it (150 ms, not 1 s), and the
/// retry event says the delay came from the hint; without a hint the event has none and the
/// delay is the backoff.
#[test]
fn r_in_1_a_short_retry_after_overrides_the_backoff_and_the_retry_event_records_it() {
    let retry_of = |s: &agentloop_core::process::ProcessStep| {
        s.effects.iter().find_map(|e| match e {
            Effect::Emit {
                event:
                    agentloop_core::AgentEvent::Retry {
                        delay_ms,
                        retry_after_ms,
                        ..
                    },
            } => Some((*delay_ms, *retry_after_ms)),
            _ => None,
        })
    };
    let mut p = Process::new(StepConfig::default(), request(), BTreeSet::new());
    let _ = p.begin();
    let s = p.handle(&Event::TransportError {
        attempt: attempt(1),
        error: ModelError::new(ErrorKind::ServerError, "503").with_retry_after_ms(Some(150)),
    });
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::StartTimer { delay_ms: 150, .. })));
    assert_eq!(retry_of(&s), Some((150, Some(150))));
    let timer = p.request().model_call_index as u64 * 1_000_000 + 2;
    let _ = p.handle(&Event::TimerElapsed { timer_id: timer });
    let s = p.handle(&Event::TransportError {
        attempt: attempt(2),
        error: ModelError::new(ErrorKind::ServerError, "503"),
    });
    assert_eq!(retry_of(&s), Some((2_000, None)), "no hint: the backoff");
}

#[test]
fn r_in_1_a_stalled_stream_is_cancelled_and_retried_until_the_budget_is_spent() {
    let mut cfg = StepConfig::default();
    cfg.retry.max_retries = 1;
    let mut p = Process::new(cfg, request(), BTreeSet::new());
    let _ = p.begin();
    let _ = p.handle(&Event::StreamOpened {
        attempt: attempt(1),
    });
    let s = p.handle(&Event::StreamStalled {
        attempt: attempt(1),
        after_ms: 30_000,
    });
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::CancelModel { attempt: a } if *a == attempt(1))));
    assert_eq!(s.to, ProcessState::Retrying);
    // A stall of an old attempt is ignored.
    let s = p.handle(&Event::StreamStalled {
        attempt: attempt(1),
        after_ms: 1,
    });
    assert_eq!(s.to, ProcessState::Retrying);
    assert!(s.effects.is_empty());
    let _ = p.handle(&Event::TimerElapsed {
        timer_id: 2_000_002,
    });
    let s = p.handle(&Event::StreamStalled {
        attempt: attempt(2),
        after_ms: 30_000,
    });
    assert_eq!(s.to, ProcessState::Error);
    match p.outcome() {
        Some(StepOutcome::Failed(e)) => {
            assert_eq!(e.kind, ErrorKind::Timeout);
            assert_eq!(e.message, "stream stalled for 30000 ms; retries exhausted");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn r_in_2_context_overflow_ends_the_step_for_compaction() {
    let mut p = Process::new(StepConfig::default(), request(), BTreeSet::new());
    let _ = p.begin();
    let err = ModelError::new(ErrorKind::ContextOverflow, "too long");
    let s = p.handle(&Event::ContextOverflow {
        attempt: attempt(1),
        error: err.clone(),
    });
    assert_eq!(s.to, ProcessState::Error);
    assert_eq!(p.outcome(), Some(&StepOutcome::ContextOverflow(err)));
    assert_eq!(p.retries(), 0);
}

#[test]
fn r_ctl_3_abort_while_waiting_to_retry_cancels_the_timer() {
    let mut p = Process::new(StepConfig::default(), request(), BTreeSet::new());
    let _ = p.begin();
    let _ = p.handle(&Event::TransportError {
        attempt: attempt(1),
        error: ModelError::new(ErrorKind::Overloaded, "busy"),
    });
    let s = p.handle(&Event::Abort {
        reason: "stop".into(),
        kill: KillPolicy::Killable,
    });
    assert!(s.effects.iter().any(|e| matches!(
        e,
        Effect::CancelTimer {
            timer_id: 2_000_002
        }
    )));
    assert!(!s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::CancelModel { .. })));
    assert_eq!(p.outcome(), Some(&StepOutcome::Aborted));
    // While requesting, the model call is cancelled instead.
    let mut p = Process::new(StepConfig::default(), request(), BTreeSet::new());
    let _ = p.begin();
    let s = p.handle(&Event::Abort {
        reason: "stop".into(),
        kill: KillPolicy::Killable,
    });
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::CancelModel { attempt: a } if *a == attempt(1))));
    assert!(!s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::CancelTimer { .. })));
}

#[test]
fn r_tool_3_modified_arguments_run_and_rejections_are_denied() {
    let mut cfg = StepConfig::default();
    cfg.approval.insert(
        "calc".into(),
        agentloop_core::process::ApprovalPolicy::Always,
    );
    let mut p = Process::new(cfg, request(), BTreeSet::new());
    let _ = p.begin();
    stream_calls(&mut p, 1, &["calc", "calc"]);
    let s = p.handle(&Event::Approval {
        tool_call_id: "c1".into(),
        decision: ApprovalDecision::Modified {
            arguments: serde_json::json!({"i": 99}),
        },
    });
    assert!(s.effects.iter().any(|e| matches!(
        e,
        Effect::RunTool { call } if call.id == "c1" && call.arguments == serde_json::json!({"i": 99})
    )));
    // The second call is asked about next.
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::RequestApproval { call } if call.id == "c2")));
    let s = p.handle(&Event::Approval {
        tool_call_id: "c2".into(),
        decision: ApprovalDecision::Rejected {
            reason: "too risky".into(),
        },
    });
    assert!(!s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::RunTool { call } if call.id == "c2")));
    let _ = finished(&mut p, "c1");
    assert_eq!(p.state(), ProcessState::Success);
    let r = p.results();
    assert_eq!(r[1].status, ToolStatus::Denied);
    assert_eq!(r[1].content, "denied by user: too risky");
    assert!(
        p.whitelist().is_empty(),
        "a modified approval whitelists nothing"
    );
}

#[test]
fn r_str_6_invalid_arguments_and_unknown_tools_get_error_results_without_running() {
    let mut p = Process::new(StepConfig::default(), request(), BTreeSet::new());
    let _ = p.begin();
    let _ = p.handle(&Event::StreamOpened {
        attempt: attempt(1),
    });
    for (seq, d) in [
        MessageDelta::ToolCall {
            id: "c1".into(),
            name: "calc".into(),
            arguments: "{oops".into(),
        },
        MessageDelta::ToolCall {
            id: "c2".into(),
            name: "nope".into(),
            arguments: "{}".into(),
        },
        MessageDelta::ToolCall {
            id: "c3".into(),
            name: "ls".into(),
            arguments: "{}".into(),
        },
        MessageDelta::Finish,
    ]
    .into_iter()
    .enumerate()
    {
        let _ = p.handle(&delta(1, seq as u64, d));
    }
    let s = p.handle(&Event::done(attempt(1)));
    let runs: Vec<_> = s
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::RunTool { call } => Some(call.id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(runs, ["c3"]);
    assert_eq!(p.running_calls(), ["c3"]);
    let _ = finished(&mut p, "c3");
    let r = p.results();
    assert_eq!(r.len(), 3);
    assert_eq!(r[0].status, ToolStatus::Error);
    assert!(
        r[0].content.starts_with("invalid JSON arguments"),
        "{}",
        r[0].content
    );
    assert_eq!(r[1].status, ToolStatus::Error);
    assert_eq!(r[1].content, "unknown tool: nope");
    assert_eq!(r[2].status, ToolStatus::Completed);
}

/// One line per effect: persisted entries by kind, emitted events by type and key fields.
fn describe(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .map(|e| match e {
            Effect::Emit { event } => {
                let v = serde_json::to_value(event).unwrap();
                let mut s = format!("emit {}", v["type"].as_str().unwrap());
                if let Some(o) = v.as_object() {
                    for (k, val) in o {
                        if k != "type" {
                            s.push_str(&format!(" {k}={val}"));
                        }
                    }
                }
                s
            }
            Effect::Persist { entry } => {
                let v = serde_json::to_value(entry).unwrap();
                format!("persist {}", v["entry"].as_str().unwrap())
            }
            Effect::CallModel { request } => {
                format!(
                    "call_model {}#{}",
                    request.model_call_index, request.attempt
                )
            }
            Effect::RunTool { call } => format!("run_tool {}", call.id),
            other => format!("{other:?}"),
        })
        .collect()
}

/// A step begun with `config` whose first attempt's stream opened, and the effects so far.
fn streaming(config: StepConfig) -> (Process, Vec<Effect>) {
    let mut p = Process::new(config, request(), BTreeSet::new());
    let mut effects = p.begin().effects;
    effects.extend(
        p.handle(&Event::StreamOpened {
            attempt: attempt(1),
        })
        .effects,
    );
    (p, effects)
}

#[test]
fn r_str_2_a_tool_step_emits_its_observable_events_in_order() {
    let (mut p, mut effects) = streaming(StepConfig::default());
    for (seq, d) in [
        MessageDelta::ReasoningStart,
        MessageDelta::ReasoningDelta { text: "hm".into() },
        MessageDelta::ReasoningEnd,
        MessageDelta::TextDelta { text: "ok".into() },
        MessageDelta::ToolInputStart {
            id: "c1".into(),
            name: "calc".into(),
        },
        MessageDelta::ToolInputDelta {
            id: "c1".into(),
            delta: "{}".into(),
        },
        MessageDelta::ToolInputEnd { id: "c1".into() },
        MessageDelta::ToolCall {
            id: "c1".into(),
            name: "calc".into(),
            arguments: "{}".into(),
        },
        MessageDelta::FinishStep {
            finish_reason: Some(FinishReason::ToolCalls),
            raw_finish_reason: None,
            usage: None,
        },
        MessageDelta::Finish,
    ]
    .into_iter()
    .enumerate()
    {
        effects.extend(p.handle(&delta(1, seq as u64, d)).effects);
    }
    effects.extend(p.handle(&Event::done(attempt(1))).effects);
    effects.extend(finished(&mut p, "c1").effects);
    let got = describe(&effects);
    let expected = [
        r#"emit state_changed event="Begin" from="Idle" machine="process" to="Calling""#,
        r#"emit request_start attempt=1 model="m" model_call_index=2"#,
        "call_model 2#1",
        r#"emit state_changed event="StreamOpened" from="Calling" machine="process" to="Streaming""#,
        "emit message_start attempt=1 model_call_index=2",
        "emit reasoning_start attempt=1 model_call_index=2",
        r#"emit reasoning_delta attempt=1 model_call_index=2 text="hm""#,
        "emit reasoning_end attempt=1 model_call_index=2",
        r#"emit text_delta attempt=1 model_call_index=2 text="ok""#,
        r#"emit tool_input_start name="calc" tool_call_id="c1""#,
        r#"emit tool_input_delta delta="{}" tool_call_id="c1""#,
        r#"emit tool_input_end tool_call_id="c1""#,
        r#"emit state_changed event="Done" from="Streaming" machine="process" to="RunningTools""#,
        "persist assistant",
        "emit response_complete message={\"finish_reason\":\"tool_calls\",\"reasoning\":\"hm\",\"text\":\"ok\",\"tool_calls\":[{\"arguments\":{},\"id\":\"c1\",\"name\":\"calc\"}]} model_call_index=2 tool_calls=1",
        "emit tool_calls count=1",
        "persist tool_started",
        r#"emit tool_start arguments={} name="calc" tool_call_id="c1""#,
        "run_tool c1",
        "persist tool_result",
        r#"emit tool_end name="calc" result="out:c1" result_bytes=6 result_truncated=false status="completed" tool_call_id="c1""#,
        // The last result settles the step.
        r#"emit state_changed event="Settle" from="RunningTools" machine="process" to="Success""#,
    ];
    assert_eq!(got, expected, "{got:#?}");
}

/// A configuration without `detailed_events` (a trace recorded before the block boundaries
/// were events) emits none of them, so such a trace still replays as recorded.
#[test]
fn block_boundaries_are_events_only_with_detailed_events() {
    let config = StepConfig {
        detailed_events: false,
        ..StepConfig::default()
    };
    let (mut p, mut effects) = streaming(config);
    for (seq, d) in [
        MessageDelta::ReasoningStart,
        MessageDelta::ReasoningEnd,
        MessageDelta::ToolInputStart {
            id: "c1".into(),
            name: "calc".into(),
        },
        MessageDelta::ToolInputEnd { id: "c1".into() },
    ]
    .into_iter()
    .enumerate()
    {
        effects.extend(p.handle(&delta(1, seq as u64, d)).effects);
    }
    let got = describe(&effects);
    assert!(got.iter().any(|e| e.starts_with("emit tool_input_start")));
    assert!(
        !got.iter()
            .any(|e| e.starts_with("emit reasoning_") || e.starts_with("emit tool_input_end")),
        "{got:#?}"
    );
    // A configuration serialized without the field reads as off.
    let mut json = serde_json::to_value(StepConfig::default()).expect("json");
    assert_eq!(json["detailed_events"], true);
    json.as_object_mut()
        .expect("object")
        .remove("detailed_events");
    let old: StepConfig = serde_json::from_value(json).expect("config");
    assert!(!old.detailed_events);
}

/// R-TRACE-1: what a `before_model_call` hook sent is kept for the current attempt only: a
/// stale attempt's rewrite is ignored, and a retry starts without one.
#[test]
fn r_trace_1_the_rewritten_request_belongs_to_its_attempt() {
    let mut p = Process::new(StepConfig::default(), request(), BTreeSet::new());
    let _ = p.begin();
    assert_eq!(p.sent_request(), None, "nothing rewritten yet");
    let mut rewritten = request();
    rewritten.system = Some("rewritten by a hook".into());
    let s = p.handle(&Event::RequestRewritten {
        attempt: attempt(2),
        request: Box::new(rewritten.clone()),
    });
    assert!(
        format!("{:?}", s.transitions).contains("LiveStaleRequestRewritten"),
        "a later attempt's rewrite is stale: {:?}",
        s.transitions
    );
    assert_eq!(p.sent_request(), None);
    let _ = p.handle(&Event::RequestRewritten {
        attempt: attempt(1),
        request: Box::new(rewritten.clone()),
    });
    assert_eq!(p.sent_request(), Some(&rewritten));
    assert_eq!(p.request().system, None, "the planned request is unchanged");
    let _ = p.handle(&Event::TransportError {
        attempt: attempt(1),
        error: ModelError::new(ErrorKind::Overloaded, "busy"),
    });
    let timer = p.handle(&Event::TimerElapsed { timer_id: 0 }).effects.len();
    assert_eq!(timer, 0, "not the backoff timer");
    assert_eq!(p.state(), ProcessState::Retrying);
    let s = p.handle(&Event::TimerElapsed {
        timer_id: 2_000_002,
    });
    assert_eq!(
        s.to,
        ProcessState::Calling,
        "the backoff timer sends attempt 2"
    );
    assert_eq!(p.sent_request(), None, "attempt 2 has not been rewritten");
}
