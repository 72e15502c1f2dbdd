//! Live session control, offline: a scripted model, no key, no network.
//!
//! `cargo run --example control` runs five scenarios on a [`Session`] and prints the events each
//! one produced: a prompt queue, steering, an approval, an abort while a tool runs, and a
//! reconnecting subscriber that replays what it missed from the ring buffer.

use std::sync::Arc;
use std::time::Duration;

use agentloop::model::{DeltaStream, Model, ModelRequest};
use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::Agent;
use agentloop::session::{KillTools, Session, SessionConfig, SubscriptionItem};
use agentloop::store::MemoryStore;
use agentloop::tools::{Tool, ToolContext, ToolError, ToolRegistry, ToolSpec};
use agentloop::AgentEvent;
use agentloop::EventEnvelope;
use agentloop::ModelError;
use agentloop_core::process::ApprovalPolicy;
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{json, Value};

/// The scripted model, slowed down so there is time to steer and abort.
struct Paced(ScriptedModel);

#[async_trait]
impl Model for Paced {
    fn name(&self) -> String {
        "scripted".into()
    }
    async fn stream(&self, request: ModelRequest) -> Result<DeltaStream, ModelError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let inner = self.0.stream(request).await?;
        Ok(Box::pin(inner.then(|d| async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            d
        })))
    }
}

/// A slow shell-like tool.
struct Build;

#[async_trait]
impl Tool for Build {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "build".into(),
            description: "Runs a (pretend) build".into(),
            parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
        }
    }
    async fn call(&self, _ctx: ToolContext, args: Value) -> Result<String, ToolError> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(format!("ran {}", args["command"].as_str().unwrap_or("?")))
    }
}

fn session(script: &str, approvals: bool) -> Session {
    let mut tools = ToolRegistry::builtin();
    tools.insert(Arc::new(Build));
    let agent = Agent::builder()
        .model(Paced(
            ScriptedModel::from_json_str(script, "example").expect("valid script"),
        ))
        .store(Arc::new(MemoryStore::new()))
        .deterministic()
        .tools(tools)
        .configure(|c| {
            if approvals {
                c.step
                    .approval
                    .insert("build".into(), ApprovalPolicy::Always);
            }
        })
        .build();
    Session::spawn(agent, SessionConfig::new("demo").event_buffer_size(1000))
}

/// One line per event, without the noisy ones.
fn line(e: &EventEnvelope) -> Option<String> {
    let detail = match &e.event {
        AgentEvent::StateChanged { .. }
        | AgentEvent::TextDelta { .. }
        | AgentEvent::ToolInputStart { .. }
        | AgentEvent::ToolInputDelta { .. }
        | AgentEvent::ToolMetrics { .. }
        | AgentEvent::MessageStart { .. } => return None,
        AgentEvent::PromptReceived { text }
        | AgentEvent::PromptQueued { text, .. }
        | AgentEvent::PromptDropped { text }
        | AgentEvent::SteeringApplied { text } => format!("{text:?}"),
        AgentEvent::SteeringReceived { text, status, .. } => format!("{text:?} {status:?}"),
        AgentEvent::RunEnd { reason, .. } => reason.clone(),
        AgentEvent::AgentAbort { reason, .. } => reason.clone(),
        AgentEvent::ToolStart {
            name, arguments, ..
        } => format!("{name} {arguments}"),
        AgentEvent::ToolEnd { name, status, .. } => format!("{name} {status:?}"),
        AgentEvent::ApprovalRequired {
            tool_call_id, name, ..
        } => format!("{name} ({tool_call_id})"),
        AgentEvent::ApprovalResolved { decision, .. } => format!("{decision:?}"),
        AgentEvent::AgentResumed { trigger } => trigger.clone(),
        AgentEvent::UsageReport {
            model_call_index,
            usage,
            ..
        } => format!(
            "{} in={} out={}",
            model_call_index
                .map(|i| format!("step {i}"))
                .unwrap_or("run".into()),
            usage.input_tokens,
            usage.output_tokens
        ),
        _ => String::new(),
    };
    Some(format!(
        "  #{:<3} {:<7} {:<22} {detail}",
        e.index,
        e.run_id,
        e.event.type_name()
    ))
}

fn print(title: &str, s: &Session) {
    println!("\n== {title}");
    for e in s.recent_events() {
        if let Some(l) = line(&e) {
            println!("{l}");
        }
    }
    if let Some(r) = s.last_result() {
        println!("  -> {:?}: {:?}", r.outcome, r.final_text().unwrap_or(""));
    }
}

async fn wait_for(s: &Session, ty: &str) {
    let mut sub = s.subscribe(None, Some(vec![ty.into()]));
    let _ = sub.next_event().await;
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. A prompt while busy is queued and runs after the current run (R-CTL-1).
    let s = session(
        r#"{"turns": [{"text": "Paris."}, {"text": "Berlin."}]}"#,
        false,
    );
    s.prompt("Capital of France?").await?;
    s.prompt("Capital of Germany?").await?;
    s.wait_idle().await;
    print("queue: a second prompt waits for the first run", &s);

    // 2. Steering while a tool runs joins the next model call (R-CTL-2).
    let s = session(
        r#"{"turns": [
            {"tool_calls": [{"name": "build", "arguments": {"command": "make all"}}]},
            {"text": "Built; and I noted: {{last_tool_result}}."}
        ]}"#,
        false,
    );
    s.prompt("Build the project").await?;
    wait_for(&s, "tool_start").await;
    s.steer("Also run the tests afterwards").await?;
    s.wait_idle().await;
    print("steer: merged at the next step boundary", &s);

    // 3. A tool that needs approval; approve-always whitelists `make` for the session (R-CTL-4).
    let s = session(
        r#"{"turns": [
            {"tool_calls": [{"id": "b1", "name": "build", "arguments": {"command": "make release"}}]},
            {"text": "Release built."}
        ]}"#,
        true,
    );
    s.prompt("Make a release").await?;
    wait_for(&s, "approval_required").await;
    println!(
        "\n   status while waiting: {:?}, pending: {:?}",
        s.status(),
        s.pending_approvals()
    );
    s.approve("b1", true)?;
    println!(
        "   approving again: {}",
        s.approve("b1", false)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    );
    s.wait_idle().await;
    print("approve: a human answers through the handle", &s);

    // 4. Abort while a tool runs; clear_queue drops the queued prompt (R-CTL-3).
    let s = session(
        r#"{"turns": [
            {"tool_calls": [{"name": "build", "arguments": {"command": "make world"}}]},
            {"text": "never"}
        ]}"#,
        false,
    );
    s.prompt("Build the world").await?;
    s.prompt("And then the moon").await?;
    wait_for(&s, "tool_start").await;
    s.abort("changed my mind", KillTools::Killable, true)
        .await?;
    s.wait_idle().await;
    s.abort("nothing is running", KillTools::Killable, false)
        .await?;
    print(
        "abort: kill the tool, drop the queue; an idle abort still emits",
        &s,
    );

    // 5. A subscriber reconnects and replays what it missed (R-EVT-1).
    let s = session(r#"{"turns": [{"text": "One."}, {"text": "Two."}]}"#, false);
    s.prompt("first").await?;
    s.wait_idle().await;
    let last_seen = s.recent_events().last().map_or(0, |e| e.index);
    s.prompt("second").await?; // the subscriber is "offline" during this run
    s.wait_idle().await;
    println!("\n== subscribe: reconnect with since={last_seen}, types=[prompt_received, run_end]");
    let mut sub = s.subscribe(
        Some(last_seen),
        Some(vec!["prompt_received".into(), "run_end".into()]),
    );
    for item in sub.drain() {
        match item {
            SubscriptionItem::Event(e) => println!("{}", line(&e).unwrap_or_default()),
            SubscriptionItem::Lagged(n) => println!("  (lagged: {n} events lost)"),
        }
    }
    println!(
        "  metrics: {} runs, {} steps",
        s.metrics().runs,
        s.metrics().steps
    );
    Ok(())
}
