//! Error classification: HTTP status, body and headers, in-stream errors, malformed data and
//! transport failures → one [`ModelError`] with its [`ErrorKind`] (R-IN-2).
//!
//! Everything here is pure: the clock comes in as `now` (for `retry-after` HTTP-dates) and the
//! cap for retry hints as `cap_ms`.
//!
//! Rules, in order, for an HTTP error response:
//! 1. context overflow — status 400, 413 or 422 (or an in-stream error) whose code is
//!    `context_length_exceeded`/`exceed_context_size_error` or whose message reads like one of
//!    [`CONTEXT_OVERFLOW_PHRASES`] → `context_overflow` (compaction, never a retry as-is);
//! 2. 429 with `insufficient_quota`/`billing` in the code or type, and 402 → `quota_exhausted`;
//! 3. an `overloaded_error` body under any status, and 529 → `overloaded`;
//! 4. then by status: 3xx `redirected` (the client follows no redirects, see
//!    [`crate::provider::http`]), 400/422 and other 4xx `bad_request`, 401 `authentication`,
//!    403 `permission`, 404 `not_found`, 408 `timeout`, 413 `request_too_large`,
//!    429 `rate_limited`, 5xx `server_error`.
//!
//! Malformed stream data (not JSON, or JSON of an unexpected shape) is `malformed_response`,
//! retried once per step (the default retry decider and the inner machine's rule): a proxy's
//! glitch passes on the retry, while a server that sends a shape this client does not read (a
//! new dialect, a proxy's page) sends it again, and the second one fails the step at once
//! instead of multiplying the cost and the wait before the user sees the cause. A stream
//! that ended without terminal evidence is a different diagnosis (`incomplete_stream`,
//! retried like any transient failure).

#[cfg_attr(not(feature = "http"), allow(unused_imports))]
use std::time::{Duration, SystemTime};

#[cfg(feature = "http")]
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::error::{ErrorKind, ModelError};

/// Message fragments (lowercase) that mean "the prompt does not fit the context window".
pub const CONTEXT_OVERFLOW_PHRASES: &[&str] = &[
    "prompt is too long",
    "maximum context length",
    "context_length_exceeded",
    "context length exceeded",
    "exceeds the context window",
    "exceeds the model's context",
    "context window exceeded",
    "exceed_context_size",
    "exceeds the available context size",
    "input is too long",
    "reduce the length of the messages",
    "input token count exceeds",
    // Gemini: "The input token count (N) exceeds the maximum number of tokens allowed (M)."
    "exceeds the maximum number of tokens allowed",
    "too many tokens in the prompt",
];

/// Error codes that mean context overflow.
const CONTEXT_OVERFLOW_CODES: &[&str] = &[
    "context_length_exceeded",
    "exceed_context_size_error",
    "model_context_window_exceeded",
];

/// Longest provider message kept in an error.
const MAX_MESSAGE_CHARS: usize = 600;

/// The fields of a provider error object, whichever dialect it came in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorInfo {
    /// `error.type` (OpenAI `invalid_request_error`, Anthropic `overloaded_error`, …).
    pub error_type: Option<String>,
    /// `error.code` (OpenAI `context_length_exceeded`, `insufficient_quota`, or a number).
    pub code: Option<String>,
    /// The human-readable message.
    pub message: Option<String>,
}

impl ErrorInfo {
    /// Reads an error object from JSON: OpenAI `{"error": {...}}`, Anthropic
    /// `{"type": "error", "error": {...}}`, Ollama `{"error": "text"}`, or a bare
    /// `{"message"|"detail": ...}`.
    pub fn from_json(v: &Value) -> ErrorInfo {
        let obj = match v.get("error") {
            Some(Value::String(s)) => {
                return ErrorInfo {
                    message: Some(s.clone()),
                    ..ErrorInfo::default()
                }
            }
            Some(e @ Value::Object(_)) => e,
            _ => v,
        };
        let text = |k: &str| match obj.get(k) {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        let message = text("message").or_else(|| match obj.get("detail") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(d @ (Value::Object(_) | Value::Array(_))) => Some(d.to_string()),
            _ => None,
        });
        ErrorInfo {
            error_type: text("type").filter(|t| t != "error"),
            code: text("code"),
            message,
        }
    }

    /// Parses a response body; a body that is not JSON becomes the message itself.
    pub fn from_body(body: &[u8]) -> ErrorInfo {
        match serde_json::from_slice::<Value>(body) {
            Ok(v) => ErrorInfo::from_json(&v),
            Err(_) => {
                let text = String::from_utf8_lossy(body).trim().to_string();
                ErrorInfo {
                    message: (!text.is_empty()).then_some(text),
                    ..ErrorInfo::default()
                }
            }
        }
    }

    fn has(&self, needle: &str) -> bool {
        [&self.code, &self.error_type]
            .iter()
            .any(|f| f.as_deref().is_some_and(|s| s.eq_ignore_ascii_case(needle)))
    }

    fn mentions(&self, needle: &str) -> bool {
        [&self.code, &self.error_type].iter().any(|f| {
            f.as_deref()
                .is_some_and(|s| s.to_ascii_lowercase().contains(needle))
        })
    }

    /// Whether the code or the message says the context window overflowed.
    pub fn is_context_overflow(&self) -> bool {
        CONTEXT_OVERFLOW_CODES.iter().any(|c| self.has(c))
            || self
                .message
                .as_deref()
                .is_some_and(is_context_overflow_text)
    }

    fn is_quota(&self) -> bool {
        self.mentions("insufficient_quota") || self.mentions("billing")
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(t) = &self.error_type {
            parts.push(t.clone());
        }
        if let Some(c) = &self.code {
            if self.error_type.as_deref() != Some(c.as_str()) {
                parts.push(c.clone());
            }
        }
        let head = parts.join("/");
        match (&self.message, head.is_empty()) {
            (Some(m), true) => truncate(m),
            (Some(m), false) => format!("{head}: {}", truncate(m)),
            (None, false) => head,
            (None, true) => String::new(),
        }
    }
}

/// Whether a provider message reads like a context-window overflow.
pub fn is_context_overflow_text(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    CONTEXT_OVERFLOW_PHRASES.iter().any(|p| lower.contains(p))
}

/// Classifies an HTTP error response. `now` resolves `retry-after` HTTP-dates; `cap_ms` caps
/// the hint.
#[cfg(feature = "http")]
pub fn classify_http(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
    cap_ms: u64,
) -> ModelError {
    if (300..400).contains(&status) {
        return redirect_error(status, headers);
    }
    let info = ErrorInfo::from_body(body);
    let kind = kind_for_status(status, &info);
    let detail = info.describe();
    let mut message = status_line(status);
    if !detail.is_empty() {
        message.push_str(": ");
        message.push_str(&detail);
    }
    ModelError::new(kind, redact(&message, &[]))
        .with_status(status)
        .with_retry_after_ms(retry_after_ms(headers, now, cap_ms))
}

/// A 3xx answer: `redirected`, naming the status and the host of its `Location` (only the
/// host: a location's path or query could carry a token).
#[cfg(feature = "http")]
pub fn redirect_error(status: u16, headers: &HeaderMap) -> ModelError {
    let location = headers
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    let target = match location.map(reqwest::Url::parse) {
        Some(Ok(url)) => match (url.host_str(), url.port()) {
            (Some(host), Some(port)) => format!("to host {host}:{port}"),
            (Some(host), None) => format!("to host {host}"),
            (None, _) => "to a location without a host".to_string(),
        },
        Some(Err(_)) => "to a path on the same host".to_string(),
        None => "without a Location".to_string(),
    };
    ModelError::new(
        ErrorKind::Redirected,
        redact(
            &format!(
                "{} {target}: not followed (the client follows no \
                 redirects, so an API key never reaches another origin); set the base URL \
                 to the final location",
                status_line(status)
            ),
            &[],
        ),
    )
    .with_status(status)
}

/// `HTTP <status>`, then the status's canonical reason when it has one (`HTTP 404 Not Found`).
#[cfg(feature = "http")]
fn status_line(status: u16) -> String {
    match reqwest::StatusCode::from_u16(status).map(|s| s.canonical_reason()) {
        Ok(Some(reason)) => format!("HTTP {status} {reason}"),
        _ => format!("HTTP {status}"),
    }
}

/// The kind for an HTTP status and the error body's fields (rules 1–4 of the module docs).
pub fn kind_for_status(status: u16, info: &ErrorInfo) -> ErrorKind {
    if matches!(status, 400 | 413 | 422) && info.is_context_overflow() {
        return ErrorKind::ContextOverflow;
    }
    if status == 402 || (status == 429 && info.is_quota()) {
        return ErrorKind::QuotaExhausted;
    }
    if status == 529 || info.has("overloaded_error") {
        return ErrorKind::Overloaded;
    }
    match status {
        401 => ErrorKind::Authentication,
        403 => ErrorKind::Permission,
        404 => ErrorKind::NotFound,
        408 => ErrorKind::Timeout,
        413 => ErrorKind::RequestTooLarge,
        429 => ErrorKind::RateLimited,
        500..=599 => ErrorKind::ServerError,
        300..=399 => ErrorKind::Redirected,
        // Every other status that reached here is an error we do not retry; 2xx cannot
        // reach classification, and an unknown status is a protocol error of the request.
        _ => ErrorKind::BadRequest,
    }
}

/// Classifies an error object that arrived *inside* a stream (OpenAI `{"error": …}` chunk,
/// Anthropic `event: error`), where the HTTP status was 200.
pub fn classify_stream_error(v: &Value) -> ModelError {
    let info = ErrorInfo::from_json(v);
    let kind = kind_for_stream_error(&info);
    let detail = info.describe();
    let message = if detail.is_empty() {
        "error event in stream".to_string()
    } else {
        format!("error event in stream: {detail}")
    };
    ModelError::new(kind, redact(&message, &[]))
}

/// How much of an unexpected 2xx body an error message shows.
const BODY_SNIPPET_CHARS: usize = 200;

/// A 2xx answer whose `Content-Encoding` is not `identity`: the client asks for `identity`
/// and decodes no compression, so the body would be compressed bytes →
/// `malformed_response` naming the encoding. `None` when the body is plain.
#[cfg(feature = "http")]
pub fn unsupported_encoding(status: u16, headers: &HeaderMap) -> Option<ModelError> {
    let encoding =
        header_lowercase(headers, reqwest::header::CONTENT_ENCODING).filter(|e| e != "identity")?;
    Some(
        ModelError::new(
            ErrorKind::MalformedResponse,
            format!(
                "HTTP {status}: server answered Content-Encoding: {encoding}, which is not \
                 supported (the client asks for identity and decodes no compression)"
            ),
        )
        .with_status(status),
    )
}

/// The media type of a 2xx answer that is certainly not an event stream (`application/json`:
/// an error object or a server that ignored `stream: true`; `text/html`: a proxy's or
/// portal's page). Other types, or none, are left to the SSE decoder.
#[cfg(feature = "http")]
pub fn non_stream_media_type(headers: &HeaderMap) -> Option<String> {
    let ct = header_lowercase(headers, reqwest::header::CONTENT_TYPE)?;
    let mime = ct.split(';').next().unwrap_or("").trim().to_string();
    matches!(mime.as_str(), "application/json" | "text/html").then_some(mime)
}

/// The error for a 2xx body of media type `mime` instead of an event stream: an error object
/// is classified as the provider's error (so an `overloaded_error` stays retryable);
/// anything else is `malformed_response` showing the first 200 characters of the body.
pub fn classify_non_stream_body(status: u16, mime: &str, body: &[u8]) -> ModelError {
    if mime == "application/json" {
        if let Ok(v) = serde_json::from_slice::<Value>(body) {
            if v.get("error").is_some_and(|e| !e.is_null()) {
                let info = ErrorInfo::from_json(&v);
                let message = format!(
                    "HTTP {status} with an application/json error body instead of \
                     text/event-stream: {}",
                    info.describe()
                );
                return ModelError::new(kind_for_stream_error(&info), redact(&message, &[]))
                    .with_status(status);
            }
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let (snippet, more) = head(text, BODY_SNIPPET_CHARS);
    let message = format!("HTTP {status}: expected text/event-stream, got {mime}: {snippet}{more}");
    ModelError::new(ErrorKind::MalformedResponse, redact(&message, &[])).with_status(status)
}

#[cfg(feature = "http")]
fn header_lowercase(headers: &HeaderMap, name: reqwest::header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty())
}

/// The kind of an in-stream error (no HTTP status): by code/type, else a numeric code as a
/// status, else `server_error`.
pub fn kind_for_stream_error(info: &ErrorInfo) -> ErrorKind {
    if info.is_context_overflow() {
        return ErrorKind::ContextOverflow;
    }
    if info.is_quota() {
        return ErrorKind::QuotaExhausted;
    }
    let by_type: &[(&str, ErrorKind)] = &[
        ("overloaded_error", ErrorKind::Overloaded),
        ("overloaded", ErrorKind::Overloaded),
        ("rate_limit_error", ErrorKind::RateLimited),
        ("rate_limit_exceeded", ErrorKind::RateLimited),
        ("tokens", ErrorKind::RateLimited),
        ("requests", ErrorKind::RateLimited),
        ("api_error", ErrorKind::ServerError),
        ("server_error", ErrorKind::ServerError),
        ("internal_error", ErrorKind::ServerError),
        ("timeout_error", ErrorKind::Timeout),
        ("invalid_request_error", ErrorKind::BadRequest),
        ("authentication_error", ErrorKind::Authentication),
        ("invalid_api_key", ErrorKind::Authentication),
        ("permission_error", ErrorKind::Permission),
        ("not_found_error", ErrorKind::NotFound),
        ("model_not_found", ErrorKind::NotFound),
        ("request_too_large", ErrorKind::RequestTooLarge),
    ];
    for (name, kind) in by_type {
        if info.has(name) {
            return *kind;
        }
    }
    if let Some(status) = info.code.as_deref().and_then(|c| c.parse::<u16>().ok()) {
        if (400..=599).contains(&status) {
            return kind_for_status(status, info);
        }
    }
    ErrorKind::ServerError
}

/// The server's retry hint: `retry-after-ms` (milliseconds, may be fractional), else
/// `retry-after` (delay-seconds, or an HTTP-date relative to `now`), capped at `cap_ms`.
/// A date in the past gives 0; unparsable values are ignored.
#[cfg(feature = "http")]
pub fn retry_after_ms(headers: &HeaderMap, now: SystemTime, cap_ms: u64) -> Option<u64> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let ms = header("retry-after-ms")
        .and_then(parse_non_negative)
        .map(|ms| ms.ceil() as u64)
        .or_else(|| {
            let v = header("retry-after")?;
            if let Some(secs) = parse_non_negative(v) {
                return Some((secs * 1000.0).ceil() as u64);
            }
            let when = httpdate::parse_http_date(v).ok()?;
            let wait = when.duration_since(now).unwrap_or(Duration::ZERO);
            Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX))
        })?;
    Some(ms.min(cap_ms))
}

#[cfg(feature = "http")]
fn parse_non_negative(s: &str) -> Option<f64> {
    let v: f64 = s.parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// A data event that is not valid JSON or has an unexpected shape: a `malformed_response`
/// (not retried) naming the event (its 1-based number in the stream and its type) and
/// showing the start of its data.
pub fn malformed_event(
    event_number: usize,
    event_type: &str,
    reason: &str,
    data: &str,
) -> ModelError {
    let (snippet, ellipsis) = head(data, 120);
    ModelError::new(
        ErrorKind::MalformedResponse,
        redact(
            &format!(
                "malformed stream data in event #{event_number} (event type {event_type:?}): \
                 {reason}; data: {snippet:?}{ellipsis}"
            ),
            &[],
        ),
    )
}

/// The stream ended without terminal evidence: a retryable `incomplete_stream`.
pub fn incomplete_stream(detail: &str) -> ModelError {
    ModelError::new(ErrorKind::IncompleteStream, detail.to_string())
}

/// Classifies a transport failure from `reqwest`: timeouts → `timeout`, everything else
/// (refused, reset, DNS, TLS, a body cut off) → `connection`. The URL is left out of the
/// message (it could carry credentials) and `secrets` are scrubbed.
#[cfg(feature = "http")]
pub fn classify_transport(err: reqwest::Error, secrets: &[&str]) -> ModelError {
    let kind = if err.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::Connection
    };
    let phase = if err.is_connect() {
        "connect failed"
    } else if err.is_body() || err.is_decode() {
        "reading the response body failed"
    } else {
        "request failed"
    };
    let err = err.without_url();
    let mut chain = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        let text = s.to_string();
        if !chain.contains(&text) {
            chain.push_str(": ");
            chain.push_str(&text);
        }
        source = s.source();
    }
    ModelError::new(kind, redact(&format!("{phase}: {chain}"), secrets))
}

/// Removes secrets from text that leaves the client: every occurrence of each of `secrets`,
/// and anything that looks like an API key (`sk-…`, `sk-ant-…` of 8+ key characters, which
/// also covers the partially masked keys some providers echo back in 401 messages).
pub fn redact(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_string();
    for s in secrets {
        if s.len() >= 4 {
            out = out.replace(s, "***");
        }
    }
    if !out.contains("sk-") {
        return out;
    }
    let mut result = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(pos) = rest.find("sk-") {
        let (before, after) = rest.split_at(pos);
        result.push_str(before);
        let key_len = after
            .char_indices()
            .find(|&(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '*' | '.')))
            .map_or(after.len(), |(i, _)| i);
        let boundary_ok = before
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_ascii_alphanumeric());
        if key_len >= 11 && boundary_ok {
            result.push_str("sk-***");
        } else {
            result.push_str(&after[..key_len.max(3)]);
        }
        rest = &after[key_len.max(3)..];
    }
    result.push_str(rest);
    result
}

fn truncate(s: &str) -> String {
    let (head, more) = head(s, MAX_MESSAGE_CHARS);
    format!("{head}{more}")
}

/// The first `n` characters of `s`, and `…` when it has more.
fn head(s: &str, n: usize) -> (String, &'static str) {
    let more = s.chars().nth(n).map_or("", |_| "…");
    (s.chars().take(n).collect(), more)
}
