//! `agentloop run`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, ValueEnum};

use agentloop::agent_event::{AgentEvent, Outcome};
use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::{control, Agent, EventEnvelope, FnSink, Timeouts};

/// Arguments of `agentloop run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The prompt.
    pub prompt: String,
    /// A scripted-model JSON script (default: the built-in calculator demo).
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// Write a JSON Lines trace of the run here.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Maximum model steps.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_steps: u32,
    /// How to print events: `text` (answer on stdout, state changes on stderr) or `json`
    /// (every event as a JSON line on stdout).
    #[arg(long, value_enum, default_value_t = EventsFormat::Text)]
    pub events: EventsFormat,
    /// Directory the file tools are confined to.
    #[arg(long, default_value = ".")]
    pub root: PathBuf,
    /// Stall timeout between deltas, in seconds.
    #[arg(long, default_value_t = 30.0)]
    pub stall_timeout: f64,
    /// Timeout for the first chunk of a response, in seconds.
    #[arg(long, default_value_t = 60.0)]
    pub first_chunk_timeout: f64,
    /// Per-tool timeout, in seconds.
    #[arg(long, default_value_t = 120.0)]
    pub tool_timeout: f64,
    /// Retries per step.
    #[arg(long, default_value_t = 3)]
    pub max_retries: u32,
    /// Initial backoff in milliseconds (doubles, capped at 10 s).
    #[arg(long, default_value_t = 1000)]
    pub initial_backoff_ms: u64,
}

/// Event output formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum EventsFormat {
    /// Human-readable.
    Text,
    /// JSON lines.
    Json,
}

fn secs(s: f64) -> u64 {
    (s.max(0.0) * 1000.0) as u64
}

fn print_event(format: EventsFormat, env: &EventEnvelope) {
    match format {
        EventsFormat::Json => {
            if let Ok(line) = serde_json::to_string(env) {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
            }
        }
        EventsFormat::Text => match &env.event {
            AgentEvent::TextDelta { text, .. } => {
                let mut out = std::io::stdout().lock();
                let _ = write!(out, "{text}");
                let _ = out.flush();
            }
            AgentEvent::StateChanged {
                machine,
                from,
                to,
                event,
            } => {
                eprintln!("[{machine:?}] {from} --{event}--> {to}");
            }
            AgentEvent::ModelTurnRetried {
                model_call_index,
                attempt,
            } => {
                println!();
                eprintln!("[retry] step {model_call_index} attempt {attempt}: discard the partial output above");
            }
            AgentEvent::Retry {
                attempt,
                delay_ms,
                reason,
                ..
            } => {
                eprintln!("[retry] attempt {attempt} in {delay_ms} ms: {reason}");
            }
            AgentEvent::ToolStart {
                name, arguments, ..
            } => eprintln!("[tool] {name} {arguments}"),
            AgentEvent::ToolEnd { name, status, .. } => eprintln!("[tool] {name} -> {status:?}"),
            AgentEvent::ResponseComplete { .. } => println!(),
            AgentEvent::RunError { error, .. } => eprintln!("[error] {error}"),
            AgentEvent::AgentAbort { reason, .. } => eprintln!("[abort] {reason}"),
            _ => {}
        },
    }
}

/// Runs the command.
pub fn main(args: RunArgs) -> ExitCode {
    let model = match &args.script {
        Some(path) => match ScriptedModel::from_file(path) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        },
        None => ScriptedModel::demo(),
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let format = args.events;
    let agent = Agent::builder()
        .model(model)
        .root(args.root.clone())
        .sink(Arc::new(FnSink(move |env: &EventEnvelope| {
            print_event(format, env)
        })))
        .timeouts(Timeouts {
            first_chunk_ms: secs(args.first_chunk_timeout),
            stall_ms: secs(args.stall_timeout),
            tool_ms: secs(args.tool_timeout),
            run_deadline_ms: None,
        })
        .configure(|c| {
            c.max_steps = args.max_steps;
            c.step.retry.max_retries = args.max_retries;
            c.step.retry.initial_backoff_ms = args.initial_backoff_ms;
        })
        .build();
    rt.block_on(async {
        let (controller, rx) = control();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                controller.abort("interrupted (Ctrl-C)");
            }
        });
        let out = match agent
            .run_with(
                "default",
                vec![agentloop::Message::user(args.prompt.clone())],
                Some(rx),
                args.trace.is_some(),
            )
            .await
        {
            Ok(o) => o,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        if let (Some(path), Some(trace)) = (&args.trace, &out.trace) {
            if let Err(e) = trace.write(path) {
                eprintln!("error: writing trace: {e}");
                return ExitCode::from(2);
            }
        }
        let r = &out.result;
        eprintln!(
            "[{}] {} after {} step(s); usage in={} out={}",
            r.outcome.as_str(),
            r.reason,
            r.iterations,
            r.usage.input_tokens,
            r.usage.output_tokens
        );
        match r.outcome {
            Outcome::Completed => ExitCode::SUCCESS,
            Outcome::Failed => ExitCode::from(1),
            Outcome::Aborted => ExitCode::from(130),
        }
    })
}
