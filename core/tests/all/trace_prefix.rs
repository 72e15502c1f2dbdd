//! Version-7 traces grow with the run: a `call_model` record holds only the messages added
//! since the previous request and the length of the prefix it shares with it; the reader
//! rebuilds each request in full, replay streams, and the reader's limits are typed errors.

use agentloop_core::react::DeciderRegistry;
use agentloop_core::trace::{
    replay, replay_reader, Limit, RecordReader, Trace, TraceError, TraceLimits, TRACE_VERSION,
};
use agentloop_trace_tools::import::{openai_chat, ImportOptions};
use serde_json::{json, Value};

/// A chat-completions recording of `calls` tool calls, each result `pad` bytes.
fn conversation(calls: usize, pad: usize) -> Value {
    let mut m = vec![json!({"role": "user", "content": "go"})];
    for i in 0..calls {
        m.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{i}"), "type": "function",
             "function": {"name": "calc", "arguments": "{}"}}]}));
        m.push(json!({"role": "tool", "tool_call_id": format!("c{i}"),
                      "content": format!("{i}{}", "r".repeat(pad))}));
    }
    m.push(json!({"role": "assistant", "content": "done"}));
    Value::Array(m)
}

fn imported(calls: usize, pad: usize) -> (Trace, usize) {
    let recording = conversation(calls, pad);
    let trace = openai_chat(&recording, &ImportOptions::default())
        .expect("import")
        .trace;
    (trace, recording.to_string().len())
}

fn lines(text: &str) -> impl Iterator<Item = Result<&str, std::convert::Infallible>> {
    text.lines().map(Ok)
}

#[test]
fn r_trace_1_a_trace_grows_linearly_and_reads_back_whole() {
    let (trace, input) = imported(200, 2_000);
    assert_eq!(trace.header.version, TRACE_VERSION);
    let text = trace.to_jsonl();
    assert!(
        text.len() < 10 * input,
        "{input} bytes of conversation, {} of trace",
        text.len()
    );
    // Every request after the first references its predecessor's messages.
    let prefixed = text.lines().filter(|l| l.contains("\"prefix\":")).count();
    assert_eq!(prefixed, 200, "one per request after the first");
    // Read back, each request is whole again, and the trace replays.
    let back = Trace::parse(&text, "t").expect("parses");
    assert_eq!(back, trace);
    assert_eq!(replay(&back), None);
    let reader = RecordReader::open(lines(&text), "t", 7, TraceLimits::DEFAULT).expect("open");
    let streamed = replay_reader(reader, &DeciderRegistry::new()).expect("replays");
    assert_eq!(streamed.divergence, None);
    assert_eq!(streamed.records, trace.records.len() as u64);
}

#[test]
fn r_trace_2_a_streamed_replay_reports_the_divergence_the_whole_one_does() {
    let (trace, _) = imported(5, 10);
    let text = trace.to_jsonl().replacen("4rrrrrrrrrr", "4rrrrrrrrrX", 1);
    let whole = replay(&Trace::parse(&text, "t").expect("parses")).expect("diverges");
    let reader = RecordReader::open(lines(&text), "t", 7, TraceLimits::DEFAULT).expect("open");
    let streamed = replay_reader(reader, &DeciderRegistry::new()).expect("replays");
    assert_eq!(streamed.divergence, Some(whole));
    // Cut the trace: the replay has more records than the recording.
    let full = trace.to_jsonl();
    let cut = full.lines().take(40).collect::<Vec<_>>().join("\n");
    let whole = replay(&Trace::parse(&cut, "t").expect("parses"));
    let reader = RecordReader::open(lines(&cut), "t", 7, TraceLimits::DEFAULT).expect("open");
    let streamed = replay_reader(reader, &DeciderRegistry::new()).expect("replays");
    assert!(whole.is_some());
    assert_eq!(streamed.divergence, whole);
}

#[test]
fn r_trace_4_a_bad_prefix_is_a_parse_error() {
    let (trace, _) = imported(3, 10);
    let text = trace.to_jsonl();
    // Longer than the previous request.
    let bad = text.replacen("\"prefix\":", "\"prefix\":9", 1);
    assert!(matches!(
        Trace::parse(&bad, "t"),
        Err(TraceError::Parse { message, .. }) if message.contains("longer than the previous")
    ));
    // In a version that has no prefixes.
    let old = text.replacen("\"version\":7", "\"version\":6", 1);
    assert!(matches!(
        Trace::parse(&old, "t"),
        Err(TraceError::Parse { message, .. }) if message.contains("version 6")
    ));
    // The schema names the field.
    let schema = Trace::schema().to_string();
    assert!(schema.contains("\"prefix\""), "{schema}");
}

#[test]
fn r_trace_4_each_limit_is_a_typed_error_naming_the_line() {
    let (trace, _) = imported(20, 100);
    let text = trace.to_jsonl();
    let held = |limits| Trace::read_limited(lines(&text), "t", 7, limits);
    assert!(held(TraceLimits::DEFAULT).is_ok());
    let too_large = |r: Result<Trace, TraceError>| match r {
        Err(TraceError::TooLarge {
            limit_name, line, ..
        }) => Some((limit_name, line)),
        _ => None,
    };
    let file = TraceLimits {
        file_bytes: text.len() as u64 / 2,
        ..TraceLimits::DEFAULT
    };
    assert!(matches!(too_large(held(file)), Some((Limit::File, l)) if l > 1));
    let line = TraceLimits {
        line_bytes: 100,
        ..TraceLimits::DEFAULT
    };
    assert_eq!(too_large(held(line)), Some((Limit::Line, 1)));
    // The loaded limit counts each request whole: more than the file's bytes.
    let loaded = TraceLimits {
        loaded_bytes: text.len() as u64 + 100,
        ..TraceLimits::DEFAULT
    };
    assert!(matches!(too_large(held(loaded)), Some((Limit::Loaded, _))));
    // A streaming replay does not hold the records: the loaded limit does not apply.
    let reader = RecordReader::open(lines(&text), "t", 7, loaded).expect("open");
    let streamed = replay_reader(reader, &DeciderRegistry::new()).expect("replays");
    assert_eq!(streamed.divergence, None);
    assert_eq!(
        TraceLimits::from_vars(|k| (k == "AGENTLOOP_TRACE_MAX_LINE_BYTES").then(|| "5".into())),
        Ok(TraceLimits {
            line_bytes: 5,
            ..TraceLimits::DEFAULT
        })
    );
    assert!(TraceLimits::from_vars(|_| Some("lots".into())).is_err());
}
