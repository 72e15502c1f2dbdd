//! The effect driver: performs a run's effects through the ports and feeds the results back
//! as events, one at a time, into the pure machines.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::agent_event::AgentEvent;
use crate::effect::Effect;
use crate::error::{ErrorKind, ModelError};
use crate::event::{AttemptId, Event};
use crate::message::{MessageDelta, ToolCall, ToolStatus};
use crate::model::{Model, ModelRequest};
use crate::runtime::ports::EventEnvelope;
use crate::runtime::{Agent, Timeouts};
use crate::tools::ToolContext;

/// Background work of one run, keyed so effects can cancel it.
#[derive(Default)]
pub(crate) struct Tasks {
    model: HashMap<AttemptId, JoinHandle<()>>,
    timers: HashMap<u64, JoinHandle<()>>,
    tools: HashMap<String, (JoinHandle<()>, bool)>,
    other: Vec<JoinHandle<()>>,
}

impl Tasks {
    /// Cancels everything still running (the run is over).
    pub(crate) fn shutdown(&mut self) {
        for (_, h) in self.model.drain() {
            h.abort();
        }
        for (_, h) in self.timers.drain() {
            h.abort();
        }
        for (_, (h, killable)) in self.tools.drain() {
            if killable {
                h.abort();
            }
        }
        for h in self.other.drain(..) {
            h.abort();
        }
    }
}

/// Per-run driver state.
pub(crate) struct Driver<'a> {
    pub(crate) agent: &'a Agent,
    pub(crate) session: String,
    pub(crate) run_id: String,
    pub(crate) tx: mpsc::UnboundedSender<Event>,
    pub(crate) tasks: Tasks,
}

impl Driver<'_> {
    fn emit(&mut self, event: AgentEvent) {
        let env = EventEnvelope {
            index: self.agent.next_event_index(),
            ts_ms: self.agent.clock.now_ms(),
            run_id: self.run_id.clone(),
            event,
        };
        self.agent.sink.emit(&env);
    }

    /// Performs a step's effects in order. A failed store write stops the remaining effects
    /// (nothing after it is persisted or started) and returns the `StoreWriteFailed` event.
    pub(crate) async fn perform(&mut self, effects: Vec<Effect>) -> Option<Event> {
        for effect in effects {
            match effect {
                Effect::Persist { entry } => {
                    if let Err(e) = self.agent.store.append(&self.session, &entry).await {
                        return Some(Event::StoreWriteFailed {
                            error: e.to_string(),
                        });
                    }
                }
                Effect::Emit { event } => self.emit(event),
                Effect::CallModel { request } => self.call_model(request),
                Effect::CancelModel { attempt } => {
                    if let Some(h) = self.tasks.model.remove(&attempt) {
                        h.abort();
                    }
                }
                Effect::StartTimer { timer_id, delay_ms } => {
                    let clock = self.agent.clock.clone();
                    let tx = self.tx.clone();
                    let h = tokio::spawn(async move {
                        clock.sleep(delay_ms).await;
                        let _ = tx.send(Event::TimerElapsed { timer_id });
                    });
                    self.tasks.timers.insert(timer_id, h);
                }
                Effect::CancelTimer { timer_id } => {
                    if let Some(h) = self.tasks.timers.remove(&timer_id) {
                        h.abort();
                    }
                }
                Effect::RunTool { call } => self.run_tool(call),
                Effect::KillTool { tool_call_id } => {
                    if let Some((h, killable)) = self.tasks.tools.remove(&tool_call_id) {
                        if killable {
                            h.abort();
                        }
                    }
                }
                Effect::RequestApproval { call } => {
                    let approver = self.agent.approver.clone();
                    let tx = self.tx.clone();
                    let h = tokio::spawn(async move {
                        if let Some(decision) = approver.decide(&call).await {
                            let _ = tx.send(Event::Approval {
                                tool_call_id: call.id.clone(),
                                decision,
                            });
                        }
                    });
                    self.tasks.other.push(h);
                }
                Effect::Compact {
                    messages,
                    budget_tokens,
                    max_messages,
                } => {
                    let compactor = self.agent.compactor.clone();
                    let tx = self.tx.clone();
                    let h = tokio::spawn(async move {
                        let ev = match compactor
                            .compact(&messages, budget_tokens, max_messages)
                            .await
                        {
                            Ok((messages, removed)) => Event::CompactionDone { messages, removed },
                            Err(error) => Event::CompactionFailed { error },
                        };
                        let _ = tx.send(ev);
                    });
                    self.tasks.other.push(h);
                }
            }
        }
        None
    }

    fn call_model(&mut self, request: ModelRequest) {
        let attempt = AttemptId {
            run_id: request.run_id.clone(),
            model_call_index: request.model_call_index,
            attempt: request.attempt,
        };
        let model = self.agent.model.clone();
        let tx = self.tx.clone();
        let timeouts = self.agent.timeouts;
        let a = attempt.clone();
        let h = tokio::spawn(async move { stream_attempt(model, request, a, tx, timeouts).await });
        self.tasks.model.insert(attempt, h);
    }

    fn run_tool(&mut self, call: ToolCall) {
        let tx = self.tx.clone();
        let id = call.id.clone();
        let Some(tool) = self.agent.tools.get(&call.name).cloned() else {
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
        };
        let timeout_ms = self.agent.timeouts.tool_ms;
        let h = tokio::spawn(async move {
            let args = call.arguments.clone();
            let inner = tokio::spawn(async move { tool.call(ctx, args).await });
            let abort = inner.abort_handle();
            let (status, content) =
                match tokio::time::timeout(Duration::from_millis(timeout_ms), inner).await {
                    Ok(Ok(Ok(out))) => (ToolStatus::Completed, out),
                    Ok(Ok(Err(e))) => (ToolStatus::Error, e.to_string()),
                    Ok(Err(join)) if join.is_panic() => (
                        ToolStatus::Error,
                        format!("tool panicked: {}", panic_message(join)),
                    ),
                    Ok(Err(_)) => (ToolStatus::Error, "tool was cancelled".to_string()),
                    Err(_) => {
                        abort.abort();
                        (
                            ToolStatus::Error,
                            format!("tool timed out after {timeout_ms} ms"),
                        )
                    }
                };
            let _ = tx.send(Event::ToolFinished {
                tool_call_id: call.id,
                status,
                content,
            });
        });
        self.tasks.tools.insert(id, (h, killable));
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

fn failure(attempt: AttemptId, error: ModelError) -> Event {
    if error.context_overflow() {
        Event::ContextOverflow { attempt, error }
    } else {
        Event::TransportError { attempt, error }
    }
}

/// Streams one attempt: `StreamOpened`, `Delta`s with seq, then `Done` or an error. The first
/// chunk and every later delta are bounded by the timeouts; expiry becomes `StreamStalled`
/// (R-IN-7). A stream that ends without `Finish` is an `incomplete_stream` error.
async fn stream_attempt(
    model: Arc<dyn Model>,
    request: ModelRequest,
    attempt: AttemptId,
    tx: mpsc::UnboundedSender<Event>,
    timeouts: Timeouts,
) {
    let first = Duration::from_millis(timeouts.first_chunk_ms);
    let stall = Duration::from_millis(timeouts.stall_ms);
    let mut stream = match tokio::time::timeout(first, model.stream(request)).await {
        Err(_) => {
            let _ = tx.send(Event::StreamStalled {
                attempt,
                after_ms: timeouts.first_chunk_ms,
            });
            return;
        }
        Ok(Err(e)) => {
            let _ = tx.send(failure(attempt, e));
            return;
        }
        Ok(Ok(s)) => s,
    };
    let _ = tx.send(Event::StreamOpened {
        attempt: attempt.clone(),
    });
    let mut seq = 0u64;
    loop {
        let wait = if seq == 0 { first } else { stall };
        match tokio::time::timeout(wait, stream.next()).await {
            Err(_) => {
                let _ = tx.send(Event::StreamStalled {
                    attempt,
                    after_ms: wait.as_millis() as u64,
                });
                return;
            }
            Ok(None) => {
                let _ = tx.send(Event::TransportError {
                    attempt,
                    error: ModelError::new(
                        ErrorKind::IncompleteStream,
                        "stream ended without a finish",
                    ),
                });
                return;
            }
            Ok(Some(Err(e))) => {
                let _ = tx.send(failure(attempt, e));
                return;
            }
            Ok(Some(Ok(MessageDelta::Finish))) => {
                let _ = tx.send(Event::Done { attempt });
                return;
            }
            Ok(Some(Ok(MessageDelta::Error { error }))) => {
                let _ = tx.send(failure(attempt, error));
                return;
            }
            Ok(Some(Ok(delta))) => {
                let _ = tx.send(Event::Delta {
                    attempt: attempt.clone(),
                    seq,
                    delta,
                });
                seq += 1;
            }
        }
    }
}
