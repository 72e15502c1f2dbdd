//! OpenAI Responses pipeline: arbitrary bytes and arbitrary read splits.
#![no_main]

use agentloop::provider::http::ProviderKind;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    agentloop::provider::fuzz::normalizer_target(ProviderKind::OpenAiResponses, data);
});
