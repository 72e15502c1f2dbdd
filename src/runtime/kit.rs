//! The driver kit (feature `driver-kit`): what every driver of the pure machines needs besides
//! its own IO, public so that a driver outside this crate (the Restate worker, a program's own
//! loop) calls these instead of copying them. The tokio runtime ([`Agent`](super::Agent)) is
//! built on them. (Behind a feature: a program that only runs agents never meets these types.)
//!
//! - [`configure_tools`] and [`apply_timeouts`]: a [`RunConfig`] prepared from a tool
//!   registry (the tools offered, the ones that may not be killed, the pure ones) and from the
//!   runtime's deadlines (per tool, per model attempt, the whole run).
//! - [`OutputCheck`]: the check of a typed final answer, annotating the `done` input.
//! - [`model_attempt`]: one model attempt as the machine's inputs (`stream_opened`, the
//!   `delta`s with their seq, then `done` with the arguments' verdicts, or the error), with
//!   an optional idle bound for a driver without the machine's timers running.

// Public only with the feature `driver-kit` (the module is private without it).
#![cfg_attr(not(feature = "driver-kit"), allow(unreachable_pub))]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use agentloop_core::timeouts::Timeouts;

use crate::error::{ErrorKind, ModelError};
use crate::event::{AttemptId, Event};
use crate::message::{FinishReason, MessageDelta, Usage};
use crate::model::{Model, ModelRequest};
use crate::react::RunConfig;
use crate::tools::{ArgumentSchemas, ToolRegistry};

pub use super::output::OutputCheck;

/// Sets what `config` says about the tools from `tools`: the specs offered, the tools that
/// may not be killed (`immune`) and the pure ones (answered from the session's cache).
pub fn configure_tools(config: &mut RunConfig, tools: &ToolRegistry) {
    config.tools = tools.specs();
    let named = |keep: fn(&dyn crate::tools::Tool) -> bool| -> Vec<String> {
        config
            .tools
            .iter()
            .filter(|s| tools.get(&s.name).is_some_and(|t| keep(t.as_ref())))
            .map(|s| s.name.clone())
            .collect()
    };
    let immune = named(|t| !t.killable()).into_iter().collect();
    let pure = named(|t| t.pure());
    config.step.immune = immune;
    config.step.pure_tools = pure;
}

/// The per-tool and per-attempt deadlines and the run's deadline are timers of the machine
/// (R-IN-7): `config` takes `timeouts`' unless it names its own.
pub fn apply_timeouts(config: &mut RunConfig, timeouts: &Timeouts) {
    config.step.tool_timeout_ms.get_or_insert(timeouts.tool_ms);
    if config.run_deadline_ms.is_none() {
        config.run_deadline_ms = timeouts.run_deadline_ms;
    }
    config
        .step
        .stream
        .get_or_insert(agentloop_core::process::StreamDeadlines {
            first_chunk_ms: timeouts.first_chunk_ms,
            stall_ms: timeouts.stall_ms,
            request_ms: timeouts.request_ms,
        });
}

/// Streams one model attempt of `request` and hands each input it makes to `on_event`
/// (`stream_opened`, then the `delta`s with their seq), returning the terminal one — `done`
/// with the verdicts of `tools`' argument schemas on the attempt's tool calls (R-TOOL-1; the
/// typed answer is [`OutputCheck`]'s), or the error (`context_overflow`, `transport_error`; a
/// stream that ends without `finish` is `incomplete_stream`). With `idle_ms`, opening the
/// stream and each next item must come within it: `None` when one did not (the driver feeds
/// the machine's deadline timer then).
#[cfg_attr(not(feature = "driver-kit"), allow(dead_code))]
pub async fn model_attempt(
    model: Arc<dyn Model>,
    request: ModelRequest,
    tools: &ToolRegistry,
    idle_ms: Option<u64>,
    on_event: impl FnMut(Event),
) -> Option<Event> {
    let attempt = AttemptId {
        run_id: request.run_id.clone(),
        model_call_index: request.model_call_index,
        attempt: request.attempt,
    };
    attempt_events(model, request, attempt, &tools.schemas(), idle_ms, on_event).await
}

/// [`model_attempt`] for `attempt` (the ids the machine gave the request, which a hook may
/// have rewritten since) with the compiled `schemas`.
pub(crate) async fn attempt_events(
    model: Arc<dyn Model>,
    request: ModelRequest,
    attempt: AttemptId,
    schemas: &ArgumentSchemas,
    idle_ms: Option<u64>,
    mut on_event: impl FnMut(Event),
) -> Option<Event> {
    async fn within<T>(idle_ms: Option<u64>, f: impl std::future::Future<Output = T>) -> Option<T> {
        match idle_ms {
            Some(ms) => tokio::time::timeout(Duration::from_millis(ms), f)
                .await
                .ok(),
            None => Some(f.await),
        }
    }
    let mut stream = match within(idle_ms, model.stream(request)).await? {
        Err(e) => return Some(failure(attempt, e)),
        Ok(s) => s,
    };
    on_event(Event::StreamOpened {
        attempt: attempt.clone(),
    });
    let mut seq = 0u64;
    // The attempt's completed tool calls, checked when the stream ends.
    let mut calls = Vec::new();
    loop {
        match within(idle_ms, stream.next()).await? {
            None => {
                return Some(Event::TransportError {
                    attempt,
                    error: ModelError::new(
                        ErrorKind::IncompleteStream,
                        "stream ended without a finish",
                    ),
                });
            }
            Some(Err(e)) => return Some(failure(attempt, e)),
            Some(Ok(MessageDelta::Finish)) => {
                return Some(Event::Done {
                    attempt,
                    rejected_arguments: schemas.check_deltas(&calls),
                    // Checked by the run loop, which sees the message as the machine
                    // assembled it ([`OutputCheck`]).
                    output_rejected: None,
                });
            }
            Some(Ok(MessageDelta::Error { error })) => return Some(failure(attempt, error)),
            Some(Ok(delta)) => {
                if let MessageDelta::FinishStep {
                    finish_reason,
                    usage,
                    ..
                } = &delta
                {
                    record_finish(*finish_reason, usage.as_ref());
                }
                if matches!(delta, MessageDelta::ToolCall { .. }) {
                    calls.push(delta.clone());
                }
                on_event(Event::Delta {
                    attempt: attempt.clone(),
                    seq,
                    delta,
                });
                seq += 1;
            }
        }
    }
}

/// The machine's input for a failed attempt (a context overflow is its own), its error kind
/// recorded on the current (step) span.
fn failure(attempt: AttemptId, error: ModelError) -> Event {
    tracing::Span::current().record("error.type", error.kind.as_str());
    if error.context_overflow() {
        Event::ContextOverflow { attempt, error }
    } else {
        Event::TransportError { attempt, error }
    }
}

/// Records a step's finish on the current (step) span.
fn record_finish(finish_reason: Option<FinishReason>, usage: Option<&Usage>) {
    let span = tracing::Span::current();
    if let Some(reason) = finish_reason {
        let name = serde_json::to_value(reason)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        span.record(
            "gen_ai.response.finish_reasons",
            tracing::field::display(format_args!("[\"{name}\"]")),
        );
    }
    if let Some(u) = usage {
        span.record("gen_ai.usage.input_tokens", u.input_tokens);
        span.record("gen_ai.usage.output_tokens", u.output_tokens);
    }
}
