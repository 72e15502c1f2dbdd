//! Session export (JSON Lines, Markdown transcript) and listing of a store directory.

use std::fmt::Write as _;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::options::validate_session_id;
use super::records::encode_record;
use super::{Entry, FileKind, StoreError};
use crate::regular_file::{open_regular, OpenError};
use agentloop_core::message::{Message, ToolStatus};

/// Writes `entries` as a session file (`{"v":1,"seq":N,...}` per line): the output can be
/// copied into a store directory as `<session>.jsonl`.
pub fn export_jsonl(entries: &[Entry], out: &mut impl Write) -> Result<(), StoreError> {
    for (i, entry) in entries.iter().enumerate() {
        let line = encode_record(i as u64 + 1, entry)?;
        out.write_all(&line).map_err(|source| StoreError::Io {
            path: "<export>".into(),
            source,
        })?;
    }
    Ok(())
}

/// A fenced block whose fence is longer than any backtick run inside `text`.
fn fenced(out: &mut String, lang: &str, text: &str) {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat((longest + 1).max(3));
    let _ = writeln!(out, "{fence}{lang}\n{text}\n{fence}\n");
}

fn message_md(out: &mut String, message: &Message) {
    match message {
        Message::System { content } => {
            let _ = writeln!(out, "**System:**\n\n{content}\n");
        }
        Message::User { content, parts } => {
            let _ = writeln!(out, "**User:**\n\n{content}\n");
            for part in parts {
                let _ = writeln!(out, "{}\n", part.describe());
            }
        }
        Message::Assistant(m) => {
            out.push_str("**Assistant:**\n\n");
            if !m.reasoning.is_empty() {
                let quoted: Vec<String> = m.reasoning.lines().map(|l| format!("> {l}")).collect();
                let _ = writeln!(out, "{}\n", quoted.join("\n"));
            }
            if !m.text.is_empty() {
                let _ = writeln!(out, "{}\n", m.text);
            }
            if let Some(refusal) = &m.refusal {
                let _ = writeln!(out, "_Refused:_ {refusal}\n");
            }
            for call in &m.tool_calls {
                let _ = writeln!(out, "- tool call `{}` (`{}`):\n", call.name, call.id);
                let args = serde_json::to_string_pretty(&call.arguments)
                    .unwrap_or_else(|_| call.arguments.to_string());
                fenced(out, "json", &args);
            }
        }
        Message::Tool(r) => {
            let _ = writeln!(
                out,
                "**Tool `{}`** (`{}`, {}):\n",
                r.name,
                r.tool_call_id,
                ToolStatus::as_str(r.status)
            );
            fenced(out, "", &r.content);
        }
    }
}

/// A readable transcript of a session: metadata, each run's user input, assistant turns
/// (with reasoning quoted and tool calls), tool results, compactions and run ends.
pub fn export_markdown(session: &str, entries: &[Entry]) -> String {
    let mut out = format!("# Session `{session}`\n\n");
    let mut run: Option<&str> = None;
    for entry in entries {
        if let Some(r) = entry.run_id() {
            if run != Some(r) {
                let _ = writeln!(out, "## Run `{r}`\n");
                run = Some(r);
            }
        }
        match entry {
            Entry::Metadata { model, config } => {
                let _ = writeln!(out, "_Metadata:_ model `{model}`\n");
                if !config.is_null() {
                    let text =
                        serde_json::to_string_pretty(config).unwrap_or_else(|_| config.to_string());
                    fenced(&mut out, "json", &text);
                }
            }
            Entry::UserInput { message, .. } => message_md(&mut out, message),
            Entry::Assistant {
                model_call_index,
                message,
                ..
            } => {
                let _ = writeln!(out, "### Step {model_call_index}\n");
                message_md(&mut out, &Message::Assistant(message.clone()));
            }
            Entry::ToolStarted {
                tool_call_id, name, ..
            } => {
                let _ = writeln!(out, "_Started `{name}` (`{tool_call_id}`)._\n");
            }
            Entry::ToolResult { result, .. } => {
                message_md(&mut out, &Message::Tool(result.clone()));
            }
            Entry::Compaction {
                removed, messages, ..
            } => {
                let _ = writeln!(
                    out,
                    "---\n\n_Compaction: {removed} messages removed; context continues with \
                     {} messages._\n",
                    messages.len()
                );
            }
            Entry::Title { title, .. } => {
                let _ = writeln!(out, "_Title:_ {title}\n");
            }
            Entry::RunEnd {
                outcome, reason, ..
            } => {
                let _ = if reason.is_empty() {
                    writeln!(out, "_Run {outcome}._\n")
                } else {
                    writeln!(out, "_Run {outcome}: {reason}._\n")
                };
            }
            Entry::Repair { repairs, .. } => {
                let _ = writeln!(out, "_Session repaired:_\n");
                for r in repairs {
                    let _ = writeln!(out, "- {r}");
                }
                let _ = writeln!(out);
            }
        }
    }
    out
}

/// One session file in a store directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionInfo {
    /// The session id.
    pub id: String,
    /// Its file.
    pub path: PathBuf,
    /// Complete records (lines), counted without parsing them.
    pub entries: usize,
    /// File size.
    pub bytes: u64,
    /// Last modification, when the platform reports it.
    pub modified: Option<SystemTime>,
    /// The file does not end with a newline (a torn last record).
    pub torn_tail: bool,
    /// Set when the path is not a regular file (a symbolic link, a FIFO, ...): it was not
    /// followed or read, and the counts are 0. The store refuses to load such a session.
    pub not_regular: Option<FileKind>,
}

/// The sessions in `dir` (`*.jsonl` entries with a valid session id), sorted by id; empty
/// when `dir` does not exist. Files are read in bounded chunks (only newlines are counted);
/// an entry that is not a regular file is listed with [`SessionInfo::not_regular`] and never
/// followed or read.
pub fn list_sessions(dir: &Path) -> Result<Vec<SessionInfo>, StoreError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| StoreError::Io { path, source }
    };
    let read_dir = match std::fs::read_dir(dir) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(dir)(e)),
    };
    let mut sessions = Vec::new();
    for item in read_dir {
        let item = item.map_err(io(dir))?;
        let path = item.path();
        let Some(id) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".jsonl"))
        else {
            continue;
        };
        if validate_session_id(id).is_err() {
            continue;
        }
        let mut info = SessionInfo {
            id: id.to_string(),
            path: path.clone(),
            entries: 0,
            bytes: 0,
            modified: None,
            torn_tail: false,
            not_regular: None,
        };
        let file = match open_regular(&path, std::fs::OpenOptions::new().read(true)) {
            Ok(file) => file,
            Err(OpenError::NotRegular(kind)) => {
                info.not_regular = Some(kind);
                sessions.push(info);
                continue;
            }
            // Deleted since the directory was read.
            Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(OpenError::Io(e)) => return Err(io(&path)(e)),
        };
        info.modified = file.metadata().ok().and_then(|m| m.modified().ok());
        let mut reader = std::io::BufReader::new(file);
        let mut last = None;
        loop {
            let chunk = match reader.fill_buf() {
                Ok(chunk) => chunk,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io(&path)(e)),
            };
            let Some(&end) = chunk.last() else { break };
            info.entries += memchr::memchr_iter(b'\n', chunk).count();
            info.bytes += chunk.len() as u64;
            last = Some(end);
            let n = chunk.len();
            reader.consume(n);
        }
        info.torn_tail = last.is_some_and(|b| b != b'\n');
        sessions.push(info);
    }
    sessions.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(sessions)
}
