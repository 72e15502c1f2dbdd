//! Replays every seed of the provider fuzz corpora (`fuzz/corpus/{sse,openai,anthropic,openai_responses}`)
//! through the same harnesses the cargo-fuzz targets run, on stable, as ordinary tests.

use std::path::PathBuf;

use agentloop::provider::fuzz::{normalizer_target, sse_target};
use agentloop::provider::http::ProviderKind;

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let path = e.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path.display().to_string(), bytes)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus {}", dir.display());
    files
}

#[test]
fn sse_corpus() {
    for (name, data) in corpus("sse") {
        let r = std::panic::catch_unwind(|| sse_target(&data));
        assert!(r.is_ok(), "{name}");
    }
}

#[test]
fn openai_corpus() {
    for (name, data) in corpus("openai") {
        let r = std::panic::catch_unwind(|| normalizer_target(ProviderKind::OpenAi, &data));
        assert!(r.is_ok(), "{name}");
    }
}

#[test]
fn anthropic_corpus() {
    for (name, data) in corpus("anthropic") {
        let r = std::panic::catch_unwind(|| normalizer_target(ProviderKind::Anthropic, &data));
        assert!(r.is_ok(), "{name}");
    }
}

#[test]
fn openai_responses_corpus() {
    for (name, data) in corpus("openai_responses") {
        let r =
            std::panic::catch_unwind(|| normalizer_target(ProviderKind::OpenAiResponses, &data));
        assert!(r.is_ok(), "{name}");
    }
}

#[test]
fn harnesses_accept_degenerate_inputs() {
    for data in [
        &b""[..],
        b"\x00",
        b"\x0f",
        b"\xff\xff\xff",
        b"\x02\x00\x00data: [DONE]\n\n",
    ] {
        sse_target(data);
        normalizer_target(ProviderKind::OpenAi, data);
        normalizer_target(ProviderKind::Anthropic, data);
        normalizer_target(ProviderKind::OpenAiResponses, data);
    }
}
