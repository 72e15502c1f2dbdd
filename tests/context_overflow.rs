//! R-OUT-6 / R-IN-2: a provider's context overflow shrinks the
//! context and the step is requested again — with the default configuration (no budget, no
//! message cap), through a live [`Session`], against a loopback HTTP server that answers
//! OpenAI's and Anthropic's real overflow bodies once a request body is over a size limit.
//! The run fails (`compaction_failed`) only when nothing but the pinned messages is left.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

#[path = "provider_support/mod.rs"]
mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentloop::provider::http::ProviderKind;
use agentloop::runtime::Agent;
use agentloop::session::{Session, SessionConfig};
use agentloop::Message;
use agentloop::{AgentEvent, Outcome};
use agentloop_core::react::LoopResult;
use serde_json::{json, Value};
use support::server::{config_for, model};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The answer to every accepted request: long enough that four turns fill the window.
const ANSWER_CHARS: usize = 1000;

/// How the server words its refusal.
#[derive(Clone, Copy, Debug)]
enum Refusal {
    /// OpenAI: 400 `context_length_exceeded`, naming the limit and the request's size.
    OpenAi,
    /// Anthropic: 400 `invalid_request_error` "prompt is too long: N tokens > M maximum".
    Anthropic,
    /// llama.cpp's OpenAI-compatible server: `exceed_context_size_error`, no figures in the
    /// message (the compaction shrinks by its default ratio).
    LlamaCpp,
    /// OpenAI's Responses API: 400 `context_length_exceeded` for the `input`.
    Responses,
}

impl Refusal {
    fn provider(self) -> ProviderKind {
        match self {
            Refusal::OpenAi | Refusal::LlamaCpp => ProviderKind::OpenAi,
            Refusal::Anthropic => ProviderKind::Anthropic,
            Refusal::Responses => ProviderKind::OpenAiResponses,
        }
    }

    /// The 400 body for a request of `sent` bytes over a limit of `limit` bytes (a token is
    /// about four bytes).
    fn body(self, limit: usize, sent: usize) -> String {
        let (limit, sent) = (limit / 4, sent / 4);
        match self {
            Refusal::OpenAi => json!({"error": {
                "message": format!("This model's maximum context length is {limit} tokens. However, your messages resulted in {sent} tokens. Please reduce the length of the messages."),
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
            Refusal::Anthropic => json!({"type": "error", "error": {
                "type": "invalid_request_error",
                "message": format!("prompt is too long: {sent} tokens > {limit} maximum")}}),
            Refusal::LlamaCpp => json!({"error": {
                "code": 400, "type": "exceed_context_size_error",
                "message": "the request exceeds the available context size, try increasing it",
                "n_prompt_tokens": sent, "n_ctx": limit}}),
            Refusal::Responses => json!({"error": {
                "message": format!("Your input exceeds the context window of this model ({limit} tokens; the input has {sent}). Please adjust your input and try again."),
                "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}}),
        }
        .to_string()
    }
}

/// One request the server read: its body's size and JSON.
#[derive(Clone, Debug)]
struct Seen {
    bytes: usize,
    body: Value,
    refused: bool,
}

/// A loopback server that refuses (HTTP 400, `refusal`'s body) every request whose body is
/// over `limit` bytes and streams a text answer to the others.
struct Overflowing {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Overflowing {
    async fn start(refusal: Refusal, limit: usize) -> Overflowing {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let log = log.clone();
                tokio::spawn(async move { serve(sock, refusal, limit, log).await });
            }
        });
        Overflowing { url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve(mut sock: TcpStream, refusal: Refusal, limit: usize, log: Arc<Mutex<Vec<Seen>>>) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        let Ok(n) = sock.read(&mut tmp).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        match sock.read(&mut tmp).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
    let bytes = buf.len() - head_end;
    let body: Value = serde_json::from_slice(&buf[head_end..]).unwrap_or(Value::Null);
    let refused = bytes > limit;
    log.lock().unwrap().push(Seen {
        bytes,
        body,
        refused,
    });
    let response = if refused {
        let body = refusal.body(limit, bytes);
        format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    } else {
        let sse = answer(refusal.provider());
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{sse}",
            sse.len()
        )
    };
    let _ = sock.write_all(response.as_bytes()).await;
    let _ = sock.shutdown().await;
}

/// A streamed text answer of [`ANSWER_CHARS`] characters.
fn answer(p: ProviderKind) -> String {
    let text = "x".repeat(ANSWER_CHARS);
    match p {
        ProviderKind::OpenAi => {
            let delta = json!({"id": "c", "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]});
            let stop = json!({"id": "c", "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
            format!("data: {delta}\n\ndata: {stop}\n\ndata: [DONE]\n\n")
        }
        ProviderKind::Anthropic => {
            let events = [
                (
                    "message_start",
                    json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "model": "claude-test", "stop_reason": null, "usage": {"input_tokens": 1, "output_tokens": 1}}}),
                ),
                (
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                ),
                (
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
                ),
                (
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": 0}),
                ),
                (
                    "message_delta",
                    json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 250}}),
                ),
                ("message_stop", json!({"type": "message_stop"})),
            ];
            events
                .iter()
                .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
                .collect()
        }
        ProviderKind::OpenAiResponses => {
            let delta =
                json!({"type": "response.output_text.delta", "item_id": "msg_1", "delta": text});
            let done = json!({"type": "response.completed", "response": {"id": "r", "status": "completed"}});
            format!("data: {delta}\n\ndata: {done}\n\n")
        }
        ProviderKind::Gemini => {
            let chunk = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                "finishReason": "STOP", "index": 0}]});
            format!("data: {chunk}\n\n")
        }
    }
}

/// A session over the provider `p` at `url`, with the agent's default configuration (no
/// context budget, no message cap).
fn session(p: ProviderKind, url: &str) -> Session {
    let agent = Agent::builder()
        .model_arc(Arc::from(model(p, config_for(p, url))))
        .build();
    Session::spawn(agent, SessionConfig::new("s").event_buffer_size(8192))
}

/// Prompts and waits for the run's end (20 s at most).
async fn prompt(s: &Session, text: &str) -> LoopResult {
    s.prompt(text).await.expect("prompt accepted");
    tokio::time::timeout(Duration::from_secs(20), s.wait_idle())
        .await
        .expect("the run ends");
    s.last_result().expect("a result")
}

/// The user texts of a recorded request, in order (both wire formats keep user messages as
/// `{"role": "user", "content": ...}`, content a string or text blocks; Anthropic's client
/// joins consecutive user messages into one message of several blocks).
/// The request's messages: Chat Completions' and Messages' `messages`, or Responses' `input`.
fn messages(body: &Value) -> Option<&Vec<Value>> {
    body["messages"].as_array().or(body["input"].as_array())
}

fn user_texts(body: &Value) -> Vec<String> {
    messages(body)
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| match &m["content"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str().map(String::from))
                .collect(),
            other => vec![other.to_string()],
        })
        .collect()
}

/// How many assistant messages a recorded request carries.
fn assistant_count(body: &Value) -> usize {
    messages(body)
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "assistant")
        .count()
}

/// The body limit: the fifth request (four turns of history) is over it, the fourth is not.
const LIMIT: usize = 4_000;

async fn fifth_prompt_is_compacted_and_retried(refusal: Refusal) {
    let server = Overflowing::start(refusal, LIMIT).await;
    let s = session(refusal.provider(), &server.url);
    for i in 1..=4 {
        let r = prompt(&s, &format!("question {i}")).await;
        assert_eq!(
            r.outcome,
            Outcome::Completed,
            "{refusal:?} prompt {i}: {:?}",
            r.error
        );
    }
    assert!(
        server.seen().iter().all(|r| !r.refused),
        "{refusal:?}: four turns fit"
    );
    let r = prompt(&s, "question 5").await;
    assert_eq!(
        r.outcome,
        Outcome::Completed,
        "{refusal:?}: the fifth prompt completes with the default configuration: {} {:?}",
        r.reason,
        r.error
    );
    assert_eq!(r.final_text().map(str::len), Some(ANSWER_CHARS));

    let seen = server.seen();
    assert_eq!(seen.len(), 6, "{refusal:?}: one refusal, one retry");
    let (refused, retried) = (&seen[4], &seen[5]);
    assert!(
        refused.refused,
        "{refusal:?}: the fifth request was too long"
    );
    assert!(!retried.refused, "{refusal:?}: the retried request fits");
    assert!(
        retried.bytes < refused.bytes,
        "{refusal:?}: the retried request is shorter ({} < {} bytes)",
        retried.bytes,
        refused.bytes
    );
    // The pinned task frontier stays: the original goal first, the latest request last;
    // the oldest answers went.
    let after = user_texts(&retried.body);
    assert_eq!(after.first().map(String::as_str), Some("question 1"));
    assert_eq!(after.last().map(String::as_str), Some("question 5"));
    assert_eq!(assistant_count(&refused.body), 4);
    assert!(assistant_count(&retried.body) < 4, "{refusal:?}");

    let events: Vec<AgentEvent> = s.recent_events().into_iter().map(|e| e.event).collect();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::ContextOverflow { .. })),
        "{refusal:?}: context_overflow reported"
    );
    assert!(events
        .iter()
        .any(|e| matches!(e, AgentEvent::CompactStart { reason, .. } if reason == "overflow")));
    let removed: Vec<usize> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::CompactEnd { removed } => Some(*removed),
            _ => None,
        })
        .collect();
    assert_eq!(removed.len(), 1, "{refusal:?}: one compaction");
    assert!(removed[0] > 0);
    // The run's context is the compacted one plus the new answer.
    assert!(
        matches!(r.messages.first(), Some(Message::User { content, .. }) if content == "question 1")
    );
}

#[tokio::test]
async fn r_out_6_openai_overflow_on_the_fifth_prompt_compacts_and_retries_by_default() {
    fifth_prompt_is_compacted_and_retried(Refusal::OpenAi).await;
}

#[tokio::test]
async fn r_out_6_anthropic_overflow_on_the_fifth_prompt_compacts_and_retries_by_default() {
    fifth_prompt_is_compacted_and_retried(Refusal::Anthropic).await;
}

#[tokio::test]
async fn r_out_6_openai_responses_overflow_on_the_fifth_prompt_compacts_and_retries_by_default() {
    fifth_prompt_is_compacted_and_retried(Refusal::Responses).await;
}

#[tokio::test]
async fn r_out_6_an_overflow_without_figures_shrinks_by_the_default_ratio() {
    fifth_prompt_is_compacted_and_retried(Refusal::LlamaCpp).await;
}

/// When even the pinned messages are over the limit, each refusal shrinks the context again
/// (every retried request shorter than the one before) until nothing more can go; then the
/// run fails with `compaction_failed`, not a loop.
#[tokio::test]
async fn r_out_6_an_overflow_that_persists_fails_once_nothing_more_can_go() {
    for refusal in [Refusal::OpenAi, Refusal::Anthropic] {
        let server = Overflowing::start(refusal, LIMIT).await;
        let s = session(refusal.provider(), &server.url);
        for i in 1..=4 {
            prompt(&s, &format!("question {i}")).await;
        }
        let huge = format!("question 5: {}", "y".repeat(LIMIT));
        let r = prompt(&s, &huge).await;
        assert_eq!(r.outcome, Outcome::Failed, "{refusal:?}: {}", r.reason);
        assert_eq!(r.reason, "compaction_failed", "{refusal:?}");
        let error = r
            .error
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(error.contains("cannot compact below budget"), "{error}");
        let fifth: Vec<usize> = server.seen()[4..].iter().map(|r| r.bytes).collect();
        assert!(
            fifth.len() >= 2,
            "{refusal:?}: shrunk and retried at least once: {fifth:?}"
        );
        assert!(
            fifth.windows(2).all(|w| w[1] < w[0]),
            "{refusal:?}: each retry is shorter: {fifth:?}"
        );
        let last = server.seen().last().cloned().expect("a request");
        assert_eq!(
            user_texts(&last.body),
            ["question 1".to_string(), huge.clone()],
            "{refusal:?}: only the pinned goal and request were left"
        );
    }
}

/// Runs one prompt of `prompt_bytes` through the OpenAI client named `gpt-4` (8,192-token
/// window, compaction point 80 % of it) against a loopback server; returns the result, the
/// requests the server read and the run's events.
async fn gpt4_run(prompt_bytes: usize) -> (LoopResult, Vec<Value>, Vec<AgentEvent>) {
    use support::server::{Reply, Server};
    let p = ProviderKind::OpenAi;
    let server = Server::start(vec![Reply::Sse {
        pieces: vec![answer(p).into_bytes()],
        gap: Duration::ZERO,
    }])
    .await;
    let client = agentloop::provider::http::build_model("gpt-4", config_for(p, &server.url))
        .expect("client");
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let agent = Agent::builder()
        .model(client)
        .sink(Arc::new(move |e: &agentloop::EventEnvelope| {
            seen.lock().unwrap().push(e.event.clone())
        }))
        .build();
    let prompt = "word ".repeat(prompt_bytes / 5);
    let out = agent.run("s", &prompt).await.expect("ran");
    let bodies = server.requests().into_iter().map(|r| r.body).collect();
    let events = events.lock().unwrap().clone();
    (out.result, bodies, events)
}

/// The compaction point (80 % of the window) is where compacting starts, not a limit: a
/// 28 KB prompt (about 7,000 tokens) to `gpt-4` cannot be compacted (it is all pinned) but
/// fits the 8,192-token window, so it is sent.
#[tokio::test]
async fn a_prompt_between_the_compaction_point_and_the_window_is_sent() {
    let (result, bodies, events) = gpt4_run(28_000).await;
    assert_eq!(result.outcome, Outcome::Completed, "{result:?}");
    assert_eq!(bodies.len(), 1, "one request reached the server");
    assert_eq!(bodies[0]["model"], "gpt-4");
    assert!(user_texts(&bodies[0]).iter().any(|t| t.len() >= 27_000));
    // The compaction was tried, removed nothing, and the run went on.
    assert!(events
        .iter()
        .any(|e| matches!(e, AgentEvent::CompactStart { .. })));
    assert!(events
        .iter()
        .any(|e| matches!(e, AgentEvent::CompactEnd { removed: 0 })));
}

/// A prompt over the whole window still fails before any request: it cannot fit.
#[tokio::test]
async fn a_prompt_over_the_window_fails_before_any_request() {
    let (result, bodies, _) = gpt4_run(40_000).await;
    assert_eq!(result.outcome, Outcome::Failed, "{result:?}");
    assert_eq!(result.reason, "compaction_failed");
    assert!(bodies.is_empty(), "{} requests", bodies.len());
}
