//! `agentloop-restate`: agentloop sessions as Restate Virtual Objects.
//!
//! `agentloop-restate serve --listen 127.0.0.1:9080` serves the `Session` object (handlers
//! `prompt`, `abort` and `status`) to a Restate server, with the same model and tool flags as
//! `agentloop run`. See `docs/scale-out.md`.
#![warn(missing_docs)]
#![warn(unreachable_pub)]

mod session;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use restate_sdk::prelude::*;
use restate_sdk::service::IntoServiceDefinition;

use agentloop::model::Model;
use agentloop::provider::http::{model_from_flags, ProviderKind};
use agentloop::store::{AnyStore, Durability};
use agentloop::tools::ToolRegistry;

use session::{Session, Worker};

/// agentloop's machines as Restate Virtual Objects.
#[derive(Debug, Parser)]
#[command(name = "agentloop-restate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the `Session` object to a Restate server (register this address with it).
    Serve(ServeArgs),
}

/// Arguments of `serve`: the address, and the model and tool flags of `agentloop run`.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9080")]
    listen: SocketAddr,
    /// Which model client: the offline scripted model (default), or a real provider.
    #[arg(long, default_value = "scripted", value_parser = provider_parser())]
    provider: ProviderFlag,
    /// Model name sent to the provider (required with a real provider).
    #[arg(long)]
    model: Option<String>,
    /// Provider base URL (default: $OPENAI_BASE_URL / $ANTHROPIC_BASE_URL, else the public API).
    #[arg(long)]
    base_url: Option<String>,
    /// A scripted-model JSON script (default: the built-in calculator demo).
    #[arg(long)]
    script: Option<PathBuf>,
    /// Directory the file tools are confined to.
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// Maximum model steps.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    max_steps: u32,
    /// Session store (a directory, or sqlite:PATH with the default feature `sqlite-store`),
    /// as `agentloop --store`: sessions load their history from it and append each run's
    /// entries to it. Without it, entries live only in the object's Restate state.
    #[arg(long)]
    store: Option<String>,
    /// The Restate admin API, asked for the prompts queued on a session when an abort drops
    /// them (`clear_queue`).
    #[arg(long, default_value = "http://127.0.0.1:9070")]
    admin_url: String,
}

/// `--provider` (as `agentloop run --provider`): `scripted` (`None`, the offline model) or a
/// name of the library's provider registry.
#[derive(Debug, Clone, Copy)]
struct ProviderFlag(Option<ProviderKind>);

fn provider_parser() -> impl clap::builder::TypedValueParser<Value = ProviderFlag> {
    use clap::builder::TypedValueParser;
    let names = std::iter::once("scripted").chain(ProviderKind::ALL.iter().map(|k| k.as_str()));
    clap::builder::PossibleValuesParser::new(names).map(|s| ProviderFlag(s.parse().ok()))
}

fn model(args: &ServeArgs) -> Result<Arc<dyn Model>, String> {
    let kind = args.provider.0;
    model_from_flags(
        kind,
        args.model.as_deref(),
        args.base_url.as_deref(),
        args.script.as_deref(),
        |_| {},
    )
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Plain text when stderr is a file (logs grep as `session=s1`).
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let Command::Serve(args) = Cli::parse().command;
    let model = match model(&args) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("agentloop-restate: {e}");
            return ExitCode::from(2);
        }
    };
    let mut worker = Worker::new(
        model,
        ToolRegistry::defaults(),
        args.root.clone(),
        args.max_steps,
    );
    worker.admin_url = args.admin_url.clone();
    if let Some(url) = &args.store {
        match AnyStore::open(url, Durability::Sync).await {
            Ok(store) => worker.store = Some(Arc::new(store)),
            Err(e) => {
                eprintln!("agentloop-restate: --store: {e}");
                return ExitCode::from(2);
            }
        }
    }
    tracing::info!(listen = %args.listen, "serving the Session object");
    // Restate's retry backoff grows with every failed attempt of an invocation, and a killed
    // worker is a failed attempt: capped at 1 s, a run killed many times still resumes within
    // about a second (docs/scale-out.md, "Measured").
    let options = restate_sdk::endpoint::ServiceOptions::new()
        .retry_policy_initial_interval(std::time::Duration::from_millis(100))
        .retry_policy_max_interval(std::time::Duration::from_secs(1))
        // The server's default gives up (pauses the invocation) after 70 attempts; every kill
        // of a worker is one, so a long run on flaky workers would stop.
        .retry_policy_max_attempts(100_000)
        // While a model attempt or tool runs the handler also awaits the abort signal; a
        // stream the server closes for inactivity would suspend the invocation and drop the
        // effect. The server's default (1 min) is shorter than a model call may take.
        .inactivity_timeout(std::time::Duration::from_secs(30 * 60));
    let endpoint = Endpoint::builder()
        .bind(
            Session(Arc::new(worker))
                .into_service_definition()
                .options(options),
        )
        .build();
    HttpServer::new(endpoint)
        .listen_and_serve(args.listen)
        .await;
    ExitCode::SUCCESS
}
