//! `agentloop trace view`: a trace as one self-contained HTML page with a timeline — a lane per
//! machine (react, process, one sub-lane per tool call) with its states as bars, the timers
//! (backoff, deadlines) as spans, inputs, observable events and effects as marks, and the JSON
//! of every record on click.
//!
//! Pure: [`Layout`] lays the trace out a record at a time, [`page_start`],
//! [`page_data_head`], [`script_json`] (per record) and [`page_end`] are the page's pieces;
//! the caller does the IO, streaming the records (memory bounded by the layout and the
//! largest record, not by the trace's size).
//!
//! A trace is untrusted input, so no text of it reaches the page as markup: the
//! layout travels as JSON inside a `<script type="application/json">` with `<`, `>` and `&`
//! escaped, and the page's script builds the DOM with `textContent` and `setAttribute` only.
//! The x-axis is the record index: records carry no wall-clock time.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use agentloop::store::Entry;
#[cfg(test)]
use agentloop::trace::Trace;
use agentloop::Usage;
use agentloop::{AgentEvent, Outcome};
use agentloop_core::chart::MachineKind;
use agentloop_core::effect::Effect;
use agentloop_core::event::Event;
use agentloop_core::step::Transition;
use agentloop_core::trace::{TraceHeader, TraceRecord};
use agentloop_trace_tools::transcript::Summary;

/// The timeline of one trace, as the page's script reads it.
#[derive(Debug, Serialize)]
pub(crate) struct View {
    /// Header facts and totals.
    pub meta: Meta,
    /// One lane per machine: `react`, `process`, then one per tool call in order of first
    /// appearance.
    pub lanes: Vec<Lane>,
    /// Timer spans, from `start_timer` to `cancel_timer`, `timer_elapsed` or the trace's end.
    pub timers: Vec<TimerSpan>,
    /// Inputs, observable events and effects at their record index.
    pub marks: Vec<Mark>,
    /// The header record's JSON.
    pub header: Value,
    /// Every indexed record's JSON, in index order.
    pub records: Vec<Value>,
}

/// Header facts and totals.
#[derive(Debug, Serialize)]
pub(crate) struct Meta {
    /// Trace format version.
    pub version: u32,
    /// The crate version that wrote it.
    pub agentloop: String,
    /// The session.
    pub session: String,
    /// The model the run started with.
    pub model: String,
    /// One past the last record index: the x-axis runs from 0 to here.
    pub end: u64,
    /// The transcript's one-line summary.
    pub summary: String,
}

/// One machine's lane.
#[derive(Debug, Serialize)]
pub(crate) struct Lane {
    /// `react`, `process` or `tool_call:<call id>` (plus `#n` when an id repeats).
    pub id: String,
    /// `react`, `process` or `tool_call`.
    pub machine: &'static str,
    /// The call id (tool-call lanes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// The tool's name (tool-call lanes, when the trace names it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The states, in order.
    pub bars: Vec<Bar>,
}

/// A machine in one state over `[from, to)`.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct Bar {
    /// The state's name.
    pub state: String,
    /// Record index where it was entered.
    pub from: u64,
    /// Record index where it was left (the trace's end when it never was).
    pub to: u64,
    /// The transition record that entered it (`None`: the machine's first state, or a state
    /// the machine was reset to without a recorded transition).
    pub rec: Option<u64>,
    /// The event that entered it.
    pub event: String,
}

/// A timer from start to its end.
#[derive(Debug, Serialize)]
pub(crate) struct TimerSpan {
    /// The timer id (a string: ids use all 64 bits, more than a JavaScript number holds).
    pub id: String,
    /// `backoff`, `first_chunk`, `stall`, `request`, `tool` or `run_deadline`.
    pub kind: &'static str,
    /// The delay asked for.
    pub delay_ms: u64,
    /// Record index of `start_timer`.
    pub from: u64,
    /// Record index of the end.
    pub to: u64,
    /// `elapsed`, `cancelled` or `open` (the trace ends first).
    pub end: &'static str,
}

/// Something at one record index.
#[derive(Debug, Serialize)]
pub(crate) struct Mark {
    /// The record.
    pub at: u64,
    /// `inputs`, `events` or `effects`.
    pub lane: &'static str,
    /// The input's name, the event's `type` or the effect's name.
    pub kind: String,
    /// One line for people.
    pub label: String,
}

/// A timer's kind from its id, as `core/src/process/deadlines.rs` and `RUN_DEADLINE_TIMER`
/// lay ids out: all bits set = run deadline; bit 63 = a tool call's deadline; bits 60–61 = an
/// attempt deadline; otherwise a retry's backoff (`model_call_index * 1_000_000 + attempt`).
fn timer_kind(id: u64) -> &'static str {
    if id == agentloop_core::react::RUN_DEADLINE_TIMER {
        "run_deadline"
    } else if id & (1 << 63) != 0 {
        "tool"
    } else {
        match (id >> 60) & 3 {
            1 => "first_chunk",
            2 => "stall",
            3 => "request",
            _ => "backoff",
        }
    }
}

/// The `tag` field of a serialized enum (`type` of an agent event, `effect` of an effect).
fn tag<T: Serialize>(value: &T, tag: &str) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.get(tag).and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// A serialized unit enum's name (a transition's event kind).
fn unit_name<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// `s` on one line, cut at `max` characters.
fn short(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

/// Moves a lane's last bar to `to`, entered at `at` by `event`; `from` opens the lane, or
/// stands between when the machine was reset without a recorded transition (the inner
/// machine returns to `Idle` between steps).
fn enter(bars: &mut Vec<Bar>, from: &str, to: &str, at: u64, opened: u64, event: String) {
    match bars.last_mut() {
        None => bars.push(Bar {
            state: from.to_string(),
            from: opened.min(at),
            to: at,
            rec: None,
            event: String::new(),
        }),
        Some(last) if last.state == from => last.to = at,
        Some(last) => {
            last.to = at;
            bars.push(Bar {
                state: from.to_string(),
                from: at,
                to: at,
                rec: None,
                event: "(reset; no transition recorded)".into(),
            })
        }
    }
    bars.push(Bar {
        state: to.to_string(),
        from: at,
        to: at,
        rec: Some(at),
        event,
    });
}

fn event_label(e: &AgentEvent, kind: &str) -> String {
    match e {
        AgentEvent::Retry {
            model_call_index,
            attempt,
            delay_ms,
            reason,
            retry_after_ms,
        } => format!(
            "retry: step {model_call_index} attempt {attempt} in {delay_ms} ms{} after {}",
            match retry_after_ms {
                Some(hint) => format!(" (server's retry-after {hint} ms)"),
                None => String::new(),
            },
            short(reason, 200)
        ),
        AgentEvent::TextDelta { text, .. } => format!("text_delta {:?}", short(text, 120)),
        AgentEvent::ToolStart {
            tool_call_id, name, ..
        } => {
            format!("tool_start {name} {tool_call_id}")
        }
        AgentEvent::ToolEnd {
            tool_call_id,
            name,
            status,
            ..
        } => format!("tool_end {name} {tool_call_id}: {}", status.as_str()),
        AgentEvent::ApprovalRequired {
            tool_call_id, name, ..
        } => format!("approval_required {name} {tool_call_id}"),
        AgentEvent::StreamStalled {
            attempt, after_ms, ..
        } => format!("stream_stalled: attempt {attempt} after {after_ms} ms"),
        AgentEvent::RequestStart {
            model_call_index,
            attempt,
            ..
        } => format!("request_start: step {model_call_index} attempt {attempt}"),
        AgentEvent::RunEnd {
            outcome, reason, ..
        } => format!("run_end: {outcome} ({})", short(reason, 200)),
        _ => kind.to_string(),
    }
}

impl View {
    /// Lays `trace` out (the whole trace in memory: `trace view` streams with [`Layout`];
    /// the tests compare the two).
    #[cfg(test)]
    pub(crate) fn from_trace(trace: &Trace) -> View {
        let mut layout = Layout::default();
        for r in &trace.records {
            layout.record(r);
        }
        let mut view = layout.finish(&trace.header);
        view.records = trace
            .records
            .iter()
            .filter(|r| r.index().is_some())
            .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
            .collect();
        view
    }
}

/// A [`View`] built one record at a time ([`Layout::record`], then [`Layout::finish`]), so
/// that `trace view` lays out a trace of any size while reading it a record at a time: it
/// keeps the bars, spans and marks (a few short strings a record), never the records.
#[derive(Debug, Default)]
pub(crate) struct Layout {
    /// One past the largest record index seen.
    end: u64,
    /// Tool names by call id, from the committed messages and the started calls.
    tool_names: BTreeMap<String, String>,
    react: Vec<Bar>,
    process: Vec<Bar>,
    /// Tool-call lanes: (call id, position, bars).
    calls: Vec<(String, usize, Vec<Bar>)>,
    /// Timers; an open one's `to` is set by [`Layout::finish`].
    timers: Vec<TimerSpan>,
    marks: Vec<Mark>,
    /// Started and finished calls: lanes for traces without tool-call transitions (v3).
    started: Vec<(String, u64)>,
    finished: BTreeMap<String, (u64, &'static str)>,
    input_at: u64,
    input_name: &'static str,
    /// The totals `trace show` prints (the transcript's summary, counted as it goes).
    summary: Summary,
}

impl Layout {
    /// Adds the record after the ones added so far (records after the header, in order).
    pub(crate) fn record(&mut self, r: &TraceRecord) {
        if let Some(i) = r.index() {
            self.end = self.end.max(i + 1);
        }
        self.count(r);
        let end = self.end;
        let Layout {
            tool_names,
            react,
            process,
            calls,
            timers,
            marks,
            started,
            finished,
            input_at,
            input_name,
            ..
        } = self;
        if let TraceRecord::Effect { effect, .. } = r {
            match effect {
                Effect::RunTool { call } => {
                    tool_names.insert(call.id.clone(), call.name.clone());
                }
                Effect::Emit {
                    event: AgentEvent::ResponseComplete { message, .. },
                } => {
                    for c in &message.tool_calls {
                        tool_names.insert(c.id.clone(), c.name.clone());
                    }
                }
                _ => {}
            }
        }
        {
            match r {
                TraceRecord::Header(_) => {}
                TraceRecord::Input { index, event } => {
                    *input_at = *index;
                    *input_name = event.name();
                    let label = match event {
                        Event::TimerElapsed { timer_id } => {
                            if let Some(t) = timers
                                .iter_mut()
                                .rev()
                                .find(|t| t.id == timer_id.to_string() && t.end == "open")
                            {
                                t.to = *index;
                                t.end = "elapsed";
                            }
                            format!("timer_elapsed {} ({timer_id})", timer_kind(*timer_id))
                        }
                        Event::ToolFinished {
                            tool_call_id,
                            status,
                            ..
                        } => {
                            finished.insert(tool_call_id.clone(), (*index, status.as_str()));
                            format!("tool_finished {tool_call_id}: {}", status.as_str())
                        }
                        other => other.name().to_string(),
                    };
                    marks.push(Mark {
                        at: *index,
                        lane: "inputs",
                        kind: input_name.to_string(),
                        label,
                    });
                }
                TraceRecord::Transition { index, transition } => {
                    let at = *index;
                    match transition {
                        Transition::React {
                            unhandled: true, ..
                        }
                        | Transition::Process {
                            unhandled: true, ..
                        } => marks.push(Mark {
                            at,
                            lane: "inputs",
                            kind: "unhandled".into(),
                            label: format!("unhandled input {input_name}"),
                        }),
                        _ if !transition.changed() => {}
                        Transition::React {
                            from, event, to, ..
                        } => enter(
                            react,
                            from.name(),
                            to.name(),
                            at,
                            *input_at,
                            unit_name(event),
                        ),
                        Transition::Process {
                            from, event, to, ..
                        } => enter(
                            process,
                            from.name(),
                            to.name(),
                            at,
                            *input_at,
                            unit_name(event),
                        ),
                        Transition::ToolCall {
                            index: slot,
                            call,
                            from,
                            event,
                            to,
                            ..
                        } => {
                            // The open lane of this call, or a new one (an id that repeats
                            // in a later step starts over from `Pending`).
                            let lane = calls.iter().rposition(|(c, s, bars)| {
                                c == call
                                    && s == slot
                                    && bars.last().map(|b| b.state.as_str()) == Some(from.name())
                            });
                            let i = match lane {
                                Some(i) => i,
                                None => {
                                    calls.push((call.clone(), *slot, Vec::new()));
                                    calls.len() - 1
                                }
                            };
                            enter(
                                &mut calls[i].2,
                                from.name(),
                                to.name(),
                                at,
                                *input_at,
                                unit_name(event),
                            );
                        }
                    }
                }
                TraceRecord::Effect { index, effect } => {
                    let at = *index;
                    match effect {
                        Effect::StartTimer { timer_id, delay_ms } => timers.push(TimerSpan {
                            id: timer_id.to_string(),
                            kind: timer_kind(*timer_id),
                            delay_ms: *delay_ms,
                            from: at,
                            to: end,
                            end: "open",
                        }),
                        Effect::CancelTimer { timer_id } => {
                            if let Some(t) = timers
                                .iter_mut()
                                .rev()
                                .find(|t| t.id == timer_id.to_string() && t.end == "open")
                            {
                                t.to = at;
                                t.end = "cancelled";
                            }
                        }
                        Effect::Emit { event } => {
                            if matches!(event, AgentEvent::StateChanged { .. }) {
                                return; // the bars show it
                            }
                            let kind = tag(event, "type");
                            marks.push(Mark {
                                at,
                                lane: "events",
                                label: event_label(event, &kind),
                                kind,
                            });
                        }
                        other => {
                            let kind = tag(other, "effect");
                            let label = match other {
                                Effect::RunTool { call } => {
                                    started.push((call.id.clone(), at));
                                    format!("run_tool {} {}", call.name, call.id)
                                }
                                Effect::CallModel { request } => format!(
                                    "call_model: step {} attempt {}",
                                    request.model_call_index, request.attempt
                                ),
                                _ => kind.clone(),
                            };
                            marks.push(Mark {
                                at,
                                lane: "effects",
                                kind,
                                label,
                            });
                        }
                    }
                }
            }
        }
    }

    /// The view of the records added (its `records` empty: the caller writes them).
    pub(crate) fn finish(self, header: &TraceHeader) -> View {
        let Layout {
            end,
            tool_names,
            mut react,
            mut process,
            mut calls,
            mut timers,
            marks,
            started,
            finished,
            summary,
            ..
        } = self;
        let terminal: Vec<String> = MachineKind::ToolCall
            .chart()
            .state
            .into_iter()
            .filter(|s| s.terminal)
            .map(|s| s.name)
            .collect();
        for t in &mut timers {
            if t.end == "open" {
                t.to = end;
            }
        }
        for bars in [&mut react, &mut process] {
            if let Some(last) = bars.last_mut() {
                last.to = end;
            }
        }
        let mut lanes = vec![
            Lane {
                id: "react".into(),
                machine: "react",
                call: None,
                tool: None,
                bars: react,
            },
            Lane {
                id: "process".into(),
                machine: "process",
                call: None,
                tool: None,
                bars: process,
            },
        ];
        for (_, _, bars) in &mut calls {
            if let Some(last) = bars.last_mut() {
                // A finished call's last state is a cap; an open one runs to the trace's end.
                last.to = if terminal.contains(&last.state) {
                    last.from + 1
                } else {
                    end
                };
            }
        }
        if calls.is_empty() {
            // Before trace v4 a call's lifecycle is not recorded: a lane from `run_tool` to
            // `tool_finished` (the status as its last state) stands in.
            for (call, at) in started {
                let mut bars = vec![Bar {
                    state: "Running".into(),
                    from: at,
                    to: end,
                    rec: Some(at),
                    event: "run_tool (no tool_call transitions before trace v4)".into(),
                }];
                if let Some((done, status)) = finished.get(&call) {
                    bars[0].to = *done;
                    let mut state: Vec<char> = status.chars().collect();
                    if let Some(c) = state.first_mut() {
                        *c = c.to_ascii_uppercase();
                    }
                    bars.push(Bar {
                        state: state.into_iter().collect(),
                        from: *done,
                        to: *done + 1,
                        rec: Some(*done),
                        event: "tool_finished".into(),
                    });
                }
                calls.push((call, 0, bars));
            }
        }
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for (call, _, bars) in calls {
            let n = seen.entry(call.clone()).or_insert(0);
            *n += 1;
            let id = if *n == 1 {
                format!("tool_call:{call}")
            } else {
                format!("tool_call:{call}#{n}")
            };
            lanes.push(Lane {
                id,
                machine: "tool_call",
                tool: tool_names.get(&call).cloned(),
                call: Some(call),
                bars,
            });
        }
        View {
            meta: Meta {
                version: header.version,
                agentloop: header.agentloop.clone(),
                session: header.session.clone(),
                model: header.config.model.clone(),
                end,
                summary: summary.to_string(),
            },
            lanes,
            timers,
            marks,
            header: serde_json::to_value(header).unwrap_or(Value::Null),
            records: Vec::new(),
        }
    }

    /// Counts `r` into the summary as the transcript does (see `Transcript::from_trace`):
    /// committed steps and their usage, tool results, retries, and how the run ended.
    fn count(&mut self, r: &TraceRecord) {
        let s = &mut self.summary;
        let TraceRecord::Effect { effect, .. } = r else {
            return;
        };
        match effect {
            Effect::Persist {
                entry: Entry::ToolResult { .. },
            } => s.tool_calls += 1,
            Effect::Emit { event } => match event {
                AgentEvent::ResponseComplete { message, .. } => {
                    s.steps += 1;
                    if let Some(u) = &message.usage {
                        s.usage.get_or_insert_with(Usage::default).add(u);
                    }
                }
                AgentEvent::Retry { .. } => s.retries += 1,
                AgentEvent::RunEnd {
                    outcome,
                    reason,
                    final_text,
                    ..
                } => {
                    s.outcome = Some(*outcome);
                    s.reason = Some(reason.clone());
                    s.final_text = final_text.clone();
                }
                AgentEvent::RunError { error, .. } => {
                    s.outcome = Some(Outcome::Failed);
                    s.reason = Some(error.clone());
                }
                AgentEvent::AgentAbort { reason, .. } => {
                    s.outcome = Some(Outcome::Aborted);
                    s.reason = Some(reason.clone());
                }
                _ => {}
            },
            _ => {}
        }
    }
}

/// JSON that is safe inside a `<script>` element: `<`, `>` and `&` (so no `</script>` or
/// `<!--`) and the JavaScript line separators are written as `\u` escapes.
pub(crate) fn script_json<T: Serialize>(value: &T) -> String {
    let json = serde_json::to_string(value).unwrap_or_else(|_| "null".into());
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// Text for HTML element content or a quoted attribute.
pub(crate) fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = include_str!("trace_view.css");
const SCRIPT: &str = include_str!("trace_view.js");

/// The page: `title` (escaped) in the heading, the view as data, the stylesheet and script
/// inline. The content security policy allows no network access at all. (`trace view`
/// writes the same page in pieces: [`page_start`], [`page_data_head`], the records, `]}`,
/// [`page_end`].)
#[cfg(test)]
pub(crate) fn render_html(view: &View, title: &str) -> String {
    format!("{}{}{}", page_start(title), script_json(view), page_end())
}

/// The page up to its data: the head, the heading (`title`, escaped) and the opening tag of
/// the `trace-data` script element.
pub(crate) fn page_start(title: &str) -> String {
    let title = escape_html(title);
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\n\
         <title>{title} · agentloop trace view</title>\n<style>\n{STYLE}</style>\n</head>\n\
         <body>\n<header><h1>{title}</h1><p id=\"meta\"></p>\n\
         <p class=\"note\">x-axis: record index (a trace records no wall-clock time). \
         Hover for a summary, click a bar, span or mark for its record's JSON.</p></header>\n\
         <noscript><p>This page draws the timeline with JavaScript; the data is in the \
         <code>trace-data</code> script element.</p></noscript>\n\
         <main id=\"timeline\"></main>\n<section id=\"detail\"><h2 id=\"detail-title\">\
         Record</h2><pre id=\"detail-json\"></pre></section>\n\
         <script type=\"application/json\" id=\"trace-data\">"
    )
}

/// The page after its data.
pub(crate) fn page_end() -> String {
    format!("</script>\n<script>\n{SCRIPT}</script>\n</body>\n</html>\n")
}

/// The data of `view` up to its records: `{"meta":…,"header":…,"records":[`, for a writer
/// that adds each record's [`script_json`] (comma-separated) and then `]}` (the records are
/// the view's last field). `None` when `view` has records of its own.
pub(crate) fn page_data_head(view: &View) -> Option<String> {
    if !view.records.is_empty() {
        return None;
    }
    let json = script_json(view);
    json.strip_suffix("]}").map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_json_cannot_close_the_script_element() {
        let s = script_json(&serde_json::json!({
            "content": "</script><img src=x onerror=alert(1)><!-- & \u{2028}"
        }));
        assert!(
            !s.contains('<') && !s.contains('>') && !s.contains('&'),
            "{s}"
        );
        assert!(!s.contains('\u{2028}'), "{s}");
        let back: Value = serde_json::from_str(&s).expect("still JSON");
        assert_eq!(
            back["content"],
            "</script><img src=x onerror=alert(1)><!-- & \u{2028}"
        );
    }

    #[test]
    fn escape_html_escapes_markup() {
        assert_eq!(
            escape_html(r#"<b a="1" b='2'>&</b>"#),
            "&lt;b a=&quot;1&quot; b=&#39;2&#39;&gt;&amp;&lt;/b&gt;"
        );
    }

    #[test]
    fn timer_kinds_follow_the_id_layout() {
        assert_eq!(timer_kind(1_000_002), "backoff");
        assert_eq!(timer_kind((1 << 60) | 1_000_001), "first_chunk");
        assert_eq!(timer_kind((2 << 60) | 1_000_001), "stall");
        assert_eq!(timer_kind((3 << 60) | 1_000_001), "request");
        assert_eq!(timer_kind((1 << 63) | (1 << 24)), "tool");
        assert_eq!(timer_kind(u64::MAX), "run_deadline");
    }

    fn fixture(name: &str) -> View {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/traces");
        let path = std::path::Path::new(dir).join(name);
        View::from_trace(&agentloop::trace::load(&path).expect("fixture"))
    }

    fn lanes(v: &View) -> Vec<(String, Vec<String>)> {
        v.lanes
            .iter()
            .map(|l| {
                (
                    l.id.clone(),
                    l.bars.iter().map(|b| b.state.clone()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn a_v4_trace_has_a_lane_per_machine_and_call_and_its_backoff_timers() {
        let v = fixture("v4-retry-tool.jsonl");
        let lanes = lanes(&v);
        assert_eq!(lanes[0].0, "react");
        assert_eq!(lanes[1].0, "process");
        assert!(lanes[1].1.contains(&"Retrying".to_string()), "{lanes:?}");
        assert_eq!(
            lanes[2],
            (
                "tool_call:call_0_0".to_string(),
                ["Pending", "Queued", "Running", "Completed"]
                    .map(String::from)
                    .to_vec()
            )
        );
        assert_eq!(v.lanes[2].tool.as_deref(), Some("calculator"));
        let backoff: Vec<(u64, &str)> = v
            .timers
            .iter()
            .filter(|t| t.kind == "backoff")
            .map(|t| (t.delay_ms, t.end))
            .collect();
        assert_eq!(backoff, [(1000, "elapsed"), (2000, "elapsed")]);
        assert_eq!(v.marks.iter().filter(|m| m.kind == "retry").count(), 2);
        assert_eq!(v.records.len() as u64, v.meta.end);
        // Bars of one lane follow each other.
        for lane in &v.lanes[..2] {
            for pair in lane.bars.windows(2) {
                assert_eq!(pair[0].to, pair[1].from, "{}", lane.id);
            }
        }
    }

    /// The page `trace view` streams (data head, records, `]}`) is the page `render_html`
    /// writes, and the summary counted record by record is the transcript's.
    #[test]
    fn the_streamed_page_and_summary_match_the_whole_trace_ones() {
        use agentloop_trace_tools::transcript::Transcript;
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/traces");
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).expect("fixtures") {
            let path = entry.expect("entry").path();
            let Ok(trace) = agentloop::trace::read(&path) else {
                continue;
            };
            let whole = View::from_trace(&trace);
            assert_eq!(
                whole.meta.summary,
                Transcript::from_trace(&trace).summary.to_string(),
                "{}",
                path.display()
            );
            let mut layout = Layout::default();
            for r in &trace.records {
                layout.record(r);
            }
            let head = layout.finish(&trace.header);
            let records: Vec<String> = whole.records.iter().map(script_json).collect();
            let streamed = format!(
                "{}{}{}]}}{}",
                page_start("t"),
                page_data_head(&head).expect("no records"),
                records.join(","),
                page_end()
            );
            let page = render_html(&whole, "t");
            if streamed != page {
                let at = streamed
                    .bytes()
                    .zip(page.bytes())
                    .position(|(a, b)| a != b)
                    .unwrap_or(streamed.len().min(page.len()));
                let around = |s: &str| s[at.saturating_sub(80)..(at + 80).min(s.len())].to_string();
                panic!(
                    "{}: the streamed page differs at byte {at}:\n{}\n{}",
                    path.display(),
                    around(&streamed),
                    around(&page)
                );
            }
            checked += 1;
        }
        assert!(checked >= 3, "only {checked} fixtures read");
    }

    #[test]
    fn a_v3_trace_gets_a_call_lane_from_run_tool_to_tool_finished() {
        let v = fixture("v3-calc.jsonl");
        let lanes = lanes(&v);
        assert_eq!(
            lanes[2],
            (
                "tool_call:call_0_0".to_string(),
                ["Running", "Completed"].map(String::from).to_vec()
            )
        );
    }

    #[test]
    fn a_reset_without_transition_shows_between_bars() {
        let mut bars = Vec::new();
        enter(&mut bars, "Idle", "Calling", 3, 0, "Begin".into());
        enter(&mut bars, "Calling", "Success", 10, 9, "Done".into());
        enter(&mut bars, "Idle", "Calling", 14, 12, "Begin".into());
        let states: Vec<(&str, u64, u64)> = bars
            .iter()
            .map(|b| (b.state.as_str(), b.from, b.to))
            .collect();
        assert_eq!(
            states,
            [
                ("Idle", 0, 3),
                ("Calling", 3, 10),
                ("Success", 10, 14),
                ("Idle", 14, 14),
                ("Calling", 14, 14)
            ]
        );
    }
}
