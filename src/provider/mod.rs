//! Model clients: the offline scripted model, and real providers over HTTP.
//!
//! Real providers, one file per concern:
//! - `sse` (public with feature `wire`): the SSE decoder and the bytes → deltas pipeline;
//! - [`openai`] / [`anthropic`] / [`openai_responses`]: how each wire format is read and
//!   written (pure stream normalizers and request bodies, public with feature `wire`), and
//!   the [`crate::model::Model`] clients over reqwest, each behind its feature, made by
//!   [`http::build_model`];
//! - `classify` (public with feature `wire`): HTTP status/body/headers, in-stream errors,
//!   malformed data and transport failures → [`crate::ModelError`];
//! - [`http`]: [`http::ProviderKind`], [`http::HttpConfig`] (base URL, key from
//!   `OPENAI_API_KEY`/`ANTHROPIC_API_KEY`, base URL from `OPENAI_BASE_URL`/`ANTHROPIC_BASE_URL`,
//!   connect 10 s / first-byte 60 s timeouts) and [`http::build_model`];
//! - `decode` (feature `wire`): `agentloop decode`'s offline decoding of a captured stream;
//! - `normalize`: what the stream normalizers share (progress, typed errors, text runs, tool
//!   call deltas);
//! - `request`: what the request encoders share (merged turns, tool arguments, the tools
//!   offered);
//! - [`limits`]: the bounds on one response (size, one tool call's arguments, content
//!   blocks), set on [`http::HttpConfig`] and enforced on every stream;
//! - `fuzz` (feature `fuzzing`): the harnesses shared by the fuzz targets and the corpus
//!   replay test.
//!
//! CLI wiring: `let mut cfg = HttpConfig::from_env(kind); if let Some(u) = base_url { cfg =
//! cfg.with_base_url(u) }; let model = build_model(&model_name, cfg)?;` and for `decode`:
//! `let r = decode(kind, &bytes, http); println!("{}", serde_json::to_string_pretty(&r)?);`
//! plus `serde_json::to_string(&r.deltas)` with `--deltas`.
//!
//! # Example
//!
//! The offline scripted model from a JSON script (the format `agentloop run --script` reads):
//!
//! ```
//! use agentloop::provider::scripted::ScriptedModel;
//!
//! let model = ScriptedModel::from_json_str(r#"{"turns": [{"text": "hello"}]}"#, "greeting")?;
//! assert_eq!(model.turns(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// Without an HTTP provider (nor `wire`) the stream normalizers and the error classification
// have no caller.
#![cfg_attr(not(any(feature = "http", feature = "wire")), allow(dead_code))]

pub mod anthropic;
// The wire layer (SSE framing, error classification, offline decoding of captured streams) is
// public only with feature `wire`: fuzz targets, benchmarks and the CLI's `agentloop decode`
// use it; an agent program never names it.
#[cfg(feature = "wire")]
pub mod classify;
#[cfg(not(feature = "wire"))]
#[allow(unreachable_pub)]
pub(crate) mod classify;
#[cfg(all(feature = "wire", feature = "openai", feature = "anthropic"))]
pub mod decode;
#[cfg(all(feature = "fuzzing", feature = "openai", feature = "anthropic"))]
pub mod fuzz;
pub mod gemini;
pub mod http;
pub mod limits;
pub(crate) mod normalize;
pub mod openai;
pub mod openai_responses;
pub(crate) mod request;
pub mod scripted;
#[cfg(feature = "wire")]
pub mod sse;
#[cfg(not(feature = "wire"))]
#[allow(unreachable_pub, dead_code)] // parts only `decode` and the tests use
pub(crate) mod sse;
#[cfg(test)]
mod test_support;
#[cfg(any(feature = "http", feature = "mcp"))]
pub(crate) mod tls;

#[cfg(feature = "wire")]
pub use limits::ResponseLimits;
