//! Server-sent events decoding: bytes in any split → the same [`SseEvent`]s.
//!
//! A small incremental decoder for the `text/event-stream` format of the WHATWG HTML standard
//! ("Parsing an event stream"). It is pure (no IO, no clock): feed it the body's reads with
//! [`SseDecoder::feed`], then call [`SseDecoder::finish`] at end of file.
//!
//! Guarantees, all property-tested in `tests/provider_sse.rs`:
//! - identical events for every split of the byte stream into reads;
//! - LF, CRLF and lone CR line endings, also mixed, also with the CR and the LF of one CRLF
//!   in different reads (the CR is held until the next byte says what it was);
//! - comment lines (`: keep-alive`) are ignored;
//! - `data:` lines accumulate with `\n` between them; one leading space after the colon is
//!   removed, `data:x` keeps `x`; a field line without a colon is a field with an empty value;
//! - `event:`, `id:` (ignored when it contains NUL; the last id persists across events, as in
//!   the standard) and `retry:` (digits only) fields; unknown fields are ignored;
//! - a UTF-8 byte-order mark at the very start is skipped; bytes are decoded as UTF-8 per
//!   complete line, so a character split across reads is never mangled (invalid UTF-8 becomes
//!   U+FFFD, as the standard says);
//! - a blank line with an empty data buffer dispatches nothing (`event: x` alone is dropped);
//! - at end of file an unterminated event is discarded, and [`SseEof`] says that it happened so
//!   the caller can report an incomplete stream precisely.
//!
//! Why not a crate: `eventsource-stream` 0.2.3 (the common choice, used by `reqwest-eventsource`)
//! was checked against this list and returns no events at all for a stream that uses lone-CR
//! line endings (`data: A\rdata: B\r\r`); it is also an async `Stream` adapter, while the
//! providers, the `decode` command, the fuzz targets and the benchmark all want one pure,
//! synchronous, incremental decoder. The decoder below is ~200 lines, scans with `memchr`,
//! and copies a line only when it straddles two reads.

use std::fmt;

use crate::error::{ErrorKind, ModelError};
use crate::message::MessageDelta;
use crate::provider::limits::{ResponseLimits, ResponseMeter};

/// Default upper bound of one event's size (data plus the current line), in bytes.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 64 * 1024 * 1024;

/// One dispatched server-sent event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if the event had one (the standard's default type is `message`).
    pub event: Option<String>,
    /// The data lines joined with `\n`.
    pub data: String,
    /// The last event id seen so far in the stream (it persists across events).
    pub id: Option<String>,
    /// A `retry:` value (milliseconds) seen inside this event's block.
    pub retry: Option<u64>,
}

impl SseEvent {
    /// The event type: the `event:` field, or `message` when there was none.
    pub fn event_type(&self) -> &str {
        self.event.as_deref().unwrap_or("message")
    }
}

/// What [`SseDecoder::finish`] found at end of file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SseEof {
    /// The stream ended on an event boundary (or only comments/blank lines were pending).
    Clean,
    /// The stream ended inside an event; that partial event was discarded.
    MidEvent,
}

/// A decoding failure. The decoder is bounded: a line or event larger than its limit is an
/// error instead of unbounded memory growth.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    /// One event (its data plus the line being read) exceeded the decoder's limit.
    #[error("server-sent event larger than {limit} bytes")]
    EventTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
}

/// The incremental decoder. See the module docs for its guarantees.
#[derive(Clone)]
pub struct SseDecoder {
    /// Bytes of a line that started in an earlier read and has not ended yet.
    line: Vec<u8>,
    /// The previous read ended with CR: a leading LF of the next read belongs to it.
    pending_cr: bool,
    /// Still looking at the first bytes of the stream (BOM check).
    at_start: bool,
    /// Data buffer of the event being read (with a trailing `\n` per data line).
    data: String,
    /// Whether any data line was seen for the current event.
    has_data: bool,
    /// `event:` of the current event.
    event: Option<String>,
    /// A cleared buffer for the next `event:` value.
    spare_event: Option<String>,
    /// `retry:` of the current event.
    retry: Option<u64>,
    /// The last event id.
    last_id: Option<String>,
    /// Whether a field line arrived since the last dispatch.
    in_event: bool,
    max_event_bytes: usize,
    failed: bool,
}

impl fmt::Debug for SseDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SseDecoder")
            .field("buffered_line_bytes", &self.line.len())
            .field("buffered_data_bytes", &self.data.len())
            .field("in_event", &self.in_event)
            .finish_non_exhaustive()
    }
}

impl Default for SseDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl SseDecoder {
    /// A decoder with the default event size limit ([`DEFAULT_MAX_EVENT_BYTES`]).
    pub fn new() -> Self {
        Self::with_max_event_bytes(DEFAULT_MAX_EVENT_BYTES)
    }

    /// A decoder that fails with [`SseError::EventTooLarge`] beyond `limit` bytes per event.
    pub fn with_max_event_bytes(limit: usize) -> Self {
        SseDecoder {
            line: Vec::new(),
            pending_cr: false,
            at_start: true,
            data: String::new(),
            has_data: false,
            event: None,
            spare_event: None,
            retry: None,
            last_id: None,
            in_event: false,
            max_event_bytes: limit,
            failed: false,
        }
    }

    /// Decodes one read and returns the events it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut out = Vec::new();
        self.feed_into(chunk, &mut out)?;
        Ok(out)
    }

    /// Decodes one read, appending completed events to `out`.
    pub fn feed_into(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        self.feed_each(chunk, |ev| out.push(ev.clone()))
    }

    /// Decodes one read and hands each completed event to `f`, by reference. This is the
    /// allocation-free path: the event's buffers are reused for the next event.
    pub fn feed_each(
        &mut self,
        chunk: &[u8],
        mut f: impl FnMut(&SseEvent),
    ) -> Result<(), SseError> {
        let out = &mut f;
        if self.failed {
            return Err(SseError::EventTooLarge {
                limit: self.max_event_bytes,
            });
        }
        let mut rest = chunk;
        if self.at_start {
            // Skip a UTF-8 BOM, which may itself be split across reads.
            const BOM: &[u8] = b"\xEF\xBB\xBF";
            let have = self.line.len();
            let take = rest.len().min(BOM.len() - have);
            if BOM[have..have + take] == rest[..take] {
                if have + take == BOM.len() {
                    self.line.clear();
                    self.at_start = false;
                } else {
                    self.line.extend_from_slice(&rest[..take]);
                    return Ok(());
                }
                rest = &rest[take..];
            } else {
                // Not a BOM: what was held back is ordinary line content.
                self.at_start = false;
            }
        }
        // An empty read says nothing about the held CR: keep it pending.
        if self.pending_cr && !rest.is_empty() {
            self.pending_cr = false;
            if let Some((&b'\n', tail)) = rest.split_first() {
                rest = tail;
            }
        }
        while !rest.is_empty() {
            match memchr::memchr2(b'\n', b'\r', rest) {
                Some(pos) => {
                    let is_cr = rest[pos] == b'\r';
                    if self.line.is_empty() {
                        self.process_line(&rest[..pos], out)?;
                    } else {
                        let mut line = std::mem::take(&mut self.line);
                        line.extend_from_slice(&rest[..pos]);
                        self.check_size(line.len())?;
                        let r = self.process_line(&line, out);
                        line.clear();
                        self.line = line;
                        r?;
                    }
                    rest = &rest[pos + 1..];
                    if is_cr {
                        match rest.first() {
                            Some(b'\n') => rest = &rest[1..],
                            Some(_) => {}
                            None => self.pending_cr = true,
                        }
                    }
                }
                None => {
                    self.check_size(self.line.len() + rest.len())?;
                    self.line.extend_from_slice(rest);
                    rest = &[];
                }
            }
        }
        Ok(())
    }

    /// Ends the stream: a partial event is discarded (as the standard says) and reported.
    /// The decoder is reset and may be reused for a new stream.
    pub fn finish(&mut self) -> SseEof {
        // An unterminated last line counts unless it is a comment.
        let partial_line = !self.line.is_empty() && self.line[0] != b':';
        let mid = self.in_event || partial_line;
        *self = Self::with_max_event_bytes(self.max_event_bytes);
        if mid {
            SseEof::MidEvent
        } else {
            SseEof::Clean
        }
    }

    fn check_size(&mut self, line_len: usize) -> Result<(), SseError> {
        if line_len.saturating_add(self.data.len()) > self.max_event_bytes {
            self.failed = true;
            return Err(SseError::EventTooLarge {
                limit: self.max_event_bytes,
            });
        }
        Ok(())
    }

    fn process_line(
        &mut self,
        line: &[u8],
        out: &mut impl FnMut(&SseEvent),
    ) -> Result<(), SseError> {
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        self.in_event = true;
        let (name, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let v = &line[colon + 1..];
                (&line[..colon], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &line[line.len()..]),
        };
        match name {
            b"data" => {
                self.check_size(value.len() + 1)?;
                push_utf8(&mut self.data, value);
                self.data.push('\n');
                self.has_data = true;
            }
            b"event" => {
                let mut name = self
                    .event
                    .take()
                    .or_else(|| self.spare_event.take())
                    .unwrap_or_default();
                name.clear();
                push_utf8(&mut name, value);
                self.event = Some(name);
            }
            b"id" if !value.contains(&0) => {
                self.last_id = Some(String::from_utf8_lossy(value).into_owned());
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // Absurdly long digit strings saturate instead of failing.
                let ms = value.iter().fold(0u64, |acc, d| {
                    acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
                });
                self.retry = Some(ms);
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut impl FnMut(&SseEvent)) {
        self.in_event = false;
        let event = self.event.take();
        let retry = self.retry.take();
        if !self.has_data {
            self.data.clear();
            self.recycle_event_name(event);
            return;
        }
        self.has_data = false;
        let mut data = std::mem::take(&mut self.data);
        data.pop(); // the trailing '\n'
        let ev = SseEvent {
            event,
            data,
            id: self.last_id.clone(),
            retry,
        };
        out(&ev);
        // Keep both buffers' capacity for the next event.
        let SseEvent {
            event, mut data, ..
        } = ev;
        data.clear();
        self.data = data;
        self.recycle_event_name(event);
    }

    fn recycle_event_name(&mut self, name: Option<String>) {
        if let Some(mut name) = name {
            name.clear();
            self.spare_event = Some(name);
        }
    }
}

fn push_utf8(dst: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => dst.push_str(s),
        Err(_) => dst.push_str(&String::from_utf8_lossy(bytes)),
    }
}

/// Decodes a whole body at once (convenience for tests and the `decode` command).
pub fn decode_all(body: &[u8]) -> Result<(Vec<SseEvent>, SseEof), SseError> {
    let mut dec = SseDecoder::new();
    let events = dec.feed(body)?;
    Ok((events, dec.finish()))
}

/// A provider's stream normalizer: wire events in, [`MessageDelta`]s out (R-STR-1). Pure and
/// incremental. After it has returned a [`MessageDelta::Error`] or [`MessageDelta::Finish`]
/// it returns nothing more.
pub trait SseNormalizer {
    /// Normalizes one event, appending its deltas to `out`.
    fn feed_into(&mut self, event: &SseEvent, out: &mut Vec<MessageDelta>);
    /// Normalizes one event.
    fn feed(&mut self, event: &SseEvent) -> Vec<MessageDelta> {
        let mut out = Vec::new();
        self.feed_into(event, &mut out);
        out
    }
    /// End of the body: the closing deltas when terminal evidence was seen, else an
    /// `incomplete_stream` error.
    fn finish(&mut self, eof: SseEof) -> Vec<MessageDelta>;
    /// Takes the response's bounds, for what the normalizer itself holds (Anthropic's block
    /// table, OpenAI's tool-call arguments before the name arrives). The pipeline counts the
    /// deltas against the same bounds; the default does nothing.
    fn set_limits(&mut self, limits: &ResponseLimits) {
        let _ = limits;
    }
}

/// A boxed normalizer (the registry's, for `decode`) is one.
impl<N: SseNormalizer + ?Sized> SseNormalizer for Box<N> {
    fn feed_into(&mut self, event: &SseEvent, out: &mut Vec<MessageDelta>) {
        (**self).feed_into(event, out);
    }
    fn finish(&mut self, eof: SseEof) -> Vec<MessageDelta> {
        (**self).finish(eof)
    }
    fn set_limits(&mut self, limits: &ResponseLimits) {
        (**self).set_limits(limits);
    }
}

/// Bytes → events → deltas: an [`SseDecoder`] feeding a normalizer, stopping after the first
/// error or `Finish`. This is the one code path shared by the HTTP clients, `decode`, the
/// tests, the fuzz targets and the benchmark. The deltas are counted against
/// [`ResponseLimits`]: the first one beyond a bound is replaced by a `response_too_large`
/// error, which ends the stream.
#[derive(Debug)]
pub struct SsePipeline<N> {
    decoder: SseDecoder,
    normalizer: N,
    meter: ResponseMeter,
    ended: bool,
}

impl<N: SseNormalizer> SsePipeline<N> {
    /// A pipeline around `normalizer`, with the default [`ResponseLimits`].
    pub fn new(normalizer: N) -> Self {
        Self::with_limits(normalizer, ResponseLimits::default())
    }

    /// A pipeline around `normalizer`, bounded by `limits`.
    pub fn with_limits(mut normalizer: N, limits: ResponseLimits) -> Self {
        normalizer.set_limits(&limits);
        SsePipeline {
            decoder: SseDecoder::new(),
            normalizer,
            meter: ResponseMeter::new(limits),
            ended: false,
        }
    }

    /// The bounds this pipeline enforces.
    pub fn limits(&self) -> &ResponseLimits {
        self.meter.limits()
    }

    /// Whether an error or `Finish` was produced (nothing more will come).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The normalizer (for inspection).
    pub fn normalizer(&self) -> &N {
        &self.normalizer
    }

    /// Feeds one read, appending the deltas it produced to `out`.
    pub fn feed_into(&mut self, chunk: &[u8], out: &mut Vec<MessageDelta>) {
        if self.ended {
            return;
        }
        let SsePipeline {
            decoder,
            normalizer,
            meter,
            ended,
        } = self;
        let result = decoder.feed_each(chunk, |ev| {
            if *ended {
                return;
            }
            let start = out.len();
            normalizer.feed_into(ev, out);
            if meter.count_new(out, start) || out[start..].iter().any(is_terminal) {
                *ended = true;
            }
        });
        if let Err(e) = result {
            if !*ended {
                *ended = true;
                out.push(MessageDelta::Error {
                    error: ModelError::new(
                        ErrorKind::ResponseTooLarge,
                        format!("response limit exceeded: {e}"),
                    ),
                });
            }
        }
    }

    /// Feeds one read and returns its deltas.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<MessageDelta> {
        let mut out = Vec::new();
        self.feed_into(chunk, &mut out);
        out
    }

    /// End of the body.
    pub fn finish(&mut self) -> Vec<MessageDelta> {
        if self.ended {
            return Vec::new();
        }
        self.ended = true;
        let eof = self.decoder.finish();
        let mut out = self.normalizer.finish(eof);
        self.meter.count_new(&mut out, 0);
        out
    }
}

/// Whether a delta ends the stream (`Finish` or `Error`).
pub fn is_terminal(d: &MessageDelta) -> bool {
    matches!(d, MessageDelta::Finish | MessageDelta::Error { .. })
}
