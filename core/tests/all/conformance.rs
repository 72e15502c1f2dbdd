//! R-VER-1: arbitrary event sequences through both machines. Sequences mix "smart" events
//! (following the effects: current attempt from the last `CallModel`, timer from the last
//! `StartTimer`, running calls from `RunTool`, pending approvals from `RequestApproval`) with
//! noise (every event kind, invalid in the current state, with stale or unknown ids). After
//! every step the harness checks (see `tests/support/harness.rs`):
//!
//! - every transition is a chart row (`Transition::conforms`), transitions of each machine
//!   chain, and the step's `from`/`to` match the machine's state before/after;
//! - an unhandled event changes nothing and requests nothing; terminal states absorb;
//! - every committed tool call gets exactly one result before the next `CallModel`, no result
//!   without a call, no call runs twice, no call runs before its start is persisted;
//! - an assistant message is committed only on `Done` of the current attempt, with exactly the
//!   text and tool calls of that attempt's deduped deltas; a repeated seq emits nothing;
//! - exactly one terminal outcome: `result()` appears once, never changes, with exactly one
//!   `run_end`/`run_error`/`agent_abort`.

use agentloop_testkit::harness;
use agentloop_testkit::strategies;

use harness::{Action, ProcessHarness, RunHarness, Setup};
use proptest::prelude::*;

fn drive_run(setup: Setup, actions: &[Action]) -> RunHarness {
    let mut h = RunHarness::new(setup);
    for a in actions {
        let _ = h.act(*a);
    }
    h
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    /// Mostly effect-following sequences: reaches retries, tools, approvals, compaction, ends.
    #[test]
    fn run_follows_chart_and_invariants(setup in strategies::setup(), actions in strategies::actions(8, 250)) {
        drive_run(setup, &actions);
    }

    /// Noise-heavy sequences: most events are invalid or stale in the state they arrive in.
    #[test]
    fn run_survives_noise(setup in strategies::setup(), actions in strategies::actions(3, 150)) {
        drive_run(setup, &actions);
    }

    /// The inner machine on its own.
    #[test]
    fn process_follows_chart_and_invariants(setup in strategies::setup(), actions in strategies::actions(7, 150)) {
        let mut h = ProcessHarness::new(setup);
        for a in &actions {
            let _ = h.act(*a);
        }
    }
}

/// The generator reaches the deep states: a run that only follows the effects ends, and most
/// such runs get past tools (a sanity check that the properties above are not vacuous).
#[test]
fn smart_runs_end_and_reach_tools() {
    let mut ended = 0;
    let mut with_tools = 0;
    for seed in 0..200u64 {
        let mut rng = harness::SplitMix(seed);
        let mut h = RunHarness::new(Setup::from_byte(rng.byte()));
        h.keep_log = false;
        for _ in 0..400 {
            if h.run.is_terminal() {
                break;
            }
            let _ = h.act(Action::Smart(rng.byte()));
        }
        ended += usize::from(h.run.is_terminal());
        with_tools += usize::from(!h.ledger.ran.is_empty());
    }
    assert!(ended >= 190, "only {ended}/200 smart runs ended");
    assert!(
        with_tools >= 80,
        "only {with_tools}/200 smart runs ran a tool"
    );
}

// ---------------------------------------------------------------------------------------------
// Regressions for bugs the properties found. The first four are fixed on main; the last one
// fails until src/ is fixed (`HARNESS_AVOID_KNOWN_BUGS=1` makes the generators sidestep it).
// ---------------------------------------------------------------------------------------------

fn start(h: &mut RunHarness) {
    let _ = h.act(Action::Start {
        long_history: false,
    });
}

/// After `StoreWriteFailed` the run is `Failed` (terminal), but its inner step is kept alive:
/// a later `Abort` is forwarded to it, moves it `Streaming -> Error` and requests effects
/// (`CancelModel`; with running tools also `KillTool` and a `Persist` of aborted results after
/// the store already failed), while the step says `unhandled`.
#[test]
fn abort_after_store_failure_is_absorbed() {
    let mut h = RunHarness::new(Setup::default());
    start(&mut h);
    let _ = h.act(Action::StreamOpened(harness::AttemptPick::Current));
    let _ = h.act(Action::StoreWriteFailed);
    assert!(h.run.is_terminal());
    let before = h.run.state();
    let step = h.run.handle(agentloop_core::Event::Abort {
        reason: "user".into(),
        kill: agentloop_core::event::KillPolicy::default(),
    });
    assert!(step.unhandled);
    assert_eq!(step.to, before, "a terminal run changed state on Abort");
    assert!(
        step.effects.is_empty(),
        "a terminal run requested {:?}",
        step.effects
    );
}

/// Same bug with tools running: the abort persists results after the store failed.
#[test]
fn abort_after_store_failure_persists_nothing() {
    use harness::{ArgsPick, AttemptPick, DeltaPick, SeqPick, ToolPick};
    let mut h = RunHarness::new(Setup::default());
    start(&mut h);
    let _ = h.act(Action::StreamOpened(AttemptPick::Current));
    let _ = h.act(Action::Delta(
        AttemptPick::Current,
        SeqPick::Next,
        DeltaPick::ToolCall(ToolPick::Known(0), ArgsPick::Valid),
    ));
    let _ = h.act(Action::Done(AttemptPick::Current));
    assert_eq!(h.feeder.running.len(), 1, "the calculator call runs");
    let _ = h.act(Action::StoreWriteFailed);
    let step = h.run.handle(agentloop_core::Event::Abort {
        reason: "user".into(),
        kill: agentloop_core::event::KillPolicy::default(),
    });
    let persists: Vec<_> = step
        .effects
        .iter()
        .filter(|e| matches!(e, agentloop_core::Effect::Persist { .. }))
        .collect();
    assert!(
        persists.is_empty(),
        "persisted after the store failed: {persists:?}"
    );
}

/// `absorb_step` does `session_turns += 1` unchecked: a `Resume` carrying `u32::MAX` session
/// turns (e.g. from a corrupted store or a hand-edited trace) panics in debug builds.
#[test]
fn resume_with_extreme_session_turns_does_not_panic() {
    let mut run = agentloop_core::Run::new(Setup::default().run_config());
    let _ = run.handle(agentloop_core::Event::Resume {
        run_id: "run-1".into(),
        history: vec![agentloop_core::Message::user("hi")],
        session_turns: u32::MAX,
        committed_steps: 1,
        pending: None,
    });
    let attempt = agentloop_core::AttemptId {
        run_id: "run-1".into(),
        model_call_index: 2,
        attempt: 1,
    };
    let _ = run.handle(agentloop_core::Event::StreamOpened {
        attempt: attempt.clone(),
    });
    let done = run.handle(agentloop_core::Event::done(attempt));
    assert_eq!(done.to.react, agentloop_core::chart::ReactState::Finishing);
    let _ = run.handle(agentloop_core::Event::RunEndCommitted);
    assert!(run.is_terminal());
}

/// `Process::resume` loads the message into the step's data before the machine decides: called
/// outside `Idle` it is reported unhandled but has replaced the step's tool slots, so a later
/// `Abort` persists "aborted" results for calls this step never committed.
#[test]
fn process_resume_outside_idle_changes_nothing() {
    let mut h = ProcessHarness::new(Setup::default());
    h.resume_only_idle = false;
    let _ = h.act(Action::Start {
        long_history: false,
    });
    let _ = h.act(Action::Resume {
        pending: true,
        steps: 1,
    });
    let _ = h.act(Action::Abort);
}

/// An abort whose kill policy leaves tools running emits `agent_abort` at once and drains; a
/// store failure while draining then ends the run `Failed` and emits `run_error` too: two
/// terminal outcome events for one run (R-VER-1: exactly one terminal outcome).
#[test]
fn store_failure_while_draining_emits_one_end() {
    use harness::{ArgsPick, AttemptPick, DeltaPick, SeqPick, ToolPick};
    let mut h = RunHarness::new(Setup::default());
    start(&mut h);
    let _ = h.act(Action::StreamOpened(AttemptPick::Current));
    let _ = h.act(Action::Delta(
        AttemptPick::Current,
        SeqPick::Next,
        DeltaPick::ToolCall(ToolPick::Known(0), ArgsPick::Valid),
    ));
    let _ = h.act(Action::Done(AttemptPick::Current));
    let _ = h.act(Action::AbortKill(2)); // kill policy `none`: the calculator keeps running
    assert_eq!(
        h.run.state().process,
        Some(agentloop_core::chart::ProcessState::Draining)
    );
    let _ = h.act(Action::StoreWriteFailed);
}
