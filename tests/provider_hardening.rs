//! Provider hardening against the loopback server: redirects never carry a key to another
//! origin; response limits end the attempt with a typed error that the runtime does not retry
//! (R-IN-2), and unreadable bodies and malformed data with a `malformed_response` that it
//! retries once per step — counted as requests on the server.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

#[path = "provider_support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use agentloop::provider::http::{HttpConfig, ProviderKind};
use agentloop::runtime::Agent;
use agentloop::ErrorKind;
use agentloop::Outcome;
use agentloop::{Message, MessageDelta};
use agentloop_core::process::RetryPolicy;
use agentloop_core::react::LoopResult;
use serde_json::json;
use support::server::*;
use support::*;

const PROVIDERS: [ProviderKind; 3] = [
    ProviderKind::OpenAi,
    ProviderKind::Anthropic,
    ProviderKind::Gemini,
];

/// Runs one agent turn against `server` with a retry budget of 3 (1 ms backoff), so a
/// retryable error shows up as several requests. Fails the test after 20 s: an attempt that
/// never ends (a stream nobody bounds) must not hang the suite.
async fn run_agent(p: ProviderKind, cfg: HttpConfig, server: &Server) -> (LoopResult, usize) {
    let agent = Agent::builder()
        .builtin_tools()
        .model_arc(Arc::from(model(p, cfg)))
        .configure(|c| {
            c.step.retry = RetryPolicy {
                max_retries: 3,
                initial_backoff_ms: 1,
                max_backoff_ms: 2,
                retry_after_cap_ms: 2,
                ..RetryPolicy::default()
            }
        })
        .build();
    let out = tokio::time::timeout(Duration::from_secs(20), agent.run("s", "hi"))
        .await
        .expect("the attempt ends (it must not read forever)")
        .expect("run starts");
    (out.result, server.requests().len())
}

/// Asserts that a run failed once, unretried, with an error of `kind` whose text has every
/// one of `needles`.
fn assert_failed_once(result: &LoopResult, requests: usize, kind: ErrorKind, needles: &[&str]) {
    assert_eq!(result.outcome, Outcome::Failed, "{result:?}");
    let typed = result.error.as_ref().and_then(|e| e.model_error());
    assert_eq!(
        typed.map(|e| e.kind),
        Some(kind),
        "a typed model error: {result:?}"
    );
    let error = result
        .error
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(error.starts_with(kind.as_str()), "want {kind}: {error}");
    for n in needles {
        assert!(error.contains(n), "want {n:?} in: {error}");
    }
    assert_eq!(requests, 1, "not retried (R-IN-2): {error}");
}

fn sse(events: &[String]) -> Vec<u8> {
    events.concat().into_bytes()
}

fn openai_event(delta: serde_json::Value) -> String {
    let chunk = json!({"id": "c", "object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": null}]});
    format!("data: {chunk}\n\n")
}

fn anthropic_event(data: serde_json::Value) -> String {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap_or("")
    )
}

fn anthropic_start() -> String {
    anthropic_event(
        json!({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 1}}}),
    )
}

// ---------------------------------------------------------------------------------------
// 1. Redirects

#[tokio::test]
async fn redirect_to_another_host_never_carries_a_credential_and_is_a_typed_error() {
    for p in PROVIDERS {
        let target = Server::start(vec![Reply::Sse {
            pieces: vec![fixture(match p {
                ProviderKind::OpenAi => "openai_text.sse",
                ProviderKind::Anthropic => "anthropic_text.sse",
                ProviderKind::OpenAiResponses => "responses_text.sse",
                ProviderKind::Gemini => "gemini_text.sse",
            })],
            gap: Duration::ZERO,
        }])
        .await;
        // Another origin: another host name (localhost, not 127.0.0.1) and another port.
        let location = format!(
            "{}{}",
            target.url_as("localhost"),
            match p {
                ProviderKind::OpenAi => "/v1/chat/completions",
                ProviderKind::Anthropic => "/v1/messages",
                ProviderKind::OpenAiResponses => "/v1/responses",
                ProviderKind::Gemini => "/v1beta/models/gemini-test:streamGenerateContent?alt=sse",
            }
        );
        let redirect = Reply::Status {
            status: 307,
            headers: vec![("location", location)],
            body: String::new(),
        };
        // One for the client alone, one for the agent's run.
        let origin = Server::start(vec![redirect.clone(), redirect]).await;
        let mut cfg = config(p, &origin);
        cfg.extra_headers
            .push(("x-goog-api-key".into(), "extra-secret-value".into()));
        let outcome = run(p, cfg.clone()).await;
        for r in target.requests() {
            for h in ["x-api-key", "authorization", "x-goog-api-key"] {
                assert_eq!(r.header(h), None, "{p}: {h} reached another origin");
            }
        }
        let e = outcome
            .err()
            .unwrap_or_else(|| panic!("{p}: a redirect is an error"));
        assert_eq!(e.kind, ErrorKind::Redirected, "{p}: {e}");
        assert_eq!(e.http_status, Some(307));
        assert!(!e.retryable());
        assert!(
            e.message.contains("307") && e.message.contains("localhost"),
            "names the status and the Location host: {e}"
        );
        assert!(!e.message.contains("SUPERSECRET"));
        assert!(
            target.requests().is_empty(),
            "{p}: redirects are not followed"
        );
        let (result, requests) = run_agent(p, cfg, &origin).await;
        assert_failed_once(&result, requests - 1, ErrorKind::Redirected, &["307"]);
    }
}

// ---------------------------------------------------------------------------------------
// 4. and 6. Response limits

/// An endless stream of `piece` must stop at the limit: a typed error, one request, and the
/// client hangs up (the server's byte count stops growing).
async fn endless_stops_at_the_limit(
    p: ProviderKind,
    head: String,
    piece: String,
    set: impl Fn(&mut HttpConfig),
    needle: &str,
) {
    let server = Server::start(vec![Reply::Endless {
        head: head.into_bytes(),
        piece: piece.into_bytes(),
    }])
    .await;
    let mut cfg = config(p, &server);
    set(&mut cfg);
    let (result, requests) = run_agent(p, cfg, &server).await;
    assert_failed_once(&result, requests, ErrorKind::ResponseTooLarge, &[needle]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sent = server.bytes_sent();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.bytes_sent(), sent, "{p}: the client stopped reading");
}

#[tokio::test]
async fn whole_response_limit_ends_an_endless_text_stream_unretried() {
    let text = "x".repeat(1000);
    endless_stops_at_the_limit(
        ProviderKind::OpenAi,
        String::new(),
        openai_event(json!({"content": text})),
        |c| *c = c.clone().with_max_response_bytes(100_000),
        "max_response_bytes",
    )
    .await;
    endless_stops_at_the_limit(
        ProviderKind::Anthropic,
        anthropic_start()
            + &anthropic_event(json!({"type": "content_block_start", "index": 0,
                                      "content_block": {"type": "thinking", "thinking": ""}})),
        anthropic_event(json!({"type": "content_block_delta", "index": 0,
                               "delta": {"type": "thinking_delta", "thinking": text}})),
        |c| *c = c.clone().with_max_response_bytes(100_000),
        "max_response_bytes",
    )
    .await;
}

#[tokio::test]
async fn tool_argument_limit_ends_endless_arguments_unretried() {
    let args = "1+".repeat(500);
    endless_stops_at_the_limit(
        ProviderKind::OpenAi,
        openai_event(json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                             "function": {"name": "calculator", "arguments": ""}}]})),
        openai_event(json!({"tool_calls": [{"index": 0, "function": {"arguments": args}}]})),
        |c| *c = c.clone().with_max_tool_argument_bytes(50_000),
        "max_tool_argument_bytes",
    )
    .await;
    // Fragments that never name the tool accumulate too, and are bounded too.
    endless_stops_at_the_limit(
        ProviderKind::OpenAi,
        String::new(),
        openai_event(json!({"tool_calls": [{"index": 0, "function": {"arguments": args}}]})),
        |c| *c = c.clone().with_max_tool_argument_bytes(50_000),
        "max_tool_argument_bytes",
    )
    .await;
    endless_stops_at_the_limit(
        ProviderKind::Anthropic,
        anthropic_start()
            + &anthropic_event(json!({"type": "content_block_start", "index": 0,
                                      "content_block": {"type": "tool_use", "id": "t1", "name": "calculator", "input": {}}})),
        anthropic_event(json!({"type": "content_block_delta", "index": 0,
                               "delta": {"type": "input_json_delta", "partial_json": args}})),
        |c| *c = c.clone().with_max_tool_argument_bytes(50_000),
        "max_tool_argument_bytes",
    )
    .await;
}

fn openai_many_tool_calls(n: usize) -> Vec<u8> {
    let mut events: Vec<String> = (0..n)
        .map(|i| {
            openai_event(json!({"tool_calls": [{"index": i, "id": format!("call_{i}"), "type": "function",
                                                 "function": {"name": "calculator", "arguments": "{}"}}]}))
        })
        .collect();
    events.push(
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
            .into(),
    );
    events.push("data: [DONE]\n\n".into());
    sse(&events)
}

fn anthropic_many_blocks(n: usize) -> Vec<u8> {
    let mut events = vec![anthropic_start()];
    for i in 0..n {
        events.push(anthropic_event(
            json!({"type": "content_block_start", "index": i,
                                           "content_block": {"type": "text", "text": "."}}),
        ));
        events.push(anthropic_event(
            json!({"type": "content_block_stop", "index": i}),
        ));
    }
    events.push(anthropic_event(
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
    ));
    events.push(anthropic_event(json!({"type": "message_stop"})));
    sse(&events)
}

#[tokio::test]
async fn content_block_limit_is_the_same_on_both_providers_clear_and_unretried() {
    let cases = [
        (ProviderKind::OpenAi, openai_many_tool_calls(1100)),
        // 5,000 blocks: beyond the former hard-coded 4,096 as well as the default 1,024.
        (ProviderKind::Anthropic, anthropic_many_blocks(5000)),
    ];
    for (p, body) in cases {
        let server = Server::start(vec![Reply::Sse {
            pieces: vec![body],
            gap: Duration::ZERO,
        }])
        .await;
        let (result, requests) = run_agent(p, config(p, &server), &server).await;
        assert_failed_once(
            &result,
            requests,
            ErrorKind::ResponseTooLarge,
            &["max_content_blocks", "1024"],
        );
    }
}

#[tokio::test]
async fn anthropic_content_blocks_beyond_4096_are_fine_under_a_raised_limit() {
    let server = Server::start(vec![Reply::Sse {
        pieces: vec![anthropic_many_blocks(5000)],
        gap: Duration::ZERO,
    }])
    .await;
    let cfg = config(ProviderKind::Anthropic, &server).with_max_content_blocks(5000);
    let (deltas, err) = run(ProviderKind::Anthropic, cfg).await.expect("stream");
    assert_eq!(err, None);
    assert_eq!(text_of(&deltas).len(), 5000);
    assert_eq!(deltas.last(), Some(&MessageDelta::Finish));
}

// ---------------------------------------------------------------------------------------
// 8. Bodies the client cannot read: `malformed_response`, retried once per step (a proxy's
// glitch passes; a second one fails the step at once, "Hardening 3" item 9)

/// Asserts that a run failed with `malformed_response` after exactly one retry (two
/// requests), its text having every one of `needles` and saying the retry failed too.
fn assert_malformed_twice(result: &LoopResult, requests: usize, needles: &[&str]) {
    assert_eq!(result.outcome, Outcome::Failed, "{result:?}");
    let typed = result.error.as_ref().and_then(|e| e.model_error());
    assert_eq!(
        typed.map(|e| e.kind),
        Some(ErrorKind::MalformedResponse),
        "{result:?}"
    );
    let error = result
        .error
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    for n in needles
        .iter()
        .chain(&["the retry got a malformed answer too"])
    {
        assert!(error.contains(n), "want {n:?} in: {error}");
    }
    assert_eq!(requests, 2, "retried once, not more: {error}");
}

/// A good answer for the retry of a malformed one.
fn good_answer(p: ProviderKind) -> Reply {
    let name = match p {
        ProviderKind::OpenAi => "openai_text.sse",
        ProviderKind::Anthropic => "anthropic_text.sse",
        ProviderKind::OpenAiResponses => "responses_text.sse",
        ProviderKind::Gemini => "gemini_text.sse",
    };
    Reply::Sse {
        pieces: vec![fixture(name)],
        gap: Duration::ZERO,
    }
}

#[tokio::test]
async fn content_encoding_the_client_cannot_decode_is_named_and_retried_once() {
    for (p, encoding) in [
        (ProviderKind::OpenAi, "gzip"),
        (ProviderKind::Anthropic, "br"),
    ] {
        let reply = Reply::Status {
            status: 200,
            headers: vec![
                ("content-type", "text/event-stream".into()),
                ("content-encoding", encoding.into()),
            ],
            body: "\u{1f}\u{8b}\u{8}\u{0}binary".into(),
        };
        let server = Server::start(vec![reply.clone(), reply]).await;
        let (result, requests) = run_agent(p, config(p, &server), &server).await;
        assert_malformed_twice(
            &result,
            requests,
            &[&format!("Content-Encoding: {encoding}"), "not supported"],
        );
        let head = server.requests()[0].head.to_ascii_lowercase();
        assert!(head.contains("accept-encoding: identity"), "{head}");
    }
}

#[tokio::test]
async fn json_instead_of_an_event_stream_is_named_with_the_body_and_retried_once() {
    let body = r#"{"id":"x","object":"chat.completion","choices":[{"message":{"content":"not streamed"}}]}"#;
    for p in PROVIDERS {
        let reply = Reply::Status {
            status: 200,
            headers: vec![("content-type", "application/json".into())],
            body: body.into(),
        };
        let server = Server::start(vec![reply.clone(), reply]).await;
        let (result, requests) = run_agent(p, config(p, &server), &server).await;
        assert_malformed_twice(
            &result,
            requests,
            &[
                "expected text/event-stream, got application/json",
                "not streamed",
            ],
        );
    }
}

// ---------------------------------------------------------------------------------------
// 9. Malformed stream data: one retry; the same again fails fast

#[tokio::test]
async fn malformed_stream_data_is_retried_once() {
    for (p, name) in [
        (ProviderKind::OpenAi, "openai_malformed.sse"),
        (ProviderKind::Anthropic, "anthropic_malformed.sse"),
    ] {
        let reply = Reply::Sse {
            pieces: vec![fixture(name)],
            gap: Duration::ZERO,
        };
        // Twice the same: the step fails after one retry, typed.
        let server = Server::start(vec![reply.clone(), reply.clone()]).await;
        let (result, requests) = run_agent(p, config(p, &server), &server).await;
        assert_malformed_twice(&result, requests, &["malformed stream data", "event #"]);
        // A glitch once: the retry's answer is the run's.
        let server = Server::start(vec![reply, good_answer(p)]).await;
        let (result, requests) = run_agent(p, config(p, &server), &server).await;
        assert_eq!(
            result.outcome,
            Outcome::Completed,
            "{p:?}: {:?}",
            result.error
        );
        assert_eq!(requests, 2);
        assert!(result.final_text().is_some_and(|t| !t.is_empty()));
    }
}

#[tokio::test]
async fn mistral_content_parts_stream_through_the_client() {
    let thinking = openai_event(json!({"role": "assistant", "content": [
        {"type": "thinking", "thinking": [{"type": "text", "text": "Two and two "}]}]}));
    let thinking2 = openai_event(json!({"content": [
        {"type": "thinking", "thinking": [{"type": "text", "text": "make four."}]}]}));
    let text = openai_event(json!({"content": [{"type": "text", "text": "4"}]}));
    let done = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let server = Server::start(vec![Reply::Sse {
        pieces: vec![sse(&[thinking, thinking2, text, done.into()])],
        gap: Duration::ZERO,
    }])
    .await;
    let (result, requests) = run_agent(
        ProviderKind::OpenAi,
        config(ProviderKind::OpenAi, &server),
        &server,
    )
    .await;
    assert_eq!(result.outcome, Outcome::Completed, "{result:?}");
    assert_eq!(result.final_text(), Some("4"));
    let reasoning = result.messages.iter().find_map(|m| match m {
        Message::Assistant(a) => Some(a.reasoning.clone()),
        _ => None,
    });
    assert_eq!(reasoning.as_deref(), Some("Two and two make four."));
    assert_eq!(requests, 1);
}
