//! The Chat Completions normalizer on recorded streams: every quirk of the issue, identical
//! deltas for every read split and every line-ending style, and the `decode` report.

#[path = "provider_support/mod.rs"]
mod support;

use agentloop::model::{ModelParams, ModelRequest, ToolChoice};
use agentloop::provider::decode::{decode, DecodeOutcome, DecodeReport};
use agentloop::provider::http::ProviderKind;
use agentloop::provider::openai::{request_body, OpenAiNormalizer};
use agentloop::provider::sse::{SseEof, SseEvent, SseNormalizer};
use agentloop::tools::ToolSpec;
use agentloop::ErrorKind;
use agentloop::{
    AssistantMessage, FinishReason, Message, MessageDelta, ToolCall, ToolResult, ToolStatus, Usage,
};
use proptest::prelude::*;
use serde_json::json;
use support::*;

const P: ProviderKind = ProviderKind::OpenAi;

fn report(name: &str) -> DecodeReport {
    decode(P, &fixture(name), false)
}

/// A stream built from chunk JSON objects, each as one `data:` event, then `[DONE]`.
fn stream(chunks: &[serde_json::Value], done: bool) -> Vec<u8> {
    let mut s = String::new();
    for c in chunks {
        s.push_str(&format!("data: {c}\n\n"));
    }
    if done {
        s.push_str("data: [DONE]\n\n");
    }
    s.into_bytes()
}

fn delta(d: serde_json::Value) -> serde_json::Value {
    json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": null}]})
}

fn finish(reason: &str) -> serde_json::Value {
    json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

fn tool(
    index: Option<u32>,
    id: Option<&str>,
    name: Option<&str>,
    args: Option<&str>,
) -> serde_json::Value {
    let mut f = serde_json::Map::new();
    if let Some(n) = name {
        f.insert("name".into(), json!(n));
    }
    if let Some(a) = args {
        f.insert("arguments".into(), json!(a));
    }
    let mut t = json!({"type": "function", "function": f});
    if let Some(i) = index {
        t["index"] = json!(i);
    }
    if let Some(id) = id {
        t["id"] = json!(id);
    }
    delta(json!({"tool_calls": [t]}))
}

#[test]
fn text_stream_with_usage_after_the_finish_chunk() {
    let deltas = deltas_whole(P, &fixture("openai_text.sse"));
    assert_eq!(
        deltas,
        vec![
            MessageDelta::StartStep,
            MessageDelta::TextStart,
            MessageDelta::TextDelta {
                text: "Hello".into()
            },
            MessageDelta::TextDelta {
                text: ", wörld é😀".into()
            },
            MessageDelta::TextDelta { text: "!".into() },
            MessageDelta::TextEnd,
            MessageDelta::FinishStep {
                finish_reason: Some(FinishReason::Stop),
                raw_finish_reason: Some("stop".into()),
                usage: Some(Usage {
                    input_tokens: 19,
                    output_tokens: 10,
                    cache_read_input_tokens: 3,
                    cache_creation_input_tokens: 0,
                    reasoning_tokens: 0,
                }),
            },
            MessageDelta::Finish,
        ]
    );
}

#[test]
fn finish_waits_for_done_so_late_usage_is_not_lost() {
    // Cut the stream right after the finish chunk: nothing says "finish" yet...
    let body = fixture("openai_text.sse");
    let text = String::from_utf8(body.clone()).unwrap();
    let cut = text.find("data: {\"id\":\"chatcmpl-9xyz\",\"object\":\"chat.completion.chunk\",\"created\":1718000000,\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_abc123\",\"choices\":[],").unwrap();
    let mut n = OpenAiNormalizer::new();
    let mut dec = agentloop::provider::sse::SseDecoder::new();
    let mut got = Vec::new();
    for ev in dec.feed(&body[..cut]).unwrap() {
        got.extend(n.feed(&ev));
    }
    assert!(!got
        .iter()
        .any(|d| matches!(d, MessageDelta::Finish | MessageDelta::FinishStep { .. })));
    assert_eq!(
        got.last(),
        Some(&MessageDelta::TextEnd),
        "finish_reason closes the text block"
    );
    // ...and EOF right there still completes (finish_reason is terminal evidence), without usage.
    let end = n.clone().finish(SseEof::Clean);
    assert!(matches!(
        end[0],
        MessageDelta::FinishStep { usage: None, .. }
    ));
    assert_eq!(end.last(), Some(&MessageDelta::Finish));
    // With the rest, usage arrives.
    for ev in dec.feed(&body[cut..]).unwrap() {
        got.extend(n.feed(&ev));
    }
    assert!(got.iter().any(
        |d| matches!(d, MessageDelta::FinishStep { usage: Some(u), .. } if u.input_tokens == 19)
    ));
}

#[test]
fn parallel_tool_calls_interleaved_by_index() {
    let r = report("openai_tool_calls_parallel.sse");
    assert_eq!(r.outcome, DecodeOutcome::Completed);
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
    let m = r.message.unwrap();
    assert_eq!(m.tool_calls.len(), 2);
    assert_eq!(m.tool_calls[0].id, "call_A1");
    assert_eq!(m.tool_calls[0].name, "calculator");
    assert_eq!(m.tool_calls[0].arguments, json!({"expression": "2+2"}));
    assert_eq!(m.tool_calls[1].id, "call_B2");
    assert_eq!(m.tool_calls[1].name, "read_file");
    assert_eq!(m.tool_calls[1].arguments, json!({"path": "notes.txt"}));
    assert!(m.tool_calls.iter().all(|c| c.arguments_valid));
    // The input deltas carry the right call id.
    let deltas = deltas_whole(P, &fixture("openai_tool_calls_parallel.sse"));
    let b_deltas: String = deltas
        .iter()
        .filter_map(|d| match d {
            MessageDelta::ToolInputDelta { id, delta } if id == "call_B2" => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(b_deltas, "{\"path\": \"notes.txt\"}");
}

#[test]
fn ollama_reusing_index_zero_for_every_parallel_call() {
    let m = report("openai_ollama_index0.sse").message.unwrap();
    let ids: Vec<&str> = m.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_x1", "call_x2", "call_x3"]);
    assert_eq!(m.tool_calls[1].arguments, json!({"expression": "2*3"}));
    assert_eq!(m.tool_calls[2].name, "read_file");
}

#[test]
fn new_id_on_every_fragment_of_one_call_and_name_assigned_not_appended() {
    let r = report("openai_new_id_each_fragment.sse");
    let m = r.message.unwrap();
    assert_eq!(m.tool_calls.len(), 1, "{:?}", m.tool_calls);
    assert_eq!(m.tool_calls[0].id, "call_f1");
    assert_eq!(m.tool_calls[0].name, "calculator");
    assert_eq!(m.tool_calls[0].arguments, json!({"expression": "7*6"}));
    assert_eq!(r.outcome, DecodeOutcome::Completed);
}

#[test]
fn name_repeated_on_every_fragment_is_not_appended() {
    let body = stream(
        &[
            tool(Some(0), Some("call_1"), Some("calc"), Some("{\"a\":")),
            tool(Some(0), Some("call_1"), Some("calc"), Some("1}")),
            finish("tool_calls"),
        ],
        true,
    );
    let m = decode(P, &body, false).message.unwrap();
    assert_eq!(m.tool_calls[0].name, "calc");
    assert_eq!(m.tool_calls[0].arguments, json!({"a": 1}));
}

#[test]
fn name_arriving_after_the_first_fragment_and_fragments_without_index() {
    let body = stream(
        &[
            tool(Some(0), Some("call_9"), None, Some("{\"q\"")),
            tool(None, None, Some("search"), Some(": 1}")),
            finish("tool_calls"),
        ],
        true,
    );
    let deltas = deltas_whole(P, &body);
    let starts: Vec<_> = deltas
        .iter()
        .filter(|d| matches!(d, MessageDelta::ToolInputStart { .. }))
        .collect();
    assert_eq!(
        starts,
        [&MessageDelta::ToolInputStart {
            id: "call_9".into(),
            name: "search".into()
        }]
    );
    let m = decode(P, &body, false).message.unwrap();
    assert_eq!(m.tool_calls[0].arguments, json!({"q": 1}));
}

#[test]
fn call_without_any_id_gets_a_positional_one() {
    let body = stream(
        &[
            tool(Some(0), None, Some("calc"), Some("{}")),
            finish("tool_calls"),
        ],
        true,
    );
    let m = decode(P, &body, false).message.unwrap();
    assert_eq!(m.tool_calls[0].id, "call_0");
}

#[test]
fn empty_or_whitespace_arguments_mean_empty_object() {
    for args in ["", "   ", "\n"] {
        let body = stream(
            &[
                tool(Some(0), Some("c1"), Some("now"), Some(args)),
                finish("tool_calls"),
            ],
            true,
        );
        let r = decode(P, &body, false);
        let c = &r.message.unwrap().tool_calls[0];
        assert_eq!(c.arguments, json!({}), "{args:?}");
        assert!(c.arguments_valid);
        assert_eq!(c.arguments_raw, args);
    }
}

#[test]
fn invalid_json_arguments_are_kept_raw_and_marked_invalid() {
    let body = stream(
        &[
            tool(Some(0), Some("c1"), Some("calc"), Some("{oops")),
            finish("tool_calls"),
        ],
        true,
    );
    let r = decode(P, &body, false);
    assert_eq!(
        r.outcome,
        DecodeOutcome::Completed,
        "a bad argument is the tool's error, not the stream's"
    );
    let c = &r.message.unwrap().tool_calls[0];
    assert!(!c.arguments_valid);
    assert_eq!(c.arguments, serde_json::Value::Null);
    assert_eq!(c.arguments_raw, "{oops");
}

#[test]
fn reasoning_content_then_text() {
    let r = report("openai_reasoning_deepseek.sse");
    let m = r.message.clone().unwrap();
    assert_eq!(m.reasoning, "The user wants a greeting.");
    assert_eq!(m.text, "Hi there");
    assert_eq!(r.usage.unwrap().reasoning_tokens, 15);
    let deltas = deltas_whole(P, &fixture("openai_reasoning_deepseek.sse"));
    let end = deltas
        .iter()
        .position(|d| *d == MessageDelta::ReasoningEnd)
        .unwrap();
    let start = deltas
        .iter()
        .position(|d| *d == MessageDelta::TextStart)
        .unwrap();
    assert!(end < start, "the reasoning block closes before text starts");
}

#[test]
fn reasoning_field_of_openrouter_and_ollama() {
    let body = stream(
        &[
            delta(json!({"reasoning": "hmm"})),
            delta(json!({"content": "ok"})),
            finish("stop"),
        ],
        true,
    );
    let m = decode(P, &body, false).message.unwrap();
    assert_eq!((m.reasoning.as_str(), m.text.as_str()), ("hmm", "ok"));
}

#[test]
fn both_reasoning_fields_in_one_delta_count_once() {
    let body = stream(
        &[
            delta(json!({"reasoning_content": "once", "reasoning": "once"})),
            finish("stop"),
        ],
        true,
    );
    assert_eq!(decode(P, &body, false).message.unwrap().reasoning, "once");
}

#[test]
fn choices_other_than_zero_are_not_mixed_in() {
    let body = stream(
        &[
            json!({"choices": [{"index": 1, "delta": {"content": "other"}}, {"index": 0, "delta": {"content": "mine"}}]}),
            finish("stop"),
        ],
        true,
    );
    assert_eq!(decode(P, &body, false).message.unwrap().text, "mine");
}

#[test]
fn refusal() {
    let r = report("openai_refusal.sse");
    assert_eq!(
        r.message.unwrap().refusal.as_deref(),
        Some("I'm sorry, I can't help with that.")
    );
    assert_eq!(r.outcome, DecodeOutcome::Completed);
}

#[test]
fn in_band_error_is_terminal_even_when_done_follows() {
    let r = report("openai_error_then_done.sse");
    assert_eq!(r.outcome, DecodeOutcome::Error);
    assert!(!r.committed);
    let e = r.error.unwrap();
    assert_eq!(e.kind, ErrorKind::ServerError);
    assert!(e.retryable);
    assert_eq!(
        r.message.unwrap().text,
        "Partial",
        "the partial message is shown, not committed"
    );
    let deltas = deltas_whole(P, &fixture("openai_error_then_done.sse"));
    assert!(matches!(deltas.last(), Some(MessageDelta::Error { .. })));
    assert!(!deltas.contains(&MessageDelta::Finish));
}

#[test]
fn in_band_errors_are_classified() {
    let cases = [
        (
            json!({"error": {"message": "This model's maximum context length is 8192 tokens", "type": "invalid_request_error", "code": "context_length_exceeded"}}),
            ErrorKind::ContextOverflow,
        ),
        (
            json!({"error": {"message": "Rate limit", "type": "tokens", "code": "rate_limit_exceeded"}}),
            ErrorKind::RateLimited,
        ),
        (
            json!({"error": {"message": "Provider returned error", "code": 502}}),
            ErrorKind::ServerError,
        ),
        (
            json!({"error": {"message": "quota", "code": "insufficient_quota"}}),
            ErrorKind::QuotaExhausted,
        ),
        (
            json!({"error": "model is overloaded, please try again"}),
            ErrorKind::ServerError,
        ),
    ];
    for (chunk, kind) in cases {
        let body = stream(&[delta(json!({"content": "x"})), chunk.clone()], true);
        let r = decode(P, &body, false);
        assert_eq!(r.error.map(|e| e.kind), Some(kind), "{chunk}");
    }
}

#[test]
fn azure_chunks_with_empty_choices_or_without_delta() {
    let r = report("openai_azure.sse");
    assert_eq!(r.outcome, DecodeOutcome::Completed);
    assert_eq!(r.message.unwrap().text, "Azure says hi");
    assert_eq!(r.usage, None, "no usage sent: null, never zeros");
}

#[test]
fn length_truncated_tool_arguments_are_never_executable() {
    let r = report("openai_length_truncated_tool.sse");
    assert_eq!(r.outcome, DecodeOutcome::Completed);
    assert_eq!(r.finish_reason, Some(FinishReason::Length));
    assert_eq!(r.raw_finish_reason.as_deref(), Some("length"));
    let c = &r.message.unwrap().tool_calls[0];
    assert!(!c.arguments_valid);
    assert_eq!(c.arguments, serde_json::Value::Null);
    assert!(c.arguments_raw.ends_with("a very long li"));
}

#[test]
fn length_marks_even_well_formed_arguments_unexecutable() {
    let body = stream(
        &[
            tool(Some(0), Some("c"), Some("calc"), Some("{}")),
            finish("length"),
        ],
        true,
    );
    let c = &decode(P, &body, false).message.unwrap().tool_calls[0];
    assert!(!c.arguments_valid);
}

#[test]
fn content_filter_finish() {
    let r = report("openai_content_filter.sse");
    assert_eq!(r.finish_reason, Some(FinishReason::ContentFilter));
    assert_eq!(r.outcome, DecodeOutcome::Completed);
}

#[test]
fn eof_after_finish_reason_without_done_completes() {
    let r = report("openai_eof_after_finish.sse");
    assert_eq!(r.outcome, DecodeOutcome::Completed);
    assert_eq!(r.usage.unwrap().output_tokens, 3);
}

#[test]
fn done_without_finish_reason_completes_with_null_reason() {
    let body = stream(&[delta(json!({"content": "hi"}))], true);
    let r = decode(P, &body, false);
    assert_eq!(r.outcome, DecodeOutcome::Completed);
    assert_eq!(r.finish_reason, None);
}

#[test]
fn clean_eof_without_terminal_evidence_is_incomplete() {
    let r = report("openai_incomplete.sse");
    assert_eq!(r.outcome, DecodeOutcome::Error);
    let e = r.error.unwrap();
    assert_eq!(e.kind, ErrorKind::IncompleteStream);
    assert!(e.retryable);
    assert_eq!(r.message.unwrap().text, "I was saying something");
    // Empty body too.
    assert_eq!(
        decode(P, b"", false).error.unwrap().kind,
        ErrorKind::IncompleteStream
    );
    // EOF inside an event is said so.
    let deltas = deltas_whole(P, b"data: {\"choices\":[]}\n\ndata: {\"choi");
    match deltas.last() {
        Some(MessageDelta::Error { error }) => {
            assert_eq!(error.kind, ErrorKind::IncompleteStream);
            assert!(
                error.message.contains("inside an event"),
                "{}",
                error.message
            );
        }
        other => panic!("{other:?}"),
    }
}

/// Malformed data repeats on a retry, so it is `malformed_response`, not retried.
#[test]
fn malformed_json_is_an_unretried_error_naming_the_event() {
    let r = report("openai_malformed.sse");
    let e = r.error.unwrap();
    assert_eq!(e.kind, ErrorKind::MalformedResponse);
    assert!(!e.retryable);
    let deltas = deltas_whole(P, &fixture("openai_malformed.sse"));
    let Some(MessageDelta::Error { error }) = deltas.last() else {
        panic!()
    };
    assert!(error.message.contains("event #2"), "{}", error.message);
    assert!(
        error.message.contains("not valid JSON"),
        "{}",
        error.message
    );
}

#[test]
fn unexpected_shape_is_an_unretried_error_naming_the_event() {
    let deltas = deltas_whole(P, &fixture("openai_bad_shape.sse"));
    let Some(MessageDelta::Error { error }) = deltas.last() else {
        panic!("{deltas:?}")
    };
    assert_eq!(error.kind, ErrorKind::MalformedResponse);
    assert!(
        error.message.contains("event #2") && error.message.contains("unexpected JSON shape"),
        "{}",
        error.message
    );
    for bad in [
        json!(42),
        json!([1]),
        json!({"choices": [{"delta": {"content": 5}}]}),
        json!({"choices": [{"delta": {"content": [{"type": "text", "text": 5}]}}]}),
        json!({"choices": [{"delta": {"tool_calls": {}}}]}),
    ] {
        let r = decode(P, &stream(std::slice::from_ref(&bad), true), false);
        assert_eq!(
            r.error.map(|e| e.kind),
            Some(ErrorKind::MalformedResponse),
            "{bad}"
        );
    }
}

#[test]
fn content_after_finish_reason_is_an_error_not_silently_dropped() {
    let body = stream(
        &[
            delta(json!({"content": "a"})),
            finish("stop"),
            delta(json!({"content": "late"})),
        ],
        true,
    );
    let r = decode(P, &body, false);
    assert_eq!(r.error.unwrap().kind, ErrorKind::MalformedResponse);
}

/// Mistral's magistral models send `content` as an array of parts; `thinking`
/// parts (whose `thinking` is an array of text parts, or a string) are reasoning, `text`
/// parts are text, other part types are ignored.
#[test]
fn mistral_content_parts_are_reasoning_and_text() {
    let body = stream(
        &[
            delta(json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": [{"type": "text", "text": "Two and "}]}]})),
            delta(json!({"content": [{"type": "thinking", "thinking": "two."}]})),
            delta(json!({"content": [{"type": "text", "text": "4"},
                                     {"type": "reference", "reference_ids": [1]}]})),
            delta(json!({"content": "!"})),
            delta(json!({"content": []})),
            finish("stop"),
        ],
        true,
    );
    let deltas = deltas_whole(P, &body);
    assert_eq!(
        deltas,
        vec![
            MessageDelta::StartStep,
            MessageDelta::ReasoningStart,
            MessageDelta::ReasoningDelta {
                text: "Two and ".into()
            },
            MessageDelta::ReasoningDelta {
                text: "two.".into()
            },
            MessageDelta::ReasoningEnd,
            MessageDelta::TextStart,
            MessageDelta::TextDelta { text: "4".into() },
            MessageDelta::TextDelta { text: "!".into() },
            MessageDelta::TextEnd,
            MessageDelta::FinishStep {
                finish_reason: Some(FinishReason::Stop),
                raw_finish_reason: Some("stop".into()),
                usage: None,
            },
            MessageDelta::Finish,
        ]
    );
    // One chunk with both kinds, in order.
    let body = stream(
        &[
            delta(json!({"content": [
                {"type": "thinking", "thinking": [{"type": "text", "text": "hm"}]},
                {"type": "text", "text": "ok"}]})),
            finish("stop"),
        ],
        true,
    );
    let r = decode(P, &body, false);
    let m = r.message.unwrap();
    assert_eq!((m.reasoning.as_str(), m.text.as_str()), ("hm", "ok"));
    // Parts after finish_reason are content after finish_reason.
    let body = stream(
        &[
            finish("stop"),
            delta(json!({"content": [{"type": "text", "text": "late"}]})),
        ],
        true,
    );
    assert_eq!(
        decode(P, &body, false).error.map(|e| e.kind),
        Some(ErrorKind::MalformedResponse)
    );
}

#[test]
fn normalizer_is_silent_after_it_ended() {
    let mut n = OpenAiNormalizer::new();
    let done = SseEvent {
        data: "[DONE]".into(),
        ..Default::default()
    };
    assert_eq!(n.feed(&done).last(), Some(&MessageDelta::Finish));
    assert!(n.feed(&done).is_empty());
    assert!(n.finish(SseEof::Clean).is_empty());
}

#[test]
fn decode_report_has_exactly_the_documented_json_shape() {
    let r = report("openai_tool_calls_parallel.sse");
    let v = serde_json::to_value(&r).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "committed",
            "error",
            "finish_reason",
            "message",
            "outcome",
            "raw_finish_reason",
            "usage"
        ]
    );
    assert_eq!(v["outcome"], "completed");
    assert_eq!(v["committed"], true);
    assert_eq!(v["finish_reason"], "tool_calls");
    assert_eq!(v["error"], serde_json::Value::Null);
    let m = v["message"].as_object().unwrap();
    let mut mk: Vec<&str> = m.keys().map(String::as_str).collect();
    mk.sort_unstable();
    assert_eq!(
        mk,
        [
            "reasoning",
            "reasoning_signature",
            "redacted_reasoning",
            "refusal",
            "text",
            "tool_calls"
        ]
    );
    let c = v["message"]["tool_calls"][0].as_object().unwrap();
    let mut ck: Vec<&str> = c.keys().map(String::as_str).collect();
    ck.sort_unstable();
    assert_eq!(
        ck,
        [
            "arguments",
            "arguments_raw",
            "arguments_valid",
            "id",
            "name"
        ]
    );
    let u = v["usage"].as_object().unwrap();
    assert_eq!(u.len(), 5);
    assert_eq!(v["usage"]["input_tokens"], 80);
    let err = serde_json::to_value(report("openai_incomplete.sse")).unwrap();
    let mut ek: Vec<&str> = err["error"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    ek.sort_unstable();
    assert_eq!(
        ek,
        [
            "context_overflow",
            "http_status",
            "kind",
            "retry_after_ms",
            "retryable"
        ]
    );
    assert_eq!(err["error"]["kind"], "incomplete_stream");
    assert_eq!(err["outcome"], "error");
    assert_eq!(err["usage"], serde_json::Value::Null);
}

#[test]
fn request_body_carries_system_history_tools_and_params() {
    let req = ModelRequest {
        run_id: "r".into(),
        model_call_index: 2,
        attempt: 1,
        session_turn: 1,
        model: "gpt-4o".into(),
        system: Some("be brief".into()),
        messages: vec![
            Message::user("2+2?"),
            Message::Assistant(AssistantMessage {
                tool_calls: vec![ToolCall::from_raw("call_1", "calc", "{\"e\":\"2+2\"}")],
                ..Default::default()
            }),
            Message::Tool(ToolResult {
                tool_call_id: "call_1".into(),
                name: "calc".into(),
                content: "4".into(),
                status: ToolStatus::Completed,
            }),
        ]
        .into(),
        tools: vec![ToolSpec {
            name: "calc".into(),
            description: "evaluates".into(),
            parameters: json!({"type": "object"}),
        }]
        .into(),
        params: ModelParams {
            temperature: Some(0.5),
            max_tokens: Some(100),
            tool_choice: None,
            ..ModelParams::default()
        },
    };
    let b = request_body(&req, "fallback");
    assert_eq!(b["model"], "gpt-4o");
    assert_eq!(b["stream"], true);
    assert_eq!(b["stream_options"]["include_usage"], true);
    assert_eq!(
        b["messages"][0],
        json!({"role": "system", "content": "be brief"})
    );
    assert_eq!(b["messages"][1], json!({"role": "user", "content": "2+2?"}));
    assert_eq!(b["messages"][2]["role"], "assistant");
    assert_eq!(
        b["messages"][2]["content"], "",
        "a tool-calls-only message has empty content (llama.cpp refuses null and absent)"
    );
    assert_eq!(
        b["messages"][2]["tool_calls"][0]["function"]["arguments"],
        "{\"e\":\"2+2\"}"
    );
    assert_eq!(
        b["messages"][3],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "4"})
    );
    assert_eq!(b["tools"][0]["function"]["name"], "calc");
    assert_eq!(
        b["tools"][0]["function"]["parameters"],
        json!({"type": "object"})
    );
    assert_eq!(b["temperature"], 0.5);
    assert_eq!(b["max_tokens"], 100);
}

#[test]
fn request_body_sends_each_tool_choice_only_with_tools() {
    let cases = [
        (ToolChoice::Auto, json!("auto")),
        (ToolChoice::None, json!("none")),
        (ToolChoice::Required, json!("required")),
        (
            ToolChoice::Tool("calc".into()),
            json!({"type": "function", "function": {"name": "calc"}}),
        ),
    ];
    for (choice, wire) in cases {
        let b = request_body(
            &tool_choice_request(true, with_choice(Some(choice.clone()))),
            "m",
        );
        assert_eq!(b["tool_choice"], wire, "{choice}");
        // The final step offers no tools (R-OUT-5): a tool_choice without tools is an error
        // at OpenAI, so none is sent.
        let b = request_body(&tool_choice_request(false, with_choice(Some(choice))), "m");
        assert!(b.get("tool_choice").is_none(), "{b}");
    }
    let b = request_body(&tool_choice_request(true, with_choice(None)), "m");
    assert!(
        b.get("tool_choice").is_none(),
        "no choice: the server's default"
    );
}

#[test]
fn request_body_sends_max_tokens_only_when_set() {
    let b = request_body(&tool_choice_request(false, ModelParams::default()), "m");
    assert!(b.get("max_tokens").is_none(), "{b}");
    let params = ModelParams {
        max_tokens: Some(32),
        ..ModelParams::default()
    };
    let b = request_body(&tool_choice_request(false, params), "m");
    assert_eq!(b["max_tokens"], 32);
}

#[test]
fn every_fixture_is_identical_read_byte_by_byte_and_with_crlf_or_cr() {
    for (name, body) in fixtures("openai_") {
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
    fn every_fixture_is_identical_for_random_read_splits(
        points in cut_points(24),
        crlf in any::<bool>(),
    ) {
        for (name, body) in fixtures("openai_") {
            let body = if crlf { to_crlf(&body) } else { body };
            let whole = deltas_whole(P, &body);
            let split = deltas_split(P, &body, &points);
            prop_assert_eq!(&split, &whole, "{}", name);
            // And so is the decode report built from them.
            prop_assert_eq!(decode(P, &body, false).deltas, whole);
        }
    }

    #[test]
    fn arbitrary_chunk_sequences_never_panic_and_always_end(
        pieces in proptest::collection::vec(
            prop_oneof![
                Just(delta(json!({"content": "x"}))),
                Just(delta(json!({"reasoning_content": "r"}))),
                Just(delta(json!({"refusal": "no"}))),
                (0u32..3, proptest::option::of("[a-c]"), proptest::option::of("[fg]"), proptest::option::of("[{}\" :a1]{0,6}"))
                    .prop_map(|(i, id, name, args)| tool(Some(i), id.as_deref(), name.as_deref(), args.as_deref())),
                Just(finish("stop")),
                Just(finish("length")),
                Just(json!({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}})),
                Just(json!({"error": {"message": "boom"}})),
            ],
            0..12,
        ),
        done in any::<bool>(),
        points in cut_points(8),
    ) {
        let body = stream(&pieces, done);
        let whole = deltas_whole(P, &body);
        let last = whole.last().cloned();
        let terminal = matches!(last, Some(MessageDelta::Finish | MessageDelta::Error { .. }));
        prop_assert!(terminal);
        prop_assert_eq!(deltas_split(P, &body, &points), whole.clone());
        // Every started tool input is ended exactly once on a completed stream.
        if last == Some(MessageDelta::Finish) {
            let starts = whole.iter().filter(|d| matches!(d, MessageDelta::ToolInputStart { .. })).count();
            let ends = whole.iter().filter(|d| matches!(d, MessageDelta::ToolInputEnd { .. })).count();
            let calls = whole.iter().filter(|d| matches!(d, MessageDelta::ToolCall { .. })).count();
            prop_assert_eq!(starts, ends);
            prop_assert_eq!(ends, calls);
        }
    }
}

/// Servers that omit tool-call ids get generated ones; the client prefixes them with the run
/// and step, so two turns of one session never produce the same id (results are keyed by id).
#[test]
fn generated_ids_carry_the_clients_prefix() {
    use agentloop::provider::openai::OpenAiNormalizer;
    use agentloop::provider::sse::SsePipeline;
    let body = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"calculator\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: [DONE]\n\n"
    );
    let ids = |prefix: &str| -> Vec<String> {
        let mut p = SsePipeline::new(OpenAiNormalizer::new().with_id_prefix(prefix));
        let mut deltas = p.feed(body.as_bytes());
        deltas.extend(p.finish());
        deltas
            .into_iter()
            .filter_map(|d| match d {
                agentloop::MessageDelta::ToolCall { id, .. } => Some(id),
                _ => None,
            })
            .collect()
    };
    assert_eq!(ids("call_run-1_1_"), vec!["call_run-1_1_0".to_string()]);
    assert_ne!(ids("call_run-1_1_"), ids("call_run-1_2_"));
}

#[test]
fn parallel_tool_calls_complete_in_one_chunk_are_all_kept() {
    // llama.cpp-style servers may send every call of a turn, whole, in one delta.
    let call = |i: u32, id: &str, name: &str, args: &str| json!({"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": args}});
    let body = stream(
        &[
            delta(json!({"tool_calls": [
                call(0, "call_1", "calculator", r#"{"expression":"1+1"}"#),
                call(1, "call_2", "read_file", r#"{"path":"a.txt"}"#),
                call(2, "call_3", "calculator", r#"{"expression":"2*3"}"#),
            ]})),
            finish("tool_calls"),
        ],
        true,
    );
    let r = decode(P, &body, false);
    assert_eq!(r.outcome, DecodeOutcome::Completed);
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
    let m = r.message.unwrap();
    let calls: Vec<(&str, &str, serde_json::Value)> = m
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.clone()))
        .collect();
    assert_eq!(
        calls,
        [
            ("call_1", "calculator", json!({"expression": "1+1"})),
            ("call_2", "read_file", json!({"path": "a.txt"})),
            ("call_3", "calculator", json!({"expression": "2*3"})),
        ]
    );
}

#[test]
fn reasoning_replay_parses_its_three_settings_and_names_a_wrong_one() {
    use agentloop::provider::openai::ReasoningReplay;
    assert_eq!("off".parse(), Ok(ReasoningReplay::Off));
    assert_eq!("current-turn".parse(), Ok(ReasoningReplay::CurrentTurn));
    assert_eq!("all".parse(), Ok(ReasoningReplay::All));
    let e = "sometimes".parse::<ReasoningReplay>().unwrap_err();
    assert!(e.contains("\"sometimes\""), "{e}");
    assert!(e.contains("off, current-turn or all"), "{e}");
}

#[test]
fn empty_content_after_finish_reason_is_not_content() {
    // vLLM-style servers send a last chunk with `"content": ""` (and the usage) after the
    // finish reason; empty parts, reasoning or refusal fields carry nothing either.
    for empty in [
        json!({"content": ""}),
        json!({"content": []}),
        json!({"content": [{"type": "text", "text": ""}]}),
        json!({"reasoning_content": "", "reasoning": "", "refusal": ""}),
    ] {
        let body = stream(
            &[
                delta(json!({"content": "hi"})),
                finish("stop"),
                delta(empty.clone()),
            ],
            true,
        );
        let r = decode(P, &body, false);
        assert_eq!(
            r.outcome,
            DecodeOutcome::Completed,
            "{empty}: {:?}",
            r.error
        );
        assert_eq!(r.message.unwrap().text, "hi");
    }
}
