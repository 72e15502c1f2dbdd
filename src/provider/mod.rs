//! Model clients: the offline scripted model, and real providers over HTTP.
//!
//! Real providers, one file per concern:
//! - [`sse`]: the SSE decoder ([`sse::SseDecoder`]) and the bytes → deltas pipeline
//!   ([`sse::SsePipeline`], [`sse::SseNormalizer`]);
//! - [`openai`] / [`anthropic`] / [`openai_responses`]: pure stream normalizers, request
//!   bodies, and the [`crate::model::Model`] clients (`OpenAiModel`, `AnthropicModel`,
//!   `OpenAiResponsesModel`) over reqwest, each behind its feature;
//! - [`classify`]: HTTP status/body/headers, in-stream errors, malformed data and transport
//!   failures → [`crate::error::ModelError`];
//! - [`http`]: [`http::ProviderKind`], [`http::HttpConfig`] (base URL, key from
//!   `OPENAI_API_KEY`/`ANTHROPIC_API_KEY`, base URL from `OPENAI_BASE_URL`/`ANTHROPIC_BASE_URL`,
//!   connect 10 s / first-byte 60 s timeouts) and [`http::build_model`];
//! - [`decode`]: `agentloop decode` ([`decode::decode`] → [`decode::DecodeReport`]) and the
//!   [`decode::MessageAssembler`] that turns deltas into the committed message;
//! - [`limits`]: [`ResponseLimits`], the bounds on one response (size, one tool call's
//!   arguments, content blocks), enforced on every stream;
//! - [`fuzz`]: the harnesses shared by the fuzz targets and the corpus replay test.
//!
//! CLI wiring: `let mut cfg = HttpConfig::from_env(kind); if let Some(u) = base_url { cfg =
//! cfg.with_base_url(u) }; let model = build_model(&model_name, cfg)?;` and for `decode`:
//! `let r = decode(kind, &bytes, http); println!("{}", serde_json::to_string_pretty(&r)?);`
//! plus `serde_json::to_string(&r.deltas)` with `--deltas`.

pub mod anthropic;
pub mod classify;
#[cfg(all(feature = "openai", feature = "anthropic"))]
#[doc(hidden)] // wire decoding internals of the HTTP providers
pub mod decode;
#[cfg(all(feature = "openai", feature = "anthropic"))]
#[doc(hidden)] // fuzz-target entry points (fuzz/, tests/fuzz_corpus_providers.rs)
pub mod fuzz;
pub mod http;
pub mod limits;
pub mod openai;
pub mod openai_responses;
pub mod scripted;
#[doc(hidden)] // the SSE decoder the HTTP providers share
pub mod sse;
#[cfg(any(feature = "http", feature = "mcp"))]
pub(crate) mod tls;

pub use limits::ResponseLimits;
