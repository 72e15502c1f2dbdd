//! R-CTL-4: the approval timeout is a timer of the inner machine. The machine starts it with
//! the approval request; the timer elapsing while the call is asked about takes the timed-out
//! rows (`awaiting_timed_out_stop`, or `awaiting_timed_out` with auto_resume), denies the call
//! with status timeout and withdraws the request; an answer first cancels the timer.

use agentloop_core::agent_event::AgentEvent;
use agentloop_core::chart::ProcessRow;
use agentloop_core::message::FinishReason;
use agentloop_core::process::ApprovalPolicy;
use agentloop_core::{
    ApprovalDecision, ApprovalStatus, AttemptId, Effect, Event, Message, MessageDelta, Run,
    RunConfig, Step, ToolSpec,
};

use crate::steps::process_rows;

/// A run whose model calls `calc` (which needs approval) under an approval timeout of 250 ms,
/// fed until it asks; returns the run and the step that asked.
fn asking(auto_resume: bool) -> (Run, Step) {
    asking_with(auto_resume, Some(250))
}

/// [`asking`] under approval timeout `timeout_ms`.
fn asking_with(auto_resume: bool, timeout_ms: Option<u64>) -> (Run, Step) {
    let mut cfg = RunConfig {
        tools: vec![ToolSpec {
            name: "calc".into(),
            description: "calculates".into(),
            parameters: serde_json::json!({"type": "object"}),
        }]
        .into(),
        ..RunConfig::default()
    };
    cfg.step
        .approval
        .insert("calc".into(), ApprovalPolicy::Always);
    cfg.step.approval_timeout_ms = timeout_ms;
    cfg.step.auto_resume = auto_resume;
    let mut run = Run::new(cfg);
    let _ = run.handle(Event::Start {
        run_id: "r".into(),
        history: vec![],
        input: vec![Message::user("2+3?")],
        session_turns: 0,
    });
    let attempt = AttemptId {
        run_id: "r".into(),
        model_call_index: 1,
        attempt: 1,
    };
    let _ = run.handle(Event::StreamOpened {
        attempt: attempt.clone(),
    });
    let deltas = [
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
    ];
    for (seq, delta) in deltas.into_iter().enumerate() {
        let _ = run.handle(Event::Delta {
            attempt: attempt.clone(),
            seq: seq as u64,
            delta,
        });
    }
    let asked = run.handle(Event::done(attempt));
    (run, asked)
}

/// The approval timer a step started after its `RequestApproval`, with its delay.
fn approval_timer(step: &Step) -> (u64, u64) {
    let asked = step
        .effects
        .iter()
        .position(|e| matches!(e, Effect::RequestApproval { call } if call.id == "c1"))
        .expect("the step asks for approval");
    match step.effects.get(asked + 1) {
        Some(Effect::StartTimer { timer_id, delay_ms }) => (*timer_id, *delay_ms),
        other => panic!("no approval timer after the request: {other:?}"),
    }
}

fn resolved(step: &Step) -> Vec<(ApprovalDecision, ApprovalStatus)> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Emit {
                event:
                    AgentEvent::ApprovalResolved {
                        decision, status, ..
                    },
            } => Some((decision.clone(), *status)),
            _ => None,
        })
        .collect()
}

#[test]
fn r_ctl_4_the_approval_timer_elapsing_takes_the_timed_out_row() {
    let (mut run, asked) = asking(false);
    let (timer_id, delay_ms) = approval_timer(&asked);
    assert_eq!(delay_ms, 250);
    let s = run.handle(Event::TimerElapsed { timer_id });
    let rows = process_rows(&s);
    assert_eq!(
        rows.first(),
        Some(&ProcessRow::AwaitingTimedOutStop),
        "{rows:?}"
    );
    assert!(
        s.effects.contains(&Effect::WithdrawApproval {
            tool_call_id: "c1".into()
        }),
        "the runtime stops waiting: {:?}",
        s.effects
    );
    assert_eq!(
        resolved(&s),
        [(
            ApprovalDecision::TimedOut { after_ms: 250 },
            ApprovalStatus::Timeout
        )]
    );
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::CommitRunEnd { .. })));
    let _ = run.handle(Event::RunEndCommitted);
    assert_eq!(run.result().expect("the run ended").reason, "tool_rejected");
    // With auto_resume the run goes on, and says why.
    let (mut run, asked) = asking(true);
    let (timer_id, _) = approval_timer(&asked);
    let s = run.handle(Event::TimerElapsed { timer_id });
    assert_eq!(
        process_rows(&s).first(),
        Some(&ProcessRow::AwaitingTimedOut)
    );
    assert!(s.effects.iter().any(|e| matches!(
        e,
        Effect::Emit { event: AgentEvent::AgentResumed { trigger } } if trigger == "tool_approval_timeout"
    )));
}

#[test]
fn r_ctl_4_an_answer_before_the_timer_cancels_it() {
    let (mut run, asked) = asking(false);
    let (timer_id, _) = approval_timer(&asked);
    let s = run.handle(Event::Approval {
        tool_call_id: "c1".into(),
        decision: ApprovalDecision::Approved,
    });
    assert_eq!(
        process_rows(&s).first(),
        Some(&ProcessRow::AwaitingApproved)
    );
    assert!(
        s.effects.contains(&Effect::CancelTimer { timer_id }),
        "{:?}",
        s.effects
    );
    assert!(!s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::WithdrawApproval { .. })));
    // Had the cancelled timer fired anyway, it is stale: nothing happens to the call.
    let s = run.handle(Event::TimerElapsed { timer_id });
    assert!(resolved(&s).is_empty(), "{:?}", s.effects);
    // A rejection cancels it too.
    let (mut run, asked) = asking(false);
    let (timer_id, _) = approval_timer(&asked);
    let s = run.handle(Event::Approval {
        tool_call_id: "c1".into(),
        decision: ApprovalDecision::Rejected {
            reason: "no".into(),
        },
    });
    assert_eq!(
        process_rows(&s).first(),
        Some(&ProcessRow::AwaitingRejectedStop)
    );
    assert!(s.effects.contains(&Effect::CancelTimer { timer_id }));
}

#[test]
fn r_ctl_4_a_stale_approval_timer_is_ignored_while_another_call_is_asked_about() {
    let (mut run, asked) = asking(false);
    let (timer_id, _) = approval_timer(&asked);
    // The approval timer of a slot nobody asks about (its neighbour's id).
    let s = run.handle(Event::TimerElapsed {
        timer_id: timer_id + 1,
    });
    assert_eq!(process_rows(&s), [ProcessRow::AwaitingTimedOutStale]);
    assert!(resolved(&s).is_empty());
    // The real one still times the call out.
    let s = run.handle(Event::TimerElapsed { timer_id });
    assert_eq!(
        process_rows(&s).first(),
        Some(&ProcessRow::AwaitingTimedOutStop)
    );
}

#[test]
fn r_ctl_4_without_an_approval_timeout_no_timer_is_started() {
    assert_eq!(
        RunConfig::default().step.approval_timeout_ms,
        None,
        "a plain run waits for its approver as long as it takes"
    );
    let (_, asked) = asking_with(false, None);
    assert!(asked
        .effects
        .iter()
        .any(|e| matches!(e, Effect::RequestApproval { .. })));
    assert!(!asked
        .effects
        .iter()
        .any(|e| matches!(e, Effect::StartTimer { .. })));
}
