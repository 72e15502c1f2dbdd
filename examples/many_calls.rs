//! One model turn with N parallel tool calls: the time to admit, run, settle and order them.
//!
//! A scripted model answers the prompt with N `calculator` calls (distinct expressions, so no
//! doom loop), then with a final text. The run goes through the whole runtime: the machines,
//! the driver with its call-order buffer, the in-memory store (every start marker and result is
//! persisted), and a [`Controller`](agentloop::runtime::Controller), so the partial-message
//! snapshot is refreshed after every event as it is for a session.
//!
//! `cargo run --release --example many_calls -- [N...] [--runs R] [--trace] [--openai]`
//! (defaults: 2500 5000 10000 20000, 3 runs each; `--trace` also records the trace).
//!
//! The scripted model does not go through [`ResponseLimits`](agentloop::provider::limits)
//! (they bound HTTP responses), so its N calls are not capped at `max_content_blocks`.
//!
//! `--openai` measures the wire side instead: a Chat Completions SSE body with N tool calls
//! (each in two fragments) through the SSE decoder, the OpenAI normalizer and the response
//! meter (`max_content_blocks` raised to N), then assembled into the message; no network.
#![allow(clippy::disallowed_methods)] // a benchmark reads the wall clock

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::provider::limits::ResponseLimits;
use agentloop::provider::openai::OpenAiNormalizer;
use agentloop::provider::scripted::ScriptedModel;
use agentloop::provider::sse::SsePipeline;
use agentloop::runtime::{Agent, Controller};
use agentloop::Outcome;
use agentloop::{Message, MessageDelta};
use agentloop_core::process::accumulate::MessageAssembler;

/// The script: turn 0 makes `n` calculator calls, turn 1 answers.
fn script(n: usize) -> ScriptedModel {
    let calls: Vec<serde_json::Value> = (0..n)
        .map(|i| serde_json::json!({"name": "calculator", "arguments": {"expression": format!("{i} + 1")}}))
        .collect();
    ScriptedModel::from_json(serde_json::json!({"turns": [
        {"text": "Computing.", "tool_calls": calls, "chunk_chars": 64},
        {"text": "Done."}
    ]}))
    .expect("a valid script")
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut sizes = Vec::new();
    let mut runs = 3usize;
    let mut record = false;
    let mut openai = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().ok_or("--runs needs a value")?.parse()?,
            "--trace" => record = true,
            "--openai" => openai = true,
            n => sizes.push(n.parse::<usize>()?),
        }
    }
    if sizes.is_empty() {
        sizes = vec![2_500, 5_000, 10_000, 20_000];
    }
    if openai {
        return decode_openai(&sizes, runs);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!("one turn with N parallel calculator calls, then a final answer ({runs} runs each)");
    for n in sizes {
        let model = Arc::new(script(n));
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let agent = Agent::builder()
                .model_arc(model.clone())
                .builtin_tools()
                .build();
            let controller = Controller::new();
            let start = Instant::now();
            let out = rt.block_on(agent.run_with(
                "s",
                vec![Message::user("compute")],
                Some(&controller),
                record,
            ))?;
            let elapsed = start.elapsed();
            if out.result.outcome != Outcome::Completed {
                return Err(format!("run did not complete: {:?}", out.result.reason).into());
            }
            let results = out
                .result
                .messages
                .iter()
                .filter(|m| matches!(m, Message::Tool(_)))
                .count();
            if results != n {
                return Err(format!("{results} tool results for {n} calls").into());
            }
            times.push(elapsed);
        }
        times.sort();
        let s = |d: Duration| d.as_secs_f64();
        println!(
            "N = {n:>6}: median {:.3} s, min {:.3} s, max {:.3} s",
            s(times[times.len() / 2]),
            s(times[0]),
            s(times[times.len() - 1])
        );
    }
    Ok(())
}

/// A Chat Completions stream with `n` tool calls, each in two fragments.
fn openai_body(n: usize) -> Vec<u8> {
    let mut body = String::new();
    for i in 0..n {
        let head = serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [{
            "index": i, "id": format!("call_{i}"), "type": "function",
            "function": {"name": "calculator", "arguments": "{\"expression\": "}}]}}]});
        let tail = serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [{
            "index": i, "function": {"arguments": format!("\"{i} + 1\"}}")}}]}}]});
        body.push_str(&format!("data: {head}\n\ndata: {tail}\n\n"));
    }
    body.push_str(
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    );
    body.push_str("data: [DONE]\n\n");
    body.into_bytes()
}

fn decode_openai(sizes: &[usize], runs: usize) -> Result<(), Box<dyn std::error::Error>> {
    println!("OpenAI SSE body with N tool calls: decode + normalize + meter + assemble ({runs} runs each)");
    for &n in sizes {
        let body = openai_body(n);
        let limits = ResponseLimits {
            max_content_blocks: n + 8,
            ..ResponseLimits::default()
        };
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let start = Instant::now();
            let mut pipe = SsePipeline::with_limits(OpenAiNormalizer::new(), limits);
            let mut acc = MessageAssembler::new();
            let mut out = Vec::new();
            for read in body.chunks(16 * 1024) {
                out.clear();
                pipe.feed_into(read, &mut out);
                for d in &out {
                    acc.push(d);
                }
            }
            for d in pipe.finish() {
                acc.push(&d);
            }
            if let Some(MessageDelta::Error { error }) = out.last() {
                return Err(format!("decode failed: {error}").into());
            }
            let message = acc.message();
            let elapsed = start.elapsed();
            let valid = message
                .tool_calls
                .iter()
                .filter(|c| c.invalid_arguments.is_none())
                .count();
            if valid != n {
                return Err(format!("{valid} valid tool calls decoded for {n}").into());
            }
            times.push(elapsed);
        }
        times.sort();
        let s = |d: Duration| d.as_secs_f64();
        println!(
            "N = {n:>6} ({:.1} MB): median {:.3} s, min {:.3} s, max {:.3} s",
            body.len() as f64 / 1e6,
            s(times[times.len() / 2]),
            s(times[0]),
            s(times[times.len() - 1])
        );
    }
    Ok(())
}
