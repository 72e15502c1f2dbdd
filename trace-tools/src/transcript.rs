//! `Transcript`: a trace read back as what happened — the run's steps, the machines' state
//! changes, the committed text (joined, not per delta), tool calls with arguments and results,
//! retries, approvals, compactions and usage — for people (`agentloop trace show`) and for
//! compact, stable snapshots (`agentloop-testkit`).
//!
//! Everything is derived from the records alone: the `emit` effects carry the observable
//! events, the `persist` effects the tool results, the `transition` records the state changes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use agentloop_core::agent_event::{AgentEvent, Outcome};
use agentloop_core::effect::Effect;
use agentloop_core::entry::Entry;
use agentloop_core::event::{ApprovalDecision, Event};
use agentloop_core::message::{Message, ToolStatus, Usage};
use agentloop_core::step::Transition;
use agentloop_core::trace::{Trace, TraceRecord};

/// A trace as a readable sequence of [`Item`]s plus a [`Summary`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Transcript {
    /// The trace format version.
    pub version: u32,
    /// The session.
    pub session: String,
    /// The model the run started with.
    pub model: String,
    /// The tools offered, by name, with their argument names (the schemas, once).
    pub tools: Vec<ToolSummary>,
    /// What happened, in trace order.
    pub items: Vec<Item>,
    /// Totals.
    pub summary: Summary,
}

/// A tool as the header offers it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolSummary {
    /// Name.
    pub name: String,
    /// The argument names of its JSON Schema (`properties`), required ones first.
    pub arguments: Vec<String>,
    /// What the model is told it does.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The JSON Schema of its arguments, as offered.
    #[serde(default)]
    pub parameters: Value,
}

/// One state change of one machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StateChange {
    /// `react`, `process` or `tool_call`.
    pub machine: String,
    /// The tool call (only for `tool_call`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// The states visited, from the first `from` to the last `to` (a chain of transitions of
    /// the same machine is joined).
    pub states: Vec<String>,
}

/// One thing that happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "item", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Item {
    /// A run started.
    RunStart {
        /// Record index of the input.
        index: u64,
        /// The run id.
        run_id: String,
        /// The new input's text.
        input: Vec<String>,
        /// Messages of session history before it.
        history: usize,
    },
    /// An interrupted run resumed.
    Resume {
        /// Record index.
        index: u64,
        /// The run id.
        run_id: String,
        /// Steps already committed.
        committed_steps: u32,
    },
    /// The machines changed state in reaction to one input.
    States {
        /// Record index of the input.
        index: u64,
        /// The input's name.
        event: String,
        /// The changes, joined per machine.
        changes: Vec<StateChange>,
    },
    /// An input no state accepted.
    Unhandled {
        /// Record index.
        index: u64,
        /// The input's name.
        event: String,
    },
    /// A model request was sent.
    Request {
        /// Record index of the effect.
        index: u64,
        /// The step (model call index).
        step: u32,
        /// The attempt, from 1.
        attempt: u32,
        /// The model.
        model: String,
        /// Messages in the request.
        messages: usize,
        /// Tools offered.
        tools: usize,
    },
    /// An attempt's streamed text that was never committed (the attempt failed, or the run
    /// was aborted or the trace ends while it streamed).
    Discarded {
        /// The step.
        step: u32,
        /// The attempt.
        attempt: u32,
        /// The text streamed before the failure.
        text: String,
    },
    /// The assistant message of a step was committed.
    Assistant {
        /// Record index of the effect.
        index: u64,
        /// The step.
        step: u32,
        /// Visible text, joined.
        text: String,
        /// Reasoning text, joined.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        reasoning: String,
        /// Number of tool calls.
        tool_calls: usize,
        /// Why the model stopped.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
        /// The step's usage (`None` when the provider reported none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    /// A tool call and its result.
    Tool {
        /// Record index where it first appears.
        index: u64,
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Arguments.
        arguments: Value,
        /// Terminal status (`None` when the trace ends before it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<ToolStatus>,
        /// The result text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<String>,
    },
    /// A retry was scheduled.
    Retry {
        /// Record index.
        index: u64,
        /// The step.
        step: u32,
        /// The attempt that runs next.
        attempt: u32,
        /// Delay before it.
        delay_ms: u64,
        /// The error that caused it.
        reason: String,
    },
    /// A stream stalled.
    Stalled {
        /// Record index.
        index: u64,
        /// The step.
        step: u32,
        /// The attempt.
        attempt: u32,
        /// After how long.
        after_ms: u64,
    },
    /// A call waits for a human.
    ApprovalRequired {
        /// Record index.
        index: u64,
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// A human decided.
    ApprovalResolved {
        /// Record index.
        index: u64,
        /// Call id.
        id: String,
        /// The decision.
        decision: ApprovalDecision,
    },
    /// The context was compacted.
    Compaction {
        /// Record index.
        index: u64,
        /// Why.
        reason: String,
        /// Context size before.
        messages: usize,
        /// Messages removed (`None` when the trace ends before it finished).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        removed: Option<usize>,
    },
    /// Something else observers were told (steering, model switch, loop, abort, errors).
    Note {
        /// Record index.
        index: u64,
        /// The note.
        text: String,
    },
    /// The run ended.
    RunEnd {
        /// Record index.
        index: u64,
        /// Outcome.
        outcome: Outcome,
        /// Reason.
        reason: String,
        /// Usage of the run (`None`: no step reported any).
        usage: Option<Usage>,
        /// The final answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        final_text: Option<String>,
    },
}

/// Totals of a trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Summary {
    /// Model steps committed.
    pub steps: u32,
    /// Tool calls that got a result.
    pub tool_calls: usize,
    /// Retries scheduled.
    pub retries: usize,
    /// How the run ended (`None` when the trace ends before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// Why it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Usage summed over the committed steps (`None`: no step reported any).
    pub usage: Option<Usage>,
    /// The final answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_text: Option<String>,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let outcome = match (&self.outcome, &self.reason) {
            (Some(o), Some(r)) => format!("{o} ({r})"),
            (Some(o), None) => o.to_string(),
            _ => "not finished".into(),
        };
        write!(
            f,
            "{outcome}, {} step{}, {} tool call{}, {} retr{}, usage {}",
            self.steps,
            plural(self.steps as usize),
            self.tool_calls,
            plural(self.tool_calls),
            self.retries,
            if self.retries == 1 { "y" } else { "ies" },
            usage_or_unknown(self.usage.as_ref())
        )
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// [`usage_text`], or `unknown` when none was reported.
pub fn usage_or_unknown(u: Option<&Usage>) -> String {
    u.map_or_else(|| "unknown".to_string(), usage_text)
}

/// `in=I out=O` (plus cache and reasoning tokens when non-zero).
pub fn usage_text(u: &Usage) -> String {
    let mut s = format!("in={} out={}", u.input_tokens, u.output_tokens);
    if u.cache_read_input_tokens > 0 {
        s.push_str(&format!(" cache_read={}", u.cache_read_input_tokens));
    }
    if u.cache_creation_input_tokens > 0 {
        s.push_str(&format!(" cache_write={}", u.cache_creation_input_tokens));
    }
    if u.reasoning_tokens > 0 {
        s.push_str(&format!(" reasoning={}", u.reasoning_tokens));
    }
    s
}

/// How [`Transcript::render`] lays the transcript out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Plain text, one line per item.
    Text,
    /// Markdown: a heading per step, lists below.
    Markdown,
}

/// What [`Transcript::render`] includes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RenderOptions {
    /// The layout.
    pub style: Style,
    /// Include the machines' state changes.
    pub states: bool,
    /// Include record indexes (`#12`), handy for finding a line in the trace.
    pub indexes: bool,
    /// Include each tool's description and JSON Schema (a line per tool), not only its
    /// argument names.
    pub schemas: bool,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            style: Style::Text,
            states: true,
            indexes: true,
            schemas: false,
        }
    }
}

impl Transcript {
    /// Reads a trace.
    pub fn from_trace(trace: &Trace) -> Transcript {
        let mut b = Builder::default();
        let mut input: Option<(u64, String)> = None;
        let mut transitions: Vec<&Transition> = Vec::new();
        for r in &trace.records {
            match r {
                TraceRecord::Header(_) => {}
                TraceRecord::Input { index, event } => {
                    b.flush_states(input.take(), &mut transitions);
                    input = Some((*index, event.name().to_string()));
                    b.input(*index, event);
                }
                TraceRecord::Transition { transition, .. } => {
                    if is_unhandled(transition) {
                        if let Some((i, name)) = &input {
                            b.items.push(Item::Unhandled {
                                index: *i,
                                event: name.clone(),
                            });
                        }
                    } else {
                        transitions.push(transition);
                    }
                }
                TraceRecord::Effect { index, effect } => {
                    // State changes come before the effects of the same input.
                    b.flush_states(input.clone(), &mut transitions);
                    b.effect(*index, effect)
                }
            }
        }
        b.flush_states(input, &mut transitions);
        // Text of an attempt the trace ends in (an abort mid-stream): never committed.
        b.discard();
        let tools = trace
            .header
            .tools
            .iter()
            .map(|t| ToolSummary {
                name: t.name.clone(),
                arguments: argument_names(&t.parameters),
                description: t.description.clone(),
                parameters: t.parameters.clone(),
            })
            .collect();
        Transcript {
            version: trace.header.version,
            session: trace.header.session.clone(),
            model: trace.header.config.model.clone(),
            tools,
            items: b.items,
            summary: b.summary,
        }
    }

    /// Renders the transcript.
    pub fn render(&self, options: RenderOptions) -> String {
        render(self, options)
    }
}

fn is_unhandled(t: &Transition) -> bool {
    matches!(
        t,
        Transition::React {
            unhandled: true,
            ..
        } | Transition::Process {
            unhandled: true,
            ..
        }
    )
}

/// The argument names of a JSON Schema object, required ones first.
fn argument_names(schema: &Value) -> Vec<String> {
    let required: Vec<String> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut names = required.clone();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for k in props.keys() {
            if !required.contains(k) {
                names.push(format!("{k}?"));
            }
        }
    }
    names
}

#[derive(Default)]
struct Builder {
    items: Vec<Item>,
    summary: Summary,
    /// Text streamed by the current attempt: (step, attempt, text).
    streamed: Option<(u32, u32, String)>,
    /// The arguments of the committed tool calls, by call id.
    arguments: std::collections::BTreeMap<String, Value>,
}

impl Builder {
    fn flush_states(&mut self, input: Option<(u64, String)>, transitions: &mut Vec<&Transition>) {
        if transitions.is_empty() {
            return;
        }
        let Some((index, event)) = input else {
            transitions.clear();
            return;
        };
        let mut changes: Vec<StateChange> = Vec::new();
        for t in transitions.drain(..) {
            if !t.changed() {
                continue;
            }
            let (machine, call, from, to) = match t {
                Transition::React { from, to, .. } => ("react", None, from.name(), to.name()),
                Transition::Process { from, to, .. } => ("process", None, from.name(), to.name()),
                Transition::ToolCall { call, from, to, .. } => {
                    ("tool_call", Some(call.clone()), from.name(), to.name())
                }
            };
            // Join a chain of the same machine (and call).
            if let Some(c) = changes
                .iter_mut()
                .rev()
                .find(|c| c.machine == machine && c.call == call)
            {
                if c.states.last().map(String::as_str) == Some(from) {
                    c.states.push(to.to_string());
                    continue;
                }
            }
            changes.push(StateChange {
                machine: machine.to_string(),
                call,
                states: vec![from.to_string(), to.to_string()],
            });
        }
        if !changes.is_empty() {
            self.items.push(Item::States {
                index,
                event,
                changes,
            });
        }
    }

    fn input(&mut self, index: u64, event: &Event) {
        match event {
            Event::Start {
                run_id,
                history,
                input,
                ..
            } => self.items.push(Item::RunStart {
                index,
                run_id: run_id.clone(),
                input: input.iter().map(message_text).collect(),
                history: history.len(),
            }),
            Event::Resume {
                run_id,
                committed_steps,
                ..
            } => self.items.push(Item::Resume {
                index,
                run_id: run_id.clone(),
                committed_steps: *committed_steps,
            }),
            Event::ToolFinished {
                tool_call_id,
                status,
                content,
            } => self.tool_result(tool_call_id, *status, content),
            Event::Abort { reason, .. } => {
                self.discard();
                self.items.push(Item::Note {
                    index,
                    text: format!("abort requested: {reason}"),
                })
            }
            Event::Steer { text } => self.items.push(Item::Note {
                index,
                text: format!("steering received: {text}"),
            }),
            Event::StoreWriteFailed { error } => self.items.push(Item::Note {
                index,
                text: format!("store write failed: {error}"),
            }),
            Event::CompactionFailed { error } => self.items.push(Item::Note {
                index,
                text: format!("compaction failed: {error}"),
            }),
            Event::CompactionVetoed { reason } => self.items.push(Item::Note {
                index,
                text: format!("compaction vetoed: {reason}"),
            }),
            _ => {}
        }
    }

    fn tool_result(&mut self, id: &str, status: ToolStatus, content: &str) {
        if let Some(Item::Tool {
            status: s,
            result: r,
            ..
        }) = self
            .items
            .iter_mut()
            .rev()
            .find(|i| matches!(i, Item::Tool { id: call, .. } if call == id))
        {
            *s = Some(status);
            *r = Some(content.to_string());
        }
    }

    fn tool(&mut self, index: u64, id: &str, name: &str, arguments: &Value) {
        let arguments = match arguments {
            Value::Null => self.arguments.get(id).unwrap_or(&Value::Null),
            a => a,
        };
        let known = self
            .items
            .iter()
            .rev()
            .any(|i| matches!(i, Item::Tool { id: call, .. } if call == id));
        if !known {
            self.items.push(Item::Tool {
                index,
                id: id.to_string(),
                name: name.to_string(),
                arguments: arguments.clone(),
                status: None,
                result: None,
            });
        }
    }

    fn discard(&mut self) {
        if let Some((step, attempt, text)) = self.streamed.take() {
            if !text.is_empty() {
                self.items.push(Item::Discarded {
                    step,
                    attempt,
                    text,
                });
            }
        }
    }

    fn effect(&mut self, index: u64, effect: &Effect) {
        match effect {
            Effect::CallModel { request } => {
                self.discard();
                self.items.push(Item::Request {
                    index,
                    step: request.model_call_index,
                    attempt: request.attempt,
                    model: request.model.clone(),
                    messages: request.messages.len(),
                    tools: request.tools.len(),
                });
            }
            Effect::Persist {
                entry: Entry::ToolResult { result, .. },
            } => {
                let (id, name) = (result.tool_call_id.clone(), result.name.clone());
                self.tool(index, &id, &name, &Value::Null);
                self.tool_result(&id, result.status, &result.content);
                self.summary.tool_calls += 1;
            }
            Effect::RunTool { call } => self.tool(index, &call.id, &call.name, &call.arguments),
            Effect::Emit { event } => self.emit(index, event),
            _ => {}
        }
    }

    fn emit(&mut self, index: u64, event: &AgentEvent) {
        match event {
            AgentEvent::TextDelta {
                model_call_index,
                attempt,
                text,
            } => match &mut self.streamed {
                Some((s, a, t)) if *s == *model_call_index && *a == *attempt => t.push_str(text),
                _ => {
                    self.discard();
                    self.streamed = Some((*model_call_index, *attempt, text.clone()));
                }
            },
            AgentEvent::ResponseComplete {
                model_call_index,
                message,
                ..
            } => {
                self.streamed = None;
                self.summary.steps += 1;
                if let Some(u) = &message.usage {
                    self.summary.usage.get_or_insert_with(Usage::default).add(u);
                }
                self.items.push(Item::Assistant {
                    index,
                    step: *model_call_index,
                    text: message.text.clone(),
                    reasoning: message.reasoning.clone(),
                    tool_calls: message.tool_calls.len(),
                    finish_reason: message.finish_reason.as_ref().and_then(|f| {
                        serde_json::to_value(f)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                    }),
                    usage: message.usage,
                });
                // The call items come when a call starts or gets its result (after any
                // approval); remember the arguments for calls that never run.
                for c in &message.tool_calls {
                    self.arguments.insert(c.id.clone(), c.arguments.clone());
                }
            }
            AgentEvent::ToolStart {
                tool_call_id,
                name,
                arguments,
            } => self.tool(index, tool_call_id, name, arguments),
            AgentEvent::Retry {
                model_call_index,
                attempt,
                delay_ms,
                reason,
                ..
            } => {
                self.discard();
                self.summary.retries += 1;
                self.items.push(Item::Retry {
                    index,
                    step: *model_call_index,
                    attempt: *attempt,
                    delay_ms: *delay_ms,
                    reason: reason.clone(),
                })
            }
            AgentEvent::ModelTurnRetried { .. } => self.discard(),
            AgentEvent::StreamStalled {
                model_call_index,
                attempt,
                after_ms,
            } => self.items.push(Item::Stalled {
                index,
                step: *model_call_index,
                attempt: *attempt,
                after_ms: *after_ms,
            }),
            AgentEvent::ApprovalRequired {
                tool_call_id, name, ..
            } => self.items.push(Item::ApprovalRequired {
                index,
                id: tool_call_id.clone(),
                name: name.clone(),
            }),
            AgentEvent::ApprovalResolved {
                tool_call_id,
                decision,
                ..
            } => self.items.push(Item::ApprovalResolved {
                index,
                id: tool_call_id.clone(),
                decision: decision.clone(),
            }),
            AgentEvent::CompactStart { reason, messages } => self.items.push(Item::Compaction {
                index,
                reason: reason.clone(),
                messages: *messages,
                removed: None,
            }),
            AgentEvent::CompactEnd { removed } => {
                if let Some(Item::Compaction { removed: r, .. }) = self
                    .items
                    .iter_mut()
                    .rev()
                    .find(|i| matches!(i, Item::Compaction { removed: None, .. }))
                {
                    *r = Some(*removed);
                }
            }
            AgentEvent::RunEnd {
                outcome,
                reason,
                usage,
                final_text,
                ..
            } => {
                self.summary.outcome = Some(*outcome);
                self.summary.reason = Some(reason.clone());
                self.summary.final_text = final_text.clone();
                self.items.push(Item::RunEnd {
                    index,
                    outcome: *outcome,
                    reason: reason.clone(),
                    usage: *usage,
                    final_text: final_text.clone(),
                })
            }
            AgentEvent::RunError { error, .. } => {
                self.summary.outcome = Some(Outcome::Failed);
                self.summary.reason = Some(error.clone());
                self.items.push(Item::Note {
                    index,
                    text: format!("run failed: {error}"),
                })
            }
            AgentEvent::AgentAbort { reason, .. } => {
                self.summary.outcome = Some(Outcome::Aborted);
                self.summary.reason = Some(reason.clone());
                self.items.push(Item::Note {
                    index,
                    text: format!("run aborted: {reason}"),
                })
            }
            other => {
                if let Some(text) = note(other) {
                    self.items.push(Item::Note { index, text })
                }
            }
        }
    }
}

/// The one-line note for the observable events the transcript does not itemize.
fn note(event: &AgentEvent) -> Option<String> {
    Some(match event {
        AgentEvent::StreamError { error } => format!("stream error: {error}"),
        AgentEvent::ContextOverflow { message } => format!("context overflow: {message}"),
        AgentEvent::ToolKilled { tool_call_id } => format!("tool {tool_call_id} killed"),
        AgentEvent::ToolCallUnknown { tool_call_id, name } => {
            format!("tool {tool_call_id}: unknown tool `{name}`")
        }
        AgentEvent::ToolCacheHit {
            tool_call_id,
            name,
            cached_from,
        } => format!("tool {tool_call_id}: `{name}` answered from the cache ({cached_from})"),
        AgentEvent::ToolRuleMatched {
            tool_call_id,
            name,
            rule,
            action,
            timeout_ms,
        } => {
            let done = match action {
                agentloop_core::tool_rules::RuleAction::Allow => "allowed",
                agentloop_core::tool_rules::RuleAction::Ask => "put to a human",
                agentloop_core::tool_rules::RuleAction::Deny => "denied",
            };
            let deadline = timeout_ms.map(|ms| format!(", deadline {ms} ms"));
            format!(
                "tool {tool_call_id}: `{name}` {done} by rule {rule}{}",
                deadline.unwrap_or_default()
            )
        }
        AgentEvent::SteeringApplied { text } => format!("steering applied: {text}"),
        AgentEvent::ToolSkippedForSteering { tool_call_id } => {
            format!("tool {tool_call_id} skipped for steering")
        }
        AgentEvent::ModelSwitched { from, to } => format!("model switched: {from} -> {to}"),
        AgentEvent::StatusUpdate { text, .. } => format!("status: {text}"),
        AgentEvent::TitleGenerated { title, .. } => format!("title: {title}"),
        AgentEvent::PlanGenerated { steps, .. } => format!("plan: {}", steps.join(" | ")),
        AgentEvent::TodoChange { todos, .. } => {
            format!(
                "todos: {}",
                agentloop_core::todo::render(todos).replace('\n', " | ")
            )
        }
        AgentEvent::ToolsUpdated { attached, detached } => format!(
            "tools updated: +[{}] -[{}]",
            attached.join(", "),
            detached.join(", ")
        ),
        AgentEvent::UsageLimitReached {
            limit, used, max, ..
        } => format!("usage limit reached: {} {used} >= {max}", limit.as_str()),
        AgentEvent::OutputInvalid { error, retrying } => format!(
            "output invalid{}: {error}",
            if *retrying { " (retrying)" } else { "" }
        ),
        AgentEvent::ModelFallback {
            from, to, error, ..
        } => format!("model fallback: {from} -> {to} ({error})"),
        AgentEvent::LoopDetected {
            pattern,
            repeats,
            action,
            ..
        } => format!(
            "loop detected: {} x{repeats} (action {action})",
            pattern.join(", ")
        ),
        AgentEvent::SessionRepaired { repair } => format!("session repaired: {repair}"),
        _ => return None,
    })
}

fn message_text(m: &Message) -> String {
    match m {
        Message::System { content } => content.clone(),
        user @ Message::User { .. } => user.user_text().unwrap_or_default(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// `s` on one line, cut at `max` characters.
fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.chars().map(|c| if c == '\n' { '⏎' } else { c }).collect();
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

fn render(t: &Transcript, o: RenderOptions) -> String {
    let md = o.style == Style::Markdown;
    let mut out = String::new();
    let idx = |i: u64| {
        if o.indexes {
            format!(" #{i}")
        } else {
            String::new()
        }
    };
    let bullet = if md { "- " } else { "  " };
    let code = |s: &str| {
        if md {
            format!("`{s}`")
        } else {
            s.to_string()
        }
    };
    if md {
        out.push_str(&format!(
            "# Trace (v{}, session `{}`, model `{}`)\n\n",
            t.version, t.session, t.model
        ));
    } else {
        out.push_str(&format!(
            "trace v{} · session {} · model {}\n",
            t.version, t.session, t.model
        ));
    }
    if !t.tools.is_empty() {
        let tools: Vec<String> = t
            .tools
            .iter()
            .map(|x| code(&format!("{}({})", x.name, x.arguments.join(", "))))
            .collect();
        out.push_str(&format!("tools: {}\n", tools.join(", ")));
        if o.schemas {
            for x in &t.tools {
                let schema = serde_json::to_string(&x.parameters).unwrap_or_default();
                let about = if x.description.is_empty() {
                    String::new()
                } else {
                    format!("{} ", one_line(&x.description, 300))
                };
                out.push_str(&format!(
                    "{bullet}{}: {about}schema {}\n",
                    code(&x.name),
                    code(&one_line(&schema, 1_000))
                ));
            }
        }
    }
    if md {
        out.push('\n');
    }
    for item in &t.items {
        let line = match item {
            Item::RunStart {
                index,
                run_id,
                input,
                history,
            } => {
                let h = if *history > 0 {
                    format!(" after {history} history messages")
                } else {
                    String::new()
                };
                let input = input
                    .iter()
                    .map(|s| format!("{:?}", one_line(s, 200)))
                    .collect::<Vec<_>>()
                    .join(" ");
                if md {
                    format!("## Run `{run_id}`{h}\n\n- user: {input}")
                } else {
                    format!("run {run_id} started{h}{}: user {input}", idx(*index))
                }
            }
            Item::Resume {
                index,
                run_id,
                committed_steps,
            } => format!(
                "{}run {run_id} resumed after {committed_steps} committed steps{}",
                if md { "## " } else { "" },
                idx(*index)
            ),
            Item::States {
                index,
                event,
                changes,
            } => {
                if !o.states {
                    continue;
                }
                let parts: Vec<String> = changes
                    .iter()
                    .map(|c| {
                        let who = match &c.call {
                            Some(call) => format!("{} {call}", c.machine),
                            None => c.machine.clone(),
                        };
                        format!("{who} {}", c.states.join("→"))
                    })
                    .collect();
                format!("{bullet}  [{event}] {}{}", parts.join("; "), idx(*index))
            }
            Item::Unhandled { index, event } => {
                format!("{bullet}unhandled input {event}{}", idx(*index))
            }
            Item::Request {
                index,
                step,
                attempt,
                model,
                messages,
                tools,
            } => {
                let what = format!(
                    "{model}, {messages} message{}, {tools} tool{}",
                    plural(*messages),
                    plural(*tools)
                );
                match (md, *attempt) {
                    (true, 1) => format!("\n### Step {step}\n\n- request: {what}{}", idx(*index)),
                    (false, 1) => format!("step {step}: request ({what}){}", idx(*index)),
                    _ => format!("{bullet}attempt {attempt}: request ({what}){}", idx(*index)),
                }
            }
            Item::Discarded { attempt, text, .. } => format!(
                "{bullet}attempt {attempt} text not committed: {:?}",
                one_line(text, 200)
            ),
            Item::Assistant {
                index,
                text,
                reasoning,
                tool_calls,
                finish_reason,
                usage,
                ..
            } => {
                let mut s = String::new();
                if !reasoning.is_empty() {
                    s.push_str(&format!(
                        "{bullet}reasoning: {:?}\n",
                        one_line(reasoning, 400)
                    ));
                }
                let usage = usage
                    .as_ref()
                    .map(usage_text)
                    .unwrap_or_else(|| "unknown".into());
                s.push_str(&format!(
                    "{bullet}assistant: {:?} ({} tool call{}, finish {}, usage {usage}){}",
                    one_line(text, 400),
                    tool_calls,
                    plural(*tool_calls),
                    finish_reason.as_deref().unwrap_or("?"),
                    idx(*index)
                ));
                s
            }
            Item::Tool {
                index,
                id,
                name,
                arguments,
                status,
                result,
            } => {
                let args = one_line(&serde_json::to_string(arguments).unwrap_or_default(), 300);
                let end = match (status, result) {
                    (Some(s), Some(r)) => format!(" → {}: {:?}", s.as_str(), one_line(r, 300)),
                    _ => " → (no result)".into(),
                };
                format!(
                    "{bullet}tool {name} {} {args}{end}{}",
                    code(id),
                    idx(*index)
                )
            }
            Item::Retry {
                index,
                attempt,
                delay_ms,
                reason,
                ..
            } => format!(
                "{bullet}retry: attempt {attempt} in {delay_ms} ms after {reason}{}",
                idx(*index)
            ),
            Item::Stalled {
                index,
                attempt,
                after_ms,
                ..
            } => format!(
                "{bullet}attempt {attempt} stalled after {after_ms} ms{}",
                idx(*index)
            ),
            Item::ApprovalRequired { index, id, name } => format!(
                "{bullet}approval required for {name} {}{}",
                code(id),
                idx(*index)
            ),
            Item::ApprovalResolved {
                index,
                id,
                decision,
            } => {
                let d = match decision {
                    ApprovalDecision::Approved => "approved".to_string(),
                    ApprovalDecision::ApprovedAlways => "approved always".to_string(),
                    ApprovalDecision::Rejected { reason } => format!("rejected: {reason}"),
                    ApprovalDecision::Modified { arguments } => format!(
                        "approved with arguments {}",
                        serde_json::to_string(arguments).unwrap_or_default()
                    ),
                    ApprovalDecision::TimedOut { after_ms } => {
                        format!("timed out after {after_ms} ms")
                    }
                };
                format!("{bullet}approval for {}: {d}{}", code(id), idx(*index))
            }
            Item::Compaction {
                index,
                reason,
                messages,
                removed,
            } => format!(
                "{bullet}compaction ({reason}): {messages} messages, {} removed{}",
                removed
                    .map(|r| r.to_string())
                    .unwrap_or_else(|| "none yet".into()),
                idx(*index)
            ),
            Item::Note { index, text } => format!("{bullet}{text}{}", idx(*index)),
            Item::RunEnd {
                index,
                outcome,
                reason,
                usage,
                final_text,
            } => {
                let fin = final_text
                    .as_ref()
                    .map(|f| format!("\n{bullet}final text: {:?}", one_line(f, 400)))
                    .unwrap_or_default();
                if md {
                    format!(
                        "\n## Run end: {outcome} ({reason}){}\n\n- usage {}{fin}",
                        idx(*index),
                        usage_or_unknown(usage.as_ref())
                    )
                } else {
                    format!(
                        "run {outcome} ({reason}), usage {}{}{fin}",
                        usage_or_unknown(usage.as_ref()),
                        idx(*index)
                    )
                }
            }
        };
        out.push_str(&line);
        out.push('\n');
    }
    if md {
        out.push_str(&format!("\n**Summary:** {}\n", t.summary));
    } else {
        out.push_str(&format!("summary: {}\n", t.summary));
    }
    out
}
