//! A program's own events: [`emit_custom`] from a tool or a hook while a run drives them.

use std::future::Future;

use crate::agent_event::AgentEvent;

use super::driver::Emitter;

tokio::task_local! {
    /// The event emitter of the run whose tool or hook is running.
    static RUN_EMITTER: Emitter;
}

/// Emits an event of the program's own kind, `custom{name, payload}`, from inside a run: a
/// [`Tool`](crate::tools::Tool)'s `call`, or a [`Hooks`](crate::hooks::Hooks) method the run
/// calls (`before_model_call`, `after_model_call`, `before_tool`, `after_tool`,
/// `before_compact`). It goes to the agent's sink (and a session's subscribers) with the
/// run's id, the next index and the clock's time, like the run's own events; it is not
/// recorded in traces (no machine decided it). Returns `false`, emitting nothing, when called
/// anywhere else (outside a run, or in a task the tool spawned itself).
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use agentloop::provider::scripted::ScriptedModel;
/// use agentloop::runtime::{emit_custom, Agent};
/// use agentloop::{AgentEvent, EventEnvelope};
/// use agentloop::hooks::Hooks;
/// use agentloop::model::ModelRequest;
///
/// /// Reports the size of each request as a custom event.
/// struct RequestSize;
///
/// impl Hooks for RequestSize {
///     fn before_model_call(&self, request: &mut ModelRequest) {
///         emit_custom("request_size", serde_json::json!({"messages": request.messages.len()}));
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), agentloop::runtime::AgentError> {
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let sink = seen.clone();
/// let agent = Agent::builder()
///     .model(ScriptedModel::demo())
///     .hooks(Arc::new(RequestSize))
///     .sink(Arc::new(move |e: &EventEnvelope| {
///         if let AgentEvent::Custom { name, payload } = &e.event {
///             sink.lock().unwrap().push((name.clone(), payload.clone()));
///         }
///     }))
///     .build();
/// agent.run("s", "hi").await?;
/// assert_eq!(seen.lock().unwrap()[0].0, "request_size");
/// assert!(!emit_custom("outside", serde_json::Value::Null)); // no run here
/// # Ok(()) }
/// ```
pub fn emit_custom(name: impl Into<String>, payload: serde_json::Value) -> bool {
    let name = name.into();
    RUN_EMITTER
        .try_with(|emitter| emitter.emit(AgentEvent::Custom { name, payload }))
        .is_ok()
}

/// Runs `f` with `emitter` as the run [`emit_custom`] reports to.
pub(crate) fn scoped<F: Future>(emitter: Emitter, f: F) -> impl Future<Output = F::Output> {
    RUN_EMITTER.scope(emitter, f)
}
