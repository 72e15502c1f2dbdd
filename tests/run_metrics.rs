//! R-OBS: every `Agent` run returns its metrics (`RunOutput::metrics`), and a session
//! aggregates them over its runs (`Session::metrics()`). Virtual time (tokio's
//! paused clock behind the `TokioClock` port) makes the latencies exact.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use agentloop::runtime::RunMetrics;
use agentloop::Message;
use agentloop::Outcome;
use support::*;

/// Step 1: a 503 with a 150 ms hint, then the `sleep` tool; step 2: the answer.
const SCRIPT: &str = r#"{"per_prompt": true, "turns": [
  {"errors": [{"status": 503, "retry_after_ms": 150}],
   "text": "Let me wait.", "tool_calls": [{"name": "sleep", "arguments": {}}]},
  {"text": "Done waiting."}
]}"#;

#[tokio::test(start_paused = true)]
async fn r_obs_an_agent_run_returns_its_metrics_with_the_right_counts() {
    let agent = builder(Slow::new(SCRIPT))
        .tool(Arc::new(SleepTool::new("sleep", 250)))
        .build();
    let out = agent
        .run_with("s", vec![Message::user("wait for me")], None, false)
        .await
        .expect("run starts");
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    let m = &out.metrics;
    assert_eq!(m.runs, 1);
    assert_eq!(m.steps, 2);
    assert_eq!(m.model_requests, 3, "two steps, one retried");
    assert_eq!(m.retries, 1);
    assert_eq!(
        m.retries_by_kind,
        BTreeMap::from([("server_error".into(), 1)])
    );
    assert_eq!(m.retries_after_hint, 1);
    assert_eq!((m.tool_calls, m.tool_errors), (1, 0));
    // Times are the clock port's: the tool sleeps 250 ms of virtual time.
    assert_eq!(m.tool_latency, [250]);
    // Every attempt that streamed has a time to first token: the model opens after 100 ms
    // and yields a delta every 50 ms.
    assert_eq!(m.time_to_first_token.len(), 2);
    assert!(
        m.time_to_first_token.iter().all(|&t| t >= 150),
        "{:?}",
        m.time_to_first_token
    );
    // Step 1: the failed attempt's 100 ms, the 150 ms hint, then the second attempt.
    let steps = &m.step_latency;
    assert_eq!(steps.len(), 2);
    assert!(steps[0] >= 100 + 150 + 150, "{steps:?}");
    assert!(steps[0] > steps[1], "{steps:?}");
    assert_eq!(
        RunMetrics::percentile_ms(&m.step_latency, 100),
        Some(steps[0])
    );
    assert_eq!(
        RunMetrics::percentile_ms(&m.step_latency, 50),
        Some(steps[1])
    );
    // Tokens: what the steps reported, the run's own total.
    assert_eq!(Some(m.usage), out.result.usage);
    assert!(m.usage.input_tokens > 0 && m.usage.output_tokens > 0);
    assert_eq!((m.compactions, m.compaction_tokens_removed), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn r_obs_compactions_count_messages_and_estimated_tokens_removed() {
    let script = r#"{"turns": [
      {"text": "one", "tool_calls": [{"name": "sleep", "arguments": {}}]},
      {"text": "two", "tool_calls": [{"name": "sleep", "arguments": {}}]},
      {"text": "three", "tool_calls": [{"name": "sleep", "arguments": {}}]},
      {"text": "done"}
    ]}"#;
    let agent = builder(Slow::new(script))
        .tool(Arc::new(
            SleepTool::new("sleep", 10).returning("x".repeat(4_000)),
        ))
        .compact_after_messages(4)
        .build();
    let out = agent
        .run_with("s", vec![Message::user("go")], None, false)
        .await
        .expect("run starts");
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    let m = &out.metrics;
    assert!(m.compactions >= 1, "{m:?}");
    assert!(m.compaction_messages_removed >= 1, "{m:?}");
    assert!(
        m.compaction_tokens_removed >= 1_000,
        "a removed 4 000-character result is about 1 000 tokens: {m:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn r_obs_a_session_aggregates_the_metrics_of_its_runs() {
    let agent = builder(Slow::new(SCRIPT))
        .tool(Arc::new(SleepTool::new("sleep", 250)))
        .build();
    let s = session(agent);
    s.prompt("first").await.expect("prompt");
    s.wait_idle().await;
    s.prompt("second").await.expect("prompt");
    s.wait_idle().await;
    let m = s.metrics();
    assert_eq!(m.runs, 2);
    assert_eq!(m.steps, 4);
    assert_eq!(m.model_requests, 6);
    assert_eq!(
        m.retries_by_kind,
        BTreeMap::from([("server_error".into(), 2)])
    );
    assert_eq!(m.tool_latency, [250, 250]);
    assert_eq!(m.step_latency.len(), 4);
    assert_eq!(m.time_to_first_token.len(), 4);
    assert_eq!(m.usage, s.metrics().usage);
}
