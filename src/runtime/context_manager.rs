//! The context manager port (R-CTX-1, R-CTX-2): what a run's
//! model sees is built from the session's entries by a replaceable [`ContextManager`].

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::message::Message;
use crate::store::Entry;
use crate::tools::ToolSpec;

/// A new run's context (R-CTX-1): what [`ContextManager::build_context`] is given to read,
/// and the context it shapes, filled in with the default before it is called (the history
/// rebuilt from the entries, [`agentloop_core::session_log::history()`]; the run's configured system prompt
/// and tools; nothing to append).
#[derive(Debug)]
#[non_exhaustive]
pub struct RunContext<'a> {
    /// The session.
    pub session: &'a str,
    /// The run about to start.
    pub run_id: &'a str,
    /// The session's entries, as loaded (and repaired) before the run.
    pub entries: &'a [Entry],
    /// The run's input messages (they follow the history in the run's context).
    pub input: &'a [Message],
    /// What the agent was built with
    /// ([`AgentBuilder::context_init_data`](super::AgentBuilder::context_init_data); `null` by
    /// default).
    pub runtime_init_data: &'a Value,
    /// Facts of this run: `model`, `max_steps`, `context_budget_tokens`,
    /// `compact_threshold`, `session_turns`.
    pub runtime_hints: &'a Value,
    /// The history the run starts from (the input follows it). Default: the history rebuilt
    /// from `entries`.
    pub messages: Vec<Message>,
    /// The run's system prompt. Default: the run's configured one (the agent's or the
    /// session's).
    pub system_prompt: Option<String>,
    /// The tools offered to the model. Default: the tools the run offers.
    pub tool_specs: Arc<[ToolSpec]>,
    /// Entries persisted before the run starts. Default: none.
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
///
/// When it is called:
/// - [`build_context`](Self::build_context) once at the start of each new run
///   ([`Agent::run_configured`](super::Agent::run_configured) and everything built on it), after
///   the session was loaded and repaired (R-IDEM-7). The context's `messages` become
///   `Start`'s history, its system prompt and tool specs the run's configuration (so the trace's `Start` input and
///   header hold its outputs, and a replay needs no context manager), and its
///   `entries_to_append` are persisted before the run starts.
/// - [`compute_context_updates`](Self::compute_context_updates) once when a new run
///   has ended, with the entries `build_context` saw (plus what it appended), the run's new
///   messages and whether a step of the run hit a context overflow. Its `entries_to_append` are
///   persisted; its `messages`, when given, are persisted as an
///   [`Entry::Compaction`] marker, so the session's next run
///   starts from them. It is never called per step: a step's cost stays independent of the
///   session's length. Compaction inside a run remains the [`Compactor`](super::Compactor)'s.
///
/// A resumed run ([`Agent::resume_with`](super::Agent::resume_with)) continues the context it
/// was interrupted with and calls neither.
///
/// The default context is the history rebuilt from the entries ([`agentloop_core::session_log::history()`]),
/// the run's own system prompt and tools, nothing appended, and no updates after the run; a
/// custom manager gets it filled in and changes what differs.
///
/// ```
/// use std::sync::Arc;
/// use agentloop::prelude::*;
/// use agentloop::runtime::{ContextManager, RunContext};
///
/// /// Pins a note before the history.
/// struct PinNote;
///
/// #[async_trait]
/// impl ContextManager for PinNote {
///     async fn build_context(&self, context: &mut RunContext<'_>) {
///         context.messages.insert(0, Message::user("Answer in English."));
///     }
/// }
///
/// let agent = Agent::builder()
///     .model(ScriptedModel::demo())
///     .context_manager(Arc::new(PinNote))
///     .build();
/// # let _ = agent;
/// ```
#[async_trait]
pub trait ContextManager: Send + Sync {
    /// Shapes the context a new run starts from (R-CTX-1): `context` holds the default
    /// context; change what differs.
    async fn build_context(&self, context: &mut RunContext<'_>);

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

/// The default manager: the default context, no updates.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DefaultContextManager;

#[async_trait]
impl ContextManager for DefaultContextManager {
    async fn build_context(&self, _context: &mut RunContext<'_>) {}

    fn updates_context(&self) -> bool {
        false
    }
}
