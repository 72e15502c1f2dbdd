//! Steps per second as a session grows: one long run of N steps (each step one cheap
//! `calculator` call), measured in windows around steps 100, 1,000 and 10,000.
//!
//! The model answers in O(1) (it reads only the request's step number), so the figures show
//! the per-step work of the runtime: the machines, the driver, the store and the request the
//! machine builds. No compaction (no budget, no message cap); `max_steps` is N + 1.
//!
//! `cargo run --release --example step_rate -- [N] [--stores memory,batched,sync]`
//! (defaults: N = 10,100 and every store; a window is reported when the run reaches it).
#![allow(clippy::disallowed_methods)] // a benchmark reads the wall clock

use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;

use agentloop::model::{DeltaStream, Model, ModelRequest};
use agentloop::runtime::Agent;
use agentloop::store::{Durability, FileStore, SessionStore};
use agentloop::ModelError;
use agentloop::Outcome;
use agentloop::{FinishReason, Message, MessageDelta};

/// Calls `calculator` with distinct arguments until step `n`, then answers.
struct Stepper {
    n: u32,
    /// When each request arrived, by step (index = model_call_index - 1).
    seen: Mutex<Vec<Instant>>,
}

#[async_trait]
impl Model for Stepper {
    fn name(&self) -> String {
        "stepper".into()
    }

    async fn stream(&self, request: ModelRequest) -> Result<DeltaStream, ModelError> {
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(Instant::now());
        }
        let i = request.model_call_index;
        let mut out = vec![MessageDelta::StartStep];
        let finish_reason = if i <= self.n {
            let id = format!("call_{i}");
            let arguments = format!("{{\"expression\":\"{i} + 1\"}}");
            out.push(MessageDelta::ToolInputStart {
                id: id.clone(),
                name: "calculator".into(),
            });
            out.push(MessageDelta::ToolInputDelta {
                id: id.clone(),
                delta: arguments.clone(),
            });
            out.push(MessageDelta::ToolInputEnd { id: id.clone() });
            out.push(MessageDelta::ToolCall {
                id,
                name: "calculator".into(),
                arguments,
            });
            FinishReason::ToolCalls
        } else {
            out.push(MessageDelta::TextStart);
            out.push(MessageDelta::TextDelta {
                text: "Done.".into(),
            });
            out.push(MessageDelta::TextEnd);
            FinishReason::Stop
        };
        out.push(MessageDelta::FinishStep {
            finish_reason: Some(finish_reason),
            raw_finish_reason: None,
            usage: None,
        });
        out.push(MessageDelta::Finish);
        Ok(Box::pin(futures::stream::iter(out.into_iter().map(Ok))))
    }
}

const AROUND: [u32; 3] = [100, 1_000, 10_000];
const HALF: u32 = 50;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut n = 10_100u32;
    let mut stores = vec!["memory".to_string(), "batched".into(), "sync".into()];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--stores" => {
                stores = args
                    .next()
                    .ok_or("--stores needs a value")?
                    .split(',')
                    .map(str::to_string)
                    .collect()
            }
            v => n = v.parse()?,
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let tmp = tempfile::tempdir()?;
    println!(
        "one run of {n} steps (one calculator call each); steps/s over steps k-{HALF}..k+{HALF}"
    );
    for name in stores {
        let store: Option<Arc<dyn SessionStore>> = match name.as_str() {
            "memory" => None,
            "batched" => Some(Arc::new(
                FileStore::open(tmp.path().join("batched"))?
                    .with_durability(Durability::Batched { every: 64 }),
            )),
            "sync" => Some(Arc::new(
                FileStore::open(tmp.path().join("sync"))?.with_durability(Durability::Sync),
            )),
            other => return Err(format!("unknown store {other}").into()),
        };
        let model = Arc::new(Stepper {
            n,
            seen: Mutex::new(Vec::with_capacity(n as usize + 2)),
        });
        let mut builder = Agent::builder()
            .model_arc(model.clone())
            .builtin_tools()
            .configure(|c| c.max_steps = n + 1);
        if let Some(store) = store {
            builder = builder.store(store);
        }
        let agent = builder.build();
        let start = Instant::now();
        let out = rt.block_on(agent.run_with("s", vec![Message::user("go")], None, false))?;
        let total = start.elapsed();
        if out.result.outcome != Outcome::Completed || out.result.iterations != n + 1 {
            return Err(format!(
                "run ended early: {:?} {} after {} steps",
                out.result.outcome, out.result.reason, out.result.iterations
            )
            .into());
        }
        let seen = model.seen.lock().map_err(|_| "poisoned")?.clone();
        let rate = |k: u32| -> Option<f64> {
            let (a, b) = (k.checked_sub(HALF)? as usize, (k + HALF) as usize);
            let (ta, tb) = (seen.get(a)?, seen.get(b)?);
            Some(f64::from(2 * HALF) / tb.duration_since(*ta).as_secs_f64())
        };
        let rates: Vec<Option<f64>> = AROUND.iter().map(|&k| rate(k)).collect();
        let shown: Vec<String> = AROUND
            .iter()
            .zip(&rates)
            .map(|(k, r)| match r {
                Some(r) => format!("step {k}: {r:>8.0}/s"),
                None => format!("step {k}: {:>8}  ", "—"),
            })
            .collect();
        let ratio = match (rates[0], rates[2].or(rates[1])) {
            (Some(a), Some(b)) => format!("{:.2}", b / a),
            _ => "—".into(),
        };
        println!(
            "{name:>8}: {}  last/100 = {ratio}  (whole run {:.2} s, {:.0} steps/s)",
            shown.join("  "),
            total.as_secs_f64(),
            f64::from(n + 1) / total.as_secs_f64()
        );
    }
    Ok(())
}
