//! The model checker at a small bound: every property holds, every `sometimes` example is
//! reached, and the checker explored at least a floor of states (a model that stops
//! generating states would pass every `always` vacuously).

use agentloop_verify::check::{check_run, check_session, run_cases, Verdict};

fn assert_ok(report: &agentloop_verify::check::Report, floor: usize) {
    assert!(report.ok(), "{}", report.render());
    assert!(
        report
            .properties
            .iter()
            .all(|(_, _, v)| *v == Verdict::Holds),
        "{}",
        report.render()
    );
    assert!(
        report.unique_states >= floor,
        "only {} states explored (floor {floor}):\n{}",
        report.unique_states,
        report.render()
    );
}

#[test]
fn run_model_holds_at_a_small_bound() {
    let case = &run_cases()[0];
    let report = check_run(case.name, case.setup, 8);
    assert_eq!(report.depth, 8, "{}", report.render());
    assert_ok(&report, 20_000);
}

#[test]
fn session_model_holds_at_a_small_bound() {
    let report = check_session(8);
    assert_eq!(report.depth, 8, "{}", report.render());
    assert_ok(&report, 100);
}
