//! Small pure parts of the machines' interface: transition conformance and state display,
//! guard violations, the default Observing decision (R-OUT-3), retry backoff (R-IN-1), run
//! configuration equality and the run result's final text (R-OUT-1).

use agentloop_core::chart::{
    GuardCheck, MachineKind, ProcessEventKind, ProcessRow, ProcessState, ReactEventKind, ReactRow,
    ReactState,
};
use agentloop_core::process::RetryPolicy;
use agentloop_core::react::config::{default_decider, Decision, Observation};
use agentloop_core::step::AgentState;
use agentloop_core::{
    AssistantMessage, LoopResult, Message, Outcome, RunConfig, Step, ToolResult, ToolStatus,
    Transition,
};

fn react(from: ReactState, to: ReactState, row: Option<ReactRow>, unhandled: bool) -> Transition {
    Transition::React {
        from,
        event: ReactEventKind::Start,
        to,
        row,
        unhandled,
    }
}

fn process(
    from: ProcessState,
    to: ProcessState,
    row: Option<ProcessRow>,
    unhandled: bool,
) -> Transition {
    Transition::Process {
        from,
        event: ProcessEventKind::StreamOpened,
        to,
        row,
        unhandled,
    }
}

#[test]
fn r_arch_3_react_transitions_conform_only_to_their_row_or_as_unhandled_no_ops() {
    use ReactState::*;
    let row = Some(ReactRow::InitStart);
    assert!(react(Init, Planning, row, false).conforms());
    assert!(
        !react(Init, Planning, row, true).conforms(),
        "a row is not unhandled"
    );
    assert!(!react(Init, Executing, row, false).conforms());
    assert!(react(Init, Init, None, true).conforms());
    assert!(
        !react(Init, Init, None, false).conforms(),
        "no row must be unhandled"
    );
    assert!(
        !react(Init, Planning, None, true).conforms(),
        "unhandled keeps the state"
    );
}

#[test]
fn r_arch_3_process_transitions_conform_only_to_their_row_or_as_unhandled_no_ops() {
    use ProcessState::*;
    let row = Some(ProcessRow::CallingOpened);
    assert!(process(Calling, Streaming, row, false).conforms());
    assert!(!process(Calling, Streaming, row, true).conforms());
    assert!(!process(Calling, Retrying, row, false).conforms());
    assert!(process(Idle, Idle, None, true).conforms());
    assert!(!process(Idle, Idle, None, false).conforms());
    assert!(!process(Idle, Calling, None, true).conforms());
}

#[test]
fn transitions_know_whether_the_state_changed() {
    assert!(react(ReactState::Init, ReactState::Planning, None, false).changed());
    assert!(!react(ReactState::Init, ReactState::Init, None, false).changed());
    assert!(process(ProcessState::Calling, ProcessState::Streaming, None, false).changed());
    assert!(!process(ProcessState::Calling, ProcessState::Calling, None, false).changed());
}

#[test]
fn agent_state_displays_outer_and_inner_state() {
    let s = AgentState {
        react: ReactState::Executing,
        process: Some(ProcessState::Calling),
    };
    assert_eq!(s.to_string(), "Executing.Calling");
    let s = AgentState {
        react: ReactState::Completed,
        process: None,
    };
    assert_eq!(s.to_string(), "Completed");
}

#[test]
fn guard_violations_are_the_checks_that_do_not_hold() {
    let ok = GuardCheck {
        machine: MachineKind::React,
        from: "Init",
        event: "Start",
        taken: Some("init_start"),
        expected: Some("init_start"),
        overlap: None,
    };
    let bad = GuardCheck {
        taken: Some("x"),
        ..ok
    };
    let state = AgentState {
        react: ReactState::Init,
        process: None,
    };
    let step = Step {
        from: state,
        event: "start".into(),
        to: state,
        effects: vec![],
        unhandled: false,
        transitions: vec![],
        guard_checks: vec![ok, bad, ok],
    };
    assert_eq!(step.guard_violations(), vec![bad]);
    let clean = Step {
        guard_checks: vec![ok],
        ..step
    };
    assert!(clean.guard_violations().is_empty());
}

fn obs(
    has_tool_calls: bool,
    steering_pending: bool,
    stop: bool,
    over_budget: bool,
) -> Observation<'static> {
    Observation {
        message: None,
        has_tool_calls,
        steering_pending,
        subtask_pending: false,
        stop_requested: stop,
        over_budget,
        steps: 1,
        max_steps: 10,
    }
}

#[test]
fn r_out_3_default_decision() {
    use Decision::*;
    for tools in [false, true] {
        for steer in [false, true] {
            for over in [false, true] {
                assert_eq!(default_decider(&obs(tools, steer, true, over)), Stop);
                let expected = match (tools || steer, over) {
                    (true, true) => Compact,
                    (true, false) => Continue,
                    (false, _) => Complete,
                };
                assert_eq!(
                    default_decider(&obs(tools, steer, false, over)),
                    expected,
                    "tools {tools} steer {steer} over {over}"
                );
            }
        }
    }
    // Spelled out: pending steering alone continues (compacting first when over budget).
    assert_eq!(default_decider(&obs(false, true, false, false)), Continue);
    assert_eq!(default_decider(&obs(false, true, false, true)), Compact);
    assert_eq!(default_decider(&obs(true, false, false, false)), Continue);
    assert_eq!(default_decider(&obs(false, false, false, true)), Complete);
}

#[test]
fn r_in_1_backoff_doubles_from_the_initial_delay_up_to_the_cap() {
    let p = RetryPolicy::default();
    assert_eq!(p.delay_ms(1, None), 1_000);
    assert_eq!(p.delay_ms(2, None), 2_000);
    assert_eq!(p.delay_ms(3, None), 4_000);
    assert_eq!(p.delay_ms(4, None), 8_000);
    assert_eq!(p.delay_ms(5, None), 10_000);
    assert_eq!(p.delay_ms(0, None), 1_000);
    assert_eq!(p.delay_ms(u32::MAX, None), 10_000);
    // A server hint replaces the backoff, capped (R-IN-1).
    assert_eq!(p.delay_ms(1, Some(2_500)), 2_500);
    assert_eq!(p.delay_ms(1, Some(120_000)), 60_000);
    let p = RetryPolicy {
        initial_backoff_ms: 3,
        max_backoff_ms: u64::MAX,
        ..RetryPolicy::default()
    };
    assert_eq!(p.delay_ms(6, None), 3 << 5);
}

/// R-IN-1: a `retry-after` / `retry-after-ms` hint overrides the computed backoff, shorter or
/// longer, honoured within `[0, retry_after_cap_ms]`; without a hint the backoff applies.
/// (Before issue 30 the backoff was a floor under the hint: a provider's short
/// `retry-after-ms: 150` waited the full 1 s.) A hint of 0 retries at once; `max_retries`
/// still bounds the retries, so it is no endless loop.
#[test]
fn r_in_1_a_retry_after_hint_overrides_the_backoff_within_the_cap() {
    let p = RetryPolicy::default();
    assert_eq!(
        p.delay_ms(1, Some(150)),
        150,
        "shorter than the 1 s backoff"
    );
    assert_eq!(
        p.delay_ms(3, Some(2_500)),
        2_500,
        "shorter than the 4 s backoff"
    );
    assert_eq!(p.delay_ms(1, Some(0)), 0, "0 means now");
    assert_eq!(p.delay_ms(5, Some(0)), 0);
    assert_eq!(p.delay_ms(1, Some(1_001)), 1_001, "longer than the backoff");
    assert_eq!(p.delay_ms(3, None), 4_000, "no hint: the backoff");
    // The cap bounds the hint, whatever the backoff.
    let p = RetryPolicy {
        retry_after_cap_ms: 500,
        ..RetryPolicy::default()
    };
    assert_eq!(p.delay_ms(2, Some(60_000)), 500);
    assert_eq!(p.delay_ms(2, Some(499)), 499);
    assert_eq!(p.delay_ms(2, None), 2_000);
    // With jitter on, a hint is taken as it is, and the backoff without a hint is jittered.
    let p = RetryPolicy {
        jitter_seed: Some(7),
        ..RetryPolicy::default()
    };
    assert!((0..100).all(|d| p.jittered_delay_ms(1, Some(150), d) == 150));
    assert!((0..100).all(|d| (750..=1_000).contains(&p.jittered_delay_ms(1, None, d))));
}

/// R-IN-1, R-TRACE-2: a version-6 trace records a delay that came from the server's hint
/// (150 ms, below the 1 s backoff) and replays identically; the reader gives older traces the
/// floor rule, so a version-4 trace whose 20 ms hint was lengthened to the backoff replays
/// identically too. The version-6 trace replayed under the floor rule diverges at the hinted
/// retry's timer: the rule is part of what a trace means.
#[test]
fn r_in_1_traces_replay_with_the_retry_after_rule_they_were_recorded_with() {
    use agentloop_core::process::RetryAfterRule;
    use agentloop_core::trace::{replay, TraceRecord};
    let v6 = crate::trace_tools::fixture("v6-retry-after.jsonl");
    assert_eq!(v6.header.version, 6);
    assert_eq!(
        v6.header.config.step.retry.retry_after,
        RetryAfterRule::Override
    );
    assert_eq!(replay(&v6), None);
    let v4 = crate::trace_tools::fixture("v4-retry-tool.jsonl");
    assert_eq!(
        v4.header.config.step.retry.retry_after,
        RetryAfterRule::Floor
    );
    assert_eq!(replay(&v4), None);
    let mut floored = v6.clone();
    floored.header.config.step.retry.retry_after = RetryAfterRule::Floor;
    let d = replay(&floored).expect("the floor rule waits the backoff instead");
    assert!(
        matches!(
            d.recorded,
            Some(TraceRecord::Effect {
                effect: agentloop_core::Effect::StartTimer { delay_ms: 150, .. },
                ..
            })
        ),
        "{d:?}"
    );
}

/// Jitter is a pure function of the recorded seed and the draw, within
/// `jitter_percent` below the backoff, spread over that band, never applied to a server hint.
#[test]
fn r_in_1_jitter_is_a_pure_function_of_the_seed_within_its_band() {
    let plain = RetryPolicy::default();
    assert_eq!(plain.jitter_percent, 25);
    // No seed: no jitter (the machine has no randomness of its own).
    assert_eq!(plain.jittered_delay_ms(2, None, 7), 2_000);
    let p = RetryPolicy {
        jitter_seed: Some(42),
        ..RetryPolicy::default()
    };
    let delays: Vec<u64> = (0..2_000)
        .map(|d| p.jittered_delay_ms(1, None, d))
        .collect();
    assert!(
        delays.iter().all(|d| (750..=1_000).contains(d)),
        "within 25 % below 1 s"
    );
    let (lo, hi) = (delays.iter().min(), delays.iter().max());
    assert!(
        lo < Some(&760) && hi > Some(&990),
        "spread over the band: {lo:?}..{hi:?}"
    );
    let distinct: std::collections::BTreeSet<_> = delays.iter().collect();
    assert!(distinct.len() > 200, "{}", distinct.len());
    // The same seed and draw: the same delay (replay); another seed: another sequence.
    assert_eq!(
        p.jittered_delay_ms(3, None, 9),
        p.jittered_delay_ms(3, None, 9)
    );
    let q = RetryPolicy {
        jitter_seed: Some(43),
        ..RetryPolicy::default()
    };
    let other: Vec<u64> = (0..2_000)
        .map(|d| q.jittered_delay_ms(1, None, d))
        .collect();
    assert_ne!(delays, other);
    // The cap still holds, and a server's hint is never shortened.
    assert!(p.jittered_delay_ms(30, None, 1) <= 10_000);
    assert_eq!(p.jittered_delay_ms(1, Some(5_000), 1), 5_000);
    // Off at 0 %, and at most the whole backoff at 100 %.
    let off = RetryPolicy {
        jitter_percent: 0,
        ..p.clone()
    };
    assert_eq!(off.jittered_delay_ms(2, None, 5), 2_000);
    let full = RetryPolicy {
        jitter_percent: 255,
        ..p.clone()
    };
    assert!((0..500).all(|d| full.jittered_delay_ms(1, None, d) <= 1_000));
}

/// R-TRACE-1, R-IN-1: a trace records the jitter seed and the delays the machine chose, so the
/// jitter function is part of the trace format: replaying an old trace must choose the same
/// delays. They are pinned here to values computed by an independent SplitMix64 (Python,
/// arbitrary-precision integers: `sm(x)` as in Steele, Lea and Flood 2014, whose
/// `sm(0) = 0xe220a8397b1dcdaf`; delay = backoff − ⌊backoff · percent · sm(seed ^ sm(draw)) /
/// (100 · 2⁶⁴)⌋). Backoffs up to `u64::MAX` show every bit of the fraction and must not
/// overflow.
#[test]
fn r_in_1_jittered_delays_are_pinned_splitmix64_values() {
    let policy = |seed: u64, percent: u8, backoff: u64| RetryPolicy {
        jitter_seed: Some(seed),
        jitter_percent: percent,
        initial_backoff_ms: backoff,
        max_backoff_ms: u64::MAX,
        ..RetryPolicy::default()
    };
    let delays =
        |p: &RetryPolicy| -> Vec<u64> { (0..3).map(|d| p.jittered_delay_ms(1, None, d)).collect() };
    let p = policy(42, 25, 1_000);
    assert_eq!(
        (0..6)
            .map(|d| p.jittered_delay_ms(1, None, d))
            .collect::<Vec<_>>(),
        [925, 877, 972, 934, 862, 804]
    );
    assert_eq!(
        delays(&policy(42, 100, u64::MAX)),
        [
            12_854_611_309_931_566_309,
            9_316_905_752_966_792_151,
            16_306_932_548_544_713_037
        ]
    );
    assert_eq!(
        delays(&policy(7, 37, u64::MAX)),
        [
            15_760_681_508_477_859_368,
            15_271_668_223_456_327_099,
            17_711_142_871_074_104_202
        ]
    );
    assert_eq!(
        delays(&policy(0xdead_beef, 100, 1 << 62)),
        [
            3_641_753_729_331_218_471,
            2_990_072_157_643_712_212,
            3_200_497_624_844_026_312
        ]
    );
}

#[test]
fn r_out_2_run_configs_compare_by_data() {
    assert_eq!(RunConfig::default(), RunConfig::default());
    let other = RunConfig {
        model: "other".into(),
        ..RunConfig::default()
    };
    assert_ne!(RunConfig::default(), other);
    let other = RunConfig {
        context_budget_tokens: Some(1),
        ..RunConfig::default()
    };
    assert_ne!(RunConfig::default(), other);
}

#[test]
fn r_out_1_final_text_is_the_last_assistant_text() {
    let a = |t: &str| {
        Message::Assistant(AssistantMessage {
            text: t.into(),
            ..Default::default()
        })
    };
    let mut r = LoopResult {
        outcome: Outcome::Completed,
        reason: "final_answer".into(),
        messages: vec![
            Message::user("q"),
            a("first"),
            Message::Tool(ToolResult {
                tool_call_id: "c".into(),
                name: "t".into(),
                content: "tool output".into(),
                status: ToolStatus::Completed,
            }),
            a("second"),
            Message::user("later"),
        ],
        iterations: 2,
        usage: None,
        steering_left: vec![],
        error: None,
        steps: vec![],
    };
    assert_eq!(r.final_text(), Some("second"));
    r.messages.truncate(3);
    assert_eq!(r.final_text(), Some("first"));
    r.messages.truncate(1);
    assert_eq!(r.final_text(), None);
}
