//! The `agentloop` command line: run an agent, chat, resume a stored session, replay and
//! inspect traces, print the charts. `agentloop --help` lists the commands; the repository's
//! `docs/cli.md` is the full reference.
#![warn(missing_docs)]
#![warn(unreachable_pub)]

mod chat;
mod corpus;
mod decode;
mod export;
mod mcp;
mod otlp;
mod out;
mod print;
mod regular_file;
mod run;
mod sessions;
mod status;
mod term;
mod times;
mod trace_cmd;
mod trace_view;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use out::{errln, outln};

use agentloop::trace::{Trace, TraceError};
use agentloop_core::chart::{mermaid, MachineKind};
use agentloop_core::trace::replay_reader;

/// LLM agents as verified state machines.
#[derive(Debug, Parser)]
#[command(name = "agentloop", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one prompt to completion (offline scripted model by default).
    Run(run::RunArgs),
    /// An interactive session: each line a prompt (queued while a run is going) or a slash
    /// command (/steer, /approve, /reject, /model, /trace, /help, /quit); Ctrl-C aborts the
    /// running run, not the chat.
    Chat(chat::ChatArgs),
    /// Continue the interrupted run of a stored session (exit code: its outcome; 3 when the
    /// session has no entries: nothing to resume).
    Resume(run::ResumeArgs),
    /// List, show, check or export stored sessions.
    Sessions(sessions::SessionsArgs),
    /// Replay a trace against fresh machines; exit 0 when identical, 1 at the first divergence,
    /// 2 when the trace cannot be read or names a decider this program does not have. With
    /// `--set` / `--decider`: a what-if replay under a changed configuration. Given a
    /// directory or several files: every trace (`*.jsonl`, directories walked recursively,
    /// links not followed) replayed in parallel on all cores, then a summary; exit 0 when all
    /// are identical (or unchanged), 1 when one differs, 2 when one cannot be read.
    Replay {
        /// The trace files (JSON Lines), or directories of them.
        #[arg(required = true, value_name = "TRACE|DIR")]
        traces: Vec<PathBuf>,
        /// With a directory or several files: the summary as one JSON document.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        what_if: trace_cmd::WhatIfArgs,
    },
    /// List the tools an agent gets: the built-ins and those of the MCP servers given
    /// (name and the first line of the description).
    Tools(mcp::ToolsArgs),
    /// Decode a captured provider response (SSE body, or raw HTTP with --http) into one JSON object.
    Decode(decode::DecodeArgs),
    /// Trace utilities.
    Trace {
        #[command(subcommand)]
        command: TraceCommand,
    },
    /// Print a machine's chart.
    Chart {
        /// Which machine.
        machine: Machine,
        /// Output format.
        #[arg(long, value_enum, default_value_t = ChartFormat::Mermaid)]
        format: ChartFormat,
    },
}

#[derive(Debug, Subcommand)]
enum TraceCommand {
    /// Print the JSON Schema of a trace line.
    Schema,
    /// A readable transcript of a run: steps, state changes, text, tool calls, retries,
    /// approvals, compactions, usage.
    Show(trace_cmd::ShowArgs),
    /// Compare two traces: the first divergence and a summary of each; exit 0 when
    /// equivalent, 1 when they differ, 2 when one cannot be read.
    Diff(trace_cmd::DiffArgs),
    /// Turn a conversation recorded elsewhere into a trace and a script (see
    /// docs/trace-import.md); exit 0 as recorded, 1 when the machines would have acted
    /// differently (each difference printed), 2 for bad input.
    Import(trace_cmd::ImportArgs),
    /// Write a run as one self-contained HTML page: a timeline with a lane per machine and
    /// per tool call, timers, events, and each record's JSON on click; exit 2 when the trace
    /// cannot be read or the page cannot be written (or would overwrite the trace). The trace
    /// is streamed: memory follows the page's layout, not the trace's size.
    View(trace_cmd::ViewArgs),
    /// A corpus of traces (files or directories) as one table for a notebook, CSV or JSON
    /// Lines: one row per run, model step, tool call or trace record. Exit 2 when a trace
    /// cannot be read (the others are written) or the table cannot be written.
    Export(export::ExportArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Machine {
    /// The outer ReAct machine.
    React,
    /// The inner process machine.
    Process,
    /// The lifecycle of one tool call.
    ToolCall,
    /// The live session: its commands, queue and runs.
    Session,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ChartFormat {
    /// Mermaid stateDiagram-v2.
    Mermaid,
    /// The chart source (TOML).
    Toml,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(log_color(&cli.command));
    match cli.command {
        Command::Run(args) => run::main(args),
        Command::Resume(args) => run::resume_main(args),
        Command::Chat(args) => chat::main(args),
        Command::Sessions(args) => sessions::main(args),
        Command::Replay {
            traces,
            json,
            what_if,
        } if (json || corpus::is_corpus(&traces))
            && what_if.decider.as_deref().is_some_and(|d| d.contains('=')) =>
        {
            errln!("error: --decider RECORDED=BUILTIN replays one trace, not a corpus");
            ExitCode::from(2)
        }
        Command::Replay {
            traces,
            json,
            what_if,
        } if json || corpus::is_corpus(&traces) => {
            if what_if.any() {
                corpus::what_if_main(&traces, &what_if, json)
            } else {
                corpus::replay_main(&traces, json)
            }
        }
        Command::Replay {
            traces, what_if, ..
        } if what_if.any() => trace_cmd::what_if_main(&traces[0], &what_if),
        Command::Replay {
            traces, what_if, ..
        } => replay_main(&traces[0], &what_if),
        Command::Decode(args) => decode::main(args),
        Command::Tools(args) => mcp::tools_main(args),
        Command::Trace {
            command: TraceCommand::Schema,
        } => {
            let schema = serde_json::to_string_pretty(&Trace::schema()).unwrap_or_default();
            out::stdout_raw(&format!("{}\n", out::json(&schema)));
            ExitCode::SUCCESS
        }
        Command::Trace {
            command: TraceCommand::Show(args),
        } => trace_cmd::show_main(args),
        Command::Trace {
            command: TraceCommand::Diff(args),
        } => trace_cmd::diff_main(args),
        Command::Trace {
            command: TraceCommand::Import(args),
        } => trace_cmd::import_main(args),
        Command::Trace {
            command: TraceCommand::View(args),
        } => trace_cmd::view_main(args),
        Command::Trace {
            command: TraceCommand::Export(args),
        } => export::export_main(args),
        Command::Chart { machine, format } => {
            let kind = match machine {
                Machine::React => MachineKind::React,
                Machine::Process => MachineKind::Process,
                Machine::ToolCall => MachineKind::ToolCall,
                Machine::Session => MachineKind::Session,
            };
            match format {
                ChartFormat::Mermaid => out::stdout_raw(&mermaid(&kind.chart())),
                ChartFormat::Toml => out::stdout_raw(kind.toml()),
            }
            ExitCode::SUCCESS
        }
    }
}

/// `RUST_LOG=agentloop=info` (any `tracing` filter) prints the runtime's spans and state
/// changes to stderr, colored as the command's other output is (`color`); without `RUST_LOG`
/// nothing is logged.
fn init_logging(color: bool) {
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(color)
            .try_init();
    }
}

/// Whether log lines are colored: as `--color` says for the commands that take it, else on a
/// terminal unless `NO_COLOR` is set (the same rule).
fn log_color(command: &Command) -> bool {
    match command {
        Command::Run(args) => args.agent.color_enabled(),
        Command::Resume(args) => args.agent.color_enabled(),
        Command::Chat(args) => args.agent.color_enabled(),
        _ => {
            use std::io::IsTerminal;
            let no_color = std::env::var("NO_COLOR").ok();
            term::color_enabled(
                term::ColorChoice::Auto,
                std::io::stderr().is_terminal(),
                no_color.as_deref(),
            )
        }
    }
}

fn replay_main(path: &std::path::Path, what_if: &trace_cmd::WhatIfArgs) -> ExitCode {
    let registry = match what_if.registry() {
        Ok(r) => r,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // A record at a time: a trace within the file and line limits replays however long.
    let records = match trace_cmd::trace_records(path, false) {
        Ok(r) => r,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // The CLI has only the built-in deciders: a trace recorded with another decision (or retry
    // decision) function is refused (exit 2, naming it) rather than replayed with the default,
    // unless `--decider RECORDED=BUILTIN` maps its name to a built-in.
    let replayed = match replay_reader(records, &registry) {
        Ok(r) => r,
        Err(e) => {
            let decider = matches!(
                e,
                TraceError::UnknownDecider { .. } | TraceError::UnknownRetryDecider { .. }
            );
            if decider {
                errln!("error: {}: {e}", path.display());
            } else {
                // A record the reader refused: its error names the file and line.
                errln!("error: {e}");
            }
            if decider {
                errln!(
                    "hint: the agentloop command has only the built-in deciders; replay this \
                     trace from the program that recorded it, with agentloop_core::trace::replay_with, \
                     or map the name to a built-in with --decider NAME=default"
                );
            }
            return ExitCode::from(2);
        }
    };
    match replayed.divergence {
        None => {
            outln!(
                "replay identical: {} records ({} inputs)",
                replayed.records,
                replayed.inputs
            );
            ExitCode::SUCCESS
        }
        Some(d) => {
            let cause = replayed.input;
            errln!(
                "replay diverged at index {}{}",
                d.index,
                cause
                    .map(|c| format!(" (in the step of input {c})"))
                    .unwrap_or_default()
            );
            out::stderr_raw(&out::text(&d.diff()));
            ExitCode::from(1)
        }
    }
}
