//! The effect driver: performs a run's effects through the ports and feeds the results back
//! as events, one at a time, into the pure machines.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::{abortable, AbortHandle, Abortable, BoxFuture};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use tracing::Instrument;

use crate::agent_event::AgentEvent;
use crate::effect::Effect;
use crate::event::{AttemptId, Event};
use crate::message::{ToolCall, ToolStatus};
use crate::model::{Model, ModelRequest};
use crate::runtime::tool_order::CompletionOrder;
use crate::runtime::worker::AbortOnDrop;
use crate::runtime::{title, with_custom_events, Agent};
use crate::tools::{ArgumentSchemas, ToolContext};
use crate::EventEnvelope;
use agentloop_core::model::SharedMessages;

/// Background work of one run, keyed so effects can cancel it. Dropping it cancels what is
/// still running (see [`Tasks::shutdown`]): a run whose future is dropped mid-way (a caller's
/// `select!` or timeout, a cancelled task) leaves no model stream, timer, killable tool or
/// compaction running on in the background.
#[derive(Default)]
pub(crate) struct Tasks {
    /// The machine's timers that have not fired or been cancelled, by id.
    timers: HashMap<u64, AbortHandle>,
    /// Their sleeps on the Clock port, polled by the drive loop itself (not spawned: a timer
    /// costs no task, and on a multi-thread runtime no wake-up of another worker); each
    /// yields its id when it fires.
    sleeping: FuturesUnordered<Abortable<BoxFuture<'static, u64>>>,
    tools: HashMap<String, (JoinHandle<()>, bool)>,
    /// Approval requests waiting for their decision, by call id.
    approvals: HashMap<String, JoinHandle<()>>,
    other: Vec<JoinHandle<()>>,
}

impl Tasks {
    /// Cancels everything still running (the run is over).
    pub(crate) fn shutdown(&mut self) {
        for (_, h) in self.timers.drain() {
            h.abort();
        }
        self.sleeping.clear();
        for (_, (h, killable)) in self.tools.drain() {
            if killable {
                h.abort();
            }
        }
        for (_, h) in self.approvals.drain() {
            h.abort();
        }
        for h in self.other.drain(..) {
            h.abort();
        }
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Per-run driver state.
pub(crate) struct Driver<'a> {
    pub(crate) agent: &'a Agent,
    pub(crate) session: String,
    pub(crate) run_id: String,
    pub(crate) tx: mpsc::UnboundedSender<Event>,
    pub(crate) tasks: Tasks,
    /// When each machine (by `MachineKind as usize`) entered its current state (tracing).
    pub(crate) state_since: [Option<u64>; 2],
    /// Completions waiting for earlier calls (with `ToolOrder::CallOrder`).
    pub(crate) order: Option<CompletionOrder>,
    /// Inputs produced while performing effects, fed next: completions a kill released, a
    /// hook's request rewrite, the hooks' verdicts on gated calls.
    pub(crate) answers: Vec<Event>,
    /// The model attempts in flight, polled by the drive loop itself (not spawned), so a
    /// delta reaches the machines on the driver's own task with no cross-thread handoff.
    /// Dropping an attempt cancels it.
    pub(crate) attempts: Vec<(AttemptId, ModelAttempt)>,
    /// Where the attempts put their events; read with `try_recv` only (no waker registered,
    /// so a send wakes nobody: the attempt runs inside the driver's poll).
    pub(crate) model_tx: mpsc::UnboundedSender<Event>,
    pub(crate) model_rx: mpsc::UnboundedReceiver<Event>,
    /// The run's metrics, folded from every event the driver emits (R-OBS).
    pub(crate) metrics: crate::runtime::metrics::RunMetrics,
    /// The estimated tokens of the context a compaction in flight started from.
    pub(crate) compact_before: Option<u64>,
}

/// One model attempt's future (streams its events into the driver's model queue).
pub(crate) type ModelAttempt = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

impl Driver<'_> {
    /// The next timer that fired or event of a model attempt: polls the run's timers and the
    /// attempts in flight on the caller's task and returns what they produced, in order.
    pub(crate) fn poll_inputs(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Event> {
        use std::task::Poll;
        // A timer first: a deadline that passed is not queued behind a stream's deltas.
        while let Poll::Ready(Some(fired)) = self.tasks.sleeping.poll_next_unpin(cx) {
            if let Ok(timer_id) = fired {
                return Poll::Ready(Event::TimerElapsed { timer_id });
            }
        }
        loop {
            if let Ok(e) = self.model_rx.try_recv() {
                return Poll::Ready(e);
            }
            if self.attempts.is_empty() {
                return Poll::Pending;
            }
            let mut finished = false;
            self.attempts
                .retain_mut(|(_, f)| match f.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        finished = true;
                        false
                    }
                    Poll::Pending => true,
                });
            if let Ok(e) = self.model_rx.try_recv() {
                return Poll::Ready(e);
            }
            if !finished {
                return Poll::Pending;
            }
        }
    }

    fn emit(&mut self, event: AgentEvent) {
        if let AgentEvent::StateChanged {
            machine,
            from,
            to,
            event: cause,
        } = &event
        {
            // R-EVT-2: transitions as span events, with the time spent in the state left.
            let now = self.agent.clock.now_ms();
            let slot = self.state_since.get_mut(*machine as usize);
            let since = slot.and_then(|entered| entered.replace(now));
            tracing::info!(
                machine = ?machine,
                from = %from,
                to = %to,
                event = %cause,
                in_state_ms = since.map(|t| now.saturating_sub(t)),
                "state_changed"
            );
        }
        if crate::runtime::ports::is_null_sink(&self.agent.sink) {
            // Nobody takes the envelope (no sink was set): none is built, so no copy of the
            // run id and no clock reading per event; the metrics read the clock only for the
            // events they time.
            let clock = &self.agent.clock;
            self.metrics
                .observe_at(&event, !self.run_id.is_empty(), || clock.now_ms());
            return;
        }
        let env = EventEnvelope {
            index: self.agent.next_event_index(),
            ts_ms: self.agent.clock.now_ms(),
            run_id: self.run_id.clone(),
            event,
        };
        self.metrics.observe(&env);
        self.agent.sink.emit(&env);
    }

    /// Performs a step's effects in order. A failed store write stops the remaining effects
    /// (nothing after it is persisted or started) and returns the `StoreWriteFailed` event;
    /// a stored run-end entry returns `RunEndCommitted`.
    pub(crate) async fn perform(&mut self, effects: Vec<Effect>) -> Option<Event> {
        let mut answer = None;
        // A `request_start` carries the context of the request it announces (shared).
        let requests: Vec<(u32, u32, SharedMessages)> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::CallModel { request } => Some((
                    request.model_call_index,
                    request.attempt,
                    request.messages.clone(),
                )),
                _ => None,
            })
            .collect();
        for effect in effects {
            let commit = matches!(effect, Effect::CommitRunEnd { .. });
            match effect {
                Effect::Persist { entry } | Effect::CommitRunEnd { entry } => {
                    if let Err(e) = self.agent.store.append(&self.session, &entry).await {
                        return Some(Event::StoreWriteFailed {
                            error: e.to_string(),
                        });
                    }
                    if commit {
                        answer = Some(Event::RunEndCommitted);
                    }
                }
                Effect::Emit {
                    event:
                        AgentEvent::RequestStart {
                            model_call_index,
                            attempt,
                            model,
                            messages: None,
                        },
                } => {
                    let messages = requests
                        .iter()
                        .find(|(i, a, _)| (*i, *a) == (model_call_index, attempt))
                        .map(|(_, _, m)| m.clone());
                    self.emit(AgentEvent::RequestStart {
                        model_call_index,
                        attempt,
                        model,
                        messages,
                    })
                }
                Effect::Emit { event } => self.emit(event),
                Effect::CallModel { request } => self.call_model(request),
                Effect::CancelModel { attempt } => {
                    self.attempts.retain(|(id, _)| *id != attempt);
                }
                Effect::StartTimer { timer_id, delay_ms } => {
                    let clock = self.agent.clock.clone();
                    let (sleep, h) = abortable(
                        async move {
                            clock.sleep(delay_ms).await;
                            timer_id
                        }
                        .boxed(),
                    );
                    self.tasks.sleeping.push(sleep);
                    if let Some(old) = self.tasks.timers.insert(timer_id, h) {
                        old.abort();
                    }
                }
                Effect::CancelTimer { timer_id } => {
                    if let Some(h) = self.tasks.timers.remove(&timer_id) {
                        h.abort();
                    }
                }
                Effect::RunTool { call } => {
                    if let Some(order) = self.order.as_mut() {
                        order.started(&call.id);
                    }
                    self.run_tool(call)
                }
                Effect::KillTool { tool_call_id } => {
                    if let Some(order) = self.order.as_mut() {
                        let released = order.killed(&tool_call_id);
                        self.answers.extend(released);
                    }
                    if let Some((h, killable)) = self.tasks.tools.remove(&tool_call_id) {
                        if killable {
                            h.abort();
                        }
                    }
                }
                Effect::GenerateTitle { model, text } => {
                    let request = title::request(&self.run_id, &model, &text);
                    let model = self.agent.model_for(&model);
                    self.answer_later(async move {
                        let title = title::ask(model, request).await;
                        Event::TitleReady { title }
                    });
                }
                Effect::GateTool { call } => {
                    // The hooks' verdict is an input of the machine (rows `tools_gate_*`).
                    // A verdict ready at once (every synchronous hook) is fed in order, as
                    // before; an async hook's arrives when it is ready, the loop going on.
                    let hooks = self.agent.hooks.clone();
                    let emitter = self.agent.emitter(&self.run_id);
                    let mut gate = Box::pin(with_custom_events(emitter, async move {
                        let verdict = hooks.before_tool_async(&call).await;
                        Event::ToolGated {
                            tool_call_id: call.id,
                            verdict,
                        }
                    }));
                    match (&mut gate).now_or_never() {
                        Some(answer) => self.answers.push(answer),
                        None => self.answer_later(gate),
                    }
                }
                Effect::AskUser {
                    tool_call_id,
                    question,
                    options,
                } => {
                    let asker = self.agent.asker.clone();
                    let question = crate::runtime::Question {
                        reference: tool_call_id,
                        question,
                        options,
                    };
                    self.answer_later(async move {
                        let answer = asker.ask(&question).await;
                        Event::UserAnswered {
                            tool_call_id: question.reference,
                            answer,
                        }
                    });
                }
                Effect::RequestApproval { call } => {
                    let approver = self.agent.approver.clone();
                    let tx = self.tx.clone();
                    let id = call.id.clone();
                    let h = tokio::spawn(async move {
                        if let Some(decision) = approver.decide(&call).await {
                            let _ = tx.send(Event::Approval {
                                tool_call_id: call.id.clone(),
                                decision,
                            });
                        }
                    });
                    if let Some(old) = self.tasks.approvals.insert(id, h) {
                        // Asked again (not aborted: its end would forget the new request).
                        self.tasks.other.push(old);
                    }
                }
                Effect::WithdrawApproval { tool_call_id } => {
                    // The machine's approval timer fired first: stop waiting, and let the
                    // approver forget the request (a late answer is not pending any more).
                    if let Some(h) = self.tasks.approvals.remove(&tool_call_id) {
                        h.abort();
                    }
                    self.agent.approver.withdraw(&tool_call_id);
                }
                Effect::Compact {
                    messages,
                    budget_tokens,
                    max_messages,
                } => {
                    self.compact_before = Some(crate::context::estimate_tokens(&messages));
                    let hooks = self.agent.hooks.clone();
                    let compactor = self.agent.compactor.clone();
                    let emitter = self.agent.emitter(&self.run_id);
                    self.answer_later(with_custom_events(emitter, async move {
                        // A veto is the machine's `compaction_vetoed` input: in the trace,
                        // replayed without the hook.
                        if let Err(reason) = hooks.before_compact_async(&messages).await {
                            return Event::CompactionVetoed { reason };
                        }
                        match compactor
                            .compact(&messages, budget_tokens, max_messages)
                            .await
                        {
                            Ok((messages, removed)) => Event::CompactionDone { messages, removed },
                            Err(error) => Event::CompactionFailed { error },
                        }
                    }));
                }
            }
        }
        answer
    }

    /// Runs `work` in a task of the run and feeds the machine the input it ends with.
    fn answer_later(&mut self, work: impl std::future::Future<Output = Event> + Send + 'static) {
        let tx = self.tx.clone();
        let h = tokio::spawn(async move {
            let _ = tx.send(work.await);
        });
        self.tasks.other.push(h);
    }

    /// An event from the run's background tasks: a tool completion goes through the
    /// completion-order buffer; appends to `pending` what may be fed to the machine now.
    pub(crate) fn arrived(
        &mut self,
        event: Event,
        pending: &mut std::collections::VecDeque<Event>,
    ) {
        if let Event::CompactionDone { messages, .. } = &event {
            if let Some(before) = self.compact_before.take() {
                let after = crate::context::estimate_tokens(messages);
                self.metrics.compacted_tokens(before.saturating_sub(after));
            }
        }
        if let Event::TimerElapsed { timer_id } = &event {
            // A timer the machine cancelled after it fired is not an input.
            if self.tasks.timers.remove(timer_id).is_none() {
                return;
            }
        }
        match self.order.as_mut() {
            Some(order) => order.arrived(event, pending),
            None => pending.push_back(event),
        }
    }

    fn call_model(&mut self, request: ModelRequest) {
        let attempt = AttemptId {
            run_id: request.run_id.clone(),
            model_call_index: request.model_call_index,
            attempt: request.attempt,
        };
        let mut request = request;
        let machine_built = request.clone();
        self.agent.hooks.before_model_call(&mut request);
        if request != machine_built {
            // What the hooks sent goes back into the machine as an input, so the trace
            // records the request actually sent (replay needs no hooks).
            self.answers.push(Event::RequestRewritten {
                attempt: attempt.clone(),
                request: Box::new(request.clone()),
            });
        }
        let model = self.agent.model_for(&request.model);
        // Compiled when the tools were inserted; taken now so tools attached mid-run are
        // checked from the next model call on.
        let schemas = self.agent.tools.schemas();
        let hooks = self.agent.hooks.clone();
        let tx = self.model_tx.clone();
        let a = attempt.clone();
        let span = step_span(&self.session, &model.name(), &request);
        let f = async move {
            let req = request.clone();
            let outcome = stream_attempt(model, request, a, schemas, tx).await;
            hooks.after_model_call(&req, outcome.as_ref().map_err(String::as_str).copied());
        }
        .instrument(span);
        self.attempts.push((attempt, Box::pin(f)));
    }

    /// Runs a tool call in its own task (the `before_tool` hooks were asked before, through
    /// `GateTool`): the call under the per-tool timeout with panic capture, `after_tool` hook, large-result offload
    /// (R-TOOL-5), `tool_metrics`; then `ToolFinished` back into the loop.
    fn run_tool(&mut self, call: ToolCall) {
        let tx = self.tx.clone();
        let id = call.id.clone();
        let Some(tool) = self.agent.tools.get(&call.name) else {
            let _ = tx.send(Event::ToolFinished {
                tool_call_id: id,
                status: ToolStatus::Error,
                content: format!("unknown tool: {}", call.name),
            });
            return;
        };
        let killable = tool.killable();
        let ctx = ToolContext {
            call_id: call.id.clone(),
            root: self.agent.root.clone(),
            idempotency_key: None,
            allow_instruction_writes: self.agent.allow_instruction_writes,
        };
        let hooks = self.agent.hooks.clone();
        let offload = self.agent.offload.clone();
        let emitter = self.agent.emitter(&self.run_id);
        let session = self.session.clone();
        // OpenTelemetry GenAI semantic conventions (`execute_tool`), beside our own fields.
        let span = tracing::info_span!(
            "tool",
            otel.name = %format_args!("execute_tool {}", call.name),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %call.name,
            gen_ai.tool.call.id = %call.id,
            gen_ai.tool.type = "function",
            error.type = tracing::field::Empty,
            name = %call.name,
            tool_call_id = %call.id
        );
        let scope = emitter.clone();
        let h = tokio::spawn(with_custom_events(
            scope,
            async move {
                let started = emitter.clock.now_ms();
                let args = call.arguments.clone();
                let custom = emitter.clone();
                let inner = AbortOnDrop(tokio::spawn(with_custom_events(custom, async move {
                    tool.call(ctx, args).await
                })));
                // The call's deadline is the machine's timer (`StartTimer` with `RunTool`):
                // when it fires first, the machine kills the call (`KillTool`).
                let (status, mut content) = match inner.await {
                    Ok(Ok(out)) => (ToolStatus::Completed, out),
                    Ok(Err(e)) => (ToolStatus::Error, e.to_string()),
                    Err(join) if join.is_panic() => (
                        ToolStatus::Error,
                        format!("tool panicked: {}", panic_message(join)),
                    ),
                    Err(_) => (ToolStatus::Error, "tool was cancelled".to_string()),
                };
                if status == ToolStatus::Error {
                    tracing::Span::current().record("error.type", "tool_error");
                }
                hooks.after_tool(&call.id, &call.name, status, &mut content);
                if let Some(offload) = offload {
                    if let Some((replaced, path, bytes)) =
                        offload.apply(&session, &call.id, &content).await
                    {
                        emitter.emit(AgentEvent::LargeResultOffloaded {
                            tool_call_id: call.id.clone(),
                            name: call.name.clone(),
                            path,
                            bytes,
                        });
                        content = replaced;
                    }
                }
                let ended = emitter.clock.now_ms();
                emitter.emit(AgentEvent::ToolMetrics {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                    started_at_ms: started,
                    ended_at_ms: ended,
                    duration_ms: ended.saturating_sub(started),
                });
                let _ = tx.send(Event::ToolFinished {
                    tool_call_id: call.id,
                    status,
                    content,
                });
            }
            .instrument(span),
        ));
        self.tasks.tools.insert(id, (h, killable));
    }
}

/// Emits events from a run's background tasks (same sink, clock and index as the driver).
#[derive(Clone)]
pub(crate) struct Emitter {
    pub(crate) sink: Arc<dyn crate::runtime::EventSink>,
    pub(crate) clock: Arc<dyn crate::runtime::Clock>,
    pub(crate) index: Arc<std::sync::atomic::AtomicU64>,
    pub(crate) run_id: String,
}

impl Emitter {
    pub(crate) fn emit(&self, event: AgentEvent) {
        self.sink.emit(&EventEnvelope {
            index: self
                .index
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            ts_ms: self.clock.now_ms(),
            run_id: self.run_id.clone(),
            event,
        });
    }
}

fn panic_message(join: tokio::task::JoinError) -> String {
    match join.try_into_panic() {
        Ok(p) => p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic".into()),
        Err(_) => "unknown".into(),
    }
}

/// The span of one model attempt: our fields and the OpenTelemetry GenAI semantic
/// conventions (`chat` operation; usage, finish reasons and `error.type` recorded when the
/// attempt ends, by the driver kit's `attempt_events`).
fn step_span(session: &str, model_name: &str, request: &ModelRequest) -> tracing::Span {
    // `Model::name` is `provider:model` for the HTTP clients (`openai:gpt-4o`).
    let provider = model_name.split_once(':').map_or(model_name, |(p, _)| p);
    let span = tracing::info_span!(
        "step",
        otel.name = %format_args!("chat {}", request.model),
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = %provider,
        gen_ai.request.model = %request.model,
        gen_ai.conversation.id = %session,
        gen_ai.request.max_tokens = tracing::field::Empty,
        gen_ai.request.temperature = tracing::field::Empty,
        gen_ai.response.finish_reasons = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        error.type = tracing::field::Empty,
        model_call_index = request.model_call_index,
        attempt = request.attempt,
        model = %request.model
    );
    if let Some(n) = request.params.max_tokens {
        span.record("gen_ai.request.max_tokens", n);
    }
    if let Some(t) = request.params.temperature {
        span.record("gen_ai.request.temperature", t);
    }
    span
}

/// Streams one attempt: `StreamOpened`, `Delta`s with seq, then `Done` or an error. Its
/// deadlines (first chunk, stall, whole request) are the machine's timers (R-IN-7): when one
/// passes, the machine cancels the attempt (`CancelModel`) and this future is dropped. A
/// stream that ends without `Finish` is an `incomplete_stream` error. `Done` carries the
/// verdicts of `schemas` on the attempt's tool calls (R-TOOL-1).
/// (The kit's [`attempt_events`](super::kit::attempt_events), into the run loop's channel.)
async fn stream_attempt(
    model: Arc<dyn Model>,
    request: ModelRequest,
    attempt: AttemptId,
    schemas: ArgumentSchemas,
    tx: mpsc::UnboundedSender<Event>,
) -> Result<(), String> {
    let sent = super::kit::attempt_events(model, request, attempt, &schemas, None, |e| {
        let _ = tx.send(e);
    })
    .await;
    // Without an idle bound the attempt always ends with its terminal event.
    let Some(sent) = sent else {
        return Err("the attempt stopped without an end".into());
    };
    let outcome = match &sent {
        Event::Done { .. } => Ok(()),
        Event::TransportError { error, .. } | Event::ContextOverflow { error, .. } => {
            Err(error.message.clone())
        }
        other => Err(other.name().to_string()),
    };
    let _ = tx.send(sent);
    outcome
}
