//! A flood of tiny deltas: a million one-character deltas are well under
//! `max_response_bytes` but cost ~1.4 KB each with a trace (1.47 GB with `--trace`).
//! `ResponseLimits::max_deltas` (default 262,144) ends such a response with a typed
//! `response_too_large` error; and a trace file is written line by line, not built as one
//! string first.

use agentloop::provider::openai::OpenAiNormalizer;
use agentloop::provider::sse::SsePipeline;
use agentloop::provider::ResponseLimits;
use agentloop::trace;
use agentloop::ErrorKind;
use agentloop::MessageDelta;

const ONE_CHAR: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n";

/// Feeds `n` one-character content events (in reads of 1,000 events) and the end of the
/// stream; returns the deltas.
fn flood(limits: ResponseLimits, n: usize) -> Vec<MessageDelta> {
    let mut pipe = SsePipeline::with_limits(OpenAiNormalizer::new(), limits);
    let read = ONE_CHAR.repeat(1_000);
    let mut deltas = Vec::new();
    for _ in 0..n / 1_000 {
        pipe.feed_into(read.as_bytes(), &mut deltas);
    }
    pipe.feed_into(ONE_CHAR.repeat(n % 1_000).as_bytes(), &mut deltas);
    pipe.feed_into(b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n", &mut deltas);
    deltas.extend(pipe.finish());
    deltas
}

fn text_deltas(deltas: &[MessageDelta]) -> usize {
    deltas
        .iter()
        .filter(|d| matches!(d, MessageDelta::TextDelta { .. }))
        .count()
}

#[test]
fn a_million_one_character_deltas_end_at_max_deltas_with_a_typed_error() {
    assert_eq!(ResponseLimits::default().max_deltas, 262_144);
    let deltas = flood(ResponseLimits::default(), 1_000_000);
    assert_eq!(deltas.len(), 262_145, "the bound, then the error");
    let Some(MessageDelta::Error { error }) = deltas.last() else {
        panic!("{:?}", deltas.last())
    };
    assert_eq!(error.kind, ErrorKind::ResponseTooLarge);
    assert!(!error.retryable());
    assert!(
        error
            .message
            .contains("ResponseLimits::max_deltas = 262144"),
        "{error}"
    );
}

#[test]
fn a_response_of_exactly_max_deltas_passes() {
    let limits = ResponseLimits {
        max_deltas: 10,
        ..ResponseLimits::default()
    };
    // start-step + text-start + 6 text deltas + text-end + finish-step = 10 deltas, then
    // `Finish` (not counted).
    let deltas = flood(limits, 6);
    assert_eq!(text_deltas(&deltas), 6, "{deltas:?}");
    assert!(
        !deltas
            .iter()
            .any(|d| matches!(d, MessageDelta::Error { .. })),
        "{deltas:?}"
    );
    assert_eq!(deltas.last(), Some(&MessageDelta::Finish));
    let deltas = flood(limits, 7);
    let Some(MessageDelta::Error { error }) = deltas.last() else {
        panic!("{deltas:?}")
    };
    assert!(error.message.contains("max_deltas = 10"), "{error}");
}

/// The trace file is written record by record; the bytes are exactly `to_jsonl`'s.
#[test]
fn a_trace_file_is_exactly_its_jsonl() {
    let dir = tempfile::tempdir().expect("tempdir");
    for fixture in std::fs::read_dir(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces"),
    )
    .expect("fixtures")
    {
        let path = fixture.expect("entry").path();
        let trace = trace::read(&path).expect("reads");
        let out = dir.path().join("t.jsonl");
        trace::write(&trace, &out).expect("writes");
        let written = std::fs::read_to_string(&out).expect("reads");
        assert_eq!(written, trace.to_jsonl(), "{}", path.display());
        assert_eq!(trace::read(&out).expect("reads back"), trace);
    }
}
