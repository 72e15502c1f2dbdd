//! What-if replay (R-TRACE-3): every `--set` key changes its own field and names its bad
//! values; each kind of request a changed run can be left waiting for is named; inputs after the
//! changed run has ended are counted, not fed.

use agentloop_core::error::{ErrorKind, ModelError};
use agentloop_core::event::{ApprovalDecision, GateVerdict};
use agentloop_core::inline_tags::InlineTags;
use agentloop_core::message::ToolStatus;
use agentloop_core::process::ApprovalPolicy;
use agentloop_core::react::{DeciderRegistry, RunConfig, SteeringPolicy};
use agentloop_core::trace::{Trace, TraceHeader, TraceRecord, TRACE_VERSION};
use agentloop_core::{AttemptId, Effect, Event, Message, Run, ToolSpec};
use agentloop_trace_tools::whatif::{
    apply_setting, parse_assignment, what_if, Missing, SettingError, SETTINGS,
};

use crate::decider_replay::{attempt_of, feed, stream};
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
) -> agentloop_trace_tools::whatif::WhatIf {
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

/// A run recorded by hand: `Run::handle` fed one input at a time, each step recorded.
struct Recording {
    run: Run,
    trace: Trace,
}

impl Recording {
    /// Starts a run that offers `calculator` and `clock`; returns the first model attempt.
    fn start(change: impl FnOnce(&mut RunConfig)) -> (Recording, AttemptId) {
        let tool = |name: &str| ToolSpec {
            name: name.into(),
            description: format!("the {name}"),
            parameters: serde_json::json!({"type": "object"}),
        };
        let mut config = RunConfig {
            tools: vec![tool("calculator"), tool("clock")].into(),
            ..RunConfig::default()
        };
        change(&mut config);
        let trace = Trace::new(TraceHeader {
            timeouts: None,
            version: TRACE_VERSION,
            agentloop: "test".into(),
            session: "s".into(),
            tools: config.tools.clone(),
            config: config.clone(),
        });
        let mut r = Recording {
            run: Run::new(config),
            trace,
        };
        let effects = r.feed(Event::Start {
            run_id: "r1".into(),
            history: vec![],
            input: vec![Message::user("What is 2+3, and what time is it?")],
            session_turns: 0,
        });
        let attempt = attempt_of(&effects).expect("step 1 calls the model");
        (r, attempt)
    }

    fn feed(&mut self, event: Event) -> Vec<Effect> {
        feed(&mut self.run, &mut self.trace, event)
    }

    fn reply(
        &mut self,
        attempt: AttemptId,
        text: &str,
        calls: &[(&str, &str, &str)],
    ) -> Vec<Effect> {
        stream(&mut self.run, &mut self.trace, attempt, text, calls)
    }

    fn tool_result(&mut self, id: &str, content: &str) -> Vec<Effect> {
        self.feed(Event::ToolFinished {
            tool_call_id: id.into(),
            status: ToolStatus::Completed,
            content: content.into(),
        })
    }

    /// The final answer for `attempt`, then the run-end commit.
    fn finish(mut self, attempt: AttemptId) -> Trace {
        self.reply(attempt, "Done.", &[]);
        self.feed(Event::RunEndCommitted);
        assert!(self.run.is_terminal(), "ended: {:?}", self.run.state());
        self.trace
    }
}

/// The position of the first effect in `t` that `f` accepts.
fn effect_at(t: &Trace, f: impl Fn(&Effect) -> bool) -> Option<usize> {
    t.records
        .iter()
        .position(|r| matches!(r, TraceRecord::Effect { effect, .. } if f(effect)))
}

#[test]
fn r_trace_3_a_tool_result_is_named_before_an_approval_asked_earlier() {
    // Step 1 calls both tools at once, each through the hooks: the calculator's verdict is
    // "ask a human", the clock's "allow". Then the approval, both results, and step 2.
    let (mut r, first) = Recording::start(|c| {
        c.step.parallel_tools = true;
        c.step.gate_tools = true;
    });
    r.reply(
        first,
        "Both.",
        &[
            ("c1", "calculator", r#"{"expression":"2+3"}"#),
            ("c2", "clock", "{}"),
        ],
    );
    for (id, verdict) in [("c1", GateVerdict::Ask), ("c2", GateVerdict::Allow)] {
        r.feed(Event::ToolGated {
            tool_call_id: id.into(),
            verdict,
        });
    }
    r.feed(Event::Approval {
        tool_call_id: "c1".into(),
        decision: ApprovalDecision::Approved,
    });
    r.tool_result("c1", "5");
    let next = attempt_of(&r.tool_result("c2", "12:00")).expect("step 2");
    // Cut before the approval: the approval (asked first) and the clock's result are both
    // outstanding. The result is named first (it needs no human, so it is the likelier gap).
    let t = cut_before(r.finish(next), |e| matches!(e, Event::Approval { .. }));
    let w = replay_changed(&t, |_| {});
    let asked = effect_at(
        &w.trace,
        |e| matches!(e, Effect::RequestApproval { call } if call.id == "c1"),
    );
    let ran = effect_at(
        &w.trace,
        |e| matches!(e, Effect::RunTool { call } if call.id == "c2"),
    );
    assert!(
        matches!((asked, ran), (Some(a), Some(r)) if a < r),
        "approval asked, then the clock run: {asked:?} {ran:?}"
    );
    assert_eq!(
        w.missing,
        Some(Missing::ToolResult {
            id: "c2".into(),
            name: "clock".into()
        })
    );
}

/// Step 1's first attempt fails with a retryable error and is retried after a backoff; the
/// retry calls the calculator; then its result and step 2.
fn retried_recording() -> (Trace, AttemptId) {
    let (mut r, first) = Recording::start(|_| {});
    let failed = r.feed(Event::TransportError {
        attempt: first,
        error: ModelError::new(ErrorKind::Overloaded, "529"),
    });
    let timer_id = failed
        .iter()
        .find_map(|e| match e {
            Effect::StartTimer { timer_id, .. } => Some(*timer_id),
            _ => None,
        })
        .expect("a backoff timer");
    let second = attempt_of(&r.feed(Event::TimerElapsed { timer_id })).expect("attempt 2");
    r.reply(
        second.clone(),
        "Again.",
        &[("c1", "calculator", r#"{"expression":"2+3"}"#)],
    );
    let next = attempt_of(&r.tool_result("c1", "5")).expect("step 2");
    (r.finish(next), second)
}

#[test]
fn r_trace_3_a_retry_still_waiting_for_its_backoff_names_the_attempt_it_will_send() {
    let (t, second) = retried_recording();
    let t = cut_before(t, |e| matches!(e, Event::TimerElapsed { .. }));
    let w = replay_changed(&t, |_| {});
    assert_eq!(w.divergence, None);
    assert_eq!(
        w.missing,
        Some(Missing::ModelReply {
            step: second.model_call_index,
            attempt: 2
        })
    );
}

#[test]
fn r_trace_3_a_retry_once_sent_is_no_longer_missing() {
    let (t, _) = retried_recording();
    let t = cut_before(t, |e| matches!(e, Event::ToolFinished { .. }));
    let w = replay_changed(&t, |_| {});
    assert_eq!(
        w.missing,
        Some(Missing::ToolResult {
            id: "c1".into(),
            name: "calculator".into()
        })
    );
}

#[test]
fn r_trace_3_an_aborted_model_call_needs_no_reply() {
    // The abort cancels step 1's model call; the run waits for its run-end commit only.
    let (mut r, first) = Recording::start(|_| {});
    r.feed(Event::StreamOpened { attempt: first });
    r.feed(Event::Abort {
        reason: "user".into(),
        kill: Default::default(),
    });
    r.feed(Event::RunEndCommitted);
    let t = cut_before(r.trace, |e| matches!(e, Event::RunEndCommitted));
    let w = replay_changed(&t, |_| {});
    assert_eq!(w.missing, Some(Missing::RunEndCommit));
}

#[test]
fn r_trace_3_a_vetoed_compaction_is_answered() {
    // More than two messages after step 1's tool result: a compaction, vetoed by a hook; the
    // run goes on, answers, and waits for its run-end commit only.
    let (mut r, first) = Recording::start(|c| c.compact_threshold = Some(2));
    r.reply(
        first,
        "Let me calculate.",
        &[("c1", "calculator", r#"{"expression":"2+3"}"#)],
    );
    let compacting = r.tool_result("c1", "5");
    assert!(
        compacting
            .iter()
            .any(|e| matches!(e, Effect::Compact { .. })),
        "{compacting:?}"
    );
    let next = attempt_of(&r.feed(Event::CompactionVetoed {
        reason: "keep everything".into(),
    }))
    .expect("step 2 despite the veto");
    let t = cut_before(r.finish(next), |e| matches!(e, Event::RunEndCommitted));
    let w = replay_changed(&t, |_| {});
    assert_eq!(w.missing, Some(Missing::RunEndCommit));
}
