//! The program a user writes from README's library example, against the mock: the model from
//! `provider::http::build_model` (README's comment on `.model(..)`) for an OpenAI-compatible
//! server, a `ToolRegistry` holding one typed tool, `Agent::builder()…build()` with the library
//! defaults, and one `agent.run(session, prompt)`; the answer printed. No sink, no
//! `run_stream`, no trace: what the user's program does, nothing added for the benchmark.
//!
//! `quickstart_client BASE_URL MODEL`
//!
//! The tool, `add`, is registered for every model (a user's program has its tools whatever the
//! model answers). With the model `two-turn` the mock calls it once, then answers with its
//! result; the program prints the final text. Otherwise it prints the final text's length.
//! After printing, the run's steps are checked (`add` ran exactly once and returned `42` with
//! `two-turn`, never otherwise): the harness's answer check, done after the run.
//!
//! `main` builds what `#[tokio::main]` builds (multi-thread), or with
//! `PEER_RUNTIME=current-thread` what `#[tokio::main(flavor = "current_thread")]` builds
//! (`src/runtime.rs`); the rest is the README program.

use std::sync::Arc;

use agentloop::prelude::*;
use agentloop::provider::http::{build_model, HttpConfig, ProviderKind};
use agentloop::tools::ToolRegistry;
use agentloop::ToolStatus;
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

/// The tool: the sum of two integers.
struct Add;

#[async_trait]
impl TypedTool for Add {
    type Args = AddArgs;
    const NAME: &'static str = "add";
    const DESCRIPTION: &'static str = "Adds two integers";

    async fn run(&self, _ctx: ToolContext, args: AddArgs) -> Result<String, ToolError> {
        Ok((args.a + args.b).to_string())
    }
}

fn main() -> Result<(), Error> {
    runtime::build()?.block_on(run())
}

async fn run() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let base = args.next().ok_or("usage: quickstart_client BASE_URL MODEL")?;
    let model_name = args.next().ok_or("MODEL missing")?;

    // README's program.
    let model = build_model(
        &model_name,
        HttpConfig::new(ProviderKind::OpenAi)
            .with_base_url(format!("{base}/v1"))
            .with_api_key("sk-mock"),
    )?;
    let mut tools = ToolRegistry::new();
    tools.insert(Arc::new(Add));
    let agent = Agent::builder().model(model).tools(tools).build();
    let out = agent.run("session-1", "What is 40 + 2?").await?;
    let text = out.result.final_text().unwrap_or_default();

    // The harness's checks.
    if out.result.outcome != Outcome::Completed {
        return Err(format!("run ended {:?}", out.result.reason).into());
    }
    let results: Vec<(ToolStatus, String)> = out
        .steps()
        .iter()
        .flat_map(|s| s.tool_results.iter())
        .map(|r| (r.status, r.content.clone()))
        .collect();
    if model_name == "two-turn" {
        if results != [(ToolStatus::Completed, "42".to_string())] {
            return Err(format!("tool results {results:?}, expected one 42").into());
        }
        println!("{text}");
    } else {
        if !results.is_empty() {
            return Err("a tool ran".into());
        }
        println!("{}", text.len());
    }
    Ok(())
}
