//! R-CTL-3's bound: `agent_abort` reaches subscribers within 100 ms in every state, also when
//! idle. Each test brings a session into one state (the machine's state read from the
//! `state_changed` events), aborts, and measures on virtual time: tokio's clock is paused and
//! only moves when every task waits on a timer, so an abort that needed a deadline, a backoff
//! or a tool to finish would show that timer's whole length here (60 s and more) instead of
//! 0 ms. The envelope's timestamp (the `TokioClock` port) says the same. The benchmark
//! (`benches/`) measures the real-time figure.

mod support;

use std::sync::Arc;
use std::time::Duration;

use agentloop::model::{DeltaStream, Model, ModelRequest};
use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::Compactor;
use agentloop::session::{Ack, KillTools, Session, Status, Subscription};
use agentloop::EventEnvelope;
use agentloop::Message;
use agentloop::ModelError;
use agentloop::{AgentEvent, Outcome};
use agentloop_core::chart::MachineKind;
use agentloop_core::process::ApprovalPolicy;
use async_trait::async_trait;
use futures::StreamExt;
use support::*;

/// The bound of R-CTL-3.
const BOUND: Duration = Duration::from_millis(100);

/// A model whose request is never answered: no stream, no error.
struct NeverAnswers;

#[async_trait]
impl Model for NeverAnswers {
    fn name(&self) -> String {
        "never".into()
    }
    async fn stream(&self, _request: ModelRequest) -> Result<DeltaStream, ModelError> {
        std::future::pending().await
    }
}

/// A scripted model whose stream yields its first `n` deltas and then nothing, ever.
struct StallsAfter {
    inner: ScriptedModel,
    n: usize,
}

#[async_trait]
impl Model for StallsAfter {
    fn name(&self) -> String {
        "stalls".into()
    }
    async fn stream(&self, request: ModelRequest) -> Result<DeltaStream, ModelError> {
        let inner = self.inner.stream(request).await?;
        Ok(Box::pin(
            inner.take(self.n).chain(futures::stream::pending()),
        ))
    }
}

/// A compactor that never finishes.
struct NeverCompacts;

#[async_trait]
impl Compactor for NeverCompacts {
    async fn compact(
        &self,
        _messages: &[Message],
        _budget_tokens: Option<u64>,
        _max_messages: Option<usize>,
    ) -> Result<(Vec<Message>, usize), String> {
        std::future::pending().await
    }
}

/// One tool call of `tool`, then an answer.
fn tool_then_text(tool: &str) -> String {
    format!(
        r#"{{"turns": [{{"tool_calls": [{{"name": "{tool}", "arguments": {{}}}}]}}, {{"text": "after tool"}}]}}"#
    )
}

/// The state each machine is in after the events so far (from `state_changed`).
fn state_of(events: &[EventEnvelope], machine: MachineKind) -> Option<String> {
    events.iter().rev().find_map(|e| match &e.event {
        AgentEvent::StateChanged { machine: m, to, .. } if *m == machine => Some(to.clone()),
        _ => None,
    })
}

/// Aborts and checks that `agent_abort` arrives within the bound on virtual time, by the
/// test's clock and by the envelope's timestamp; then that the session ends idle.
async fn abort_within_bound(s: &Session, sub: &mut Subscription, expect: Ack) {
    let before = history(s).last().map(|e| e.ts_ms).unwrap_or(0);
    let t0 = tokio::time::Instant::now();
    assert_eq!(
        s.abort("bound", KillTools::Killable, false).await,
        Ok(expect)
    );
    let e = wait_for(sub, "agent_abort").await;
    let took = t0.elapsed();
    assert!(took < BOUND, "agent_abort after {took:?} of virtual time");
    assert!(
        e.ts_ms.saturating_sub(before) < BOUND.as_millis() as u64,
        "stamped {} ms after the last event",
        e.ts_ms.saturating_sub(before)
    );
    assert!(matches!(&e.event, AgentEvent::AgentAbort { reason } if reason == "bound"));
    s.wait_idle().await;
    assert_eq!(s.status(), Status::Idle);
}

/// Starts `prompt`, waits for an event of type `ty`, and returns the subscription.
async fn start_until(s: &Session, prompt: &str, ty: &str) -> Subscription {
    let mut sub = s.subscribe(None, None);
    s.prompt(prompt).await.expect("started");
    wait_for(&mut sub, ty).await;
    sub
}

fn assert_aborted(s: &Session) {
    assert_eq!(s.last_result().map(|r| r.outcome), Some(Outcome::Aborted));
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_bound_when_idle() {
    let s = session(builder(Slow::new(r#"{"turns": [{"text": "hi"}]}"#)).build());
    let mut sub = s.subscribe(None, Some(vec!["agent_abort".into()]));
    abort_within_bound(&s, &mut sub, Ack::Idle).await;
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_bound_while_calling_a_model_that_never_answers() {
    let s = session(builder(NeverAnswers).build());
    let mut sub = start_until(&s, "hi", "request_start").await;
    assert_eq!(
        state_of(&history(&s), MachineKind::Process).as_deref(),
        Some("Calling")
    );
    // The first-chunk deadline (60 s) is far away: the abort does not wait for it.
    abort_within_bound(&s, &mut sub, Ack::Aborting).await;
    assert_aborted(&s);
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_bound_while_streaming_a_stalled_stream() {
    let model = StallsAfter {
        inner: ScriptedModel::from_json_str(
            r#"{"turns": [{"text": "a long story that goes on", "chunk_chars": 2}]}"#,
            "inline",
        )
        .expect("script"),
        n: 3,
    };
    let s = session(builder(model).build());
    let mut sub = start_until(&s, "tell me", "text_delta").await;
    assert_eq!(
        state_of(&history(&s), MachineKind::Process).as_deref(),
        Some("Streaming")
    );
    // The stall watchdog (30 s) is far away.
    abort_within_bound(&s, &mut sub, Ack::Aborting).await;
    assert_aborted(&s);
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_bound_while_retrying_in_backoff() {
    let script =
        r#"{"turns": [{"errors": [{"status": 503, "retry_after_ms": 60000}], "text": "late"}]}"#;
    let s = session(builder(Slow::new(script)).build());
    let mut sub = start_until(&s, "hi", "retry").await;
    assert_eq!(
        state_of(&history(&s), MachineKind::Process).as_deref(),
        Some("Retrying")
    );
    // The backoff (60 s, the server's hint) is not waited out.
    abort_within_bound(&s, &mut sub, Ack::Aborting).await;
    assert_aborted(&s);
    assert_eq!(count(&history(&s), "request_start"), 1, "no retry was sent");
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_bound_while_running_a_slow_killable_tool() {
    let agent = builder(Slow::new(&tool_then_text("sleepy")))
        .tool(Arc::new(SleepTool::new("sleepy", 3_600_000)))
        .build();
    let s = session(agent);
    let mut sub = start_until(&s, "work", "tool_start").await;
    assert_eq!(
        state_of(&history(&s), MachineKind::Process).as_deref(),
        Some("RunningTools")
    );
    abort_within_bound(&s, &mut sub, Ack::Aborting).await;
    assert_aborted(&s);
    assert_eq!(count(&history(&s), "tool_killed"), 1);
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_bound_while_awaiting_approval() {
    let agent = builder(Slow::new(&tool_then_text("sleepy")))
        .tool(Arc::new(SleepTool::new("sleepy", 10)))
        .configure(|c| {
            c.step
                .approval
                .insert("sleepy".into(), ApprovalPolicy::Always);
        })
        .build();
    let s = session(agent);
    let mut sub = start_until(&s, "work", "approval_required").await;
    assert_eq!(
        state_of(&history(&s), MachineKind::Process).as_deref(),
        Some("AwaitingApproval")
    );
    // The approval timeout (5 min by default for a session) is not waited out.
    abort_within_bound(&s, &mut sub, Ack::Aborting).await;
    assert_aborted(&s);
    assert!(s.pending_approvals().is_empty());
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_bound_while_compacting_with_a_slow_compactor() {
    let agent = builder(Slow::new(&tool_then_text("sleepy")))
        .tool(Arc::new(SleepTool::new("sleepy", 10)))
        .compactor(Arc::new(NeverCompacts))
        .compact_after_messages(2)
        .build();
    let s = session(agent);
    let mut sub = start_until(&s, "work", "compact_start").await;
    assert_eq!(
        state_of(&history(&s), MachineKind::React).as_deref(),
        Some("Compacting")
    );
    abort_within_bound(&s, &mut sub, Ack::Aborting).await;
    assert_aborted(&s);
    assert_eq!(count(&history(&s), "compact_end"), 0);
}
