//! Assembling stream deltas into the committed assistant message (R-STR-2, R-STR-4, R-STR-6).

use agentloop_core::inline_tags::{InlinePiece, InlineTags};
use agentloop_core::message::FinishReason;
use agentloop_core::process::accumulate::MessageAssembler;
use agentloop_core::{ErrorKind, MessageDelta, ModelError, Usage};
use serde_json::json;

fn text(t: &str) -> MessageDelta {
    MessageDelta::TextDelta { text: t.into() }
}

fn call(id: &str, name: &str, args: &str) -> MessageDelta {
    MessageDelta::ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.into(),
    }
}

fn finish_step(reason: FinishReason) -> MessageDelta {
    MessageDelta::FinishStep {
        finish_reason: Some(reason),
        raw_finish_reason: Some("raw-reason".into()),
        usage: Some(Usage {
            input_tokens: 7,
            output_tokens: 9,
            ..Default::default()
        }),
    }
}

#[test]
fn r_str_2_every_content_delta_lands_in_the_message() {
    let mut a = MessageAssembler::new();
    assert!(!a.received_any());
    assert!(a.has_no_content());
    for d in [
        MessageDelta::StartStep,
        MessageDelta::TextStart,
        text("Hel"),
        text("lo"),
        MessageDelta::TextEnd,
        MessageDelta::ReasoningStart,
        MessageDelta::ReasoningDelta { text: "th".into() },
        MessageDelta::ReasoningDelta { text: "ink".into() },
        MessageDelta::ReasoningSignature {
            signature: "sig".into(),
        },
        MessageDelta::ReasoningSignature {
            signature: "nature".into(),
        },
        MessageDelta::ReasoningEnd,
        MessageDelta::RedactedReasoning { data: "r1".into() },
        MessageDelta::RedactedReasoning { data: "r2".into() },
        MessageDelta::Refusal { text: "no".into() },
        MessageDelta::Refusal { text: "pe".into() },
        finish_step(FinishReason::Stop),
        MessageDelta::Finish,
    ] {
        a.push(&d);
    }
    let m = a.message();
    assert_eq!(m.text, "Hello");
    assert_eq!(m.reasoning, "think");
    assert_eq!(m.reasoning_signature.as_deref(), Some("signature"));
    assert_eq!(m.redacted_reasoning, ["r1", "r2"]);
    assert_eq!(m.refusal.as_deref(), Some("nope"));
    assert_eq!(m.finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        m.usage.map(|u| (u.input_tokens, u.output_tokens)),
        Some((7, 9))
    );
    assert!(m.tool_calls.is_empty());
    assert_eq!(a.raw_finish_reason(), Some("raw-reason"));
    assert!(a.received_any());
    assert!(a.is_complete());
    assert!(!a.has_no_content());
    assert!(!a.has_tool_calls());
    assert_eq!(a.snapshot(), m);
}

#[test]
fn r_str_4_tool_calls_come_only_from_tool_call_deltas_in_order() {
    let mut a = MessageAssembler::new();
    a.push(&MessageDelta::ToolInputStart {
        id: "c0".into(),
        name: "ignored".into(),
    });
    a.push(&MessageDelta::ToolInputDelta {
        id: "c0".into(),
        delta: "{".into(),
    });
    a.push(&MessageDelta::ToolInputEnd { id: "c0".into() });
    assert!(!a.has_tool_calls(), "input deltas alone make no call");
    assert!(a.has_no_content());
    assert!(a.received_any());
    a.push(&call("c1", "calc", r#"{"x":1}"#));
    a.push(&call("c2", "ls", ""));
    a.push(&call("c3", "calc", "{bad"));
    assert!(a.has_tool_calls());
    assert!(!a.has_no_content());
    assert_eq!(
        a.raw_arguments().collect::<Vec<_>>(),
        [r#"{"x":1}"#, "", "{bad"]
    );
    let m = a.snapshot();
    let ids: Vec<_> = m.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["c1", "c2", "c3"]);
    assert_eq!(m.tool_calls[0].name, "calc");
    assert_eq!(m.tool_calls[0].arguments, json!({"x": 1}));
    assert_eq!(m.tool_calls[1].arguments, json!({}));
    assert!(m.tool_calls[1].invalid_arguments.is_none());
    assert!(m.tool_calls[2].invalid_arguments.is_some());
    assert_eq!(a.message(), m);
}

#[test]
fn r_str_6_a_length_cut_marks_every_call_invalid() {
    let mut a = MessageAssembler::new();
    a.push(&call("c1", "calc", r#"{"x":1}"#));
    a.push(&finish_step(FinishReason::Length));
    let m = a.message();
    assert_eq!(m.tool_calls[0].arguments, serde_json::Value::Null);
    let why = m.tool_calls[0].invalid_arguments.as_deref().unwrap();
    assert!(why.contains("finish_reason length"), "{why}");
    assert!(why.ends_with(r#"{"x":1}"#), "{why}");
    // Any other finish reason keeps the parsed arguments.
    let mut a = MessageAssembler::new();
    a.push(&call("c1", "calc", r#"{"x":1}"#));
    a.push(&finish_step(FinishReason::ToolCalls));
    assert_eq!(a.message().tool_calls[0].arguments, json!({"x": 1}));
    assert_eq!(a.message().tool_calls[0].invalid_arguments, None);
}

#[test]
fn r_str_4_only_a_finish_without_error_completes() {
    let mut a = MessageAssembler::new();
    a.push(&text("x"));
    assert!(!a.is_complete(), "no finish yet");
    assert_eq!(a.error(), None);
    assert_eq!(a.raw_finish_reason(), None);
    let err = ModelError::new(ErrorKind::Overloaded, "busy");
    let mut b = a.clone();
    b.push(&MessageDelta::Error { error: err.clone() });
    assert_eq!(b.error(), Some(&err));
    assert!(!b.is_complete(), "error, no finish");
    b.push(&MessageDelta::Finish);
    assert!(!b.is_complete(), "finish after an error");
    a.push(&MessageDelta::Finish);
    assert!(a.is_complete());
}

#[test]
fn any_single_kind_of_content_counts_as_content() {
    let only = [
        text("t"),
        MessageDelta::ReasoningDelta { text: "r".into() },
        MessageDelta::ReasoningSignature {
            signature: "s".into(),
        },
        MessageDelta::RedactedReasoning { data: "d".into() },
        MessageDelta::Refusal { text: "no".into() },
        call("c", "t", "{}"),
    ];
    for d in only {
        let mut a = MessageAssembler::new();
        a.push(&d);
        assert!(!a.has_no_content(), "{d:?}");
    }
    let mut a = MessageAssembler::new();
    a.push(&finish_step(FinishReason::Stop));
    a.push(&MessageDelta::Finish);
    assert!(a.has_no_content(), "finish alone is no content");
}

#[test]
fn r_str_2_held_back_text_is_released_once_at_the_end_of_the_text() {
    // Stripping inline tags holds back a `<` that may open one; the end of the text releases
    // it into the message, observed as text, and counts as one change.
    let mut a = MessageAssembler::with_inline_tags(InlineTags::Strip);
    assert_eq!(
        a.push_observed(&text("a <st")),
        vec![InlinePiece::Text("a ".into())]
    );
    let before = a.revision();
    assert_eq!(
        a.push_observed(&MessageDelta::TextEnd),
        vec![InlinePiece::Text("<st".into())]
    );
    assert_eq!(a.message().text, "a <st");
    assert_eq!(a.revision(), before + 1);
    // Nothing is held back any more: a second end releases nothing and changes nothing.
    assert_eq!(a.push_observed(&MessageDelta::Finish), vec![]);
    assert_eq!(a.revision(), before + 1);
    assert_eq!(a.message().text, "a <st");
}

#[test]
fn r_str_2_kept_tags_are_in_the_text_already_and_the_end_releases_nothing() {
    let mut a = MessageAssembler::with_inline_tags(InlineTags::Keep);
    assert_eq!(
        a.push_observed(&text("a <st")),
        vec![InlinePiece::Text("a <st".into())]
    );
    let before = a.revision();
    assert_eq!(a.push_observed(&MessageDelta::TextEnd), vec![]);
    assert_eq!(a.message().text, "a <st");
    assert_eq!(a.revision(), before);
}

fn every_kind(a: &mut MessageAssembler, n: usize) {
    for d in [
        text(&format!("t{n}")),
        MessageDelta::ReasoningDelta {
            text: format!("r{n}"),
        },
        MessageDelta::ReasoningSignature {
            signature: format!("s{n}"),
        },
        MessageDelta::Refusal {
            text: format!("f{n}"),
        },
        call(&format!("c{n}"), "calculator", r#"{"expression":"1+1"}"#),
    ] {
        a.push(&d);
    }
}

#[test]
fn r_str_2_a_snapshot_is_brought_up_to_date_by_appending_what_arrived_since() {
    let mut a = MessageAssembler::new();
    every_kind(&mut a, 1);
    let mut snapshot = a.message();
    // A mark in the part the snapshot already has: an update that only appends keeps it.
    snapshot.tool_calls[0].name = "marked".into();
    every_kind(&mut a, 2);
    a.update_snapshot(&mut snapshot);
    assert_eq!(
        snapshot.tool_calls[0].name, "marked",
        "the known part was rebuilt"
    );
    snapshot.tool_calls[0].name = "calculator".into();
    assert_eq!(snapshot, a.message());
    assert_eq!(snapshot.text, "t1t2");
    assert_eq!(snapshot.refusal.as_deref(), Some("f1f2"));
}

#[test]
fn r_str_2_a_snapshot_that_is_not_an_earlier_state_is_rebuilt() {
    let mut a = MessageAssembler::new();
    every_kind(&mut a, 1);
    // Longer text than the message, or a refusal the message does not have.
    let mut other = MessageAssembler::new();
    every_kind(&mut other, 123);
    let mut longer = other.message();
    a.update_snapshot(&mut longer);
    assert_eq!(longer, a.message());
    let mut plain = MessageAssembler::new();
    plain.push(&text("t"));
    let mut with_refusal = a.message();
    plain.update_snapshot(&mut with_refusal);
    assert_eq!(with_refusal, plain.message());
}
