//! The records of a session file: encoding one entry as a line (bounded by the store's entry
//! size limit), decoding one line, and scanning a whole file line by line with bounded memory.
//!
//! The format is described in [`file`](super::file). The scan reads through a `BufRead` and
//! never holds more than one line (at most the limit) besides the decoded entries: a line
//! longer than the limit is [`StoreError::LineTooLong`] as soon as the limit is passed,
//! without reading the rest of it.

// The line scan is the file store's; a build with only SQL stores uses the record rule alone.
#![cfg_attr(not(feature = "file"), allow(dead_code))]

use std::io::{BufRead, Write};
use std::path::Path;

use memchr::memchr;
use serde::Serialize;

use super::{Entry, StoreError};

/// The record format version this build writes and reads.
pub const RECORD_VERSION: u32 = 1;

/// The default limit on one record line (without its newline): 16 MiB. Entries are bounded
/// when written and lines when read, so one oversized entry can neither be stored nor make a
/// load take memory out of proportion (see [`FileStore::with_max_entry_bytes`]).
///
/// [`FileStore::with_max_entry_bytes`]: super::FileStore::with_max_entry_bytes
pub const DEFAULT_MAX_ENTRY_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Serialize)]
struct RecordRef<'a> {
    v: u32,
    seq: u64,
    #[serde(flatten)]
    entry: &'a Entry,
}

/// A writer that keeps at most `limit` bytes and counts the rest, so encoding an oversized
/// entry learns its size without holding it.
struct Bounded {
    buf: Vec<u8>,
    limit: u64,
    total: u64,
}

impl Write for Bounded {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.total += bytes.len() as u64;
        if self.total <= self.limit {
            self.buf.extend_from_slice(bytes);
        } else if !self.buf.is_empty() {
            self.buf = Vec::new();
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Encodes one record line (with its trailing `\n`), whatever its size (export).
pub(crate) fn encode_record(seq: u64, entry: &Entry) -> Result<Vec<u8>, StoreError> {
    encode_bounded(seq, entry, u64::MAX, "")
}

/// Encodes one record line (with its trailing `\n`) of `session` whose JSON is at most
/// `limit` bytes; a larger one is [`StoreError::EntryTooLarge`] (and none of it is kept).
pub(crate) fn encode_bounded(
    seq: u64,
    entry: &Entry,
    limit: u64,
    session: &str,
) -> Result<Vec<u8>, StoreError> {
    let mut out = Bounded {
        buf: Vec::new(),
        limit,
        total: 0,
    };
    let record = RecordRef {
        v: RECORD_VERSION,
        seq,
        entry,
    };
    serde_json::to_writer(&mut out, &record)
        .map_err(|e| StoreError::Other(format!("cannot encode entry: {e}")))?;
    if out.total > limit {
        return Err(StoreError::EntryTooLarge {
            session: session.to_string(),
            bytes: out.total,
            limit,
        });
    }
    out.buf.push(b'\n');
    Ok(out.buf)
}

enum RecordError {
    /// Not JSON at all (a torn write when it is the last line).
    Syntax(String),
    /// JSON, but an unknown version.
    Version(String),
    /// JSON of the right version, but not a valid record.
    Schema(String),
}

fn decode_record(line: &[u8]) -> Result<(u64, Entry), RecordError> {
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| RecordError::Syntax(e.to_string()))?;
    let serde_json::Value::Object(mut map) = value else {
        return Err(RecordError::Schema("record is not a JSON object".into()));
    };
    match map.remove("v") {
        Some(v) if v.as_u64() == Some(u64::from(RECORD_VERSION)) => {}
        Some(v) => return Err(RecordError::Version(v.to_string())),
        None => return Err(RecordError::Version("null".into())),
    }
    let seq = map
        .remove("seq")
        .and_then(|s| s.as_u64())
        .ok_or_else(|| RecordError::Schema("missing or non-integer `seq`".into()))?;
    let entry = serde_json::from_value::<Entry>(serde_json::Value::Object(map))
        .map_err(|e| RecordError::Schema(format!("invalid entry: {e}")))?;
    Ok((seq, entry))
}

/// What one stored record (a file line, a database row) holds, given the `seq` it must have
/// and whether it is the last one: the file and SQL stores judge records by this one rule.
// Short-lived (one per record, consumed at once): boxing the entry would only add an
// allocation per record.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Verdict {
    /// A valid record with the expected `seq`.
    Entry(Entry),
    /// The last record does not parse: a torn write (reported, cut by a lock holder).
    Torn(String),
    /// Anything else wrong (a bad record before the last, a `seq` gap, an invalid entry).
    Corrupt(String),
    /// A record of another format version (never skipped).
    Version(String),
}

/// Judges one record (without its newline) that must carry `seq == expected`.
pub(crate) fn judge_record(line: &[u8], expected: u64, is_last: bool) -> Verdict {
    match decode_record(line) {
        Ok((seq, _)) if seq != expected => Verdict::Corrupt(format!(
            "expected seq {expected}, found {seq} (lost or reordered records)"
        )),
        Ok((_, entry)) => Verdict::Entry(entry),
        Err(RecordError::Syntax(e)) if is_last => {
            Verdict::Torn(format!("last record does not parse ({e})"))
        }
        Err(RecordError::Syntax(e)) => Verdict::Corrupt(format!("not JSON: {e}")),
        Err(RecordError::Schema(e)) => Verdict::Corrupt(e),
        Err(RecordError::Version(version)) => Verdict::Version(version),
    }
}

/// A torn last record.
#[derive(Debug)]
pub(crate) struct Torn {
    /// Where it starts.
    pub(crate) offset: u64,
    /// Its length in bytes (with its newline, if it has one).
    pub(crate) len: u64,
    /// What is wrong with it.
    pub(crate) why: String,
}

/// What a scan found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// Every complete record's entry, in order.
    pub(crate) entries: Vec<Entry>,
    /// A torn last record.
    pub(crate) torn: Option<Torn>,
    /// Bytes of the complete records (where a torn record starts, or the file's length).
    pub(crate) complete_len: u64,
}

/// How one bounded line read ended.
enum Line {
    /// A line and its newline were read (the newline is not in the buffer).
    Complete,
    /// End of input: the buffer holds a last line without newline (or nothing).
    End,
    /// The line passed the limit; the rest of it was not read.
    TooLong,
}

/// Reads one line into `buf` (cleared first), reading at most `limit` bytes of it.
fn read_line_bounded(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    limit: u64,
) -> std::io::Result<Line> {
    buf.clear();
    loop {
        let available = match reader.fill_buf() {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(Line::End);
        }
        let (take, complete) = match memchr(b'\n', available) {
            Some(i) => (i, true),
            None => (available.len(), false),
        };
        if (buf.len() + take) as u64 > limit {
            return Ok(Line::TooLong);
        }
        buf.extend_from_slice(&available[..take]);
        reader.consume(take + usize::from(complete));
        if complete {
            return Ok(Line::Complete);
        }
    }
}

/// Parses a session file line by line, holding at most one line of at most `limit` bytes.
/// Every complete record is returned; a torn last record is described in `torn`; anything
/// else wrong is an error naming the byte offset (and the line, for an over-long one).
pub(crate) fn scan(path: &Path, mut reader: impl BufRead, limit: u64) -> Result<Scan, StoreError> {
    let mut out = Scan::default();
    let mut line = Vec::new();
    let mut line_number = 0u64;
    let corrupt = |offset: u64, detail: String| StoreError::Corrupt {
        path: path.display().to_string(),
        offset,
        detail,
    };
    let io = |source| StoreError::Io {
        path: path.display().to_string(),
        source,
    };
    loop {
        let offset = out.complete_len;
        line_number += 1;
        match read_line_bounded(&mut reader, &mut line, limit).map_err(io)? {
            Line::TooLong => {
                return Err(StoreError::LineTooLong {
                    path: path.display().to_string(),
                    line: line_number,
                    offset,
                    limit,
                })
            }
            Line::End if line.is_empty() => break,
            Line::End => {
                out.torn = Some(Torn {
                    offset,
                    len: line.len() as u64,
                    why: "last record has no terminating newline".into(),
                });
                break;
            }
            Line::Complete => {}
        }
        let is_last = reader.fill_buf().map_err(io)?.is_empty();
        let expected = out.entries.len() as u64 + 1;
        match judge_record(&line, expected, is_last) {
            Verdict::Entry(entry) => out.entries.push(entry),
            Verdict::Torn(why) => {
                out.torn = Some(Torn {
                    offset,
                    len: line.len() as u64 + 1,
                    why,
                });
                break;
            }
            Verdict::Corrupt(detail) => return Err(corrupt(offset, detail)),
            Verdict::Version(version) => {
                return Err(StoreError::UnsupportedVersion {
                    path: path.display().to_string(),
                    offset,
                    version,
                    supported: RECORD_VERSION,
                })
            }
        }
        out.complete_len += line.len() as u64 + 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_end(n: u32) -> Entry {
        Entry::RunEnd {
            run_id: format!("r{n}"),
            outcome: agentloop_core::agent_event::Outcome::Completed,
            reason: String::new(),
        }
    }

    fn scan_bytes(bytes: &[u8]) -> Result<Scan, StoreError> {
        scan(Path::new("s.jsonl"), bytes, DEFAULT_MAX_ENTRY_BYTES)
    }

    #[test]
    fn record_round_trips_and_has_version_first() {
        let line = encode_record(7, &run_end(1)).unwrap();
        let text = String::from_utf8(line.clone()).unwrap();
        assert!(
            text.starts_with(r#"{"v":1,"seq":7,"entry":"run_end""#),
            "{text}"
        );
        assert!(text.ends_with('\n'));
        let (seq, entry) = match decode_record(&line[..line.len() - 1]) {
            Ok(x) => x,
            Err(_) => panic!("decode failed"),
        };
        assert_eq!((seq, entry), (7, run_end(1)));
    }

    #[test]
    fn bounded_encoding_refuses_one_byte_over_the_limit() {
        let line = encode_record(7, &run_end(1)).unwrap();
        let json_len = line.len() as u64 - 1;
        assert_eq!(encode_bounded(7, &run_end(1), json_len, "s").unwrap(), line);
        match encode_bounded(7, &run_end(1), json_len - 1, "s") {
            Err(StoreError::EntryTooLarge {
                session,
                bytes,
                limit,
            }) => assert_eq!(
                (session.as_str(), bytes, limit),
                ("s", json_len, json_len - 1)
            ),
            other => panic!("expected EntryTooLarge, got {other:?}"),
        }
    }

    #[test]
    fn a_line_at_the_limit_is_read_and_one_byte_more_is_too_long() {
        let line = encode_record(1, &run_end(1)).unwrap();
        let json_len = line.len() as u64 - 1;
        let ok = scan(Path::new("s.jsonl"), &line[..], json_len).unwrap();
        assert_eq!((ok.entries.len(), ok.complete_len), (1, line.len() as u64));
        let mut two = line.clone();
        two.extend(encode_record(2, &run_end(10)).unwrap());
        match scan(Path::new("s.jsonl"), &two[..], json_len) {
            Err(StoreError::LineTooLong {
                line: 2, offset, ..
            }) => assert_eq!(offset, line.len() as u64),
            other => panic!("expected LineTooLong, got {other:?}"),
        }
        // A torn tail over the limit is too long as well (it cannot be told from a record).
        let mut torn = line.clone();
        torn.extend(vec![b'x'; json_len as usize + 1]);
        assert!(matches!(
            scan(Path::new("s.jsonl"), &torn[..], json_len),
            Err(StoreError::LineTooLong { line: 2, .. })
        ));
    }

    #[test]
    fn scan_rejects_seq_gap() {
        let mut bytes = encode_record(1, &run_end(1)).unwrap();
        bytes.extend(encode_record(3, &run_end(2)).unwrap());
        let first_len = encode_record(1, &run_end(1)).unwrap().len() as u64;
        match scan_bytes(&bytes) {
            Err(StoreError::Corrupt { offset, detail, .. }) => {
                assert_eq!(offset, first_len);
                assert!(detail.contains("expected seq 2"), "{detail}");
            }
            other => panic!("expected corrupt, got {other:?}"),
        }
    }

    proptest::proptest! {
        #[test]
        fn scan_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = scan_bytes(&bytes);
        }

        #[test]
        fn scan_survives_flipped_bytes(pos in 0usize..400, byte in proptest::prelude::any::<u8>()) {
            let mut bytes = Vec::new();
            for n in 1..=4 {
                bytes.extend(encode_record(u64::from(n), &run_end(n)).unwrap());
            }
            let pos = pos % bytes.len();
            bytes[pos] = byte;
            // Ok (possibly with a torn tail) or a typed error; never a panic, and an Ok
            // never returns more entries than were written.
            if let Ok(scan) = scan_bytes(&bytes) {
                proptest::prop_assert!(scan.entries.len() <= 4);
            }
        }

        /// A bounded scan of a chunked reader agrees with the unbounded scan of the bytes.
        #[test]
        fn scan_is_independent_of_read_boundaries(cap in 1usize..64) {
            let mut bytes = Vec::new();
            for n in 1..=4 {
                bytes.extend(encode_record(u64::from(n), &run_end(n)).unwrap());
            }
            bytes.extend_from_slice(b"{\"v\":1,\"se");
            let reader = std::io::BufReader::with_capacity(cap, &bytes[..]);
            let chunked = scan(Path::new("s.jsonl"), reader, DEFAULT_MAX_ENTRY_BYTES).unwrap();
            let whole = scan_bytes(&bytes).unwrap();
            proptest::prop_assert_eq!(chunked.entries, whole.entries);
            proptest::prop_assert_eq!(chunked.complete_len, whole.complete_len);
            proptest::prop_assert_eq!(chunked.torn.map(|t| (t.offset, t.len)), whole.torn.map(|t| (t.offset, t.len)));
        }
    }

    #[test]
    fn scan_garbage_never_panics() {
        let inputs: [&[u8]; 6] = [
            b"\n",
            b"\xff\xfe\n{",
            b"[]\n",
            b"{\"v\":1}\n",
            b"{\"v\":1,\"seq\":1,\"entry\":\"nope\"}\n",
            b"\0\0\0\0",
        ];
        for input in inputs {
            let _ = scan_bytes(input);
        }
    }
}
