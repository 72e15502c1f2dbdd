//! Shared HTTP client configuration of the real providers: base URL, API key, timeouts.
//!
//! Defaults (all settable from the library and, through the CLI, from flags):
//!
//! | setting | default | meaning |
//! |---|---|---|
//! | [`HttpConfig::connect_timeout`] | 10 s | TCP + TLS connect |
//! | [`HttpConfig::first_byte_timeout`] | 60 s | from sending the request until the response headers arrive |
//! | [`HttpConfig::stall_timeout`] | off | idle time between two body reads; the runtime's stall timer (between deltas, R-IN-7) is the normal place for this, so the client leaves it off unless a library user without the runtime wants it |
//! | [`HttpConfig::max_retry_after`] | 60 s | cap applied to `retry-after-ms` / `retry-after` hints |
//! | [`HttpConfig::with_max_response_bytes`] and the other bounds | 32 MiB, 8 MiB per tool call's arguments, 1,024 content blocks, 262,144 deltas | bounds on one response ([`crate::provider::limits`]) |
//!
//! The client never retries (R-IN-6): every failure is classified and returned once; the
//! machine decides. It follows no redirects (a 3xx is [`ErrorKind::Redirected`] naming the
//! status and the `Location` host: an API endpoint has no reason to redirect a POST, and
//! following one could send the key's header to another host), asks for `Accept-Encoding: identity`, and refuses a 2xx body
//! it cannot read (another `Content-Encoding`, JSON or HTML instead of an event stream) with a
//! [`ErrorKind::MalformedResponse`] naming the cause. The API key is private to the
//! configuration: [`HttpConfig`]'s `Debug` prints it as `ApiKey(***)`, nothing else shows it,
//! and error messages are scrubbed of it (`provider::classify::redact`).
//!
//! [`build_model`] makes the client for [`HttpConfig::provider`]: OpenAI-compatible Chat
//! Completions, Anthropic Messages or the OpenAI Responses API, each behind its feature.
//!
//! # Example
//!
//! A client for a local OpenAI-compatible server (Ollama, vLLM, llama.cpp); nothing is sent
//! before a run asks the model:
//!
//! ```
//! use agentloop::provider::http::{build_model, HttpConfig, ProviderKind};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = HttpConfig::new(ProviderKind::OpenAi)
//!     .with_base_url("http://localhost:11434/v1")
//!     .with_api_key("unused");
//! let model = build_model("llama3.2", config)?;
//! let agent = agentloop::runtime::Agent::builder().model(model).build();
//! # let _ = agent;
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

#[cfg_attr(not(feature = "http"), allow(unused_imports))]
use crate::error::{ErrorKind, ModelError};
use crate::model::ModelRequest;
use crate::provider::limits::ResponseLimits;
use crate::provider::sse::SseNormalizer;
use serde_json::Value;

/// A provider's wire format, as the one generic HTTP client drives it (rig's `Provider`
/// shape): its own settings (read from [`HttpConfig`] once, when the client is built), its
/// request (URL, headers and body from the core's [`ModelRequest`](crate::model::ModelRequest))
/// and its stream normalizer. Pure: no IO, no clock. A provider is registered by one line in
/// the `providers!` list below; see `docs/providers.md`, "Add a provider".
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) trait Provider: Clone + fmt::Debug + Send + Sync + 'static {
    /// The registry name (`--provider`, the prefix of [`Model::name`](crate::model::Model::name)).
    const NAME: &'static str;
    /// The environment variables holding the API key, the first one set wins.
    const KEY_ENV: &'static [&'static str];
    /// The environment variable holding the base URL.
    const BASE_URL_ENV: &'static str;
    /// The public endpoint's base URL.
    const DEFAULT_BASE_URL: &'static str;
    /// Whether this build has the provider's Cargo feature ([`build_model`] refuses it if not).
    const ENABLED: bool;
    /// The normalizer of one response.
    type Normalizer: SseNormalizer + Default + Send + 'static;
    /// This provider's settings, from the shared configuration.
    fn from_config(config: &HttpConfig) -> Self;
    /// The URL to POST to; `model` is the wire model name.
    fn endpoint(&self, base_url: &str, model: &str) -> String;
    /// The request's headers: the provider's own and, with a key, its auth header. The
    /// transport adds `accept`, `accept-encoding` and the configuration's extra headers.
    fn headers(&self, api_key: Option<&str>) -> Vec<(String, String)>;
    /// The request body; `model` is the client's model, sent when the request names none.
    fn body(&self, request: &ModelRequest, model: &str) -> Result<Value, ModelError>;
    /// A fresh normalizer with this provider's settings (what `agentloop decode` reads with;
    /// default: the normalizer's `Default`).
    fn normalizer(&self) -> Self::Normalizer {
        Self::Normalizer::default()
    }
    /// A fresh normalizer for the response to `request` (default: [`Self::normalizer`]).
    fn normalizer_for(&self, request: &ModelRequest) -> Self::Normalizer {
        let _ = request;
        self.normalizer()
    }
}

/// The registry: `ProviderKind` (a name → a [`Provider`]) and its dispatch, from one line per
/// provider.
macro_rules! providers {
    ($( $(#[$doc:meta])* $variant:ident => $ty:ty, )*) => {
        /// Which wire format a provider speaks: the registry of the providers by name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ProviderKind {
            $( $(#[$doc])* $variant, )*
        }

        impl ProviderKind {
            /// Every registered provider, in registration order.
            pub const ALL: &'static [ProviderKind] = &[$(ProviderKind::$variant),*];

            /// The registry name: `openai`, `anthropic`, `openai-responses`, `gemini`.
            pub fn as_str(self) -> &'static str {
                match self { $(ProviderKind::$variant => <$ty as Provider>::NAME,)* }
            }

            /// The environment variables holding the API key, the first one set wins.
            fn key_envs(self) -> &'static [&'static str] {
                match self { $(ProviderKind::$variant => <$ty as Provider>::KEY_ENV,)* }
            }

            /// The environment variable holding the base URL.
            pub fn base_url_env(self) -> &'static str {
                match self { $(ProviderKind::$variant => <$ty as Provider>::BASE_URL_ENV,)* }
            }

            /// The public endpoint's base URL. OpenAI's includes `/v1` (as `OPENAI_BASE_URL`
            /// does by convention, for both of its wire formats); Anthropic's does not (the
            /// client appends `/v1/messages`); Gemini's includes `/v1beta`.
            pub fn default_base_url(self) -> &'static str {
                match self { $(ProviderKind::$variant => <$ty as Provider>::DEFAULT_BASE_URL,)* }
            }

            /// The endpoint URL for `model` under `config`.
            fn endpoint(self, config: &HttpConfig, model: &str) -> String {
                match self {
                    $(ProviderKind::$variant => {
                        <$ty as Provider>::from_config(config).endpoint(&config.base_url, model)
                    })*
                }
            }

            /// A fresh normalizer of this wire format, with default settings (for `decode`).
            #[cfg_attr(not(all(feature = "wire", feature = "http")), allow(dead_code))]
            pub(crate) fn normalizer(self) -> Box<dyn SseNormalizer + Send> {
                let config = HttpConfig::new(self);
                match self {
                    $(ProviderKind::$variant => {
                        Box::new(<$ty as Provider>::from_config(&config).normalizer())
                    })*
                }
            }

            /// The generic HTTP client over this provider.
            #[cfg(feature = "http")]
            fn build(self, model: &str, config: HttpConfig) -> Result<HttpClient, ModelError> {
                match self { $(ProviderKind::$variant => HttpModel::<$ty>::build(model, config),)* }
            }
        }
    };
}

providers! {
    /// OpenAI-compatible Chat Completions (OpenAI, Azure, OpenRouter, Ollama, vLLM, llama.cpp, DeepSeek…).
    OpenAi => crate::provider::openai::ChatCompletions,
    /// Anthropic Messages.
    Anthropic => crate::provider::anthropic::Messages,
    /// OpenAI Responses API (`POST {base}/responses`; OpenAI's reasoning models, gateways that
    /// speak it).
    OpenAiResponses => crate::provider::openai_responses::Responses,
    /// Google Gemini `streamGenerateContent` (the Gemini API; `GEMINI_API_KEY`).
    Gemini => crate::provider::gemini::Gemini,
}

impl ProviderKind {
    /// The environment variable holding the API key (the first of the provider's: Gemini also
    /// reads `GOOGLE_API_KEY`).
    pub fn key_env(self) -> &'static str {
        self.key_envs().first().copied().unwrap_or_default()
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ProviderKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ProviderKind::ALL
            .iter()
            .copied()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = ProviderKind::ALL.iter().map(|k| k.as_str()).collect();
                format!("unknown provider {s:?} (expected {})", names.join(", "))
            })
    }
}

impl Serialize for ProviderKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ProviderKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// An API key. `Debug` never shows it and there is no `Display`; only the request builder reads
/// it, through [`ApiKey::expose`].
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub(crate) fn new(key: impl Into<String>) -> Self {
        ApiKey(key.into())
    }

    /// The secret itself: for the `Authorization`/`x-api-key` header and for scrubbing errors.
    #[cfg_attr(not(feature = "http"), allow(dead_code))] // the HTTP clients' only
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// Configuration shared by the providers' HTTP clients. Its `Debug` hides the key and the
/// extra header values. The key is set with [`with_api_key`](Self::with_api_key) (or read by
/// [`from_env`](Self::from_env)) and never read back.
#[derive(Clone)]
pub struct HttpConfig {
    /// Which wire format.
    pub provider: ProviderKind,
    /// Base URL without a trailing slash (OpenAI-style: `…/v1`; Anthropic-style: the host).
    pub base_url: String,
    /// The key; `None` sends no auth header (Ollama, llama.cpp and vLLM need none).
    pub(crate) api_key: Option<ApiKey>,
    /// TCP + TLS connect timeout.
    pub connect_timeout: Duration,
    /// Time allowed from sending the request until the response headers arrive.
    pub first_byte_timeout: Duration,
    /// Optional idle timeout between two body reads (off by default; see the module docs).
    pub stall_timeout: Option<Duration>,
    /// Cap for server-requested retry delays.
    pub max_retry_after: Duration,
    /// Anthropic `max_tokens` when the request sets none (the API requires one).
    pub default_max_tokens: u32,
    /// Extra request headers (e.g. `OpenAI-Organization`, `anthropic-beta`). Their values are
    /// treated as secrets too: they are never printed.
    pub extra_headers: Vec<(String, String)>,
    /// Bounds on one response (size, one tool call's arguments, content blocks, deltas): set
    /// by [`with_max_response_bytes`](Self::with_max_response_bytes) and the like.
    pub(crate) limits: ResponseLimits,
    /// OpenAI-compatible: the field that carries the output cap. `None` (default): by model
    /// name, `max_completion_tokens` for the reasoning models that refuse `max_tokens` (`o1`,
    /// `o3`, `o4`, `gpt-5` families) and `max_tokens` for
    /// the rest (what local servers read); `Some(true)` / `Some(false)` decide.
    pub max_completion_tokens: Option<bool>,
    /// OpenAI-compatible: which assistant messages carry their reasoning back as
    /// `reasoning_content` (default: every one that has some; see
    /// [`ReasoningReplay`](crate::provider::openai::ReasoningReplay) for what servers expect).
    pub reasoning_replay: crate::provider::openai::ReasoningReplay,
    /// Anthropic: extended thinking with this many tokens of budget (`thinking: {type:
    /// enabled, budget_tokens}`); `None` (default) sends no `thinking`, and the model does not
    /// think. The budget must be at least 1,024 and below the request's `max_tokens`
    /// ([`HttpConfig::default_max_tokens`] when the agent sets none), and the Messages API
    /// refuses a `temperature` or a forced tool choice with it. The thinking blocks (with
    /// their signatures) and redacted thinking blocks of each assistant turn go back before
    /// its text and tool calls, as the API requires.
    pub thinking_budget: Option<u32>,
    /// OpenAI Responses: `reasoning.effort` (`minimal`, `low`, `medium`, `high`…); `None`
    /// (default) sends none (the model's default). CLI `--reasoning-effort`.
    pub reasoning_effort: Option<String>,
    /// OpenAI Responses: `reasoning.summary` (`auto`, `concise`, `detailed`): the model streams
    /// a summary of its reasoning, which becomes reasoning text; `None` (default) asks for none
    /// (OpenAI requires a verified organization for summaries of some models). CLI
    /// `--reasoning-summary`.
    pub reasoning_summary: Option<String>,
    /// OpenAI Responses: whether to ask for `reasoning.encrypted_content` and send the kept
    /// reasoning items back with their assistant messages (what a reasoning model needs to
    /// keep its reasoning across tool calls). `None` (default): for OpenAI's reasoning model
    /// families by name (`o1`, `o3`, `o4`, `gpt-5`, after a `vendor/` prefix); other models
    /// may refuse the `include`.
    pub encrypted_reasoning: Option<bool>,
}

impl fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .extra_headers
            .iter()
            .map(|(k, _)| (k.as_str(), "***"))
            .collect();
        f.debug_struct("HttpConfig")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key)
            .field("connect_timeout", &self.connect_timeout)
            .field("first_byte_timeout", &self.first_byte_timeout)
            .field("stall_timeout", &self.stall_timeout)
            .field("max_retry_after", &self.max_retry_after)
            .field("default_max_tokens", &self.default_max_tokens)
            .field("extra_headers", &headers)
            .field("limits", &self.limits)
            .field("max_completion_tokens", &self.max_completion_tokens)
            .field("reasoning_replay", &self.reasoning_replay)
            .field("thinking_budget", &self.thinking_budget)
            .field("reasoning_effort", &self.reasoning_effort)
            .field("reasoning_summary", &self.reasoning_summary)
            .field("encrypted_reasoning", &self.encrypted_reasoning)
            .finish()
    }
}

/// Default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default first-byte (response headers) timeout.
pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default cap for `retry-after` hints.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Default Anthropic `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

impl HttpConfig {
    /// Defaults for `provider`: the public base URL, no key, default timeouts.
    pub fn new(provider: ProviderKind) -> Self {
        HttpConfig {
            provider,
            base_url: provider.default_base_url().to_string(),
            api_key: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            first_byte_timeout: DEFAULT_FIRST_BYTE_TIMEOUT,
            stall_timeout: None,
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
            default_max_tokens: DEFAULT_MAX_TOKENS,
            extra_headers: Vec::new(),
            limits: ResponseLimits::default(),
            max_completion_tokens: None,
            reasoning_replay: Default::default(),
            thinking_budget: None,
            reasoning_effort: None,
            reasoning_summary: None,
            encrypted_reasoning: None,
        }
    }

    /// Defaults, then the provider's key and base URL variables from the environment
    /// (`OPENAI_API_KEY`/`ANTHROPIC_API_KEY`/`GEMINI_API_KEY`, then `GOOGLE_API_KEY`, and
    /// `OPENAI_BASE_URL`/`ANTHROPIC_BASE_URL`/`GEMINI_BASE_URL`; empty variables are ignored).
    pub fn from_env(provider: ProviderKind) -> Self {
        Self::from_lookup(provider, |name| std::env::var(name).ok())
    }

    /// Like [`HttpConfig::from_env`] with a custom variable lookup (testable without touching
    /// the process environment).
    pub fn from_lookup(provider: ProviderKind, lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut cfg = Self::new(provider);
        let key = provider
            .key_envs()
            .iter()
            .find_map(|name| lookup(name).filter(|k| !k.trim().is_empty()));
        if let Some(key) = key {
            cfg.api_key = Some(ApiKey::new(key.trim()));
        }
        if let Some(url) = lookup(provider.base_url_env()).filter(|u| !u.trim().is_empty()) {
            cfg = cfg.with_base_url(url.trim());
        }
        cfg
    }

    setters! {
        /// Sets the base URL (a trailing `/` is removed).
        with_base_url(url: impl Into<String>) =>
            base_url = url.into().trim_end_matches('/').to_string();

        /// Sets the API key.
        with_api_key(key: impl Into<String>) => api_key = Some(ApiKey::new(key));

        /// Removes the API key: no auth header is sent (Ollama, llama.cpp and vLLM need none).
        without_api_key() => api_key = None;
    }

    /// The OpenAI Responses reasoning settings (`reasoning_effort`, `reasoning_summary`,
    /// `encrypted_reasoning`) as the request body takes them.
    pub(crate) fn responses_reasoning(
        &self,
    ) -> crate::provider::openai_responses::ResponsesReasoning {
        crate::provider::openai_responses::ResponsesReasoning {
            effort: self.reasoning_effort.clone(),
            summary: self.reasoning_summary.clone(),
            encrypted: self.encrypted_reasoning,
        }
    }

    setters! {
        /// Bounds the bytes of text, reasoning, refusal and tool-argument deltas (plus reasoning
        /// signatures and redacted reasoning) of one response (default
        /// [`DEFAULT_MAX_RESPONSE_BYTES`](crate::provider::limits::DEFAULT_MAX_RESPONSE_BYTES),
        /// 32 MiB); beyond it the attempt ends with a `response_too_large` error.
        with_max_response_bytes(bytes: usize) => limits.max_response_bytes = bytes;

        /// Bounds the bytes of one tool call's arguments (default
        /// [`DEFAULT_MAX_TOOL_ARGUMENT_BYTES`](crate::provider::limits::DEFAULT_MAX_TOOL_ARGUMENT_BYTES),
        /// 8 MiB).
        with_max_tool_argument_bytes(bytes: usize) => limits.max_tool_argument_bytes = bytes;

        /// Bounds the content blocks of one response: Anthropic content blocks of any type;
        /// OpenAI tool calls and text/reasoning runs, so the tool calls of one turn (default
        /// [`DEFAULT_MAX_CONTENT_BLOCKS`](crate::provider::limits::DEFAULT_MAX_CONTENT_BLOCKS),
        /// 1,024).
        with_max_content_blocks(blocks: usize) => limits.max_content_blocks = blocks;

        /// Bounds the normalized deltas of one response, whatever their size (default
        /// [`DEFAULT_MAX_DELTAS`](crate::provider::limits::DEFAULT_MAX_DELTAS), 262,144).
        with_max_deltas(deltas: usize) => limits.max_deltas = deltas;
    }

    /// Whether an API key is set (the key itself is never read back).
    pub fn has_api_key(&self) -> bool {
        self.api_key.is_some()
    }

    /// The endpoint URL: `{base}/chat/completions` (OpenAI), `{base}/responses` (OpenAI
    /// Responses), `{base}/v1/messages` (Anthropic; a base that already ends in `/v1` is not
    /// doubled) or `{base}/models/{model}:streamGenerateContent?alt=sse` (Gemini, whose URL
    /// names the model: shown here with `{model}` as written).
    pub fn endpoint(&self) -> String {
        self.provider.endpoint(self, "{model}")
    }

    /// The cap for retry hints, in milliseconds.
    #[cfg_attr(not(feature = "http"), allow(dead_code))] // the HTTP clients' only
    pub(crate) fn max_retry_after_ms(&self) -> u64 {
        u64::try_from(self.max_retry_after.as_millis()).unwrap_or(u64::MAX)
    }

    /// Secrets to scrub from any text that leaves the client (the key and extra header values).
    #[cfg_attr(not(feature = "http"), allow(dead_code))] // the HTTP clients' only
    pub(crate) fn secrets(&self) -> Vec<&str> {
        let mut s: Vec<&str> = self.api_key.iter().map(ApiKey::expose).collect();
        s.extend(self.extra_headers.iter().map(|(_, v)| v.as_str()));
        s
    }

    /// Builds the `reqwest` client: TLS configured by the crate
    /// (rustls, ring, the webpki roots), connect timeout set, reqwest's own retry policy
    /// switched off (by default reqwest re-sends requests refused by HTTP/2 protocol NACKs),
    /// and redirects not followed. The only re-send left below the machine is hyper's re-issue of
    /// a request whose pooled connection closed *before the request was written*, which cannot
    /// duplicate work because the server never saw it.
    ///
    /// Redirects: reqwest's default policy follows up to 10 and, on a change of host, drops
    /// only `Authorization` and cookies — `x-api-key` and the extra headers would travel to
    /// the new host. An API endpoint has no reason to redirect a POST, so the client follows
    /// none: a 3xx is a [`ErrorKind::Redirected`] error naming the status and the `Location`
    /// host (not retried; the base URL needs fixing).
    ///
    /// A plain `http://` base URL (a local server) gets no root certificates: the client never
    /// speaks TLS to it (redirects are not followed), so the webpki roots are not loaded —
    /// unless a proxy variable is set, which could name an `https://` proxy for that traffic.
    #[cfg(feature = "http")]
    pub(crate) fn build_client(&self) -> Result<reqwest::Client, ModelError> {
        let tls = crate::provider::tls::client_config(self.needs_roots()).map_err(|e| {
            ModelError::new(ErrorKind::Connection, format!("cannot configure TLS: {e}"))
        })?;
        reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .retry(reqwest::retry::never())
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(self.connect_timeout)
            .user_agent(concat!("agentloop/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                ModelError::new(
                    ErrorKind::Connection,
                    format!("cannot build HTTP client: {e}"),
                )
            })
    }
}

#[cfg(feature = "http")]
impl HttpConfig {
    /// Whether the client may speak TLS: an `https://` (or any non-`http://`) base URL, or a
    /// proxy variable reqwest would read for plain HTTP traffic.
    fn needs_roots(&self) -> bool {
        let plain = self
            .base_url
            .get(..7)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"));
        !plain
            || ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
                .iter()
                .any(|v| std::env::var_os(v).is_some())
    }
}

/// Longest error body read for classification.
#[cfg(feature = "http")]
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Sends one streaming POST to `url` and returns the normalized delta stream. Shared by every
/// provider. Never retries. Failures before the body (connect, no headers within
/// `first_byte_timeout`, an HTTP error status) are the `Err`; failures inside the body are an
/// `Err` item that ends the stream. The key and the extra header values are scrubbed from
/// every error message. `now` is only read to resolve `retry-after` HTTP-dates.
#[cfg(feature = "http")]
pub(crate) async fn post_stream<N>(
    client: &reqwest::Client,
    config: &HttpConfig,
    url: String,
    headers: Vec<(String, String)>,
    body: serde_json::Value,
    normalizer: N,
    now: fn() -> std::time::SystemTime,
) -> Result<crate::model::DeltaStream, ModelError>
where
    N: crate::provider::sse::SseNormalizer + Send + 'static,
{
    use crate::provider::classify::{classify_http, classify_transport, redact};
    use futures::StreamExt;

    let secrets: Vec<String> = config.secrets().into_iter().map(str::to_string).collect();
    let scrub = move |mut e: ModelError, secrets: &[String]| {
        let refs: Vec<&str> = secrets.iter().map(String::as_str).collect();
        e.message = redact(&e.message, &refs);
        e
    };

    let mut req = client
        .post(url)
        .header("accept", "text/event-stream")
        .header("accept-encoding", "identity")
        .json(&body);
    for (k, v) in headers.iter().chain(config.extra_headers.iter()) {
        req = req.header(k.as_str(), v.as_str());
    }
    let timeout = config.first_byte_timeout;
    let resp = match tokio::time::timeout(timeout, req.send()).await {
        Err(_) => {
            return Err(ModelError::new(
                ErrorKind::Timeout,
                format!("no response headers within {} ms", timeout.as_millis()),
            ))
        }
        Ok(Err(e)) => {
            let refs: Vec<&str> = secrets.iter().map(String::as_str).collect();
            return Err(classify_transport(e, &refs));
        }
        Ok(Ok(resp)) => resp,
    };
    let status = resp.status();
    let resp_headers = resp.headers().clone();
    if !status.is_success() {
        let body = read_limited(resp, timeout, MAX_ERROR_BODY).await;
        let err = classify_http(
            status.as_u16(),
            &resp_headers,
            &body,
            now(),
            config.max_retry_after_ms(),
        );
        return Err(scrub(err, &secrets));
    }
    let resp = match readable_success(&resp_headers, resp, timeout).await {
        Ok(resp) => resp,
        Err(err) => return Err(scrub(err, &secrets)),
    };
    let stream = SseBody {
        body: resp.bytes_stream().boxed(),
        pipe: crate::provider::sse::SsePipeline::with_limits(normalizer, config.limits),
        queue: Default::default(),
        scratch: Vec::new(),
        done: false,
        stall: config.stall_timeout,
        stall_timer: None,
        secrets,
    };
    Ok(Box::pin(stream))
}

/// The normalized delta stream of a 2xx body: each read fed to the SSE pipeline, its deltas
/// handed out one by one; an error delta ends it (and hangs up). A `Stream` of its own rather
/// than `futures::stream::unfold`, whose state moves into and out of a new future for every
/// item: this one stays in place, and one buffer takes every read's deltas.
#[cfg(feature = "http")]
struct SseBody<N> {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    pipe: crate::provider::sse::SsePipeline<N>,
    queue: std::collections::VecDeque<crate::message::MessageDelta>,
    /// The deltas of one read, before they join `queue` (kept for its capacity).
    scratch: Vec<crate::message::MessageDelta>,
    done: bool,
    /// `HttpConfig::stall_timeout`: the longest wait for one body read.
    stall: Option<Duration>,
    /// The running wait's deadline (with `stall`), from the first read that had to wait.
    stall_timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    secrets: Vec<String>,
}

// Nothing in it is pinned structurally: `poll_next` takes it by `&mut`.
#[cfg(feature = "http")]
impl<N> Unpin for SseBody<N> {}

#[cfg(feature = "http")]
impl<N: crate::provider::sse::SseNormalizer> futures::Stream for SseBody<N> {
    type Item = Result<crate::message::MessageDelta, ModelError>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use crate::message::MessageDelta;
        use crate::provider::classify::{classify_transport, redact};
        use futures::StreamExt;
        use std::future::Future;
        use std::task::Poll;
        let st = self.get_mut();
        loop {
            if let Some(d) = st.queue.pop_front() {
                return Poll::Ready(Some(match d {
                    MessageDelta::Error { mut error } => {
                        st.done = true;
                        st.queue.clear();
                        // Hang up now: nothing more is read after an error.
                        st.body = futures::stream::empty().boxed();
                        let refs: Vec<&str> = st.secrets.iter().map(String::as_str).collect();
                        error.message = redact(&error.message, &refs);
                        Err(error)
                    }
                    d => Ok(d),
                }));
            }
            if st.done {
                return Poll::Ready(None);
            }
            let next = match st.body.poll_next_unpin(cx) {
                Poll::Ready(next) => {
                    st.stall_timer = None;
                    next
                }
                Poll::Pending => {
                    if let Some(limit) = st.stall {
                        let timer = st
                            .stall_timer
                            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                        if timer.as_mut().poll(cx).is_ready() {
                            st.stall_timer = None;
                            st.done = true;
                            return Poll::Ready(Some(Err(ModelError::new(
                                ErrorKind::Timeout,
                                format!("stream stalled: no data for {} ms", limit.as_millis()),
                            ))));
                        }
                    }
                    return Poll::Pending;
                }
            };
            match next {
                Some(Ok(bytes)) => {
                    st.pipe.feed_into(&bytes, &mut st.scratch);
                    st.queue.extend(st.scratch.drain(..));
                }
                Some(Err(e)) => {
                    st.done = true;
                    let refs: Vec<&str> = st.secrets.iter().map(String::as_str).collect();
                    return Poll::Ready(Some(Err(classify_transport(e, &refs))));
                }
                None => {
                    let deltas = st.pipe.finish();
                    st.queue.extend(deltas);
                    st.done = true;
                }
            }
            if st.pipe.ended() {
                st.done = true;
            }
        }
    }
}

/// A 2xx response handed back when the SSE pipeline can read it, else the typed error of
/// [`crate::provider::classify::unsupported_encoding`] or
/// [`crate::provider::classify::classify_non_stream_body`] (whose body is read, bounded, only
/// then).
#[cfg(feature = "http")]
async fn readable_success(
    headers: &reqwest::header::HeaderMap,
    resp: reqwest::Response,
    timeout: Duration,
) -> Result<reqwest::Response, ModelError> {
    use crate::provider::classify::{
        classify_non_stream_body, non_stream_media_type, unsupported_encoding,
    };
    let status = resp.status().as_u16();
    if let Some(e) = unsupported_encoding(status, headers) {
        return Err(e);
    }
    let Some(mime) = non_stream_media_type(headers) else {
        return Ok(resp);
    };
    let body = read_limited(resp, timeout, MAX_ERROR_BODY).await;
    Err(classify_non_stream_body(status, &mime, &body))
}

/// Reads at most `limit` bytes of a body (an error body), giving up quietly on timeout or a
/// transport error: classification then works from the status and headers alone.
#[cfg(feature = "http")]
async fn read_limited(resp: reqwest::Response, timeout: Duration, limit: usize) -> Vec<u8> {
    use futures::StreamExt;
    let mut out = Vec::new();
    let mut body = resp.bytes_stream();
    let read = async {
        while let Some(Ok(chunk)) = body.next().await {
            let room = limit.saturating_sub(out.len());
            out.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if out.len() >= limit {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(timeout, read).await;
    out
}

wire_pub! {
/// The model name to send for a request routed to a `kind` client whose own model is
/// `default`: the request's model without the `provider:` prefix of the registry name the
/// client is known by ([`Model::name`](crate::model::Model::name), e.g. `openai:gpt-4o` →
/// `gpt-4o`), or `default` when the request names none.
pub fn wire_model<'a>(kind: ProviderKind, requested: &'a str, default: &'a str) -> &'a str {
    strip_model_prefix(kind.as_str(), requested, default)
}
}

/// [`wire_model`] by the provider's registry name.
pub(crate) fn strip_model_prefix<'a>(name: &str, requested: &'a str, default: &'a str) -> &'a str {
    let requested = requested
        .strip_prefix(name)
        .and_then(|rest| rest.strip_prefix(':'))
        .unwrap_or(requested);
    if requested.is_empty() {
        default
    } else {
        requested
    }
}

/// The model the command-line tools' flags name (`--provider`, `--model`, `--base-url`,
/// `--script`): with `provider` `None`, the scripted model (from `script`, or the offline
/// demo); else that provider's client for `model` (required), configured from the environment,
/// `base_url` and `configure`. A flag that does not apply is an error naming it.
#[cfg(feature = "http")]
pub fn model_from_flags(
    provider: Option<ProviderKind>,
    model: Option<&str>,
    base_url: Option<&str>,
    script: Option<&std::path::Path>,
    configure: impl FnOnce(&mut HttpConfig),
) -> Result<std::sync::Arc<dyn crate::model::Model>, String> {
    use crate::provider::scripted::ScriptedModel;
    let Some(kind) = provider else {
        return match script {
            Some(path) => ScriptedModel::from_file(path)
                .map(|m| std::sync::Arc::new(m) as std::sync::Arc<dyn crate::model::Model>)
                .map_err(|e| e.to_string()),
            None => Ok(std::sync::Arc::new(ScriptedModel::demo())),
        };
    };
    if script.is_some() {
        return Err("--script applies to --provider scripted only".into());
    }
    let name =
        model.ok_or_else(|| format!("--model is required with --provider {}", kind.as_str()))?;
    let mut cfg = HttpConfig::from_env(kind);
    if let Some(url) = base_url {
        cfg = cfg.with_base_url(url.to_string());
    }
    configure(&mut cfg);
    build_model(name, cfg)
        .map(|m| std::sync::Arc::new(m) as std::sync::Arc<dyn crate::model::Model>)
        .map_err(|e| e.to_string())
}

/// The client for `config.provider`, with `model` as the default model name (used when a
/// request names none): the one generic HTTP client over the provider's wire format
/// (OpenAI-compatible Chat Completions, Anthropic Messages, the OpenAI Responses API or Google
/// Gemini, each behind its feature). Nothing is sent before a run asks the model. The client
/// never retries (R-IN-6): every failure is classified and returned once, and the machine
/// decides. A provider whose feature this build lacks is a [`ErrorKind::BadRequest`] error.
#[cfg(feature = "http")]
pub fn build_model(
    model: &str,
    config: HttpConfig,
) -> Result<impl crate::model::Model + Clone + fmt::Debug, ModelError> {
    config.provider.build(model, config)
}

/// The generic streaming client over a [`Provider`] (R-STR-5). Never retries (R-IN-6).
#[cfg(feature = "http")]
#[derive(Debug, Clone)]
struct HttpModel<P> {
    provider: P,
    model: String,
    config: HttpConfig,
    client: reqwest::Client,
}

#[cfg(feature = "http")]
impl<P: Provider> HttpModel<P> {
    fn build(model: &str, config: HttpConfig) -> Result<HttpClient, ModelError> {
        if !P::ENABLED {
            return Err(ModelError::new(
                ErrorKind::BadRequest,
                format!("agentloop was built without the `{}` feature", P::NAME),
            ));
        }
        let client = config.build_client()?;
        let model = HttpModel {
            provider: P::from_config(&config),
            model: model.to_string(),
            config,
            client,
        };
        Ok(HttpClient(std::sync::Arc::new(model)))
    }
}

#[cfg(feature = "http")]
#[async_trait::async_trait]
impl<P: Provider> crate::model::Model for HttpModel<P> {
    fn name(&self) -> String {
        format!("{}:{}", P::NAME, self.model)
    }

    // The wall clock resolves `retry-after` HTTP-dates at the network edge (not in a machine).
    #[allow(clippy::disallowed_methods)]
    async fn stream(&self, request: ModelRequest) -> Result<crate::model::DeltaStream, ModelError> {
        let body = self.provider.body(&request, &self.model)?;
        let wire = strip_model_prefix(P::NAME, &request.model, &self.model);
        let url = self.provider.endpoint(&self.config.base_url, wire);
        let key = self.config.api_key.as_ref().map(ApiKey::expose);
        post_stream(
            &self.client,
            &self.config,
            url,
            self.provider.headers(key),
            body,
            self.provider.normalizer_for(&request),
            std::time::SystemTime::now,
        )
        .await
    }
}

/// A [`crate::model::Model`] that prints with `Debug` (what [`HttpClient`] holds).
#[cfg(feature = "http")]
trait DebugModel: crate::model::Model + fmt::Debug {}
#[cfg(feature = "http")]
impl<T: crate::model::Model + fmt::Debug> DebugModel for T {}

/// The client [`build_model`] returns: one type over every provider's [`HttpModel`].
#[cfg(feature = "http")]
#[derive(Clone, Debug)]
struct HttpClient(std::sync::Arc<dyn DebugModel>);

#[cfg(feature = "http")]
#[async_trait::async_trait]
impl crate::model::Model for HttpClient {
    fn name(&self) -> String {
        self.0.name()
    }

    async fn stream(&self, request: ModelRequest) -> Result<crate::model::DeltaStream, ModelError> {
        self.0.stream(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_from_the_environment_is_trimmed_and_kept_private() {
        let env = |name: &str| (name == "OPENAI_API_KEY").then(|| " sk-test-0123 ".to_string());
        let cfg = HttpConfig::from_lookup(ProviderKind::OpenAi, env);
        assert_eq!(cfg.secrets(), ["sk-test-0123"]);
        assert!(!format!("{cfg:?}").contains("0123"));
        assert!(!cfg.without_api_key().has_api_key());
    }

    #[test]
    #[cfg(feature = "openai")]
    fn reasoning_models_take_max_completion_tokens() {
        use crate::provider::openai_responses::is_reasoning_model;
        for m in [
            "o1",
            "o3-mini",
            "o4-mini-2025-04-16",
            "gpt-5",
            "gpt-5-mini",
            "gpt-5.1",
            "gpt-5.1-codex-mini",
            "openai/o3",
        ] {
            assert!(is_reasoning_model(m), "{m}");
        }
        for m in ["gpt-4o", "gpt-4.1-mini", "o1x", "llama3", "gpt-50", ""] {
            assert!(!is_reasoning_model(m), "{m}");
        }
    }

    #[test]
    fn the_wire_model_drops_the_clients_own_prefix_only() {
        let k = ProviderKind::OpenAi;
        assert_eq!(wire_model(k, "openai:gpt-4o", "d"), "gpt-4o");
        assert_eq!(wire_model(k, "gpt-4o", "d"), "gpt-4o");
        assert_eq!(wire_model(k, "", "d"), "d");
        assert_eq!(wire_model(k, "openai:", "d"), "d");
        assert_eq!(wire_model(k, "openaix:m", "d"), "openaix:m");
        assert_eq!(wire_model(k, "llama3:8b", "d"), "llama3:8b");
        assert_eq!(
            wire_model(ProviderKind::Anthropic, "anthropic:claude-x", "d"),
            "claude-x"
        );
    }

    #[test]
    fn tls_roots_are_loaded_for_https_and_for_plain_http_only_behind_a_proxy() {
        let cfg = |url: &str| HttpConfig::new(ProviderKind::OpenAi).with_base_url(url.to_string());
        assert!(cfg("https://api.openai.com/v1").needs_roots());
        assert!(cfg("HTTPS://example.com").needs_roots());
        let proxied = ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
            .iter()
            .any(|v| std::env::var_os(v).is_some());
        assert_eq!(cfg("http://127.0.0.1:8080/v1").needs_roots(), proxied);
        assert_eq!(cfg("HTTP://localhost").needs_roots(), proxied);
    }

    #[test]
    fn with_base_url_sets_only_the_base_url_without_a_trailing_slash() {
        let before = HttpConfig::new(ProviderKind::Anthropic).with_max_deltas(7);
        let after = before.clone().with_base_url("http://127.0.0.1:9/v1/");
        assert_eq!(after.base_url, "http://127.0.0.1:9/v1");
        assert_eq!(after.provider, ProviderKind::Anthropic);
        assert_eq!(after.limits.max_deltas, 7);
    }
}
