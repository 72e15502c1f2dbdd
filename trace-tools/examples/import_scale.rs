//! `trace import` at scale: a chat-completions recording of N
//! turns (an assistant tool call and its result each) imported with
//! [`openai_chat_to`](agentloop_trace_tools::import::openai_chat_to), each record encoded as a
//! JSON line ([`TraceEncoder`]) and dropped, as `agentloop trace import` writes them to its file.
//!
//! `/usr/bin/time -v cargo run --release -p agentloop-trace-tools --example import_scale -- [N]`
//! (default 1000). Prints the input and output sizes and the time; the maximum resident set
//! size comes from `time -v`. Memory and the output stay linear in N: each `call_model` record
//! carries only the messages added since the previous request.
#![allow(clippy::disallowed_methods)] // a benchmark reads the wall clock

use std::time::Instant;

use agentloop_core::trace::TraceEncoder;
use agentloop_trace_tools::import::{openai_chat_to, ImportOptions};
use serde_json::{json, Value};

/// The recording: a system prompt, a user message, N turns, a final answer.
fn recording(n: usize) -> Value {
    let mut m = vec![
        json!({"role": "system", "content": "sys"}),
        json!({"role": "user", "content": "go"}),
    ];
    for i in 0..n {
        m.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{i}"), "type": "function",
             "function": {"name": "calc", "arguments": format!("{{\"x\":{i}}}")}}]}));
        m.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": i.to_string()}));
    }
    m.push(json!({"role": "assistant", "content": "done"}));
    Value::Array(m)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let input = recording(n);
    let input_bytes = input.to_string().len();
    let t = Instant::now();
    let mut line = Vec::new();
    let mut bytes = 0usize;
    let mut encoder = TraceEncoder::new();
    let streamed = openai_chat_to(&input, &ImportOptions::default(), |record| {
        line.clear();
        encoder.encode(record, &mut line)?;
        bytes += line.len();
        Ok::<(), serde_json::Error>(())
    });
    let elapsed = t.elapsed();
    match streamed {
        Ok(s) => println!(
            "{n} turns: input {input_bytes} bytes, {} records, {bytes} bytes of trace, {:.2} s ({})",
            s.records,
            elapsed.as_secs_f64(),
            s.summary
        ),
        Err(e) => println!("{n} turns: failed: {e}"),
    }
}
