//! R-STR-2 at the `Run` level: an observer's snapshot of the partial message, brought up to
//! date with `Run::update_partial`, always equals a fresh `Run::partial()`; marks of one
//! attempt share their source, a retry or a new step starts another.

use agentloop_core::error::{ErrorKind, ModelError};
use agentloop_core::message::{FinishReason, Usage};
use agentloop_core::{AssistantMessage, AttemptId, Event, MessageDelta, Run, RunConfig};

use crate::steps::{attempt_of, start};

fn started() -> (Run, AttemptId) {
    let mut cfg = RunConfig::default();
    cfg.step.retry.max_retries = 2;
    let mut run = Run::new(cfg);
    let attempt = attempt_of(&start(&mut run, "hi"));
    let _ = run.handle(Event::StreamOpened {
        attempt: attempt.clone(),
    });
    (run, attempt)
}

fn deltas() -> Vec<MessageDelta> {
    vec![
        MessageDelta::ReasoningDelta {
            text: "think".into(),
        },
        MessageDelta::ReasoningDelta { text: "ing".into() },
        MessageDelta::ReasoningSignature {
            signature: "sig".into(),
        },
        MessageDelta::RedactedReasoning {
            data: "opaque".into(),
        },
        MessageDelta::TextDelta { text: "Hel".into() },
        MessageDelta::TextDelta { text: "lo".into() },
        MessageDelta::Refusal { text: "no".into() },
        MessageDelta::Refusal { text: "pe".into() },
        MessageDelta::ToolCall {
            id: "c1".into(),
            name: "calc".into(),
            arguments: r#"{"e": "1+1"}"#.into(),
        },
        MessageDelta::ToolCall {
            id: "c2".into(),
            name: "calc".into(),
            arguments: r#"{"e": "2"}"#.into(),
        },
    ]
}

fn feed(run: &mut Run, attempt: &AttemptId, seq: usize, delta: MessageDelta) {
    let _ = run.handle(Event::Delta {
        attempt: attempt.clone(),
        seq: seq as u64,
        delta,
    });
}

/// Every earlier snapshot, brought up to date, equals the fresh partial, after each delta.
#[test]
fn r_str_2_updated_snapshots_equal_the_fresh_partial_after_every_delta() {
    let (mut run, attempt) = started();
    let mut snapshots: Vec<AssistantMessage> = vec![run.partial().expect("a step")];
    let mut marks = vec![run.partial_mark().expect("a mark")];
    for (seq, delta) in deltas().into_iter().enumerate() {
        feed(&mut run, &attempt, seq, delta);
        let fresh = run.partial().expect("a step");
        let mark = run.partial_mark().expect("a mark");
        for (snap, old) in snapshots.iter().zip(&marks) {
            assert!(
                mark.same_source(old),
                "one attempt's marks share their source"
            );
            let mut s = snap.clone();
            run.update_partial(&mut s);
            assert_eq!(s, fresh, "after delta {seq}");
        }
        assert_ne!(
            Some(&mark),
            marks.last(),
            "a delta that shows changes the mark"
        );
        snapshots.push(fresh);
        marks.push(mark);
    }
    let last = snapshots.last().expect("snapshots");
    assert_eq!(last.text, "Hello");
    assert_eq!(last.reasoning, "thinking");
    assert_eq!(last.refusal.as_deref(), Some("nope"));
    assert_eq!(last.tool_calls.len(), 2);
}

/// A snapshot that cannot be an earlier state of the message (longer text, more calls,
/// another reasoning or refusal) is rebuilt, not extended.
#[test]
fn r_str_2_a_snapshot_of_something_else_is_rebuilt() {
    let (mut run, attempt) = started();
    for (seq, delta) in deltas().into_iter().enumerate().take(6) {
        feed(&mut run, &attempt, seq, delta);
    }
    let fresh = run.partial().expect("a step");
    let longer_text = AssistantMessage {
        text: "Hello, and much more".into(),
        ..fresh.clone()
    };
    let other_reasoning = AssistantMessage {
        reasoning: "thinking harder".into(),
        ..fresh.clone()
    };
    let more_redacted = AssistantMessage {
        redacted_reasoning: vec!["a".into(), "b".into()],
        ..fresh.clone()
    };
    let longer_signature = AssistantMessage {
        reasoning_signature: Some("signature".into()),
        ..fresh.clone()
    };
    let refusal = AssistantMessage {
        refusal: Some("never".into()),
        ..fresh.clone()
    };
    let more_calls = AssistantMessage {
        tool_calls: vec![agentloop_core::ToolCall::from_raw("x", "calc", "{}")],
        ..fresh.clone()
    };
    for other in [
        longer_text,
        other_reasoning,
        more_redacted,
        longer_signature,
        refusal,
        more_calls,
    ] {
        let mut s = other.clone();
        run.update_partial(&mut s);
        assert_eq!(s, fresh, "rebuilt from {other:?}");
    }
}

/// When the turn ends cut off by the output limit, an earlier snapshot with a parsed call is
/// rebuilt with every call marked invalid, as the fresh partial has it.
#[test]
fn r_str_2_a_truncated_turn_rebuilds_the_calls_as_invalid() {
    let (mut run, attempt) = started();
    feed(
        &mut run,
        &attempt,
        0,
        MessageDelta::ToolCall {
            id: "c1".into(),
            name: "calc".into(),
            arguments: r#"{"e": 1}"#.into(),
        },
    );
    let before = run.partial().expect("a step");
    assert!(before.tool_calls[0].invalid_arguments.is_none());
    feed(
        &mut run,
        &attempt,
        1,
        MessageDelta::FinishStep {
            finish_reason: Some(FinishReason::Length),
            raw_finish_reason: None,
            usage: Some(Usage {
                output_tokens: 7,
                ..Usage::default()
            }),
        },
    );
    let fresh = run.partial().expect("a step");
    assert!(fresh.tool_calls[0].invalid_arguments.is_some());
    let mut s = before;
    run.update_partial(&mut s);
    assert_eq!(s, fresh);
    assert_eq!(s.usage.map(|u| u.output_tokens), Some(7));
}

/// A retry starts a message of another source; without a step the snapshot is emptied.
#[test]
fn r_str_2_a_retry_or_the_end_of_the_step_starts_another_source() {
    let (mut run, attempt) = started();
    feed(
        &mut run,
        &attempt,
        0,
        MessageDelta::TextDelta { text: "par".into() },
    );
    let first = run.partial_mark().expect("a mark");
    let s = run.handle(Event::TransportError {
        attempt: attempt.clone(),
        error: ModelError::new(ErrorKind::ServerError, "503"),
    });
    let _ = s;
    let retry = run.partial_mark().expect("a mark");
    assert!(!retry.same_source(&first), "a retry is another source");
    assert_eq!(run.partial().expect("a step").text, "");
    let mut fresh_run = Run::new(RunConfig::default());
    assert!(fresh_run.partial_mark().is_none(), "no step, no mark");
    let mut snap = AssistantMessage {
        text: "stale".into(),
        ..AssistantMessage::default()
    };
    fresh_run.update_partial(&mut snap);
    assert_eq!(snap, AssistantMessage::default(), "no step: emptied");
    let _ = fresh_run.handle(Event::Abort {
        reason: "x".into(),
        kill: Default::default(),
    });
}
