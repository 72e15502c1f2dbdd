//! The real clients against a real HTTP/1.1 server on 127.0.0.1: recorded streams replayed
//! split at arbitrary byte boundaries, and injected faults (429 with `retry-after-ms`, 500,
//! 529, 401, connection reset mid-stream, stall, no response headers, refused connection).
//!
//! The server is the loopback responder of `provider_support/server.rs`.
#![allow(clippy::disallowed_methods)] // tests and benchmarks may read the wall clock

#[path = "provider_support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use agentloop::provider::http::{HttpConfig, ProviderKind};
use agentloop::ErrorKind;
use agentloop::MessageDelta;
use futures::StreamExt;
use support::server::*;
use support::*;
use tokio::net::TcpListener;

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
async fn openai_responses_recorded_streams_replayed_with_arbitrary_splits() {
    replay_all(ProviderKind::OpenAiResponses, "responses_").await;
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
    assert_eq!(e.kind, ErrorKind::MalformedResponse, "{e}");
    assert!(e.message.contains("not streamed"), "shows the body: {e}");
}

/// The o-series and gpt-5 models refuse `max_tokens`; their requests carry
/// the cap as `max_completion_tokens` (by model name, or as `HttpConfig` says).
#[tokio::test]
async fn reasoning_models_get_their_cap_as_max_completion_tokens() {
    use agentloop::provider::http::build_model;
    for (model, forced, field, other) in [
        ("o3-mini", None, "max_completion_tokens", "max_tokens"),
        ("gpt-5", None, "max_completion_tokens", "max_tokens"),
        ("gpt-4o", None, "max_tokens", "max_completion_tokens"),
        ("gpt-4o", Some(true), "max_completion_tokens", "max_tokens"),
        ("o3", Some(false), "max_tokens", "max_completion_tokens"),
    ] {
        let server = Server::start(vec![Reply::Status {
            status: 400,
            headers: vec![],
            body: "{}".into(),
        }])
        .await;
        let mut cfg = config(ProviderKind::OpenAi, &server);
        cfg.max_completion_tokens = forced;
        let m = build_model(model, cfg).expect("client");
        let mut req = request("");
        req.params.max_tokens = Some(64);
        let _ = agentloop::model::Model::stream(&m, req).await;
        let body = &server.requests()[0].body;
        assert_eq!(body["model"], model);
        assert_eq!(body[field], 64, "{model} {forced:?}: {body}");
        assert!(body.get(other).is_none(), "{model} {forced:?}: {body}");
    }
}
