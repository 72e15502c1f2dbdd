//! Abort latency (R-CTL-3): time from `Session::abort` to a subscriber receiving
//! `agent_abort`, in every status, on the real clock. Prints p50/p99/max per status.
//!
//! `cargo bench --bench abort_latency` (target: p99 ≤ 5 ms; requirement: < 100 ms).
#![allow(clippy::disallowed_methods)] // measures wall time

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::model::{DeltaStream, Model, ModelRequest};
use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::Agent;
use agentloop::session::{KillTools, Session, SessionConfig, Status, SubscriptionItem};
use agentloop::store::MemoryStore;
use agentloop::tools::{Tool, ToolContext, ToolError, ToolRegistry, ToolSpec};
use agentloop::ModelError;
use agentloop_core::process::ApprovalPolicy;
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{json, Value};

struct Slow {
    inner: ScriptedModel,
    open_ms: u64,
    delta_ms: u64,
}

#[async_trait]
impl Model for Slow {
    fn name(&self) -> String {
        "scripted".into()
    }
    async fn stream(&self, request: ModelRequest) -> Result<DeltaStream, ModelError> {
        tokio::time::sleep(Duration::from_millis(self.open_ms)).await;
        let inner = self.inner.stream(request).await?;
        let d = self.delta_ms;
        Ok(Box::pin(inner.then(move |item| async move {
            tokio::time::sleep(Duration::from_millis(d)).await;
            item
        })))
    }
}

struct Sleepy;

#[async_trait]
impl Tool for Sleepy {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "sleepy".into(),
            description: "sleeps a minute".into(),
            parameters: json!({"type": "object"}),
        }
    }
    async fn call(&self, _ctx: ToolContext, _args: Value) -> Result<String, ToolError> {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok("done".into())
    }
}

fn session(target: Status) -> Session {
    let script = match target {
        Status::Streaming => {
            r#"{"turns": [{"text": "a very long story that keeps going and going and going and going and going", "chunk_chars": 1}]}"#
        }
        _ => r#"{"turns": [{"tool_calls": [{"name": "sleepy"}]}, {"text": "ok"}]}"#,
    };
    let (open_ms, delta_ms) = match target {
        Status::Running => (60_000, 0),
        Status::Streaming => (0, 20),
        _ => (0, 0),
    };
    let mut tools = ToolRegistry::new();
    tools.insert(Arc::new(Sleepy));
    let agent = Agent::builder()
        .model(Slow {
            inner: ScriptedModel::from_json_str(script, "bench").expect("script"),
            open_ms,
            delta_ms,
        })
        .store(Arc::new(MemoryStore::new()))
        .tools(tools)
        .configure(|c| {
            if target == Status::AwaitingApproval {
                c.step
                    .approval
                    .insert("sleepy".into(), ApprovalPolicy::Always);
            }
        })
        .build();
    Session::spawn(agent, SessionConfig::new("bench"))
}

async fn reach(s: &Session, target: Status) {
    if target == Status::Idle {
        return;
    }
    let wanted = match target {
        Status::Running => "request_start",
        Status::Streaming => "text_delta",
        Status::ExecutingTools => "tool_start",
        _ => "approval_required",
    };
    let mut sub = s.subscribe(None, Some(vec![wanted.into()]));
    s.prompt("go").await.expect("prompt");
    let _ = sub.next_event().await;
    // Let the status settle (the observer runs right after publishing).
    for _ in 0..100 {
        if s.status() == target {
            break;
        }
        tokio::task::yield_now().await;
    }
}

async fn measure(target: Status, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let s = session(target);
        reach(&s, target).await;
        assert_eq!(s.status(), target, "could not reach {target:?}");
        let mut sub = s.subscribe(None, Some(vec!["agent_abort".into()]));
        let t0 = Instant::now();
        s.abort("bench", KillTools::Killable, true)
            .await
            .expect("abort");
        loop {
            match tokio::time::timeout(Duration::from_secs(1), sub.recv()).await {
                Ok(Some(SubscriptionItem::Event(_))) => break,
                Ok(Some(SubscriptionItem::Lagged(_))) => continue,
                other => panic!("no agent_abort within 1 s in {target:?}: {other:?}"),
            }
        }
        out.push(t0.elapsed());
        s.wait_idle().await;
    }
    out.sort();
    out
}

fn pct(v: &[Duration], p: f64) -> Duration {
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

fn main() {
    let n: usize = std::env::var("ABORT_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("abort -> agent_abort at a subscriber, {n} samples per status");
    println!("{:<18} {:>10} {:>10} {:>10}", "status", "p50", "p99", "max");
    let mut worst = Duration::ZERO;
    for target in [
        Status::Idle,
        Status::Running,
        Status::Streaming,
        Status::ExecutingTools,
        Status::AwaitingApproval,
    ] {
        let v = rt.block_on(measure(target, n));
        let (p50, p99, max) = (pct(&v, 0.5), pct(&v, 0.99), pct(&v, 1.0));
        worst = worst.max(p99);
        println!(
            "{:<18} {:>8.1}µs {:>8.1}µs {:>8.1}µs",
            target.as_str(),
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            max.as_secs_f64() * 1e6
        );
    }
    println!(
        "worst p99 {:.1}µs (target ≤ 5 ms, requirement < 100 ms): {}",
        worst.as_secs_f64() * 1e6,
        if worst <= Duration::from_millis(5) {
            "OK"
        } else {
            "OVER TARGET"
        }
    );
}
