//! Arbitrary bytes as an Inspect AI eval log (`.eval` zip or JSON) into the importer: refused
//! with a typed error or imported, never a panic, and every imported sample replays
//! identically.

#![no_main]

use libfuzzer_sys::fuzz_target;

use agentloop_testkit::fuzz_decode;

fuzz_target!(|data: &[u8]| {
    let _ = fuzz_decode::inspect_log(data);
});
