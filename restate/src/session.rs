//! The `Session` Virtual Object: one agentloop session per object key, its runs driven by the
//! pure machines inside a Restate handler, every effect that touches the world journaled.
//!
//! The handler is the drive loop of `agentloop::runtime` made durable: it feeds events to
//! [`Run::handle`] and performs the step's effects one after another:
//!
//! | effect | performed as |
//! |---|---|
//! | `CallModel` | one `ctx.run("model")`: the whole streamed attempt collected into its list of events, replayed from the journal on recovery |
//! | `RunTool` | one `ctx.run("tool")` with `ToolContext::idempotency_key = "<session>/<call id>"` |
//! | `Compact` | one `ctx.run("compact")` |
//! | `Persist` | the entry joins the run's entries; `CommitRunEnd` writes them to the object's state (`ctx.set`, journaled, exactly once) |
//! | `StartTimer` / `CancelTimer` | kept in a table; when the machine waits on nothing but timers, the shortest is a durable `ctx.sleep` (backoff); a model call's or tool's deadlines bound the wait for its next chunk / its result inside its `ctx.run` |
//! | `GateTool`, `RequestApproval` | answered at once (no hooks: allow; approvals: approved) |
//! | `Emit` | a `tracing` event (not journaled) |
//! | `KillTool`, `CancelModel` | nothing: effects run one at a time, nothing is in flight then |
//!
//! Everything else the handler does is deterministic given the journal (the run id is
//! `ctx.rand_uuid()`, seeded by the invocation id), so a worker killed at any point resumes on
//! another worker and re-runs only the effect in flight.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

use agentloop::agent_event::Outcome;
use agentloop::error::{ErrorKind, ModelError};
use agentloop::event::{ApprovalDecision, AttemptId, GateVerdict};
use agentloop::message::{Message, MessageDelta, ToolStatus};
use agentloop::model::{Model, ModelRequest};
use agentloop::runtime::{Compactor, Timeouts, Truncate};
use agentloop::store::Entry;
use agentloop::tools::{ArgumentSchemas, ToolContext, ToolRegistry};
use agentloop::{Effect, Event, LoopResult, Run, RunConfig};

/// State key of the session's entries (the same entries a `SessionStore` holds).
const ENTRIES: &str = "entries";
/// State key of the last run's result.
const LAST: &str = "last_result";

/// What a worker runs sessions with: the model, the tools and the run configuration.
pub struct Worker {
    /// The model every request goes to.
    pub model: Arc<dyn Model>,
    /// The tools.
    pub tools: ToolRegistry,
    /// The directory file tools are confined to.
    pub root: std::path::PathBuf,
    /// The run configuration (tools, model name, deadlines filled in by [`Worker::new`]).
    pub config: RunConfig,
}

impl Worker {
    /// A worker with `tools`, `max_steps` and the runtime's default deadlines.
    pub fn new(
        model: Arc<dyn Model>,
        tools: ToolRegistry,
        root: std::path::PathBuf,
        max_steps: u32,
    ) -> Self {
        let t = Timeouts::default();
        let mut config = RunConfig {
            max_steps,
            ..RunConfig::default()
        };
        config.tools = tools.specs();
        config.model = model.name();
        config.step.immune = config
            .tools
            .iter()
            .filter(|s| tools.get(&s.name).is_some_and(|t| !t.killable()))
            .map(|s| s.name.clone())
            .collect();
        config.step.pure_tools = config
            .tools
            .iter()
            .filter(|s| tools.get(&s.name).is_some_and(|t| t.pure()))
            .map(|s| s.name.clone())
            .collect();
        config.step.tool_timeout_ms.get_or_insert(t.tool_ms);
        config.run_deadline_ms = t.run_deadline_ms;
        config
            .step
            .stream
            .get_or_insert(agentloop::process::StreamDeadlines {
                first_chunk_ms: t.first_chunk_ms,
                stall_ms: t.stall_ms,
                request_ms: t.request_ms,
            });
        Worker {
            model,
            tools,
            root,
            config,
        }
    }
}

/// The `Session` object's handler set (`prompt` exclusive, `status` shared).
pub struct Session(pub Arc<Worker>);

/// The input of `prompt`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PromptInput {
    /// The user's prompt.
    pub prompt: String,
}

/// What `prompt` returns: the run's result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PromptOutput {
    /// The run id.
    pub run_id: String,
    /// How the run ended.
    pub outcome: Outcome,
    /// Why.
    pub reason: String,
    /// The last assistant message's text.
    pub text: String,
    /// Model steps committed.
    pub iterations: u32,
    /// The error, when failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl PromptOutput {
    fn of(run_id: String, r: &LoopResult) -> Self {
        let text = r
            .messages
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::Assistant(a) => Some(a.text.clone()),
                _ => None,
            })
            .unwrap_or_default();
        PromptOutput {
            run_id,
            outcome: r.outcome,
            reason: r.reason.clone(),
            text,
            iterations: r.iterations,
            error: r.error.as_ref().map(ToString::to_string),
        }
    }
}

/// What `status` returns.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StatusOutput {
    /// Entries stored for the session.
    pub entries: usize,
    /// Assistant turns the session committed.
    pub turns: u32,
    /// The last completed run, if any.
    pub last: Option<PromptOutput>,
}

/// What a journaled model attempt produced: its events, and the deadline that cut it, if one
/// did.
#[derive(Serialize, Deserialize)]
struct Attempt {
    events: Vec<Event>,
    deadline: Option<u64>,
}

#[restate_sdk::object]
impl Session {
    /// Runs one prompt in the session to completion and returns its result.
    #[handler]
    async fn prompt(
        &self,
        mut ctx: ObjectContext<'_>,
        input: Json<PromptInput>,
    ) -> Result<Json<PromptOutput>, HandlerError> {
        let w = &*self.0;
        let session = ctx.key().to_string();
        let mut entries: Vec<Entry> = ctx
            .get::<Json<Vec<Entry>>>(ENTRIES)
            .await?
            .map(Json::into_inner)
            .unwrap_or_default();
        let run_id = format!("run_{}", ctx.rand_uuid().simple());
        let start = Event::Start {
            run_id: run_id.clone(),
            history: agentloop::store::history(&entries),
            input: vec![Message::user(input.into_inner().prompt)],
            session_turns: agentloop::store::committed_turns(&entries),
        };
        let mut run = Run::new(w.config.clone());
        let mut pending = VecDeque::from([start]);
        // Timers the machine started and has not cancelled: id → delay.
        let mut timers: BTreeMap<u64, u64> = BTreeMap::new();
        loop {
            let event = match pending.pop_front() {
                Some(e) => e,
                None => {
                    // Waiting on nothing but timers: the shortest fires (a durable sleep).
                    let Some((id, delay)) = shortest(&timers) else {
                        return Err(TerminalError::new("the run waits on nothing").into());
                    };
                    timers.remove(&id);
                    ctx.sleep(Duration::from_millis(delay)).await?;
                    Event::TimerElapsed { timer_id: id }
                }
            };
            let step = run.handle(event);
            for effect in step.effects {
                match effect {
                    Effect::Persist { entry } => entries.push(entry),
                    Effect::CommitRunEnd { entry } => {
                        entries.push(entry);
                        ctx.set(ENTRIES, Json(entries.clone()));
                        pending.push_back(Event::RunEndCommitted);
                    }
                    Effect::Emit { event } => tracing::debug!(?event, "agent_event"),
                    Effect::StartTimer { timer_id, delay_ms } => {
                        timers.insert(timer_id, delay_ms);
                    }
                    Effect::CancelTimer { timer_id } => {
                        timers.remove(&timer_id);
                    }
                    Effect::CallModel { request } => {
                        let bound = shortest(&timers);
                        let model = w.model.clone();
                        let schemas = w.tools.schemas();
                        let attempt = ctx
                            .run(|| async move {
                                Ok(Json(call_model(model, request, bound, schemas).await))
                            })
                            .name("model")
                            .await?
                            .into_inner();
                        pending.extend(attempt.events);
                        if let Some(id) = attempt.deadline {
                            pending.push_back(Event::TimerElapsed { timer_id: id });
                        }
                    }
                    Effect::RunTool { call } => {
                        let tool = w.tools.get(&call.name).cloned();
                        let tool_ctx = ToolContext {
                            call_id: call.id.clone(),
                            root: w.root.clone(),
                            idempotency_key: Some(format!("{session}/{}", call.id)),
                        };
                        let bound = shortest(&timers);
                        let id = call.id.clone();
                        let done = ctx
                            .run(|| async move {
                                let Some(tool) = tool else {
                                    return Ok(Json(Some((
                                        ToolStatus::Error,
                                        format!("unknown tool: {}", call.name),
                                    ))));
                                };
                                let work = tool.call(tool_ctx, call.arguments);
                                let out = match bound {
                                    Some((_, ms)) => {
                                        tokio::time::timeout(Duration::from_millis(ms), work)
                                            .await
                                            .ok()
                                    }
                                    None => Some(work.await),
                                };
                                Ok(Json(out.map(|r| match r {
                                    Ok(content) => (ToolStatus::Completed, content),
                                    Err(e) => (ToolStatus::Error, e.to_string()),
                                })))
                            })
                            .name("tool")
                            .await?
                            .into_inner();
                        match (done, bound) {
                            (Some((status, content)), _) => {
                                pending.push_back(Event::ToolFinished {
                                    tool_call_id: id,
                                    status,
                                    content,
                                })
                            }
                            (None, Some((timer_id, _))) => {
                                pending.push_back(Event::TimerElapsed { timer_id })
                            }
                            (None, None) => {}
                        }
                    }
                    Effect::Compact {
                        messages,
                        budget_tokens,
                        max_messages,
                    } => {
                        let ev = ctx
                            .run(|| async move {
                                Ok(Json(
                                    match Truncate
                                        .compact(&messages, budget_tokens, max_messages)
                                        .await
                                    {
                                        Ok((messages, removed)) => {
                                            Event::CompactionDone { messages, removed }
                                        }
                                        Err(error) => Event::CompactionFailed { error },
                                    },
                                ))
                            })
                            .name("compact")
                            .await?
                            .into_inner();
                        pending.push_back(ev);
                    }
                    Effect::GateTool { call } => pending.push_back(Event::ToolGated {
                        tool_call_id: call.id,
                        verdict: GateVerdict::Allow,
                    }),
                    Effect::RequestApproval { call } => pending.push_back(Event::Approval {
                        tool_call_id: call.id,
                        decision: ApprovalDecision::Approved,
                    }),
                    // The worker has no person to ask (ask_user is not offered here).
                    Effect::AskUser { tool_call_id, .. } => {
                        pending.push_back(Event::UserAnswered {
                            tool_call_id,
                            answer: None,
                        })
                    }
                    Effect::KillTool { .. } | Effect::CancelModel { .. } => {}
                }
            }
            if run.is_terminal() && pending.is_empty() {
                break;
            }
        }
        let out = match run.result() {
            Some(r) => PromptOutput::of(run_id, r),
            None => {
                return Err(TerminalError::new("the run ended without a result").into());
            }
        };
        ctx.set(LAST, Json(out.clone()));
        Ok(Json(out))
    }

    /// The session's stored entries, turns and last result.
    #[handler]
    async fn status(
        &self,
        ctx: SharedObjectContext<'_>,
    ) -> Result<Json<StatusOutput>, HandlerError> {
        let entries: Vec<Entry> = ctx
            .get::<Json<Vec<Entry>>>(ENTRIES)
            .await?
            .map(Json::into_inner)
            .unwrap_or_default();
        let last = ctx
            .get::<Json<PromptOutput>>(LAST)
            .await?
            .map(Json::into_inner);
        Ok(Json(StatusOutput {
            entries: entries.len(),
            turns: agentloop::store::committed_turns(&entries),
            last,
        }))
    }
}

/// The active timer with the shortest delay.
fn shortest(timers: &BTreeMap<u64, u64>) -> Option<(u64, u64)> {
    timers
        .iter()
        .min_by_key(|(_, d)| **d)
        .map(|(id, d)| (*id, *d))
}

/// Streams one attempt into its events (`StreamOpened`, `Delta`s, then `Done` or an error),
/// as the tokio driver does. `bound` is the machine's shortest deadline: a wait for the next
/// chunk longer than it ends the attempt, and the deadline's timer is reported to fire.
/// `Done` carries the verdicts of `schemas` on the attempt's tool calls (R-TOOL-1), journaled
/// with the attempt.
async fn call_model(
    model: Arc<dyn Model>,
    request: ModelRequest,
    bound: Option<(u64, u64)>,
    schemas: ArgumentSchemas,
) -> Attempt {
    let attempt = AttemptId {
        run_id: request.run_id.clone(),
        model_call_index: request.model_call_index,
        attempt: request.attempt,
    };
    let failure = |attempt: AttemptId, error: ModelError| {
        if error.context_overflow() {
            Event::ContextOverflow { attempt, error }
        } else {
            Event::TransportError { attempt, error }
        }
    };
    let mut events = Vec::new();
    let wait = |f| async move {
        match bound {
            Some((_, ms)) => tokio::time::timeout(Duration::from_millis(ms), f)
                .await
                .ok(),
            None => Some(f.await),
        }
    };
    let deadline = bound.map(|(id, _)| id);
    let mut stream = match wait(model.stream(request)).await {
        None => return Attempt { events, deadline },
        Some(Err(e)) => {
            events.push(failure(attempt, e));
            return Attempt {
                events,
                deadline: None,
            };
        }
        Some(Ok(s)) => s,
    };
    events.push(Event::StreamOpened {
        attempt: attempt.clone(),
    });
    let mut seq = 0u64;
    loop {
        let next = match bound {
            Some((_, ms)) => {
                match tokio::time::timeout(Duration::from_millis(ms), stream.next()).await {
                    Ok(n) => n,
                    Err(_) => return Attempt { events, deadline },
                }
            }
            None => stream.next().await,
        };
        let terminal = match next {
            None => Event::TransportError {
                attempt,
                error: ModelError::new(
                    ErrorKind::IncompleteStream,
                    "stream ended without a finish",
                ),
            },
            Some(Err(e)) => failure(attempt, e),
            Some(Ok(MessageDelta::Finish)) => Event::Done {
                rejected_arguments: schemas.check_deltas(events.iter().filter_map(|e| match e {
                    Event::Delta { delta, .. } => Some(delta),
                    _ => None,
                })),
                // Typed final answers are not checked by the Restate worker (its runs ask for
                // none).
                output_rejected: None,
                attempt,
            },
            Some(Ok(MessageDelta::Error { error })) => failure(attempt, error),
            Some(Ok(delta)) => {
                events.push(Event::Delta {
                    attempt: attempt.clone(),
                    seq,
                    delta,
                });
                seq += 1;
                continue;
            }
        };
        events.push(terminal);
        return Attempt {
            events,
            deadline: None,
        };
    }
}
