//! Shared helpers of the provider tests: fixtures, read splits, line-ending rewrites, and the
//! loopback server ([`server`]).
#![allow(dead_code)]

pub mod server;

use std::path::PathBuf;

use agentloop::model::{ModelParams, ModelRequest, ToolChoice};
use agentloop::provider::decode::normalize_chunks;
use agentloop::provider::http::ProviderKind;
use agentloop::tools::ToolSpec;
use agentloop::Message;
use agentloop::MessageDelta;
use proptest::prelude::*;
use serde_json::json;

/// The fixture directory.
pub fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sse")
}

/// A recorded SSE body.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = fixture_dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// All fixtures of a provider (`openai_*.sse` / `anthropic_*.sse`).
pub fn fixtures(prefix: &str) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(fixture_dir())
        .expect("fixture dir")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            (name.starts_with(prefix) && name.ends_with(".sse")).then_some(name)
        })
        .map(|n| {
            let b = fixture(&n);
            (n, b)
        })
        .collect();
    out.sort();
    out
}

/// Splits `bytes` at the given cut points (sorted, clamped; a repeated point makes an empty
/// read, which is a legal read too).
pub fn split_at_points(bytes: &[u8], points: &[usize]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = points.iter().map(|p| p % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut last = 0;
    for c in cuts {
        out.push(bytes[last..c].to_vec());
        last = c;
    }
    out.push(bytes[last..].to_vec());
    out
}

/// Deltas of `bytes` read in pieces cut at `points`.
pub fn deltas_split(p: ProviderKind, bytes: &[u8], points: &[usize]) -> Vec<MessageDelta> {
    let pieces = split_at_points(bytes, points);
    normalize_chunks(p, pieces.iter().map(Vec::as_slice))
}

/// Deltas of `bytes` read in one piece.
pub fn deltas_whole(p: ProviderKind, bytes: &[u8]) -> Vec<MessageDelta> {
    normalize_chunks(p, [bytes])
}

/// Deltas of `bytes` read one byte at a time.
pub fn deltas_bytewise(p: ProviderKind, bytes: &[u8]) -> Vec<MessageDelta> {
    normalize_chunks(p, bytes.chunks(1))
}

/// Rewrites LF line endings to CRLF.
pub fn to_crlf(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for &b in bytes {
        if b == b'\n' {
            out.extend_from_slice(b"\r\n");
        } else {
            out.push(b);
        }
    }
    out
}

/// Rewrites LF line endings to lone CR.
pub fn to_cr(bytes: &[u8]) -> Vec<u8> {
    bytes
        .iter()
        .map(|&b| if b == b'\n' { b'\r' } else { b })
        .collect()
}

/// A strategy for up to `max` cut points.
pub fn cut_points(max: usize) -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(any::<usize>(), 0..max)
}

/// The text of all text deltas.
pub fn text_of(deltas: &[MessageDelta]) -> String {
    deltas
        .iter()
        .filter_map(|d| match d {
            MessageDelta::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// A one-message request offering `calc` (or no tool) with `params`.
pub fn tool_choice_request(tools: bool, params: ModelParams) -> ModelRequest {
    ModelRequest {
        run_id: "r".into(),
        model_call_index: 1,
        attempt: 1,
        session_turn: 0,
        model: "m".into(),
        system: None,
        messages: vec![Message::user("2+2?")].into(),
        tools: if tools {
            vec![ToolSpec {
                name: "calc".into(),
                description: "evaluates".into(),
                parameters: json!({"type": "object"}),
            }]
            .into()
        } else {
            Default::default()
        },
        params,
    }
}

/// Model parameters with only `tool_choice` set.
pub fn with_choice(choice: Option<ToolChoice>) -> ModelParams {
    ModelParams {
        tool_choice: choice,
        ..ModelParams::default()
    }
}
