//! Traces (R-TRACE): recording indexes every record, JSON Lines round-trip, every reader
//! error with its position, replay of an unmodified trace, and the first divergence of a
//! tampered one with its diff.

use agentloop_core::message::FinishReason;
use agentloop_core::trace::{
    replay, Trace, TraceError, TraceHeader, TraceRecord, OLDEST_TRACE_VERSION, TRACE_VERSION,
};
use agentloop_core::{
    AttemptId, Effect, Event, Message, MessageDelta, Run, RunConfig, Step, Usage,
};

fn header() -> TraceHeader {
    TraceHeader {
        version: TRACE_VERSION,
        agentloop: "test".into(),
        session: "s1".into(),
        timeouts: None,
        config: RunConfig::default(),
        tools: Default::default(),
    }
}

/// A one-step run answering "hi", recorded.
fn recorded() -> (Trace, Vec<Step>) {
    let mut run = Run::new(RunConfig::default());
    let mut trace = Trace::new(header());
    let mut steps = Vec::new();
    let start = Event::Start {
        run_id: "r1".into(),
        history: vec![],
        input: vec![Message::user("hi")],
        session_turns: 0,
    };
    let step = run.handle(start.clone());
    let attempt = step
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::CallModel { request } => Some(AttemptId {
                run_id: request.run_id.clone(),
                model_call_index: request.model_call_index,
                attempt: request.attempt,
            }),
            _ => None,
        })
        .expect("the run calls the model");
    trace.record(&start, &step);
    steps.push(step);
    let mut events = vec![Event::StreamOpened {
        attempt: attempt.clone(),
    }];
    for (seq, delta) in [
        MessageDelta::TextDelta {
            text: "hello".into(),
        },
        MessageDelta::FinishStep {
            finish_reason: Some(FinishReason::Stop),
            raw_finish_reason: None,
            usage: Some(Usage::default()),
        },
        MessageDelta::Finish,
    ]
    .into_iter()
    .enumerate()
    {
        events.push(Event::Delta {
            attempt: attempt.clone(),
            seq: seq as u64,
            delta,
        });
    }
    events.push(Event::done(attempt));
    for e in events {
        let step = run.handle(e.clone());
        trace.record(&e, &step);
        steps.push(step);
    }
    (trace, steps)
}

#[test]
fn r_trace_1_records_are_indexed_input_then_transitions_then_effects() {
    let (trace, steps) = recorded();
    let expected: usize = steps
        .iter()
        .map(|s| 1 + s.transitions.len() + s.effects.len())
        .sum();
    assert_eq!(trace.records.len(), expected);
    for (i, r) in trace.records.iter().enumerate() {
        assert_eq!(r.index(), Some(i as u64));
    }
    let first = &steps[0];
    assert!(
        matches!(trace.records[0], TraceRecord::Input { ref event, .. } if event.name() == "start")
    );
    for (k, t) in first.transitions.iter().enumerate() {
        assert_eq!(
            trace.records[1 + k],
            TraceRecord::Transition {
                index: 1 + k as u64,
                transition: t.clone()
            }
        );
    }
    let n = first.transitions.len();
    for (k, e) in first.effects.iter().enumerate() {
        assert_eq!(
            trace.records[1 + n + k],
            TraceRecord::Effect {
                index: (1 + n + k) as u64,
                effect: e.clone()
            }
        );
    }
    assert_eq!(TraceRecord::Header(Box::new(header())).index(), None);
}

#[test]
fn r_trace_2_jsonl_round_trips_and_replays_without_divergence() {
    let (trace, _) = recorded();
    let text = trace.to_jsonl();
    assert_eq!(text.lines().count(), 1 + trace.records.len());
    assert!(text.ends_with('\n'));
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["kind"], "header");
    assert_eq!(first["session"], "s1");
    let back = Trace::parse(&text, "t.jsonl").expect("parses");
    assert_eq!(back, trace);
    assert_eq!(replay(&back), None);
    // Blank lines are skipped.
    let spaced = text.replace('\n', "\n\n");
    assert_eq!(Trace::parse(&spaced, "t.jsonl").unwrap(), trace);
}

#[test]
fn r_trace_2_replay_reports_the_first_divergence() {
    let (trace, _) = recorded();
    let at = trace
        .records
        .iter()
        .position(|r| matches!(r, TraceRecord::Effect { .. }))
        .unwrap();
    let mut tampered = trace.clone();
    let original = tampered.records[at].clone();
    let fake = TraceRecord::Effect {
        index: at as u64,
        effect: Effect::CancelTimer { timer_id: 4242 },
    };
    tampered.records[at] = fake.clone();
    let d = replay(&tampered).expect("diverges");
    assert_eq!(d.index, at as u64);
    assert_eq!(d.recorded, Some(fake));
    assert_eq!(d.replayed, Some(original));
    let diff = d.diff();
    assert!(diff.contains("--- recorded"), "{diff}");
    assert!(diff.contains("+++ replayed"), "{diff}");
    assert!(diff.contains("-    \"timer_id\": 4242"), "{diff}");
    // A missing record at the end: replay produced more.
    let mut short = trace.clone();
    let last = short.records.pop().unwrap();
    let d = replay(&short).expect("diverges");
    assert_eq!(d.index, short.records.len() as u64);
    assert_eq!(d.recorded, None);
    assert_eq!(d.replayed, Some(last));
    assert!(d.diff().contains("-<none>"), "{}", d.diff());
}

fn jsonl_lines() -> Vec<String> {
    recorded()
        .0
        .to_jsonl()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn r_trace_4_reader_errors_name_the_position() {
    let lines = jsonl_lines();
    // Not JSON, on line 3 (1-based, blank lines counted).
    let text = format!("{}\n\n{{oops\n", lines[0]);
    match Trace::parse(&text, "f") {
        Err(TraceError::Parse {
            path, line, column, ..
        }) => {
            assert_eq!((path.as_str(), line, column), ("f", 3, 2));
        }
        other => panic!("{other:?}"),
    }
    let err = Trace::parse(&text, "f").unwrap_err().to_string();
    assert!(err.starts_with("f:3:2: invalid trace record: "), "{err}");
    // A record out of order.
    let text = format!("{}\n{}\n", lines[0], lines[2]);
    match Trace::parse(&text, "f") {
        Err(TraceError::Index {
            line,
            found,
            expected,
            ..
        }) => assert_eq!((line, found, expected), (2, 1, 0)),
        other => panic!("{other:?}"),
    }
    // A second header.
    let text = format!("{}\n{}\n{}\n", lines[0], lines[1], lines[0]);
    match Trace::parse(&text, "f") {
        Err(TraceError::Parse {
            line,
            column,
            message,
            ..
        }) => assert_eq!(
            (line, column, message.as_str()),
            (3, 1, "a second header record")
        ),
        other => panic!("{other:?}"),
    }
    // A body line that is JSON but not a record.
    let text = format!("{}\n{{\"kind\":\"input\"}}\n", lines[0]);
    assert!(matches!(
        Trace::parse(&text, "f"),
        Err(TraceError::Parse { line: 2, .. })
    ));
}

#[test]
fn r_trace_4_a_trace_starts_with_a_supported_header() {
    let lines = jsonl_lines();
    // No header at all.
    assert!(matches!(
        Trace::parse(&lines[1..].join("\n"), "f"),
        Err(TraceError::NoHeader { .. })
    ));
    assert!(matches!(
        Trace::parse("", "f"),
        Err(TraceError::NoHeader { .. })
    ));
    assert!(matches!(
        Trace::parse("\n  \n", "f"),
        Err(TraceError::NoHeader { .. })
    ));
    // Another version.
    let mut h: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    h["version"] = serde_json::json!(TRACE_VERSION + 1);
    let err = Trace::parse(&h.to_string(), "f").unwrap_err();
    assert!(
        matches!(err, TraceError::Version { found, .. } if found == u64::from(TRACE_VERSION) + 1)
    );
    assert_eq!(
        err.to_string(),
        format!(
            "f:1: unsupported trace version {} (this build reads versions 3 to {TRACE_VERSION})",
            TRACE_VERSION + 1
        )
    );
    // Versions before the oldest one read are refused too.
    h["version"] = serde_json::json!(OLDEST_TRACE_VERSION - 1);
    assert!(matches!(
        Trace::parse(&h.to_string(), "f"),
        Err(TraceError::Version { found: 2, .. })
    ));
    // The oldest version read still loads.
    h["version"] = serde_json::json!(OLDEST_TRACE_VERSION);
    assert!(Trace::parse(&h.to_string(), "f").is_ok());
    // A header alone is a valid, empty trace.
    let t = Trace::parse(&lines[0], "f").unwrap();
    assert_eq!(t.header, header());
    assert!(t.records.is_empty());
}

#[test]
fn r_trace_4_an_unreadable_line_is_an_io_error() {
    let lines = jsonl_lines();
    let src: Vec<Result<String, String>> = vec![Ok(lines[0].clone()), Err("disk gone".into())];
    match Trace::from_lines(src, "f") {
        Err(TraceError::Io { path, message }) => {
            assert_eq!((path.as_str(), message.as_str()), ("f", "disk gone"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn r_trace_4_the_schema_describes_the_record_kinds() {
    let schema = Trace::schema().to_string();
    for kind in ["header", "input", "transition", "effect"] {
        assert!(schema.contains(&format!("\"{kind}\"")), "{kind}");
    }
}
