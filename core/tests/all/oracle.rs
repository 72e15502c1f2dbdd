//! The oracle and the chart validator can fail: negative tests for the checks every other
//! conformance test relies on (R-ARCH-3).

use agentloop_core::chart::{
    declared_wins, undeclared_overlap, Chart, GuardCheck, MachineKind, ProcessEventKind,
    ProcessRow, ProcessState, ReactEventKind, ReactRow, ReactState, ToolCallEventKind, ToolCallRow,
    ToolCallState, PROCESS_TOML, REACT_TOML, TOOL_CALL_TOML,
};
use agentloop_core::{AttemptId, Event, Message, Run, RunConfig, Transition};

#[test]
fn a_guard_check_with_another_row_fails_and_says_which() {
    let c = GuardCheck {
        machine: MachineKind::Process,
        from: "Calling",
        event: "StreamOpened",
        taken: Some("calling_opened"),
        expected: Some("live_stale_stream_opened"),
        overlap: None,
    };
    assert!(!c.holds());
    let text = c.to_string();
    assert!(text.contains("calling_opened") && text.contains("live_stale_stream_opened"));
    assert!(GuardCheck {
        taken: None,
        expected: None,
        ..c
    }
    .holds());
    assert!(!GuardCheck { taken: None, ..c }.holds());
}

#[test]
fn candidates_put_the_leaf_before_its_superstates() {
    assert_eq!(
        ProcessState::Calling.candidates(ProcessEventKind::StreamOpened),
        [ProcessRow::CallingOpened, ProcessRow::LiveStaleStreamOpened]
    );
    assert_eq!(
        ReactState::Executing.candidates(ReactEventKind::Abort),
        [ReactRow::ExecutingAbortDrain, ReactRow::ActiveAbort]
    );
    assert!(ReactState::Completed
        .candidates(ReactEventKind::Abort)
        .is_empty());
}

#[test]
fn rows_do_not_allow_other_transitions() {
    // `allows` must be able to say no (a mutant returning `true` made every check vacuous).
    assert!(ReactRow::InitStart.allows(
        ReactState::Init,
        ReactEventKind::Start,
        ReactState::Planning
    ));
    assert!(!ReactRow::InitStart.allows(
        ReactState::Init,
        ReactEventKind::Start,
        ReactState::Executing
    ));
    assert!(!ReactRow::InitStart.allows(
        ReactState::Planning,
        ReactEventKind::Start,
        ReactState::Planning
    ));
    assert!(!ReactRow::InitStart.allows(
        ReactState::Init,
        ReactEventKind::Resume,
        ReactState::Planning
    ));
    assert!(!ProcessRow::StreamingDelta.allows(
        ProcessState::Streaming,
        ProcessEventKind::Delta,
        ProcessState::Calling
    ));
    let bad = Transition::React {
        from: ReactState::Init,
        event: ReactEventKind::Start,
        to: ReactState::Completed,
        row: Some(ReactRow::InitStart),
        unhandled: false,
    };
    assert!(!bad.conforms());
    let silent = Transition::React {
        from: ReactState::Init,
        event: ReactEventKind::Start,
        to: ReactState::Planning,
        row: None,
        unhandled: true,
    };
    assert!(
        !silent.conforms(),
        "an unhandled event must not move the state"
    );
}

#[test]
fn tool_call_rows_do_not_allow_other_transitions() {
    use ToolCallEventKind as E;
    use ToolCallState as S;
    assert!(ToolCallRow::StartRun.allows(S::Queued, E::Start, S::Running));
    assert!(!ToolCallRow::StartRun.allows(S::Queued, E::Start, S::Completed));
    assert!(!ToolCallRow::StartRun.allows(S::Gating, E::Start, S::Running));
    assert!(!ToolCallRow::StartRun.allows(S::Queued, E::Ask, S::Running));
    // A superstate row applies inside it only.
    assert!(ToolCallRow::AbortUnstarted.allows(S::Asking, E::Abort, S::Aborted));
    assert!(!ToolCallRow::AbortUnstarted.allows(S::Running, E::Abort, S::Aborted));
    assert!(!ToolCallRow::AbortUnstarted.allows(S::Completed, E::Abort, S::Aborted));
    // An internal row keeps the state.
    assert!(ToolCallRow::AbortImmune.allows(S::Running, E::Abort, S::Running));
    assert!(!ToolCallRow::AbortImmune.allows(S::Running, E::Abort, S::Aborted));
    assert_eq!(ToolCallRow::AbortImmune.target(), None);
    assert_eq!(ToolCallRow::AbortKilled.target(), Some(S::Aborted));
    let bad = Transition::ToolCall {
        index: 0,
        call: "c1".into(),
        from: S::Running,
        event: E::Finished,
        to: S::Denied,
        row: ToolCallRow::FinishedError,
    };
    assert!(!bad.conforms());
    // A tool call's move changes its state; an internal row does not.
    let moved = Transition::ToolCall {
        index: 0,
        call: "c1".into(),
        from: S::Queued,
        event: E::Start,
        to: S::Running,
        row: ToolCallRow::StartRun,
    };
    assert!(moved.conforms() && moved.changed());
    let stays = Transition::ToolCall {
        index: 0,
        call: "c1".into(),
        from: S::Running,
        event: E::Abort,
        to: S::Running,
        row: ToolCallRow::AbortImmune,
    };
    assert!(stays.conforms() && !stays.changed());
    assert_eq!(
        S::Running.candidates(E::Abort),
        [ToolCallRow::AbortKilled, ToolCallRow::AbortImmune]
    );
    assert_eq!(
        S::Asking.candidates(E::Abort),
        [ToolCallRow::AbortUnstarted]
    );
    assert!(S::Denied.candidates(E::Abort).is_empty());
    assert!(Chart::parse(TOOL_CALL_TOML).is_ok());
    assert_eq!(MachineKind::ToolCall.toml(), TOOL_CALL_TOML);
}

#[test]
fn a_stale_stream_opened_selects_the_stale_row() {
    let mut run = Run::new(RunConfig::default());
    let step = run.handle(Event::Start {
        run_id: "r".into(),
        history: vec![],
        input: vec![Message::user("hi")],
        session_turns: 0,
    });
    assert!(step.guard_violations().is_empty());
    assert_eq!(step.guard_checks.len(), step.transitions.len());
    let stale = run.handle(Event::StreamOpened {
        attempt: AttemptId {
            run_id: "r".into(),
            model_call_index: 1,
            attempt: 7,
        },
    });
    assert_eq!(stale.guard_checks.len(), 1);
    assert_eq!(
        stale.guard_checks[0].expected,
        Some("live_stale_stream_opened")
    );
    assert!(stale.guard_violations().is_empty());
    assert_eq!(stale.to.to_string(), "Executing.Calling");
}

#[test]
fn the_validator_rejects_broken_charts() {
    assert!(Chart::parse(REACT_TOML).is_ok());
    assert!(Chart::parse(PROCESS_TOML).is_ok());
    let cases = [
        (
            "unknown target state",
            REACT_TOML.replacen("to = \"Observing\"", "to = \"Observed\"", 1),
        ),
        (
            "unknown guard",
            PROCESS_TOML.replacen("guard = \"current\"", "guard = \"currant\"", 1),
        ),
        (
            "unused guard",
            PROCESS_TOML.replace("guard = \"tools_to_drain\"\n", ""),
        ),
        (
            "duplicate row id",
            REACT_TOML.replacen("id = \"compacting_failed\"", "id = \"compacting_done\"", 1),
        ),
        (
            "unknown source state",
            PROCESS_TOML.replacen("from = \"Idle\"", "from = \"Idel\"", 1),
        ),
    ];
    for (what, text) in cases {
        assert_ne!(text, REACT_TOML);
        assert!(Chart::parse(&text).is_err(), "{what}: accepted");
    }
}

/// The oracle reports two guards that hold together unless the earlier row declares that it
/// wins over the later; a report makes the verdict fail and names both rows.
#[test]
fn an_undeclared_overlap_is_reported() {
    let holding = [
        "planning_max_steps",
        "planning_limit_stop",
        "planning_compact",
    ];
    assert_eq!(
        undeclared_overlap(&[], &holding),
        Some(("planning_max_steps", "planning_limit_stop"))
    );
    let wins = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(w, l)| (w.to_string(), l.to_string()))
            .collect()
    };
    // Declared the wrong way round: still an overlap (the earlier row must be the winner).
    assert_eq!(
        undeclared_overlap(
            &wins(&[("planning_limit_stop", "planning_max_steps")]),
            &holding[..2]
        ),
        Some(("planning_max_steps", "planning_limit_stop"))
    );
    // Every pair must be declared: max_steps over both is not enough.
    let partial = wins(&[
        ("planning_max_steps", "planning_limit_stop"),
        ("planning_max_steps", "planning_compact"),
    ]);
    assert_eq!(
        undeclared_overlap(&partial, &holding),
        Some(("planning_limit_stop", "planning_compact"))
    );
    // The embedded chart declares all three.
    assert_eq!(
        undeclared_overlap(declared_wins(MachineKind::React), &holding),
        None
    );
    // Without the chart's declaration, the same guards are an overlap.
    let undeclared =
        REACT_TOML.replacen("wins_over = [\"planning_limit_stop\", ", "wins_over = [", 1);
    assert_ne!(undeclared, REACT_TOML);
    let chart = Chart::parse(&undeclared).expect("still a valid chart");
    assert_eq!(
        undeclared_overlap(&chart.declared_wins(), &holding),
        Some(("planning_max_steps", "planning_limit_stop"))
    );
    // One guard holding is never an overlap.
    assert_eq!(undeclared_overlap(&[], &holding[..1]), None);
    // The verdict fails and says which rows overlap, even when the row taken is right.
    let c = GuardCheck {
        machine: MachineKind::React,
        from: "Planning",
        event: "Plan",
        taken: Some("planning_max_steps"),
        expected: Some("planning_max_steps"),
        overlap: Some(("planning_max_steps", "planning_limit_stop")),
    };
    assert!(!c.holds());
    let text = c.to_string();
    assert!(
        text.contains("planning_limit_stop") && text.contains("wins_over"),
        "{text}"
    );
    assert!(GuardCheck { overlap: None, ..c }.holds());
}

/// `wins_over` names a later row for the same event in the winner's state, and comes with a
/// `why`; a chart without any `wins_over` still parses (the field is optional).
#[test]
fn the_validator_checks_wins_over() {
    let chart = Chart::parse(REACT_TOML).expect("react");
    assert!(chart
        .declared_wins()
        .contains(&("planning_subtask".into(), "planning_compact".into())));
    let decl = "wins_over = [\"planning_compact\"]\nwhy = ";
    assert!(REACT_TOML.contains(decl));
    let cases = [
        (
            "winner tried after the loser",
            REACT_TOML.replacen(decl, "wins_over = [\"planning_max_steps\"]\nwhy = ", 1),
        ),
        (
            "loser for another event",
            REACT_TOML.replacen(decl, "wins_over = [\"observing_stop\"]\nwhy = ", 1),
        ),
        (
            "unknown loser",
            REACT_TOML.replacen(decl, "wins_over = [\"planning_nothing\"]\nwhy = ", 1),
        ),
        (
            "no why",
            REACT_TOML.replacen("why = \"a queued subtask", "# why = \"a queued subtask", 1),
        ),
    ];
    for (what, text) in cases {
        assert_ne!(text, REACT_TOML, "{what}");
        assert!(Chart::parse(&text).is_err(), "{what}: accepted");
    }
    // Backward compatible: the same chart with every declaration removed parses.
    let bare: String = REACT_TOML
        .lines()
        .filter(|l| !l.starts_with("wins_over = ") && !l.starts_with("why = "))
        .map(|l| format!("{l}\n"))
        .collect();
    let bare = Chart::parse(&bare).expect("a chart without wins_over");
    assert!(bare.declared_wins().is_empty());
    // A leaf row may win over its superstate's row for the same event, not the other way.
    let leaf_wins = REACT_TOML.replacen(
        "id = \"executing_abort_drain\"",
        "id = \"executing_abort_drain\"\nwins_over = [\"active_abort\"]\nwhy = \"leaf first\"",
        1,
    );
    assert_ne!(leaf_wins, REACT_TOML);
    assert!(Chart::parse(&leaf_wins).is_ok());
    let super_wins = REACT_TOML.replacen(
        "id = \"active_abort\"",
        "id = \"active_abort\"\nwins_over = [\"executing_abort_drain\"]\nwhy = \"no\"",
        1,
    );
    assert_ne!(super_wins, REACT_TOML);
    assert!(Chart::parse(&super_wins).is_err());
}
