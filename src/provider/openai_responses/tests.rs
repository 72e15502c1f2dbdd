//! Unit tests of the Responses wire module: the request body and the decoding of recorded
//! streams (`tests/fixtures/sse/responses_*.sse`, written in the shape OpenAI's `/v1/responses` streams have,
//! sequence numbers and obfuscation fields included).

use serde_json::json;

use super::*;
use crate::error::ErrorKind;
use crate::message::{AssistantMessage, ToolCall, ToolResult, ToolStatus};
use crate::model::ModelParams;
use crate::provider::sse::SsePipeline;
use crate::provider::test_support::{calls_of, error_of, finish_of, reasoning_of, text_of};
use crate::tools::ToolSpec;
use agentloop_core::output::OutputSpec;

/// A recorded stream of `tests/fixtures/sse/`, by name.
macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!("../../../tests/fixtures/sse/", $name, ".sse"))
    };
}

fn decode(body: &str) -> Vec<MessageDelta> {
    crate::provider::test_support::decode(ResponsesNormalizer::new(), body)
}

#[test]
fn a_text_stream_decodes_to_text_stop_and_usage() {
    let d = decode(fixture!("responses_text"));
    assert_eq!(d.first(), Some(&MessageDelta::StartStep));
    assert_eq!(d.last(), Some(&MessageDelta::Finish));
    assert_eq!(text_of(&d), "The capital of France is Paris.");
    assert_eq!(
        d.iter().filter(|x| **x == MessageDelta::TextStart).count(),
        1
    );
    assert_eq!(d.iter().filter(|x| **x == MessageDelta::TextEnd).count(), 1);
    let (reason, raw, usage) = finish_of(&d);
    assert_eq!(reason, Some(FinishReason::Stop));
    assert_eq!(raw.as_deref(), Some("completed"));
    let u = usage.expect("usage");
    assert_eq!((u.input_tokens, u.output_tokens), (14, 9));
}

#[test]
fn a_reasoning_and_tool_call_stream_decodes_to_summary_encrypted_item_call_and_usage() {
    let d = decode(fixture!("responses_reasoning_tool_call"));
    assert_eq!(d.last(), Some(&MessageDelta::Finish));
    assert_eq!(
        reasoning_of(&d),
        "**Computing the sum**\n\nThe user wants 2+3; I should use the calculator tool.\n\n**Calling the tool**"
    );
    let kept: Vec<&String> = d
        .iter()
        .filter_map(|x| match x {
            MessageDelta::RedactedReasoning { data } => Some(data),
            _ => None,
        })
        .collect();
    assert_eq!(kept.len(), 1);
    let item = reasoning_item(kept[0]).expect("a reasoning item");
    assert_eq!(item["id"], "rs_68a1c1ab3c4d8190b1a2c3d4e5f60718");
    assert!(item["encrypted_content"]
        .as_str()
        .is_some_and(|e| e.starts_with("gAAAA")));
    assert_eq!(item["summary"].as_array().map(Vec::len), Some(2));
    let call = "call_Xq7bN2mKp4Lr9sTv1wYz3A5c";
    assert!(d.contains(&MessageDelta::ToolInputStart {
        id: call.into(),
        name: "calculator".into()
    }));
    let streamed: String = d
        .iter()
        .filter_map(|x| match x {
            MessageDelta::ToolInputDelta { id, delta } if id == call => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, r#"{"expression":"2+3"}"#);
    assert_eq!(
        d.iter()
            .filter(|x| matches!(x, MessageDelta::ToolCall { .. }))
            .collect::<Vec<_>>(),
        vec![&MessageDelta::ToolCall {
            id: call.into(),
            name: "calculator".into(),
            arguments: r#"{"expression":"2+3"}"#.into()
        }]
    );
    // The reasoning block is closed before the call starts.
    let end = d.iter().position(|x| *x == MessageDelta::ReasoningEnd);
    let start = d
        .iter()
        .position(|x| matches!(x, MessageDelta::ToolInputStart { .. }));
    assert!(end < start, "{d:?}");
    let (reason, _, usage) = finish_of(&d);
    assert_eq!(reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        usage,
        Some(Usage {
            input_tokens: 312,
            output_tokens: 86,
            cache_read_input_tokens: 128,
            cache_creation_input_tokens: 0,
            reasoning_tokens: 64,
        })
    );
}

#[test]
fn every_split_of_a_recorded_stream_decodes_the_same() {
    let recorded = fixture!("responses_reasoning_tool_call");
    let body = recorded.as_bytes();
    let whole = decode(recorded);
    for step in [1usize, 7, 64, 333] {
        let mut p = SsePipeline::new(ResponsesNormalizer::new());
        let mut out = Vec::new();
        for chunk in body.chunks(step) {
            out.extend(p.feed(chunk));
        }
        out.extend(p.finish());
        assert_eq!(out, whole, "reads of {step} bytes");
    }
}

#[test]
fn incomplete_for_max_output_tokens_is_a_length_finish() {
    let d = decode(fixture!("responses_incomplete"));
    assert_eq!(d.last(), Some(&MessageDelta::Finish));
    assert_eq!(text_of(&d), "Once upon a time there was");
    let (reason, raw, usage) = finish_of(&d);
    assert_eq!(reason, Some(FinishReason::Length));
    assert_eq!(raw.as_deref(), Some("max_output_tokens"));
    assert_eq!(usage.map(|u| u.output_tokens), Some(16));
}

#[test]
fn response_failed_with_context_length_exceeded_is_a_context_overflow() {
    let d = decode(fixture!("responses_failed_context"));
    let e = error_of(&d);
    assert_eq!(e.kind, ErrorKind::ContextOverflow, "{e:?}");
    assert!(e.context_overflow());
}

#[test]
fn error_events_are_classified_like_the_other_providers() {
    let d = decode(fixture!("responses_error_rate_limit"));
    let e = error_of(&d);
    assert_eq!(e.kind, ErrorKind::RateLimited, "{e:?}");
    assert!(e.retryable());
    for (code, kind) in [
        ("server_error", ErrorKind::ServerError),
        ("context_length_exceeded", ErrorKind::ContextOverflow),
        ("invalid_request_error", ErrorKind::BadRequest),
        ("insufficient_quota", ErrorKind::QuotaExhausted),
    ] {
        let failed = json!({"type": "response.failed", "response": {"id": "r", "status": "failed",
            "error": {"code": code, "message": "x"}}});
        let d = decode(&format!("data: {failed}\n\n"));
        assert_eq!(error_of(&d).kind, kind, "response.failed {code}");
        let err = json!({"type": "error", "code": code, "message": "x", "param": null});
        let d = decode(&format!("event: error\ndata: {err}\n\n"));
        assert_eq!(error_of(&d).kind, kind, "error event {code}");
    }
}

/// OpenAI's own `error` events nest the error object (`{"type": "error", "error": {"type",
/// "code", "message"}}`); gateways send it flat. Both are read.
#[test]
fn nested_and_flat_error_events_and_failed_responses_from_openai() {
    let nested = json!({"type": "error", "sequence_number": 2, "error": {"type": "insufficient_quota",
        "code": "insufficient_quota", "message": "You exceeded your current quota.", "param": null}});
    let d = decode(&format!("event: error\ndata: {nested}\n\n"));
    assert_eq!(error_of(&d).kind, ErrorKind::QuotaExhausted);
    let d = decode(&format!("data: {nested}\n\n"));
    assert_eq!(
        error_of(&d).kind,
        ErrorKind::QuotaExhausted,
        "without an event: line"
    );
    let failed = json!({"type": "response.failed", "sequence_number": 1, "response": {"id": "r",
        "status": "failed", "error": {"code": "rate_limit_exceeded",
        "message": "Request too large for gpt-4o-mini on tokens per min (TPM): Limit 30000, Requested 35364."}}});
    let d = decode(&format!("event: response.failed\ndata: {failed}\n\n"));
    assert_eq!(error_of(&d).kind, ErrorKind::RateLimited);
    let bare = json!({"type": "response.failed", "response": {"id": "r", "status": "failed", "error": null}});
    let d = decode(&format!("data: {bare}\n\n"));
    assert_eq!(error_of(&d).kind, ErrorKind::ServerError);
}

#[test]
fn eof_before_completed_is_incomplete_and_garbage_is_malformed() {
    let body = fixture!("responses_text");
    let cut = &body[..body.find("event: response.completed").expect("completed")];
    let d = decode(cut);
    assert_eq!(error_of(&d).kind, ErrorKind::IncompleteStream);
    assert!(error_of(&d).retryable());
    let d = decode("data: {not json\n\n");
    assert_eq!(error_of(&d).kind, ErrorKind::MalformedResponse);
    let d = decode("data: {\"type\":\"response.function_call_arguments.delta\",\"item_id\":\"fc_x\",\"delta\":\"{\"}\n\n");
    assert_eq!(error_of(&d).kind, ErrorKind::MalformedResponse);
}

#[test]
fn too_many_output_items_are_response_too_large() {
    let mut body = String::new();
    for i in 0..5 {
        let item = json!({"type": "response.output_item.added", "output_index": i,
            "item": {"type": "function_call", "id": format!("fc_{i}"), "call_id": format!("call_{i}"), "name": "t", "arguments": ""}});
        body += &format!("data: {item}\n\n");
    }
    let limits = ResponseLimits {
        max_content_blocks: 3,
        ..ResponseLimits::default()
    };
    let mut p = SsePipeline::with_limits(ResponsesNormalizer::new(), limits);
    let d = p.feed(body.as_bytes());
    assert_eq!(error_of(&d).kind, ErrorKind::ResponseTooLarge);
}

fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        run_id: "r".into(),
        model_call_index: 2,
        attempt: 1,
        session_turn: 0,
        model: String::new(),
        system: Some("You are terse.".into()),
        messages: messages.into(),
        tools: vec![ToolSpec {
            name: "calculator".into(),
            description: "Evaluates arithmetic".into(),
            parameters: json!({"type": "object", "properties": {"expression": {"type": "string"}}}),
        }]
        .into(),
        params: ModelParams {
            tool_choice: Some(ToolChoice::Required),
            max_tokens: Some(500),
            ..ModelParams::default()
        },
    }
}

#[test]
fn the_request_carries_instructions_items_tools_and_the_stateless_settings() {
    let rs = json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA", "summary": []})
        .to_string();
    let assistant = AssistantMessage {
        text: String::new(),
        reasoning: "thinking".into(),
        redacted_reasoning: vec![rs, "anthropic-opaque-data".into()],
        tool_calls: vec![ToolCall::from_raw(
            "call_1",
            "calculator",
            r#"{"expression":"2+3"}"#,
        )],
        ..AssistantMessage::default()
    };
    let req = request(vec![
        Message::user("What is 2+3?"),
        Message::Assistant(assistant),
        Message::Tool(ToolResult {
            tool_call_id: "call_1".into(),
            name: "calculator".into(),
            content: "5".into(),
            status: ToolStatus::Completed,
        }),
    ]);
    let body = request_body(&req, "gpt-5-mini");
    assert_eq!(body["model"], "gpt-5-mini");
    assert_eq!(body["instructions"], "You are terse.");
    assert_eq!(body["stream"], true);
    assert_eq!(body["store"], false);
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(body["max_output_tokens"], 500);
    assert_eq!(body["tool_choice"], "required");
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "name": "calculator", "description": "Evaluates arithmetic",
                "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
                "strict": false}])
    );
    assert_eq!(
        body["input"],
        json!([
            {"role": "user", "content": "What is 2+3?"},
            {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA", "summary": []},
            {"type": "function_call", "call_id": "call_1", "name": "calculator",
             "arguments": "{\"expression\":\"2+3\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "5"},
        ])
    );
    assert!(body.get("messages").is_none() && body.get("max_tokens").is_none());
}

#[test]
fn encrypted_reasoning_is_for_reasoning_models_unless_set_and_effort_and_summary_are_sent() {
    let rs = json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA", "summary": []})
        .to_string();
    let assistant = AssistantMessage {
        text: "Hi".into(),
        redacted_reasoning: vec![rs],
        ..AssistantMessage::default()
    };
    let mut req = request(vec![
        Message::user("hi"),
        Message::Assistant(assistant),
        Message::user("again"),
    ]);
    req.tools = Vec::new().into();
    let plain = request_body(&req, "gpt-4o");
    assert!(plain.get("include").is_none() && plain.get("reasoning").is_none());
    assert_eq!(
        plain["input"],
        json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hi"},
               {"role": "user", "content": "again"}]),
        "no reasoning item goes to a model that did not ask for it"
    );
    for (model, reasoning) in [
        ("gpt-5.1-codex", true),
        ("openai/o3", true),
        ("gpt-50", false),
        ("o1x", false),
        ("gpt-4.1", false),
    ] {
        assert_eq!(is_reasoning_model(model), reasoning, "{model}");
    }
    for model in ["o4-mini", "gpt-5", "gpt-5.1-codex"] {
        let body = request_body(&req, model);
        assert_eq!(
            body["include"],
            json!(["reasoning.encrypted_content"]),
            "{model}"
        );
        assert_eq!(body["input"][1]["type"], "reasoning", "{model}");
    }
    let set = ResponsesReasoning {
        effort: Some("low".into()),
        summary: Some("auto".into()),
        encrypted: Some(true),
    };
    let body = request_body_with(&req, "my-gateway-model", &set);
    assert_eq!(
        body["reasoning"],
        json!({"effort": "low", "summary": "auto"})
    );
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    let off = ResponsesReasoning {
        encrypted: Some(false),
        ..ResponsesReasoning::default()
    };
    let body = request_body_with(&req, "gpt-5", &off);
    assert!(body.get("include").is_none());
    assert_eq!(body["input"].as_array().map(Vec::len), Some(3));
}

#[test]
fn typed_answers_ask_for_a_json_schema_text_format_and_named_tools_are_forced() {
    let mut req = request(vec![Message::user("hi")]);
    req.model = "openai-responses:gpt-5".into();
    req.params.tool_choice = Some(ToolChoice::Tool("calculator".into()));
    req.params.output = Some(OutputSpec::new(
        "my answer",
        json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
    ));
    let body = request_body(&req, "default");
    assert_eq!(body["model"], "gpt-5", "the registry prefix is dropped");
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "name": "calculator"})
    );
    assert_eq!(body["text"]["format"]["type"], "json_schema");
    assert_eq!(body["text"]["format"]["name"], "my_answer");
    assert_eq!(body["text"]["format"]["strict"], false);
    assert_eq!(
        body["text"]["format"]["schema"]["properties"]["n"]["type"],
        "integer"
    );
    assert!(body.get("response_format").is_none());
}

/// `data:` lines for `events`, one SSE event each.
fn sse(events: &[serde_json::Value]) -> String {
    events.iter().map(|e| format!("data: {e}\n\n")).collect()
}

fn tool_calls_of(deltas: &[MessageDelta]) -> Vec<(&str, &str)> {
    let calls = calls_of(deltas).into_iter();
    calls.map(|(id, _, arguments)| (id, arguments)).collect()
}

/// A server that sends a call's arguments only on the finished item (no argument deltas, no
/// `function_call_arguments.done`) still has them called with; the call is complete when its
/// item is done, before the text that follows it.
#[test]
fn a_function_call_item_done_completes_the_call_with_the_items_arguments() {
    let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1",
        "name": "calculator", "arguments": ""});
    let mut done = call.clone();
    done["arguments"] = json!(r#"{"expression":"2+3"}"#);
    let d = decode(&sse(&[
        json!({"type": "response.created", "response": {"id": "r"}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": call}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": done}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "delta": "Calling."}),
        json!({"type": "response.completed", "response": {"id": "r"}}),
    ]));
    assert_eq!(tool_calls_of(&d), [("call_1", r#"{"expression":"2+3"}"#)]);
    let called = d
        .iter()
        .position(|x| matches!(x, MessageDelta::ToolCall { .. }));
    let text = d.iter().position(|x| *x == MessageDelta::TextStart);
    assert!(called.is_some() && called < text, "{d:?}");
    assert_eq!(finish_of(&d).0, Some(FinishReason::ToolCalls));
}

/// The deltas of `events` fed one by one to a normalizer bounded by `limits` alone.
fn feed_limited(limits: &ResponseLimits, events: &[serde_json::Value]) -> Vec<MessageDelta> {
    let mut n = ResponsesNormalizer::new();
    n.set_limits(limits);
    let mut out = Vec::new();
    for e in events {
        let ev = SseEvent {
            data: e.to_string(),
            ..SseEvent::default()
        };
        n.feed_into(&ev, &mut out);
    }
    out
}

/// The normalizer bounds the arguments it accumulates itself (the pipeline's meter counts the
/// same deltas; a normalizer used alone must not buffer past the bound): arguments of exactly
/// `max_tool_argument_bytes` pass, one delta that carries them past it fails the response.
#[test]
fn a_calls_arguments_may_reach_the_argument_limit_but_not_pass_it() {
    let limits = ResponseLimits {
        max_tool_argument_bytes: 8,
        ..ResponseLimits::default()
    };
    let stream = |deltas: &[&str]| {
        let mut events = vec![
            json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1",
                     "name": "t", "arguments": ""}}),
        ];
        for delta in deltas {
            events.push(json!({"type": "response.function_call_arguments.delta",
                "item_id": "fc_1", "delta": delta}));
        }
        events.push(json!({"type": "response.completed", "response": {"id": "r"}}));
        feed_limited(&limits, &events)
    };
    let d = stream(&[r#"{"a":"#, "12}"]);
    assert_eq!(tool_calls_of(&d), [("call_1", r#"{"a":12}"#)], "{d:?}");
    let d = stream(&[r#"{"a":"#, "12345}"]);
    assert_eq!(error_of(&d).kind, ErrorKind::ResponseTooLarge, "{d:?}");
    assert!(tool_calls_of(&d).is_empty());
}

/// A base64 file without a name is sent as `document.pdf` when it is a PDF, as `document`
/// otherwise; a name given is kept, and a URL file is sent by URL.
#[test]
fn an_unnamed_file_part_is_named_by_its_media_type() {
    let file = |media_type: &str, filename: Option<&str>| UserPart::File {
        source: MediaSource::Base64 {
            media_type: media_type.into(),
            data: "JVBERi0xLjQ=".into(),
        },
        filename: filename.map(Into::into),
    };
    let content = user_content(
        "Summarize these.",
        &[
            file("application/pdf", None),
            file("text/plain", None),
            file("application/pdf", Some("report.pdf")),
            UserPart::File {
                source: MediaSource::Url {
                    url: "https://x/a.pdf".into(),
                },
                filename: None,
            },
        ],
    );
    assert_eq!(
        content,
        json!([
            {"type": "input_text", "text": "Summarize these."},
            {"type": "input_file", "filename": "document.pdf",
             "file_data": "data:application/pdf;base64,JVBERi0xLjQ="},
            {"type": "input_file", "filename": "document",
             "file_data": "data:text/plain;base64,JVBERi0xLjQ="},
            {"type": "input_file", "filename": "report.pdf",
             "file_data": "data:application/pdf;base64,JVBERi0xLjQ="},
            {"type": "input_file", "file_url": "https://x/a.pdf"},
        ])
    );
}

/// The normalizer bounds the output items it tracks itself (as it bounds arguments): with
/// `max_content_blocks` = 2, a message and a reasoning item pass and a third item (a call)
/// fails the response, though none of the first two produced a delta the pipeline counts.
#[test]
fn output_items_may_reach_the_block_limit_but_not_pass_it() {
    let limits = ResponseLimits {
        max_content_blocks: 2,
        ..ResponseLimits::default()
    };
    let items = [
        json!({"type": "message", "id": "msg_1", "role": "assistant", "content": []}),
        json!({"type": "reasoning", "id": "rs_1", "summary": []}),
        json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "t",
               "arguments": ""}),
    ];
    let feed = |n: usize| {
        let events: Vec<_> = items
            .iter()
            .take(n)
            .enumerate()
            .map(|(i, item)| {
                json!({"type": "response.output_item.added", "output_index": i, "item": item})
            })
            .collect();
        feed_limited(&limits, &events)
    };
    let d = feed(2);
    assert!(
        !d.iter().any(|x| matches!(x, MessageDelta::Error { .. })),
        "{d:?}"
    );
    let d = feed(3);
    assert_eq!(error_of(&d).kind, ErrorKind::ResponseTooLarge, "{d:?}");
    assert!(
        !d.iter()
            .any(|x| matches!(x, MessageDelta::ToolInputStart { .. })),
        "the third item is refused before its call starts: {d:?}"
    );
}

/// Events whose data is empty (keep-alives) or the Chat Completions `[DONE]` sentinel that some
/// proxies add carry nothing and are skipped, wherever they come.
#[test]
fn keep_alives_and_a_done_sentinel_are_skipped() {
    let recorded = fixture!("responses_text");
    let plain = decode(recorded);
    assert_eq!(plain.last(), Some(&MessageDelta::Finish));
    let (head, tail) = recorded.split_at(recorded.find("\n\n").unwrap() + 2);
    for extra in [
        "data:\n\n",
        "event: keepalive\ndata: \n\n",
        "data: [DONE]\n\n",
    ] {
        let body = format!("{extra}{head}{extra}{tail}");
        assert_eq!(decode(&body), plain, "with {extra:?}");
    }
}

/// A call is complete at `function_call_arguments.done`: a stray argument delta after it is
/// dropped, not streamed after the call.
#[test]
fn an_argument_delta_after_the_calls_done_is_dropped() {
    let body = sse(&[
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1",
                        "name": "t", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": "{}"}),
        json!({"type": "response.function_call_arguments.done", "item_id": "fc_1", "arguments": "{}"}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": "x"}),
        json!({"type": "response.completed", "response": {"id": "r", "status": "completed"}}),
    ]);
    let d = decode(&body);
    assert_eq!(d.last(), Some(&MessageDelta::Finish), "{d:?}");
    assert_eq!(tool_calls_of(&d), [("call_1", "{}")]);
    let deltas: Vec<&str> = d
        .iter()
        .filter_map(|x| match x {
            MessageDelta::ToolInputDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["{}"], "{d:?}");
}
