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
//! another worker behind the same deployment URI (or on itself, restarted) and re-runs only the
//! effect in flight.
//!
//! Abort: `abort` (shared) resolves the running `prompt` invocation's `abort` signal with the
//! request, then cancels that invocation. The SDK reports the cancellation (a journaled
//! notification, so replay sees it at the same point) as error 409 at the handler's next await:
//! the effect in flight's `ctx.run` or the backoff sleep. The handler then reads the signal,
//! feeds `Event::Abort` to the machine, and performs what the machine still waits for (tool calls
//! the kill policy spared, run again under the same idempotency key); the run ends through the
//! chart and `prompt` returns its aborted result. A `ctx.run` cannot be raced against a signal
//! in restate-sdk 0.13 (it is not a `DurableFuture`, so not usable in `select!`), so a running
//! model attempt or tool is not cut short: its result is discarded when the cancellation lands.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

use agentloop::model::{Model, ModelRequest};
use agentloop::runtime::{Compactor, Timeouts, Truncate};
use agentloop::store::Entry;
use agentloop::tools::{ArgumentSchemas, ToolContext, ToolRegistry};
use agentloop::Outcome;
use agentloop::{ErrorKind, ModelError};
use agentloop::{Message, MessageDelta, ToolStatus};
use agentloop_core::event::{ApprovalDecision, AttemptId, GateVerdict, KillPolicy};
use agentloop_core::{Effect, Event, LoopResult, Run, RunConfig};

/// State key of the session's entries (the same entries a `SessionStore` holds).
const ENTRIES: &str = "entries";
/// State key of the last run's result.
const LAST: &str = "last_result";
/// State key of the running `prompt`'s invocation id (set while it runs; `abort` reads it).
const RUNNING: &str = "running";
/// The signal (on the running `prompt` invocation) that carries an `abort` request.
const ABORT_SIGNAL: &str = "abort";

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
            .get_or_insert(agentloop_core::process::StreamDeadlines {
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

/// The `Session` object's handler set (`prompt` exclusive; `abort` and `status` shared).
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

/// The input of `abort` (the arguments of the library's `Session::abort`; queued prompts are
/// Restate's inbox and are not dropped).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AbortInput {
    /// Why: the aborted run's `reason`.
    #[serde(default = "AbortInput::default_reason")]
    pub reason: String,
    /// Which running tools to kill: `killable` (default), `all` or `none`.
    #[serde(default)]
    pub kill: KillPolicy,
}

impl AbortInput {
    fn default_reason() -> String {
        "aborted".into()
    }

    /// The request of a cancellation that did not come from `abort`.
    fn cancelled() -> Self {
        AbortInput {
            reason: "cancelled".into(),
            kill: KillPolicy::default(),
        }
    }

    fn event(self) -> Event {
        Event::Abort {
            reason: self.reason,
            kill: self.kill,
        }
    }
}

/// What `abort` returns (the library's `AbortAck`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AbortOutput {
    /// Whether a prompt was running and was told to abort (false: idle, nothing happened).
    pub aborting: bool,
    /// The invocation id of that prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation_id: Option<String>,
}

/// What `status` returns.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StatusOutput {
    /// Entries stored for the session.
    pub entries: usize,
    /// Assistant turns the session committed.
    pub turns: u32,
    /// The invocation id of the running `prompt`, if one runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<String>,
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
    /// Runs one prompt in the session to completion and returns its result (outcome `aborted`
    /// when `abort` stopped it).
    #[handler]
    async fn prompt(
        &self,
        mut ctx: ObjectContext<'_>,
        input: Json<PromptInput>,
    ) -> Result<Json<PromptOutput>, HandlerError> {
        tracing::info!(
            session = ctx.key(),
            invocation = ctx.invocation_id(),
            "prompt attempt"
        );
        let run_id = format!("run_{}", ctx.rand_uuid().simple());
        let entries: Vec<Entry> = ctx
            .get::<Json<Vec<Entry>>>(ENTRIES)
            .await?
            .map(Json::into_inner)
            .unwrap_or_default();
        // `abort` (shared, so it runs while this handler holds the key) finds the invocation
        // to stop here. The next await is the first effect's, where a cancellation becomes
        // the run's abort.
        ctx.set(RUNNING, ctx.invocation_id().to_string());
        let out = self
            .drive(&ctx, run_id, entries, input.into_inner().prompt)
            .await;
        ctx.clear(RUNNING);
        let out = out?;
        ctx.set(LAST, Json(out.clone()));
        Ok(Json(out))
    }

    /// Aborts the running prompt, as the library's `Session::abort`: the run gets the
    /// machine's `Abort` event (with `reason` and `kill`) and ends through the chart, and
    /// that `prompt` returns the aborted result. Idle: nothing happens (`aborting: false`).
    ///
    /// It resolves the running invocation's `abort` signal with the request, then cancels
    /// that invocation: the cancellation interrupts the handler at its next journaled await
    /// (the model attempt, tool or backoff sleep in flight), which then reads the signal.
    #[handler]
    async fn abort(
        &self,
        ctx: SharedObjectContext<'_>,
        input: Json<AbortInput>,
    ) -> Result<Json<AbortOutput>, HandlerError> {
        let Some(running) = ctx.get::<String>(RUNNING).await? else {
            return Ok(Json(AbortOutput {
                aborting: false,
                invocation_id: None,
            }));
        };
        let target = ctx.invocation_handle(running.clone());
        target.signal(ABORT_SIGNAL).resolve(input);
        target.cancel();
        Ok(Json(AbortOutput {
            aborting: true,
            invocation_id: Some(running),
        }))
    }

    /// The session's stored entries, turns, running prompt and last result.
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
        let running = ctx.get::<String>(RUNNING).await?;
        let last = ctx
            .get::<Json<PromptOutput>>(LAST)
            .await?
            .map(Json::into_inner);
        Ok(Json(StatusOutput {
            entries: entries.len(),
            turns: agentloop_core::session_log::committed_turns(&entries),
            running,
            last,
        }))
    }
}

impl Session {
    /// The drive loop: feeds events to the machine and performs each step's effects in order.
    async fn drive(
        &self,
        ctx: &ObjectContext<'_>,
        run_id: String,
        mut entries: Vec<Entry>,
        prompt: String,
    ) -> Result<PromptOutput, TerminalError> {
        let w = &*self.0;
        let start = Event::Start {
            run_id: run_id.clone(),
            history: agentloop_core::session_log::history(&entries),
            input: vec![Message::user(prompt)],
            session_turns: agentloop_core::session_log::committed_turns(&entries),
        };
        let mut run = Run::new(w.config.clone());
        let mut pending = VecDeque::from([start]);
        // Timers the machine started and has not cancelled: id → delay.
        let mut timers: BTreeMap<u64, u64> = BTreeMap::new();
        // The abort request, once a cancellation delivered one.
        let mut abort: Option<AbortInput> = None;
        loop {
            let event = match pending.pop_front() {
                Some(e) => e,
                None => {
                    // Waiting on nothing but timers: the shortest fires (a durable sleep).
                    let Some((id, delay)) = shortest(&timers) else {
                        return Err(TerminalError::new("the run waits on nothing"));
                    };
                    match ctx.sleep(Duration::from_millis(delay)).await {
                        Ok(()) => {
                            timers.remove(&id);
                            Event::TimerElapsed { timer_id: id }
                        }
                        Err(e) if is_cancellation(&e) => {
                            tracing::info!(session = ctx.key(), "abort during a backoff sleep");
                            abort_request(ctx, &mut abort).await.event()
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            let mut effects = VecDeque::from(run.handle(event).effects);
            while let Some(effect) = effects.pop_front() {
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
                    Effect::GateTool { call } => pending.push_back(Event::ToolGated {
                        tool_call_id: call.id,
                        verdict: GateVerdict::Allow,
                    }),
                    Effect::RequestApproval { call } => pending.push_back(Event::Approval {
                        tool_call_id: call.id,
                        decision: ApprovalDecision::Approved,
                    }),
                    // The worker sets no title model; were one configured, it gets no title.
                    Effect::GenerateTitle { .. } => {
                        pending.push_back(Event::TitleReady { title: None })
                    }
                    // The worker has no person to ask (ask_user is not offered here).
                    Effect::AskUser { tool_call_id, .. } => {
                        pending.push_back(Event::UserAnswered {
                            tool_call_id,
                            answer: None,
                        })
                    }
                    // Effects run one at a time: nothing is in flight when the machine kills or
                    // cancels (an interrupted one is settled by `still_owed` below).
                    // Approvals are answered at once here: none is ever withdrawn.
                    Effect::KillTool { .. }
                    | Effect::CancelModel { .. }
                    | Effect::WithdrawApproval { .. } => {}
                    world @ (Effect::CallModel { .. }
                    | Effect::RunTool { .. }
                    | Effect::Compact { .. }) => {
                        match self.perform(ctx, &timers, world.clone()).await {
                            Ok(events) => pending.extend(events),
                            Err(e) if is_cancellation(&e) => {
                                // `abort` interrupted this effect (or the cancellation came
                                // before it started): the machine takes the abort now, as the
                                // library's run takes it while effects are in flight.
                                tracing::info!(
                                    session = ctx.key(),
                                    effect = match &world {
                                        Effect::CallModel { .. } => "model",
                                        Effect::RunTool { .. } => "tool",
                                        _ => "compact",
                                    },
                                    "abort during an effect"
                                );
                                let request = abort_request(ctx, &mut abort).await;
                                // Results the world gave before the abort reach the machine
                                // first (the library would have received them first).
                                let mut later: Vec<Effect> = effects.drain(..).collect();
                                for e in pending.drain(..) {
                                    later.extend(run.handle(e).effects);
                                }
                                let step = run.handle(request.event());
                                effects.extend(still_owed(world, later, &step.effects));
                                effects.extend(step.effects);
                            }
                            Err(e) => return Err(e),
                        }
                    }
                }
            }
            if run.is_terminal() && pending.is_empty() {
                break;
            }
        }
        run.result()
            .map(|r| PromptOutput::of(run_id, r))
            .ok_or_else(|| TerminalError::new("the run ended without a result"))
    }

    /// Performs one effect that touches the world as one journaled `ctx.run` and returns the
    /// events it produced. The machine's shortest timer bounds the wait (see the module doc).
    async fn perform(
        &self,
        ctx: &ObjectContext<'_>,
        timers: &BTreeMap<u64, u64>,
        effect: Effect,
    ) -> Result<Vec<Event>, TerminalError> {
        let w = &*self.0;
        let bound = shortest(timers);
        match effect {
            Effect::CallModel { request } => {
                let model = w.model.clone();
                let schemas = w.tools.schemas();
                let attempt =
                    ctx.run(|| async move {
                        Ok(Json(call_model(model, request, bound, schemas).await))
                    })
                    .name("model")
                    .await?
                    .into_inner();
                let mut events = attempt.events;
                if let Some(id) = attempt.deadline {
                    events.push(Event::TimerElapsed { timer_id: id });
                }
                Ok(events)
            }
            Effect::RunTool { call } => {
                let tool = w.tools.get(&call.name).cloned();
                let tool_ctx = ToolContext {
                    call_id: call.id.clone(),
                    root: w.root.clone(),
                    idempotency_key: Some(format!("{}/{}", ctx.key(), call.id)),
                };
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
                            Some((_, ms)) => tokio::time::timeout(Duration::from_millis(ms), work)
                                .await
                                .ok(),
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
                Ok(match (done, bound) {
                    (Some((status, content)), _) => vec![Event::ToolFinished {
                        tool_call_id: id,
                        status,
                        content,
                    }],
                    (None, Some((timer_id, _))) => vec![Event::TimerElapsed { timer_id }],
                    (None, None) => vec![],
                })
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
                Ok(vec![ev])
            }
            _ => Ok(vec![]),
        }
    }
}

/// Whether an awaited journal operation failed because the invocation was cancelled (the SDK
/// reports a cancellation as terminal error 409 at the next await).
fn is_cancellation(e: &TerminalError) -> bool {
    e.code() == 409
}

/// The abort request behind a cancellation. `abort` resolves the `abort` signal before it
/// cancels, so the signal is there; a cancellation from elsewhere (`restate invocations
/// cancel`, the admin API) has none and aborts with reason "cancelled" after a short wait. A
/// later cancellation (a second `abort`) repeats the first request.
async fn abort_request(ctx: &ObjectContext<'_>, abort: &mut Option<AbortInput>) -> AbortInput {
    if let Some(a) = abort {
        return a.clone();
    }
    let a = restate_sdk::select! {
        signal = ctx.signal::<Json<AbortInput>>(ABORT_SIGNAL) => {
            signal.map(Json::into_inner).unwrap_or_else(|_| AbortInput::cancelled())
        },
        _ = ctx.sleep(Duration::from_millis(500)) => AbortInput::cancelled(),
        on_cancel => AbortInput::cancelled(),
    };
    *abort = Some(a.clone());
    a
}

/// After an abort interrupted `interrupted`, what is still to be performed, in order: of the
/// interrupted effect and the effects not yet performed (`rest`), every effect except model
/// attempts, compactions and the tool calls the abort killed (it cancelled those). Tool calls
/// its kill policy spared stay: the machine drains them (R-CTL-3), so they run, or run again
/// under the same idempotency key, for their results.
fn still_owed(interrupted: Effect, rest: Vec<Effect>, abort_effects: &[Effect]) -> Vec<Effect> {
    let killed: Vec<&str> = abort_effects
        .iter()
        .filter_map(|e| match e {
            Effect::KillTool { tool_call_id } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    std::iter::once(interrupted)
        .chain(rest)
        .filter(|e| match e {
            Effect::RunTool { call } => !killed.contains(&call.id.as_str()),
            Effect::CallModel { .. } | Effect::Compact { .. } => false,
            _ => true,
        })
        .collect()
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
