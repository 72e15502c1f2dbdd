//! Malformed answers against a third-party mock server's fault injection: `@copilotkit/aimock`
//! (npm; see `provider_thirdparty.rs` for installing it) answers a fixture's `malformedRate: 1`
//! chaos with HTTP 200 `application/json` `{malformed json: <<<chaos>>>`, what a proxy's
//! glitch looks like. Through the runtime, on both wire formats: a malformed answer is
//! retried once, so a glitch followed by a good answer completes; the same malformed answer
//! twice fails the run at once with a typed `malformed_response`, not after every retry.
//!
//! Skipped with a notice when `llmock` is not installed (`$AIMOCK_BIN`, else `PATH`), unless
//! `AGENTLOOP_REQUIRE_AIMOCK` is set (CI).
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentloop::provider::http::{build_model, HttpConfig, ProviderKind};
use agentloop::runtime::Agent;
use agentloop::ErrorKind;
use agentloop::{AgentEvent, Outcome};
use agentloop_core::process::RetryPolicy;
use agentloop_core::react::LoopResult;

/// `glitch once`: the first request gets the malformed-JSON fault, the second the answer
/// (aimock's per-fixture `sequenceIndex`); `always garbled`: every request gets the fault.
const FIXTURES: &str = r#"{"fixtures": [
  {"match": {"userMessage": "glitch once", "sequenceIndex": 0},
   "response": {"content": "unused"}, "chaos": {"malformedRate": 1}},
  {"match": {"userMessage": "glitch once", "sequenceIndex": 1},
   "response": {"content": "Recovered after a glitch."}},
  {"match": {"userMessage": "always garbled"},
   "response": {"content": "never seen"}, "chaos": {"malformedRate": 1}}
]}"#;

/// The mock server process; killed (by its own pid) on drop.
struct MockServer {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find_binary() -> Option<String> {
    if let Some(p) = std::env::var_os("AIMOCK_BIN").filter(|p| !p.is_empty()) {
        return Some(p.to_string_lossy().into_owned());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("llmock"))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}

fn start() -> Option<MockServer> {
    let Some(bin) = find_binary() else {
        assert!(
            std::env::var("AGENTLOOP_REQUIRE_AIMOCK").is_err(),
            "AGENTLOOP_REQUIRE_AIMOCK is set but llmock was not found (AIMOCK_BIN / PATH)"
        );
        println!("NOTICE: skipping aimock fault test: `llmock` (npm @copilotkit/aimock) not installed and AIMOCK_BIN unset");
        return None;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let fixtures = dir.path().join("fixtures.json");
    std::fs::write(&fixtures, FIXTURES).expect("fixtures written");
    let mut child = Command::new(&bin)
        .args(["--host", "127.0.0.1", "--port", "0", "--fixtures"])
        .arg(&fixtures)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
    let stdout = child.stdout.take().expect("stdout piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(i) = line.find("http://127.0.0.1:") {
                let _ = tx.send(line[i..].trim().to_string());
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let base = loop {
        if let Ok(url) = rx.recv_timeout(Duration::from_millis(100)) {
            break url;
        }
        assert!(
            Instant::now() < deadline,
            "{bin} did not report its address"
        );
    };
    Some(MockServer {
        child,
        base,
        _dir: dir,
    })
}

/// Runs `prompt` on a fresh agent over provider `p` at `server` (3 retries, 1 ms backoff);
/// returns the result and how many model requests the run sent (1 + its `retry` events).
async fn run(p: ProviderKind, server: &MockServer, prompt: &str) -> (LoopResult, usize) {
    let config = match p {
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => HttpConfig::new(p)
            .with_base_url(format!("{}/v1", server.base))
            .with_api_key("sk-test-not-a-real-key-000000"),
        ProviderKind::Anthropic => HttpConfig::new(p)
            .with_base_url(server.base.clone())
            .with_api_key("sk-ant-test-not-a-real-key-000000"),
        ProviderKind::Gemini => HttpConfig::new(p)
            .with_base_url(format!("{}/v1beta", server.base))
            .with_api_key("gemini-test-not-a-real-key-000000"),
    };
    let name = match p {
        ProviderKind::Anthropic => "claude-sonnet-4-5",
        ProviderKind::Gemini => "gemini-2.0-flash",
        _ => "gpt-4o",
    };
    let model: Arc<dyn agentloop::model::Model> =
        Arc::new(build_model(name, config).expect("client"));
    let retries = Arc::new(Mutex::new(0usize));
    let counter = retries.clone();
    let agent = Agent::builder()
        .model_arc(model)
        .sink(Arc::new(move |e: &agentloop::EventEnvelope| {
            if matches!(e.event, AgentEvent::Retry { .. }) {
                *counter.lock().expect("counter") += 1;
            }
        }))
        .configure(|c| {
            c.step.retry = RetryPolicy {
                max_retries: 3,
                initial_backoff_ms: 1,
                max_backoff_ms: 2,
                ..RetryPolicy::default()
            }
        })
        .build();
    let out = tokio::time::timeout(Duration::from_secs(20), agent.run("s", prompt))
        .await
        .expect("the run ends")
        .expect("run starts");
    let requests = 1 + *retries.lock().expect("counter");
    (out.result, requests)
}

async fn a_glitch_is_retried_and_a_repeated_one_fails_fast(p: ProviderKind) {
    let Some(server) = start() else { return };
    let (result, requests) = run(p, &server, "glitch once").await;
    assert_eq!(
        result.outcome,
        Outcome::Completed,
        "{p:?}: {:?}",
        result.error
    );
    assert_eq!(result.final_text(), Some("Recovered after a glitch."));
    assert_eq!(requests, 2, "{p:?}: one retry");

    let (result, requests) = run(p, &server, "always garbled").await;
    assert_eq!(result.outcome, Outcome::Failed, "{p:?}");
    assert_eq!(result.reason, "malformed_response");
    let error = result
        .error
        .as_ref()
        .and_then(|e| e.model_error())
        .expect("a typed model error");
    assert_eq!(error.kind, ErrorKind::MalformedResponse);
    assert!(
        error.message.contains("<<<chaos>>>")
            && error
                .message
                .contains("the retry got a malformed answer too"),
        "{p:?}: {}",
        error.message
    );
    assert_eq!(requests, 2, "{p:?}: the second identical failure is final");
}

#[tokio::test]
async fn openai_a_malformed_answer_from_aimock_is_retried_once() {
    a_glitch_is_retried_and_a_repeated_one_fails_fast(ProviderKind::OpenAi).await;
}

#[tokio::test]
async fn openai_responses_a_malformed_answer_from_aimock_is_retried_once() {
    a_glitch_is_retried_and_a_repeated_one_fails_fast(ProviderKind::OpenAiResponses).await;
}

#[tokio::test]
async fn anthropic_a_malformed_answer_from_aimock_is_retried_once() {
    a_glitch_is_retried_and_a_repeated_one_fails_fast(ProviderKind::Anthropic).await;
}
