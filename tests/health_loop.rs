//! Loop health and accounting: large-result offload (R-TOOL-5), doom loops through the session
//! (R-TOOL-4), metrics (R-OBS), usage and cost (R-CTX-3), compaction strategies (R-OUT-4..6).

mod support;

use std::sync::Arc;

use agentloop::compaction::{llm_summary, sliding_window, SUMMARY_PREFIX};
use agentloop::model::{DeltaStream, Model, ModelRequest};
use agentloop::session::{KillTools, Session, SessionConfig, Status};
use agentloop::tools::ToolRegistry;
use agentloop::ModelError;
use agentloop::{AgentEvent, Outcome};
use agentloop::{Message, MessageDelta, ToolStatus};
use async_trait::async_trait;
use support::*;

fn tool_results(s: &Session) -> Vec<(ToolStatus, String)> {
    s.last_result()
        .expect("a result")
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.status, r.content.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn r_tool_5_large_result_is_offloaded_with_a_preview() {
    let dir = tempfile::tempdir().expect("tempdir");
    let big = "line of output\n".repeat(1_000);
    let mut tools = ToolRegistry::new();
    tools.insert(Arc::new(SleepTool::new("dump", 10).returning(big.clone())));
    let agent = builder(Slow::new(
        r#"{"turns": [{"tool_calls": [{"id": "d1", "name": "dump"}]}, {"text": "read it"}]}"#,
    ))
    .tools(tools)
    .offload(dir.path(), 4_096)
    .build();
    let s = session(agent);
    s.prompt("dump").await.expect("started");
    s.wait_idle().await;
    let ev = history(&s);
    let path = ev
        .iter()
        .find_map(|e| match &e.event {
            AgentEvent::LargeResultOffloaded { path, bytes, .. } => {
                assert_eq!(*bytes, big.len());
                Some(path.clone())
            }
            _ => None,
        })
        .expect("large_result_offloaded");
    assert_eq!(std::fs::read_to_string(&path).expect("file"), big);
    let (status, content) = tool_results(&s).remove(0);
    assert_eq!(status, ToolStatus::Completed);
    assert!(content.len() < 2_000, "the model sees a preview");
    assert!(content.contains(&path), "and the reference");
    assert!(content.starts_with("line of output"));
}

#[tokio::test(start_paused = true)]
async fn r_tool_5_small_results_stay_inline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = builder(Slow::new(
        r#"{"turns": [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+2"}}]}, {"text": "4"}]}"#,
    ))
    .offload(dir.path(), 4_096)
    .build();
    let s = session(agent);
    s.prompt("2+2").await.expect("started");
    s.wait_idle().await;
    assert_eq!(count(&history(&s), "large_result_offloaded"), 0);
    assert_eq!(tool_results(&s), vec![(ToolStatus::Completed, "4".into())]);
}

#[tokio::test(start_paused = true)]
async fn r_tool_4_doom_loop_asks_a_human_through_the_session() {
    let same = r#"{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]}"#;
    let script = format!(r#"{{"turns": [{same}, {same}, {same}, {{"text": "stopped looping"}}]}}"#);
    let s = session(builder(Slow::new(&script)).build());
    let mut sub = s.subscribe(None, None);
    s.prompt("loop").await.expect("started");
    let detected = wait_for(&mut sub, "loop_detected").await;
    assert!(
        matches!(detected.event, AgentEvent::LoopDetected { ref action, .. } if action == "ask")
    );
    wait_for(&mut sub, "approval_required").await;
    assert_eq!(s.status(), Status::AwaitingApproval);
    let pending = s.pending_approvals();
    assert_eq!(pending.len(), 1);
    s.reject(&pending[0], "you are looping").expect("rejected");
    s.wait_idle().await;
    let results = tool_results(&s);
    assert_eq!(results.len(), 3);
    assert_eq!(results[2].0, ToolStatus::Denied);
    assert_eq!(s.metrics().loops_detected, 1);
}

#[tokio::test(start_paused = true)]
async fn r_obs_metrics_are_readable_from_the_handle() {
    let script = r#"{"turns": [
        {"errors": [{"status": 503}], "tool_calls": [{"name": "calculator", "arguments": {"expression": "2+3"}}, {"name": "calculator", "arguments": {"expression": "1/0"}}]},
        {"text": "done"}
    ]}"#;
    let s = session(builder(Slow::new(script)).build());
    s.prompt("go").await.expect("started");
    s.wait_idle().await;
    let m = s.metrics();
    assert_eq!(m.runs, 1);
    assert_eq!(m.outcomes.get("completed"), Some(&1));
    assert_eq!(m.steps, 2);
    assert_eq!(m.retries, 1);
    assert_eq!(m.retry_reasons.len(), 1);
    let calc = &m.tools["calculator"];
    assert_eq!((calc.calls, calc.completed, calc.errors), (2, 1, 1));
    assert!((calc.success_rate() - 0.5).abs() < 1e-9);
    assert!(
        m.transitions
            .get("process:Calling->Streaming")
            .copied()
            .unwrap_or(0)
            >= 2
    );
    // Virtual time: the model opens after 100 ms, so Calling lasted at least that long.
    assert!(
        m.time_in_state_ms
            .get("process:Calling")
            .copied()
            .unwrap_or(0)
            >= 100
    );
    assert!(m.usage.output_tokens > 0);
}

fn priced(config: SessionConfig) -> SessionConfig {
    // 1 USD per input token, 2 per output token: easy to check.
    config.price("scripted", 1_000_000.0, 2_000_000.0)
}

#[tokio::test(start_paused = true)]
async fn r_ctx_3_usage_and_cost_per_step_and_run() {
    let s = Session::spawn(
        builder(Slow::new(
            r#"{"turns": [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+3"}}]}, {"text": "5"}]}"#,
        ))
        .build(),
        priced(SessionConfig::new("s").event_buffer_size(256)),
    );
    s.prompt("2+3").await.expect("started");
    s.wait_idle().await;
    let reports: Vec<(Option<u32>, u64, u64, Option<f64>)> = history(&s)
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::UsageReport {
                model_call_index,
                usage,
                cost_usd,
                ..
            } => Some((
                *model_call_index,
                usage.input_tokens,
                usage.output_tokens,
                *cost_usd,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(reports.len(), 3, "two steps and the run: {reports:?}");
    for (_, input, output, cost) in &reports {
        assert_eq!(*cost, Some((*input + 2 * *output) as f64));
    }
    let (steps_in, steps_out) = reports[..2]
        .iter()
        .fold((0, 0), |(i, o), r| (i + r.1, o + r.2));
    assert_eq!((reports[2].1, reports[2].2), (steps_in, steps_out));
    assert_eq!(reports[2].0, None);
    assert!((s.metrics().cost_usd - reports[2].3.unwrap_or_default()).abs() < 1e-6);
}

#[tokio::test(start_paused = true)]
async fn r_ctx_3_usage_is_kept_on_abort() {
    let mut tools = ToolRegistry::new();
    tools.insert(Arc::new(SleepTool::new("sleepy", 60_000)));
    let s = Session::spawn(
        builder(Slow::new(
            r#"{"turns": [{"text": "working", "tool_calls": [{"name": "sleepy"}]}, {"text": "never"}]}"#,
        ))
        .tools(tools)
        .build(),
        priced(SessionConfig::new("s").event_buffer_size(256)),
    );
    let mut sub = s.subscribe(None, None);
    s.prompt("go").await.expect("started");
    wait_for(&mut sub, "tool_start").await;
    s.abort("stop", KillTools::Killable, false)
        .await
        .expect("abort");
    s.wait_idle().await;
    let ev = history(&s);
    let run_total = ev
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            AgentEvent::UsageReport {
                model_call_index: None,
                usage,
                cost_usd,
                ..
            } => Some((*usage, *cost_usd)),
            _ => None,
        })
        .expect("a run usage report after abort");
    assert!(run_total.0.output_tokens > 0);
    assert!(run_total.1.unwrap_or_default() > 0.0);
    assert_eq!(s.last_result().map(|r| r.outcome), Some(Outcome::Aborted));
}

// ---- compaction strategies ----------------------------------------------------------------

const FOUR_TOOL_STEPS: &str = r#"{"turns": [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]},
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+2"}}]},
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "3+3"}}]},
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "4+4"}}]},
    {"text": "done"}
]}"#;

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
    }
}

#[tokio::test(start_paused = true)]
async fn r_out_4_sliding_window_keeps_goal_and_recent_steps() {
    let s = session(
        builder(Slow::new(FOUR_TOOL_STEPS))
            .compactor(sliding_window(2))
            .configure(|c| {
                c.compact_threshold = Some(6);
                c.step.doom_loop = None;
            })
            .build(),
    );
    s.prompt("work hard").await.expect("started");
    s.wait_idle().await;
    let r = s.last_result().expect("result");
    assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    assert!(count(&history(&s), "compact_end") >= 1);
    assert!(
        matches!(r.messages.first(), Some(Message::User { content, .. }) if content == "work hard")
    );
    assert_pairs(&r.messages);
}

#[test]
fn r_out_6_sliding_window_never_splits_pairs_and_fails_clearly() {
    let msgs = vec![
        Message::system("sys"),
        Message::user("goal"),
        Message::user("x".repeat(4_000)),
    ];
    // The pure computation behind `compaction::sliding_window`, the core's.
    let err = agentloop_core::context::SlidingWindow { window: 0 }
        .apply(&msgs, Some(10), None)
        .expect_err("cannot fit: everything is pinned");
    assert!(err.contains("cannot compact below budget"), "{err}");
}

/// A model that answers every request with a fixed summary.
struct Summarizer;

#[async_trait]
impl Model for Summarizer {
    fn name(&self) -> String {
        "summarizer".into()
    }
    async fn stream(&self, request: ModelRequest) -> Result<DeltaStream, ModelError> {
        assert!(request.tools.is_empty());
        let seen = request
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::User { content, .. } => Some(content.lines().count()),
                _ => None,
            })
            .sum::<usize>();
        Ok(Box::pin(futures::stream::iter(vec![
            Ok(MessageDelta::TextDelta {
                text: format!("computed several sums ({seen} lines)"),
            }),
            Ok(MessageDelta::Finish),
        ])))
    }
}

#[tokio::test(start_paused = true)]
async fn r_out_4_llm_summary_replaces_older_entries() {
    let s = session(
        builder(Slow::new(FOUR_TOOL_STEPS))
            .compactor(llm_summary(Arc::new(Summarizer), 2))
            .configure(|c| {
                c.compact_threshold = Some(6);
                c.step.doom_loop = None;
            })
            .build(),
    );
    s.prompt("work hard").await.expect("started");
    s.wait_idle().await;
    let r = s.last_result().expect("result");
    assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    assert!(
        r.messages.iter().any(
            |m| matches!(m, Message::User { content, .. } if content.starts_with(SUMMARY_PREFIX))
        ),
        "the summary is in the context: {:?}",
        r.messages
    );
    assert!(
        matches!(r.messages.first(), Some(Message::User { content, .. }) if content == "work hard")
    );
    assert_pairs(&r.messages);
}

#[tokio::test]
async fn r_out_6_llm_summary_fails_clearly_when_nothing_can_be_summarized() {
    let c = llm_summary(Arc::new(Summarizer), 2);
    let msgs = vec![Message::user("goal"), Message::user("latest")];
    let err = c
        .compact(&msgs, Some(1), None)
        .await
        .expect_err("must fail");
    assert!(err.contains("cannot compact below budget"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn r_out_6_compaction_that_cannot_fit_fails_the_run() {
    let s = session(
        builder(Slow::new(FOUR_TOOL_STEPS))
            .compactor(sliding_window(1))
            .configure(|c| {
                c.compact_threshold = Some(1);
                // A window the tool steps outgrow: a context that still fit it would be sent
                // uncompacted (the message cap is where compacting starts, not a limit).
                c.context_window = Some(10);
                c.step.doom_loop = None;
            })
            .build(),
    );
    s.prompt("work hard").await.expect("started");
    s.wait_idle().await;
    let r = s.last_result().expect("result");
    assert_eq!(r.outcome, Outcome::Failed);
    assert!(
        matches!(&r.error, Some(agentloop::RunError::Compaction { message }) if message.contains("cannot compact")),
        "{r:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn r_out_5_last_step_has_no_tools_and_ends_with_text() {
    let s = session(
        builder(Slow::new(
            r#"{"turns": [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]}, {"text": "final words"}]}"#,
        ))
        .max_steps(2)
        .build(),
    );
    s.prompt("go").await.expect("started");
    s.wait_idle().await;
    let r = s.last_result().expect("result");
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(r.final_text(), Some("final words"));
}
