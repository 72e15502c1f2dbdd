//! The Messages normalizer on recorded streams: blocks, thinking, cumulative usage, in-stream
//! errors, terminal evidence, malformed data; identical deltas for every read split.

#[path = "provider_support/mod.rs"]
mod support;

use agentloop::model::{ModelParams, ModelRequest, ToolChoice};
use agentloop::provider::anthropic::request_body;
use agentloop::provider::decode::{decode, DecodeOutcome, DecodeReport};
use agentloop::provider::http::ProviderKind;
use agentloop::tools::ToolSpec;
use agentloop::ErrorKind;
use agentloop::{
    AssistantMessage, FinishReason, Message, MessageDelta, ToolCall, ToolResult, ToolStatus, Usage,
};
use proptest::prelude::*;
use serde_json::json;
use support::*;

const P: ProviderKind = ProviderKind::Anthropic;

fn report(name: &str) -> DecodeReport {
    decode(P, &fixture(name), false)
}

/// Builds a stream from `(event, data)` pairs.
fn stream(events: &[(&str, serde_json::Value)]) -> Vec<u8> {
    let mut s = String::new();
    for (e, d) in events {
        s.push_str(&format!("event: {e}\ndata: {d}\n\n"));
    }
    s.into_bytes()
}

fn start() -> (&'static str, serde_json::Value) {
    (
        "message_start",
        json!({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 5, "output_tokens": 1}}}),
    )
}

fn stop() -> (&'static str, serde_json::Value) {
    ("message_stop", json!({"type": "message_stop"}))
}

#[test]
fn text_stream() {
    let deltas = deltas_whole(P, &fixture("anthropic_text.sse"));
    assert_eq!(
        deltas,
        vec![
            MessageDelta::StartStep,
            MessageDelta::TextStart,
            MessageDelta::TextDelta {
                text: "Hello".into()
            },
            MessageDelta::TextDelta {
                text: ", wörld 😀!".into()
            },
            MessageDelta::TextEnd,
            MessageDelta::FinishStep {
                finish_reason: Some(FinishReason::Stop),
                raw_finish_reason: Some("end_turn".into()),
                usage: Some(Usage {
                    input_tokens: 25,
                    output_tokens: 12,
                    cache_read_input_tokens: 10,
                    cache_creation_input_tokens: 0,
                    reasoning_tokens: 0,
                }),
            },
            MessageDelta::Finish,
        ]
    );
}

#[test]
fn tool_use_blocks_with_input_json_deltas() {
    let r = report("anthropic_tool_use.sse");
    assert_eq!(r.outcome, DecodeOutcome::Completed);
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(r.raw_finish_reason.as_deref(), Some("tool_use"));
    let m = r.message.unwrap();
    assert_eq!(m.text, "Let me compute that.");
    assert_eq!(m.tool_calls.len(), 2);
    assert_eq!(m.tool_calls[0].id, "toolu_01A");
    assert_eq!(m.tool_calls[0].name, "calculator");
    assert_eq!(m.tool_calls[0].arguments, json!({"expression": "17*3"}));
    // A tool_use block with no input deltas: empty arguments mean {}.
    assert_eq!(m.tool_calls[1].arguments, json!({}));
    assert!(m.tool_calls[1].arguments_valid);
}

#[test]
fn message_delta_usage_is_cumulative_replace_not_add() {
    let r = report("anthropic_tool_use.sse");
    // message_start said output 2; two message_deltas said 89 then 91 (cumulative): 91, not 182.
    let u = r.usage.unwrap();
    assert_eq!(u.output_tokens, 91);
    assert_eq!(u.input_tokens, 472);
    assert_eq!(u.cache_read_input_tokens, 0);
}

#[test]
fn thinking_signature_and_redacted_thinking() {
    let r = report("anthropic_thinking.sse");
    assert_eq!(r.outcome, DecodeOutcome::Completed);
    let m = r.message.unwrap();
    assert_eq!(m.reasoning, "Let me think step by step.");
    assert_eq!(
        m.reasoning_signature.as_deref(),
        Some("EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds")
    );
    assert_eq!(
        m.redacted_reasoning,
        vec!["EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP".to_string()]
    );
    assert_eq!(
        m.text, "The answer is 42.",
        "citations_delta carries nothing"
    );
    assert_eq!(r.usage.unwrap().cache_creation_input_tokens, 100);
    let deltas = deltas_whole(P, &fixture("anthropic_thinking.sse"));
    assert_eq!(deltas[1], MessageDelta::ReasoningStart);
    assert!(deltas.contains(&MessageDelta::ReasoningEnd));
}

#[test]
fn overloaded_error_event_under_200_is_retryable() {
    let r = report("anthropic_overloaded.sse");
    assert_eq!(r.outcome, DecodeOutcome::Error);
    assert!(!r.committed);
    let e = r.error.unwrap();
    assert_eq!(e.kind, ErrorKind::Overloaded);
    assert!(e.retryable);
    assert!(!e.context_overflow);
    assert_eq!(e.http_status, None);
    assert_eq!(r.message.unwrap().text, "Partial");
}

#[test]
fn other_in_stream_errors_are_classified() {
    for (ty, msg, kind) in [
        ("api_error", "Internal server error", ErrorKind::ServerError),
        ("rate_limit_error", "slow down", ErrorKind::RateLimited),
        (
            "invalid_request_error",
            "prompt is too long: 210000 tokens > 200000 maximum",
            ErrorKind::ContextOverflow,
        ),
        (
            "invalid_request_error",
            "messages: roles must alternate",
            ErrorKind::BadRequest,
        ),
    ] {
        let body = stream(&[
            start(),
            (
                "error",
                json!({"type": "error", "error": {"type": ty, "message": msg}}),
            ),
        ]);
        assert_eq!(
            decode(P, &body, false).error.map(|e| e.kind),
            Some(kind),
            "{ty}: {msg}"
        );
    }
    // An error event whose data is not even JSON is still an error, not a skip.
    let body = b"event: error\ndata: upstream exploded\n\n";
    assert_eq!(
        decode(P, body, false).error.map(|e| e.kind),
        Some(ErrorKind::ServerError)
    );
}

#[test]
fn max_tokens_truncated_tool_input_is_never_executable() {
    let r = report("anthropic_max_tokens_tool.sse");
    assert_eq!(r.finish_reason, Some(FinishReason::Length));
    assert_eq!(r.raw_finish_reason.as_deref(), Some("max_tokens"));
    let c = &r.message.unwrap().tool_calls[0];
    assert!(!c.arguments_valid);
    assert_eq!(c.arguments, serde_json::Value::Null);
}

#[test]
fn clean_eof_before_message_stop_is_incomplete() {
    let r = report("anthropic_incomplete.sse");
    assert_eq!(r.outcome, DecodeOutcome::Error);
    assert_eq!(r.error.unwrap().kind, ErrorKind::IncompleteStream);
    assert_eq!(r.message.unwrap().text, "Cut");
    assert_eq!(
        decode(P, b"", false).error.unwrap().kind,
        ErrorKind::IncompleteStream
    );
}

#[test]
fn ping_unknown_events_and_unknown_block_types_are_ignored() {
    let r = report("anthropic_unknown_events.sse");
    assert_eq!(r.outcome, DecodeOutcome::Completed);
    let m = r.message.unwrap();
    assert_eq!(m.text, "Done.", "text given in content_block_start counts");
    assert!(
        m.tool_calls.is_empty(),
        "server tool use is not a client tool call"
    );
}

/// Malformed data repeats on a retry, so it is `malformed_response`, not retried.
#[test]
fn malformed_events_are_unretried_errors_naming_the_event() {
    let deltas = deltas_whole(P, &fixture("anthropic_malformed.sse"));
    let Some(MessageDelta::Error { error }) = deltas.last() else {
        panic!("{deltas:?}")
    };
    assert_eq!(error.kind, ErrorKind::MalformedResponse);
    assert!(!error.retryable());
    assert!(error.message.contains("event #2"), "{}", error.message);
    assert!(
        error.message.contains("content_block_delta"),
        "{}",
        error.message
    );
    let deltas = deltas_whole(P, &fixture("anthropic_not_json.sse"));
    let Some(MessageDelta::Error { error }) = deltas.last() else {
        panic!("{deltas:?}")
    };
    assert_eq!(error.kind, ErrorKind::MalformedResponse);
    assert!(
        error.message.contains("event #2") && error.message.contains("not valid JSON"),
        "{}",
        error.message
    );
    assert!(
        !deltas.contains(&MessageDelta::Finish),
        "never a finished turn after malformed data"
    );
}

#[test]
fn shape_errors() {
    let bad: Vec<Vec<(&str, serde_json::Value)>> = vec![
        vec![
            start(),
            (
                "content_block_start",
                json!({"type": "content_block_start", "content_block": {"type": "text"}}),
            ),
            stop(),
        ],
        vec![
            start(),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use"}}),
            ),
            stop(),
        ],
        vec![
            start(),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "n"}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}),
            ),
            stop(),
        ],
        vec![
            start(),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            stop(),
        ],
        vec![
            start(),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 9}),
            ),
            stop(),
        ],
        vec![
            start(),
            (
                "message_delta",
                json!({"type": "message_delta", "usage": {"output_tokens": 1}}),
            ),
            stop(),
        ],
        vec![
            start(),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": "zero", "content_block": {"type": "text"}}),
            ),
            stop(),
        ],
        vec![
            start(),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "late"}}),
            ),
            stop(),
        ],
    ];
    for events in bad {
        let r = decode(P, &stream(&events), false);
        assert_eq!(
            r.error.as_ref().map(|e| (e.kind, e.retryable)),
            Some((ErrorKind::MalformedResponse, false)),
            "{events:?}"
        );
    }
}

#[test]
fn event_type_comes_from_the_data_or_the_sse_event_name() {
    // No `event:` lines at all (some proxies drop them): the JSON `type` is enough.
    let body = b"data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\ndata: {\"type\":\"message_stop\"}\n\n";
    assert_eq!(decode(P, body, false).outcome, DecodeOutcome::Completed);
}

#[test]
fn message_stop_closes_blocks_left_open() {
    let body = stream(&[
        start(),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "calc", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"a\":1}"}}),
        ),
        stop(),
    ]);
    let r = decode(P, &body, false);
    assert_eq!(r.message.unwrap().tool_calls[0].arguments, json!({"a": 1}));
}

#[test]
fn request_body_merges_roles_and_sends_tool_results_as_blocks() {
    let req = ModelRequest {
        run_id: "r".into(),
        model_call_index: 1,
        attempt: 1,
        session_turn: 0,
        model: String::new(),
        system: Some("sys".into()),
        messages: vec![
            Message::system("more sys"),
            Message::user("hi"),
            Message::Assistant(AssistantMessage {
                text: "calling".into(),
                reasoning: "think".into(),
                reasoning_signature: Some("sig".into()),
                tool_calls: vec![
                    ToolCall::from_raw("t1", "calc", "{\"e\":1}"),
                    ToolCall::from_raw("t2", "calc", "{bad"),
                ],
                ..Default::default()
            }),
            Message::Tool(ToolResult {
                tool_call_id: "t1".into(),
                name: "calc".into(),
                content: "1".into(),
                status: ToolStatus::Completed,
            }),
            Message::Tool(ToolResult {
                tool_call_id: "t2".into(),
                name: "calc".into(),
                content: "bad args".into(),
                status: ToolStatus::Error,
            }),
            Message::user("thanks"),
        ]
        .into(),
        tools: vec![ToolSpec {
            name: "calc".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        }]
        .into(),
        params: ModelParams::default(),
    };
    let b = request_body(&req, "claude-x", 1234);
    assert_eq!(b["model"], "claude-x");
    assert_eq!(b["max_tokens"], 1234);
    assert_eq!(b["stream"], true);
    assert_eq!(b["system"], "sys\n\nmore sys");
    let msgs = b["messages"].as_array().unwrap();
    assert_eq!(
        msgs.len(),
        3,
        "user / assistant / user(tool results + text)"
    );
    assert_eq!(
        msgs[1]["content"][0],
        json!({"type": "thinking", "thinking": "think", "signature": "sig"})
    );
    assert_eq!(
        msgs[1]["content"][1],
        json!({"type": "text", "text": "calling"})
    );
    assert_eq!(msgs[1]["content"][2]["input"], json!({"e": 1}));
    assert_eq!(
        msgs[1]["content"][3]["input"],
        json!({}),
        "invalid arguments are sent as {{}}"
    );
    assert_eq!(msgs[2]["role"], "user");
    assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
    assert_eq!(msgs[2]["content"][1]["is_error"], true);
    assert_eq!(
        msgs[2]["content"][2],
        json!({"type": "text", "text": "thanks"})
    );
    assert_eq!(b["tools"][0]["input_schema"], json!({"type": "object"}));
}

#[test]
fn request_body_sends_each_tool_choice_only_with_tools() {
    let cases = [
        (ToolChoice::Auto, json!({"type": "auto"})),
        (ToolChoice::None, json!({"type": "none"})),
        (ToolChoice::Required, json!({"type": "any"})),
        (
            ToolChoice::Tool("calc".into()),
            json!({"type": "tool", "name": "calc"}),
        ),
    ];
    for (choice, wire) in cases {
        let b = request_body(
            &tool_choice_request(true, with_choice(Some(choice.clone()))),
            "m",
            1234,
        );
        assert_eq!(b["tool_choice"], wire, "{choice}");
        let b = request_body(
            &tool_choice_request(false, with_choice(Some(choice))),
            "m",
            1234,
        );
        assert!(b.get("tool_choice").is_none(), "{b}");
    }
    let b = request_body(&tool_choice_request(true, with_choice(None)), "m", 1234);
    assert!(
        b.get("tool_choice").is_none(),
        "no choice: the API's default"
    );
}

#[test]
fn request_body_max_tokens_overrides_the_default() {
    let b = request_body(
        &tool_choice_request(false, ModelParams::default()),
        "m",
        1234,
    );
    assert_eq!(b["max_tokens"], 1234, "the configured default");
    let params = ModelParams {
        max_tokens: Some(32),
        ..ModelParams::default()
    };
    let b = request_body(&tool_choice_request(false, params), "m", 1234);
    assert_eq!(b["max_tokens"], 32);
}

#[test]
fn every_fixture_is_identical_read_byte_by_byte_and_with_crlf_or_cr() {
    for (name, body) in fixtures("anthropic_") {
        let whole = deltas_whole(P, &body);
        assert!(
            matches!(
                whole.last(),
                Some(MessageDelta::Finish | MessageDelta::Error { .. })
            ),
            "{name}"
        );
        assert_eq!(deltas_bytewise(P, &body), whole, "{name} bytewise");
        assert_eq!(deltas_whole(P, &to_crlf(&body)), whole, "{name} CRLF");
        assert_eq!(deltas_whole(P, &to_cr(&body)), whole, "{name} CR");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_fixture_is_identical_for_random_read_splits(points in cut_points(24), crlf in any::<bool>()) {
        for (name, body) in fixtures("anthropic_") {
            let body = if crlf { to_crlf(&body) } else { body };
            let whole = deltas_whole(P, &body);
            prop_assert_eq!(&deltas_split(P, &body, &points), &whole, "{}", name);
            prop_assert_eq!(decode(P, &body, false).deltas, whole);
        }
    }

    #[test]
    fn shuffled_and_truncated_fixture_events_never_panic(
        which in 0usize..10,
        keep in proptest::collection::vec(any::<bool>(), 0..40),
        cut in any::<usize>(),
    ) {
        let all = fixtures("anthropic_");
        let (_, body) = &all[which % all.len()];
        let text = String::from_utf8(body.clone()).unwrap();
        let kept: String = text
            .split("\n\n")
            .zip(keep.iter().chain(std::iter::repeat(&true)))
            .filter(|(_, k)| **k)
            .map(|(e, _)| format!("{e}\n\n"))
            .collect();
        let bytes = kept.as_bytes();
        let bytes = &bytes[..cut % (bytes.len() + 1)];
        let deltas = deltas_whole(P, bytes);
        let terminal = matches!(deltas.last(), Some(MessageDelta::Finish | MessageDelta::Error { .. }));
        prop_assert!(terminal);
        prop_assert_eq!(deltas_bytewise(P, bytes), deltas);
    }
}

/// Redacted thinking counts against the response limits like any other block: its data
/// toward `max_response_bytes`, the block toward `max_content_blocks`.
#[test]
fn redacted_thinking_counts_against_the_response_limits() {
    use agentloop::provider::anthropic::AnthropicNormalizer;
    use agentloop::provider::sse::SsePipeline;
    use agentloop::provider::ResponseLimits;

    let data = "R".repeat(100);
    let body = stream(&[
        start(),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "redacted_thinking", "data": data}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1,
                   "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1,
                   "delta": {"type": "text_delta", "text": "ok"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
        ),
        stop(),
    ]);
    let run = |limits: ResponseLimits| {
        let mut pipe = SsePipeline::with_limits(AnthropicNormalizer::new(), limits);
        let mut deltas = pipe.feed(&body);
        deltas.extend(pipe.finish());
        deltas
    };
    let error_of = |deltas: &[MessageDelta]| match deltas.last() {
        Some(MessageDelta::Error { error }) => error.clone(),
        other => panic!("expected an error, got {other:?}"),
    };

    // Within the bounds: the whole response.
    let fits = ResponseLimits {
        max_response_bytes: 102,
        max_content_blocks: 2,
        ..ResponseLimits::default()
    };
    let deltas = run(fits);
    assert_eq!(deltas.last(), Some(&MessageDelta::Finish), "{deltas:?}");
    assert!(deltas.contains(&MessageDelta::RedactedReasoning { data: data.clone() }));

    // The 100 bytes of redacted data and the 2 of text cross 101 at the text.
    let deltas = run(ResponseLimits {
        max_response_bytes: 101,
        ..fits
    });
    let e = error_of(&deltas);
    assert_eq!(e.kind, ErrorKind::ResponseTooLarge);
    assert!(e.message.contains("max_response_bytes = 101"), "{e}");
    assert!(deltas.contains(&MessageDelta::RedactedReasoning { data }));
    assert_eq!(text_of(&deltas), "", "{deltas:?}");

    // Two blocks where one is allowed: the text block is the one too many.
    let deltas = run(ResponseLimits {
        max_content_blocks: 1,
        ..fits
    });
    let e = error_of(&deltas);
    assert!(e.message.contains("max_content_blocks = 1"), "{e}");
}

/// One call's arguments may reach `max_tool_argument_bytes` over several deltas, not pass it.
#[test]
fn tool_arguments_may_reach_the_argument_limit_over_several_deltas() {
    use agentloop::provider::anthropic::AnthropicNormalizer;
    use agentloop::provider::sse::SsePipeline;
    use agentloop::provider::ResponseLimits;

    let piece = |s: &str| {
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "input_json_delta", "partial_json": s}}),
        )
    };
    let body = stream(&[
        start(),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "tool_use", "id": "t1", "name": "calc", "input": {}}}),
        ),
        piece("{\"a\":"),
        piece("12}"),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}}),
        ),
        stop(),
    ]);
    let run = |max_tool_argument_bytes: usize| {
        let limits = ResponseLimits {
            max_tool_argument_bytes,
            ..ResponseLimits::default()
        };
        let mut pipe = SsePipeline::with_limits(AnthropicNormalizer::new(), limits);
        let mut deltas = pipe.feed(&body);
        deltas.extend(pipe.finish());
        deltas
    };
    // `{"a":12}` is 8 bytes.
    let deltas = run(8);
    assert_eq!(deltas.last(), Some(&MessageDelta::Finish), "{deltas:?}");
    let deltas = run(7);
    let Some(MessageDelta::Error { error }) = deltas.last() else {
        panic!("{deltas:?}")
    };
    assert_eq!(error.kind, ErrorKind::ResponseTooLarge);
    assert!(
        error.message.contains("max_tool_argument_bytes = 7"),
        "{error}"
    );
}
