//! Control features of the machines through the runtime (virtual time, scripted model):
//! abort with immune tools (R-CTL-3), steering (R-CTL-2), model switch (R-CTL-5), doom loops
//! (R-TOOL-4).

use agentloop_testkit::agent::model_requests;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::{Agent, Controller, RunOutput, VecSink};
use agentloop::tools::{Tool, ToolContext, ToolError, ToolRegistry, ToolSpec};
use agentloop::trace::replay;
use agentloop::{AgentEvent, Outcome};
use agentloop::{Message, ToolStatus};
use agentloop_core::event::KillPolicy;
use agentloop_core::process::{DoomLoopPolicy, LoopAction};
use agentloop_core::trace::TraceRecord;
use async_trait::async_trait;

/// A tool that sleeps (virtual time) and counts its runs; immune when `killable` is false.
struct Sleeper {
    name: &'static str,
    ms: u64,
    killable: bool,
    runs: Arc<AtomicU32>,
}

#[async_trait]
impl Tool for Sleeper {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.into(),
            description: "sleeps".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }
    fn killable(&self) -> bool {
        self.killable
    }
    async fn call(&self, _ctx: ToolContext, _args: serde_json::Value) -> Result<String, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(self.ms)).await;
        Ok(format!("{} done", self.name))
    }
}

fn agent(
    script: &str,
    tools: ToolRegistry,
    sink: &VecSink,
    cfg: impl FnOnce(&mut agentloop::RunConfig),
) -> Agent {
    Agent::builder()
        .builtin_tools()
        .model(ScriptedModel::from_json_str(script, "inline").expect("script"))
        .tools(tools)
        .deterministic()
        .sink(Arc::new(sink.clone()))
        .configure(cfg)
        .build()
}

async fn run(agent: &Agent, rx: Option<&Controller>) -> RunOutput {
    let out = agent
        .run_with("s", vec![Message::user("go")], rx, true)
        .await
        .expect("run");
    let trace = out.trace.as_ref().expect("trace");
    assert_eq!(replay(trace), None, "replays identically");
    for r in &trace.records {
        if let TraceRecord::Transition { transition, .. } = r {
            assert!(transition.conforms(), "{transition:?}");
        }
    }
    out
}

fn events(sink: &VecSink) -> Vec<AgentEvent> {
    sink.events().into_iter().map(|e| e.event).collect()
}

fn requests(out: &RunOutput) -> Vec<agentloop::model::ModelRequest> {
    model_requests(out.trace.as_ref().expect("trace"))
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_keeps_immune_tool_results_and_kills_the_rest() {
    let (slow_runs, immune_runs) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let mut tools = ToolRegistry::new();
    tools.insert(Arc::new(Sleeper {
        name: "slow",
        ms: 10_000,
        killable: true,
        runs: slow_runs.clone(),
    }));
    tools.insert(Arc::new(Sleeper {
        name: "immune",
        ms: 500,
        killable: false,
        runs: immune_runs.clone(),
    }));
    let script =
        r#"{"turns": [{"tool_calls": [{"name": "slow"}, {"name": "immune"}]}, {"text": "never"}]}"#;
    let sink = VecSink::default();
    let agent = agent(script, tools, &sink, |_| {});
    let ctl = Controller::new();
    let rx = ctl.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        ctl.abort_with("stop", KillPolicy::Killable);
    });
    let started = tokio::time::Instant::now();
    let out = run(&agent, Some(&rx)).await;
    assert_eq!(out.result.outcome, Outcome::Aborted);
    // The run waited for the immune tool (500 ms), not for the killable one (10 s).
    let waited = started.elapsed().as_millis();
    assert!((500..10_000).contains(&waited), "waited {waited} ms");
    let results: Vec<_> = out
        .result
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.name.clone(), r.status)),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        vec![
            ("slow".to_string(), ToolStatus::Aborted),
            ("immune".to_string(), ToolStatus::Completed)
        ]
    );
    let ev = events(&sink);
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, AgentEvent::AgentAbort { .. }))
            .count(),
        1
    );
    assert!(ev.iter().any(
        |e| matches!(e, AgentEvent::ToolKilled { tool_call_id } if tool_call_id == "call_0_0")
    ));
}

#[tokio::test(start_paused = true)]
async fn r_ctl_2_steering_joins_the_next_model_call() {
    let runs = Arc::new(AtomicU32::new(0));
    let mut tools = ToolRegistry::new();
    tools.insert(Arc::new(Sleeper {
        name: "work",
        ms: 1_000,
        killable: true,
        runs,
    }));
    let script = r#"{"turns": [{"tool_calls": [{"name": "work"}]}, {"text": "steered"}]}"#;
    let sink = VecSink::default();
    let agent = agent(script, tools, &sink, |_| {});
    let ctl = Controller::new();
    let rx = ctl.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        ctl.steer("focus on tests");
    });
    let out = run(&agent, Some(&rx)).await;
    assert_eq!(out.result.outcome, Outcome::Completed);
    let reqs = requests(&out);
    assert_eq!(reqs.len(), 2);
    // deliver_at_boundary: the tool batch finished, then the steering message joined step 2.
    assert!(
        matches!(reqs[1].messages.last(), Some(Message::User { content, .. }) if content == "focus on tests")
    );
    assert!(
        matches!(reqs[1].messages[reqs[1].messages.len() - 2], Message::Tool(ref r) if r.status == ToolStatus::Completed)
    );
    assert!(events(&sink)
        .iter()
        .any(|e| matches!(e, AgentEvent::SteeringApplied { text } if text == "focus on tests")));
}

#[tokio::test(start_paused = true)]
async fn r_ctl_2_skip_remaining_skips_the_batch() {
    let runs = Arc::new(AtomicU32::new(0));
    let mut tools = ToolRegistry::new();
    tools.insert(Arc::new(Sleeper {
        name: "work",
        ms: 1_000,
        killable: true,
        runs: runs.clone(),
    }));
    let script = r#"{"turns": [{"tool_calls": [{"name": "work", "arguments": {"n": 1}}, {"name": "work", "arguments": {"n": 2}}]}, {"text": "ok"}]}"#;
    let sink = VecSink::default();
    let agent = agent(script, tools, &sink, |c| {
        c.steering = agentloop_core::react::SteeringPolicy::SkipRemaining;
        c.step.parallel_tools = false;
    });
    let ctl = Controller::new();
    let rx = ctl.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        ctl.steer("stop that");
    });
    let out = run(&agent, Some(&rx)).await;
    assert_eq!(out.result.outcome, Outcome::Completed);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the second call never started"
    );
    let skipped = out
        .result
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Tool(r) if r.status == ToolStatus::Skipped))
        .count();
    assert_eq!(
        skipped, 2,
        "the running call was killed and the queued one skipped"
    );
}

#[tokio::test(start_paused = true)]
async fn r_ctl_5_switch_model_applies_at_the_next_step() {
    let sink = VecSink::default();
    let script = r#"{"turns": [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]}, {"text": "2"}]}"#;
    let agent = agent(script, ToolRegistry::builtin(), &sink, |_| {});
    let ctl = Controller::new();
    let rx = ctl.clone();
    ctl.switch_model("scripted"); // same model: no event
    ctl.switch_model("other");
    let out = run(&agent, Some(&rx)).await;
    let models: Vec<String> = requests(&out).iter().map(|r| r.model.clone()).collect();
    assert_eq!(models.last().map(String::as_str), Some("other"));
    let switched: Vec<_> = events(&sink)
        .into_iter()
        .filter(|e| matches!(e, AgentEvent::ModelSwitched { .. }))
        .collect();
    assert_eq!(switched.len(), 1);
}

fn looping_script() -> String {
    let call = r#"{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]}"#;
    format!(r#"{{"turns": [{call}, {call}, {call}, {{"text": "done"}}]}}"#)
}

#[tokio::test(start_paused = true)]
async fn r_tool_4_doom_loop_asks_for_approval() {
    let sink = VecSink::default();
    let agent = agent(&looping_script(), ToolRegistry::builtin(), &sink, |_| {});
    let out = run(&agent, None).await;
    assert_eq!(out.result.outcome, Outcome::Completed);
    let ev = events(&sink);
    let loops: Vec<_> = ev
        .iter()
        .filter(|e| matches!(e, AgentEvent::LoopDetected { .. }))
        .collect();
    assert_eq!(loops.len(), 1, "{loops:?}");
    assert!(
        matches!(loops[0], AgentEvent::LoopDetected { repeats: 3, action, .. } if action == "ask")
    );
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, AgentEvent::ApprovalRequired { .. }))
            .count(),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn r_tool_4_doom_loop_can_stop_the_run() {
    let sink = VecSink::default();
    let agent = agent(&looping_script(), ToolRegistry::builtin(), &sink, |c| {
        c.step.doom_loop = Some(DoomLoopPolicy {
            threshold: 3,
            action: LoopAction::Stop,
        });
    });
    let out = run(&agent, None).await;
    assert_eq!(out.result.outcome, Outcome::Completed);
    assert_eq!(out.result.reason, "stopped");
    assert_eq!(out.result.iterations, 3);
}

#[tokio::test(start_paused = true)]
async fn r_in_7_whole_request_timeout_is_a_retryable_event() {
    let sink = VecSink::default();
    let script = r#"{"turns": [{"errors": [{"stall": true}], "text": "second attempt"}]}"#;
    let agent = Agent::builder()
        .builtin_tools()
        .model(ScriptedModel::from_json_str(script, "inline").expect("script"))
        .deterministic()
        .sink(Arc::new(sink.clone()))
        .request_timeout_ms(1_000)
        .build();
    let out = run(&agent, None).await;
    assert_eq!(out.result.final_text(), Some("second attempt"));
    assert!(events(&sink)
        .iter()
        .any(|e| matches!(e, AgentEvent::Retry { reason, .. } if reason.contains("request exceeded 1000 ms"))));
}

#[tokio::test(start_paused = true)]
async fn r_in_7_run_deadline_aborts() {
    let sink = VecSink::default();
    let script = r#"{"turns": [{"errors": [{"stall": true}, {"stall": true}, {"stall": true}, {"stall": true}], "text": "never"}]}"#;
    let agent = Agent::builder()
        .builtin_tools()
        .model(ScriptedModel::from_json_str(script, "inline").expect("script"))
        .deterministic()
        .sink(Arc::new(sink.clone()))
        .run_deadline_ms(5_000)
        .build();
    let out = run(&agent, None).await;
    assert_eq!(out.result.outcome, Outcome::Aborted);
    assert_eq!(out.result.reason, "run deadline exceeded");
}
