//! One streamed agentloop run against the mock: the OpenAI-compatible provider at
//! `BASE_URL/v1`, an [`Agent`] with the default ports (in-memory session store, no trace, no
//! tools), the answer's text deltas consumed as they arrive. Prints the answer's length.
//!
//! `agentloop_client BASE_URL MODEL [stream|sink]`
//!
//! - `stream` (default): [`Agent::run_stream`], the text gathered from its `TextDelta` events.
//! - `sink`: [`Agent::run`] with an [`FnSink`] that gathers the text from the same events
//!   (no per-event clone into a channel).
//!
//! Runs on what `#[tokio::main]` builds (multi-thread), or a current-thread runtime with
//! `PEER_RUNTIME=current-thread` (`src/runtime.rs`).

use std::sync::{Arc, Mutex};

use agentloop::provider::http::{HttpConfig, ProviderKind};
use agentloop::provider::openai::OpenAiModel;
use agentloop::runtime::{Agent, FnSink, RunStreamItem};
use agentloop::EventEnvelope;
use agentloop::{AgentEvent, Outcome};
use futures::StreamExt;

#[path = "../runtime.rs"]
mod runtime;

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Error> {
    runtime::build()?.block_on(run())
}

async fn run() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let base = args
        .next()
        .ok_or("usage: agentloop_client BASE_URL MODEL [stream|sink]")?;
    let model = args.next().ok_or("MODEL missing")?;
    let mode = args.next().unwrap_or_else(|| "stream".into());
    let config = HttpConfig::new(ProviderKind::OpenAi)
        .with_base_url(format!("{base}/v1"))
        .with_api_key("sk-mock");
    let model = OpenAiModel::new(model, config)?;
    let text = match mode.as_str() {
        "stream" => {
            let agent = Agent::builder().model(model).build();
            let mut text = String::new();
            let mut stream = agent.run_stream("bench", "talk");
            while let Some(item) = stream.next().await {
                match item {
                    RunStreamItem::Event(e) => {
                        if let AgentEvent::TextDelta { text: t, .. } = e.event {
                            text.push_str(&t);
                        }
                    }
                    RunStreamItem::End(out) => {
                        let out = out?;
                        if out.result.outcome != Outcome::Completed {
                            return Err(format!("run ended {:?}", out.result.reason).into());
                        }
                    }
                }
            }
            text
        }
        "sink" => {
            let text = Arc::new(Mutex::new(String::new()));
            let gather = text.clone();
            let sink = FnSink(move |e: &EventEnvelope| {
                if let AgentEvent::TextDelta { text: t, .. } = &e.event {
                    if let Ok(mut s) = gather.lock() {
                        s.push_str(t);
                    }
                }
            });
            let agent = Agent::builder().model(model).sink(Arc::new(sink)).build();
            let out = agent.run("bench", "talk").await?;
            if out.result.outcome != Outcome::Completed {
                return Err(format!("run ended {:?}", out.result.reason).into());
            }
            let text = text.lock().map_err(|_| "poisoned")?.clone();
            text
        }
        "spawn" => {
            // The run as a task of its own on the runtime (not polled by `block_on`).
            let agent = Agent::builder().model(model).build();
            tokio::spawn(async move {
                let mut text = String::new();
                let mut stream = agent.run_stream("bench", "talk");
                while let Some(item) = stream.next().await {
                    if let RunStreamItem::Event(e) = item {
                        if let AgentEvent::TextDelta { text: t, .. } = e.event {
                            text.push_str(&t);
                        }
                    }
                }
                text
            })
            .await?
        }
        other => return Err(format!("unknown mode {other}").into()),
    };
    println!("{}", text.len());
    Ok(())
}
