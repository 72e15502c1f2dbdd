//! One streamed agentloop run against the mock: the OpenAI-compatible provider at
//! `BASE_URL/v1`, an [`Agent`] with the default ports (in-memory session store, no trace), the
//! answer's text deltas consumed as they arrive. Prints the answer's length, or for the model
//! `two-turn` the answer itself.
//!
//! `agentloop_client BASE_URL MODEL [stream|sink|spawn]`
//!
//! - `stream` (default): [`Agent::run_stream`], the text gathered from its `TextDelta` events.
//! - `sink`: [`Agent::run`] with a closure sink that gathers the text from the same events
//!   (no per-event clone into a channel).
//! - `spawn`: the `stream` client as a `tokio::spawn`ed task.
//!
//! With the model `two-turn` the agent has one tool, `add` (a [`TypedTool`], registered with
//! `AgentBuilder::tool`); the mock calls it once, then answers with its result. The client
//! checks that the tool ran once and returned `42` (its `ToolEnd` event); without it, the agent
//! has no tools.
//!
//! Runs on what `#[tokio::main]` builds (multi-thread), or a current-thread runtime with
//! `PEER_RUNTIME=current-thread` (`src/runtime.rs`).

use std::sync::{Arc, Mutex};

use agentloop::provider::http::{build_model, HttpConfig, ProviderKind};
use agentloop::runtime::{Agent, RunStreamItem};
use agentloop::tools::{ToolContext, ToolError, TypedTool};
use agentloop::{AgentEvent, EventEnvelope, Outcome, ToolStatus};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;

#[path = "../runtime.rs"]
mod runtime;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The arguments of `add`.
#[derive(Deserialize, JsonSchema)]
struct AddArgs {
    /// The first addend.
    a: i64,
    /// The second addend.
    b: i64,
}

/// The two-turn run's tool: the sum of two integers.
struct Add;

#[agentloop::async_trait]
impl TypedTool for Add {
    type Args = AddArgs;
    const NAME: &'static str = "add";
    const DESCRIPTION: &'static str = "Adds two integers";

    async fn run(&self, _ctx: ToolContext, args: AddArgs) -> Result<String, ToolError> {
        Ok((args.a + args.b).to_string())
    }
}

/// What one run gathered from its events.
#[derive(Default)]
struct Gathered {
    text: String,
    /// The `add` calls' results (status, text).
    tool_results: Vec<(ToolStatus, String)>,
}

impl Gathered {
    fn take(&mut self, event: &AgentEvent) {
        match event {
            AgentEvent::TextDelta { text, .. } => self.text.push_str(text),
            AgentEvent::ToolEnd { status, result, .. } => {
                self.tool_results.push((*status, result.clone()))
            }
            _ => {}
        }
    }
}

fn main() -> Result<(), Error> {
    runtime::build()?.block_on(run())
}

async fn run() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let base = args
        .next()
        .ok_or("usage: agentloop_client BASE_URL MODEL [stream|sink|spawn]")?;
    let model_name = args.next().ok_or("MODEL missing")?;
    let mode = args.next().unwrap_or_else(|| "stream".into());
    let two_turn = model_name == "two-turn";
    let config = HttpConfig::new(ProviderKind::OpenAi)
        .with_base_url(format!("{base}/v1"))
        .with_api_key("sk-mock");
    let model = build_model(&model_name, config)?;
    let builder = Agent::builder().model(model);
    let builder = if two_turn {
        builder.tool(Arc::new(Add))
    } else {
        builder
    };
    let gathered = match mode.as_str() {
        "stream" => {
            let agent = builder.build();
            stream_once(&agent).await?
        }
        "sink" => {
            let gathered = Arc::new(Mutex::new(Gathered::default()));
            let gather = gathered.clone();
            let sink = move |e: &EventEnvelope| {
                if let Ok(mut g) = gather.lock() {
                    g.take(&e.event);
                }
            };
            let agent = builder.sink(Arc::new(sink)).build();
            let out = agent.run("bench", "talk").await?;
            if out.result.outcome != Outcome::Completed {
                return Err(format!("run ended {:?}", out.result.reason).into());
            }
            let mut g = gathered.lock().map_err(|_| "poisoned")?;
            std::mem::take(&mut *g)
        }
        "spawn" => {
            // The run as a task of its own on the runtime (not polled by `block_on`).
            let agent = builder.build();
            tokio::spawn(async move { stream_once(&agent).await }).await??
        }
        other => return Err(format!("unknown mode {other}").into()),
    };
    if two_turn {
        if gathered.tool_results != [(ToolStatus::Completed, "42".to_string())] {
            return Err(
                format!("tool results {:?}, expected one 42", gathered.tool_results).into(),
            );
        }
        println!("{}", gathered.text);
    } else {
        if !gathered.tool_results.is_empty() {
            return Err("a tool ran".into());
        }
        println!("{}", gathered.text.len());
    }
    Ok(())
}

/// One run through [`Agent::run_stream`].
async fn stream_once(agent: &Agent) -> Result<Gathered, Error> {
    let mut gathered = Gathered::default();
    let mut stream = agent.run_stream("bench", "talk");
    while let Some(item) = stream.next().await {
        match item {
            RunStreamItem::Event(e) => gathered.take(&e.event),
            RunStreamItem::End(out) => {
                let out = out?;
                if out.result.outcome != Outcome::Completed {
                    return Err(format!("run ended {:?}", out.result.reason).into());
                }
            }
        }
    }
    Ok(gathered)
}
