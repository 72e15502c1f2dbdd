//! `agentloop decode`: a captured raw response → the JSON report of what the client makes of it.
//!
//! [`decode`] is pure apart from one clock read ([`decode_at`] takes the clock as an argument):
//! it runs the same [`SsePipeline`] as the HTTP clients, then assembles the message with
//! [`MessageAssembler`] — the same rules the runtime should use to commit a message.
//!
//! The report (exactly this JSON object; `deltas` is printed separately with `--deltas`):
//!
//! ```json
//! {"outcome": "completed"|"error", "committed": bool,
//!  "message": {"text", "reasoning", "reasoning_signature", "redacted_reasoning": [..], "refusal",
//!              "tool_calls": [{"id", "name", "arguments", "arguments_raw", "arguments_valid"}]} | null,
//!  "finish_reason": "stop"|"length"|"tool_calls"|"content_filter"|"other"|null,
//!  "raw_finish_reason": string|null,
//!  "usage": {"input_tokens", "output_tokens", "cache_read_input_tokens",
//!            "cache_creation_input_tokens", "reasoning_tokens"} | null,
//!  "error": null | {"kind", "retryable", "context_overflow", "retry_after_ms", "http_status"}}
//! ```
//!
//! `message` is the (possibly partial) assembled message whenever the stream produced any
//! delta, else `null`; `committed` is true only for a completed stream (R-STR-4). `usage` is
//! `null` when the provider sent none — never zeros.

use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;

use crate::error::{ErrorKind, ModelError};
use crate::message::{FinishReason, MessageDelta, Usage};
use crate::provider::classify::{
    classify_http, classify_non_stream_body, non_stream_media_type, unsupported_encoding,
};
use crate::provider::http::{ProviderKind, DEFAULT_MAX_RETRY_AFTER};
use crate::provider::sse::SsePipeline;

/// How the decoded response ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DecodeOutcome {
    /// Terminal evidence seen: the message would be committed.
    Completed,
    /// An HTTP error, an in-stream error, malformed data or an incomplete stream.
    Error,
}

/// One tool call as decoded.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecodedToolCall {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Parsed arguments (`{}` for empty), or `null` when invalid or truncated.
    pub arguments: Value,
    /// The raw argument text as streamed.
    pub arguments_raw: String,
    /// False when the arguments are not valid JSON or were cut off (`length`): such a call is
    /// never executed; it gets a tool error result (R-STR-6).
    pub arguments_valid: bool,
}

/// The assembled message, as decoded.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecodedMessage {
    /// Visible text.
    pub text: String,
    /// Reasoning text.
    pub reasoning: String,
    /// Reasoning signature (Anthropic).
    pub reasoning_signature: Option<String>,
    /// Redacted reasoning blocks.
    pub redacted_reasoning: Vec<String>,
    /// Refusal text.
    pub refusal: Option<String>,
    /// Tool calls in the model's order.
    pub tool_calls: Vec<DecodedToolCall>,
}

/// The error part of the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecodedError {
    /// Classification.
    pub kind: ErrorKind,
    /// Whether the runtime would retry.
    pub retryable: bool,
    /// Whether the runtime would compact instead.
    pub context_overflow: bool,
    /// Server-requested delay (capped at the default cap).
    pub retry_after_ms: Option<u64>,
    /// HTTP status, when there was one.
    pub http_status: Option<u16>,
}

impl From<&ModelError> for DecodedError {
    fn from(e: &ModelError) -> Self {
        DecodedError {
            kind: e.kind,
            retryable: e.retryable(),
            context_overflow: e.context_overflow(),
            retry_after_ms: e.retry_after_ms,
            http_status: e.http_status,
        }
    }
}

/// The `agentloop decode` report (see the module docs for the JSON).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecodeReport {
    /// Completed or error.
    pub outcome: DecodeOutcome,
    /// Whether the message would be committed.
    pub committed: bool,
    /// The assembled message, or `null` when no delta arrived.
    pub message: Option<DecodedMessage>,
    /// Normalized finish reason.
    pub finish_reason: Option<FinishReason>,
    /// The provider's own finish/stop reason.
    pub raw_finish_reason: Option<String>,
    /// Usage, or `null` when the provider sent none.
    pub usage: Option<Usage>,
    /// The error, if the outcome is `error`.
    pub error: Option<DecodedError>,
    /// The normalized delta sequence (printed by the CLI only with `--deltas`; an error —
    /// with its message — is the last delta).
    #[serde(skip)]
    pub deltas: Vec<MessageDelta>,
}

pub use crate::process::accumulate::MessageAssembler;

/// The decode report's view of an assembler.
fn decoded(asm: &MessageAssembler) -> Option<DecodedMessage> {
    if !asm.received_any() || (asm.error().is_some() && asm.has_no_content()) {
        return None;
    }
    let m = asm.message();
    Some(DecodedMessage {
        text: m.text,
        reasoning: m.reasoning,
        reasoning_signature: m.reasoning_signature,
        redacted_reasoning: m.redacted_reasoning,
        refusal: m.refusal,
        tool_calls: m
            .tool_calls
            .into_iter()
            .zip(asm.raw_arguments())
            .map(|(c, raw)| DecodedToolCall {
                arguments_valid: c.invalid_arguments.is_none(),
                id: c.id,
                name: c.name,
                arguments: c.arguments,
                arguments_raw: raw.to_string(),
            })
            .collect(),
    })
}

/// Runs `chunks` (the body's reads, in order) through the provider's pipeline and returns every
/// delta, ending with `finish` or one error.
pub fn normalize_chunks<'a>(
    provider: ProviderKind,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<MessageDelta> {
    let mut pipe = SsePipeline::new(provider.normalizer());
    let mut out = Vec::new();
    for c in chunks {
        pipe.feed_into(c, &mut out);
        if pipe.ended() {
            return out;
        }
    }
    out.extend(pipe.finish());
    out
}

/// Decodes a captured response: a raw SSE body, or with `http` a raw HTTP response (status
/// line, headers, blank line, body). `retry-after` HTTP-dates are resolved against the
/// response's `Date` header, else the current time.
#[allow(clippy::disallowed_methods)] // resolves HTTP-dates against the current time
pub fn decode(provider: ProviderKind, input: &[u8], http: bool) -> DecodeReport {
    decode_at(provider, input, http, SystemTime::now())
}

/// [`decode`] with the clock as an argument (pure).
pub fn decode_at(
    provider: ProviderKind,
    input: &[u8],
    http: bool,
    now: SystemTime,
) -> DecodeReport {
    if !http {
        return report(normalize_chunks(provider, [input]));
    }
    let resp = match parse_http(input) {
        Ok(r) => r,
        Err(why) => {
            let e = ModelError::new(
                ErrorKind::MalformedResponse,
                format!("malformed HTTP response: {why}"),
            );
            return report(vec![MessageDelta::Error { error: e }]);
        }
    };
    if (200..300).contains(&resp.status) {
        if let Some(e) = unsupported_encoding(resp.status, &resp.headers) {
            return report(vec![MessageDelta::Error { error: e }]);
        }
        let body = if resp.chunked {
            match dechunk(&resp.body) {
                Ok(b) => b,
                Err(why) => {
                    let e = ModelError::new(
                        ErrorKind::MalformedResponse,
                        format!("malformed chunked body: {why}"),
                    )
                    .with_status(resp.status);
                    return report(vec![MessageDelta::Error { error: e }]);
                }
            }
        } else {
            resp.body.clone()
        };
        if let Some(mime) = non_stream_media_type(&resp.headers) {
            let e = classify_non_stream_body(resp.status, &mime, &body);
            return report(vec![MessageDelta::Error { error: e }]);
        }
        return report(normalize_chunks(provider, [body.as_slice()]));
    }
    let now = resp
        .headers
        .get(reqwest::header::DATE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok())
        .unwrap_or(now);
    let cap = u64::try_from(DEFAULT_MAX_RETRY_AFTER.as_millis()).unwrap_or(u64::MAX);
    let body = if resp.chunked {
        dechunk(&resp.body).unwrap_or_else(|_| resp.body.clone())
    } else {
        resp.body.clone()
    };
    let e = classify_http(resp.status, &resp.headers, &body, now, cap);
    report(vec![MessageDelta::Error { error: e }])
}

fn report(deltas: Vec<MessageDelta>) -> DecodeReport {
    let mut asm = MessageAssembler::new();
    for d in &deltas {
        asm.push(d);
    }
    let completed = asm.is_complete();
    let message = decoded(&asm);
    let m = asm.message();
    DecodeReport {
        outcome: if completed {
            DecodeOutcome::Completed
        } else {
            DecodeOutcome::Error
        },
        committed: completed,
        finish_reason: m.finish_reason,
        raw_finish_reason: asm.raw_finish_reason().map(str::to_string),
        usage: m.usage,
        error: match (asm.error(), completed) {
            (Some(e), _) => Some(e.into()),
            (None, true) => None,
            // Unreachable with the pipeline (it always ends in finish or an error), but an
            // empty delta list must still say why it is not completed.
            (None, false) => {
                Some((&ModelError::new(ErrorKind::IncompleteStream, "no terminal evidence")).into())
            }
        },
        message,
        deltas,
    }
}

struct RawResponse {
    status: u16,
    headers: reqwest::header::HeaderMap,
    chunked: bool,
    body: Vec<u8>,
}

fn parse_http(input: &[u8]) -> Result<RawResponse, String> {
    // Head ends at the first blank line (CRLF CRLF, or LF LF for hand-written captures).
    let (head_end, body_start) = find_head_end(input).ok_or("no blank line after the headers")?;
    let head = std::str::from_utf8(&input[..head_end]).map_err(|_| "headers are not UTF-8")?;
    let mut lines = head.lines();
    let status_line = lines.next().ok_or("empty input")?;
    let mut parts = status_line.split_whitespace();
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/") {
        return Err(format!("not a status line: {status_line:?}"));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .filter(|s| (100..=999).contains(s))
        .ok_or_else(|| format!("no status code in {status_line:?}"))?;
    let mut headers = reqwest::header::HeaderMap::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("not a header line: {line:?}"));
        };
        let name = reqwest::header::HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| format!("bad header name {name:?}"))?;
        let value = reqwest::header::HeaderValue::from_str(value.trim())
            .map_err(|_| format!("bad header value for {name}"))?;
        headers.append(name, value);
    }
    let chunked = headers
        .get(reqwest::header::TRANSFER_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    Ok(RawResponse {
        status,
        headers,
        chunked,
        body: input[body_start..].to_vec(),
    })
}

fn find_head_end(input: &[u8]) -> Option<(usize, usize)> {
    let crlf = memchr::memmem::find(input, b"\r\n\r\n").map(|i| (i, i + 4));
    let lf = memchr::memmem::find(input, b"\n\n").map(|i| (i, i + 2));
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

fn dechunk(mut body: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let nl = memchr::memchr(b'\n', body).ok_or("chunk size line without newline")?;
        let line = std::str::from_utf8(&body[..nl]).map_err(|_| "chunk size is not text")?;
        let size_text = line.trim().split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        body = &body[nl + 1..];
        if size == 0 {
            return Ok(out);
        }
        if body.len() < size {
            // A capture cut short: keep what is there (the stream then ends incomplete).
            out.extend_from_slice(body);
            return Ok(out);
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size..];
        body = body
            .strip_prefix(b"\r\n")
            .or_else(|| body.strip_prefix(b"\n"))
            .unwrap_or(body);
        if body.is_empty() {
            return Ok(out);
        }
    }
}
