//! The OpenAI Responses client (`--provider openai-responses`) through the real HTTP transport
//! against the loopback server: a calculator tool round whose second request answers the call
//! with a `function_call_output` under the call's `call_id` (and sends the encrypted reasoning
//! item back), the same round after a 429, after a connection reset mid-stream and after a
//! stream cut before `response.completed`; HTTP error bodies and in-stream failures classified
//! like the other providers'; the trace of a run replays identically.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

#[path = "provider_support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use agentloop::provider::http::ProviderKind;
use agentloop::runtime::{Agent, RunOutput};
use agentloop::ErrorKind;
use agentloop::Outcome;
use agentloop_core::process::RetryPolicy;
use serde_json::{json, Value};
use support::server::*;
use support::*;

const P: ProviderKind = ProviderKind::OpenAiResponses;
const CALL_ID: &str = "call_Xq7bN2mKp4Lr9sTv1wYz3A5c";

/// The recorded reasoning + calculator call stream, in several reads.
fn tool_call_reply() -> Reply {
    let body = fixture("responses_reasoning_tool_call.sse");
    Reply::Sse {
        pieces: split_at_points(&body, &[100, 1000, 2500, 4000, 6000]),
        gap: Duration::from_millis(1),
    }
}

/// A streamed final answer.
fn answer_reply() -> Reply {
    let mut s = String::new();
    let ev = |v: Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap_or(""));
    s += &ev(
        json!({"type": "response.created", "response": {"id": "resp_2", "status": "in_progress"}}),
    );
    s += &ev(
        json!({"type": "response.output_item.added", "output_index": 0,
        "item": {"id": "msg_2", "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
    );
    for part in ["The answer", " is 5."] {
        s += &ev(
            json!({"type": "response.output_text.delta", "item_id": "msg_2", "output_index": 0,
            "content_index": 0, "delta": part}),
        );
    }
    s += &ev(
        json!({"type": "response.output_item.done", "output_index": 0,
        "item": {"id": "msg_2", "type": "message", "status": "completed", "role": "assistant",
                 "content": [{"type": "output_text", "text": "The answer is 5.", "annotations": []}]}}),
    );
    s += &ev(
        json!({"type": "response.completed", "response": {"id": "resp_2", "status": "completed",
        "usage": {"input_tokens": 420, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 256},
                  "output_tokens_details": {"reasoning_tokens": 0}}}}),
    );
    Reply::Sse {
        pieces: vec![s.into_bytes()],
        gap: Duration::ZERO,
    }
}

/// Runs "What is 2+3?" with the built-in tools against `server` (3 retries, 1 ms backoff),
/// recording the trace.
async fn run_calculator(server: &Server) -> RunOutput {
    // `gpt-test` is no reasoning model by name: encrypted reasoning is asked for explicitly.
    let mut cfg = config(P, server);
    cfg.encrypted_reasoning = Some(true);
    let agent = Agent::builder()
        .builtin_tools()
        .model_arc(Arc::from(model(P, cfg)))
        .configure(|c| {
            c.step.retry = RetryPolicy {
                max_retries: 3,
                initial_backoff_ms: 1,
                max_backoff_ms: 2,
                retry_after_cap_ms: 20,
                ..RetryPolicy::default()
            }
        })
        .build();
    let run = agent.run_with(
        "s",
        vec![agentloop::Message::user("What is 2+3?")],
        None,
        true,
    );
    tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("the run ends")
        .expect("run starts")
}

/// The run completed the tool round; the last two requests are the call and its answer.
fn assert_tool_round(out: &RunOutput, server: &Server, requests: usize) {
    assert_eq!(
        out.result.outcome,
        Outcome::Completed,
        "{:?}",
        out.result.error
    );
    assert_eq!(out.result.final_text(), Some("The answer is 5."));
    let reqs = server.requests();
    assert_eq!(reqs.len(), requests, "requests sent");
    for r in &reqs {
        assert!(r.head.starts_with("POST /v1/responses "), "{}", r.head);
        assert_eq!(r.header("authorization"), Some(format!("Bearer {KEY}")));
    }
    let first = &reqs[requests - 2].body;
    assert_eq!(first["model"], "gpt-test");
    assert_eq!(first["store"], false);
    assert_eq!(first["stream"], true);
    assert_eq!(first["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        first["input"],
        json!([{"role": "user", "content": "What is 2+3?"}])
    );
    let tools = first["tools"].as_array().expect("tools");
    assert!(
        tools
            .iter()
            .any(|t| t["type"] == "function" && t["name"] == "calculator" && t["strict"] == false),
        "{tools:?}"
    );
    let second = &reqs[requests - 1].body;
    let input = second["input"].as_array().expect("input items");
    let kinds: Vec<&str> = input
        .iter()
        .map(|i| i["type"].as_str().or(i["role"].as_str()).unwrap_or("?"))
        .collect();
    assert_eq!(
        kinds,
        ["user", "reasoning", "function_call", "function_call_output"],
        "{input:?}"
    );
    assert_eq!(input[1]["id"], "rs_68a1c1ab3c4d8190b1a2c3d4e5f60718");
    assert!(input[1]["encrypted_content"]
        .as_str()
        .is_some_and(|e| e.starts_with("gAAAA")));
    assert_eq!(input[1]["summary"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        input[2],
        json!({"type": "function_call", "call_id": CALL_ID, "name": "calculator",
               "arguments": "{\"expression\":\"2+3\"}"})
    );
    assert_eq!(
        input[3],
        json!({"type": "function_call_output", "call_id": CALL_ID, "output": "5"})
    );
}

#[tokio::test]
async fn a_calculator_round_sends_the_result_as_function_call_output_and_the_trace_replays() {
    let server = Server::start(vec![tool_call_reply(), answer_reply()]).await;
    let out = run_calculator(&server).await;
    assert_tool_round(&out, &server, 2);
    let usage = out.result.usage.expect("usage reported");
    assert_eq!(usage.input_tokens, 312 + 420);
    assert_eq!(usage.cache_read_input_tokens, 128 + 256);
    assert_eq!(usage.reasoning_tokens, 64);
    let trace = out.trace.expect("recorded");
    assert!(
        agentloop::trace::replay(&trace).is_none(),
        "the trace replays identically"
    );
}

#[tokio::test]
async fn a_429_then_the_round() {
    let rate_limited = Reply::Status {
        status: 429,
        headers: vec![("retry-after-ms", "5".into())],
        body: r#"{"error": {"message": "Rate limit reached for gpt-5-mini", "type": "requests", "param": null, "code": "rate_limit_exceeded"}}"#.into(),
    };
    let server = Server::start(vec![rate_limited, tool_call_reply(), answer_reply()]).await;
    let out = run_calculator(&server).await;
    assert_tool_round(&out, &server, 3);
    assert!(agentloop::trace::replay(&out.trace.expect("recorded")).is_none());
}

#[tokio::test]
async fn a_reset_mid_stream_and_a_cut_stream_are_retried() {
    let body = fixture("responses_reasoning_tool_call.sse");
    let half = body[..body.len() / 2].to_vec();
    let reset = Reply::ResetAfter {
        pieces: vec![half.clone()],
    };
    // A clean end of the body before response.completed: incomplete, retried.
    let cut = Reply::Sse {
        pieces: vec![half],
        gap: Duration::ZERO,
    };
    let server = Server::start(vec![reset, cut, tool_call_reply(), answer_reply()]).await;
    let out = run_calculator(&server).await;
    assert_tool_round(&out, &server, 4);
    assert!(agentloop::trace::replay(&out.trace.expect("recorded")).is_none());
}

#[tokio::test]
async fn http_error_bodies_and_in_stream_failures_are_classified() {
    let overflow = r#"{"error": {"message": "Your input exceeds the context window of this model. Please adjust your input and try again.", "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}}"#;
    for (status, body, kind) in [
        (400, overflow, ErrorKind::ContextOverflow),
        (
            400,
            r#"{"error": {"message": "Unknown parameter: 'foo'.", "type": "invalid_request_error", "param": "foo", "code": "unknown_parameter"}}"#,
            ErrorKind::BadRequest,
        ),
        (
            429,
            r#"{"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}"#,
            ErrorKind::RateLimited,
        ),
        (
            500,
            r#"{"error": {"message": "The server had an error while processing your request.", "type": "server_error"}}"#,
            ErrorKind::ServerError,
        ),
    ] {
        let server = Server::start(vec![Reply::Status {
            status,
            headers: vec![],
            body: body.into(),
        }])
        .await;
        let e = run(P, config(P, &server))
            .await
            .err()
            .unwrap_or_else(|| panic!("HTTP {status} is an error"));
        assert_eq!(e.kind, kind, "HTTP {status}: {e}");
        assert_eq!(e.http_status, Some(status));
    }
    for (name, kind) in [
        ("responses_failed_context.sse", ErrorKind::ContextOverflow),
        ("responses_error_rate_limit.sse", ErrorKind::RateLimited),
    ] {
        let server = Server::start(vec![Reply::Sse {
            pieces: vec![fixture(name)],
            gap: Duration::ZERO,
        }])
        .await;
        let (_, err) = run(P, config(P, &server)).await.expect("a 200 stream");
        assert_eq!(err.map(|e| e.kind), Some(kind), "{name}");
    }
}
