//! What-if replay (R-TRACE-3): every `--set` key changes its own field and names its bad
//! values; each kind of request a changed run can be left waiting for is named; inputs after the
//! changed run has ended are counted, not fed.

use agentloop_core::inline_tags::InlineTags;
use agentloop_core::process::ApprovalPolicy;
use agentloop_core::react::{DeciderRegistry, RunConfig, SteeringPolicy};
use agentloop_core::trace::{Trace, TraceRecord};
use agentloop_core::whatif::{
    apply_setting, parse_assignment, what_if, Missing, SettingError, SETTINGS,
};
use agentloop_core::Event;

use crate::trace_tools::fixture;

/// The trace cut before the first input `cut` accepts.
fn cut_before(mut t: Trace, cut: impl Fn(&Event) -> bool) -> Trace {
    let at = t
        .records
        .iter()
        .position(|r| matches!(r, TraceRecord::Input { event, .. } if cut(event)))
        .expect("the input to cut at");
    t.records.truncate(at);
    t
}

fn inputs(t: &Trace) -> usize {
    t.records
        .iter()
        .filter(|r| matches!(r, TraceRecord::Input { .. }))
        .count()
}

#[test]
fn r_trace_3_assignments_are_trimmed_and_need_a_key() {
    assert_eq!(parse_assignment(" max_steps = 3 "), Ok(("max_steps", "3")));
    assert_eq!(parse_assignment("steering="), Ok(("steering", "")));
    for bad in ["=3", " =3", "max_steps"] {
        assert_eq!(
            parse_assignment(bad),
            Err(SettingError::Malformed(bad.into())),
            "{bad}"
        );
    }
}

#[test]
fn r_trace_3_every_setting_changes_its_own_field() {
    // A base config where every value below is a change.
    let mut base = RunConfig {
        compact_threshold: Some(3),
        context_budget_tokens: Some(5),
        steering: SteeringPolicy::DeliverAtBoundary,
        ..RunConfig::default()
    };
    base.step.parallel_tools = true;
    base.step.inline_tags = InlineTags::Strip;
    type Set = fn(&mut RunConfig);
    let cases: [(&str, &str, Set); 13] = [
        ("max_steps", "7", |c| c.max_steps = 7),
        ("retry.max_retries", "9", |c| c.step.retry.max_retries = 9),
        ("retry.initial_backoff_ms", "11", |c| {
            c.step.retry.initial_backoff_ms = 11
        }),
        ("retry.max_backoff_ms", "13", |c| {
            c.step.retry.max_backoff_ms = 13
        }),
        ("parallel_tools", "false", |c| c.step.parallel_tools = false),
        ("compact_threshold", "17", |c| {
            c.compact_threshold = Some(17)
        }),
        ("compact_threshold", "none", |c| c.compact_threshold = None),
        ("context_budget_tokens", "19", |c| {
            c.context_budget_tokens = Some(19)
        }),
        ("context_budget_tokens", "off", |c| {
            c.context_budget_tokens = None
        }),
        ("steering", "skip_remaining", |c| {
            c.steering = SteeringPolicy::SkipRemaining
        }),
        ("inline_tags", "keep", |c| {
            c.step.inline_tags = InlineTags::Keep
        }),
        ("inline_tags", "off", |c| {
            c.step.inline_tags = InlineTags::Off
        }),
        ("inline_tags", "strip", |c| {
            c.step.inline_tags = InlineTags::Strip
        }),
    ];
    for (key, value, set) in cases {
        let mut want = base.clone();
        set(&mut want);
        let mut got = base.clone();
        apply_setting(&mut got, key, value).expect("a valid value");
        assert_eq!(format!("{got:?}"), format!("{want:?}"), "{key}={value}");
    }
    // The other steering value, from the first.
    let mut c = RunConfig {
        steering: SteeringPolicy::SkipRemaining,
        ..base.clone()
    };
    apply_setting(&mut c, "steering", "deliver_at_boundary").expect("valid");
    assert_eq!(c.steering, SteeringPolicy::DeliverAtBoundary);
    // Every documented key is exercised above.
    for (key, _) in SETTINGS {
        assert!(cases.iter().any(|(k, _, _)| k == key), "{key} untested");
    }
}

#[test]
fn r_trace_3_bad_values_name_the_key_and_what_it_takes() {
    for (key, value) in [
        ("max_steps", "0"),
        ("max_steps", "x"),
        ("retry.max_retries", "-1"),
        ("retry.initial_backoff_ms", "soon"),
        ("retry.max_backoff_ms", "1.5"),
        ("parallel_tools", "yes"),
        ("compact_threshold", "0"),
        ("compact_threshold", "many"),
        ("context_budget_tokens", "0"),
        ("steering", "later"),
        ("inline_tags", "drop"),
    ] {
        let expected = SETTINGS
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, e)| *e)
            .expect("a documented key");
        let mut c = RunConfig::default();
        let before = format!("{c:?}");
        assert_eq!(
            apply_setting(&mut c, key, value),
            Err(SettingError::BadValue {
                key: key.into(),
                value: value.into(),
                expected,
            }),
            "{key}={value}"
        );
        assert_eq!(format!("{c:?}"), before, "a bad value changes nothing");
    }
    let err = apply_setting(&mut RunConfig::default(), "max_step", "2").expect_err("unknown");
    assert_eq!(
        err,
        SettingError::UnknownKey {
            key: "max_step".into()
        }
    );
    assert!(err
        .to_string()
        .contains("known: max_steps, retry.max_retries"));
}

#[test]
fn r_trace_3_each_missing_answer_reads_clearly() {
    for (missing, text) in [
        (
            Missing::ModelReply {
                step: 2,
                attempt: 1,
            },
            "trace has no answer for step 2",
        ),
        (
            Missing::ModelReply {
                step: 2,
                attempt: 3,
            },
            "trace has no answer for step 2 (attempt 3)",
        ),
        (
            Missing::ToolResult {
                id: "c1".into(),
                name: "calculator".into(),
            },
            "trace has no result for tool call c1 (calculator)",
        ),
        (
            Missing::Approval { id: "c1".into() },
            "trace has no approval decision for c1",
        ),
        (
            Missing::Gate { id: "c1".into() },
            "trace has no hook verdict for c1",
        ),
        (Missing::Compaction, "trace has no compaction result"),
        (
            Missing::RunEndCommit,
            "trace has no acknowledgement of the run-end commit",
        ),
        (
            Missing::Timer {
                state: "Planning".into(),
            },
            "trace has no further input: the changed run waits in Planning for a timer",
        ),
    ] {
        assert_eq!(missing.to_string(), text);
    }
}

fn replay_changed(
    t: &Trace,
    change: impl FnOnce(&mut RunConfig),
) -> agentloop_core::whatif::WhatIf {
    let mut c = t.header.config.clone();
    change(&mut c);
    what_if(t, c, &DeciderRegistry::new()).expect("replay")
}

#[test]
fn r_trace_3_a_cut_recording_names_the_tool_result_it_lacks() {
    let t = cut_before(fixture("v4-calc.jsonl"), |e| {
        matches!(e, Event::ToolFinished { .. })
    });
    let w = replay_changed(&t, |_| {});
    assert_eq!(w.divergence, None, "the same run, only shorter");
    assert_eq!(
        w.missing,
        Some(Missing::ToolResult {
            id: "call_0_0".into(),
            name: "calculator".into()
        })
    );
}

#[test]
fn r_trace_3_a_cut_recording_names_the_run_end_commit_it_lacks() {
    let t = cut_before(fixture("v4-calc.jsonl"), |e| {
        matches!(e, Event::RunEndCommitted)
    });
    let w = replay_changed(&t, |_| {});
    assert_eq!(w.missing, Some(Missing::RunEndCommit));
    assert_eq!(w.unused_inputs, 0);
}

#[test]
fn r_trace_3_a_call_that_now_needs_approval_names_the_approval() {
    let t = fixture("v4-calc.jsonl");
    let w = replay_changed(&t, |c| {
        c.step
            .approval
            .insert("calculator".into(), ApprovalPolicy::Always);
    });
    assert!(w.divergence.is_some());
    assert_eq!(
        w.missing,
        Some(Missing::Approval {
            id: "call_0_0".into()
        })
    );
}

#[test]
fn r_trace_3_a_call_that_now_goes_through_hooks_names_the_verdict() {
    let t = fixture("v4-calc.jsonl");
    let w = replay_changed(&t, |c| c.step.gate_tools = true);
    assert_eq!(
        w.missing,
        Some(Missing::Gate {
            id: "call_0_0".into()
        })
    );
}

#[test]
fn r_trace_3_a_compaction_the_recording_never_made_is_named() {
    let t = fixture("v4-calc.jsonl");
    let w = replay_changed(&t, |c| c.compact_threshold = Some(1));
    assert!(w.divergence.is_some());
    assert_eq!(w.missing, Some(Missing::Compaction));
}

#[test]
fn r_trace_3_inputs_after_the_changed_run_ended_are_counted_not_fed() {
    // Two surplus inputs after the recorded run's end: counted, not fed.
    let mut surplus = fixture("v4-calc.jsonl");
    let extra = surplus
        .records
        .iter()
        .rev()
        .find(|r| matches!(r, TraceRecord::Input { .. }))
        .cloned()
        .expect("an input");
    surplus.records.push(extra.clone());
    surplus.records.push(extra);
    let w = replay_changed(&surplus, |_| {});
    assert_eq!(w.unused_inputs, 2, "two inputs after the end");
    assert_eq!(w.missing, None);
    assert_eq!(inputs(&w.trace) + 2, inputs(&surplus));
    assert_eq!(
        w.divergence.map(|d| d.index),
        Some(w.trace.records.len() as u64)
    );
}

#[test]
fn r_trace_3_the_cause_is_the_input_before_the_divergence() {
    let t = fixture("v4-calc.jsonl");
    let w = replay_changed(&t, |c| c.max_steps = 1);
    let d = w.divergence.expect("differs");
    let (index, name) = w.cause.expect("a cause");
    assert!(index <= d.index, "{index} {}", d.index);
    match &w.trace.records[index as usize] {
        TraceRecord::Input { event, .. } => assert_eq!(event.name(), name),
        other => panic!("not an input: {other:?}"),
    }
}

#[test]
fn r_trace_3_an_empty_recording_leaves_the_run_waiting_in_its_first_state() {
    let mut t = fixture("v4-calc.jsonl");
    t.records.clear();
    let w = replay_changed(&t, |_| {});
    assert_eq!(
        w.missing,
        Some(Missing::Timer {
            state: "Init".into()
        })
    );
    assert_eq!(w.divergence, None, "nothing recorded, nothing replayed");
}
