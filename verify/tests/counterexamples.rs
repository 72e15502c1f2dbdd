//! Input sequences the model checker printed while the properties were written, replayed as
//! scenarios. Each was a counterexample to a first, too strict reading of the specification;
//! the test pins the behaviour the machine has and the property now allows, with the reason.

use agentloop_core::Outcome;
use agentloop_testkit::harness::Setup;
use agentloop_verify::run_model::{CallKind, ErrorClass, Input, Replayed};

fn setup() -> Setup {
    Setup {
        max_steps: 2,
        max_retries: 1,
        doom_loop: false,
        ..Setup::default()
    }
}

fn no_violations(r: &Replayed) {
    let v: Vec<_> = r.spec.violations.iter().collect();
    assert!(v.is_empty(), "violations: {v:?}");
}

/// A step re-requested after an overflow and its compaction gets its retry budget again:
/// its second retry (attempt 4) is allowed with `max_retries` 1, because the compacted
/// request is a new request (compaction itself cannot loop, it fails when it cannot shrink).
#[test]
fn retry_budget_starts_again_after_compaction() {
    use Input::*;
    let r = Replayed::replay(
        &setup(),
        &[
            Start,
            Error(ErrorClass::RateLimited),
            Timer,
            Error(ErrorClass::Overflow),
            Compacted,
            Error(ErrorClass::RateLimited),
            Timer,
        ],
    );
    assert_eq!(r.spec.attempt(), Some((1, 4)));
    assert!(!r.run.is_terminal());
    no_violations(&r);
}

/// An abort that arrives while the run-end entry of a failed run is being committed does not
/// turn the decided outcome into `Aborted`: the end stands, the abort is absorbed.
#[test]
fn abort_while_the_end_is_committed_keeps_the_outcome() {
    use Input::*;
    let mut r = Replayed::replay(&setup(), &[Start, Error(ErrorClass::Auth)]);
    assert!(r.spec.run_end_outstanding, "the failed run commits its end");
    r.feed(Abort);
    r.feed(StoreAck);
    let result = r.run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Failed);
    no_violations(&r);
}

/// The compaction threshold is checked before the step boundary merges steering, so a
/// request may carry the threshold plus the steering merged with it; the next step compacts.
#[test]
fn steering_merged_after_the_threshold_check() {
    use Input::*;
    let setup = Setup {
        compact_threshold: Some(3),
        ..setup()
    };
    let r = Replayed::replay(
        &setup,
        &[
            Start,
            Opened,
            Call(CallKind::Calculator),
            Done,
            Steer,
            Steer,
            Tool(true, 0),
        ],
    );
    assert_eq!(r.spec.attempt(), Some((2, 1)), "step 2 was requested");
    assert!(r.run.messages().len() > 3, "{:?}", r.run.messages());
    no_violations(&r);
}

/// A counterexample that was a real defect (property "no completion with a rejected typed
/// answer"): steering queued during the last step made Observing continue instead of acting
/// on the typed answer its check had rejected, and Planning then ended the run at
/// `max_steps` as *completed* with that answer. The run now fails with `output_invalid`
/// (chart row `planning_max_steps_rejected`).
#[test]
fn a_rejected_typed_answer_on_the_last_step_fails_even_with_steering_queued() {
    use Input::*;
    let setup = Setup {
        max_retries: 0,
        typed_output: Some(2),
        ask_user: true,
        gate_tools: true,
        ..setup()
    };
    let r = Replayed::replay(
        &setup,
        &[
            Start,
            Opened,
            Call(CallKind::Malformed),
            Done,
            Opened,
            Steer,
            Done,
            StoreAck,
        ],
    );
    let result = r.run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Failed, "{result:?}");
    assert_eq!(result.reason, "output_invalid");
    no_violations(&r);
}

/// An approval that nobody answers before its timer counts as a rejection (R-CTL-4): the call
/// gets a denied result and the run stops after the step, *completed* with `tool_rejected`,
/// under fair delivery and without its deadline. A chart that sent the timed-out call to
/// `Draining` (the abort path) left the run stuck in `Executing.Error` until the run's
/// deadline aborted it; the fair-delivery property no longer counts the deadline as progress,
/// so the model checker now reports that chart.
#[test]
fn an_approval_timeout_stops_the_run_without_its_deadline() {
    use Input::*;
    let mut r = Replayed::replay(
        &setup(),
        &[Start, Opened, Call(CallKind::Shell), Done, Timer],
    );
    assert!(r.drive_fair(20), "stuck in {}", r.run.state());
    let result = r.run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Completed, "{result:?}");
    assert_eq!(result.reason, "tool_rejected");
    assert!(matches!(
        &result.messages[2],
        agentloop_core::Message::Tool(t) if t.status == agentloop_core::ToolStatus::Denied
    ));
    no_violations(&r);
}
