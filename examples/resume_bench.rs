//! End-to-end resume time of a 10,000-entry session: `Agent::resume_with` on a fresh
//! `FileStore` (open, lock, load and validate the file, check/repair, rebuild the history,
//! run the machines, one scripted model step, persist the answer and the run end with fsync).
//!
//! `cargo run --release --example resume_bench -- [ENTRIES] [ITERATIONS] [DIR]`
//! (defaults: 10000, 20, a temporary directory).
#![allow(clippy::disallowed_methods)] // a benchmark reads the wall clock

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::Agent;
use agentloop::store::{Entry, FileStore};
use agentloop::Outcome;
use agentloop::{AssistantMessage, Message, ToolCall, ToolResult, ToolStatus};

/// One interrupted run: the user input, then `steps` steps of (assistant with one call,
/// start marker, result); the next step was never committed.
fn session(entries: usize) -> Vec<Entry> {
    let run_id = "run-bench".to_string();
    let mut out = vec![Entry::UserInput {
        run_id: run_id.clone(),
        message: Message::user("append many lines"),
    }];
    let mut step = 0u32;
    while out.len() + 3 <= entries {
        step += 1;
        let id = format!("call-{step}");
        out.push(Entry::Assistant {
            run_id: run_id.clone(),
            model_call_index: step,
            message: AssistantMessage {
                text: format!("Appending line {step}."),
                tool_calls: vec![ToolCall::from_raw(
                    id.clone(),
                    "append_line",
                    &format!(r#"{{"path":"notes.txt","line":"line {step}"}}"#),
                )],
                ..Default::default()
            },
        });
        out.push(Entry::ToolStarted {
            run_id: run_id.clone(),
            tool_call_id: id.clone(),
            name: "append_line".into(),
        });
        out.push(Entry::ToolResult {
            run_id: run_id.clone(),
            result: ToolResult {
                tool_call_id: id.clone(),
                name: "append_line".into(),
                content: format!("appended 1 line (call {id})"),
                status: ToolStatus::Completed,
            },
        });
    }
    out
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let entries: usize = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(10_000);
    let iterations: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(20);
    let given = args.next().map(PathBuf::from);
    let remove = given.is_none();
    let tmp = tempfile_dir(given)?;

    // The template session file.
    let template = tmp.join("template");
    let store = FileStore::open(&template)?;
    let all = session(entries);
    for e in &all {
        store.append_blocking("s", e)?;
    }
    store.close("s")?;
    drop(store);
    let steps = all
        .iter()
        .filter(|e| matches!(e, Entry::Assistant { .. }))
        .count();
    let turns: Vec<serde_json::Value> = (0..=steps)
        .map(|_| serde_json::json!({"text": "All lines appended."}))
        .collect();
    let model = Arc::new(ScriptedModel::from_json(
        serde_json::json!({ "turns": turns }),
    )?);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut loads = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        let (loaded, _) = FileStore::open(&template)?.load_blocking("s")?;
        loads.push(start.elapsed());
        assert_eq!(loaded.len(), all.len());
    }
    loads.sort();
    let mut times = Vec::with_capacity(iterations);
    for i in 0..iterations {
        let dir = tmp.join(format!("run-{i}"));
        std::fs::create_dir_all(&dir)?;
        std::fs::copy(template.join("s.jsonl"), dir.join("s.jsonl"))?;
        let start = Instant::now();
        let store = Arc::new(FileStore::open(&dir)?);
        let _lock = store.lock("s")?;
        let agent = Agent::builder()
            .model_arc(model.clone())
            .builtin_tools()
            .store(store.clone())
            .configure(|c| {
                c.max_steps = u32::MAX;
                c.compact_threshold = None;
                c.context_budget_tokens = None;
            })
            .build();
        let out = rt.block_on(agent.resume("s"))?;
        let elapsed = start.elapsed();
        if out.result.outcome != Outcome::Completed {
            return Err(format!("resume did not complete: {:?}", out.result.reason).into());
        }
        times.push(elapsed);
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "resume_with on a {}-entry session ({} steps), {} runs: median {:.1} ms, min {:.1} ms, max {:.1} ms",
        all.len(),
        steps,
        iterations,
        ms(times[times.len() / 2]),
        ms(times[0]),
        ms(times[times.len() - 1])
    );
    println!(
        "  of which loading and validating the file: median {:.1} ms",
        ms(loads[loads.len() / 2])
    );
    if remove {
        std::fs::remove_dir_all(&tmp)?;
    }
    Ok(())
}

fn tempfile_dir(dir: Option<PathBuf>) -> std::io::Result<PathBuf> {
    let dir = dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("agentloop-resume-bench-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
