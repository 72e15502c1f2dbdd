//! Inline tags through the inner machine: `<status>…</status>` and
//! `<title>…</title>` in the streamed text become `status_update` / `title_generated` events;
//! with the default `inline_tags: strip` they leave the `text_delta` events, the partial
//! snapshot (R-STR-2) and the committed message; `keep` leaves the text as written; `off`
//! looks for no tags; a retry starts a fresh filter; a configuration without the field (an old
//! trace) reads as `off`.

use std::collections::BTreeSet;

use agentloop_core::entry::Entry;
use agentloop_core::error::{ErrorKind, ModelError};
use agentloop_core::process::{InlineTags, Process, StepConfig};
use agentloop_core::{AgentEvent, AttemptId, Effect, Event, Message, MessageDelta, ModelRequest};

fn request() -> ModelRequest {
    ModelRequest {
        run_id: "r1".into(),
        model_call_index: 1,
        attempt: 1,
        session_turn: 0,
        model: "m".into(),
        system: None,
        messages: vec![Message::user("What is 2+3?")].into(),
        tools: Default::default(),
        params: Default::default(),
    }
}

fn attempt(n: u32) -> AttemptId {
    AttemptId {
        run_id: "r1".into(),
        model_call_index: 1,
        attempt: n,
    }
}

fn process(mode: InlineTags) -> Process {
    let cfg = StepConfig {
        inline_tags: mode,
        ..StepConfig::default()
    };
    let mut p = Process::new(cfg, request(), BTreeSet::new());
    let _ = p.begin();
    p
}

/// What observers of the text saw, in order.
#[derive(Debug, PartialEq)]
enum Seen {
    Text(String),
    Status(String),
    Title(String),
    Plan(Vec<String>),
}

fn seen(effects: &[Effect]) -> Vec<Seen> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Emit {
                event: AgentEvent::TextDelta { text, .. },
            } => Some(Seen::Text(text.clone())),
            Effect::Emit {
                event: AgentEvent::StatusUpdate { text, .. },
            } => Some(Seen::Status(text.clone())),
            Effect::Emit {
                event: AgentEvent::TitleGenerated { title, .. },
            } => Some(Seen::Title(title.clone())),
            Effect::Emit {
                event: AgentEvent::PlanGenerated { steps, .. },
            } => Some(Seen::Plan(steps.clone())),
            _ => None,
        })
        .collect()
}

/// Streams `chunks` as text deltas on attempt `n` and ends it with `done`: what observers saw
/// (with the partial snapshot checked against the text deltas after every delta) and the
/// `done` step's effects.
fn stream(p: &mut Process, n: u32, chunks: &[&str]) -> (Vec<Seen>, Vec<Effect>) {
    let _ = p.handle(&Event::StreamOpened {
        attempt: attempt(n),
    });
    let mut all = Vec::new();
    let mut shown = String::new();
    let mut snapshot = p.partial();
    for (seq, chunk) in chunks.iter().enumerate() {
        let step = p.handle(&Event::Delta {
            attempt: attempt(n),
            seq: seq as u64,
            delta: MessageDelta::TextDelta {
                text: (*chunk).into(),
            },
        });
        for s in seen(&step.effects) {
            if let Seen::Text(t) = &s {
                shown.push_str(t);
            }
            all.push(s);
        }
        // R-STR-2: the snapshot shows what the text deltas showed, no more.
        assert_eq!(p.partial().text, shown);
        p.update_partial(&mut snapshot);
        assert_eq!(snapshot, p.partial());
    }
    let done = p.handle(&Event::done(attempt(n)));
    all.extend(seen(&done.effects));
    (all, done.effects)
}

fn committed_text(effects: &[Effect]) -> (String, String) {
    let persisted = effects
        .iter()
        .find_map(|e| match e {
            Effect::Persist {
                entry: Entry::Assistant { message, .. },
            } => Some(message.text.clone()),
            _ => None,
        })
        .expect("the message is persisted");
    let announced = effects
        .iter()
        .find_map(|e| match e {
            Effect::Emit {
                event: AgentEvent::ResponseComplete { message, .. },
            } => Some(message.text.clone()),
            _ => None,
        })
        .expect("response_complete");
    (persisted, announced)
}

/// Tags split across deltas (`<sta` + `tus>Rea` + `ding</status>`)
/// become `status_update` and `title_generated` when they close; the text deltas, the
/// snapshot and the committed message hold the visible text only.
#[test]
fn issue_13_tags_become_events_and_leave_the_committed_text() {
    let mut p = process(InlineTags::default());
    let (seen, done) = stream(
        &mut p,
        1,
        &[
            "<sta",
            "tus>Rea",
            "ding</status>The sum",
            " is 5.<ti",
            "tle>Sum</title>",
        ],
    );
    assert_eq!(
        seen,
        [
            Seen::Status("Reading".into()),
            Seen::Text("The sum".into()),
            Seen::Text(" is 5.".into()),
            Seen::Title("Sum".into()),
        ]
    );
    let (persisted, announced) = committed_text(&done);
    assert_eq!(persisted, "The sum is 5.");
    assert_eq!(announced, "The sum is 5.");
    assert_eq!(p.committed().expect("committed").text, "The sum is 5.");
}

/// Text held back at the end (a `<` that might have opened a tag, an
/// unclosed tag) is released when the message is committed: a `text_delta` before
/// `response_complete`, and in the committed text. Nothing is lost.
#[test]
fn issue_13_held_back_text_is_released_at_the_commit() {
    let mut p = process(InlineTags::Strip);
    let (seen, done) = stream(&mut p, 1, &["a < b, <b>c</b> <status>Read", "ing"]);
    assert_eq!(
        seen,
        [
            Seen::Text("a < b, <b>c</b> ".into()),
            Seen::Text("<status>Reading".into()),
        ]
    );
    let released = done.iter().position(|e| {
        matches!(
            e,
            Effect::Emit {
                event: AgentEvent::TextDelta { .. }
            }
        )
    });
    let complete = done.iter().position(|e| {
        matches!(
            e,
            Effect::Emit {
                event: AgentEvent::ResponseComplete { .. }
            }
        )
    });
    assert!(released < complete, "{done:?}");
    let (persisted, _) = committed_text(&done);
    assert_eq!(persisted, "a < b, <b>c</b> <status>Reading");
}

/// With `keep`, the tags are reported and the text stays as written.
#[test]
fn issue_13_keep_reports_the_tags_and_leaves_the_text() {
    let mut p = process(InlineTags::Keep);
    let (seen, done) = stream(&mut p, 1, &["<sta", "tus>Reading</status>Hi"]);
    assert_eq!(
        seen,
        [
            Seen::Text("<sta".into()),
            Seen::Text("tus>Reading</status>Hi".into()),
            Seen::Status("Reading".into()),
        ]
    );
    assert_eq!(committed_text(&done).0, "<status>Reading</status>Hi");
}

/// With `off`, no tag is looked for: the deltas pass as they came.
#[test]
fn issue_13_off_looks_for_no_tags() {
    let mut p = process(InlineTags::Off);
    let (seen, done) = stream(&mut p, 1, &["<title>T</title>", "x<"]);
    assert_eq!(
        seen,
        [
            Seen::Text("<title>T</title>".into()),
            Seen::Text("x<".into())
        ]
    );
    assert_eq!(committed_text(&done).0, "<title>T</title>x<");
}

/// R-IN-6: a retry starts a fresh filter, so a tag opened in the
/// failed attempt is not closed by the next one, and nothing held back from the failed
/// attempt reaches the committed message.
#[test]
fn issue_13_a_retry_starts_a_fresh_filter() {
    let mut p = process(InlineTags::Strip);
    let _ = p.handle(&Event::StreamOpened {
        attempt: attempt(1),
    });
    let s = p.handle(&Event::Delta {
        attempt: attempt(1),
        seq: 0,
        delta: MessageDelta::TextDelta {
            text: "ok <status>Rea".into(),
        },
    });
    assert_eq!(seen(&s.effects), [Seen::Text("ok ".into())]);
    let s = p.handle(&Event::TransportError {
        attempt: attempt(1),
        error: ModelError::new(ErrorKind::Overloaded, "busy"),
    });
    let timer_id = s
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::StartTimer { timer_id, .. } => Some(*timer_id),
            _ => None,
        })
        .expect("a backoff timer");
    assert!(
        seen(&s.effects).is_empty(),
        "the failed attempt releases nothing"
    );
    let _ = p.handle(&Event::TimerElapsed { timer_id });
    let (seen, done) = stream(&mut p, 2, &["ding</status>fine"]);
    assert_eq!(seen, [Seen::Text("ding</status>fine".into())]);
    assert_eq!(committed_text(&done).0, "ding</status>fine");
}

/// The default is `strip`, serialized in a trace's configuration; a
/// configuration without the field (written before it existed) reads as `off`, so old traces
/// replay as recorded; `off` is not written.
#[test]
fn issue_13_the_option_defaults_to_strip_and_old_configurations_read_as_off() {
    let cfg = StepConfig::default();
    assert_eq!(cfg.inline_tags, InlineTags::Strip);
    let json = serde_json::to_value(&cfg).expect("serializes");
    assert_eq!(json["inline_tags"], "strip");
    let mut old = json.clone();
    old.as_object_mut()
        .expect("an object")
        .remove("inline_tags");
    let read: StepConfig = serde_json::from_value(old.clone()).expect("an old config loads");
    assert_eq!(read.inline_tags, InlineTags::Off);
    assert_eq!(serde_json::to_value(&read).expect("serializes"), old);
    let keep: StepConfig = serde_json::from_value(serde_json::json!({
        "retry": json["retry"], "parallel_tools": true, "approval": {}, "inline_tags": "keep"
    }))
    .expect("loads");
    assert_eq!(keep.inline_tags, InlineTags::Keep);
}

/// A what-if replay can change the option (`--set inline_tags=strip`
/// shows what stripping would have made of a trace recorded without it).
#[test]
fn issue_13_what_if_sets_the_option() {
    use agentloop_trace_tools::whatif::apply_setting;
    let mut cfg = agentloop_core::RunConfig::default();
    for (value, mode) in [
        ("off", InlineTags::Off),
        ("keep", InlineTags::Keep),
        ("strip", InlineTags::Strip),
    ] {
        apply_setting(&mut cfg, "inline_tags", value).expect("a known value");
        assert_eq!(cfg.step.inline_tags, mode);
    }
    assert!(apply_setting(&mut cfg, "inline_tags", "drop").is_err());
}

/// A `<plan>` tag split across deltas becomes one
/// `plan_generated` with its steps (list markers dropped, blank lines skipped) when it closes,
/// and leaves the committed text.
#[test]
fn issue_13_a_plan_tag_becomes_plan_generated_with_its_steps() {
    let mut p = process(InlineTags::default());
    let (seen, done) = stream(
        &mut p,
        1,
        &[
            "On it.<pl",
            "an>\n1. Read the file\n",
            "- Sum the numbers\n\n  2) Answer</pl",
            "an> Done.",
        ],
    );
    assert_eq!(
        seen,
        [
            Seen::Text("On it.".into()),
            Seen::Plan(vec![
                "Read the file".into(),
                "Sum the numbers".into(),
                "Answer".into()
            ]),
            Seen::Text(" Done.".into()),
        ]
    );
    let (persisted, announced) = committed_text(&done);
    assert_eq!(persisted, "On it. Done.");
    assert_eq!(announced, persisted);
}

/// A plan longer than its bound is given up and stays text (nothing is lost); a status body
/// keeps its shorter bound.
#[test]
fn issue_13_a_plan_has_its_own_bound() {
    use agentloop_core::inline_tags::{TagKind, MAX_PLAN_BODY_CHARS, MAX_TAG_BODY_CHARS};
    assert_eq!(TagKind::Plan.max_body_chars(), MAX_PLAN_BODY_CHARS);
    assert_eq!(TagKind::Status.max_body_chars(), MAX_TAG_BODY_CHARS);
    let long_step = "x".repeat(1_000);
    let fits = format!("<plan>{long_step}</plan>");
    let mut p = process(InlineTags::default());
    let (seen, _) = stream(&mut p, 1, &[&fits]);
    assert_eq!(seen, [Seen::Plan(vec![long_step.clone()])]);
    let too_long = format!("<plan>{}</plan>", "y".repeat(MAX_PLAN_BODY_CHARS + 1));
    let mut p = process(InlineTags::default());
    let (seen, done) = stream(&mut p, 1, &[&too_long]);
    assert!(seen.iter().all(|s| matches!(s, Seen::Text(_))), "{seen:?}");
    assert_eq!(committed_text(&done).0, too_long);
}

/// In a `<plan>`, a number marks a list item only with its `.` or `)`; a line that
/// merely starts with one of them keeps it.
#[test]
fn issue_13_plan_lines_starting_with_a_dot_or_parenthesis_keep_it() {
    use agentloop_core::inline_tags::plan_steps;
    assert_eq!(
        plan_steps(".env stays hidden\n) closes\n- .gitignore\n3. ) odd"),
        [".env stays hidden", ") closes", ".gitignore", ") odd"]
    );
}
