//! Quickstart: an agent with the offline demo model and the built-in tools answers two prompts
//! of one session, and the recorded trace replays identically. No key, no network.
//!
//! Run it: `cargo run --example quickstart`
//!
//! The demo model ([`ScriptedModel::demo`]) answers each prompt holding arithmetic by calling
//! the `calculator` tool and then reporting its result. Swap it for a real model with
//! `agentloop::provider::http::build_model(..)`; nothing else changes.

use agentloop::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let agent = Agent::builder() // typestate: without .model(..) there is no .build()
        .model(ScriptedModel::demo()) // offline: a scripted model, deterministic
        .builtin_tools() // calculator, read_file, append_line (tools are opt-in)
        .max_steps(5)
        .build();

    // One prompt, recorded: `true` keeps a trace of every input, transition and effect.
    let out = agent
        .run_with("session-1", vec![Message::user("What is 2+3?")], None, true)
        .await?;
    let answer = out.result.final_text().unwrap_or_default();
    println!("What is 2+3?  -> {answer}");
    assert_eq!(answer, "The answer is 5.");

    // The trace replays identically, offline: the pure core makes the same decisions again.
    let trace = out.trace.expect("recorded");
    assert!(agentloop::trace::replay(&trace).is_none());
    println!(
        "trace: {} records, replays identically",
        trace.records.len()
    );

    // A second prompt in the same session (the history is kept by the agent's store).
    let out = agent.run("session-1", "And 10*4?").await?;
    let answer = out.result.final_text().unwrap_or_default();
    println!("And 10*4?     -> {answer}");
    assert_eq!(answer, "The answer is 40.");
    Ok(())
}
