//! Message data and model errors: tool-call argument parsing (R-STR-6), result status,
//! usage totals (R-CTX-3) and the error classification (R-IN-2).

use agentloop_core::{ErrorKind, Message, ModelError, ToolCall, ToolResult, ToolStatus, Usage};
use serde_json::json;

#[test]
fn message_constructors_build_the_named_role() {
    assert_eq!(
        Message::user("hi"),
        Message::User {
            content: "hi".into()
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
