//! The session chart through a real `Session` (R-CTL-1..6, R-ARCH-3): scripted models on
//! virtual time drive the session's machine through every row of `statecharts/session.toml`
//! (the machine checks each row against the chart oracle as it takes it).

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agentloop::hooks::Hooks;
use agentloop::session::{Ack, KillTools, Session, SessionConfig, SessionError};
use agentloop_core::chart::SessionRow;
use agentloop_core::process::ApprovalPolicy;
use serde_json::json;
use support::*;

/// Rejects prompts and steering that contain "forbidden".
struct Policy;

impl Hooks for Policy {
    fn before_prompt(&self, text: &str) -> Result<(), String> {
        if text.contains("forbidden") {
            Err("no".into())
        } else {
            Ok(())
        }
    }
    fn before_steering(&self, text: &str) -> Result<(), String> {
        self.before_prompt(text)
    }
}

fn texts(n: usize) -> String {
    let turns: Vec<_> = (0..n)
        .map(|i| json!({"text": format!("answer {i}")}))
        .collect();
    json!({ "turns": turns }).to_string()
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(10)).await;
}

fn add(all: &mut BTreeMap<SessionRow, usize>, rows: impl Fn() -> BTreeMap<SessionRow, usize>) {
    for (r, n) in rows() {
        *all.entry(r).or_default() += n;
    }
}

/// Commands in every state: queue, steering (forwarded, full, rejected), subtasks, model
/// switches, tool changes, aborts before and during a run, runs ending into the next one or
/// into idle, closing busy.
async fn commands(all: &mut BTreeMap<SessionRow, usize>) {
    let first = json!({"turns": [
        {"tool_calls": [{"id": "t1", "name": "sleepy", "arguments": {}}]},
        {"text": "after sleepy"}
    ]});
    let agent = builder(Slow::new(&first.to_string()))
        .tool(Arc::new(SleepTool::new("sleepy", 10_000)))
        .extra_model("other", Arc::new(Slow::new(&texts(30)).named("other")))
        .hooks(Arc::new(Policy))
        .build();
    let s = Session::spawn(
        agent,
        SessionConfig::new("s")
            .event_buffer_size(1024)
            .steering_capacity(1),
    );
    let rows = s.rows();

    // Idle.
    s.attach_tool(Arc::new(SleepTool::new("extra", 10)))
        .await
        .expect("attached");
    assert!(matches!(
        s.switch_model("missing").await,
        Err(SessionError::UnknownModel(..))
    ));
    assert_eq!(s.switch_model("scripted").await, Ok(false));
    assert_eq!(s.switch_model("other").await, Ok(true));
    assert_eq!(s.switch_model("scripted").await, Ok(true));
    assert_eq!(
        s.abort("nothing", KillTools::Killable, false).await,
        Ok(Ack::Idle)
    );
    assert!(matches!(
        s.prompt("forbidden").await,
        Err(SessionError::Rejected(_))
    ));
    assert!(matches!(
        s.steer("forbidden").await,
        Err(SessionError::Rejected(_))
    ));

    // Busy: the first run sleeps in its tool.
    assert_eq!(s.prompt("a").await, Ok(Ack::Started));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(s.prompt("b").await, Ok(Ack::Queued(1)));
    assert!(matches!(s.steer("s1").await, Ok(Ack::SteerQueued(_))));
    assert_eq!(
        s.steer("s2").await,
        Err(SessionError::QueueFull { capacity: 1 })
    );
    assert!(matches!(
        s.steer("forbidden").await,
        Err(SessionError::Rejected(_))
    ));
    assert_eq!(s.subtask("extra", json!({})).await, Ok(Ack::SubtaskQueued));
    assert_eq!(s.switch_model("other").await, Ok(true));
    assert_eq!(s.switch_model("other").await, Ok(false));
    s.attach_tool(Arc::new(SleepTool::new("extra2", 10)))
        .await
        .expect("attached");
    // Two aborts in a row, the second before the run ends.
    s.abort_nowait("stop", KillTools::All, false).expect("sent");
    assert_eq!(
        s.abort("again", KillTools::All, false).await,
        Ok(Ack::Aborting)
    );
    // The aborted run ends; what it left (the queued prompt, or its steering first) runs.
    s.wait_idle().await;

    // A run ending into the queued prompt, which ends into idle.
    assert_eq!(s.prompt("c").await, Ok(Ack::Started));
    assert_eq!(s.prompt("d").await, Ok(Ack::Queued(1)));
    s.wait_idle().await;

    // Steering and a subtask start runs when idle.
    assert_eq!(s.steer("go").await, Ok(Ack::Started));
    s.wait_idle().await;
    assert_eq!(s.subtask("extra", json!({})).await, Ok(Ack::Started));
    s.wait_idle().await;

    // An abort that clears the queue: the run ends into idle.
    assert_eq!(s.prompt("e").await, Ok(Ack::Started));
    assert_eq!(s.prompt("f").await, Ok(Ack::Queued(1)));
    assert_eq!(
        s.abort("stop", KillTools::Killable, true).await,
        Ok(Ack::Aborting)
    );
    s.wait_idle().await;

    // Every handle gone while a run is busy: the session closes and aborts it.
    assert_eq!(s.prompt("g").await, Ok(Ack::Started));
    drop(s);
    settle().await;
    add(all, rows);
}

/// Approvals: a plain answer changes nothing in the session, "always" whitelists the scope;
/// the session closes idle.
async fn approvals(all: &mut BTreeMap<SessionRow, usize>) {
    let script = json!({"turns": [
        {"tool_calls": [{"id": "k1", "name": "ask", "arguments": {}}]},
        {"tool_calls": [{"id": "k2", "name": "ask", "arguments": {}}]},
        {"text": "done"}
    ]});
    let agent = builder(Slow::new(&script.to_string()))
        .tool(Arc::new(SleepTool::new("ask", 10)))
        .configure(|c| {
            c.step.approval.insert("ask".into(), ApprovalPolicy::Always);
        })
        .build();
    let s = Session::spawn(agent, SessionConfig::new("a").event_buffer_size(1024));
    let rows = s.rows();
    s.prompt("go").await.expect("started");
    for (id, always) in [("k1", false), ("k2", true)] {
        let mut waited = 0;
        while s.pending_approvals() != [id] {
            tokio::time::sleep(Duration::from_millis(10)).await;
            waited += 1;
            assert!(waited < 10_000, "{id} is asked about");
        }
        s.approve(id, always).expect("approved");
    }
    s.wait_idle().await;
    drop(s);
    settle().await;
    add(all, rows);
}

/// R-CTL-1..6, R-ARCH-3: a real session takes every row of the session chart.
#[tokio::test(start_paused = true)]
async fn r_ctl_a_real_session_takes_every_row_of_the_session_chart() {
    let mut all = BTreeMap::new();
    commands(&mut all).await;
    approvals(&mut all).await;
    let missing: Vec<&SessionRow> = SessionRow::ALL
        .iter()
        .filter(|r| !all.contains_key(r))
        .collect();
    assert!(
        missing.is_empty(),
        "session rows a real session never took: {missing:?} (took {all:?})"
    );
}
