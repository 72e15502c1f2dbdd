//! Arbitrary bytes → a setup and an event sequence (effect-following and noise, see
//! `tests/support/fuzz_decode.rs`) into the outer `Run`; every step is checked against
//! the chart and the invariants of `agentloop_testkit::harness` (a violation panics).

#![no_main]

use libfuzzer_sys::fuzz_target;


use agentloop_testkit::fuzz_decode;

fuzz_target!(|data: &[u8]| {
    fuzz_decode::react_events(data);
});
