//! The real clients against a real HTTP/1.1 server on 127.0.0.1: recorded streams replayed
//! split at arbitrary byte boundaries, and injected faults (429 with `retry-after-ms`, 500,
//! 529, 401, connection reset mid-stream, stall, no response headers, refused connection).
//!
//! The server is a small hand-written HTTP/1.1 responder on tokio rather than hyper/axum:
//! the faults under test (a reset after N body bytes, headers that never come, a body that
//! stops mid-chunk) are exactly what a well-behaved server framework will not do.
#![allow(clippy::disallowed_methods)] // tests and benchmarks may read the wall clock

#[path = "provider_support/mod.rs"]
mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentloop::error::{ErrorKind, ModelError};
use agentloop::message::{Message, MessageDelta};
use agentloop::model::{Model, ModelParams, ModelRequest};
use agentloop::provider::anthropic::AnthropicModel;
use agentloop::provider::http::{HttpConfig, ProviderKind};
use agentloop::provider::openai::OpenAiModel;
use agentloop::tools::ToolSpec;
use futures::StreamExt;
use serde_json::json;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const KEY: &str = "sk-test-SUPERSECRETKEY0123456789";

/// What the server does with one connection.
#[derive(Clone)]
enum Reply {
    /// 200 `text/event-stream`, chunked; each piece written and flushed on its own.
    Sse { pieces: Vec<Vec<u8>>, gap: Duration },
    /// A complete response with this status, headers and body.
    Status {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// Headers and these body pieces, then a TCP reset.
    ResetAfter { pieces: Vec<Vec<u8>> },
    /// Headers and these body pieces, then silence for `hold`.
    StallAfter {
        pieces: Vec<Vec<u8>>,
        hold: Duration,
    },
    /// Reads the request and answers nothing for `hold`.
    NoHeaders { hold: Duration },
    /// Reads the request and closes the connection without a byte.
    Close,
}

#[derive(Debug, Clone)]
struct Recorded {
    head: String,
    body: serde_json::Value,
}

struct Server {
    url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl Server {
    /// Serves `replies` in order, one per connection; further connections get a 500.
    async fn start(replies: Vec<Reply>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        tokio::spawn(async move {
            let mut replies = replies.into_iter();
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                let reply = replies.next().unwrap_or(Reply::Status {
                    status: 500,
                    headers: vec![],
                    body: "{}".into(),
                });
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    serve(sock, reply, recorded).await;
                });
            }
        });
        Server {
            url: format!("http://{addr}"),
            requests,
        }
    }

    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

async fn read_request(sock: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body = serde_json::from_slice(&buf[head_end..]).unwrap_or(serde_json::Value::Null);
    Some(Recorded { head, body })
}

async fn write_piece(sock: &mut TcpStream, piece: &[u8]) -> std::io::Result<()> {
    if piece.is_empty() {
        return Ok(()); // a zero-size chunk would end the body
    }
    sock.write_all(format!("{:x}\r\n", piece.len()).as_bytes())
        .await?;
    sock.write_all(piece).await?;
    sock.write_all(b"\r\n").await?;
    sock.flush().await
}

const SSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";

async fn serve(mut sock: TcpStream, reply: Reply, recorded: Arc<Mutex<Vec<Recorded>>>) {
    sock.set_nodelay(true).ok();
    let Some(req) = read_request(&mut sock).await else {
        return;
    };
    recorded.lock().unwrap().push(req);
    match reply {
        Reply::Sse { pieces, gap } => {
            if sock.write_all(SSE_HEAD).await.is_err() {
                return;
            }
            for p in pieces {
                if write_piece(&mut sock, &p).await.is_err() {
                    return;
                }
                if !gap.is_zero() {
                    tokio::time::sleep(gap).await;
                }
            }
            let _ = sock.write_all(b"0\r\n\r\n").await;
            let _ = sock.shutdown().await;
        }
        Reply::Status {
            status,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock.write_all(body.as_bytes()).await;
            let _ = sock.shutdown().await;
        }
        Reply::ResetAfter { pieces } => {
            let _ = sock.write_all(SSE_HEAD).await;
            for p in pieces {
                let _ = write_piece(&mut sock, &p).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            #[allow(deprecated)] // linger 0 does not block: it makes close() send RST
            let _ = sock.set_linger(Some(Duration::ZERO));
            drop(sock);
        }
        Reply::StallAfter { pieces, hold } => {
            let _ = sock.write_all(SSE_HEAD).await;
            for p in pieces {
                let _ = write_piece(&mut sock, &p).await;
            }
            tokio::time::sleep(hold).await;
        }
        Reply::NoHeaders { hold } => tokio::time::sleep(hold).await,
        Reply::Close => drop(sock),
    }
}

fn request(model: &str) -> ModelRequest {
    ModelRequest {
        run_id: "run-1".into(),
        model_call_index: 1,
        attempt: 1,
        session_turn: 0,
        model: model.into(),
        system: Some("You are terse.".into()),
        messages: vec![Message::user("What is 2+2?")],
        tools: vec![ToolSpec {
            name: "calculator".into(),
            description: "Evaluates arithmetic".into(),
            parameters: json!({"type": "object", "properties": {"expression": {"type": "string"}}}),
        }],
        params: ModelParams::default(),
    }
}

fn config(p: ProviderKind, server: &Server) -> HttpConfig {
    let base = match p {
        ProviderKind::OpenAi => format!("{}/v1", server.url),
        ProviderKind::Anthropic => server.url.clone(),
    };
    let mut c = HttpConfig::new(p).with_base_url(base).with_api_key(KEY);
    c.connect_timeout = Duration::from_secs(2);
    c.first_byte_timeout = Duration::from_secs(5);
    c
}

fn model(p: ProviderKind, cfg: HttpConfig) -> Box<dyn Model> {
    match p {
        ProviderKind::OpenAi => Box::new(OpenAiModel::new("gpt-test", cfg).unwrap()),
        ProviderKind::Anthropic => Box::new(AnthropicModel::new("claude-test", cfg).unwrap()),
    }
}

/// Runs one request; returns the deltas and the error that ended the stream, if any.
async fn run(
    p: ProviderKind,
    cfg: HttpConfig,
) -> Result<(Vec<MessageDelta>, Option<ModelError>), ModelError> {
    let m = model(p, cfg);
    let mut s = m.stream(request("")).await?;
    let mut deltas = Vec::new();
    while let Some(item) = s.next().await {
        match item {
            Ok(d) => deltas.push(d),
            Err(e) => {
                assert!(s.next().await.is_none(), "an error ends the stream");
                return Ok((deltas, Some(e)));
            }
        }
    }
    Ok((deltas, None))
}

/// Deterministic pseudo-random cut points (xorshift), so a failure names its seed.
fn cuts(seed: u64, len: usize, n: usize) -> Vec<usize> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x as usize) % (len + 1)
        })
        .collect()
}

/// The deltas a stream yields when errors are split off as `Err` items.
fn expected_items(p: ProviderKind, body: &[u8]) -> (Vec<MessageDelta>, Option<ErrorKind>) {
    let mut d = deltas_whole(p, body);
    match d.last() {
        Some(MessageDelta::Error { error }) => {
            let k = error.kind;
            d.pop();
            (d, Some(k))
        }
        _ => (d, None),
    }
}

async fn replay_all(p: ProviderKind, prefix: &str) {
    for (name, body) in fixtures(prefix) {
        for seed in 0..4u64 {
            let pieces = split_at_points(&body, &cuts(seed, body.len(), 20));
            let server = Server::start(vec![Reply::Sse {
                pieces,
                gap: Duration::from_millis(1),
            }])
            .await;
            let (deltas, err) = run(p, config(p, &server))
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let (want, want_err) = expected_items(p, &body);
            assert_eq!(deltas, want, "{name} seed {seed}");
            assert_eq!(err.map(|e| e.kind), want_err, "{name} seed {seed}");
        }
    }
}

#[tokio::test]
async fn openai_recorded_streams_replayed_with_arbitrary_splits() {
    replay_all(ProviderKind::OpenAi, "openai_").await;
}

#[tokio::test]
async fn anthropic_recorded_streams_replayed_with_arbitrary_splits() {
    replay_all(ProviderKind::Anthropic, "anthropic_").await;
}

#[tokio::test]
async fn openai_request_carries_key_model_stream_and_tools() {
    let server = Server::start(vec![Reply::Sse {
        pieces: vec![fixture("openai_text.sse")],
        gap: Duration::ZERO,
    }])
    .await;
    let (deltas, err) = run(ProviderKind::OpenAi, config(ProviderKind::OpenAi, &server))
        .await
        .unwrap();
    assert!(err.is_none());
    assert_eq!(text_of(&deltas), "Hello, wörld é😀!");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let head = reqs[0].head.to_ascii_lowercase();
    assert!(
        head.starts_with("post /v1/chat/completions http/1.1"),
        "{head}"
    );
    assert!(head.contains(&format!(
        "authorization: bearer {}",
        KEY.to_ascii_lowercase()
    )));
    assert!(head.contains("accept: text/event-stream"));
    let b = &reqs[0].body;
    assert_eq!(b["model"], "gpt-test");
    assert_eq!(b["stream"], true);
    assert_eq!(b["messages"][0]["role"], "system");
    assert_eq!(b["tools"][0]["function"]["name"], "calculator");
}

#[tokio::test]
async fn anthropic_request_carries_key_and_version_headers() {
    let server = Server::start(vec![Reply::Sse {
        pieces: vec![fixture("anthropic_tool_use.sse")],
        gap: Duration::ZERO,
    }])
    .await;
    let (deltas, err) = run(
        ProviderKind::Anthropic,
        config(ProviderKind::Anthropic, &server),
    )
    .await
    .unwrap();
    assert!(err.is_none());
    assert_eq!(deltas.last(), Some(&MessageDelta::Finish));
    let reqs = server.requests();
    let head = reqs[0].head.to_ascii_lowercase();
    assert!(head.starts_with("post /v1/messages http/1.1"), "{head}");
    assert!(head.contains(&format!("x-api-key: {}", KEY.to_ascii_lowercase())));
    assert!(head.contains("anthropic-version: 2023-06-01"));
    assert!(!head.contains("authorization:"));
    assert_eq!(reqs[0].body["system"], "You are terse.");
    assert_eq!(reqs[0].body["tools"][0]["input_schema"]["type"], "object");
}

#[tokio::test]
async fn status_429_with_retry_after_ms_is_rate_limited_with_the_hint() {
    let server = Server::start(vec![Reply::Status {
        status: 429,
        headers: vec![("retry-after-ms", "50".into()), ("content-type", "application/json".into())],
        body: r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#.into(),
    }])
    .await;
    let e = run(ProviderKind::OpenAi, config(ProviderKind::OpenAi, &server))
        .await
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::RateLimited);
    assert_eq!(e.retry_after_ms, Some(50));
    assert_eq!(e.http_status, Some(429));
    assert!(e.retryable());
    assert_eq!(
        server.requests().len(),
        1,
        "the client never retries by itself (R-IN-6)"
    );
}

#[tokio::test]
async fn status_500_and_529_and_quota() {
    let server = Server::start(vec![
        Reply::Status { status: 500, headers: vec![], body: r#"{"error":{"message":"boom","type":"server_error"}}"#.into() },
        Reply::Status { status: 529, headers: vec![("retry-after", "1".into())], body: r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.into() },
        Reply::Status { status: 429, headers: vec![], body: r#"{"error":{"message":"quota","type":"insufficient_quota","code":"insufficient_quota"}}"#.into() },
    ])
    .await;
    let e = run(ProviderKind::OpenAi, config(ProviderKind::OpenAi, &server))
        .await
        .err()
        .unwrap();
    assert_eq!((e.kind, e.http_status), (ErrorKind::ServerError, Some(500)));
    assert!(e.message.contains("boom"));
    let e = run(
        ProviderKind::Anthropic,
        config(ProviderKind::Anthropic, &server),
    )
    .await
    .err()
    .unwrap();
    assert_eq!(
        (e.kind, e.retry_after_ms),
        (ErrorKind::Overloaded, Some(1000))
    );
    let e = run(ProviderKind::OpenAi, config(ProviderKind::OpenAi, &server))
        .await
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::QuotaExhausted);
    assert!(!e.retryable());
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn status_401_fails_clearly_without_the_key() {
    // A hostile server echoes the key back, in full and partly masked.
    let body = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {KEY} ({}****{})","type":"invalid_request_error","code":"invalid_api_key"}}}}"#,
        &KEY[..12],
        &KEY[KEY.len() - 4..]
    );
    for p in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
        let server = Server::start(vec![Reply::Status {
            status: 401,
            headers: vec![],
            body: body.clone(),
        }])
        .await;
        let e = run(p, config(p, &server)).await.err().unwrap();
        assert_eq!(e.kind, ErrorKind::Authentication);
        assert!(!e.retryable());
        let shown = format!("{e} {e:?} {}", serde_json::to_string(&e).unwrap());
        assert!(!shown.contains("SUPERSECRET"), "{shown}");
        assert!(!shown.contains(&KEY[..12]), "{shown}");
        assert!(
            shown.contains("HTTP 401") && shown.contains("Incorrect API key"),
            "{shown}"
        );
    }
}

#[tokio::test]
async fn connection_reset_mid_stream_is_a_retryable_connection_error() {
    let body = fixture("openai_text.sse");
    // Cut inside the third event, after "Hello" has been sent whole.
    let cut = String::from_utf8_lossy(&body).find("wörld").unwrap();
    let server = Server::start(vec![Reply::ResetAfter {
        pieces: vec![body[..cut].to_vec()],
    }])
    .await;
    let (deltas, err) = run(ProviderKind::OpenAi, config(ProviderKind::OpenAi, &server))
        .await
        .unwrap();
    let e = err.expect("an error ends the stream");
    assert_eq!(e.kind, ErrorKind::Connection, "{e}");
    assert!(e.retryable());
    assert!(
        !e.message.contains(&server.url),
        "no URL in transport errors: {e}"
    );
    assert!(
        deltas.contains(&MessageDelta::TextDelta {
            text: "Hello".into()
        }),
        "deltas before the reset arrive"
    );
    assert!(!deltas.contains(&MessageDelta::Finish));
}

#[tokio::test]
async fn body_ending_cleanly_without_terminal_evidence_is_incomplete() {
    let server = Server::start(vec![Reply::Sse {
        pieces: vec![fixture("anthropic_incomplete.sse")],
        gap: Duration::ZERO,
    }])
    .await;
    let (_, err) = run(
        ProviderKind::Anthropic,
        config(ProviderKind::Anthropic, &server),
    )
    .await
    .unwrap();
    assert_eq!(err.map(|e| e.kind), Some(ErrorKind::IncompleteStream));
}

#[tokio::test]
async fn in_stream_overloaded_error_under_200() {
    let server = Server::start(vec![Reply::Sse {
        pieces: vec![fixture("anthropic_overloaded.sse")],
        gap: Duration::ZERO,
    }])
    .await;
    let (deltas, err) = run(
        ProviderKind::Anthropic,
        config(ProviderKind::Anthropic, &server),
    )
    .await
    .unwrap();
    let e = err.unwrap();
    assert_eq!((e.kind, e.http_status), (ErrorKind::Overloaded, None));
    assert_eq!(text_of(&deltas), "Partial");
}

#[tokio::test]
async fn stall_is_left_to_the_runtime_unless_a_stall_timeout_is_set() {
    let body = fixture("openai_text.sse");
    let first = body[..300].to_vec();
    // Default: the client itself does not time out; the stream just waits (the runtime's
    // stall timer decides).
    let server = Server::start(vec![Reply::StallAfter {
        pieces: vec![first.clone()],
        hold: Duration::from_secs(3),
    }])
    .await;
    let m = model(ProviderKind::OpenAi, config(ProviderKind::OpenAi, &server));
    let mut s = m.stream(request("")).await.unwrap();
    assert_eq!(s.next().await.unwrap().unwrap(), MessageDelta::StartStep);
    let waited = tokio::time::timeout(Duration::from_millis(300), async {
        while let Some(item) = s.next().await {
            if item.is_err() {
                return;
            }
        }
    })
    .await;
    assert!(waited.is_err(), "no delta and no error during the stall");
    // With the optional client stall timeout: a Timeout error after about that long.
    let server = Server::start(vec![Reply::StallAfter {
        pieces: vec![first],
        hold: Duration::from_secs(3),
    }])
    .await;
    let mut cfg = config(ProviderKind::OpenAi, &server);
    cfg.stall_timeout = Some(Duration::from_millis(200));
    let t0 = Instant::now();
    let (_, err) = run(ProviderKind::OpenAi, cfg).await.unwrap();
    let e = err.unwrap();
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert!(e.message.contains("stalled"), "{e}");
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

#[tokio::test]
async fn no_response_headers_is_a_first_byte_timeout() {
    let server = Server::start(vec![Reply::NoHeaders {
        hold: Duration::from_secs(3),
    }])
    .await;
    let mut cfg = config(ProviderKind::Anthropic, &server);
    cfg.first_byte_timeout = Duration::from_millis(250);
    let t0 = Instant::now();
    let e = run(ProviderKind::Anthropic, cfg).await.err().unwrap();
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert!(e.retryable());
    assert!(e.message.contains("no response headers"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn connection_closed_without_a_response() {
    let server = Server::start(vec![Reply::Close]).await;
    let e = run(ProviderKind::OpenAi, config(ProviderKind::OpenAi, &server))
        .await
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::Connection, "{e}");
    assert!(e.retryable());
}

#[tokio::test]
async fn connection_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let cfg = HttpConfig::new(ProviderKind::OpenAi)
        .with_base_url(format!("http://{addr}/v1"))
        .with_api_key(KEY);
    let e = run(ProviderKind::OpenAi, cfg).await.err().unwrap();
    assert_eq!(e.kind, ErrorKind::Connection, "{e}");
    assert!(e.message.contains("connect"), "{e}");
    assert!(!e.message.contains("SUPERSECRET"));
}

#[tokio::test]
async fn json_error_body_under_200_is_classified() {
    let server = Server::start(vec![
        Reply::Status {
            status: 200,
            headers: vec![("content-type", "application/json".into())],
            body: r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#.into(),
        },
        Reply::Status {
            status: 200,
            headers: vec![("content-type", "application/json".into())],
            body: r#"{"id":"x","choices":[{"message":{"content":"not streamed"}}]}"#.into(),
        },
    ])
    .await;
    let e = run(ProviderKind::OpenAi, config(ProviderKind::OpenAi, &server))
        .await
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::ContextOverflow);
    let e = run(ProviderKind::OpenAi, config(ProviderKind::OpenAi, &server))
        .await
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::ServerError);
}
