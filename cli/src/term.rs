//! The terminal writer: the streamed answer on stdout and one status line on stderr that
//! changes in place. A thin layer over the pure [`StatusLine`]: it feeds it events with the
//! milliseconds since the command started and writes what it renders.
//!
//! The status line lives on the row below the cursor, so the answer can keep streaming on its
//! own row: drawing makes sure that row exists (`ESC D ESC M`: index down, scrolling at the
//! bottom, and back up), saves the cursor (`ESC 7`), moves down, clears the row and writes the
//! line, and restores the cursor (`ESC 8`). Before anything else is written the row is cleared
//! the same way, so text that wraps or a newline never leaves a stale status behind.
//!
//! What the run says (the answer, log lines, the status line's names and texts) passes
//! [`crate::out::text`] (or [`crate::out::line`]): only this module's own sequences reach
//! the terminal.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;

use clap::ValueEnum;

use agentloop::AgentEvent;
use agentloop::EventEnvelope;

use crate::print::{log_line, LogLevel, RETRY_MARKER};
use crate::status::{RenderOptions, StatusLine};

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ColorChoice {
    /// Colors on a terminal, unless `NO_COLOR` is set (and not empty).
    Auto,
    /// Always (even with `NO_COLOR`).
    Always,
    /// Never.
    Never,
}

/// Whether to color: `--color`, whether stderr is a terminal, and `NO_COLOR`'s value.
pub(crate) fn color_enabled(choice: ColorChoice, terminal: bool, no_color: Option<&str>) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => terminal && no_color.is_none_or(str::is_empty),
    }
}

/// Whether `run`/`chat` talk to a person: both stdout and stderr are terminals. With stdout
/// piped, stdout gets only the answer and stderr plain lines; with stderr redirected, no
/// cursor movement ends up in a file.
pub(crate) fn interactive() -> bool {
    std::io::stdout().is_terminal() && std::io::stderr().is_terminal()
}

/// Columns of the terminal on stderr (80 when it cannot be asked).
fn width() -> usize {
    #[cfg(unix)]
    {
        let mut size = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ writes one `winsize` into the pointer, which points at a live
        // local of that type; the descriptor is stderr's, and a failure leaves it zeroed.
        let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
        if ok && size.ws_col > 0 {
            return usize::from(size.ws_col);
        }
    }
    80
}

/// Save cursor, move down a row (same column), go to its start and clear it.
const TO_STATUS_ROW: &str = "\x1b7\x1bD\r\x1b[2K";
/// Back to where the cursor was.
const BACK: &str = "\x1b8";
/// Make sure a row exists below the cursor (scrolls at the bottom), keeping the column.
const MAKE_ROOM: &str = "\x1bD\x1bM";

struct State {
    line: StatusLine,
    /// The status row is on screen.
    drawn: bool,
    /// Answer text was written since the last newline on stdout.
    mid_line: bool,
    /// Answer text of the current, uncommitted attempt was written.
    attempt_printed: bool,
}

/// The answer and a live status line, for a person at a terminal.
pub(crate) struct Terminal {
    state: Mutex<State>,
    /// When the writer was made (tokio's clock: monotonic, virtual in paused tests).
    started: tokio::time::Instant,
    color: bool,
    verbose: bool,
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal")
            .field("color", &self.color)
            .field("verbose", &self.verbose)
            .finish()
    }
}

impl Terminal {
    /// A writer; `verbose` adds the state-transition log (and tools, retries) above the line.
    pub(crate) fn new(color: bool, verbose: bool) -> Self {
        Terminal {
            state: Mutex::new(State {
                line: StatusLine::new(),
                drawn: false,
                mid_line: false,
                attempt_printed: false,
            }),
            started: tokio::time::Instant::now(),
            color,
            verbose,
        }
    }

    /// Whether it colors.
    pub(crate) fn color(&self) -> bool {
        self.color
    }

    /// Milliseconds since the writer was made (the status line's clock).
    pub(crate) fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// A copy of the status model (pending approvals, counts for the summary).
    pub(crate) fn status(&self) -> StatusLine {
        self.lock(|s, _| s.line.clone())
    }

    fn lock<R>(&self, f: impl FnOnce(&mut State, &mut std::io::StderrLock<'_>) -> R) -> R {
        let mut guard = match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut err = std::io::stderr().lock();
        let r = f(&mut guard, &mut err);
        let _ = err.flush();
        r
    }

    fn clear(state: &mut State, err: &mut impl Write) {
        if state.drawn {
            let _ = write!(err, "{TO_STATUS_ROW}{BACK}");
            state.drawn = false;
        }
    }

    fn draw(&self, state: &mut State, err: &mut impl Write) {
        if !state.line.active() {
            Self::clear(state, err);
            return;
        }
        let opts = RenderOptions {
            color: self.color,
            width: width().saturating_sub(1),
        };
        let text = state.line.render(self.now_ms(), opts);
        let room = if state.drawn { "" } else { MAKE_ROOM };
        let _ = write!(err, "{room}{TO_STATUS_ROW}{text}{BACK}");
        state.drawn = true;
    }

    /// Hides the status line and ends a started answer line: the cursor is at the start of
    /// an empty row, where a line of its own can go.
    fn hide(state: &mut State, err: &mut impl Write) {
        Self::clear(state, err);
        Self::end_line(state);
    }

    /// Ends a started answer line (on stdout, where the answer is).
    fn end_line(state: &mut State) {
        if std::mem::take(&mut state.mid_line) {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out);
            let _ = out.flush();
        }
    }

    /// Shows `env`.
    pub(crate) fn event(&self, env: &EventEnvelope) {
        let now = self.now_ms();
        self.lock(|state, err| {
            if state.line.handle(&env.event, now).is_some() {
                Self::hide(state, err);
            }
            match &env.event {
                AgentEvent::TextDelta { text, .. } if !text.is_empty() => {
                    Self::clear(state, err);
                    let mut out = std::io::stdout().lock();
                    let _ = write!(out, "{}", crate::out::text(text));
                    let _ = out.flush();
                    state.mid_line = !text.ends_with('\n');
                    state.attempt_printed = true;
                }
                AgentEvent::ModelTurnRetried { .. }
                    if std::mem::take(&mut state.attempt_printed) =>
                {
                    Self::hide(state, err);
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{RETRY_MARKER}");
                    let _ = out.flush();
                }
                AgentEvent::ResponseComplete { .. } => {
                    state.attempt_printed = false;
                    Self::hide(state, err);
                }
                _ => {}
            }
            let level = if self.verbose {
                LogLevel::Verbose
            } else {
                LogLevel::Quiet
            };
            if let Some(line) = log_line(&env.event, level) {
                Self::hide(state, err);
                let _ = writeln!(err, "{}", crate::out::text(&line));
            }
            self.draw(state, err);
        });
    }

    /// Redraws the line (spinner, elapsed, countdown); call it a few times a second.
    pub(crate) fn tick(&self) {
        self.lock(|state, err| {
            if state.line.active() {
                self.draw(state, err);
            }
        });
    }

    /// Writes `text` (through [`crate::out::text`]) as a line of its own on stderr, above
    /// the status line.
    pub(crate) fn say(&self, text: &str) {
        self.say_painted(&crate::out::text(text));
    }

    /// [`Terminal::say`] for a line that is already safe (its parts neutralized, its colors
    /// the program's own).
    pub(crate) fn say_painted(&self, line: &str) {
        self.lock(|state, err| {
            Self::hide(state, err);
            let _ = writeln!(err, "{line}");
            self.draw(state, err);
        });
    }

    /// Writes `text` (no newline) on stderr with the status line hidden: the chat's prompt.
    pub(crate) fn prompt(&self, text: &str) {
        self.lock(|state, err| {
            Self::hide(state, err);
            let _ = write!(err, "{}", crate::out::text(text));
        });
    }

    /// A line typed at the terminal was echoed: its newline moved the cursor down, onto the
    /// status row if one was drawn, which is cleared (and drawn again below).
    pub(crate) fn input_echoed(&self) {
        self.lock(|state, err| {
            if std::mem::take(&mut state.drawn) {
                let _ = write!(err, "\r\x1b[2K");
            }
            state.mid_line = false;
            self.draw(state, err);
        });
    }

    /// Removes the status line and ends a started answer line (before the final line).
    pub(crate) fn finish(&self) {
        self.lock(|state, err| {
            Self::hide(state, err);
        });
    }
}

/// Redraws `terminal` every 100 ms until the task is dropped or aborted.
pub(crate) fn spawn_ticker(terminal: std::sync::Arc<Terminal>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_millis(100));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            every.tick().await;
            terminal.tick();
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_color_and_the_flag_decide_colors() {
        use ColorChoice::*;
        assert!(color_enabled(Auto, true, None));
        assert!(
            color_enabled(Auto, true, Some("")),
            "an empty NO_COLOR is unset"
        );
        assert!(!color_enabled(Auto, true, Some("1")));
        assert!(!color_enabled(Auto, false, None));
        assert!(color_enabled(Always, false, Some("1")));
        assert!(!color_enabled(Never, true, None));
    }
}
