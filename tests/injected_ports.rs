//! The runtime's clock, id and asker ports are a program's to inject (R-ARCH-4): this file is a
//! downstream crate, so it compiles only while `Clock`, `Ids`, `UserAsker` and `Question` and
//! the builder's `clock`/`ids`/`asker` are public. Each port is then seen doing its job: the
//! clock stamps every event and runs every timer, the ids name every run and seed its jitter
//! (recorded in the trace), the asker answers `ask_user` outside a session.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agentloop::async_trait;
use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::{Agent, Clock, Ids, Question, UserAsker};
use agentloop::{AgentEvent, EventEnvelope, Message, Outcome, ToolStatus};

/// Timestamps from a fixed instant plus a counter; every sleep is recorded, then slept on
/// tokio's timers.
struct RecordingClock {
    base: u64,
    reads: AtomicU64,
    sleeps: Mutex<Vec<u64>>,
}

#[async_trait]
impl Clock for RecordingClock {
    fn now_ms(&self) -> u64 {
        self.base + self.reads.fetch_add(1, Ordering::SeqCst)
    }
    async fn sleep(&self, ms: u64) {
        self.sleeps.lock().expect("sleeps").push(ms);
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await
    }
}

/// Run ids `job-0`, `job-1`, ... and a fixed jitter seed.
struct JobIds(AtomicU64);

impl Ids for JobIds {
    fn run_id(&self) -> String {
        format!("job-{}", self.0.fetch_add(1, Ordering::SeqCst))
    }
    fn jitter_seed(&self, _run_id: &str) -> u64 {
        4242
    }
}

/// A model that fails once with a 503, then answers "ok".
fn retrying() -> ScriptedModel {
    ScriptedModel::from_json_str(
        r#"{"turns": [{"errors": [{"status": 503}], "text": "ok"}]}"#,
        "inline",
    )
    .expect("script")
}

fn events(sink: &Arc<Mutex<Vec<EventEnvelope>>>) -> Vec<EventEnvelope> {
    sink.lock().expect("events").clone()
}

#[tokio::test]
async fn an_injected_clock_stamps_every_event_and_runs_every_timer() {
    let clock = Arc::new(RecordingClock {
        base: 1_700_000_000_000,
        reads: AtomicU64::new(0),
        sleeps: Mutex::new(Vec::new()),
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let agent = Agent::builder()
        .model(retrying())
        .clock(clock.clone())
        .sink(Arc::new(move |e: &EventEnvelope| {
            sink.lock().expect("events").push(e.clone())
        }))
        .configure(|c| {
            c.step.retry.initial_backoff_ms = 5;
            c.step.retry.max_backoff_ms = 10;
        })
        .build();
    let out = agent.run("s", "hi").await.expect("ran");
    assert_eq!(out.result.outcome, Outcome::Completed);
    let events = events(&seen);
    assert!(!events.is_empty());
    let reads = clock.reads.load(Ordering::SeqCst);
    assert!(
        events
            .iter()
            .all(|e| e.ts_ms >= 1_700_000_000_000 && e.ts_ms < 1_700_000_000_000 + reads),
        "every timestamp is the injected clock's: {:?}",
        events.iter().map(|e| e.ts_ms).collect::<Vec<_>>()
    );
    // The retry's backoff is a timer of the machine, slept on the injected clock.
    let delay = events
        .iter()
        .find_map(|e| match e.event {
            AgentEvent::Retry { delay_ms, .. } => Some(delay_ms),
            _ => None,
        })
        .expect("a retry");
    let sleeps = clock.sleeps.lock().expect("sleeps").clone();
    assert!(sleeps.contains(&delay), "{delay} in {sleeps:?}");
}

#[tokio::test]
async fn injected_ids_name_every_run_and_seed_its_jitter() {
    let agent = Agent::builder()
        .model(retrying())
        .ids(Arc::new(JobIds(AtomicU64::new(0))))
        .configure(|c| {
            c.step.retry.initial_backoff_ms = 1;
            c.step.retry.max_backoff_ms = 2;
        })
        .build();
    let first = agent
        .run_with("s", vec![Message::user("hi")], None, true)
        .await
        .expect("ran");
    assert_eq!(first.run_id, "job-0");
    assert_eq!(first.result.outcome, Outcome::Completed);
    let trace = first.trace.expect("trace");
    assert_eq!(trace.header.config.step.retry.jitter_seed, Some(4242));
    assert_eq!(agent.run("s", "again").await.expect("ran").run_id, "job-1");
}

/// Answers with the last option offered.
struct LastOption(Mutex<Vec<Question>>);

#[async_trait]
impl UserAsker for LastOption {
    async fn ask(&self, question: &Question) -> Option<String> {
        self.0.lock().expect("asked").push(question.clone());
        question.options.last().cloned()
    }
}

#[tokio::test]
async fn an_injected_asker_answers_ask_user_without_a_session() {
    let asker = Arc::new(LastOption(Mutex::new(Vec::new())));
    let agent = Agent::builder()
        .model(
            ScriptedModel::from_json_str(
                r#"{"turns": [
                    {"tool_calls": [{"id": "q1", "name": "ask_user",
                        "arguments": {"question": "Which colour?", "options": ["red", "blue"]}}]},
                    {"text": "You chose {{last_tool_result}}."}
                ]}"#,
                "inline",
            )
            .expect("script"),
        )
        .ask_user(None)
        .asker(asker.clone())
        .build();
    let out = agent.run("s", "pick").await.expect("ran");
    assert_eq!(out.result.final_text(), Some("You chose blue."));
    let result = out
        .result
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Tool(r) if r.tool_call_id == "q1" => Some(r.status),
            _ => None,
        })
        .expect("a result for q1");
    assert_eq!(result, ToolStatus::Completed);
    let asked = asker.0.lock().expect("asked").clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].reference, "q1");
    assert_eq!(asked[0].question, "Which colour?");
}
