//! 100,000 seeded random events through the `Run` facade, across many runs and setups: no
//! panic, every transition is a chart row, the step reports the states before and after, and a
//! terminal run stays terminal (each run gets a few events after its end). Events are decoded from random bytes exactly as the fuzz targets
//! decode theirs (`tests/support/fuzz_decode.rs`): about 60% follow the effects, the rest are
//! noise (any event, stale or unknown ids, invalid in the current state).

use agentloop_testkit::fuzz_decode;
use agentloop_testkit::harness;

use agentloop_core::Run;
use fuzz_decode::{action, Bytes};
use harness::{avoid_known_bugs, sidestep_known_bugs, Action, Feeder, Setup, SplitMix};

const EVENTS: usize = 100_000;

#[test]
fn hundred_thousand_random_events() {
    let mut rng = SplitMix(0xa9e7_1009);
    let mut fed = 0;
    let mut runs = 0;
    let mut terminal_runs = 0;
    let mut unhandled = 0;
    while fed < EVENTS {
        let setup = Setup::from_byte(rng.byte());
        let mut run = Run::new(setup.run_config());
        let mut feeder = Feeder::default();
        let len = 20 + (rng.next_u64() % 300) as usize;
        let bytes: Vec<u8> = (0..len * 2).map(|_| rng.byte()).collect();
        let mut src = Bytes::new(&bytes);
        runs += 1;
        let mut after_end = 0;
        for _ in 0..len {
            // A few events into the ended run check absorption; then the next run.
            if fed == EVENTS || after_end == 3 {
                break;
            }
            after_end += usize::from(run.is_terminal());
            let a = match action(&mut src) {
                Action::Smart(b) => {
                    let s = run.state();
                    feeder.smart(b, Some(s.react), s.process)
                }
                a => a,
            };
            let mut event = feeder.event(a);
            if avoid_known_bugs() {
                event = sidestep_known_bugs(event, run.state());
            }
            let before = run.state();
            let was_terminal = run.is_terminal();
            let step = run.handle(event.clone());
            fed += 1;
            let ctx = || format!("run {runs}, event {fed}: {event:?} in {before}");
            assert_eq!(step.from, before, "{}", ctx());
            assert_eq!(step.to, run.state(), "{}", ctx());
            for t in &step.transitions {
                assert!(t.conforms(), "{}: not a chart row: {t:?}", ctx());
            }
            if was_terminal {
                assert!(step.unhandled, "{}: a terminal run accepted it", ctx());
                assert_eq!(step.to.react, before.react, "{}", ctx());
            }
            unhandled += usize::from(step.unhandled);
            feeder.observe(&step.effects);
        }
        terminal_runs += usize::from(run.is_terminal());
    }
    assert_eq!(fed, EVENTS);
    // The mix is meaningful: many runs end, and a fair share of events are rejected.
    assert!(
        terminal_runs * 2 > runs,
        "{terminal_runs}/{runs} runs ended"
    );
    assert!(
        unhandled > EVENTS / 20 && unhandled < EVENTS / 2,
        "{unhandled} unhandled events: the mix is off"
    );
    println!("{EVENTS} events over {runs} runs ({terminal_runs} ended, {unhandled} unhandled)");
}
