//! How `run` and `resume` print events: `text` streams the answer to stdout and the rest to
//! stderr, on a terminal as one live status line (`term.rs`), piped as lines (tools, retries,
//! errors; state changes with `-v`); `json` prints every event as one JSON line on stdout.
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
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use clap::ValueEnum;

use agentloop::AgentEvent;
use agentloop::EventEnvelope;
use agentloop::{ToolStatus, Usage};

use crate::out::{errln, line, outln};
use crate::status::summary_line;
use crate::term::Terminal;

/// Event output formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum EventsFormat {
    /// Human-readable.
    Text,
    /// JSON lines.
    Json,
}

/// The stdout line that says the text printed since the previous marker (or the start) was
/// the provisional output of a failed attempt, discarded by a retry.
pub(crate) const RETRY_MARKER: &str = "[retrying: previous output discarded]";

/// Most bytes of a tool's arguments echoed to stderr.
pub(crate) const ECHO_LIMIT: usize = 2048;

/// `text` cut to at most `limit` bytes (on a character boundary) plus a
/// `… (N bytes truncated)` marker; unchanged when it fits.
pub(crate) fn clip(text: &str, limit: usize) -> Cow<'_, str> {
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
pub(crate) fn usage_summary(total: &Usage, reported: u32, committed: u32) -> String {
    let counts = format!("in={} out={}", total.input_tokens, total.output_tokens);
    if reported == 0 {
        "usage unknown (the provider reported none)".to_string()
    } else if reported < committed {
        format!("usage {counts} (reported by {reported} of {committed} steps)")
    } else {
        format!("usage {counts}")
    }
}

/// Where `run` and `resume` send events: plain lines (piped, or `--events json`), or a
/// terminal with a live status line (`--events text` with stdout and stderr terminals).
#[derive(Debug)]
pub(crate) enum Output {
    /// Lines.
    Lines(Printer),
    /// The answer and a status line.
    Terminal(Arc<Terminal>),
}

impl Output {
    /// The output for these flags, on this process's stdout and stderr.
    pub(crate) fn for_args(format: EventsFormat, verbose: bool, color: bool) -> Self {
        match format {
            EventsFormat::Text if crate::term::interactive() => {
                Output::Terminal(Arc::new(Terminal::new(color, verbose)))
            }
            _ => Output::Lines(Printer::new(format, verbose)),
        }
    }

    /// Shows `env`.
    pub(crate) fn print(&self, env: &EventEnvelope) {
        match self {
            Output::Lines(p) => p.print(env),
            Output::Terminal(t) => t.event(env),
        }
    }

    /// Keeps the status line moving (spinner, elapsed, countdown) while the task lives.
    pub(crate) fn spawn_ticker(&self) -> Option<AbortOnDrop> {
        match self {
            Output::Lines(_) => None,
            Output::Terminal(t) => Some(AbortOnDrop(crate::term::spawn_ticker(t.clone()))),
        }
    }

    /// Whether this is the terminal with a status line.
    pub(crate) fn is_terminal(&self) -> bool {
        matches!(self, Output::Terminal(_))
    }

    /// Whether the terminal lines are colored.
    pub(crate) fn color(&self) -> bool {
        matches!(self, Output::Terminal(t) if t.color())
    }

    /// A line of its own on stderr (above the status line on a terminal), through
    /// [`crate::out::text`].
    pub(crate) fn say(&self, text: &str) {
        match self {
            Output::Lines(_) => errln!("{text}"),
            Output::Terminal(t) => t.say(text),
        }
    }

    /// The chat's input prompt, on a terminal only.
    pub(crate) fn prompt(&self, text: &str) {
        if let Output::Terminal(t) = self {
            t.prompt(text);
        }
    }

    /// A line typed at the terminal was echoed (its newline moved the cursor).
    pub(crate) fn input_echoed(&self) {
        if let Output::Terminal(t) = self {
            t.input_echoed();
        }
    }

    /// Removes the status line (before an error message).
    pub(crate) fn finish(&self) {
        if let Output::Terminal(t) = self {
            t.finish();
        }
    }

    /// Prints the run's final line on stderr: outcome, reason, steps and usage; on a
    /// terminal also the cost (with `--price`) and the elapsed time, in color.
    pub(crate) fn summary(
        &self,
        outcome: &str,
        reason: &str,
        steps: u32,
        usage: Option<&Usage>,
        cost_usd: Option<f64>,
    ) {
        let total = usage.copied().unwrap_or_default();
        let line = match self {
            Output::Lines(p) => summary_line(
                outcome,
                reason,
                steps,
                &p.usage_summary(&total),
                cost_usd,
                None,
                false,
            ),
            Output::Terminal(t) => {
                t.finish();
                let status = t.status();
                summary_line(
                    outcome,
                    reason,
                    steps,
                    &usage_summary(&total, status.reported(), status.committed()),
                    cost_usd,
                    Some(status.elapsed_ms(t.now_ms())),
                    t.color(),
                )
            }
        };
        Self::say_painted_on(self, &line);
    }

    /// A line of its own on stderr that is already safe: built by [`summary_line`] (its
    /// parts neutralized, its colors the program's own).
    pub(crate) fn say_painted(&self, line: &str) {
        Self::say_painted_on(self, line);
    }

    fn say_painted_on(&self, line: &str) {
        match self {
            Output::Lines(_) => crate::out::stderr_raw(&format!("{line}\n")),
            Output::Terminal(t) => t.say_painted(line),
        }
    }
}

/// A task aborted when this is dropped.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Prints one run's events in one format.
#[derive(Debug)]
pub(crate) struct Printer {
    format: EventsFormat,
    /// Which stderr lines `text` prints.
    level: LogLevel,
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
    /// A printer for `format`; `verbose` adds the state transitions to the stderr lines.
    pub(crate) fn new(format: EventsFormat, verbose: bool) -> Self {
        Printer {
            format,
            level: if verbose {
                LogLevel::Verbose
            } else {
                LogLevel::Normal
            },
            mid_line: AtomicBool::new(false),
            attempt_printed: AtomicBool::new(false),
            committed: AtomicU32::new(0),
            reported: AtomicU32::new(0),
        }
    }

    /// [`usage_summary`] of `total` with the steps this printer saw committed.
    pub(crate) fn usage_summary(&self, total: &Usage) -> String {
        usage_summary(
            total,
            self.reported.load(Ordering::Relaxed),
            self.committed.load(Ordering::Relaxed),
        )
    }

    fn end_line(&self) {
        if self.mid_line.swap(false, Ordering::Relaxed) {
            crate::out::stdout_raw("\n");
        }
    }

    /// Prints `env`.
    pub(crate) fn print(&self, env: &EventEnvelope) {
        if let AgentEvent::ResponseComplete { usage, .. } = &env.event {
            self.committed.fetch_add(1, Ordering::Relaxed);
            if usage.is_some() {
                self.reported.fetch_add(1, Ordering::Relaxed);
            }
        }
        match self.format {
            EventsFormat::Json => {
                if let Ok(line) = serde_json::to_string(env) {
                    crate::out::stdout_raw(&format!("{}\n", crate::out::json(&line)));
                }
            }
            EventsFormat::Text => self.print_text(&env.event),
        }
    }

    fn print_text(&self, event: &AgentEvent) {
        match event {
            AgentEvent::TextDelta { text, .. } if !text.is_empty() => {
                crate::out::stdout_raw(&crate::out::text(text));
                self.mid_line
                    .store(!text.ends_with('\n'), Ordering::Relaxed);
                self.attempt_printed.store(true, Ordering::Relaxed);
            }
            AgentEvent::ModelTurnRetried {
                model_call_index,
                attempt,
            } if self.attempt_printed.swap(false, Ordering::Relaxed) => {
                self.end_line();
                outln!("{RETRY_MARKER}");
                errln!(
                    "[retry] step {model_call_index} attempt {attempt}: the output above the \
                     `{RETRY_MARKER}` line on stdout is discarded"
                );
            }
            AgentEvent::ResponseComplete { .. } => {
                self.attempt_printed.store(false, Ordering::Relaxed);
                self.end_line();
            }
            _ => {}
        }
        if let Some(line) = log_line(event, self.level) {
            errln!("{line}");
        }
    }
}

/// How much of the run goes to stderr as lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LogLevel {
    /// On a terminal: only what needs a person (errors, aborts, repairs, approvals); the
    /// status line shows the rest.
    Quiet,
    /// Piped: also tool calls and retries.
    Normal,
    /// `-v`: also every state transition.
    Verbose,
}

/// The stderr line for `event` at `level`, if it gets one.
pub(crate) fn log_line(event: &AgentEvent, level: LogLevel) -> Option<String> {
    let normal = level >= LogLevel::Normal;
    match event {
        AgentEvent::StateChanged {
            machine,
            from,
            to,
            event,
        } if level == LogLevel::Verbose => Some(format!(
            "[{machine:?}] {} --{}--> {}",
            line(from),
            line(event),
            line(to)
        )),
        AgentEvent::Retry {
            attempt,
            delay_ms,
            reason,
            ..
        } if normal => Some(format!(
            "[retry] attempt {attempt} in {delay_ms} ms: {}",
            line(reason)
        )),
        AgentEvent::ToolStart {
            name, arguments, ..
        } if normal => Some(format!(
            "[tool] {} {}",
            line(name),
            clip(&arguments.to_string(), ECHO_LIMIT)
        )),
        // A call that did not complete says why (its error's text), cut like the arguments.
        AgentEvent::ToolEnd {
            name,
            status,
            result,
            ..
        } if normal => Some(match status {
            ToolStatus::Completed => format!("[tool] {} -> {status:?}", line(name)),
            _ => format!(
                "[tool] {} -> {status:?}: {}",
                line(name),
                line(&clip(result, ECHO_LIMIT))
            ),
        }),
        // A denied call needs the person's eye as an approval does; the others are routine.
        AgentEvent::ToolRuleMatched {
            tool_call_id,
            name,
            rule,
            action,
            timeout_ms,
        } if normal || *action == agentloop_core::process::RuleAction::Deny => {
            let deadline = timeout_ms.map(|ms| format!(", deadline {ms} ms"));
            Some(format!(
                "[rule] {} ({}): {action} by rule {}{}",
                line(name),
                line(tool_call_id),
                line(&rule.to_string()),
                deadline.unwrap_or_default()
            ))
        }
        AgentEvent::StatusUpdate { text, .. } if normal => Some(format!("[status] {}", line(text))),
        AgentEvent::TitleGenerated { title, .. } if normal => {
            Some(format!("[title] {}", line(title)))
        }
        AgentEvent::TodoChange { todos, .. } if normal => Some(
            todos
                .iter()
                .map(|t| format!("[todo] {} {}", t.status.mark(), line(&t.content)))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        AgentEvent::PlanGenerated { steps, .. } if normal => Some(
            steps
                .iter()
                .enumerate()
                .map(|(i, s)| format!("[plan] {}. {}", i + 1, line(s)))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        AgentEvent::RunError { error, .. } => Some(format!("[error] {}", line(error))),
        AgentEvent::AgentAbort { reason, .. } => Some(format!("[abort] {}", line(reason))),
        AgentEvent::SessionRepaired { repair } => {
            Some(format!("[repaired] {}", line(&repair.to_string())))
        }
        AgentEvent::ApprovalRequired {
            tool_call_id,
            name,
            arguments,
        } => Some(format!(
            "[approval] {} ({}) needs approval: {}",
            line(name),
            line(tool_call_id),
            clip(&arguments.to_string(), ECHO_LIMIT)
        )),
        _ => None,
    }
}

/// The first `max` bytes of `s`, cut back to a char boundary.
fn preview(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
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
    fn a_failed_tool_end_line_says_why() {
        let end = |status, text: &str| {
            AgentEvent::tool_end(&agentloop::ToolResult {
                tool_call_id: "c1".into(),
                name: "read_file".into(),
                content: text.into(),
                status,
            })
        };
        assert_eq!(
            log_line(
                &end(ToolStatus::Error, "no such file: a.txt"),
                LogLevel::Normal
            )
            .as_deref(),
            Some("[tool] read_file -> Error: no such file: a.txt")
        );
        assert_eq!(
            log_line(&end(ToolStatus::Completed, "hello"), LogLevel::Normal).as_deref(),
            Some("[tool] read_file -> Completed")
        );
        let long = log_line(
            &end(ToolStatus::Error, &"e".repeat(5_000)),
            LogLevel::Normal,
        );
        assert!(
            long.as_deref()
                .is_some_and(|l| l.ends_with("… (2952 bytes truncated)")),
            "{long:?}"
        );
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
        let printer = Printer::new(EventsFormat::Json, false);
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
