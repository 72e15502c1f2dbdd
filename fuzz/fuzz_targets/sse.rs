//! SSE decoder: arbitrary bytes and arbitrary read splits (see `agentloop::provider::fuzz`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    agentloop::provider::fuzz::sse_target(data);
});
