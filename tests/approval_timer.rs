//! R-CTL-4: a session's approval timeout is a timer of the step's machine. On virtual time,
//! nobody answers: the timer the machine started with the approval request fires, the call is
//! denied with status timeout, the session forgets the request (a late answer is not pending)
//! and the recorded trace holds the timer and replays identically.

mod support;

use agentloop::session::{Session, SessionConfig};
use agentloop::trace::{replay, Trace};
use agentloop::AgentEvent;
use agentloop::ToolStatus;
use agentloop_core::effect::Effect;
use agentloop_core::event::{ApprovalDecision, Event};
use agentloop_core::process::ApprovalPolicy;
use agentloop_core::trace::TraceRecord;
use support::*;

/// A session whose model calls `calculator`, which needs approval, under an approval timeout
/// of `timeout_ms`, recording traces.
fn asking_session(timeout_ms: u64) -> Session {
    let agent = builder(Slow::new(
        r#"{"turns": [
            {"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "2+3"}}]},
            {"text": "The answer is {{last_tool_result}}."}
        ]}"#,
    ))
    .configure(|c| {
        c.step
            .approval
            .insert("calculator".into(), ApprovalPolicy::Always);
    })
    .build();
    Session::spawn(
        agent,
        SessionConfig::new("s")
            .approval_timeout_ms(Some(timeout_ms))
            .event_buffer_size(1024)
            .record_traces(true),
    )
}

/// The approval timer the trace's run started: its id and delay.
fn approval_timer(trace: &Trace) -> (u64, u64) {
    let mut asked = false;
    for r in &trace.records {
        if let TraceRecord::Effect { effect, .. } = r {
            match effect {
                Effect::RequestApproval { call } if call.id == "c1" => asked = true,
                Effect::StartTimer { timer_id, delay_ms } if asked => {
                    return (*timer_id, *delay_ms)
                }
                _ => {}
            }
        }
    }
    panic!("no approval timer in the trace")
}

#[tokio::test(start_paused = true)]
async fn r_ctl_4_a_session_approval_times_out_on_the_machines_timer() {
    let s = asking_session(2_000);
    let mut sub = s.subscribe(None, None);
    s.prompt("2+3?").await.expect("started");
    wait_for(&mut sub, "approval_required").await;
    assert_eq!(s.pending_approvals(), ["c1"]);
    s.wait_idle().await;
    // Denied with status timeout; the run stops (no auto_resume).
    let last = s.last_result().expect("a result");
    assert_eq!(last.reason, "tool_rejected");
    let denied: Vec<_> = last
        .messages
        .iter()
        .filter_map(|m| match m {
            agentloop::Message::Tool(r) => Some((r.status, r.content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(denied.len(), 1);
    assert_eq!(denied[0].0, ToolStatus::Denied);
    assert!(denied[0].1.contains("2000 ms"), "{denied:?}");
    assert!(history(&s).iter().any(|e| matches!(
        &e.event,
        AgentEvent::ApprovalResolved {
            decision: ApprovalDecision::TimedOut { after_ms: 2_000 },
            status: agentloop::ApprovalStatus::Timeout,
            ..
        }
    )));
    // The session forgot the request: nothing pending, a late answer is refused.
    assert!(s.pending_approvals().is_empty());
    assert!(
        matches!(
            s.approve("c1", false),
            Err(agentloop::session::SessionError::Approval(id)) if id == "c1"
        ),
        "a late answer is not pending"
    );
    // The trace holds the timer: started with the request, fed back as the input the
    // timed-out row took, then the request withdrawn.
    let trace = s.last_trace().expect("a recorded trace");
    let (timer_id, delay_ms) = approval_timer(&trace);
    assert_eq!(delay_ms, 2_000);
    assert!(trace.records.iter().any(|r| matches!(
        r,
        TraceRecord::Input { event: Event::TimerElapsed { timer_id: t }, .. } if *t == timer_id
    )));
    assert!(trace.records.iter().any(|r| matches!(
        r,
        TraceRecord::Effect { effect: Effect::WithdrawApproval { tool_call_id }, .. }
            if tool_call_id == "c1"
    )));
    // And it replays identically, as recorded and through its text form.
    assert_eq!(replay(&trace), None);
    let parsed = Trace::parse(&trace.to_jsonl(), "inline").expect("parses");
    assert_eq!(replay(&parsed), None);
}

#[tokio::test(start_paused = true)]
async fn r_ctl_4_an_answer_in_time_cancels_the_approval_timer() {
    let s = asking_session(2_000);
    let mut sub = s.subscribe(None, None);
    s.prompt("2+3?").await.expect("started");
    wait_for(&mut sub, "approval_required").await;
    s.approve("c1", false).expect("pending");
    s.wait_idle().await;
    assert_eq!(s.last_result().expect("a result").reason, "final_answer");
    let trace = s.last_trace().expect("a recorded trace");
    let (timer_id, _) = approval_timer(&trace);
    assert!(trace.records.iter().any(|r| matches!(
        r,
        TraceRecord::Effect { effect: Effect::CancelTimer { timer_id: t }, .. } if *t == timer_id
    )));
    assert!(!trace.records.iter().any(|r| matches!(
        r,
        TraceRecord::Input { event: Event::TimerElapsed { timer_id: t }, .. } if *t == timer_id
    )));
    assert_eq!(replay(&trace), None);
}
