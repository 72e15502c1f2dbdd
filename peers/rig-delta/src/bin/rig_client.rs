//! One streamed rig 0.44 run against the mock: rig-core's OpenAI client at `BASE_URL/v1` on
//! its bundled reqwest transport, the Chat Completions wire (`OpenAI::chat`, not the Responses
//! wire `OpenAI::completion` picks for the official dialect), a rig-agent [`Agent`] with no
//! preamble, tools or memory, and `agent.prompt(..).stream()` consumed item by item, the text
//! gathered from its `Text` events. Prints the answer's length.
//!
//! `rig_client BASE_URL MODEL`
//!
//! Runs on what `#[tokio::main]` builds (multi-thread), or a current-thread runtime with
//! `PEER_RUNTIME=current-thread` (`src/runtime.rs`).

use futures::StreamExt;
use rig_agent::agent::MultiTurnStreamItem;
use rig_agent::streaming::{Item, StreamEvent};
use rig_agent::AgentBuilder;
use rig_core::providers::openai::OpenAIConfig;

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
        .ok_or("usage: rig_client BASE_URL MODEL [spawn]")?;
    let model = args.next().ok_or("MODEL missing")?;
    match args.next().as_deref() {
        // The whole run as a spawned task, as `agentloop_client spawn` does.
        Some("spawn") => tokio::spawn(stream_once(base, model)).await?,
        None => stream_once(base, model).await,
        Some(other) => Err(format!("unknown mode {other}").into()),
    }
}

async fn stream_once(base: String, model: String) -> Result<(), Error> {
    let client = OpenAIConfig::new("sk-mock")
        .with_base_url(format!("{base}/v1"))
        .client();
    let agent = AgentBuilder::new(client.chat(model)).build();
    let mut text = String::new();
    let mut finished = false;
    let mut stream = agent.prompt("talk").stream();
    while let Some(item) = stream.next().await {
        match item? {
            MultiTurnStreamItem::StreamAssistantItem(Item::Event(StreamEvent::Text {
                text: t,
                ..
            })) => text.push_str(&t),
            MultiTurnStreamItem::FinalResponse(response) => {
                if response.output() != text {
                    return Err("the final response differs from the streamed text".into());
                }
                finished = true;
            }
            _ => {}
        }
    }
    if !finished {
        return Err("the stream ended without a final response".into());
    }
    println!("{}", text.len());
    Ok(())
}
