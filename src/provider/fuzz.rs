//! Fuzz harnesses shared by the cargo-fuzz targets (`fuzz/fuzz_targets/*.rs`) and the stable
//! corpus replay test (`tests/fuzz_corpus_providers.rs`), so both run exactly the same code.
//!
//! Input layout: the first byte `k` says how many cut points follow (`k % 16`); the next `k`
//! bytes are gaps between cuts; the rest is the body. Each harness decodes the body whole and
//! split at those cuts, panics if the results differ or an invariant breaks, and otherwise
//! returns quietly. A panic here is a bug found, never expected behaviour on any input.

use crate::message::MessageDelta;
use crate::provider::decode::{decode, normalize_chunks};
use crate::provider::http::ProviderKind;
use crate::provider::sse::SseDecoder;

/// Splits a fuzz input into (body, read pieces of the body).
pub fn split_input(data: &[u8]) -> (&[u8], Vec<&[u8]>) {
    let Some((&k, rest)) = data.split_first() else {
        return (data, vec![data]);
    };
    let k = usize::from(k % 16).min(rest.len());
    let (gaps, body) = rest.split_at(k);
    let mut pieces = Vec::with_capacity(k + 1);
    let mut at = 0;
    for &g in gaps {
        let end = (at + usize::from(g)).min(body.len());
        pieces.push(&body[at..end]);
        at = end;
    }
    pieces.push(&body[at..]);
    (body, pieces)
}

/// The SSE decoder: whole and split give the same events and end state.
pub fn sse_target(data: &[u8]) {
    let (body, pieces) = split_input(data);
    let mut whole = SseDecoder::new();
    let a = whole.feed(body);
    let a_eof = whole.finish();
    let mut split = SseDecoder::new();
    let mut b = Ok(Vec::new());
    for p in &pieces {
        match (split.feed(p), &mut b) {
            (Ok(evs), Ok(acc)) => acc.extend(evs),
            (Err(e), _) => {
                b = Err(e);
                break;
            }
            (Ok(_), Err(_)) => {}
        }
    }
    let b_eof = split.finish();
    assert_eq!(a, b, "events differ between whole and split reads");
    assert_eq!(
        a_eof, b_eof,
        "end state differs between whole and split reads"
    );
}

/// A provider's pipeline: whole and split give the same deltas, the sequence ends with exactly
/// one terminal delta, tool inputs are balanced on a completed stream, and `decode` builds a
/// serializable report.
pub fn normalizer_target(provider: ProviderKind, data: &[u8]) {
    let (body, pieces) = split_input(data);
    let whole = normalize_chunks(provider, [body]);
    let split = normalize_chunks(provider, pieces.iter().copied());
    assert_eq!(whole, split, "deltas differ between whole and split reads");
    let terminal = whole
        .iter()
        .filter(|d| matches!(d, MessageDelta::Finish | MessageDelta::Error { .. }))
        .count();
    assert_eq!(terminal, 1, "exactly one terminal delta");
    assert!(
        matches!(
            whole.last(),
            Some(MessageDelta::Finish | MessageDelta::Error { .. })
        ),
        "the terminal delta is last"
    );
    if whole.last() == Some(&MessageDelta::Finish) {
        let count = |f: fn(&MessageDelta) -> bool| whole.iter().filter(|d| f(d)).count();
        let starts = count(|d| matches!(d, MessageDelta::ToolInputStart { .. }));
        let ends = count(|d| matches!(d, MessageDelta::ToolInputEnd { .. }));
        let calls = count(|d| matches!(d, MessageDelta::ToolCall { .. }));
        assert_eq!(starts, ends, "every tool input that starts, ends");
        assert_eq!(ends, calls, "every ended tool input is a call");
    }
    let report = decode(provider, body, false);
    assert_eq!(report.deltas, whole);
    let json = serde_json::to_string(&report);
    assert!(json.is_ok(), "the report serializes");
    // The HTTP form must not panic either.
    let _ = decode(provider, body, true);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_input_reads_the_cut_count_the_gaps_and_the_body() {
        // No input: an empty body read in one piece.
        assert_eq!(split_input(&[]), (&b""[..], vec![&b""[..]]));
        // Two cuts, gaps 1 and 3, body "abcde".
        let cut: Vec<&[u8]> = vec![b"a", b"bcd", b"e"];
        assert_eq!(
            split_input(b"\x02\x01\x03abcde"),
            (&b"abcde"[..], cut.clone())
        );
        // The count is taken modulo 16.
        assert_eq!(split_input(b"\x12\x01\x03abcde"), (&b"abcde"[..], cut));
        // No cut: the body whole.
        assert_eq!(split_input(b"\x00xyz"), (&b"xyz"[..], vec![&b"xyz"[..]]));
        // Gaps past the body's end stop at it.
        let (body, pieces) = split_input(b"\x02\x09\x09xy");
        assert_eq!(body, b"xy");
        assert_eq!(pieces, vec![&b"xy"[..], b"", b""]);
        // More cuts than bytes: every byte is a gap, the body is empty.
        let (body, pieces) = split_input(b"\x05\x01\x02");
        assert_eq!(body, b"");
        assert_eq!(pieces, vec![&b""[..], b"", b""]);
    }
}
