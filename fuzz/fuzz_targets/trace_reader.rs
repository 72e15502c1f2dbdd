//! Arbitrary bytes into the trace reader (`Trace::parse`); a trace that parses is replayed.
//! Neither may panic; parse errors are fine.

#![no_main]

use libfuzzer_sys::fuzz_target;


use agentloop_testkit::fuzz_decode;

fuzz_target!(|data: &[u8]| {
    let _ = fuzz_decode::trace_reader(data);
});
