//! One streamed rig 0.44 run against the mock: rig-core's OpenAI client at `BASE_URL/v1` on
//! its bundled reqwest transport, the Chat Completions wire (`OpenAI::chat`, not the Responses
//! wire `OpenAI::completion` picks for the official dialect), a rig-agent [`Agent`] with no
//! preamble or memory, and `agent.prompt(..).stream()` consumed item by item, the text
//! gathered from its `Text` events. Prints the answer's length, or for the model `two-turn`
//! the answer itself.
//!
//! `rig_client BASE_URL MODEL [spawn]`
//!
//! With the model `two-turn` the agent has one tool, `add` (rig's typed [`Tool`], registered
//! with `AgentBuilder::tool`) and a budget of two model turns
//! (`AgentBuilder::default_max_turns(2)`; rig's default is one); the mock calls the tool once,
//! then answers with its result. The client checks that one `ToolResult` item came; without
//! it, the agent has no tools.
//!
//! Runs on what `#[tokio::main]` builds (multi-thread), or a current-thread runtime with
//! `PEER_RUNTIME=current-thread` (`src/runtime.rs`).

use futures::StreamExt;
use rig_agent::agent::MultiTurnStreamItem;
use rig_agent::streaming::{Item, StreamEvent};
use rig_agent::{Agent, AgentBuilder};
use rig_core::providers::openai::OpenAIConfig;
use rig_core::tool::{Tool, ToolContext};
use serde::Deserialize;

#[path = "../runtime.rs"]
mod runtime;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The arguments of `add`.
#[derive(Deserialize)]
struct AddArgs {
    a: i64,
    b: i64,
}

/// The two-turn run's tool: the sum of two integers.
struct Add;

impl Tool for Add {
    const NAME: &'static str = "add";
    type Args = AddArgs;
    type Output = i64;
    type Error = std::convert::Infallible;

    fn description(&self) -> String {
        "Adds two integers".to_string()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "a": {"type": "integer", "description": "The first addend."},
                "b": {"type": "integer", "description": "The second addend."}
            },
            "required": ["a", "b"]
        })
    }

    async fn call(&self, _context: &mut ToolContext, args: AddArgs) -> Result<i64, Self::Error> {
        Ok(args.a + args.b)
    }
}

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
        None | Some("stream") => stream_once(base, model).await,
        Some(other) => Err(format!("unknown mode {other}").into()),
    }
}

async fn stream_once(base: String, model: String) -> Result<(), Error> {
    let two_turn = model == "two-turn";
    let client = OpenAIConfig::new("sk-mock")
        .with_base_url(format!("{base}/v1"))
        .client();
    let agent: Agent = if two_turn {
        AgentBuilder::new(client.chat(model))
            .default_max_turns(2)
            .tool(Add)
            .build()
    } else {
        AgentBuilder::new(client.chat(model)).build()
    };
    let mut text = String::new();
    let mut finished = false;
    let mut tool_results = 0;
    let mut stream = agent.prompt("talk").stream();
    while let Some(item) = stream.next().await {
        match item? {
            MultiTurnStreamItem::StreamAssistantItem(Item::Event(StreamEvent::Text {
                text: t,
                ..
            })) => text.push_str(&t),
            MultiTurnStreamItem::ToolResult { tool_result } => {
                if tool_result.is_error {
                    return Err(format!("the tool failed: {tool_result:?}").into());
                }
                tool_results += 1;
            }
            MultiTurnStreamItem::FinalResponse(response) => {
                // The answer of the last turn (the text before a tool call is not in it).
                if !text.ends_with(&response.output()) {
                    return Err("the final response is not the streamed text".into());
                }
                finished = true;
            }
            _ => {}
        }
    }
    if !finished {
        return Err("the stream ended without a final response".into());
    }
    if two_turn {
        if tool_results != 1 {
            return Err(format!("{tool_results} tool results, expected 1").into());
        }
        println!("{text}");
    } else {
        if tool_results != 0 {
            return Err("a tool ran".into());
        }
        println!("{}", text.len());
    }
    Ok(())
}
