//! `agentloop sessions`: list, show, check and export stored sessions.
//!
//! These commands only read: they never take a session's lock, so they work beside a running
//! session, and a torn last entry is reported as a warning but left in place (the next
//! `run`/`resume` of the session cuts it).
//!
//! Exit codes: 0 fine, 1 `check` found violations, 2 the session cannot be read (missing,
//! corrupt, unsupported version, IO error).

use std::io::Write;
use std::process::ExitCode;
use std::time::UNIX_EPOCH;

use clap::{Args, Subcommand, ValueEnum};

use agentloop::store::{export_jsonl, export_markdown, AnyStore, Durability, Entry, StoreError};
use agentloop::{Message, ToolStatus};
use agentloop_core::session_log::{check, pending};

use crate::out::{errln, out, outln};
use crate::run::open_store;

/// Arguments of `agentloop sessions`.
#[derive(Debug, Args)]
pub(crate) struct SessionsArgs {
    /// Session store: a directory (default: `$AGENTLOOP_STORE`, else
    /// `./.agentloop/sessions`), `sqlite:PATH` or `postgres://user@host:port/db`.
    #[arg(long, global = true)]
    pub store: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: SessionsCommand,
}

/// `agentloop sessions` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum SessionsCommand {
    /// List the sessions of the store.
    List,
    /// Print a session's entries readably.
    Show {
        /// The session id.
        id: String,
    },
    /// Verify the pairing invariant and the idempotency keys; exit 1 on any violation.
    Check {
        /// The session id.
        id: String,
    },
    /// Export a session.
    Export {
        /// The session id.
        id: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = ExportFormat::Jsonl)]
        format: ExportFormat,
    },
}

/// Export formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ExportFormat {
    /// The session file format (`{"v":1,"seq":N,...}` per line).
    Jsonl,
    /// A readable transcript.
    Markdown,
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    errln!("error: {message}");
    ExitCode::from(2)
}

/// Runs the `sessions` command.
pub(crate) fn main(args: SessionsArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    rt.block_on(run(args))
}

async fn run(args: SessionsArgs) -> ExitCode {
    // These commands only read: a SQLite database that is not there is not created.
    if let Some(path) = args.store.as_deref().and_then(crate::run::sqlite_path) {
        if std::fs::symlink_metadata(&path).is_err() {
            let location = format!("sqlite:{}", path.display());
            return match &args.command {
                SessionsCommand::List => {
                    errln!("no sessions in {location} (no database file)");
                    ExitCode::SUCCESS
                }
                SessionsCommand::Show { id }
                | SessionsCommand::Check { id }
                | SessionsCommand::Export { id, .. } => {
                    fail(format!("no session {id} in {location} (no database file)"))
                }
            };
        }
    }
    // Durability does not matter: these commands never append.
    let store = match open_store(args.store.as_deref(), Durability::Sync).await {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let id = match &args.command {
        SessionsCommand::List => return list(&store).await,
        SessionsCommand::Show { id }
        | SessionsCommand::Check { id }
        | SessionsCommand::Export { id, .. } => id.clone(),
    };
    let (entries, report) = match load(&store, &id).await {
        Ok(loaded) => loaded,
        Err(e) => return fail(e),
    };
    for w in &report {
        errln!("warning: {w}");
    }
    match args.command {
        SessionsCommand::List => ExitCode::SUCCESS,
        SessionsCommand::Show { .. } => {
            show(&id, &entries);
            ExitCode::SUCCESS
        }
        SessionsCommand::Check { .. } => check_main(&id, &entries),
        SessionsCommand::Export { format, .. } => match format {
            ExportFormat::Jsonl => {
                let mut out = std::io::stdout().lock();
                match export_jsonl(&entries, &mut out).and_then(|()| {
                    out.flush().map_err(|source| StoreError::Io {
                        path: "<stdout>".into(),
                        source,
                    })
                }) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => fail(e),
                }
            }
            ExportFormat::Markdown => {
                out!("{}", export_markdown(&id, &entries));
                ExitCode::SUCCESS
            }
        },
    }
}

/// Loads a session that must exist, read-only (no lock).
async fn load(store: &AnyStore, id: &str) -> Result<(Vec<Entry>, Vec<String>), String> {
    if !store.exists(id).await.map_err(|e| e.to_string())? {
        let file = match store.as_file_store() {
            Some(files) => files
                .session_path(id)
                .map(|p| format!(" (no file {})", p.display()))
                .unwrap_or_default(),
            None => String::new(),
        };
        return Err(format!("no session {id} in {}{file}", store.location()));
    }
    store.load_report(id).await.map_err(|e| e.to_string())
}

/// The state of a session's last run: `completed`/`failed`/`aborted`, `interrupted`, or `empty`.
fn status(entries: &[Entry]) -> String {
    match agentloop::runtime::resume::interrupted_run(entries) {
        Some(run) => format!("interrupted ({run})"),
        None => entries
            .iter()
            .rev()
            .find_map(|e| match e {
                Entry::RunEnd { outcome, .. } => Some(outcome.to_string()),
                _ => None,
            })
            .unwrap_or_else(|| "empty".into()),
    }
}

async fn list(store: &AnyStore) -> ExitCode {
    let sessions = match store.list().await {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    if sessions.is_empty() {
        errln!("no sessions in {}", store.location());
        return ExitCode::SUCCESS;
    }
    outln!(
        "{:<32} {:>8} {:>10} {:>20}  status",
        "session",
        "entries",
        "bytes",
        "modified (UTC)"
    );
    for s in sessions {
        let state = match s.not_regular {
            Some(kind) => format!("refused: {kind}, not a regular file (not followed)"),
            None => match store.load_report(&s.id).await {
                Ok((entries, _)) => status(&entries),
                Err(StoreError::LineTooLong { line, .. }) => {
                    format!("unreadable: line {line} is over the entry size limit")
                }
                Err(StoreError::RowTooLong { seq, .. }) => {
                    format!("unreadable: row {seq} is over the entry size limit")
                }
                Err(StoreError::NotRegularFile { kind, .. }) => {
                    format!("refused: {kind}, not a regular file (not followed)")
                }
                Err(_) => "corrupt (see `sessions check`)".into(),
            },
        };
        let modified = s
            .modified
            .and_then(|m| m.duration_since(UNIX_EPOCH).ok())
            .map(|d| rfc3339_utc(d.as_secs()))
            .unwrap_or_else(|| "-".into());
        outln!(
            "{:<32} {:>8} {:>10} {:>20}  {state}{}",
            s.id,
            s.entries,
            s.bytes,
            modified,
            if s.torn_tail { ", torn tail" } else { "" }
        );
    }
    ExitCode::SUCCESS
}

pub(crate) use agentloop_trace_tools::export_inspect::rfc3339_utc;

fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

/// One line per entry: `seq  kind  run  details`.
fn show(id: &str, entries: &[Entry]) {
    outln!(
        "session {id}: {} entries, {}",
        entries.len(),
        status(entries)
    );
    for (i, e) in entries.iter().enumerate() {
        let seq = i + 1;
        let run = e.run_id().unwrap_or("-");
        let line = match e {
            Entry::Metadata { model, .. } => format!("metadata      model={model}"),
            Entry::Title { title, .. } => format!("title         {run}  {}", one_line(title, 100)),
            Entry::UserInput { message, .. } => {
                let text = match message {
                    Message::System { content } => content.clone(),
                    user => user.user_text().unwrap_or_default(),
                };
                format!("user          {run}  {}", one_line(&text, 100))
            }
            Entry::Assistant {
                model_call_index,
                message,
                ..
            } => {
                let calls: Vec<String> = message
                    .tool_calls
                    .iter()
                    .map(|c| format!("{}({})", c.name, c.id))
                    .collect();
                format!(
                    "assistant     {run}  step {model_call_index}: {}{}",
                    one_line(&message.text, 80),
                    if calls.is_empty() {
                        String::new()
                    } else {
                        format!(" -> {}", calls.join(", "))
                    }
                )
            }
            Entry::ToolStarted {
                tool_call_id, name, ..
            } => format!("tool_started  {run}  {name} ({tool_call_id})"),
            Entry::ToolResult { result, .. } => format!(
                "tool_result   {run}  {} ({}) {}: {}",
                result.name,
                result.tool_call_id,
                ToolStatus::as_str(result.status),
                one_line(&result.content, 80)
            ),
            Entry::Compaction { removed, .. } => {
                format!("compaction    {run}  removed {removed} messages")
            }
            Entry::RunEnd {
                outcome, reason, ..
            } => format!("run_end       {run}  {outcome}: {reason}"),
            Entry::Repair { repairs, .. } => format!(
                "repair        {run}  {}",
                repairs
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        };
        // Names, ids and reasons come from the store: one line, nothing for the terminal.
        outln!("{seq:>6}  {}", crate::out::line(&line));
    }
}

fn check_main(id: &str, entries: &[Entry]) -> ExitCode {
    let violations = check(entries);
    for call in pending(entries) {
        outln!(
            "pending: tool call {} ({}) of run {} step {} has no result yet ({}); `agentloop resume {id}` settles it",
            call.tool_call_id,
            call.name,
            call.run_id,
            call.model_call_index,
            if call.started { "started" } else { "not started" }
        );
    }
    if violations.is_empty() {
        outln!(
            "session {id}: ok ({} entries, {})",
            entries.len(),
            status(entries)
        );
        return ExitCode::SUCCESS;
    }
    for v in &violations {
        outln!("violation: {v}");
    }
    outln!(
        "session {id}: {} violation(s); the next run on the session repairs them \
         (`agentloop run --session {id} PROMPT`)",
        violations.len()
    );
    ExitCode::from(1)
}

#[cfg(test)]
mod tests {
    use super::rfc3339_utc;

    #[test]
    fn modification_times_read_as_rfc_3339_utc() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z"); // a leap day
        assert_eq!(rfc3339_utc(1_709_251_199), "2024-02-29T23:59:59Z");
        assert_eq!(rfc3339_utc(1_796_162_969), "2026-12-01T22:09:29Z");
        assert_eq!(rfc3339_utc(4_102_444_800), "2100-01-01T00:00:00Z"); // not a leap year
    }
}
