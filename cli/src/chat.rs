//! `agentloop chat`: an interactive session on the library's [`Session`] actor. Each line read
//! from stdin is a prompt (queued while a run is going) or a slash command; Ctrl-C aborts the
//! running run, not the chat; Ctrl-C at the idle prompt exits 0 at once, `/quit` and the end
//! of input exit 0 once the runs still going or queued have ended and their output is shown
//! (so `printf 'a\nb\n/quit\n' | agentloop chat` prints both answers); a run that then waits
//! for an answer (a question, an approval) no more input can give is aborted.
//!
//! A line is at most [`MAX_LINE_BYTES`] long: a longer one is read to its end without being
//! kept, refused with an `[error]` line, and the chat goes on.
//!
//! The line grammar is pure ([`parse`]); the loop only turns commands into session calls and
//! events into output (the same [`Output`] as `run`: a live status line on a terminal, plain
//! lines when piped).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tokio::sync::mpsc;

use agentloop::session::{
    Ack, KillTools, Session, SessionConfig, SessionError, Status, SubscriptionItem,
};
use agentloop::store::SessionStore;
use agentloop::AgentEvent;
use agentloop::EventEnvelope;
use agentloop_core::process::ApprovalPolicy;

use crate::print::{usage_summary, Output};
use crate::run::{agent_builder, block_on_bounded, fail, model_named, runtime_and_store};
use crate::run::{AgentArgs, Locked, StoreArgs};
use crate::status::{summary_line, StatusLine};

/// Arguments of `agentloop chat`.
#[derive(Debug, Args)]
pub(crate) struct ChatArgs {
    /// Session id: create or continue this session in the store (without it, an in-memory
    /// session named `chat`).
    #[arg(long)]
    pub session: Option<String>,
    /// Store options (used with `--session`).
    #[command(flatten)]
    pub store: StoreArgs,
    /// Another model `/model NAME` may switch to (same provider and base URL); repeatable.
    #[arg(long = "extra-model", value_name = "NAME")]
    pub extra_models: Vec<String>,
    /// Ask before running TOOL (answer with `/approve` or `/reject`); repeatable.
    #[arg(long = "ask", value_name = "TOOL")]
    pub ask: Vec<String>,
    /// After `/reject` (or an approval timeout) let the run continue with the denied result
    /// instead of stopping it with reason `tool_rejected`.
    #[arg(long)]
    pub auto_resume: bool,
    /// Model, tools and runtime options (`--trace FILE`: like `/trace FILE` before the first
    /// prompt).
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// One line of input.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Line {
    /// Nothing (an empty line).
    Empty,
    /// A prompt (`//text` sends `/text`).
    Prompt(String),
    /// The answer (ref, text) to an `ask_user` question: a line typed while one waits.
    Answer((String, String)),
    /// `/steer TEXT`.
    Steer(String),
    /// `/approve [ID]`.
    Approve(Option<String>),
    /// `/reject [ID]`.
    Reject(Option<String>),
    /// `/model NAME`.
    Model(String),
    /// `/trace FILE` (`Some`) or `/trace off` (`None`).
    Trace(Option<PathBuf>),
    /// `/help`.
    Help,
    /// `/quit` (or `/exit`).
    Quit,
    /// A slash command this chat does not know, or one missing its argument: the message.
    Bad(String),
}

/// What `/help` prints.
pub(crate) const HELP: &str = "\
commands:
  TEXT            send a prompt (queued while a run is going; //TEXT sends /TEXT); while
                  the model asks a question ([ask]), the line is the answer (a number
                  picks an option)
  /steer TEXT     steer the running run at its next step
  /approve [ID]   approve the tool call waiting for approval
  /reject [ID]    reject it (the model sees a denied result)
  /model NAME     switch the model (registered with --extra-model; from the next step)
  /trace FILE     record the following runs' traces (FILE, then FILE.2.EXT, ...); /trace off
  /help           this list
  /quit           leave once the runs going or queued have ended (also the end of input;
                  Ctrl-C at the prompt leaves at once)
Ctrl-C during a run aborts the run (and drops queued prompts); the chat stays.";

/// Reads one input line.
pub(crate) fn parse(line: &str) -> Line {
    let line = line.trim_end_matches(['\r', '\n']);
    if line.trim().is_empty() {
        return Line::Empty;
    }
    if let Some(rest) = line.strip_prefix("//") {
        return Line::Prompt(format!("/{rest}"));
    }
    let Some(command) = line.strip_prefix('/') else {
        return Line::Prompt(line.to_string());
    };
    let (name, arg) = match command.split_once(char::is_whitespace) {
        Some((name, arg)) => (name, arg.trim()),
        None => (command, ""),
    };
    let optional = |arg: &str| (!arg.is_empty()).then(|| arg.to_string());
    let needs = |what: &str| Line::Bad(format!("usage: /{name} {what}"));
    match name {
        "steer" if arg.is_empty() => needs("TEXT"),
        "steer" => Line::Steer(arg.to_string()),
        "approve" => Line::Approve(optional(arg)),
        "reject" => Line::Reject(optional(arg)),
        "model" if arg.is_empty() => needs("NAME"),
        "model" => Line::Model(arg.to_string()),
        "trace" if arg.is_empty() => needs("FILE | off"),
        "trace" if arg == "off" => Line::Trace(None),
        "trace" => Line::Trace(Some(PathBuf::from(arg))),
        "help" | "?" => Line::Help,
        "quit" | "exit" => Line::Quit,
        _ => Line::Bad(format!("unknown command /{name} (/help lists them)")),
    }
}

/// Where the `n`-th recorded run's trace goes: `path` itself for the first, then
/// `name.N.ext` (`t.jsonl` → `t.2.jsonl`; `t` → `t.2`).
pub(crate) fn numbered(path: &Path, n: u32) -> PathBuf {
    if n <= 1 {
        return path.to_path_buf();
    }
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    let name = match (stem, path.extension()) {
        (Some(stem), Some(ext)) => format!("{stem}.{n}.{}", ext.to_string_lossy()),
        (Some(stem), None) => format!("{stem}.{n}"),
        (None, _) => format!("trace.{n}"),
    };
    path.with_file_name(name)
}

/// Recording the following runs to trace files (`/trace`).
#[derive(Debug, Default)]
struct TraceTarget {
    path: Option<PathBuf>,
    /// Runs written to `path` so far.
    written: u32,
    /// The current run started while recording.
    recording: bool,
    /// `--otlp-endpoint`: where each run's spans go when it ends.
    otlp: Option<Arc<agentloop::otlp::OtlpExporter>>,
}

/// Runs the `chat` command.
pub(crate) fn main(args: ChatArgs) -> ExitCode {
    let (rt, locked) = match runtime_and_store(args.session.as_deref(), &args.store) {
        Ok(started) => started,
        Err(e) => return fail(e),
    };
    let store = locked.as_ref().map(Locked::session_store);
    let mcp = match rt.block_on(args.agent.mcp.connect()) {
        Ok(servers) => servers,
        Err(e) => return fail(e),
    };
    let agent = match build(&args, store, &mcp) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let id = args.session.clone().unwrap_or_else(|| "chat".into());
    let output = Arc::new(Output::for_args(
        args.agent.events,
        args.agent.verbose,
        args.agent.color_enabled(),
    ));
    block_on_bounded(rt, async {
        let session = Session::spawn(agent, SessionConfig::new(id).record_traces(true));
        let code = chat(&args, &session, &output).await;
        if let Some(locked) = &locked {
            session.wait_idle().await;
            if let Err(e) = locked.close().await {
                return fail(e);
            }
        }
        code
    })
}

/// The agent: `run`'s, plus the `--extra-model`s and the `--ask` approvals. Events reach the
/// chat through the session's bus, so the agent's own sink prints nothing.
fn build(
    args: &ChatArgs,
    store: Option<Arc<dyn SessionStore>>,
    mcp: &[agentloop::mcp::McpServer],
) -> Result<agentloop::runtime::Agent, String> {
    let mut builder = agent_builder(&args.agent, store, mcp)?;
    for name in &args.extra_models {
        builder = builder.extra_model(name.clone(), model_named(&args.agent, Some(name))?);
    }
    let known = agentloop::tools::ToolRegistry::defaults();
    for tool in &args.ask {
        if known.get(tool).is_none() {
            return Err(format!("--ask {tool}: no such tool"));
        }
    }
    let ask = args.ask.clone();
    Ok(builder
        .ask_user(None)
        .auto_resume(args.auto_resume)
        .configure(move |c| {
            for tool in ask {
                c.step.approval.insert(tool, ApprovalPolicy::Always);
            }
        })
        .build())
}

/// The longest input line the chat takes, in bytes (1 MiB, its line break not counted).
pub(crate) const MAX_LINE_BYTES: usize = 1 << 20;

/// One line of stdin, as the reader thread hands it over.
#[derive(Debug, PartialEq)]
enum Input {
    /// A line, without its line break; bytes that are not UTF-8 became U+FFFD.
    Line(String),
    /// A line over [`MAX_LINE_BYTES`]: read to its end, not kept; its length in bytes.
    TooLong(u64),
}

/// Reads the next line of `input`, keeping at most `max` bytes of it (plus its line break)
/// in memory: a longer line is read to its end and dropped ([`Input::TooLong`]). `None` at
/// the end of input.
fn next_line(input: &mut impl std::io::BufRead, max: usize) -> std::io::Result<Option<Input>> {
    let mut kept = Vec::new();
    let mut total = 0u64;
    let mut over = false;
    let mut ended = false;
    loop {
        let chunk = match input.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            if total == 0 {
                return Ok(None);
            }
            break;
        }
        let (take, ends) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !over && kept.len() + take > max + 2 {
            over = true;
            kept = Vec::new();
        }
        if !over {
            kept.extend_from_slice(&chunk[..take]);
        }
        total += take as u64;
        input.consume(take);
        if ends {
            ended = true;
            break;
        }
    }
    let line = String::from_utf8_lossy(&kept);
    let line = line.trim_end_matches(['\r', '\n']);
    if over || line.len() > max {
        // Its length without the line break (a `\r` before the `\n` of a dropped line counts).
        let newline = if over {
            usize::from(ended)
        } else {
            kept.len() - line.len()
        };
        return Ok(Some(Input::TooLong(total - newline as u64)));
    }
    Ok(Some(Input::Line(line.to_string())))
}

/// Lines of stdin, read on a thread of their own (a blocking read), each at most
/// [`MAX_LINE_BYTES`] ([`next_line`]). The channel holds a few lines: the thread waits while
/// the chat is behind, so input piped faster than it is handled does not pile up in memory.
/// The channel closes at the end of input or on a read error.
fn stdin_lines() -> mpsc::Receiver<Input> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        let mut input = std::io::stdin().lock();
        while let Ok(Some(line)) = next_line(&mut input, MAX_LINE_BYTES) {
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The chat loop; its exit code.
async fn chat(args: &ChatArgs, session: &Session, output: &Output) -> ExitCode {
    let mut events = session.subscribe(None, None);
    let mut lines = stdin_lines();
    let typing = std::io::stdin().is_terminal();
    let _ticker = output.spawn_ticker();
    let started = tokio::time::Instant::now();
    let now_ms = || started.elapsed().as_millis() as u64;
    let mut line = StatusLine::new();
    let mut queued = 0usize;
    let mut asked = Asked::default();
    let otlp = match crate::otlp::exporter(&args.agent) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let mut trace = TraceTarget {
        path: args.agent.trace.clone(),
        otlp,
        ..TraceTarget::default()
    };
    let mut input_ended = false;
    let mut interrupt = Box::pin(tokio::signal::ctrl_c());
    if typing {
        output.say("agentloop chat: type a prompt, /help for commands, /quit to leave");
        output.prompt("> ");
    }
    loop {
        if input_ended && waits_for_input(session) {
            // No more input can answer it: the run would wait for ever.
            output.finish();
            output.say("[quit] the run waits for an answer and the input has ended: aborting it");
            return leave(session).await;
        }
        tokio::select! {
            item = events.recv() => match item {
                Some(SubscriptionItem::Event(env)) => {
                    let ended = show(args, session, output, &mut line, &mut trace, &mut queued, &mut asked, &env, now_ms()).await;
                    if ended && queued == 0 && typing && !input_ended {
                        output.prompt("> ");
                    }
                }
                Some(SubscriptionItem::Lagged(n)) => output.say(&format!("[lagged] {n} events not shown")),
                None => return fail("the session ended"),
            },
            read = lines.recv(), if !input_ended => match read {
                Some(Input::TooLong(bytes)) => output.say(&format!(
                    "[error] input line too long ({bytes} bytes; the limit is {MAX_LINE_BYTES}): ignored"
                )),
                Some(Input::Line(text)) => {
                    if typing {
                        output.input_echoed();
                    }
                    let input = match asked.take_answer(&text) {
                        Some(answer) => Line::Answer(answer),
                        None => parse(&text),
                    };
                    if !command(session, output, &line, &mut trace, input).await {
                        // `/quit`: as the end of input, so every answer still coming is shown.
                        input_ended = true;
                        if session.status() != Status::Idle {
                            output.say("[quit] leaving once the runs going or queued have ended (Ctrl-C aborts)");
                        }
                        continue;
                    }
                    if typing && session.status() == Status::Idle {
                        output.prompt("> ");
                    }
                }
                None => input_ended = true,
            },
            () = session.wait_idle(), if input_ended => {
                // Show what the last run published before idling (already queued).
                while let Ok(Some(SubscriptionItem::Event(env))) =
                    tokio::time::timeout(Duration::ZERO, events.recv()).await
                {
                    show(args, session, output, &mut line, &mut trace, &mut queued, &mut asked, &env, now_ms()).await;
                }
                output.finish();
                return ExitCode::SUCCESS;
            },
            // After the input: look again whether the run waits for an answer (a question is
            // parked just after its event).
            () = tokio::time::sleep(Duration::from_millis(50)), if input_ended => {},
            signal = &mut interrupt => {
                interrupt = Box::pin(tokio::signal::ctrl_c());
                if signal.is_err() || session.status() == Status::Idle {
                    output.finish();
                    return leave(session).await;
                }
                output.say("[interrupt] aborting the run (Ctrl-C again at the prompt leaves)");
                if let Err(e) = session.abort("interrupted (Ctrl-C)", KillTools::Killable, true).await {
                    output.say(&format!("[error] {e}"));
                }
            },
        }
    }
}

/// Whether the run waits for the person: a question or an approval is parked.
fn waits_for_input(session: &Session) -> bool {
    !session.pending_questions().is_empty() || !session.pending_approvals().is_empty()
}

/// Leaves the chat: aborts a run still going (its end is recorded), exit 0.
async fn leave(session: &Session) -> ExitCode {
    if session.status() != Status::Idle {
        let _ = session
            .abort("the chat ended", KillTools::Killable, true)
            .await;
        let _ = tokio::time::timeout(Duration::from_secs(5), session.wait_idle()).await;
    }
    ExitCode::SUCCESS
}

/// Shows one event, and does what the chat does on it (run summaries, trace files); true
/// when it ended a run.
#[allow(clippy::too_many_arguments)]
async fn show(
    args: &ChatArgs,
    session: &Session,
    output: &Output,
    line: &mut StatusLine,
    trace: &mut TraceTarget,
    queued: &mut usize,
    asked: &mut Asked,
    env: &EventEnvelope,
    now_ms: u64,
) -> bool {
    if let Some(o) = &trace.otlp {
        o.observe(env);
    }
    let ended = line.handle(&env.event, now_ms);
    output.print(env);
    if let Some(end) = &ended {
        output.finish();
        let usage = line.usage();
        output.say_painted(&summary_line(
            end.outcome,
            &end.reason,
            line.committed(),
            &usage_summary(
                &usage.unwrap_or_default(),
                line.reported(),
                line.committed(),
            ),
            args.agent.cost(usage.as_ref()),
            output.is_terminal().then(|| line.elapsed_ms(now_ms)),
            output.color(),
        ));
        if std::mem::take(&mut trace.recording) {
            write_trace(session, output, trace, &env.run_id).await;
        }
        if let Some(o) = trace.otlp.clone() {
            if let Some(t) = trace_of(session, &env.run_id).await {
                output.say(&crate::otlp::send(&o, &t).await);
            }
        }
    }
    match &env.event {
        AgentEvent::RunStart { .. } => trace.recording = trace.path.is_some(),
        AgentEvent::AskUser {
            reference,
            question,
            options,
        } => {
            let choices: Vec<String> = options
                .iter()
                .enumerate()
                .map(|(i, o)| format!("{}) {o}", i + 1))
                .collect();
            output.say(&format!(
                "[ask] {question}{}{}",
                if choices.is_empty() { "" } else { "  " },
                choices.join("  ")
            ));
            output.say("[ask] type your answer (a number picks an option)");
            asked.0.push((reference.clone(), options.clone()));
        }
        AgentEvent::UserResponded { reference, .. }
        | AgentEvent::ToolEnd {
            tool_call_id: reference,
            ..
        } => asked.0.retain(|(r, _)| r != reference),
        AgentEvent::PromptQueued { queued: n, .. } => *queued = *n,
        AgentEvent::PromptDropped { .. } => *queued = queued.saturating_sub(1),
        AgentEvent::AgentResumed { trigger } if trigger == "queued_prompt" => {
            *queued = queued.saturating_sub(1);
        }
        _ => {}
    }
    ended.is_some()
}

/// The trace of run `run_id`, which just ended: the session keeps it right after the run's
/// last event, so this waits for it (up to 5 s, in 10 ms polls).
async fn trace_of(session: &Session, run_id: &str) -> Option<agentloop::trace::Trace> {
    for _ in 0..500 {
        if run_id.is_empty() {
            return None;
        }
        if let Some(t) = session.trace_of(run_id) {
            return Some(t);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Writes the trace of run `run_id`, which just ended: the session keeps it right after the
/// run's last event, so this waits for it (up to 5 s, in 10 ms polls).
async fn write_trace(session: &Session, output: &Output, target: &mut TraceTarget, run_id: &str) {
    let Some(path) = target.path.clone() else {
        return;
    };
    let Some(trace) = trace_of(session, run_id).await else {
        output.say("[trace] this run left no trace (it failed before it started)");
        return;
    };
    let file = numbered(&path, target.written + 1);
    match agentloop::trace::write(&trace, &file) {
        Ok(()) => {
            target.written += 1;
            output.say(&format!("[trace] wrote {}", file.display()));
        }
        Err(e) => output.say(&format!("[error] writing trace {}: {e}", file.display())),
    }
}

/// The `ask_user` questions shown and not yet answered, oldest first: their refs and options.
#[derive(Default)]
struct Asked(Vec<(String, Vec<String>)>);

impl Asked {
    /// When a question waits, the line answers the oldest one: a number picks its option.
    /// Lines that are commands (`/…`) stay commands.
    fn take_answer(&mut self, text: &str) -> Option<(String, String)> {
        if text.starts_with('/') && !text.starts_with("//") {
            return None;
        }
        let (reference, options) = self.0.first()?.clone();
        let text = text.trim();
        let answer = text
            .parse::<usize>()
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| options.get(i).cloned())
            .unwrap_or_else(|| text.to_string());
        self.0.remove(0);
        Some((reference, answer))
    }
}

/// Carries out one input line; false to leave (`/quit`).
async fn command(
    session: &Session,
    output: &Output,
    line: &StatusLine,
    trace: &mut TraceTarget,
    input: Line,
) -> bool {
    match input {
        Line::Empty => {}
        Line::Quit => return false,
        Line::Help => output.say(HELP),
        Line::Bad(message) => output.say(&message),
        Line::Answer((reference, answer)) => {
            // The event comes from the machine just before the session parks the question.
            for _ in 0..200 {
                if session.pending_questions().contains(&reference) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            match session.respond(&reference, answer.clone()) {
                Ok(()) => output.say(&format!("[answered] {answer}")),
                Err(e) => output.say(&format!("[error] {e}")),
            }
        }
        Line::Prompt(text) => match session.prompt(text).await {
            Ok(Ack::Queued(n)) => output.say(&format!("[queued] prompt {n} in line")),
            Ok(_) => {}
            Err(e) => output.say(&format!("[error] {e}")),
        },
        Line::Steer(text) => match session.steer(text).await {
            Ok(Ack::SteerQueued(_)) => output.say("[steer] taken at the next step"),
            Ok(_) => {}
            Err(e) => output.say(&format!("[error] {e}")),
        },
        Line::Approve(id) | Line::Reject(id) if id.is_none() && line.pending().len() != 1 => {
            output.say(&pending_list(line));
        }
        Line::Approve(id) => {
            let id = id.or_else(|| only_pending(line)).unwrap_or_default();
            parked(session, &id).await;
            match session.approve(&id, false) {
                Ok(()) => output.say(&format!("[approved] {id}")),
                Err(e) => output.say(&format!("[error] {e}")),
            }
        }
        Line::Reject(id) => {
            let id = id.or_else(|| only_pending(line)).unwrap_or_default();
            parked(session, &id).await;
            match session.reject(&id, "rejected by the user") {
                Ok(()) => output.say(&format!("[rejected] {id}")),
                Err(e) => output.say(&format!("[error] {e}")),
            }
        }
        Line::Model(name) => match session.switch_model(name.clone()).await {
            Ok(true) if session.status() == Status::Idle => {
                output.say(&format!("[model] {name}"));
            }
            Ok(true) => output.say(&format!("[model] {name} from the next step")),
            Ok(false) => output.say(&format!("[model] already {name}")),
            Err(SessionError::UnknownModel(name, known)) => output.say(&format!(
                "[error] no model {name:?} (known: {}; add one with --extra-model NAME)",
                known.join(", ")
            )),
            Err(e) => output.say(&format!("[error] {e}")),
        },
        Line::Trace(path) => {
            match &path {
                Some(p) => output.say(&format!(
                    "[trace] recording the following runs to {}",
                    p.display()
                )),
                None => output.say("[trace] off"),
            }
            *trace = TraceTarget {
                path,
                otlp: trace.otlp.take(),
                ..TraceTarget::default()
            };
        }
    }
    true
}

/// Waits (up to 2 s, in 10 ms polls) until call `id` is parked for an answer: the machine
/// announces `approval_required` just before the session's approver parks the call, so an
/// answer typed (or piped) right after the announcement could otherwise arrive first.
async fn parked(session: &Session, id: &str) {
    for _ in 0..200 {
        if session.pending_approvals().iter().any(|p| p == id) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn only_pending(line: &StatusLine) -> Option<String> {
    match line.pending() {
        [one] => Some(one.tool_call_id.clone()),
        _ => None,
    }
}

/// The calls waiting for approval, one a line (or that none does).
fn pending_list(line: &StatusLine) -> String {
    if line.pending().is_empty() {
        return "nothing waits for approval".to_string();
    }
    let mut s = String::from("several calls wait; name one (/approve ID, /reject ID):");
    for p in line.pending() {
        s.push_str(&format!(
            "\n  {} {} {}",
            p.tool_call_id, p.name, p.arguments
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as the reader thread takes them, with `max` bytes a line.
    fn lines_of(bytes: &[u8], max: usize) -> Vec<Input> {
        // A small buffer, so a line spans several reads.
        let mut input = std::io::BufReader::with_capacity(3, bytes);
        std::iter::from_fn(|| next_line(&mut input, max).unwrap()).collect()
    }

    #[test]
    fn a_line_over_the_limit_is_dropped_and_the_next_one_read() {
        let line = |s: &str| Input::Line(s.into());
        assert_eq!(
            lines_of(b"abcd\r\nabcde\nabcdefghij\n\nok", 5),
            [
                line("abcd"),
                line("abcde"),
                Input::TooLong(10),
                line(""),
                line("ok")
            ]
        );
        assert_eq!(lines_of(b"abcdef", 5), [Input::TooLong(6)]);
        assert_eq!(lines_of(b"abcdef\n", 6), [line("abcdef")]);
        assert_eq!(lines_of(b"\xff\n", 5), [line("\u{fffd}")]);
        assert!(lines_of(b"", 5).is_empty());
    }

    #[test]
    fn lines_are_prompts_or_commands() {
        assert_eq!(parse(""), Line::Empty);
        assert_eq!(parse("   \r\n"), Line::Empty);
        assert_eq!(parse("What is 2+3?"), Line::Prompt("What is 2+3?".into()));
        assert_eq!(parse("//etc/hosts?"), Line::Prompt("/etc/hosts?".into()));
        assert_eq!(parse("/steer  be brief "), Line::Steer("be brief".into()));
        assert_eq!(parse("/approve"), Line::Approve(None));
        assert_eq!(
            parse("/approve call_1"),
            Line::Approve(Some("call_1".into()))
        );
        assert_eq!(parse("/reject"), Line::Reject(None));
        assert_eq!(parse("/model gpt-4o"), Line::Model("gpt-4o".into()));
        assert_eq!(parse("/trace t.jsonl"), Line::Trace(Some("t.jsonl".into())));
        assert_eq!(parse("/trace off"), Line::Trace(None));
        assert_eq!(parse("/help"), Line::Help);
        assert_eq!(parse("/quit"), Line::Quit);
        assert_eq!(parse("/exit\n"), Line::Quit);
    }

    #[test]
    fn bad_commands_are_named_never_sent() {
        assert_eq!(parse("/steer"), Line::Bad("usage: /steer TEXT".into()));
        assert_eq!(parse("/model  "), Line::Bad("usage: /model NAME".into()));
        assert_eq!(
            parse("/trace"),
            Line::Bad("usage: /trace FILE | off".into())
        );
        assert_eq!(
            parse("/frobnicate x"),
            Line::Bad("unknown command /frobnicate (/help lists them)".into())
        );
        assert_eq!(
            parse("/"),
            Line::Bad("unknown command / (/help lists them)".into())
        );
    }

    #[test]
    fn later_traces_are_numbered_before_the_extension() {
        assert_eq!(numbered(Path::new("t.jsonl"), 1), Path::new("t.jsonl"));
        assert_eq!(
            numbered(Path::new("d/t.jsonl"), 2),
            Path::new("d/t.2.jsonl")
        );
        assert_eq!(numbered(Path::new("t"), 3), Path::new("t.3"));
    }

    #[test]
    fn pending_calls_are_listed() {
        let mut line = StatusLine::new();
        line.handle(&AgentEvent::RunStart {}, 0);
        assert_eq!(pending_list(&line), "nothing waits for approval");
        for id in ["c1", "c2"] {
            line.handle(
                &AgentEvent::ApprovalRequired {
                    tool_call_id: id.into(),
                    name: "calculator".into(),
                    arguments: serde_json::json!({"expression": "1+1"}),
                },
                0,
            );
        }
        assert_eq!(only_pending(&line), None);
        assert_eq!(
            pending_list(&line),
            "several calls wait; name one (/approve ID, /reject ID):\n  \
             c1 calculator {\"expression\":\"1+1\"}\n  c2 calculator {\"expression\":\"1+1\"}"
        );
    }
}
