//! Scenario traces (R-TRACE-3, R-VER-2): each scenario runs the real runtime on the offline
//! scripted model (virtual time, deterministic ids), snapshots its trace with `insta`, and
//! checks that the trace replays identically and every transition is a chart row.

use std::sync::Arc;

use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::{Agent, RunOutput, VecSink};
use agentloop::store::MemoryStore;
use agentloop::trace::{replay, Trace};
use agentloop::{AgentEvent, Outcome};
use agentloop::{Message, MessageDelta};
use agentloop_core::event::{AttemptId, Event};
use agentloop_core::process::ApprovalPolicy;
use agentloop_core::react::{Run, RunConfig};
use agentloop_core::trace::{TraceHeader, TraceRecord, TRACE_VERSION};

fn agent(script: &str, configure: impl FnOnce(&mut RunConfig)) -> (Agent, VecSink) {
    let sink = VecSink::default();
    let model = ScriptedModel::from_json_str(script, "inline").expect("valid script");
    let agent = Agent::builder()
        .builtin_tools()
        .model(model)
        .store(Arc::new(MemoryStore::new()))
        .deterministic()
        .sink(Arc::new(sink.clone()))
        .configure(configure)
        .build();
    (agent, sink)
}

async fn run(agent: &Agent, prompt: &str) -> RunOutput {
    agent
        .run_with("s", vec![Message::user(prompt)], None, true)
        .await
        .expect("run starts")
}

/// Replays the trace, checks conformance, and returns it as JSON Lines for the snapshot.
fn verified(trace: &Trace) -> String {
    assert_eq!(replay(trace), None, "trace must replay identically");
    for r in &trace.records {
        if let TraceRecord::Transition { transition, index } = r {
            assert!(
                transition.conforms(),
                "record {index}: {transition:?} is not a chart row"
            );
        }
    }
    // The header repeats every tool's JSON Schema; keep snapshots about behaviour.
    let mut t = trace.clone();
    t.header.tools = Default::default();
    t.header.config.tools = Default::default();
    t.to_jsonl()
}

fn count(sink: &VecSink, f: impl Fn(&AgentEvent) -> bool) -> usize {
    sink.events().iter().filter(|e| f(&e.event)).count()
}

#[tokio::test(start_paused = true)]
async fn happy_path() {
    let (agent, _) = agent(r#"{"turns": [{"text": "Hello there!"}]}"#, |_| {});
    let out = run(&agent, "hi").await;
    assert_eq!(out.result.outcome, Outcome::Completed);
    assert_eq!(out.result.final_text(), Some("Hello there!"));
    insta::assert_snapshot!(verified(out.trace.as_ref().expect("trace")));
}

#[tokio::test(start_paused = true)]
async fn tool_call() {
    let (agent, sink) = agent(
        &std::fs::read_to_string("examples/scripts/demo.json").expect("demo"),
        |_| {},
    );
    let out = run(&agent, "What is 2+3?").await;
    assert_eq!(out.result.outcome, Outcome::Completed);
    assert_eq!(out.result.final_text(), Some("The answer is 5."));
    assert_eq!(out.result.iterations, 2);
    assert_eq!(count(&sink, |e| matches!(e, AgentEvent::ToolEnd { .. })), 1);
    insta::assert_snapshot!(verified(out.trace.as_ref().expect("trace")));
}

#[tokio::test(start_paused = true)]
async fn retry_then_success() {
    let script = r#"{"turns": [{"errors": [{"status": 429, "retry_after_ms": 20}, {"status": 503}], "text": "ok"}]}"#;
    let (agent, sink) = agent(script, |_| {});
    let started = tokio::time::Instant::now();
    let out = run(&agent, "hi").await;
    assert_eq!(out.result.outcome, Outcome::Completed);
    assert_eq!(out.result.final_text(), Some("ok"));
    let retries: Vec<(u64, Option<u64>)> = sink
        .events()
        .iter()
        .filter_map(|e| match e.event {
            AgentEvent::Retry {
                delay_ms,
                retry_after_ms,
                ..
            } => Some((delay_ms, retry_after_ms)),
            _ => None,
        })
        .collect();
    // R-IN-1 (issue 30): the server's retry-after (20 ms) overrides the 1 s backoff and is not
    // jittered; the second retry, without a hint, uses the doubled backoff, cut by at most the
    // 25 % jitter (issue 12) drawn from the recorded seed.
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert_eq!(retries[0], (20, Some(20)), "{retries:?}");
    assert!((1_500..=2_000).contains(&retries[1].0), "{retries:?}");
    assert_eq!(retries[1].1, None, "{retries:?}");
    let waited = std::time::Duration::from_millis(retries.iter().map(|r| r.0).sum());
    assert!(started.elapsed() >= waited);
    insta::assert_snapshot!(verified(out.trace.as_ref().expect("trace")));
}

#[tokio::test(start_paused = true)]
async fn retries_exhausted() {
    let script = r#"{"turns": [{"errors": [{"status": 500}, {"status": 500}, {"status": 500}, {"status": 500}], "text": "never"}]}"#;
    let (agent, sink) = agent(script, |_| {});
    let out = run(&agent, "hi").await;
    assert_eq!(out.result.outcome, Outcome::Failed);
    assert_eq!(count(&sink, |e| matches!(e, AgentEvent::Retry { .. })), 3);
    assert_eq!(
        count(&sink, |e| matches!(e, AgentEvent::RunError { .. })),
        1
    );
    insta::assert_snapshot!(verified(out.trace.as_ref().expect("trace")));
}

#[tokio::test(start_paused = true)]
async fn not_retryable_fails_at_once() {
    let script = r#"{"turns": [{"errors": [{"status": 401}], "text": "never"}]}"#;
    let (agent, sink) = agent(script, |_| {});
    let out = run(&agent, "hi").await;
    assert_eq!(out.result.outcome, Outcome::Failed);
    assert_eq!(out.result.reason, "authentication");
    assert_eq!(count(&sink, |e| matches!(e, AgentEvent::Retry { .. })), 0);
}

#[tokio::test(start_paused = true)]
async fn stall_then_retry() {
    let (agent, sink) = agent(
        &std::fs::read_to_string("examples/scripts/stall_then_ok.json").expect("script"),
        |_| {},
    );
    let out = run(&agent, "hi").await;
    assert_eq!(out.result.outcome, Outcome::Completed);
    assert_eq!(
        count(&sink, |e| matches!(e, AgentEvent::StreamStalled { .. })),
        1
    );
    assert_eq!(
        count(&sink, |e| matches!(e, AgentEvent::ModelTurnRetried { .. })),
        1
    );
    assert_eq!(replay(out.trace.as_ref().expect("trace")), None);
}

#[tokio::test(start_paused = true)]
async fn disconnect_discards_partial_output() {
    let (agent, _) = agent(
        &std::fs::read_to_string("examples/scripts/disconnect_then_ok.json").expect("script"),
        |_| {},
    );
    let out = run(&agent, "hi").await;
    assert_eq!(out.result.outcome, Outcome::Completed);
    let trace = out.trace.expect("trace");
    // Nothing from a failed attempt is committed (R-IN-6): exactly one assistant entry, and
    // its text is the successful attempt's text only.
    let committed: Vec<String> = trace
        .records
        .iter()
        .filter_map(|r| match r {
            TraceRecord::Effect {
                effect:
                    agentloop_core::Effect::Persist {
                        entry: agentloop::store::Entry::Assistant { message, .. },
                    },
                ..
            } => Some(message.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(committed.len(), 1);
    assert_eq!(Some(committed[0].as_str()), out.result.final_text());
    assert_eq!(replay(&trace), None);
}

#[tokio::test(start_paused = true)]
async fn approval_rejected() {
    let (agent, sink) = agent(
        &std::fs::read_to_string("examples/scripts/demo.json").expect("demo"),
        |c| {
            c.step
                .approval
                .insert("calculator".into(), ApprovalPolicy::Always);
        },
    );
    let agent = Agent::builder()
        .builtin_tools()
        .model(ScriptedModel::demo())
        .deterministic()
        .sink(Arc::new(sink.clone()))
        .approver(Arc::new(|_: &agentloop::ToolCall| {
            Some(agentloop::ApprovalDecision::Rejected {
                reason: "not today".into(),
            })
        }))
        .config(agent.config().clone())
        .build();
    let out = run(&agent, "What is 2+3?").await;
    assert_eq!(out.result.outcome, Outcome::Completed);
    assert_eq!(
        count(&sink, |e| matches!(e, AgentEvent::ApprovalRequired { .. })),
        1
    );
    assert_eq!(
        count(&sink, |e| matches!(e, AgentEvent::ToolStart { .. })),
        0,
        "a rejected call never runs"
    );
    let denied = out.result.messages.iter().any(|m| {
        matches!(m, Message::Tool(r) if r.status == agentloop::ToolStatus::Denied && r.content.contains("not today"))
    });
    assert!(denied, "the model sees a denied result");
    insta::assert_snapshot!(verified(out.trace.as_ref().expect("trace")));
}

#[tokio::test(start_paused = true)]
async fn max_steps_reached() {
    // The model keeps calling tools; the last allowed step gets the reminder and no tools.
    let script = r#"{"turns": [
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]},
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+2"}}]},
        {"text": "Stopping here: 4."}
    ]}"#;
    let (agent, _) = agent(script, |c| c.max_steps = 2);
    let out = run(&agent, "count").await;
    assert_eq!(out.result.outcome, Outcome::Completed);
    assert_eq!(out.result.reason, "max_steps");
    let trace = out.trace.clone().expect("trace");
    let requests: Vec<_> = trace
        .records
        .iter()
        .filter_map(|r| match r {
            TraceRecord::Effect {
                effect: agentloop_core::Effect::CallModel { request },
                ..
            } => Some(request.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(requests.len(), 2);
    assert!(!requests[0].tools.is_empty());
    assert!(
        requests[1].tools.is_empty(),
        "no tools on the last step (R-OUT-5)"
    );
    assert!(
        matches!(requests[1].messages.last(), Some(Message::User { content, .. }) if content.contains("Maximum steps")),
        "the last step carries the reminder"
    );
    insta::assert_snapshot!(verified(&trace));
}

#[tokio::test(start_paused = true)]
async fn compaction() {
    let script = r#"{"turns": [
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]},
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+2"}}]},
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "3+3"}}]},
        {"text": "done"}
    ]}"#;
    let (agent, sink) = agent(script, |c| c.compact_threshold = Some(4));
    let out = run(&agent, "work").await;
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    assert!(count(&sink, |e| matches!(e, AgentEvent::CompactEnd { .. })) >= 1);
    // The pairing invariant survives compaction: every tool result follows its call.
    let trace = out.trace.clone().expect("trace");
    for r in &trace.records {
        if let TraceRecord::Effect {
            effect: agentloop_core::Effect::CallModel { request },
            ..
        } = r
        {
            assert_pairs(&request.messages);
            assert!(
                matches!(request.messages.first(), Some(Message::User { content, .. }) if content == "work"),
                "the original goal is pinned"
            );
        }
    }
    insta::assert_snapshot!(verified(&trace));
}

fn assert_pairs(messages: &[Message]) {
    for (i, m) in messages.iter().enumerate() {
        if let Message::Tool(r) = m {
            let owner = messages[..i].iter().rev().find_map(|m| match m {
                Message::Assistant(a) => Some(a),
                _ => None,
            });
            assert!(
                owner.is_some_and(|a| a.tool_calls.iter().any(|c| c.id == r.tool_call_id)),
                "tool result {} without its call",
                r.tool_call_id
            );
        }
        if let Message::Assistant(a) = m {
            for c in &a.tool_calls {
                let answered = messages[i + 1..]
                    .iter()
                    .take_while(|m| matches!(m, Message::Tool(_)))
                    .filter(|m| matches!(m, Message::Tool(r) if r.tool_call_id == c.id))
                    .count();
                assert_eq!(answered, 1, "call {} must have exactly one result", c.id);
            }
        }
    }
}

/// Abort mid-stream, driven event by event through the pure facade (the runtime's timing
/// cannot place an abort between two deltas deterministically).
#[test]
fn abort_mid_stream() {
    let cfg = RunConfig::default();
    let mut run = Run::new(cfg.clone());
    let mut trace = Trace::new(TraceHeader {
        timeouts: None,
        version: TRACE_VERSION,
        agentloop: "test".into(),
        session: "s".into(),
        config: cfg,
        tools: Default::default(),
    });
    let a = AttemptId {
        run_id: "run-1".into(),
        model_call_index: 1,
        attempt: 1,
    };
    let events = vec![
        Event::Start {
            run_id: "run-1".into(),
            history: vec![],
            input: vec![Message::user("tell me a story")],
            session_turns: 0,
        },
        Event::StreamOpened { attempt: a.clone() },
        Event::Delta {
            attempt: a.clone(),
            seq: 0,
            delta: MessageDelta::TextDelta {
                text: "Once upon".into(),
            },
        },
        Event::Delta {
            attempt: a.clone(),
            seq: 0,
            delta: MessageDelta::TextDelta {
                text: "Once upon".into(),
            },
        },
        Event::Abort {
            reason: "user pressed Ctrl-C".into(),
            kill: Default::default(),
        },
        Event::Delta {
            attempt: a,
            seq: 1,
            delta: MessageDelta::TextDelta {
                text: " a time".into(),
            },
        },
        // The store acknowledges the run-end entry: the run reports its end.
        Event::RunEndCommitted,
    ];
    for e in events {
        let step = run.handle(e.clone());
        trace.record(&e, &step);
    }
    let result = run.result().expect("terminal");
    assert_eq!(result.outcome, Outcome::Aborted);
    // The partial message was never committed.
    assert!(!result
        .messages
        .iter()
        .any(|m| matches!(m, Message::Assistant(_))));
    insta::assert_snapshot!(verified(&trace));
}

/// Stops after the first step that asked for tools (the default decider would continue).
fn stop_after_tools(o: &agentloop_core::react::Observation) -> agentloop_core::react::Decision {
    if o.has_tool_calls {
        agentloop_core::react::Decision::Stop
    } else {
        agentloop_core::react::default_decider(o)
    }
}

#[tokio::test(start_paused = true)]
async fn r_out_3_runtime_trace_names_its_decider_and_replays_only_with_it() {
    use agentloop::trace::TraceError;
    use agentloop_core::react::{DeciderRef, DeciderRegistry};
    use agentloop_core::trace::replay_with;
    let (agent, _) = agent(
        r#"{"turns": [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+3"}}]}, {"text": "5"}]}"#,
        |c| c.decider = DeciderRef::new("stop_after_tools", stop_after_tools),
    );
    let out = run(&agent, "What is 2+3?").await;
    assert_eq!(out.result.reason, "stopped", "the custom decider ran");
    let trace = out.trace.expect("trace");
    let parsed = Trace::parse(&trace.to_jsonl(), "runtime.jsonl").expect("parses");
    assert_eq!(parsed.header.config.decider.name(), "stop_after_tools");
    let registry = DeciderRegistry::new().with("stop_after_tools", stop_after_tools);
    assert_eq!(replay_with(&parsed, &registry).expect("registered"), None);
    assert!(matches!(
        replay_with(&parsed, &DeciderRegistry::new()),
        Err(TraceError::UnknownDecider { name, .. }) if name == "stop_after_tools"
    ));
    // The plain replay has only the default decider: it reports the trace as diverging at its
    // first record, without replaying it with the default decision.
    let d = replay(&parsed).expect("not identical");
    assert_eq!((d.index, d.replayed), (0, None));
}
