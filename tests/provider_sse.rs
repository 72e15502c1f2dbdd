//! The SSE decoder: every quirk of the event-stream format, and identical results for every
//! split of the byte stream (checked against a straightforward transcription of the standard).

use agentloop::provider::sse::{decode_all, SseDecoder, SseEof, SseError, SseEvent};
use proptest::prelude::*;

fn ev(event: Option<&str>, data: &str, id: Option<&str>) -> SseEvent {
    SseEvent {
        event: event.map(str::to_string),
        data: data.to_string(),
        id: id.map(str::to_string),
        retry: None,
    }
}

fn decode_chunks(chunks: &[&[u8]]) -> (Vec<SseEvent>, SseEof) {
    let mut d = SseDecoder::new();
    let mut out = Vec::new();
    for c in chunks {
        out.extend(d.feed(c).expect("no size error"));
    }
    (out, d.finish())
}

fn whole(input: &[u8]) -> (Vec<SseEvent>, SseEof) {
    decode_all(input).expect("no size error")
}

#[test]
fn lf_crlf_and_lone_cr_give_the_same_events() {
    let lf = whole(b"event: a\ndata: 1\ndata: 2\n\ndata: 3\n\n");
    let crlf = whole(b"event: a\r\ndata: 1\r\ndata: 2\r\n\r\ndata: 3\r\n\r\n");
    let cr = whole(b"event: a\rdata: 1\rdata: 2\r\rdata: 3\r\r");
    let mixed = whole(b"event: a\r\ndata: 1\rdata: 2\n\r\ndata: 3\r\n\n");
    let expected = vec![ev(Some("a"), "1\n2", None), ev(None, "3", None)];
    assert_eq!(lf.0, expected);
    assert_eq!(crlf.0, expected);
    assert_eq!(cr.0, expected);
    assert_eq!(mixed.0, expected);
    for r in [lf, crlf, cr, mixed] {
        assert_eq!(r.1, SseEof::Clean);
    }
}

#[test]
fn crlf_split_between_reads_is_one_line_ending() {
    // The CR ends one read and the LF starts the next: still one event with three lines.
    let (events, eof) = decode_chunks(&[b"data: A\r\ndata: B\r", b"\ndata: C\r\n", b"\r", b"\n"]);
    assert_eq!(events, vec![ev(None, "A\nB\nC", None)]);
    assert_eq!(eof, SseEof::Clean);
}

#[test]
fn empty_read_between_cr_and_lf_keeps_the_cr_pending() {
    // Found by the split property: an empty read used to forget the held CR.
    let (events, _) = decode_chunks(&[b"data: A\r", b"", b"\ndata: B\n\n"]);
    assert_eq!(events, vec![ev(None, "A\nB", None)]);
}

#[test]
fn lone_cr_at_the_end_of_a_read_followed_by_a_field() {
    let (events, _) = decode_chunks(&[b"data: A\r", b"data: B\r", b"\r"]);
    assert_eq!(events, vec![ev(None, "A\nB", None)]);
}

#[test]
fn comments_are_ignored() {
    let (events, eof) = whole(b": keep-alive\n\n:\ndata: x\n: inside\n\n: trailing");
    assert_eq!(events, vec![ev(None, "x", None)]);
    assert_eq!(
        eof,
        SseEof::Clean,
        "an unterminated comment is not a partial event"
    );
}

#[test]
fn data_without_space_and_with_two_spaces() {
    let (events, _) = whole(b"data:x\n\ndata:  y\n\ndata\n\ndata:\n\n");
    // One leading space is removed, not two; `data` alone and `data:` are empty data lines
    // that *do* dispatch (the data buffer holds "\n", as the standard says).
    assert_eq!(
        events,
        vec![
            ev(None, "x", None),
            ev(None, " y", None),
            ev(None, "", None),
            ev(None, "", None)
        ]
    );
}

#[test]
fn multi_line_data_joins_with_newline() {
    let (events, _) = whole(b"data: {\"a\":\ndata: 1}\n\n");
    assert_eq!(events[0].data, "{\"a\":\n1}");
}

#[test]
fn empty_data_buffer_never_dispatches() {
    let (events, eof) = whole(b"event: lonely\n\nid: 7\n\nretry: 10\n\n\n\n");
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(eof, SseEof::Clean);
    // ...and the event type of a dropped block does not leak into the next event.
    let (events, _) = whole(b"event: lonely\n\ndata: next\n\n");
    assert_eq!(events, vec![ev(None, "next", None)]);
}

#[test]
fn event_id_and_retry_fields() {
    let (events, _) = whole(
        b"id: 1\nevent: ping\nretry: 1500\ndata: a\n\ndata: b\n\nid\ndata: c\n\nid: x\0y\nretry: 12a\ndata: d\n\n",
    );
    assert_eq!(events.len(), 4);
    assert_eq!(events[0].event.as_deref(), Some("ping"));
    assert_eq!(events[0].event_type(), "ping");
    assert_eq!(events[0].id.as_deref(), Some("1"));
    assert_eq!(events[0].retry, Some(1500));
    // The last id persists; the event type does not.
    assert_eq!(events[1].id.as_deref(), Some("1"));
    assert_eq!(events[1].event_type(), "message");
    assert_eq!(events[1].retry, None);
    // `id` with no value resets it to empty; an id with NUL is ignored; bad retry ignored.
    assert_eq!(events[2].id.as_deref(), Some(""));
    assert_eq!(events[3].id.as_deref(), Some(""));
    assert_eq!(events[3].retry, None);
}

#[test]
fn unknown_fields_are_ignored() {
    let (events, _) = whole(b"foo: bar\ndata: x\nDATA: y\n\n");
    assert_eq!(events, vec![ev(None, "x", None)]);
}

#[test]
fn utf8_split_across_reads_is_kept_whole() {
    let text = "data: é😀中\n\n".as_bytes();
    for cut in 0..=text.len() {
        let (events, _) = decode_chunks(&[&text[..cut], &text[cut..]]);
        assert_eq!(events, vec![ev(None, "é😀中", None)], "cut at {cut}");
    }
    let (events, _) = decode_chunks(&text.chunks(1).collect::<Vec<_>>());
    assert_eq!(events[0].data, "é😀中");
}

#[test]
fn invalid_utf8_becomes_replacement_characters() {
    let (events, _) = whole(b"data: a\xffb\n\n");
    assert_eq!(events[0].data, "a\u{fffd}b");
}

#[test]
fn bom_is_skipped_even_when_split() {
    let input = b"\xEF\xBB\xBFdata: x\n\n";
    for cut in 0..=4 {
        let (events, _) = decode_chunks(&[&input[..cut], &input[cut..]]);
        assert_eq!(events, vec![ev(None, "x", None)], "cut at {cut}");
    }
    // Only at the very start.
    let (events, _) = whole(b"data: a\n\n\xEF\xBB\xBFdata: b\n\n");
    assert_eq!(events.len(), 1);
}

#[test]
fn eof_in_the_middle_of_an_event_is_reported_and_discarded() {
    for input in [
        &b"data: a\n\ndata: b"[..],
        b"data: a\n\ndata: b\n",
        b"data: a\n\nevent: x\n",
        b"data: a\n\nda",
    ] {
        let (events, eof) = whole(input);
        assert_eq!(events, vec![ev(None, "a", None)], "{input:?}");
        assert_eq!(eof, SseEof::MidEvent, "{input:?}");
    }
    let (_, eof) = whole(b"data: a\n\n");
    assert_eq!(eof, SseEof::Clean);
    let (_, eof) = whole(b"");
    assert_eq!(eof, SseEof::Clean);
}

#[test]
fn finish_resets_for_a_new_stream() {
    let mut d = SseDecoder::new();
    assert!(d.feed(b"id: 5\ndata: a").unwrap().is_empty());
    assert_eq!(d.finish(), SseEof::MidEvent);
    assert_eq!(d.feed(b"data: b\n\n").unwrap(), vec![ev(None, "b", None)]);
}

#[test]
fn oversized_event_is_an_error_not_unbounded_memory() {
    let mut d = SseDecoder::with_max_event_bytes(16);
    assert!(d.feed(b"data: 0123456789\n").is_ok());
    assert_eq!(
        d.feed(b"data: 0123456789\n"),
        Err(SseError::EventTooLarge { limit: 16 })
    );
    // The error is sticky.
    assert!(d.feed(b"\n").is_err());
    // A line without a terminator is bounded too.
    let mut d = SseDecoder::with_max_event_bytes(16);
    assert!(d.feed(&[b'x'; 10]).is_ok());
    assert!(d.feed(&[b'x'; 10]).is_err());
}

/// The standard's algorithm, transcribed as plainly as possible, for whole inputs.
fn reference(input: &[u8]) -> (Vec<SseEvent>, SseEof) {
    let input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    let mut lines: Vec<&[u8]> = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < input.len() {
        match input[i] {
            b'\r' => {
                lines.push(&input[start..i]);
                if input.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                start = i + 1;
            }
            b'\n' => {
                lines.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    let trailing = &input[start..];
    let (mut data, mut event, mut id, mut retry) = (String::new(), None, None::<String>, None);
    let mut has_data = false;
    let mut in_event = false;
    let mut out = Vec::new();
    for line in lines {
        let line = String::from_utf8_lossy(line);
        if line.is_empty() {
            if has_data {
                data.pop();
                out.push(SseEvent {
                    event: event.take(),
                    data: std::mem::take(&mut data),
                    id: id.clone(),
                    retry: retry.take(),
                });
            }
            (data, event, retry, has_data, in_event) = (String::new(), None, None, false, false);
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        in_event = true;
        let (name, value) = match line.find(':') {
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (&line[..], ""),
        };
        match name {
            "data" => {
                data.push_str(value);
                data.push('\n');
                has_data = true;
            }
            "event" => event = Some(value.to_string()),
            "id" if !value.contains('\0') => id = Some(value.to_string()),
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                retry = value.parse().ok().or(Some(u64::MAX));
            }
            _ => {}
        }
    }
    let mid = in_event || (!trailing.is_empty() && trailing[0] != b':');
    (out, if mid { SseEof::MidEvent } else { SseEof::Clean })
}

/// Byte streams made of the pieces that matter: field names, colons, spaces, every line
/// ending, multi-byte characters, a BOM, NUL, digits.
fn sse_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"data".to_vec()),
        Just(b"data: ".to_vec()),
        Just(b"data:".to_vec()),
        Just(b"event: ".to_vec()),
        Just(b"id: ".to_vec()),
        Just(b"retry: ".to_vec()),
        Just(b":".to_vec()),
        Just(b" ".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\n\n".to_vec()),
        Just(b"x".to_vec()),
        Just(b"12".to_vec()),
        Just(b"\0".to_vec()),
        Just("é😀".as_bytes().to_vec()),
        Just(b"\xEF\xBB\xBF".to_vec()),
        Just(b"\xff".to_vec()),
        Just(b"{\"a\":[1,2]}".to_vec()),
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn any_split_gives_the_reference_result(
        input in sse_bytes(),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let expected = reference(&input);
        prop_assert_eq!(&whole(&input), &expected);
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        points.sort_unstable();
        let mut pieces = Vec::new();
        let mut last = 0;
        for p in points {
            pieces.push(&input[last..p]);
            last = p;
        }
        pieces.push(&input[last..]);
        prop_assert_eq!(&decode_chunks(&pieces), &expected);
        let bytewise: Vec<&[u8]> = input.chunks(1).collect();
        prop_assert_eq!(&decode_chunks(&bytewise), &expected);
    }

    #[test]
    fn arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..512)) {
        let (a, eof_a) = whole(&input);
        let (b, eof_b) = decode_chunks(&input.chunks(3).collect::<Vec<_>>());
        prop_assert_eq!(a, b);
        prop_assert_eq!(eof_a, eof_b);
    }
}

/// The pipeline counts the normalized deltas against `ResponseLimits`; the first
/// delta beyond a bound is replaced by a `response_too_large` error that ends the stream.
#[test]
fn pipeline_stops_at_the_first_delta_beyond_a_response_limit() {
    use agentloop::provider::openai::OpenAiNormalizer;
    use agentloop::provider::sse::SsePipeline;
    use agentloop::provider::ResponseLimits;
    use agentloop::ErrorKind;
    use agentloop::MessageDelta;

    let event = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"0123456789\"}}]}\n\n";
    let limits = ResponseLimits {
        max_response_bytes: 95,
        ..ResponseLimits::default()
    };
    let mut pipe = SsePipeline::with_limits(OpenAiNormalizer::new(), limits);
    assert_eq!(pipe.limits(), &limits);
    let mut deltas = Vec::new();
    for _ in 0..20 {
        deltas.extend(pipe.feed(event.as_bytes()));
    }
    deltas.extend(pipe.finish());
    let text: usize = deltas
        .iter()
        .map(|d| match d {
            MessageDelta::TextDelta { text } => text.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(text, 90, "nine whole deltas; the tenth crossed the bound");
    let Some(MessageDelta::Error { error }) = deltas.last() else {
        panic!("{deltas:?}")
    };
    assert_eq!(error.kind, ErrorKind::ResponseTooLarge);
    assert!(!error.retryable());
    assert!(error.message.contains("max_response_bytes = 95"), "{error}");
    assert!(pipe.ended());
}

/// The pipeline ends at the normalizer's `Finish` (or in-band error): `ended()` says so, and
/// nothing fed after it produces anything.
#[test]
fn pipeline_ends_at_finish_or_an_in_band_error() {
    use agentloop::provider::openai::OpenAiNormalizer;
    use agentloop::provider::sse::SsePipeline;
    use agentloop::MessageDelta;

    let text = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
    let stop = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
    let mut pipe = SsePipeline::new(OpenAiNormalizer::new());
    let deltas = pipe.feed(format!("{text}{stop}").as_bytes());
    assert!(!pipe.ended(), "the finish reason alone waits for [DONE]");
    assert!(!deltas.contains(&MessageDelta::Finish));
    let deltas = pipe.feed(b"data: [DONE]\n\n");
    assert_eq!(deltas.last(), Some(&MessageDelta::Finish));
    assert!(pipe.ended());
    assert!(pipe.feed(text.as_bytes()).is_empty());
    assert!(pipe.finish().is_empty());

    let mut pipe = SsePipeline::new(OpenAiNormalizer::new());
    let error = "data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n";
    let deltas = pipe.feed(format!("{text}{error}").as_bytes());
    assert!(matches!(deltas.last(), Some(MessageDelta::Error { .. })));
    assert!(pipe.ended());
    assert!(pipe.finish().is_empty());
}
