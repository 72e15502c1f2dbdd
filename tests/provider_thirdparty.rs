//! End-to-end against a third-party mock LLM server — someone else's reading of the wire
//! formats: `@copilotkit/aimock` (npm, MIT, no dependencies, works offline). Its `llmock` CLI
//! serves fixture-scripted OpenAI Chat Completions, Anthropic Messages and Gemini
//! `streamGenerateContent` streams.
//!
//! Install and start (what CI does):
//!
//! ```sh
//! npm install -g @copilotkit/aimock@1.43.0
//! llmock --host 127.0.0.1 --port 0 --fixtures fixtures.json --chunk-size 5
//! # prints: [aimock] aimock server listening on http://127.0.0.1:PORT
//! ```
//!
//! The test looks for the binary in `$AIMOCK_BIN`, else `llmock` on `PATH`; when neither is
//! there it prints a notice and passes without running (the CI script installs it).
#![allow(clippy::disallowed_methods)] // tests and benchmarks may read the wall clock

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentloop::model::{Model, ModelParams, ModelRequest};
use agentloop::provider::decode::MessageAssembler;
use agentloop::provider::http::{build_model, HttpConfig, ProviderKind};
use agentloop::tools::ToolSpec;
use agentloop::{AssistantMessage, FinishReason, Message, MessageDelta, ToolResult, ToolStatus};
use futures::StreamExt;
use serde_json::json;

const FIXTURES: &str = r#"{"fixtures": [
  {"match": {"userMessage": "Say hello."},
   "response": {"content": "Hello from the mock.", "usage": {"promptTokenCount": 11, "candidatesTokenCount": 4}}},
  {"match": {"userMessage": "What is 6 times 7?", "hasToolResult": true},
   "response": {"content": "The answer is 42."}},
  {"match": {"userMessage": "What is 6 times 7?"},
   "response": {"toolCalls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}}
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
    if let Ok(p) = std::env::var("AIMOCK_BIN") {
        if !p.is_empty() {
            return Some(p);
        }
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
        println!("NOTICE: skipping third-party mock test: `llmock` (npm @copilotkit/aimock) not installed and AIMOCK_BIN unset");
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let fixtures = dir.path().join("fixtures.json");
    std::fs::write(&fixtures, FIXTURES).unwrap();
    let mut child = Command::new(&bin)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--chunk-size",
            "5",
            "--fixtures",
        ])
        .arg(&fixtures)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
    let stdout = child.stdout.take().unwrap();
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

fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        run_id: "run-tp".into(),
        model_call_index: 1,
        attempt: 1,
        session_turn: 0,
        model: String::new(),
        system: Some("You are a calculator assistant.".into()),
        messages: messages.into(),
        tools: vec![ToolSpec {
            name: "calculator".into(),
            description: "Evaluates an arithmetic expression".into(),
            parameters: json!({"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}),
        }]
        .into(),
        params: ModelParams::default(),
    }
}

async fn turn(model: &dyn Model, messages: Vec<Message>) -> AssistantMessage {
    let mut s = model.stream(request(messages)).await.expect("stream opens");
    let mut asm = MessageAssembler::new();
    let mut last = None;
    while let Some(item) = s.next().await {
        let d = item.expect("no stream error");
        asm.push(&d);
        last = Some(d);
    }
    assert_eq!(last, Some(MessageDelta::Finish));
    assert!(asm.is_complete());
    asm.message()
}

async fn tool_call_turn_then_answer(model: &dyn Model) {
    let user = Message::user("What is 6 times 7?");
    let first = turn(model, vec![user.clone()]).await;
    assert_eq!(first.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(first.tool_calls.len(), 1);
    let call = &first.tool_calls[0];
    assert_eq!(call.name, "calculator");
    assert_eq!(call.arguments, json!({"expression": "6*7"}));
    assert!(call.invalid_arguments.is_none());
    assert!(!call.id.is_empty());
    let result = Message::Tool(ToolResult {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        content: "42".into(),
        status: ToolStatus::Completed,
    });
    let second = turn(model, vec![user, Message::Assistant(first.clone()), result]).await;
    assert_eq!(second.text, "The answer is 42.");
    assert!(second.tool_calls.is_empty());
    assert_eq!(second.finish_reason, Some(FinishReason::Stop));
}

#[tokio::test]
async fn openai_client_against_aimock() {
    let Some(server) = start() else { return };
    let cfg = HttpConfig::new(ProviderKind::OpenAi)
        .with_base_url(format!("{}/v1", server.base))
        .with_api_key("sk-test-not-a-real-key-000000");
    let model = build_model("gpt-4o", cfg).unwrap();
    tool_call_turn_then_answer(&model).await;
}

#[tokio::test]
async fn anthropic_client_against_aimock() {
    let Some(server) = start() else { return };
    let cfg = HttpConfig::new(ProviderKind::Anthropic)
        .with_base_url(server.base.clone())
        .with_api_key("sk-ant-test-not-a-real-key-000000");
    let model = build_model("claude-sonnet-4-5", cfg).unwrap();
    tool_call_turn_then_answer(&model).await;
}

/// Gemini through its own path (`/v1beta/models/{model}:streamGenerateContent?alt=sse`): the
/// calls come as `functionCall` parts (no id: the client derives one), the result goes back as
/// a `functionResponse`, which the mock must read for the answer's fixture to match.
#[tokio::test]
async fn gemini_client_against_aimock() {
    let Some(server) = start() else { return };
    let cfg = HttpConfig::new(ProviderKind::Gemini)
        .with_base_url(format!("{}/v1beta", server.base))
        .with_api_key("gemini-test-not-a-real-key-000000");
    let model = build_model("gemini-2.0-flash", cfg).unwrap();
    assert_eq!(model.name(), "gemini:gemini-2.0-flash");
    tool_call_turn_then_answer(&model).await;

    let hello = turn(&model, vec![Message::user("Say hello.")]).await;
    assert_eq!(hello.text, "Hello from the mock.");
    assert_eq!(hello.finish_reason, Some(FinishReason::Stop));
    let usage = hello.usage.expect("usage");
    assert_eq!((usage.input_tokens, usage.output_tokens), (11, 4));
}
