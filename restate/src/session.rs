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
//! | `Persist` | the entry joins the run's entries; `CommitRunEnd` writes them to the object's state (`ctx.set`, journaled, exactly once) and, with `--store`, appends the run's entries to the store (one `ctx.run("store")`; the store skips keys it holds) |
//! | `StartTimer` / `CancelTimer` | kept in a table; when the machine waits on nothing but timers, the shortest is a durable `ctx.sleep` (backoff), raced against the abort signal; a model call's or tool's deadlines bound the wait for its next chunk / its result inside its `ctx.run` |
//! | `GateTool`, `RequestApproval` | answered at once (no hooks: allow; approvals: approved) |
//! | `Emit` | a `tracing` event (not journaled) |
//! | `KillTool`, `CancelModel` | nothing: effects run one at a time; the abort already stopped the one in flight |
//!
//! Everything else the handler does is deterministic given the journal (the run id is
//! `ctx.rand_uuid()`, seeded by the invocation id), so a worker killed at any point resumes on
//! another worker behind the same deployment URI (or on itself, restarted) and re-runs only the
//! effect in flight.
//!
//! Abort: `abort` (shared) resolves the running `prompt` invocation's `abort` signal with the
//! request. While an effect's `ctx.run` closure works, the handler also awaits that signal
//! ([`race`]); the closure watches for it ([`interruptible`]) and, if the abort stops that
//! effect (a model attempt or compaction always, a killable tool unless `kill` is `none`),
//! returns at once. The closure's answer — result or none, and the abort — is the journaled
//! value, so a replay (which reads it and never awaits the signal) takes the abort at the same
//! effect. The handler then feeds `Event::Abort` to the machine and performs what it still
//! waits for (tool calls the kill policy spared, run again under the same idempotency key); the
//! run ends through the chart and `prompt` returns its aborted result. A `ctx.run` cannot go
//! into the SDK's `select!` in restate-sdk 0.13 (it is not a `DurableFuture`), hence this.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

use agentloop::model::{Model, ModelRequest};
use agentloop::runtime::kit;
use agentloop::store::{AnyStore, Entry, SessionStore};
use agentloop::tools::{ToolContext, ToolRegistry};
use agentloop::Outcome;
use agentloop::{Message, ToolStatus};
use agentloop_core::event::{ApprovalDecision, GateVerdict, KillPolicy};
use agentloop_core::output::OutputSpec;
use agentloop_core::timeouts::Timeouts;
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
pub(crate) struct Worker {
    /// The model every request goes to.
    pub model: Arc<dyn Model>,
    /// The tools.
    pub tools: ToolRegistry,
    /// The directory file tools are confined to.
    pub root: std::path::PathBuf,
    /// The run configuration (tools, model name, deadlines filled in by [`Worker::new`]).
    pub config: RunConfig,
    /// The session store the entries are written to (`--store`), if one is set: then the
    /// session's history is loaded from it, and each run's entries are appended to it.
    pub store: Option<Arc<AnyStore>>,
    /// The Restate admin API (`--admin-url`), asked for the prompts queued behind a running one
    /// when an abort drops them.
    pub admin_url: String,
}

impl Worker {
    /// A worker with `tools`, `max_steps` and the runtime's default deadlines.
    pub(crate) fn new(
        model: Arc<dyn Model>,
        tools: ToolRegistry,
        root: std::path::PathBuf,
        max_steps: u32,
    ) -> Self {
        let mut config = RunConfig {
            max_steps,
            ..RunConfig::default()
        };
        kit::configure_tools(&mut config, &tools);
        config.model = model.name();
        kit::apply_timeouts(&mut config, &Timeouts::default());
        Worker {
            model,
            tools,
            root,
            config,
            store: None,
            admin_url: "http://127.0.0.1:9070".into(),
        }
    }
}

/// The `Session` object's handler set (`prompt` exclusive; `abort` and `status` shared).
pub(crate) struct Session(pub Arc<Worker>);

/// The input of `prompt`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PromptInput {
    /// The user's prompt.
    pub prompt: String,
    /// A typed final answer (as `agentloop run --output-schema`): the requests carry its schema,
    /// the worker checks the answer, and the machine retries or fails an invalid one
    /// (`output_invalid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputSpec>,
}

/// What `prompt` returns: the run's result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PromptOutput {
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
        PromptOutput {
            run_id,
            outcome: r.outcome,
            reason: r.reason.clone(),
            text: r.final_text().unwrap_or_default().to_string(),
            iterations: r.iterations,
            error: r.error.as_ref().map(ToString::to_string),
        }
    }
}

/// The input of `abort` (the arguments of the library's `Session::abort`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct AbortInput {
    /// Why: the aborted run's `reason`.
    #[serde(default = "AbortInput::default_reason")]
    pub reason: String,
    /// Which running tools to kill: `killable` (default), `all` or `none`.
    #[serde(default)]
    pub kill: KillPolicy,
    /// Also drop the prompts queued behind the running one (Restate's inbox for the key): they
    /// are cancelled and never run.
    #[serde(default)]
    pub clear_queue: bool,
}

impl AbortInput {
    fn default_reason() -> String {
        "aborted".into()
    }

    /// The request of a cancellation that did not come from `abort` (the admin API's cancel):
    /// it stops whatever runs.
    fn cancelled() -> Self {
        AbortInput {
            reason: "cancelled".into(),
            kill: KillPolicy::All,
            clear_queue: false,
        }
    }

    /// Whether this abort cuts the effect short: a model attempt or a compaction always, a
    /// tool when it is killable and the policy kills anything (as the library's driver, which
    /// never stops a tool that is not killable).
    fn stops(&self, effect: Stoppable) -> bool {
        match effect {
            Stoppable::Always => true,
            Stoppable::Tool { killable } => killable && self.kill != KillPolicy::None,
        }
    }

    fn event(self) -> Event {
        Event::Abort {
            reason: self.reason,
            kill: self.kill,
        }
    }
}

/// What `abort` returns (the library's `Ack::Idle` or `Ack::Aborting`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct AbortOutput {
    /// Whether a prompt was running and was told to abort (false: idle, nothing happened).
    pub aborting: bool,
    /// The invocation id of that prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation_id: Option<String>,
    /// The queued prompts dropped (`clear_queue`): their invocation ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
}

/// What `status` returns.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct StatusOutput {
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

/// What an effect's journaled `ctx.run` returns when an abort may cut it short: its result
/// (`None`: the abort stopped it), and the abort the worker had seen when it ended. Both are
/// in the journal, so a replay takes the abort at the same point.
#[derive(Serialize, Deserialize)]
struct Raced<T> {
    result: Option<T>,
    abort: Option<AbortInput>,
}

/// Which effects an abort stops (see [`AbortInput::stops`]).
#[derive(Clone, Copy)]
enum Stoppable {
    /// A model attempt or a compaction.
    Always,
    /// A tool call.
    Tool { killable: bool },
}

/// The abort the running prompt has seen (its `abort` signal, or a cancellation), shared with
/// the effect in flight.
type AbortSeen = tokio::sync::watch::Sender<Option<AbortInput>>;

/// Runs `work` unless or until an abort that [`stops`](AbortInput::stops) it is seen.
async fn interruptible<T>(
    seen: tokio::sync::watch::Receiver<Option<AbortInput>>,
    kind: Stoppable,
    work: impl Future<Output = T>,
) -> Raced<T> {
    let mut rx = seen.clone();
    let stopped = async move {
        let abort = rx
            .wait_for(|a| a.as_ref().is_some_and(|a| a.stops(kind)))
            .await
            .ok()
            .and_then(|a| a.clone());
        match abort {
            Some(a) => a,
            // The prompt is gone: nothing will stop the effect.
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        abort = stopped => Raced { result: None, abort: Some(abort) },
        result = work => Raced { result: Some(result), abort: seen.borrow().clone() },
    }
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
        // The session's history: the store's, when the worker has one (read once, journaled),
        // else the object's state.
        let entries: Vec<Entry> = match self.0.store.clone() {
            Some(store) => {
                let key = ctx.key().to_string();
                ctx.run(|| async move {
                    let loaded = store.load(&key).await;
                    let _ = store.close(&key).await;
                    Ok(Json(loaded.map_err(|e| HandlerError::from(e.to_string()))?))
                })
                .name("load")
                .await?
                .into_inner()
            }
            None => ctx
                .get::<Json<Vec<Entry>>>(ENTRIES)
                .await?
                .map(Json::into_inner)
                .unwrap_or_default(),
        };
        // `abort` (shared, so it runs while this handler holds the key) finds the invocation
        // to stop here.
        ctx.set(RUNNING, ctx.invocation_id().to_string());
        let out = self.drive(&ctx, run_id, entries, input.into_inner()).await;
        ctx.clear(RUNNING);
        let out = out?;
        ctx.set(LAST, Json(out.clone()));
        Ok(Json(out))
    }

    /// Aborts the running prompt, as the library's `Session::abort`: the run gets the
    /// machine's `Abort` event (with `reason` and `kill`) and ends through the chart, and
    /// that `prompt` returns the aborted result. Idle: nothing happens (`aborting: false`).
    ///
    /// It resolves the running invocation's `abort` signal with the request. The prompt races
    /// the effect in flight (model attempt, tool, compaction) and its backoff sleeps against
    /// that signal, so the abort cuts them short. With `clear_queue`, the prompts queued
    /// behind the running one (found through the admin API) are cancelled first.
    #[handler]
    async fn abort(
        &self,
        ctx: SharedObjectContext<'_>,
        input: Json<AbortInput>,
    ) -> Result<Json<AbortOutput>, HandlerError> {
        let request = input.into_inner();
        let dropped = if request.clear_queue {
            let admin = self.0.admin_url.clone();
            let key = ctx.key().to_string();
            let ids = ctx
                .run(|| async move { Ok(Json(queued_prompts(&admin, &key).await?)) })
                .name("queued prompts")
                .await?
                .into_inner();
            for id in &ids {
                ctx.invocation_handle(id.clone()).cancel();
            }
            ids
        } else {
            Vec::new()
        };
        let Some(running) = ctx.get::<String>(RUNNING).await? else {
            return Ok(Json(AbortOutput {
                aborting: false,
                invocation_id: None,
                dropped,
            }));
        };
        ctx.invocation_handle(running.clone())
            .signal(ABORT_SIGNAL)
            .resolve(Json(request));
        Ok(Json(AbortOutput {
            aborting: true,
            invocation_id: Some(running),
            dropped,
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
        input: PromptInput,
    ) -> Result<PromptOutput, TerminalError> {
        let w = &*self.0;
        let stored = entries.len();
        let PromptInput { prompt, output } = input;
        let mut config = w.config.clone();
        config.output = output;
        // The typed answer's check: pure, on the journaled attempt, so a replay checks alike.
        let check = kit::OutputCheck::new(config.output.as_ref());
        let start = Event::Start {
            run_id: run_id.clone(),
            history: agentloop_core::session_log::history(&entries),
            input: vec![Message::user(prompt)],
            session_turns: agentloop_core::session_log::committed_turns(&entries),
        };
        let mut run = Run::new(config);
        let mut pending = VecDeque::from([start]);
        // Timers the machine started and has not cancelled: id → delay.
        let mut timers: BTreeMap<u64, u64> = BTreeMap::new();
        // The abort the machine has taken (from a journaled effect result or sleep).
        let mut abort: Option<AbortInput> = None;
        // The abort this worker has seen (signal or cancellation), not yet journaled: the
        // effect in flight reads it and records it in its result.
        let (seen, _) = tokio::sync::watch::channel::<Option<AbortInput>>(None);
        loop {
            let event = match pending.pop_front() {
                Some(e) => e,
                None => {
                    // Waiting on nothing but timers: the shortest fires (a durable sleep),
                    // unless an abort comes first.
                    let Some((id, delay)) = shortest(&timers) else {
                        return Err(TerminalError::new("the run waits on nothing"));
                    };
                    match self.wait(ctx, &seen, abort.is_some(), delay).await? {
                        None => {
                            timers.remove(&id);
                            Event::TimerElapsed { timer_id: id }
                        }
                        Some(request) => {
                            tracing::info!(session = ctx.key(), "abort during a backoff sleep");
                            seen.send_replace(Some(request.clone()));
                            abort = Some(request.clone());
                            request.event()
                        }
                    }
                }
            };
            let event = match &check {
                Some(check) => check.annotate(event, &run),
                None => event,
            };
            let mut effects = VecDeque::from(run.handle(event).effects);
            while let Some(effect) = effects.pop_front() {
                match effect {
                    Effect::Persist { entry } => entries.push(entry),
                    Effect::CommitRunEnd { entry } => {
                        entries.push(entry);
                        self.commit(ctx, &entries, stored).await?;
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
                    // Effects run one at a time: the abort stopped the one in flight (or it
                    // finished) before the machine kills or cancels; `still_owed` settles the
                    // rest. Approvals are answered at once here: none is ever withdrawn.
                    Effect::KillTool { .. }
                    | Effect::CancelModel { .. }
                    | Effect::WithdrawApproval { .. } => {}
                    world @ (Effect::CallModel { .. }
                    | Effect::RunTool { .. }
                    | Effect::Compact { .. }) => {
                        let (events, request) = match self
                            .perform(ctx, &timers, &seen, world.clone())
                            .await
                        {
                            Ok(raced) => raced,
                            // A cancellation (the admin API's) landed at this effect's
                            // await, before its result.
                            Err(e) if is_cancellation(&e) => (None, Some(AbortInput::cancelled())),
                            Err(e) => return Err(e),
                        };
                        let stopped = events.is_none();
                        pending.extend(events.into_iter().flatten());
                        let Some(request) = request.filter(|_| abort.is_none()) else {
                            continue;
                        };
                        tracing::info!(
                            session = ctx.key(),
                            effect = match &world {
                                Effect::CallModel { .. } => "model",
                                Effect::RunTool { .. } => "tool",
                                _ => "compact",
                            },
                            stopped,
                            "abort during an effect"
                        );
                        seen.send_replace(Some(request.clone()));
                        abort = Some(request.clone());
                        // Results the world gave before the abort reach the machine first
                        // (the library would have received them first).
                        let mut later: Vec<Effect> = effects.drain(..).collect();
                        for e in pending.drain(..) {
                            later.extend(run.handle(e).effects);
                        }
                        let step = run.handle(request.event());
                        let stopped = stopped.then_some(world);
                        effects.extend(still_owed(stopped, later, &step.effects));
                        effects.extend(step.effects);
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

    /// The run-end commit: the entries go to the object's state and, with a store, the run's
    /// new entries (from `stored` on) are appended to it in one journaled `ctx.run`. A re-run
    /// of that `ctx.run` (the worker died before it was journaled) appends again: the store
    /// skips every entry whose idempotency key it holds.
    async fn commit(
        &self,
        ctx: &ObjectContext<'_>,
        entries: &[Entry],
        stored: usize,
    ) -> Result<(), TerminalError> {
        ctx.set(ENTRIES, Json(entries.to_vec()));
        let Some(store) = self.0.store.clone() else {
            return Ok(());
        };
        let new = entries[stored.min(entries.len())..].to_vec();
        let key = ctx.key().to_string();
        ctx.run(|| async move {
            let append = async {
                let _lock = store.lock(&key).await?;
                for entry in &new {
                    store.append(&key, entry).await?;
                }
                // The next run (perhaps on another worker) reads the file afresh.
                store.close(&key).await
            };
            append
                .await
                .map_err(|e: agentloop::store::StoreError| HandlerError::from(e.to_string()))
        })
        .name("store")
        .await
    }

    /// Waits `delay_ms` for the machine's shortest timer, unless an abort comes first; returns
    /// that abort. An abort the worker saw but no effect recorded is journaled first (so a
    /// replay takes the same branch); then the sleep races the `abort` signal (`select!` over
    /// durable futures). `taken`: the machine already has its abort, just sleep.
    async fn wait(
        &self,
        ctx: &ObjectContext<'_>,
        seen: &AbortSeen,
        taken: bool,
        delay_ms: u64,
    ) -> Result<Option<AbortInput>, TerminalError> {
        let delay = Duration::from_millis(delay_ms);
        let cancelled = |e: TerminalError| {
            if is_cancellation(&e) {
                Ok(Some(AbortInput::cancelled()))
            } else {
                Err(e)
            }
        };
        if taken {
            return ctx.sleep(delay).await.map(|()| None).or_else(cancelled);
        }
        let rx = seen.subscribe();
        let earlier = match ctx
            .run(|| async move { Ok(Json(rx.borrow().clone())) })
            .name("abort seen")
            .await
        {
            Ok(a) => a.into_inner(),
            Err(e) => return cancelled(e),
        };
        if earlier.is_some() {
            return Ok(earlier);
        }
        Ok(restate_sdk::select! {
            slept = ctx.sleep(delay) => match slept {
                Ok(()) => None,
                Err(e) => return cancelled(e),
            },
            signal = ctx.signal::<Json<AbortInput>>(ABORT_SIGNAL) => Some(
                signal.map(Json::into_inner).unwrap_or_else(|_| AbortInput::cancelled()),
            ),
            on_cancel => Some(AbortInput::cancelled()),
        })
    }

    /// Performs one effect that touches the world as one journaled `ctx.run`, raced against
    /// the `abort` signal, and returns the events it produced (`None`: an abort stopped it)
    /// and the abort seen meanwhile. The machine's shortest timer bounds the wait (see the
    /// module doc).
    ///
    /// The race: while the `ctx.run` closure works, the handler also awaits the signal; when
    /// it arrives, the closure (which watches for it) stops the work if the abort
    /// [`stops`](AbortInput::stops) it and returns. Either way the closure's answer — result
    /// or not, and the abort — is what the journal records, so a replay, which reads the
    /// answer and never awaits the signal, takes the same branch.
    async fn perform(
        &self,
        ctx: &ObjectContext<'_>,
        timers: &BTreeMap<u64, u64>,
        seen: &AbortSeen,
        effect: Effect,
    ) -> Result<(Option<Vec<Event>>, Option<AbortInput>), TerminalError> {
        let w = &*self.0;
        let bound = shortest(timers);
        match effect {
            Effect::CallModel { request } => {
                // A clone shares the tools, their specs and their compiled schemas.
                let attempt = call_model(w.model.clone(), request, bound, w.tools.clone());
                let raced = journaled(ctx, seen, "model", Stoppable::Always, attempt).await?;
                let events = raced.result.map(|attempt| {
                    let mut events = attempt.events;
                    if let Some(id) = attempt.deadline {
                        events.push(Event::TimerElapsed { timer_id: id });
                    }
                    events
                });
                Ok((events, raced.abort))
            }
            Effect::RunTool { call } => {
                let tool = w.tools.get(&call.name).cloned();
                let killable = tool.as_ref().is_none_or(|t| t.killable());
                let tool_ctx = ToolContext {
                    call_id: call.id.clone(),
                    root: w.root.clone(),
                    idempotency_key: Some(format!("{}/{}", ctx.key(), call.id)),
                    allow_instruction_writes: false,
                };
                let id = call.id.clone();
                let work = async move {
                    let Some(tool) = tool else {
                        return Some((ToolStatus::Error, format!("unknown tool: {}", call.name)));
                    };
                    let work = tool.call(tool_ctx, call.arguments);
                    let out = match bound {
                        Some((_, ms)) => tokio::time::timeout(Duration::from_millis(ms), work)
                            .await
                            .ok(),
                        None => Some(work.await),
                    };
                    out.map(|r| match r {
                        Ok(content) => (ToolStatus::Completed, content),
                        Err(e) => (ToolStatus::Error, e.to_string()),
                    })
                };
                let stop = Stoppable::Tool { killable };
                let raced = journaled(ctx, seen, "tool", stop, work).await?;
                let events = raced.result.map(|done| match (done, bound) {
                    (Some((status, content)), _) => vec![Event::ToolFinished {
                        tool_call_id: id,
                        status,
                        content,
                    }],
                    (None, Some((timer_id, _))) => vec![Event::TimerElapsed { timer_id }],
                    (None, None) => vec![],
                });
                Ok((events, raced.abort))
            }
            Effect::Compact {
                messages,
                budget_tokens,
                max_messages,
            } => {
                let work = async move {
                    match agentloop_core::context::truncate(&messages, budget_tokens, max_messages)
                    {
                        Ok((messages, removed)) => Event::CompactionDone { messages, removed },
                        Err(e) => Event::CompactionFailed {
                            error: e.to_string(),
                        },
                    }
                };
                let raced = journaled(ctx, seen, "compact", Stoppable::Always, work).await?;
                Ok((raced.result.map(|ev| vec![ev]), raced.abort))
            }
            _ => Ok((Some(vec![]), None)),
        }
    }
}

/// Performs `work` as one journaled `ctx.run` named `name` that an abort which
/// [`stops`](AbortInput::stops) it (`stop`) cuts short, raced against the abort signal (see
/// [`race`]): the journal records the closure's answer, result or not, with the abort seen.
async fn journaled<T>(
    ctx: &ObjectContext<'_>,
    seen: &AbortSeen,
    name: &str,
    stop: Stoppable,
    work: impl Future<Output = T> + Send + 'static,
) -> Result<Raced<T>, TerminalError>
where
    T: Serialize + for<'de> Deserialize<'de> + Send + 'static,
{
    let rx = seen.subscribe();
    // Set by the closure when it has its answer (see `race`).
    let done = Arc::new(AtomicBool::new(false));
    let closure_done = done.clone();
    let run = ctx
        .run(|| async move {
            let raced = interruptible(rx, stop, work).await;
            closure_done.store(true, Ordering::SeqCst);
            Ok(Json(raced))
        })
        .name(name);
    Ok(race(ctx, seen, &done, run).await?.into_inner())
}

/// Awaits an effect's journaled `ctx.run` (`work`) while also awaiting the `abort` signal;
/// when the signal (or a cancellation) arrives first, hands the abort to the closure through
/// `seen` and goes on awaiting `work`, which then ends at once with the abort in its result.
///
/// `work` is polled first, so a replayed `ctx.run` (its result in the journal) answers before
/// the signal is ever awaited: a replay never waits on the signal at a point where the
/// original execution did not. The signal is awaited only while the closure works
/// (`closure_done` unset): both futures read the invocation's input, and once the closure has
/// proposed its result, an acknowledgement read by the signal's future would leave `work`
/// asleep with its answer.
async fn race<T>(
    ctx: &ObjectContext<'_>,
    seen: &AbortSeen,
    closure_done: &AtomicBool,
    work: impl Future<Output = Result<T, TerminalError>>,
) -> Result<T, TerminalError> {
    if seen.borrow().is_some() {
        return work.await;
    }
    let mut work = std::pin::pin!(work);
    let signal = async {
        match ctx.signal::<Json<AbortInput>>(ABORT_SIGNAL).await {
            Ok(a) => a.into_inner(),
            Err(_) => AbortInput::cancelled(),
        }
    };
    let mut signal = std::pin::pin!(signal);
    let mut signalled = false;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(done) = work.as_mut().poll(cx) {
            return Poll::Ready(done);
        }
        if !signalled && !closure_done.load(Ordering::SeqCst) {
            if let Poll::Ready(request) = signal.as_mut().poll(cx) {
                signalled = true;
                seen.send_replace(Some(request));
                // The closure watches `seen`: poll `work` again for its answer.
                cx.waker().wake_by_ref();
            }
        }
        Poll::Pending
    })
    .await
}

/// Whether an awaited journal operation failed because the invocation was cancelled (the SDK
/// reports a cancellation as terminal error 409 at the next await).
fn is_cancellation(e: &TerminalError) -> bool {
    e.code() == 409
}

/// After an abort, what is still to be performed, in order: of the effect it stopped (if it
/// stopped one) and the effects not yet performed (`rest`), every effect except model
/// attempts, compactions and the tool calls the abort killed (it cancelled those). Tool calls
/// its kill policy spared stay: the machine drains them (R-CTL-3), so they run, or run again
/// under the same idempotency key, for their results.
fn still_owed(stopped: Option<Effect>, rest: Vec<Effect>, abort_effects: &[Effect]) -> Vec<Effect> {
    let killed: Vec<&str> = abort_effects
        .iter()
        .filter_map(|e| match e {
            Effect::KillTool { tool_call_id } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    stopped
        .into_iter()
        .chain(rest)
        .filter(|e| match e {
            Effect::RunTool { call } => !killed.contains(&call.id.as_str()),
            Effect::CallModel { .. } | Effect::Compact { .. } => false,
            _ => true,
        })
        .collect()
}

/// The invocation ids of the `prompt`s queued for `key` (Restate's inbox for the key), from the
/// admin API's SQL introspection (`POST /query` on `admin`, e.g. `http://127.0.0.1:9070`).
async fn queued_prompts(admin: &str, key: &str) -> Result<Vec<String>, HandlerError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = admin
        .strip_prefix("http://")
        .ok_or_else(|| HandlerError::from(format!("--admin-url must be http://…: {admin}")))?
        .trim_end_matches('/');
    let query = format!(
        "SELECT id FROM sys_invocation WHERE target_service_name = 'Session' \
         AND target_handler_name = 'prompt' AND target_service_key = '{}' \
         AND status IN ('pending', 'inboxed')",
        key.replace('\'', "''")
    );
    let body = serde_json::json!({ "query": query }).to_string();
    // HTTP/1.0: the answer is not chunked and ends when the server closes the connection.
    let request = format!(
        "POST /query HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| HandlerError::from(format!("admin API: no answer from {admin}")))?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(format!("admin API query: {head}: {body}").into());
    }
    let rows: serde_json::Value = serde_json::from_str(body)?;
    Ok(rows["rows"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter_map(|r| r["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default())
}

/// The active timer with the shortest delay.
fn shortest(timers: &BTreeMap<u64, u64>) -> Option<(u64, u64)> {
    timers
        .iter()
        .min_by_key(|(_, d)| **d)
        .map(|(id, d)| (*id, *d))
}

/// One model attempt, journaled: the driver kit's ([`kit::model_attempt`]: `StreamOpened`,
/// `Delta`s, then `Done` with the `tools`' verdicts on its calls, or an error). `bound` is the
/// machine's shortest deadline (the worker runs no timers while an attempt streams): a wait
/// for the next chunk longer than it ends the attempt, and that timer is reported to fire.
async fn call_model(
    model: Arc<dyn Model>,
    request: ModelRequest,
    bound: Option<(u64, u64)>,
    tools: ToolRegistry,
) -> Attempt {
    let mut events = Vec::new();
    let end = kit::model_attempt(model, request, &tools, bound.map(|(_, ms)| ms), |e| {
        events.push(e)
    })
    .await;
    let deadline = match end {
        Some(terminal) => {
            events.push(terminal);
            None
        }
        None => bound.map(|(id, _)| id),
    };
    Attempt { events, deadline }
}
