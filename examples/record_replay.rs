//! Record and replay: a run's trace written as JSON Lines, read back and replayed identically
//! offline, then what-if replays of the same recording under changed configurations. No key,
//! no network.
//!
//! Run it: `cargo run --example record_replay`
//!
//! A trace holds every input of a run (prompt, model replies, tool results, timer firings),
//! every transition and every effect of the pure core. Replay feeds the recorded inputs to a
//! fresh machine and checks it makes the same decisions; a what-if replay feeds them to a
//! machine built from a *changed* configuration and reports where behaviour first differs and
//! how the outcome changes, without calling the model or the tools again. The command line
//! does the same: `agentloop replay run.jsonl` and `agentloop replay run.jsonl --set
//! retry.max_retries=0`.

use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::Agent;
use agentloop::trace::{self, replay};
use agentloop::{Message, Outcome};
use agentloop_core::react::DeciderRegistry;
use agentloop_trace_tools::whatif::{apply_setting, parse_assignment, what_if};

/// The first model call is rate-limited once (HTTP 429) and retried; the model then calls the
/// calculator and answers with its result.
const SCRIPT: &str = r#"{"turns": [
  {"errors": [{"status": 429, "retry_after_ms": 10}],
   "text": "Let me calculate that.",
   "tool_calls": [{"name": "calculator", "arguments": {"expression": "{{prompt_expression}}"}}]},
  {"text": "The answer is {{last_tool_result}}."}
]}"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. Record.
    let agent = Agent::builder()
        .model(ScriptedModel::from_json_str(SCRIPT, "record_replay")?)
        .builtin_tools()
        .configure(|c| c.step.retry.initial_backoff_ms = 10) // retry at once, not after 1 s
        .build();
    let out = agent
        .run_with("s1", vec![Message::user("What is 6*7?")], None, true)
        .await?;
    let answer = out.result.final_text().unwrap_or_default();
    println!("recorded run: {:?} {answer:?}", out.result.outcome);
    assert_eq!(answer, "The answer is 42.");
    let trace = out.trace.expect("recorded");

    // 2. Write it as JSON Lines (a header line, then one record a line) and load it back.
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("run.jsonl");
    trace::write(&trace, &path)?;
    let lines = std::fs::read_to_string(&path)?.lines().count();
    let loaded = trace::load(&path)?;
    println!("wrote {} ({lines} lines), loaded it back", path.display());
    assert_eq!(loaded, trace);

    // 3. Replay: the same inputs, the same transitions and effects, offline.
    match replay(&loaded) {
        None => println!("replay: identical ({} records)", loaded.records.len()),
        Some(d) => return Err(format!("replay diverged:\n{}", d.diff()).into()),
    }

    // 4. What-if: the same recorded inputs under a changed configuration.
    let mut changed_outcomes = 0;
    for setting in ["parallel_tools=false", "retry.max_retries=0", "max_steps=1"] {
        let mut config = loaded.header.config.clone();
        let (key, value) = parse_assignment(setting)?;
        apply_setting(&mut config, key, value)?;
        let w = what_if(&loaded, config, &DeciderRegistry::new())?;
        println!("\nwhat-if {setting}:");
        match (&w.divergence, &w.cause) {
            (None, _) => println!("  behaviour unchanged"),
            (Some(d), Some((i, input))) => println!(
                "  behaviour first differs at record {} (in the step of input {i}: {input})",
                d.index
            ),
            (Some(d), None) => println!("  behaviour first differs at record {}", d.index),
        }
        if let Some(m) = &w.missing {
            println!("  replay ended: {m}");
        }
        println!("  recorded: {}", w.recorded);
        println!("  changed:  {}", w.replayed);
        if w.replayed.outcome != w.recorded.outcome || w.replayed.reason != w.recorded.reason {
            changed_outcomes += 1;
        }
        match setting {
            // One tool call: running tools one at a time changes nothing.
            "parallel_tools=false" => assert!(w.divergence.is_none(), "{}", w.diff),
            // Without retries the 429 fails the run.
            "retry.max_retries=0" => {
                assert_eq!(w.replayed.outcome, Some(Outcome::Failed));
                assert_eq!(w.replayed.retries, 0);
            }
            // One step: the run stops after the tool call, before the answer.
            _ => {
                assert!(w.divergence.is_some());
                assert_ne!(w.replayed.final_text, w.recorded.final_text);
            }
        }
    }
    assert_eq!(changed_outcomes, 2);
    Ok(())
}
