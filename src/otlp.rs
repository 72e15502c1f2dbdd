//! A run's spans sent to an OpenTelemetry collector over OTLP/HTTP (feature `otlp`).
//!
//! The spans are those of `agentloop trace export --format otlp` (built by
//! `agentloop_trace_tools::export_otlp`, in the GenAI semantic conventions): an `invoke_agent`
//! span per run, a `chat {model}` span per model step with its tokens, an `execute_tool
//! {name}` span per tool call. Messages, tool arguments and results only with
//! [`OtlpExporter::include_content`]. They are built from the run's trace when it has ended
//! and sent in one protobuf request (`application/x-protobuf`, which every OTLP/HTTP receiver
//! accepts); the times are those of the run's events, which the exporter notes as the
//! agent's event sink hands them over ([`OtlpExporter::observe`]).
//!
//! Sending is the caller's to await when the run has ended, and a failure is a typed error the
//! caller may report and ignore: the run itself never waits on the collector.
//!
//! ```no_run
//! use std::sync::Arc;
//! use agentloop::otlp::OtlpExporter;
//! use agentloop::prelude::*;
//! use agentloop::EventEnvelope;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let otlp = Arc::new(OtlpExporter::new("http://127.0.0.1:6006/v1/traces"));
//! let observer = otlp.clone();
//! let agent = Agent::builder()
//!     .model(ScriptedModel::demo())
//!     .builtin_tools()
//!     .sink(Arc::new(move |env: &EventEnvelope| observer.observe(env)))
//!     .build();
//! let out = agent
//!     .run_with("session-1", vec![Message::user("What is 6*7?")], None, true)
//!     .await?;
//! if let Some(trace) = &out.trace {
//!     if let Err(e) = otlp.send(trace).await {
//!         eprintln!("warning: spans not sent: {e}");
//!     }
//! }
//! # Ok(())
//! # }
//! ```

use std::sync::Mutex;
use std::time::Duration;

use agentloop_trace_tools::export_otlp::{
    otlp_export, otlp_protobuf, otlp_spans, OtlpOptions, SpanTimes,
};

use crate::trace::Trace;
use crate::EventEnvelope;

/// Why the spans were not delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OtlpError {
    /// The HTTP client could not be built (its TLS configuration).
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    /// The request did not get an answer (connection refused, timeout, …).
    #[error("{endpoint}: {message}")]
    Send {
        /// The endpoint.
        endpoint: String,
        /// What went wrong.
        message: String,
    },
    /// The collector answered with an error status.
    #[error("{endpoint} answered {status}: {body}")]
    Status {
        /// The endpoint.
        endpoint: String,
        /// The HTTP status.
        status: u16,
        /// The start of the answer's body.
        body: String,
    },
}

/// Sends a run's spans to an OTLP/HTTP endpoint (see the module docs).
#[derive(Debug)]
pub struct OtlpExporter {
    endpoint: String,
    headers: Vec<(String, String)>,
    include_content: bool,
    timeout: Duration,
    times: Mutex<SpanTimes>,
}

impl OtlpExporter {
    /// An exporter to `endpoint`, the collector's traces URL (OTLP/HTTP's is
    /// `http://HOST:4318/v1/traces`; Arize Phoenix's `http://HOST:6006/v1/traces`), without
    /// content, with a 10 s timeout.
    pub fn new(endpoint: impl Into<String>) -> OtlpExporter {
        OtlpExporter {
            endpoint: endpoint.into(),
            headers: Vec::new(),
            include_content: false,
            timeout: Duration::from_secs(10),
            times: Mutex::new(SpanTimes::default()),
        }
    }

    setters! {
        /// Whether the spans carry the messages, the tools' definitions, tool arguments and
        /// results (off by default: they may hold personal or secret data).
        include_content(yes: bool) => include_content = yes;

        /// How long a request may take, connecting included.
        timeout(timeout: Duration) => timeout = timeout;
    }

    /// A header sent with the request (an API key, `authorization`); repeatable.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> OtlpExporter {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Notes the time of one of the run's events (call it from the agent's sink); events
    /// other than a run's, a request's and a tool call's start and end are ignored.
    pub fn observe(&self, env: &EventEnvelope) {
        if let Ok(mut times) = self.times.lock() {
            times.observe(env);
        }
    }

    /// The spans of `trace` as an OTLP/JSON export request (what [`OtlpExporter::send`]
    /// sends, in its JSON form).
    pub fn export_json(&self, trace: &Trace) -> serde_json::Value {
        let times = self.times.lock().map(|t| t.clone()).unwrap_or_default();
        let options = OtlpOptions {
            include_content: self.include_content,
            base_ms: times.earliest().unwrap_or(0),
        };
        otlp_export(
            otlp_spans(trace, &times, &options),
            env!("CARGO_PKG_VERSION"),
        )
    }

    /// Sends the spans of `trace` (a run that has ended); the number of spans sent.
    pub async fn send(&self, trace: &Trace) -> Result<usize, OtlpError> {
        let export = self.export_json(trace);
        let spans = export["resourceSpans"][0]["scopeSpans"][0]["spans"]
            .as_array()
            .map_or(0, Vec::len);
        let body = otlp_protobuf(&export);
        let https = self.endpoint.starts_with("https:");
        let tls = crate::provider::tls::client_config(https).map_err(OtlpError::Client)?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .retry(reqwest::retry::never())
            .timeout(self.timeout)
            .user_agent(concat!("agentloop/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| OtlpError::Client(e.to_string()))?;
        let mut request = client
            .post(&self.endpoint)
            .header("content-type", "application/x-protobuf")
            .body(body);
        for (name, value) in &self.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let failed = |e: reqwest::Error| OtlpError::Send {
            endpoint: self.endpoint.clone(),
            message: e.to_string(),
        };
        let response = request.send().await.map_err(failed)?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(OtlpError::Status {
                endpoint: self.endpoint.clone(),
                status: status.as_u16(),
                body: body.chars().take(200).collect(),
            });
        }
        Ok(spans)
    }
}
