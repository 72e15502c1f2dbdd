//! Events (R-EVT-1): subscribe with replay from the ring buffer, type filters, lag notices;
//! hooks (R-EXT-1): a veto is an event, never an error of the loop.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use agentloop::hooks::{Hooks, ToolDecision};
use agentloop::session::{Session, SessionConfig, SessionError, SubscriptionItem};
use agentloop::AgentEvent;
use agentloop::EventEnvelope;
use agentloop::ToolCall;
use agentloop::{Message, ToolStatus};
use serde_json::json;
use support::*;

const TWO_TEXTS: &str = r#"{"turns": [{"text": "first answer"}, {"text": "second answer"}]}"#;

#[tokio::test(start_paused = true)]
async fn r_evt_1_subscribe_since_replays_missed_events_then_continues_live() {
    let s = session(builder(Slow::new(TWO_TEXTS)).build());
    s.prompt("one").await.expect("started");
    s.wait_idle().await;
    let first = history(&s);
    let run_start = first
        .iter()
        .find(|e| e.event.type_name() == "run_start")
        .expect("run_start")
        .index;
    // A client that saw everything up to run_start reconnects, interested in two types.
    let mut sub = s.subscribe(
        Some(run_start),
        Some(vec!["run_end".into(), "prompt_received".into()]),
    );
    let replayed = sub.drain();
    assert_eq!(replayed.len(), 1, "only run-1's run_end is after run_start");
    s.prompt("two").await.expect("started");
    s.wait_idle().await;
    let live: Vec<String> = sub
        .drain()
        .into_iter()
        .filter_map(|i| match i {
            SubscriptionItem::Event(e) => Some(e.event.type_name()),
            SubscriptionItem::Lagged(_) => None,
        })
        .collect();
    assert_eq!(live, vec!["prompt_received", "run_end"]);
    let mut again = s.subscribe(
        Some(run_start),
        Some(vec!["run_end".into(), "prompt_received".into()]),
    );
    let replay: Vec<_> = again
        .drain()
        .into_iter()
        .filter_map(|i| match i {
            SubscriptionItem::Event(e) => Some(e),
            SubscriptionItem::Lagged(_) => None,
        })
        .collect();
    insta::assert_snapshot!(transcript(&replay));
}

#[tokio::test(start_paused = true)]
async fn r_evt_1_indices_are_monotonic_and_gapless() {
    let s = session(builder(Slow::new(TWO_TEXTS)).build());
    let mut sub = s.subscribe(None, None);
    s.prompt("one").await.expect("started");
    s.prompt("two").await.expect("queued");
    s.wait_idle().await;
    let got: Vec<u64> = sub
        .drain()
        .into_iter()
        .filter_map(|i| match i {
            SubscriptionItem::Event(e) => Some(e.index),
            _ => None,
        })
        .collect();
    assert!(!got.is_empty());
    assert!(got.windows(2).all(|w| w[1] == w[0] + 1), "{got:?}");
}

#[tokio::test(start_paused = true)]
async fn r_evt_1_without_ring_buffer_since_reports_the_gap() {
    let s = Session::spawn(
        builder(Slow::new(TWO_TEXTS)).build(),
        SessionConfig::new("s"),
    );
    s.prompt("one").await.expect("started");
    s.wait_idle().await;
    let mut sub = s.subscribe(Some(0), None);
    match sub.drain().first() {
        Some(SubscriptionItem::Lagged(n)) => assert!(*n > 0),
        other => panic!("expected a lag notice, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn r_evt_1_slow_subscriber_lags_and_never_blocks_the_loop() {
    let mut config = SessionConfig::new("s");
    config.subscriber_capacity = 4;
    let s = Session::spawn(builder(Slow::new(TWO_TEXTS)).build(), config);
    let mut slow = s.subscribe(None, None); // never read during the run
    s.prompt("one").await.expect("started");
    s.wait_idle().await; // the run finished although nobody read
    let first = slow.recv().await.expect("item");
    assert!(
        matches!(first, SubscriptionItem::Lagged(n) if n > 0),
        "{first:?}"
    );
    assert!(
        matches!(slow.recv().await, Some(SubscriptionItem::Event(_))),
        "then it continues"
    );
}

struct Policy {
    seen: AtomicUsize,
}

impl Hooks for Policy {
    fn before_prompt(&self, text: &str) -> Result<(), String> {
        if text.contains("forbidden") {
            Err("no forbidden topics".into())
        } else {
            Ok(())
        }
    }
    fn before_steering(&self, _text: &str) -> Result<(), String> {
        Err("no steering today".into())
    }
    fn before_tool(&self, call: &ToolCall) -> ToolDecision {
        match call.arguments.get("expression").and_then(|e| e.as_str()) {
            Some("6/0") => ToolDecision::Block {
                reason: "division by zero is not allowed".into(),
            },
            Some("1+1") => ToolDecision::Modify {
                arguments: json!({"expression": "40+2"}),
            },
            _ => ToolDecision::Allow,
        }
    }
    fn on_event(&self, _event: &EventEnvelope) {
        self.seen.fetch_add(1, Ordering::Relaxed);
    }
}

fn hooked(script: &str) -> (Session, Arc<Policy>) {
    let policy = Arc::new(Policy {
        seen: AtomicUsize::new(0),
    });
    let agent = builder(Slow::new(script)).hooks(policy.clone()).build();
    (session(agent), policy)
}

#[tokio::test(start_paused = true)]
async fn r_ext_1_before_prompt_veto_is_an_event() {
    let (s, policy) = hooked(TWO_TEXTS);
    assert_eq!(
        s.prompt("a forbidden question").await,
        Err(SessionError::Rejected("no forbidden topics".into()))
    );
    let ev = history(&s);
    assert_eq!(count(&ev, "prompt_rejected"), 1);
    assert_eq!(count(&ev, "run_start"), 0);
    assert!(
        policy.seen.load(Ordering::Relaxed) >= 1,
        "on_event sees every event"
    );
}

#[tokio::test(start_paused = true)]
async fn r_ext_1_before_steering_veto_is_an_event() {
    let (s, _) = hooked(TWO_TEXTS);
    assert!(matches!(
        s.steer("go left").await,
        Err(SessionError::Rejected(_))
    ));
    assert!(history(&s).iter().any(|e| matches!(
        &e.event,
        AgentEvent::SteeringReceived {
            status: agentloop::SteeringStatus::RejectedHook,
            ..
        }
    )));
}

/// Two calls: the `Policy` hook blocks the first and rewrites the second's arguments.
const BLOCK_AND_MODIFY: &str = r#"{"turns": [
        {"tool_calls": [
            {"id": "a", "name": "calculator", "arguments": {"expression": "6/0"}},
            {"id": "b", "name": "calculator", "arguments": {"expression": "1+1"}}
        ]},
        {"text": "done"}
    ]}"#;

#[tokio::test(start_paused = true)]
async fn r_ext_1_before_tool_block_and_modify() {
    let (s, _) = hooked(BLOCK_AND_MODIFY);
    s.prompt("compute").await.expect("started");
    s.wait_idle().await;
    let results: Vec<(ToolStatus, String)> = s
        .last_result()
        .expect("result")
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.status, r.content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(results[0].0, ToolStatus::Denied, "the model sees the block");
    assert!(results[0].1.contains("division by zero"));
    assert_eq!(results[1], (ToolStatus::Completed, "42".into()));
    let ev = history(&s);
    assert_eq!(count(&ev, "tool_blocked"), 1);
    assert_eq!(count(&ev, "run_error"), 0, "a veto is not an error");
    insta::assert_snapshot!(transcript(&ev));
}

/// R-EXT-1, R-TRACE-2: the hooks' verdicts are machine inputs (`tool_gated`, rows
/// `tools_gate_*`), so the trace holds them and replays without any hook installed.
#[tokio::test(start_paused = true)]
async fn r_ext_1_tool_hook_verdicts_are_in_the_trace_and_replay() {
    let policy = Arc::new(Policy {
        seen: AtomicUsize::new(0),
    });
    let agent = builder(Slow::new(BLOCK_AND_MODIFY)).hooks(policy).build();
    let out = agent
        .run_with("s", vec![Message::user("compute")], None, true)
        .await
        .expect("run");
    let trace = out.trace.expect("recorded");
    let verdicts: Vec<(String, agentloop_core::GateVerdict)> = trace
        .records
        .iter()
        .filter_map(|r| match r {
            agentloop_core::trace::TraceRecord::Input {
                event:
                    agentloop_core::Event::ToolGated {
                        tool_call_id,
                        verdict,
                    },
                ..
            } => Some((tool_call_id.clone(), verdict.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        verdicts,
        [
            (
                "a".to_string(),
                agentloop_core::GateVerdict::Block {
                    reason: "division by zero is not allowed".into()
                }
            ),
            (
                "b".to_string(),
                agentloop_core::GateVerdict::Modify {
                    arguments: json!({"expression": "40+2"})
                }
            ),
        ]
    );
    assert_eq!(agentloop::trace::replay(&trace), None);
}

/// An async guardrail (R-EXT-1): it waits (as a model call would) before it decides;
/// the loop goes on meanwhile, and its verdicts are the machine's inputs, so the trace replays.
struct SlowReviewer;

#[agentloop::async_trait]
impl Hooks for SlowReviewer {
    async fn before_tool_async(&self, call: &ToolCall) -> ToolDecision {
        // The second call is reviewed faster than the first: verdicts arrive out of order.
        let ms = if call.id == "a" { 300 } else { 100 };
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        match call.arguments.get("expression").and_then(|e| e.as_str()) {
            Some("6/0") => ToolDecision::Block {
                reason: "the reviewer said no".into(),
            },
            _ => ToolDecision::Allow,
        }
    }
    fn before_compact(&self, messages: &[Message]) -> Result<(), String> {
        Err(format!("keep all {} messages", messages.len()))
    }
}

#[tokio::test(start_paused = true)]
async fn issue_13_r_ext_1_async_before_tool_and_a_before_compact_veto() {
    let model =
        agentloop::provider::scripted::ScriptedModel::from_json_str(BLOCK_AND_MODIFY, "inline")
            .expect("script");
    let agent = builder(model)
        .hooks(Arc::new(SlowReviewer))
        .compact_after_messages(0)
        .build();
    let started = tokio::time::Instant::now();
    let out = agent
        .run_with("s", vec![Message::user("compute")], None, true)
        .await
        .expect("ran");
    assert_eq!(
        out.result.outcome,
        agentloop::Outcome::Completed,
        "{:?}",
        out.result
    );
    // Both reviews ran at once (300 ms, not 400).
    assert!(
        started.elapsed() < std::time::Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    let results: Vec<_> = out
        .result
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.tool_call_id.clone(), r.status, r.content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0].0, "a");
    assert_eq!(results[0].1, ToolStatus::Denied);
    assert!(results[0].2.contains("the reviewer said no"), "{results:?}");
    assert_eq!(
        (results[1].0.as_str(), results[1].1),
        ("b", ToolStatus::Completed)
    );
    let trace = out.trace.expect("trace");
    let records = serde_json::to_string(&trace.records).expect("json");
    // Every compaction the threshold asked for was vetoed; none ran.
    assert!(records.contains("\"compaction_vetoed\""), "vetoed");
    assert!(!records.contains("\"compaction_done\""));
    assert_eq!(
        records.matches("\"compaction_vetoed\"").count(),
        records.matches("\"compact_vetoed\"").count()
    );
    assert_eq!(
        agentloop::trace::replay(&trace),
        None,
        "replays without the hooks"
    );
}

/// How an attempt's stream ended, as `after_model_call` reported it.
type StreamEnd = Result<(), String>;

/// R-EXT-1, every hook point has a test: `after_model_call` sees each attempt's end
/// (a failed attempt that is retried, then the one that finished), `after_tool` rewrites a
/// result before the model sees it, and `before_model_call` sees every attempt first.
#[derive(Default)]
struct Observer {
    before: std::sync::Mutex<Vec<(u32, u32)>>,
    after: std::sync::Mutex<Vec<(u32, u32, StreamEnd)>>,
}

impl Hooks for Observer {
    fn before_model_call(&self, request: &mut agentloop::model::ModelRequest) {
        if let Ok(mut b) = self.before.lock() {
            b.push((request.model_call_index, request.attempt));
        }
    }
    fn after_model_call(
        &self,
        request: &agentloop::model::ModelRequest,
        outcome: Result<(), &str>,
    ) {
        if let Ok(mut a) = self.after.lock() {
            a.push((
                request.model_call_index,
                request.attempt,
                outcome.map_err(str::to_string),
            ));
        }
    }
    fn gates_tools(&self) -> bool {
        false
    }
    fn after_tool(&self, _call_id: &str, name: &str, status: ToolStatus, content: &mut String) {
        if name == "calculator" && status == ToolStatus::Completed {
            *content = format!("{content} (checked)");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn issue_13_r_ext_1_after_model_call_and_after_tool_hooks() {
    let observer = Arc::new(Observer::default());
    let script = r#"{"turns": [
        {"errors": [{"status": 503}], "tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "2+3"}}]},
        {"text": "The answer is {{last_tool_result}}."}
    ]}"#;
    let agent = builder(Slow::new(script)).hooks(observer.clone()).build();
    let out = agent.run("s", "What is 2+3?").await.expect("ran");
    assert_eq!(out.result.final_text(), Some("The answer is 5 (checked)."));
    let before = observer.before.lock().expect("before").clone();
    assert_eq!(before, [(1, 1), (1, 2), (2, 1)]);
    let after = observer.after.lock().expect("after").clone();
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(
        matches!(&after[0], (1, 1, Err(e)) if e.contains("503")),
        "{after:?}"
    );
    assert_eq!((after[1].0, after[1].1, after[1].2.clone()), (1, 2, Ok(())));
    assert_eq!(after[2].2, Ok(()));
}
