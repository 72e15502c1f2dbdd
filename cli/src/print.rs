//! How `run` and `resume` print events: `text` streams the answer to stdout and everything
//! else (state changes, tools, retries, errors) to stderr; `json` prints every event as one
//! JSON line on stdout.
//!
//! In `text` mode stdout holds only answer text and, when a model attempt fails after some of
//! its text was printed and is retried (R-IN-6: `model_turn_retried`), the line
//! [`RETRY_MARKER`]. The marker goes to stdout, not stderr, because only there is it ordered
//! with the text it discards: the text after the last marker is the answer. (The committed
//! text alone is in `--events json`: `response_complete.message.text`, `run_end.final_text`.)
//!
//! Tool arguments echoed to stderr are cut at [`ECHO_LIMIT`] bytes with a
//! `… (N bytes truncated)` marker, so a huge argument cannot flood the terminal.
//!
//! The printer also counts which committed steps reported usage, so the run summary says
//! `usage unknown` when the server sent none ([`usage_summary`]) instead of `in=0 out=0`.

use std::borrow::Cow;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use clap::ValueEnum;

use agentloop::agent_event::AgentEvent;
use agentloop::message::Usage;
use agentloop::runtime::offload::preview;
use agentloop::runtime::EventEnvelope;

/// Event output formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum EventsFormat {
    /// Human-readable.
    Text,
    /// JSON lines.
    Json,
}

/// The stdout line that says the text printed since the previous marker (or the start) was
/// the provisional output of a failed attempt, discarded by a retry.
pub const RETRY_MARKER: &str = "[retrying: previous output discarded]";

/// Most bytes of a tool's arguments echoed to stderr.
pub const ECHO_LIMIT: usize = 2048;

/// `text` cut to at most `limit` bytes (on a character boundary) plus a
/// `… (N bytes truncated)` marker; unchanged when it fits.
pub fn clip(text: &str, limit: usize) -> Cow<'_, str> {
    if text.len() <= limit {
        return Cow::Borrowed(text);
    }
    let head = preview(text, limit);
    Cow::Owned(format!(
        "{head}… ({} bytes truncated)",
        text.len() - head.len()
    ))
}

/// The run summary's usage part: `usage in=I out=O` when every committed step reported usage,
/// `usage unknown (...)` when none did (a server that sends no usage is not a run that used
/// no tokens), and the totals with `(reported by R of C steps)` in between.
pub fn usage_summary(total: &Usage, reported: u32, committed: u32) -> String {
    let counts = format!("in={} out={}", total.input_tokens, total.output_tokens);
    if reported == 0 {
        "usage unknown (the provider reported none)".to_string()
    } else if reported < committed {
        format!("usage {counts} (reported by {reported} of {committed} steps)")
    } else {
        format!("usage {counts}")
    }
}

/// Prints one run's events in one format.
#[derive(Debug)]
pub struct Printer {
    format: EventsFormat,
    /// Answer text was printed since the last newline on stdout.
    mid_line: AtomicBool,
    /// Answer text of the current, uncommitted attempt was printed.
    attempt_printed: AtomicBool,
    /// Steps committed (`response_complete`) in this process.
    committed: AtomicU32,
    /// Of those, the steps whose response carried usage.
    reported: AtomicU32,
}

impl Printer {
    /// A printer for `format`.
    pub fn new(format: EventsFormat) -> Self {
        Printer {
            format,
            mid_line: AtomicBool::new(false),
            attempt_printed: AtomicBool::new(false),
            committed: AtomicU32::new(0),
            reported: AtomicU32::new(0),
        }
    }

    /// [`usage_summary`] of `total` with the steps this printer saw committed.
    pub fn usage_summary(&self, total: &Usage) -> String {
        usage_summary(
            total,
            self.reported.load(Ordering::Relaxed),
            self.committed.load(Ordering::Relaxed),
        )
    }

    fn end_line(&self) {
        if self.mid_line.swap(false, Ordering::Relaxed) {
            println!();
        }
    }

    /// Prints `env`.
    pub fn print(&self, env: &EventEnvelope) {
        if let AgentEvent::ResponseComplete { usage, .. } = &env.event {
            self.committed.fetch_add(1, Ordering::Relaxed);
            if usage.is_some() {
                self.reported.fetch_add(1, Ordering::Relaxed);
            }
        }
        match self.format {
            EventsFormat::Json => {
                if let Ok(line) = serde_json::to_string(env) {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{line}");
                }
            }
            EventsFormat::Text => self.print_text(&env.event),
        }
    }

    fn print_text(&self, event: &AgentEvent) {
        match event {
            AgentEvent::TextDelta { text, .. } if !text.is_empty() => {
                let mut out = std::io::stdout().lock();
                let _ = write!(out, "{text}");
                let _ = out.flush();
                self.mid_line
                    .store(!text.ends_with('\n'), Ordering::Relaxed);
                self.attempt_printed.store(true, Ordering::Relaxed);
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
            } if self.attempt_printed.swap(false, Ordering::Relaxed) => {
                self.end_line();
                println!("{RETRY_MARKER}");
                eprintln!(
                    "[retry] step {model_call_index} attempt {attempt}: the output above the \
                     `{RETRY_MARKER}` line on stdout is discarded"
                );
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
            } => eprintln!("[tool] {name} {}", clip(&arguments.to_string(), ECHO_LIMIT)),
            AgentEvent::ToolEnd { name, status, .. } => eprintln!("[tool] {name} -> {status:?}"),
            AgentEvent::ResponseComplete { .. } => {
                self.attempt_printed.store(false, Ordering::Relaxed);
                self.end_line();
            }
            AgentEvent::RunError { error, .. } => eprintln!("[error] {error}"),
            AgentEvent::AgentAbort { reason, .. } => eprintln!("[abort] {reason}"),
            AgentEvent::SessionRepaired { repair } => eprintln!("[repaired] {repair}"),
            AgentEvent::ApprovalRequired {
                tool_call_id, name, ..
            } => eprintln!("[approval] {name} ({tool_call_id}) needs approval"),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_short_text_and_cuts_long_text_on_a_char_boundary() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcd", 3), "abc… (1 bytes truncated)");
        // 'é' is two bytes: a cut inside it moves back to its start.
        assert_eq!(clip("aé", 2), "a… (2 bytes truncated)");
        let long = "x".repeat(10_000);
        let clipped = clip(&long, ECHO_LIMIT);
        assert!(clipped.starts_with(&"x".repeat(ECHO_LIMIT)));
        assert!(clipped.ends_with("… (7952 bytes truncated)"), "{clipped}");
    }

    #[test]
    fn usage_summary_says_unknown_when_no_step_reported_usage() {
        let zero = Usage::default();
        assert_eq!(
            usage_summary(&zero, 0, 2),
            "usage unknown (the provider reported none)"
        );
        assert_eq!(
            usage_summary(&zero, 0, 0),
            "usage unknown (the provider reported none)"
        );
        let some = Usage {
            input_tokens: 12,
            output_tokens: 3,
            ..Usage::default()
        };
        assert_eq!(usage_summary(&some, 2, 2), "usage in=12 out=3");
        assert_eq!(
            usage_summary(&some, 1, 2),
            "usage in=12 out=3 (reported by 1 of 2 steps)"
        );
        // A server that reports zeros reported them: they are shown, not called unknown.
        assert_eq!(usage_summary(&zero, 1, 1), "usage in=0 out=0");
    }

    #[test]
    fn the_printer_counts_steps_that_reported_usage() {
        let printer = Printer::new(EventsFormat::Json);
        let complete = |usage: Option<Usage>| EventEnvelope {
            index: 0,
            run_id: "r".into(),
            ts_ms: 0,
            event: AgentEvent::ResponseComplete {
                model_call_index: 1,
                usage,
                tool_calls: 0,
                message: Box::default(),
            },
        };
        printer.print(&complete(None));
        assert_eq!(
            printer.usage_summary(&Usage::default()),
            "usage unknown (the provider reported none)"
        );
        printer.print(&complete(Some(Usage::default())));
        assert_eq!(
            printer.usage_summary(&Usage::default()),
            "usage in=0 out=0 (reported by 1 of 2 steps)"
        );
    }
}
