//! The terminal's status line, as a pure model: [`StatusLine::handle`] folds the run's events
//! in, [`StatusLine::render`] returns the line for a given instant. No IO and no clock: time
//! comes in as milliseconds since the command started, so every line is reproducible in a
//! unit test. `term.rs` is the thin layer that writes it to a terminal.
//!
//! ```text
//! ⠹ tools · step 2 · 3.4s · tok 19↑ 17↓ · calculator, read_file
//! ⠼ retrying in 2.1s (attempt 2: rate_limited) · step 1 · 5.0s · tok 0↑ 0↓
//! ```

use std::collections::BTreeMap;

use agentloop::session::Status;
use agentloop::AgentEvent;
use agentloop::Usage;
use agentloop_core::chart::{MachineKind, ReactState};

/// What the run is doing, as the status line names it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Phase {
    /// No run.
    Idle,
    /// Planning, calling the model, waiting for its first chunk.
    Thinking,
    /// The model is streaming.
    Streaming,
    /// Tools are running.
    Tools,
    /// Waiting out a retry backoff.
    Retrying {
        /// When the next attempt starts (ms since the command started).
        until_ms: u64,
        /// The attempt that will start.
        attempt: u32,
        /// Why the last attempt failed.
        reason: String,
    },
    /// A tool call waits for a human.
    Approval,
    /// Compacting the context.
    Compacting,
}

/// A tool call waiting for approval.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PendingCall {
    /// The call's id (what `/approve ID` names).
    pub tool_call_id: String,
    /// The tool.
    pub name: String,
    /// Its arguments, as JSON text.
    pub arguments: String,
}

/// The status of the current (or last) run, updated from its events.
#[derive(Clone, Debug, Default)]
pub(crate) struct StatusLine {
    phase: Option<Phase>,
    /// The model step in progress (1-based; 0 before the first).
    step: u32,
    /// When the run started.
    started_ms: Option<u64>,
    /// When the run ended (elapsed stops there).
    ended_ms: Option<u64>,
    /// Usage the committed steps reported.
    usage: Usage,
    /// Steps committed in this run.
    committed: u32,
    /// Of those, the steps whose response carried usage.
    reported: u32,
    /// Characters of the attempt streaming now (an estimate of its output tokens).
    streamed_chars: u64,
    /// Running tools: id → name.
    tools: BTreeMap<String, String>,
    /// Calls waiting for approval, in the order asked.
    pending: Vec<PendingCall>,
    /// What the model last said it is doing (`<status>…</status>`).
    status: Option<String>,
}

/// How a run ended, from its one end event (`run_end`, `run_error` or `agent_abort`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RunEnded {
    /// `completed`, `failed` or `aborted`.
    pub outcome: &'static str,
    /// The reason (`final_answer`, the error, the abort's reason).
    pub reason: String,
}

/// How to render.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RenderOptions {
    /// ANSI colors.
    pub color: bool,
    /// Most columns the line may take (it is cut there, so it never wraps).
    pub width: usize,
}

const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// ANSI SGR codes of the few styles used.
pub(crate) mod sgr {
    /// Reset.
    pub(crate) const RESET: &str = "\x1b[0m";
    /// Dim (separators, counters).
    pub(crate) const DIM: &str = "\x1b[2m";
    /// Bold.
    pub(crate) const BOLD: &str = "\x1b[1m";
    /// Cyan (spinner, streaming).
    pub(crate) const CYAN: &str = "\x1b[36m";
    /// Yellow (retry, approval).
    pub(crate) const YELLOW: &str = "\x1b[33m";
    /// Green (completed).
    pub(crate) const GREEN: &str = "\x1b[32m";
    /// Red (failed, aborted).
    pub(crate) const RED: &str = "\x1b[31m";
    /// Magenta (tools).
    pub(crate) const MAGENTA: &str = "\x1b[35m";
}

/// `text` in `style` when `color`, else as it is.
pub(crate) fn paint(text: &str, style: &str, color: bool) -> String {
    if color && !text.is_empty() {
        format!("{style}{text}{}", sgr::RESET)
    } else {
        text.to_string()
    }
}

/// `ms` as `0.4s`, `12.0s`, `3m07s`, `1h02m`.
pub(crate) fn format_elapsed(ms: u64) -> String {
    let secs = ms / 1000;
    if secs < 60 {
        format!("{}.{}s", secs, (ms % 1000) / 100)
    } else if secs < 3600 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60)
    }
}

impl StatusLine {
    /// A status line with no run yet.
    pub(crate) fn new() -> Self {
        StatusLine::default()
    }

    /// Whether a run is going (the line is worth drawing).
    pub(crate) fn active(&self) -> bool {
        !matches!(self.phase, None | Some(Phase::Idle))
    }

    /// What the run is doing.
    pub(crate) fn phase(&self) -> Phase {
        self.phase.clone().unwrap_or(Phase::Idle)
    }

    /// Steps committed in the current (or last) run.
    pub(crate) fn committed(&self) -> u32 {
        self.committed
    }

    /// Of the committed steps, those that reported usage.
    pub(crate) fn reported(&self) -> u32 {
        self.reported
    }

    /// Calls waiting for approval.
    pub(crate) fn pending(&self) -> &[PendingCall] {
        &self.pending
    }

    /// Usage the committed steps reported (`None` when none did).
    pub(crate) fn usage(&self) -> Option<Usage> {
        (self.reported > 0).then_some(self.usage)
    }

    /// Folds one event in; `now_ms` is when it arrived. Returns how the run ended when this
    /// was its end event. A run has one (the machine's `end`): `run_end` when it completed,
    /// `run_error` when it failed, `agent_abort` when aborted; events after it (tools still
    /// draining) no longer move the line, and an end event outside a run (an abort while
    /// idle) ends nothing.
    pub(crate) fn handle(&mut self, event: &AgentEvent, now_ms: u64) -> Option<RunEnded> {
        let ended = match event {
            AgentEvent::RunEnd {
                outcome, reason, ..
            } => Some(RunEnded {
                outcome: outcome.as_str(),
                reason: reason.clone(),
            }),
            AgentEvent::RunError { error, .. } => Some(RunEnded {
                outcome: "failed",
                reason: error.clone(),
            }),
            AgentEvent::AgentAbort { reason, .. } => Some(RunEnded {
                outcome: "aborted",
                reason: reason.clone(),
            }),
            AgentEvent::RunStart { .. } => None,
            _ if !self.active() => return None,
            _ => None,
        };
        if let Some(end) = ended {
            if !self.active() {
                return None;
            }
            self.phase = Some(Phase::Idle);
            self.ended_ms = Some(now_ms);
            self.tools.clear();
            self.pending.clear();
            return Some(end);
        }
        match event {
            AgentEvent::RunStart { .. } => {
                *self = StatusLine {
                    phase: Some(Phase::Thinking),
                    started_ms: Some(now_ms),
                    pending: std::mem::take(&mut self.pending),
                    ..StatusLine::default()
                };
            }
            AgentEvent::StateChanged { machine, to, .. } => {
                if let Some(phase) = phase_entered(*machine, to) {
                    // The retry countdown stays up until the next attempt is called.
                    let retrying = matches!(self.phase, Some(Phase::Retrying { .. }));
                    if !(retrying && phase == Phase::Thinking && to == "Retrying") {
                        self.phase = Some(phase);
                    }
                }
            }
            AgentEvent::RequestStart {
                model_call_index, ..
            } => {
                self.step = *model_call_index;
                self.streamed_chars = 0;
                self.phase = Some(Phase::Thinking);
            }
            AgentEvent::TextDelta { text, .. } | AgentEvent::ReasoningDelta { text, .. } => {
                self.streamed_chars += text.chars().count() as u64;
                self.phase = Some(Phase::Streaming);
            }
            AgentEvent::ModelTurnRetried { .. } => {
                self.streamed_chars = 0;
                self.status = None;
            }
            AgentEvent::StatusUpdate { text, .. } => {
                self.status = Some(text.clone()).filter(|t| !t.is_empty());
            }
            AgentEvent::ResponseComplete { usage, .. } => {
                self.committed += 1;
                self.streamed_chars = 0;
                if let Some(u) = usage {
                    self.reported += 1;
                    self.usage.input_tokens += u.input_tokens;
                    self.usage.output_tokens += u.output_tokens;
                }
            }
            AgentEvent::Retry {
                attempt,
                delay_ms,
                reason,
                ..
            } => {
                self.phase = Some(Phase::Retrying {
                    until_ms: now_ms.saturating_add(*delay_ms),
                    attempt: *attempt,
                    reason: reason.clone(),
                });
            }
            AgentEvent::ToolStart {
                tool_call_id, name, ..
            } => {
                self.tools.insert(tool_call_id.clone(), name.clone());
                self.phase = Some(Phase::Tools);
            }
            AgentEvent::ToolEnd { tool_call_id, .. } | AgentEvent::ToolKilled { tool_call_id } => {
                self.tools.remove(tool_call_id);
            }
            AgentEvent::ApprovalRequired {
                tool_call_id,
                name,
                arguments,
            } => {
                self.pending.retain(|p| &p.tool_call_id != tool_call_id);
                self.pending.push(PendingCall {
                    tool_call_id: tool_call_id.clone(),
                    name: name.clone(),
                    arguments: arguments.to_string(),
                });
                self.phase = Some(Phase::Approval);
            }
            AgentEvent::ApprovalResolved { tool_call_id, .. } => {
                self.pending.retain(|p| &p.tool_call_id != tool_call_id);
                if self.pending.is_empty() && self.phase == Some(Phase::Approval) {
                    self.phase = Some(Phase::Tools);
                }
            }
            _ => {}
        }
        None
    }

    /// Milliseconds the run has taken (up to its end), at `now_ms`.
    pub(crate) fn elapsed_ms(&self, now_ms: u64) -> u64 {
        match self.started_ms {
            Some(start) => self.ended_ms.unwrap_or(now_ms).saturating_sub(start),
            None => 0,
        }
    }

    /// The line at `now_ms` (no newline, no cursor movement).
    pub(crate) fn render(&self, now_ms: u64, opts: RenderOptions) -> String {
        let c = opts.color;
        let frame = SPINNER[((now_ms / 100) % SPINNER.len() as u64) as usize];
        let (label, style) = match self.phase() {
            Phase::Idle => ("idle".to_string(), sgr::DIM),
            Phase::Thinking => ("thinking".to_string(), sgr::CYAN),
            Phase::Streaming => ("streaming".to_string(), sgr::CYAN),
            Phase::Tools => ("tools".to_string(), sgr::MAGENTA),
            Phase::Compacting => ("compacting".to_string(), sgr::CYAN),
            Phase::Approval => (
                "awaiting approval (/approve or /reject)".to_string(),
                sgr::YELLOW,
            ),
            Phase::Retrying {
                until_ms,
                attempt,
                reason,
            } => (
                format!(
                    "retrying in {} (attempt {attempt}: {reason})",
                    format_elapsed(until_ms.saturating_sub(now_ms))
                ),
                sgr::YELLOW,
            ),
        };
        // (plain text, style) parts; cut to the width on the plain text, then painted.
        let mut parts: Vec<(String, &str)> = vec![(format!("{frame} "), sgr::CYAN), (label, style)];
        if let Some(status) = &self.status {
            parts.push((format!(" · {status}"), sgr::BOLD));
        }
        parts.extend([
            (format!(" · step {}", self.step), sgr::DIM),
            (
                format!(" · {}", format_elapsed(self.elapsed_ms(now_ms))),
                sgr::DIM,
            ),
            (format!(" · {}", self.tokens()), sgr::DIM),
        ]);
        if !self.tools.is_empty() {
            let names: Vec<&str> = self.tools.values().map(String::as_str).collect();
            parts.push((" · ".to_string(), sgr::DIM));
            parts.push((names.join(", "), sgr::MAGENTA));
        }
        let mut room = opts.width;
        let mut line = String::new();
        for (text, style) in parts {
            // Names, the model's status and a retry's reason stay text on one line.
            let text = crate::out::line(&text);
            let n = text.chars().count();
            if n <= room {
                room -= n;
                line.push_str(&paint(&text, style, c));
            } else {
                let cut: String = text.chars().take(room.saturating_sub(1)).collect();
                if room > 0 {
                    line.push_str(&paint(&format!("{cut}…"), style, c));
                }
                break;
            }
        }
        line
    }

    /// `tok IN↑ OUT↓` from the committed steps, plus `~+N` for the attempt streaming now
    /// (about four characters a token; the provider reports usage only at the step's end).
    fn tokens(&self) -> String {
        let mut s = format!(
            "tok {}↑ {}↓",
            self.usage.input_tokens, self.usage.output_tokens
        );
        if self.streamed_chars > 0 {
            s.push_str(&format!(" ~+{}", self.streamed_chars.div_ceil(4)));
        }
        s
    }
}

/// The phase a `state_changed` into `to` (a state of `machine`'s chart) starts, if any: the
/// session's status for that state (one mapping for the library and the CLI), with
/// compaction named apart.
fn phase_entered(machine: MachineKind, to: &str) -> Option<Phase> {
    if machine == MachineKind::React && to == ReactState::Compacting.name() {
        return Some(Phase::Compacting);
    }
    Some(match Status::entered(machine, to)? {
        Status::Idle | Status::Running => Phase::Thinking,
        Status::Streaming => Phase::Streaming,
        Status::ExecutingTools => Phase::Tools,
        // Both wait for the person (an approval, an ask_user answer).
        Status::AwaitingApproval | Status::AwaitingUser => Phase::Approval,
    })
}

/// The run's last line: `[completed] final_answer after 2 step(s); usage in=19 out=17`, then
/// `; cost $0.000123` when priced and `; 1.2s` when timed; the outcome colored when `color`.
/// The reason (an error's text, say) passes [`crate::out::line`]: the line is safe to print
/// as it is.
pub(crate) fn summary_line(
    outcome: &str,
    reason: &str,
    steps: u32,
    usage: &str,
    cost_usd: Option<f64>,
    elapsed_ms: Option<u64>,
    color: bool,
) -> String {
    let style = match outcome {
        "completed" => sgr::GREEN,
        "failed" | "aborted" => sgr::RED,
        _ => sgr::BOLD,
    };
    let mut line = format!(
        "{} {} after {steps} step(s); {usage}",
        paint(&format!("[{outcome}]"), style, color),
        crate::out::line(reason)
    );
    if let Some(cost) = cost_usd {
        line.push_str(&format!("; cost ${cost:.6}"));
    }
    if let Some(ms) = elapsed_ms {
        line.push_str(&paint(
            &format!("; {}", format_elapsed(ms)),
            sgr::DIM,
            color,
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentloop::Outcome;
    use agentloop::ToolStatus;

    const PLAIN: RenderOptions = RenderOptions {
        color: false,
        width: 200,
    };

    fn state(machine: MachineKind, from: &str, to: &str) -> AgentEvent {
        AgentEvent::StateChanged {
            machine,
            from: from.into(),
            to: to.into(),
            event: "E".into(),
        }
    }

    fn started() -> StatusLine {
        let mut s = StatusLine::new();
        s.handle(&AgentEvent::RunStart {}, 1_000);
        s
    }

    #[test]
    fn a_fresh_line_is_idle_and_not_drawn() {
        let s = StatusLine::new();
        assert!(!s.active());
        assert_eq!(s.render(0, PLAIN), "⠋ idle · step 0 · 0.0s · tok 0↑ 0↓");
    }

    /// The model's last `<status>` shows after the phase, until a
    /// retry drops it.
    #[test]
    fn the_models_status_shows_on_the_line() {
        let mut s = started();
        s.handle(&state(MachineKind::Process, "Calling", "Streaming"), 1_100);
        s.handle(
            &AgentEvent::StatusUpdate {
                model_call_index: 1,
                attempt: 1,
                text: "Reading".into(),
            },
            1_200,
        );
        assert_eq!(
            s.render(1_200, PLAIN),
            "⠹ streaming · Reading · step 0 · 0.2s · tok 0↑ 0↓"
        );
        s.handle(
            &AgentEvent::ModelTurnRetried {
                model_call_index: 1,
                attempt: 2,
            },
            1_300,
        );
        assert!(!s.render(1_300, PLAIN).contains("Reading"));
    }

    #[test]
    fn streaming_shows_step_elapsed_and_an_estimate_of_the_tokens_so_far() {
        let mut s = started();
        s.handle(
            &AgentEvent::RequestStart {
                model_call_index: 1,
                attempt: 1,
                model: "m".into(),
                messages: None,
            },
            1_100,
        );
        assert_eq!(
            s.render(1_100, PLAIN),
            "⠙ thinking · step 1 · 0.1s · tok 0↑ 0↓"
        );
        s.handle(&state(MachineKind::Process, "Calling", "Streaming"), 1_200);
        s.handle(
            &AgentEvent::TextDelta {
                model_call_index: 1,
                attempt: 1,
                text: "The answer is".into(),
            },
            1_300,
        );
        assert!(s.active());
        assert_eq!(
            s.render(4_400, PLAIN),
            "⠼ streaming · step 1 · 3.4s · tok 0↑ 0↓ ~+4"
        );
        s.handle(
            &AgentEvent::ResponseComplete {
                model_call_index: 1,
                usage: Some(Usage {
                    input_tokens: 19,
                    output_tokens: 17,
                    ..Usage::default()
                }),
                tool_calls: 0,
                message: Box::default(),
            },
            4_500,
        );
        assert_eq!(
            s.render(4_500, PLAIN),
            "⠴ streaming · step 1 · 3.5s · tok 19↑ 17↓"
        );
        assert_eq!((s.committed(), s.reported()), (1, 1));
    }

    #[test]
    fn a_retry_backoff_counts_down_until_the_next_attempt_is_called() {
        let mut s = started();
        s.handle(&state(MachineKind::Process, "Calling", "Retrying"), 2_000);
        s.handle(
            &AgentEvent::Retry {
                model_call_index: 1,
                attempt: 2,
                delay_ms: 3_000,
                reason: "rate_limited".into(),
                retry_after_ms: None,
            },
            2_000,
        );
        assert_eq!(
            s.render(2_000, PLAIN),
            "⠋ retrying in 3.0s (attempt 2: rate_limited) · step 0 · 1.0s · tok 0↑ 0↓"
        );
        assert!(s
            .render(3_900, PLAIN)
            .starts_with("⠏ retrying in 1.1s (attempt 2"));
        s.handle(&state(MachineKind::Process, "Retrying", "Calling"), 5_000);
        assert!(s.render(5_000, PLAIN).contains("thinking"));
    }

    #[test]
    fn compaction_and_approval_states_name_their_phase() {
        let mut s = started();
        s.handle(&state(MachineKind::React, "Planning", "Compacting"), 1_000);
        assert_eq!(s.phase(), Phase::Compacting);
        s.handle(
            &state(MachineKind::Process, "Streaming", "RunningTools"),
            1_000,
        );
        assert_eq!(s.phase(), Phase::Tools);
        s.handle(
            &state(MachineKind::Process, "RunningTools", "AwaitingApproval"),
            1_000,
        );
        assert_eq!(s.phase(), Phase::Approval);
        s.handle(&state(MachineKind::Process, "Nowhere", "Elsewhere"), 1_000);
        assert_eq!(
            s.phase(),
            Phase::Approval,
            "an unknown state changes nothing"
        );
    }

    #[test]
    fn running_tools_are_listed_until_they_end() {
        let mut s = started();
        for (id, name) in [("c1", "calculator"), ("c2", "read_file")] {
            s.handle(
                &AgentEvent::ToolStart {
                    tool_call_id: id.into(),
                    name: name.into(),
                    arguments: serde_json::json!({}),
                },
                1_500,
            );
        }
        assert_eq!(
            s.render(1_500, PLAIN),
            "⠴ tools · step 0 · 0.5s · tok 0↑ 0↓ · calculator, read_file"
        );
        s.handle(
            &AgentEvent::tool_end(&agentloop::ToolResult {
                tool_call_id: "c1".into(),
                name: "calculator".into(),
                content: "4".into(),
                status: ToolStatus::Completed,
            }),
            1_600,
        );
        assert!(s.render(1_600, PLAIN).ends_with("tok 0↑ 0↓ · read_file"));
    }

    #[test]
    fn approvals_are_listed_and_resolved() {
        let mut s = started();
        s.handle(
            &AgentEvent::ApprovalRequired {
                tool_call_id: "c1".into(),
                name: "append_line".into(),
                arguments: serde_json::json!({"path": "a", "line": "x"}),
            },
            1_000,
        );
        assert_eq!(s.phase(), Phase::Approval);
        assert_eq!(s.pending().len(), 1);
        assert_eq!(s.pending()[0].arguments, r#"{"line":"x","path":"a"}"#);
        s.handle(
            &AgentEvent::ApprovalResolved {
                tool_call_id: "c1".into(),
                decision: agentloop::ApprovalDecision::Approved,
                status: agentloop::ApprovalStatus::Approved,
            },
            1_100,
        );
        assert!(s.pending().is_empty());
        assert_eq!(s.phase(), Phase::Tools);
    }

    #[test]
    fn the_run_end_stops_the_clock_and_idles_the_line() {
        let mut s = started();
        let end = s.handle(
            &AgentEvent::RunEnd {
                outcome: Outcome::Completed,
                reason: "final_answer".into(),
                usage: None,
                final_text: None,
            },
            2_500,
        );
        assert_eq!(
            end,
            Some(RunEnded {
                outcome: "completed",
                reason: "final_answer".into()
            })
        );
        assert!(!s.active());
        assert_eq!(s.elapsed_ms(9_000), 1_500);
        assert_eq!(s.usage(), None, "no step reported usage");
    }

    #[test]
    fn a_failure_or_an_abort_is_the_end_and_later_events_do_not_revive_the_line() {
        let mut s = started();
        let end = s.handle(
            &AgentEvent::RunError {
                error: "bad_request: script exhausted".into(),
            },
            1_200,
        );
        assert_eq!(end.map(|e| e.outcome), Some("failed"));
        let mut s = started();
        let abort = AgentEvent::AgentAbort {
            reason: "interrupted (Ctrl-C)".into(),
        };
        assert_eq!(s.handle(&abort, 1_200).map(|e| e.outcome), Some("aborted"));
        // Tools draining after the abort was announced.
        s.handle(
            &state(MachineKind::Process, "RunningTools", "Draining"),
            1_300,
        );
        assert!(!s.active());
        // An abort while idle ends nothing.
        assert_eq!(s.handle(&abort, 1_400), None);
    }

    #[test]
    fn the_line_is_cut_to_the_width_and_never_wraps() {
        let mut s = started();
        s.handle(&state(MachineKind::Process, "Calling", "Streaming"), 1_000);
        let narrow = RenderOptions {
            color: false,
            width: 12,
        };
        let line = s.render(1_000, narrow);
        assert_eq!(line, "⠋ streaming…");
        assert_eq!(line.chars().count(), 12);
        for width in 0..60 {
            let opts = RenderOptions { color: true, width };
            let painted = s.render(1_000, opts);
            let plain = strip_ansi(&painted);
            assert!(plain.chars().count() <= width, "{width}: {plain:?}");
        }
    }

    #[test]
    fn colors_wrap_each_part_and_reset() {
        let s = started();
        let opts = RenderOptions {
            color: true,
            width: 200,
        };
        let line = s.render(1_000, opts);
        assert!(line.starts_with("\x1b[36m⠋ \x1b[0m\x1b[36mthinking\x1b[0m"));
        assert_eq!(strip_ansi(&line), s.render(1_000, PLAIN));
    }

    #[test]
    fn the_summary_line_names_outcome_usage_cost_and_time() {
        assert_eq!(
            summary_line(
                "completed",
                "final_answer",
                2,
                "usage in=19 out=17",
                None,
                None,
                false
            ),
            "[completed] final_answer after 2 step(s); usage in=19 out=17"
        );
        assert_eq!(
            summary_line(
                "aborted",
                "interrupted (Ctrl-C)",
                0,
                "usage unknown",
                Some(0.0012),
                Some(1_234),
                true
            ),
            "\x1b[31m[aborted]\x1b[0m interrupted (Ctrl-C) after 0 step(s); usage unknown; \
             cost $0.001200\x1b[2m; 1.2s\x1b[0m"
        );
    }

    #[test]
    fn elapsed_is_short() {
        assert_eq!(format_elapsed(0), "0.0s");
        assert_eq!(format_elapsed(59_999), "59.9s");
        assert_eq!(format_elapsed(187_000), "3m07s");
        assert_eq!(format_elapsed(3_720_000), "1h02m");
    }

    fn strip_ansi(s: &str) -> String {
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                for d in chars.by_ref() {
                    if d == 'm' {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }
}
