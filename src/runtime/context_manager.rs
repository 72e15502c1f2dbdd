//! The context manager port (R-CTX-1, R-CTX-2): what a run's
//! model sees is built from the session's entries by a replaceable [`ContextManager`].
//!
//! When it is called:
//! - [`build_context`](ContextManager::build_context) once at the start of each new run
//!   ([`Agent::run_configured`](super::Agent::run_configured) and everything built on it), after
//!   the session was loaded and repaired (R-IDEM-7). Its `messages` become `Start`'s history,
//!   its system prompt and tool specs the run's configuration (so the trace's `Start` input and
//!   header hold its outputs, and a replay needs no context manager), and its
//!   `entries_to_append` are persisted before the run starts.
//! - [`compute_context_updates`](ContextManager::compute_context_updates) once when a new run
//!   has ended, with the entries `build_context` saw (plus what it appended), the run's new
//!   messages and whether a step of the run hit a context overflow. Its `entries_to_append` are
//!   persisted; its `messages`, when given, are persisted as an
//!   [`Entry::Compaction`] marker, so the session's next run
//!   starts from them. It is never called per step: a step's cost stays independent of the
//!   session's length. Compaction inside a run remains the [`Compactor`](super::Compactor)'s.
//!
//! A resumed run ([`Agent::resume_with`](super::Agent::resume_with)) continues the context it
//! was interrupted with and calls neither.
//!
//! [`DefaultContextManager`] is today's behaviour: the history rebuilt from the entries
//! ([`crate::store::history()`]), the run's own system prompt and tools, nothing appended, no
//! updates.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::message::Message;
use crate::store::Entry;
use crate::tools::ToolSpec;

/// What [`ContextManager::build_context`] is given (R-CTX-1).
#[derive(Debug)]
pub struct ContextRequest<'a> {
    /// The session.
    pub session: &'a str,
    /// The run about to start.
    pub run_id: &'a str,
    /// The session's entries, as loaded (and repaired) before the run.
    pub entries: &'a [Entry],
    /// The run's input messages (they follow the built history in the run's context).
    pub input: &'a [Message],
    /// The run's configured system prompt (the agent's or the session's).
    pub system_prompt_override: Option<&'a str>,
    /// What the agent was built with
    /// ([`AgentBuilder::context_init_data`](super::AgentBuilder::context_init_data); `null` by
    /// default).
    pub runtime_init_data: &'a Value,
    /// Facts of this run: `model`, `max_steps`, `context_budget_tokens`,
    /// `compact_threshold`, `session_turns`.
    pub runtime_hints: &'a Value,
    /// The tools the run offers.
    pub tool_specs: &'a Arc<[ToolSpec]>,
}

/// What [`ContextManager::build_context`] returns.
#[derive(Clone, Debug, Default)]
pub struct BuiltContext {
    /// The history the run starts from (the input follows it).
    pub messages: Vec<Message>,
    /// The run's system prompt.
    pub system_prompt: Option<String>,
    /// The tools offered to the model.
    pub tool_specs: Arc<[ToolSpec]>,
    /// Entries persisted before the run starts.
    pub entries_to_append: Vec<Entry>,
}

/// What [`ContextManager::compute_context_updates`] returns (R-CTX-2).
#[derive(Clone, Debug, Default)]
pub struct ContextUpdates {
    /// Entries persisted after the run.
    pub entries_to_append: Vec<Entry>,
    /// A replacement context for the session's next run, persisted as a compaction marker.
    pub messages: Option<Vec<Message>>,
}

/// Builds a run's model context from a session, and updates it after the run.
#[async_trait]
pub trait ContextManager: Send + Sync {
    /// The context a new run starts from (R-CTX-1).
    async fn build_context(&self, request: &ContextRequest<'_>) -> BuiltContext;

    /// What the session keeps after a run (R-CTX-2): `entries` as the run started,
    /// `new_messages` the run's input, committed assistant messages and tool results (a
    /// message compaction removed during the run is not among them), `overflow_hint` whether
    /// a step hit a context overflow. The default keeps nothing more.
    async fn compute_context_updates(
        &self,
        entries: &[Entry],
        new_messages: &[Message],
        overflow_hint: bool,
    ) -> ContextUpdates {
        let _ = (entries, new_messages, overflow_hint);
        ContextUpdates::default()
    }

    /// Whether [`compute_context_updates`](Self::compute_context_updates) is worth calling
    /// (the default manager says no, so a run does not gather its new messages for nothing).
    fn updates_context(&self) -> bool {
        true
    }
}

/// Today's context: the history rebuilt from the entries, the run's system prompt and
/// tools, nothing appended, no updates.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultContextManager;

#[async_trait]
impl ContextManager for DefaultContextManager {
    async fn build_context(&self, request: &ContextRequest<'_>) -> BuiltContext {
        BuiltContext {
            messages: crate::store::history(request.entries),
            system_prompt: request.system_prompt_override.map(str::to_string),
            tool_specs: request.tool_specs.clone(),
            entries_to_append: Vec::new(),
        }
    }

    fn updates_context(&self) -> bool {
        false
    }
}
