//! Hooks (R-EXT-1): plugins called by the runtime and the session at fixed points of the loop.
//!
//! Every method has a no-op default, so a plugin implements only what it needs. The
//! synchronous hooks must not block: they run inline on the loop (like an
//! [`EventSink`](crate::runtime::EventSink)). The two gates that may need to wait — a guardrail
//! that asks a model or a service before a tool runs or a compaction starts — have async forms,
//! [`before_tool_async`](Hooks::before_tool_async) and
//! [`before_compact_async`](Hooks::before_compact_async), which the runtime awaits without
//! holding up the loop (by default they call the synchronous form). A veto is not an error: it
//! becomes an input of the machine or an event (`prompt_rejected`,
//! `steering_received{status: rejected_hook}`, `tool_blocked`, `compact_vetoed`) and, for a
//! blocked tool, a `denied` result the model sees.
//!
//! | hook | called by | may |
//! |---|---|---|
//! | `before_prompt` | session, before a prompt starts or is queued | reject (`prompt_rejected`) |
//! | `before_steering` | session, before a steering message is queued | reject |
//! | `before_model_call` | driver, before each attempt is sent | rewrite the request |
//! | `after_model_call` | driver, when an attempt's stream ends | observe |
//! | `before_tool` (`_async`) | driver, when the machine asks (`GateTool`) before a call runs | allow, block, modify arguments, ask a human (each a `tool_gated` input) |
//! | `after_tool` | runtime, when a tool result arrives | rewrite the result text |
//! | `before_compact` (`_async`) | driver, before a compaction runs | veto (a `compaction_vetoed` input: the run goes on uncompacted, or fails when the model refused the context) |
//! | `on_event` | event bus, for every event | observe |
//!
//! # Example
//!
//! A guardrail that lets the model use the calculator and nothing else (a blocked call is a
//! `denied` result the model sees, not a failed run):
//!
//! ```
//! use std::sync::Arc;
//!
//! use agentloop::hooks::{Hooks, ToolDecision};
//! use agentloop::prelude::*;
//! use agentloop::ToolCall;
//!
//! struct OnlyCalculator;
//!
//! #[async_trait]
//! impl Hooks for OnlyCalculator {
//!     fn before_tool(&self, call: &ToolCall) -> ToolDecision {
//!         if call.name == "calculator" {
//!             ToolDecision::Allow
//!         } else {
//!             ToolDecision::Block { reason: "only the calculator".into() }
//!         }
//!     }
//! }
//!
//! let agent = Agent::builder()
//!     .model(ScriptedModel::demo())
//!     .builtin_tools()
//!     .hooks(Arc::new(OnlyCalculator))
//!     .build();
//! # let _ = agent;
//! ```

use std::sync::Arc;

use crate::message::{Message, ToolCall, ToolStatus};
use crate::model::ModelRequest;
use crate::EventEnvelope;

/// What `before_tool` decides about a call: the machine's own input type
/// ([`GateVerdict`](agentloop_core::GateVerdict)), fed back as `tool_gated` — `Allow`,
/// `Block { reason }` (the model sees a `denied` result; `tool_blocked` is emitted),
/// `Modify { arguments }`, or `Ask` (a human decides, on the one approval path).
pub use agentloop_core::GateVerdict as ToolDecision;

/// Plugin hooks. All methods default to "do nothing / allow".
///
/// The yes/no gates (`before_prompt`, `before_steering`, `before_compact`) answer
/// `Ok(())` to go ahead, or `Err(reason)` to reject (the reason is reported in an event).
/// Several hooks are a `Vec<Arc<dyn Hooks>>`, itself hooks: called in order, the first
/// rejection or block wins, modifications chain.
///
/// An async guardrail overrides an `_async` method (and marks its impl `#[async_trait]`,
/// re-exported as [`agentloop::async_trait`](crate::async_trait)):
///
/// ```
/// use agentloop::hooks::{Hooks, ToolDecision};
/// use agentloop::ToolCall;
///
/// struct AskAReviewer;
///
/// #[agentloop::async_trait]
/// impl Hooks for AskAReviewer {
///     async fn before_tool_async(&self, call: &ToolCall) -> ToolDecision {
///         // e.g. a model call or an HTTP request; the loop keeps running meanwhile.
///         tokio::task::yield_now().await;
///         if call.name == "append_line" {
///             ToolDecision::Block { reason: "read-only today".into() }
///         } else {
///             ToolDecision::Allow
///         }
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait Hooks: Send + Sync {
    /// A prompt arrived (before it starts or is queued).
    fn before_prompt(&self, _text: &str) -> Result<(), String> {
        Ok(())
    }
    /// A steering message arrived (before it is queued).
    fn before_steering(&self, _text: &str) -> Result<(), String> {
        Ok(())
    }
    /// A model attempt is about to be sent; the request may be changed.
    fn before_model_call(&self, _request: &mut ModelRequest) {}
    /// A model attempt's stream ended: `Ok(())` when it finished, `Err(why)` when it failed
    /// (the machine decides whether to retry).
    fn after_model_call(&self, _request: &ModelRequest, _outcome: Result<(), &str>) {}
    /// A tool call is about to run. The verdict goes back to the machine as a
    /// `tool_gated` input (rows `tools_gate_*`), so the trace records it and replay needs no
    /// hook.
    fn before_tool(&self, _call: &ToolCall) -> ToolDecision {
        ToolDecision::Allow
    }
    /// The form of [`before_tool`](Hooks::before_tool) the runtime calls: override it for a
    /// gate that awaits. The verdict is fed to the machine when it arrives; meanwhile the loop
    /// goes on (other calls, deltas, aborts). Default: `before_tool`.
    async fn before_tool_async(&self, call: &ToolCall) -> ToolDecision {
        self.before_tool(call)
    }
    /// Whether [`before_tool`](Hooks::before_tool) may say anything but `Allow`: when false
    /// the machine runs calls without asking (no `tool_gated` round trip). Default: true.
    fn gates_tools(&self) -> bool {
        true
    }
    /// A tool call ended; `content` may be rewritten before the model sees it.
    fn after_tool(&self, _call_id: &str, _name: &str, _status: ToolStatus, _content: &mut String) {}
    /// A compaction is about to run over `messages`: `Err(reason)` vetoes it (the machine's
    /// `compaction_vetoed` input: the run goes on without it, or fails with
    /// `compaction_vetoed` when the model refused the context).
    fn before_compact(&self, _messages: &[Message]) -> Result<(), String> {
        Ok(())
    }
    /// The form of [`before_compact`](Hooks::before_compact) the runtime calls: override it
    /// for a veto that awaits. Default: `before_compact`.
    async fn before_compact_async(&self, messages: &[Message]) -> Result<(), String> {
        self.before_compact(messages)
    }
    /// Every event, after it got its index.
    fn on_event(&self, _event: &EventEnvelope) {}
}

/// The default: no hooks.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct NoHooks;

#[async_trait::async_trait]
impl Hooks for NoHooks {
    fn gates_tools(&self) -> bool {
        false
    }
}

/// Several hooks, called in order. The first rejection or block wins; modifications chain.
///
/// ```
/// use std::sync::Arc;
/// use agentloop::hooks::Hooks;
///
/// struct NoSecrets;
/// impl Hooks for NoSecrets {
///     fn before_prompt(&self, text: &str) -> Result<(), String> {
///         if text.contains("password") { Err("no secrets".into()) } else { Ok(()) }
///     }
/// }
/// struct Quiet;
/// impl Hooks for Quiet {}
///
/// let hooks: Vec<Arc<dyn Hooks>> = vec![Arc::new(Quiet), Arc::new(NoSecrets)];
/// assert_eq!(hooks.before_prompt("my password"), Err("no secrets".to_string()));
/// assert_eq!(hooks.before_prompt("hello"), Ok(()));
/// ```
#[async_trait::async_trait]
impl Hooks for Vec<Arc<dyn Hooks>> {
    fn before_prompt(&self, text: &str) -> Result<(), String> {
        self.iter().try_for_each(|h| h.before_prompt(text))
    }
    fn before_steering(&self, text: &str) -> Result<(), String> {
        self.iter().try_for_each(|h| h.before_steering(text))
    }
    fn before_model_call(&self, request: &mut ModelRequest) {
        for h in self {
            h.before_model_call(request);
        }
    }
    fn after_model_call(&self, request: &ModelRequest, outcome: Result<(), &str>) {
        for h in self {
            h.after_model_call(request, outcome);
        }
    }
    fn gates_tools(&self) -> bool {
        self.iter().any(|h| h.gates_tools())
    }
    fn before_tool(&self, call: &ToolCall) -> ToolDecision {
        let mut call = call.clone();
        let mut decision = ToolDecision::Allow;
        for h in self {
            let verdict = h.before_tool(&call);
            if let Some(end) = chain_verdict(&mut call, &mut decision, verdict) {
                return end;
            }
        }
        decision
    }
    async fn before_tool_async(&self, call: &ToolCall) -> ToolDecision {
        let mut call = call.clone();
        let mut decision = ToolDecision::Allow;
        for h in self {
            let verdict = h.before_tool_async(&call).await;
            if let Some(end) = chain_verdict(&mut call, &mut decision, verdict) {
                return end;
            }
        }
        decision
    }
    fn after_tool(&self, call_id: &str, name: &str, status: ToolStatus, content: &mut String) {
        for h in self {
            h.after_tool(call_id, name, status, content);
        }
    }
    fn before_compact(&self, messages: &[Message]) -> Result<(), String> {
        self.iter().try_for_each(|h| h.before_compact(messages))
    }
    async fn before_compact_async(&self, messages: &[Message]) -> Result<(), String> {
        for h in self {
            h.before_compact_async(messages).await?;
        }
        Ok(())
    }
    fn on_event(&self, event: &EventEnvelope) {
        for h in self {
            h.on_event(event);
        }
    }
}

/// Folds one hook's `verdict` into a chain's `decision` (for `before_tool` and its async
/// form): modifications chain (the next hook sees the modified call), `Ask` is kept, and a
/// block — or a verdict the chain does not know — ends the chain (returned).
fn chain_verdict(
    call: &mut ToolCall,
    decision: &mut ToolDecision,
    verdict: ToolDecision,
) -> Option<ToolDecision> {
    match verdict {
        ToolDecision::Allow => {}
        ToolDecision::Modify { arguments } => {
            call.arguments = arguments.clone();
            if *decision == ToolDecision::Allow || matches!(decision, ToolDecision::Modify { .. }) {
                *decision = ToolDecision::Modify { arguments };
            }
        }
        ToolDecision::Ask => *decision = ToolDecision::Ask,
        d => return Some(d),
    }
    None
}
