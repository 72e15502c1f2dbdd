//! Typed errors: model/transport errors with their classification, and the crate's other errors.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What went wrong talking to a model (R-IN-2). Serialized in snake_case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// HTTP 429 (not quota).
    RateLimited,
    /// HTTP 529 / `overloaded_error`.
    Overloaded,
    /// HTTP 5xx.
    ServerError,
    /// The stream ended without terminal evidence.
    IncompleteStream,
    /// Connection refused/reset, DNS failure.
    Connection,
    /// Connect, first-byte, stall or request timeout.
    Timeout,
    /// HTTP 400 / invalid request.
    BadRequest,
    /// HTTP 401.
    Authentication,
    /// HTTP 403.
    Permission,
    /// HTTP 404.
    NotFound,
    /// The prompt does not fit the model's context window.
    ContextOverflow,
    /// 429 `insufficient_quota`: retrying will not help.
    QuotaExhausted,
    /// HTTP 413.
    RequestTooLarge,
    /// HTTP 3xx: the client follows no redirects (an API key must never travel to another
    /// origin); the base URL should name the final location.
    Redirected,
    /// A response the client cannot read: stream data that is not JSON or has an unexpected
    /// shape, a `Content-Encoding` it does not decode, a 2xx body that is not an event stream.
    /// The same request would get the same answer, so it is not retried.
    MalformedResponse,
    /// The response exceeded a configured bound (whole size, one tool call's arguments, the
    /// number of content blocks / tool calls); not retried, the next attempt would too.
    ResponseTooLarge,
}

impl ErrorKind {
    /// Whether an error of this kind is retried (R-IN-2).
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::RateLimited
                | ErrorKind::Overloaded
                | ErrorKind::ServerError
                | ErrorKind::IncompleteStream
                | ErrorKind::Connection
                | ErrorKind::Timeout
        )
    }

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::ServerError => "server_error",
            ErrorKind::IncompleteStream => "incomplete_stream",
            ErrorKind::Connection => "connection",
            ErrorKind::Timeout => "timeout",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::Authentication => "authentication",
            ErrorKind::Permission => "permission",
            ErrorKind::NotFound => "not_found",
            ErrorKind::ContextOverflow => "context_overflow",
            ErrorKind::QuotaExhausted => "quota_exhausted",
            ErrorKind::RequestTooLarge => "request_too_large",
            ErrorKind::Redirected => "redirected",
            ErrorKind::MalformedResponse => "malformed_response",
            ErrorKind::ResponseTooLarge => "response_too_large",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A classified model or transport error. Never contains an API key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ModelError {
    /// Classification.
    pub kind: ErrorKind,
    /// Human-readable detail.
    pub message: String,
    /// Server-requested delay before retrying, in milliseconds (already capped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// HTTP status, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
}

impl ModelError {
    /// A new error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ModelError {
            kind,
            message: message.into(),
            retry_after_ms: None,
            http_status: None,
        }
    }

    /// Sets the retry-after hint.
    pub fn with_retry_after_ms(mut self, ms: Option<u64>) -> Self {
        self.retry_after_ms = ms;
        self
    }

    /// Sets the HTTP status.
    pub fn with_status(mut self, status: u16) -> Self {
        self.http_status = Some(status);
        self
    }

    /// Whether the step may be retried as-is.
    pub fn retryable(&self) -> bool {
        self.kind.retryable()
    }

    /// Whether this error means the context must be compacted (never retried as-is).
    pub fn context_overflow(&self) -> bool {
        self.kind == ErrorKind::ContextOverflow
    }
}

/// Why a run failed: the `error` of a failed [`LoopResult`](crate::react::LoopResult), typed so
/// a caller can tell a provider's answer from a store or compaction failure without parsing a
/// string (its `Display` is the text of the `run_error` event). Serialized with a `type` tag.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunError {
    /// A model step failed: its error was not retryable, or it was the last retry's (and no
    /// fallback model was left).
    #[error("{error}")]
    Model {
        /// The classified error.
        error: ModelError,
    },
    /// A write to the session store failed while the run was going (R-IDEM-4).
    #[error("session store write failed: {message}")]
    StoreWrite {
        /// The store's error.
        message: String,
    },
    /// The write of the run's last step or its run-end entry failed (R-IDEM-4): the store
    /// lacks the entries from the failed write on, so the session stays resumable.
    #[error(
        "session store write failed: {message} (after the run reached {}; the store lacks the \
         entries from the failed write on, so the session stays resumable)",
        reached.map_or("its end", |o| o.as_str())
    )]
    EndWrite {
        /// The store's error.
        message: String,
        /// The end the run had reached when the write failed.
        reached: Option<crate::outcome::Outcome>,
    },
    /// Compaction failed (R-OUT-6).
    #[error("compaction failed: {message}")]
    Compaction {
        /// The compactor's error.
        message: String,
    },
    /// The typed final answer was still invalid after the output retries.
    #[error("{message}")]
    OutputInvalid {
        /// What is wrong with the answer.
        message: String,
    },
    /// The run ended without a result: a defect of the runtime that drove it.
    #[error("the run ended without a result")]
    NoResult,
}

impl RunError {
    /// The model's error, when a model step failed.
    pub fn model_error(&self) -> Option<&ModelError> {
        match self {
            RunError::Model { error } => Some(error),
            _ => None,
        }
    }

    /// The snake_case name of the variant (the serialized `type`).
    pub fn kind(&self) -> &'static str {
        match self {
            RunError::Model { .. } => "model",
            RunError::StoreWrite { .. } => "store_write",
            RunError::EndWrite { .. } => "end_write",
            RunError::Compaction { .. } => "compaction",
            RunError::OutputInvalid { .. } => "output_invalid",
            RunError::NoResult => "no_result",
        }
    }
}
