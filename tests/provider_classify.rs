//! Error classification (R-IN-2), retry hints (R-IN-1), secret scrubbing, the shared HTTP
//! configuration, and `decode --http` on captured error responses.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use agentloop::provider::classify::{classify_http, redact, retry_after_ms};
use agentloop::provider::decode::{decode, decode_at, DecodeOutcome};
use agentloop::provider::http::{HttpConfig, ProviderKind};
use agentloop::ErrorKind;
use reqwest::header::{HeaderMap, HeaderValue};

const CAP: u64 = 60_000;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

fn now() -> SystemTime {
    httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap()
}

fn kind(status: u16, body: &str) -> ErrorKind {
    classify_http(status, &HeaderMap::new(), body.as_bytes(), now(), CAP).kind
}

#[test]
fn statuses_map_to_kinds() {
    let cases = [
        (400, ErrorKind::BadRequest),
        (401, ErrorKind::Authentication),
        (402, ErrorKind::QuotaExhausted),
        (403, ErrorKind::Permission),
        (404, ErrorKind::NotFound),
        (408, ErrorKind::Timeout),
        (409, ErrorKind::BadRequest),
        (413, ErrorKind::RequestTooLarge),
        (422, ErrorKind::BadRequest),
        (429, ErrorKind::RateLimited),
        (500, ErrorKind::ServerError),
        (502, ErrorKind::ServerError),
        (503, ErrorKind::ServerError),
        (504, ErrorKind::ServerError),
        (529, ErrorKind::Overloaded),
    ];
    for (status, expected) in cases {
        let e = classify_http(status, &HeaderMap::new(), b"", now(), CAP);
        assert_eq!(e.kind, expected, "{status}");
        assert_eq!(e.http_status, Some(status));
    }
}

#[test]
fn retryability_follows_the_spec() {
    // R-IN-2: 429, 5xx, 529, timeouts and connection failures retry; 4xx and overflow do not.
    for s in [429u16, 500, 502, 503, 504, 529] {
        assert!(
            classify_http(s, &HeaderMap::new(), b"", now(), CAP).retryable(),
            "{s}"
        );
    }
    for s in [400u16, 401, 403, 404, 413, 422] {
        assert!(
            !classify_http(s, &HeaderMap::new(), b"", now(), CAP).retryable(),
            "{s}"
        );
    }
    assert!(!ErrorKind::ContextOverflow.retryable());
    assert!(!ErrorKind::QuotaExhausted.retryable());
    assert!(ErrorKind::IncompleteStream.retryable());
}

#[test]
fn quota_is_not_a_rate_limit() {
    let body = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
    assert_eq!(kind(429, body), ErrorKind::QuotaExhausted);
    let body = r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#;
    assert_eq!(kind(429, body), ErrorKind::RateLimited);
    let body = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
    assert_eq!(kind(429, body), ErrorKind::RateLimited);
}

#[test]
fn context_overflow_from_codes_and_message_text() {
    let overflow = [
        (
            400,
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
        ),
        (
            400,
            r#"{"error":{"message":"bad","code":"context_length_exceeded"}}"#,
        ),
        (
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
        ),
        (
            400,
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.","type":"BadRequestError","code":400}"#,
        ),
        (
            400,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#,
        ),
        (
            413,
            r#"{"error":{"message":"Input is too long for requested model."}}"#,
        ),
        (422, r#"{"detail":"Prompt is too long"}"#),
        (400, "Error: maximum context length exceeded"),
    ];
    for (status, body) in overflow {
        let e = classify_http(status, &HeaderMap::new(), body.as_bytes(), now(), CAP);
        assert_eq!(e.kind, ErrorKind::ContextOverflow, "{status} {body}");
        assert!(e.context_overflow());
        assert!(!e.retryable());
    }
    // Not overflow: a rate limit that talks about tokens, a plain 413, an unrelated 400.
    assert_eq!(
        kind(
            429,
            r#"{"error":{"message":"Request too large for gpt-4o on tokens per min (TPM): Limit 30000, Requested 50000.","type":"tokens","code":"rate_limit_exceeded"}}"#
        ),
        ErrorKind::RateLimited
    );
    assert_eq!(
        kind(
            413,
            r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#
        ),
        ErrorKind::RequestTooLarge
    );
    assert_eq!(
        kind(
            400,
            r#"{"error":{"message":"Invalid 'messages[1].role'","type":"invalid_request_error"}}"#
        ),
        ErrorKind::BadRequest
    );
}

#[test]
fn overloaded_error_body_wins_over_status() {
    assert_eq!(
        kind(
            503,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
        ),
        ErrorKind::Overloaded
    );
}

#[test]
fn retry_after_ms_then_seconds_then_http_date_capped() {
    let n = now();
    assert_eq!(
        retry_after_ms(&headers(&[("retry-after-ms", "50")]), n, CAP),
        Some(50)
    );
    assert_eq!(
        retry_after_ms(&headers(&[("retry-after-ms", "12.2")]), n, CAP),
        Some(13)
    );
    assert_eq!(
        retry_after_ms(&headers(&[("retry-after", "2")]), n, CAP),
        Some(2000)
    );
    assert_eq!(
        retry_after_ms(&headers(&[("retry-after", "0.5")]), n, CAP),
        Some(500)
    );
    assert_eq!(
        retry_after_ms(
            &headers(&[("retry-after-ms", "50"), ("retry-after", "9")]),
            n,
            CAP
        ),
        Some(50),
        "retry-after-ms takes precedence"
    );
    assert_eq!(
        retry_after_ms(
            &headers(&[("retry-after", "Wed, 21 Oct 2015 07:28:30 GMT")]),
            n,
            CAP
        ),
        Some(30_000)
    );
    assert_eq!(
        retry_after_ms(
            &headers(&[("retry-after", "Wed, 21 Oct 2015 07:27:00 GMT")]),
            n,
            CAP
        ),
        Some(0),
        "past date: now"
    );
    assert_eq!(
        retry_after_ms(&headers(&[("retry-after", "3600")]), n, CAP),
        Some(CAP),
        "capped"
    );
    assert_eq!(
        retry_after_ms(&headers(&[("retry-after-ms", "5000")]), n, 1000),
        Some(1000)
    );
    for junk in ["soon", "-1", "NaN", "inf", ""] {
        assert_eq!(
            retry_after_ms(&headers(&[("retry-after", junk)]), n, CAP),
            None,
            "{junk:?}"
        );
    }
    assert_eq!(retry_after_ms(&HeaderMap::new(), n, CAP), None);
    let e = classify_http(429, &headers(&[("retry-after-ms", "50")]), b"{}", n, CAP);
    assert_eq!(
        (e.kind, e.retry_after_ms),
        (ErrorKind::RateLimited, Some(50))
    );
}

#[test]
fn messages_carry_the_provider_detail_but_never_a_key() {
    let body = r#"{"error":{"message":"Incorrect API key provided: sk-proj-abcd************************wxyz. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","code":"invalid_api_key"}}"#;
    let e = classify_http(401, &HeaderMap::new(), body.as_bytes(), now(), CAP);
    assert_eq!(e.kind, ErrorKind::Authentication);
    assert!(e.message.starts_with("HTTP 401 Unauthorized: invalid_request_error/invalid_api_key: Incorrect API key provided"), "{}", e.message);
    assert!(!e.message.contains("abcd"), "{}", e.message);
    let html = classify_http(
        502,
        &HeaderMap::new(),
        b"<html>bad gateway</html>",
        now(),
        CAP,
    );
    assert!(html.message.contains("bad gateway"), "{}", html.message);
}

#[test]
fn redact_removes_secrets_and_key_shaped_tokens() {
    let key = "sk-ant-api03-SECRETSECRETSECRET";
    let s = redact(&format!("auth failed for {key} (x-api-key: {key})"), &[key]);
    assert!(!s.contains("SECRET"), "{s}");
    assert_eq!(
        redact("key sk-live1234567890abc here", &[]),
        "key sk-*** here"
    );
    assert_eq!(
        redact("task-12345678901 ok", &[]),
        "task-12345678901 ok",
        "only at a word start"
    );
    assert_eq!(redact("sk-short", &[]), "sk-short");
    assert_eq!(redact("custom-key-value", &["custom-key-value"]), "***");
    assert_eq!(redact("é sk-", &[]), "é sk-");
}

#[test]
fn http_config_from_env_and_debug_hides_the_key() {
    let env = |name: &str| match name {
        "OPENAI_API_KEY" => Some("sk-test-0123456789abcdef".to_string()),
        "OPENAI_BASE_URL" => Some("http://127.0.0.1:11434/v1/".to_string()),
        _ => None,
    };
    let mut cfg = HttpConfig::from_lookup(ProviderKind::OpenAi, env);
    cfg.extra_headers
        .push(("OpenAI-Organization".into(), "org-secret".into()));
    assert_eq!(cfg.base_url, "http://127.0.0.1:11434/v1");
    assert_eq!(cfg.endpoint(), "http://127.0.0.1:11434/v1/chat/completions");
    assert!(cfg.has_api_key());
    let dbg = format!("{cfg:?}");
    assert!(
        !dbg.contains("0123456789abcdef") && !dbg.contains("org-secret"),
        "{dbg}"
    );
    assert!(dbg.contains("ApiKey(***)"));
    assert_eq!(cfg.connect_timeout, Duration::from_secs(10));
    assert_eq!(cfg.first_byte_timeout, Duration::from_secs(60));
    assert_eq!(cfg.stall_timeout, None);

    let a = HttpConfig::from_lookup(ProviderKind::Anthropic, |_| None);
    assert!(!a.has_api_key());
    assert_eq!(a.endpoint(), "https://api.anthropic.com/v1/messages");
    assert_eq!(
        a.clone().with_base_url("http://h/v1").endpoint(),
        "http://h/v1/messages"
    );
    let empty = HttpConfig::from_lookup(ProviderKind::OpenAi, |_| Some("  ".into()));
    assert!(!empty.has_api_key(), "an empty variable is no key");
    assert_eq!(
        empty.endpoint(),
        "https://api.openai.com/v1/chat/completions"
    );
    assert_eq!(
        "anthropic".parse::<ProviderKind>(),
        Ok(ProviderKind::Anthropic)
    );
    assert_eq!("gemini".parse::<ProviderKind>(), Ok(ProviderKind::Gemini));
    assert!("mistral".parse::<ProviderKind>().is_err());
    let gemini = HttpConfig::new(ProviderKind::Gemini);
    assert_eq!(
        gemini.endpoint(),
        "https://generativelanguage.googleapis.com/v1beta/models/%7Bmodel%7D:streamGenerateContent?alt=sse"
    );
}

fn http_fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/http")
            .join(name),
    )
    .unwrap()
}

#[test]
fn decode_http_error_responses() {
    let r = decode(
        ProviderKind::OpenAi,
        &http_fixture("openai_429_rate_limit.http"),
        true,
    );
    assert_eq!(r.outcome, DecodeOutcome::Error);
    assert!(r.message.is_none() && !r.committed && r.usage.is_none());
    let e = r.error.unwrap();
    assert_eq!(
        (e.kind, e.retryable, e.retry_after_ms, e.http_status),
        (ErrorKind::RateLimited, true, Some(50), Some(429))
    );

    let e = decode(
        ProviderKind::OpenAi,
        &http_fixture("openai_429_insufficient_quota.http"),
        true,
    )
    .error
    .unwrap();
    assert_eq!((e.kind, e.retryable), (ErrorKind::QuotaExhausted, false));

    let e = decode(
        ProviderKind::OpenAi,
        &http_fixture("openai_400_context_length.http"),
        true,
    )
    .error
    .unwrap();
    assert_eq!(
        (e.kind, e.context_overflow, e.retryable),
        (ErrorKind::ContextOverflow, true, false)
    );

    let r = decode(ProviderKind::OpenAi, &http_fixture("openai_401.http"), true);
    assert_eq!(r.error.unwrap().kind, ErrorKind::Authentication);
    let Some(agentloop::MessageDelta::Error { error }) = r.deltas.last() else {
        panic!()
    };
    assert!(!error.message.contains("abcd"));

    let e = decode(
        ProviderKind::Anthropic,
        &http_fixture("anthropic_529_overloaded.http"),
        true,
    )
    .error
    .unwrap();
    assert_eq!(
        (e.kind, e.retry_after_ms, e.http_status),
        (ErrorKind::Overloaded, Some(2000), Some(529))
    );

    let e = decode(
        ProviderKind::Anthropic,
        &http_fixture("anthropic_400_prompt_too_long.http"),
        true,
    )
    .error
    .unwrap();
    assert_eq!(e.kind, ErrorKind::ContextOverflow);

    // The HTTP-date is resolved against the response's own Date header: deterministic.
    let e = decode_at(
        ProviderKind::OpenAi,
        &http_fixture("openai_503_http_date.http"),
        true,
        SystemTime::UNIX_EPOCH,
    )
    .error
    .unwrap();
    assert_eq!(
        (e.kind, e.retry_after_ms),
        (ErrorKind::ServerError, Some(30_000))
    );
}

#[test]
fn decode_http_success_response_with_chunked_sse_body() {
    let sse = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let (a, b) = sse.split_at(17);
    let raw = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    );
    let r = decode(ProviderKind::OpenAi, raw.as_bytes(), true);
    assert_eq!(r.outcome, DecodeOutcome::Completed);
    assert_eq!(r.message.unwrap().text, "hi");
    // Not HTTP at all: a clear, typed error rather than a panic.
    let r = decode(ProviderKind::OpenAi, b"data: x\n\n", true);
    assert_eq!(r.error.unwrap().kind, ErrorKind::MalformedResponse);
}

/// `decode --http` reads a 2xx answer the way the client does — a compressed body
/// or JSON instead of an event stream is a `malformed_response`, not retried.
#[test]
fn decode_http_success_that_is_not_a_readable_event_stream() {
    let gzip = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\ncontent-length: 4\r\n\r\n\x1f\x08\x00\x00";
    let r = decode(ProviderKind::Anthropic, gzip.as_bytes(), true);
    let e = r.error.unwrap();
    assert_eq!(
        (e.kind, e.retryable, e.http_status),
        (ErrorKind::MalformedResponse, false, Some(200))
    );
    let json =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json; charset=utf-8\r\n\r\n{\"choices\":[]}";
    let e = decode(ProviderKind::OpenAi, json.as_bytes(), true)
        .error
        .unwrap();
    assert_eq!((e.kind, e.retryable), (ErrorKind::MalformedResponse, false));
    // An error object under 200 keeps its own classification.
    let json = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}";
    let e = decode(ProviderKind::Anthropic, json.as_bytes(), true)
        .error
        .unwrap();
    assert_eq!((e.kind, e.retryable), (ErrorKind::Overloaded, true));
}

#[test]
fn model_clients_never_show_the_key_in_debug_output() {
    let key = "sk-live-DEBUGSECRET0123456789";
    for p in [
        ProviderKind::OpenAi,
        ProviderKind::Anthropic,
        ProviderKind::OpenAiResponses,
    ] {
        let cfg = HttpConfig::new(p).with_api_key(key);
        let m = agentloop::provider::http::build_model("m", cfg).unwrap();
        assert_eq!(agentloop::model::Model::name(&m), format!("{p}:m"));
        let shown = format!("{m:?}");
        assert!(!shown.contains("DEBUGSECRET"), "{shown}");
    }
}

/// The client follows no redirects; a 3xx names its status and only the host of
/// its `Location` (a path or query could carry a token), and is not retried.
#[test]
fn redirects_are_typed_errors_naming_the_location_host() {
    let h = headers(&[(
        "location",
        "https://eu.example.com:8443/v1/messages?token=abc",
    )]);
    let e = classify_http(301, &h, b"", now(), CAP);
    assert_eq!(
        (e.kind, e.retryable(), e.http_status),
        (ErrorKind::Redirected, false, Some(301))
    );
    assert!(
        e.message.contains("HTTP 301") && e.message.contains("eu.example.com:8443"),
        "{e}"
    );
    assert!(!e.message.contains("token"), "{e}");
    let e = classify_http(
        308,
        &headers(&[("location", "/v2/messages")]),
        b"",
        now(),
        CAP,
    );
    assert_eq!(e.kind, ErrorKind::Redirected);
    assert!(e.message.contains("same host"), "{e}");
    let e = classify_http(302, &HeaderMap::new(), b"", now(), CAP);
    assert!(e.message.contains("without a Location"), "{e}");
}

#[test]
fn a_numeric_error_code_is_read_as_text() {
    use agentloop::provider::classify::ErrorInfo;
    // Gemini's OpenAI-compatible endpoint and some proxies send `code` as a number.
    let body = br#"{"error": {"code": 400, "message": "Invalid JSON payload", "status": "INVALID_ARGUMENT"}}"#;
    let info = ErrorInfo::from_body(body);
    assert_eq!(info.code.as_deref(), Some("400"));
    assert_eq!(info.message.as_deref(), Some("Invalid JSON payload"));
    let e = classify_http(400, &HeaderMap::new(), body, now(), CAP);
    assert_eq!(e.kind, ErrorKind::BadRequest);
    assert_eq!(e.message, "HTTP 400 Bad Request: 400: Invalid JSON payload");
    // A numeric message is kept as its digits too.
    let info = ErrorInfo::from_json(&serde_json::json!({"error": {"message": 42}}));
    assert_eq!(info.message.as_deref(), Some("42"));
}

#[test]
fn ollama_string_errors_and_plain_text_bodies_are_the_message() {
    use agentloop::provider::classify::ErrorInfo;
    let body = br#"{"error": "model 'llama9' not found"}"#;
    assert_eq!(
        ErrorInfo::from_body(body),
        ErrorInfo {
            message: Some("model 'llama9' not found".into()),
            ..ErrorInfo::default()
        }
    );
    let e = classify_http(404, &HeaderMap::new(), body, now(), CAP);
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert_eq!(e.message, "HTTP 404 Not Found: model 'llama9' not found");
    let e = classify_http(
        502,
        &HeaderMap::new(),
        b" upstream connect error \n",
        now(),
        CAP,
    );
    assert_eq!(e.message, "HTTP 502 Bad Gateway: upstream connect error");
}

/// A capture cut inside a chunk (`curl` stopped, a disk filled) keeps the part that is there:
/// the text so far, and an incomplete stream rather than a parse failure.
#[test]
fn decode_http_chunked_body_cut_inside_a_chunk_keeps_what_is_there() {
    let sse = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
    let raw = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{sse}",
        sse.len() + 100
    );
    let r = decode(ProviderKind::OpenAi, raw.as_bytes(), true);
    assert_eq!(r.outcome, DecodeOutcome::Error);
    assert_eq!(r.error.unwrap().kind, ErrorKind::IncompleteStream);
    assert_eq!(r.message.unwrap().text, "hi");
}
