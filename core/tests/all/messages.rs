//! Message data and model errors: tool-call argument parsing (R-STR-6), result status,
//! usage totals (R-CTX-3) and the error classification (R-IN-2).

use agentloop_core::{ErrorKind, Message, ModelError, ToolCall, ToolResult, ToolStatus, Usage};
use serde_json::json;

#[test]
fn message_constructors_build_the_named_role() {
    assert_eq!(
        Message::user("hi"),
        Message::User {
            content: "hi".into(),
            parts: Vec::new(),
        }
    );
    assert_eq!(
        Message::system("be brief"),
        Message::System {
            content: "be brief".into()
        }
    );
}

#[test]
fn r_str_6_tool_call_arguments_from_raw_text() {
    let c = ToolCall::from_raw("c1", "calc", r#"{"x": 1}"#);
    assert_eq!(c.id, "c1");
    assert_eq!(c.name, "calc");
    assert_eq!(c.arguments, json!({"x": 1}));
    assert_eq!(c.invalid_arguments, None);
    for blank in ["", "  \n\t"] {
        let c = ToolCall::from_raw("c2", "calc", blank);
        assert_eq!(
            c.arguments,
            json!({}),
            "blank arguments mean an empty object"
        );
        assert_eq!(c.invalid_arguments, None);
    }
    let c = ToolCall::from_raw("c3", "calc", r#"{"x": "#);
    assert_eq!(c.arguments, serde_json::Value::Null);
    let why = c.invalid_arguments.expect("invalid JSON is recorded");
    assert!(why.starts_with("invalid JSON arguments ("), "{why}");
    assert!(why.ends_with(r#"): {"x": "#), "{why}");
}

#[test]
fn r_idem_7_only_completed_results_are_not_errors() {
    let r = |status| ToolResult {
        tool_call_id: "c".into(),
        name: "t".into(),
        content: String::new(),
        status,
    };
    assert!(!r(ToolStatus::Completed).is_error());
    for s in [
        ToolStatus::Error,
        ToolStatus::Denied,
        ToolStatus::Skipped,
        ToolStatus::Aborted,
        ToolStatus::OutcomeUnknown,
    ] {
        assert!(r(s).is_error(), "{s:?}");
    }
}

#[test]
fn r_ctx_3_usage_adds_every_field() {
    let mut total = Usage {
        input_tokens: 100,
        output_tokens: 200,
        cache_read_input_tokens: 300,
        cache_creation_input_tokens: 400,
        reasoning_tokens: 500,
    };
    let step = Usage {
        input_tokens: 3,
        output_tokens: 5,
        cache_read_input_tokens: 7,
        cache_creation_input_tokens: 11,
        reasoning_tokens: 13,
    };
    total.add(&step);
    assert_eq!(
        total,
        Usage {
            input_tokens: 103,
            output_tokens: 205,
            cache_read_input_tokens: 307,
            cache_creation_input_tokens: 411,
            reasoning_tokens: 513,
        }
    );
    total.add(&Usage::default());
    assert_eq!(total.input_tokens, 103);
}

const ALL_KINDS: [(ErrorKind, &str, bool); 16] = [
    (ErrorKind::RateLimited, "rate_limited", true),
    (ErrorKind::Overloaded, "overloaded", true),
    (ErrorKind::ServerError, "server_error", true),
    (ErrorKind::IncompleteStream, "incomplete_stream", true),
    (ErrorKind::Connection, "connection", true),
    (ErrorKind::Timeout, "timeout", true),
    (ErrorKind::BadRequest, "bad_request", false),
    (ErrorKind::Authentication, "authentication", false),
    (ErrorKind::Permission, "permission", false),
    (ErrorKind::NotFound, "not_found", false),
    (ErrorKind::ContextOverflow, "context_overflow", false),
    (ErrorKind::QuotaExhausted, "quota_exhausted", false),
    (ErrorKind::RequestTooLarge, "request_too_large", false),
    (ErrorKind::Redirected, "redirected", false),
    (ErrorKind::MalformedResponse, "malformed_response", false),
    (ErrorKind::ResponseTooLarge, "response_too_large", false),
];

#[test]
fn r_in_2_error_kinds_retry_only_transient_failures() {
    for (kind, _, retryable) in ALL_KINDS {
        assert_eq!(kind.retryable(), retryable, "{kind:?}");
        assert_eq!(
            ModelError::new(kind, "x").retryable(),
            retryable,
            "{kind:?}"
        );
    }
}

#[test]
fn r_in_2_error_kind_names_match_their_serialized_form() {
    for (kind, name, _) in ALL_KINDS {
        assert_eq!(kind.as_str(), name);
        assert_eq!(kind.to_string(), name);
        assert_eq!(serde_json::to_value(kind).unwrap(), json!(name));
    }
}

#[test]
fn r_in_2_only_context_overflow_asks_for_compaction() {
    for (kind, _, _) in ALL_KINDS {
        assert_eq!(
            ModelError::new(kind, "x").context_overflow(),
            kind == ErrorKind::ContextOverflow,
            "{kind:?}"
        );
    }
}

#[test]
fn model_error_builders_and_display() {
    let e = ModelError::new(ErrorKind::RateLimited, "slow down");
    assert_eq!(e.retry_after_ms, None);
    assert_eq!(e.http_status, None);
    let e = e.with_retry_after_ms(Some(1500)).with_status(429);
    assert_eq!(e.kind, ErrorKind::RateLimited);
    assert_eq!(e.message, "slow down");
    assert_eq!(e.retry_after_ms, Some(1500));
    assert_eq!(e.http_status, Some(429));
    assert_eq!(e.to_string(), "rate_limited: slow down");
    assert_eq!(e.clone().with_retry_after_ms(None).retry_after_ms, None);
}

/// Content parts are additive. A plain user message serializes as it always
/// did (no `parts`); parts serialize tagged, with Anthropic's `source` shape, and read back.
#[test]
fn issue12_item6_content_parts_serialize_tagged_and_plain_messages_unchanged() {
    use agentloop_core::{ContentPart, MediaSource};
    assert_eq!(
        serde_json::to_value(Message::user("hi")).unwrap(),
        json!({"role": "user", "content": "hi"})
    );
    let m = Message::user_with_parts(
        "look",
        vec![
            ContentPart::image_base64("image/png", "iVBORw=="),
            ContentPart::image_url("https://x/y.jpg"),
            ContentPart::file_base64("application/pdf", "JVBERi0xLjQ=", Some("r.pdf".into())),
            ContentPart::file_url("https://x/z.pdf"),
            ContentPart::text("more"),
        ],
    );
    let v = serde_json::to_value(&m).unwrap();
    assert_eq!(
        v,
        json!({"role": "user", "content": "look", "parts": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw=="}},
            {"type": "image", "source": {"type": "url", "url": "https://x/y.jpg"}},
            {"type": "file", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQ="}, "filename": "r.pdf"},
            {"type": "file", "source": {"type": "url", "url": "https://x/z.pdf"}},
            {"type": "text", "text": "more"},
        ]})
    );
    assert_eq!(serde_json::from_value::<Message>(v).unwrap(), m);
    assert_eq!(
        MediaSource::Base64 {
            media_type: "image/gif".into(),
            data: "R0lGODlh".into()
        }
        .to_url(),
        "data:image/gif;base64,R0lGODlh"
    );
}

/// What transcripts, summaries and exports show of a user message: its text and a line per
/// part naming the type and size, never the data.
#[test]
fn issue12_item6_user_text_describes_parts_without_their_data() {
    use agentloop_core::ContentPart;
    let kib = "A".repeat(4095); // 4,095 base64 digits: 3,071 bytes
    let m = Message::user_with_parts(
        "look",
        vec![
            ContentPart::image_base64("image/png", "iVBORw=="),
            ContentPart::file_base64("application/pdf", kib.clone(), Some("r.pdf".into())),
            ContentPart::file_base64("application/pdf", kib.repeat(400), None),
            ContentPart::image_url("https://x/y.jpg"),
            ContentPart::text("more"),
        ],
    );
    assert_eq!(
        m.user_text().as_deref(),
        Some(
            "look\n[image image/png, 4 B]\n[file r.pdf application/pdf, 3.0 KiB]\n\
             [file application/pdf, 1.2 MiB]\n[image https://x/y.jpg]\nmore"
        )
    );
    assert_eq!(Message::system("s").user_text(), None);
    assert_eq!(Message::user("plain").user_text().as_deref(), Some("plain"));
    assert_eq!(
        agentloop_core::message::base64_decoded_len("JVBERi0xLjQ="),
        8
    );
}

/// Sizes switch unit exactly at 1 KiB and 1 MiB (decoded bytes).
#[test]
fn issue12_item6_part_sizes_change_unit_at_the_boundaries() {
    use agentloop_core::message::base64_decoded_len;
    use agentloop_core::ContentPart;
    // `digits` base64 digits decode to `digits * 3 / 4` bytes.
    let describe = |digits: usize| {
        let data = "A".repeat(digits);
        let part = ContentPart::file_base64("a/b", data.clone(), None);
        (base64_decoded_len(&data), part.describe())
    };
    assert_eq!(describe(1364), (1023, "[file a/b, 1023 B]".to_string()));
    assert_eq!(describe(1366), (1024, "[file a/b, 1.0 KiB]".to_string()));
    assert_eq!(
        describe(1_398_100),
        (1_048_575, "[file a/b, 1024.0 KiB]".to_string())
    );
    assert_eq!(
        describe(1_398_102),
        (1_048_576, "[file a/b, 1.0 MiB]".to_string())
    );
}
