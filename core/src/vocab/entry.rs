//! `Entry`: one record of a session log, and its idempotency key (R-IDEM-1, R-IDEM-3).
//! Entries are plain data: the machines request them (`Effect::Persist`), stores write them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::message::{AssistantMessage, Message, ToolResult, ToolStatus};

/// One persisted session entry. Entries are only ever appended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "entry", rename_all = "snake_case")]
pub enum Entry {
    /// Session metadata (model, configuration), written when a session is created or changed.
    Metadata {
        /// Model name.
        model: String,
        /// Free-form configuration snapshot.
        config: serde_json::Value,
    },
    /// User input that starts (or steers) a run.
    UserInput {
        /// The run.
        run_id: String,
        /// The message (usually `Message::User`).
        message: Message,
    },
    /// A committed assistant turn; `(run_id, model_call_index)` is its idempotency key (R-IDEM-1).
    Assistant {
        /// The run.
        run_id: String,
        /// Step number.
        model_call_index: u32,
        /// The message.
        message: AssistantMessage,
    },
    /// Written before a tool runs (R-IDEM-6).
    ToolStarted {
        /// The run.
        run_id: String,
        /// The call id (idempotency key).
        tool_call_id: String,
        /// Tool name.
        name: String,
    },
    /// A tool call's terminal result; `tool_call_id` is its idempotency key (R-IDEM-3).
    ToolResult {
        /// The run.
        run_id: String,
        /// The result.
        result: ToolResult,
    },
    /// Older entries are summarized or dropped from context from here on (R-OUT-4).
    Compaction {
        /// The run.
        run_id: String,
        /// How many context messages were removed.
        removed: usize,
        /// The context that replaces everything before this marker.
        messages: Vec<Message>,
    },
    /// A run ended.
    RunEnd {
        /// The run.
        run_id: String,
        /// How it ended (`completed`, `failed` or `aborted` on the wire).
        outcome: crate::outcome::Outcome,
        /// Why.
        reason: String,
    },
    /// The title a small model gave the session on its first turn
    /// (`RunConfig::title_model`).
    Title {
        /// The run that asked for it.
        run_id: String,
        /// The title.
        title: String,
    },
    /// What a repair of the session did (R-IDEM-7), appended after the entries it added. The
    /// log is append-only, so an entry a repair drops from the model's context stays in the
    /// file: this marker records the drop, and
    /// [`check`](fn@crate::session_log::check) no longer reports the entry.
    Repair {
        /// The run that applied the repair (the new run, or the resumed one).
        run_id: String,
        /// Every repair, in entry order.
        repairs: Vec<Repair>,
    },
}

/// One repair of a session log (R-IDEM-7), recorded in an [`Entry::Repair`] marker and
/// announced with a `session_repaired` event. `index` is the 0-based position of the entry
/// concerned (the file's line number minus one for a file store).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Repair {
    /// A tool call without a terminal result got one, appended as a `tool_result` entry
    /// (`aborted` when it never started, `outcome_unknown` when it started, R-IDEM-6).
    MissingResultFilled {
        /// Position of the assistant entry that made the call.
        index: usize,
        /// The run.
        run_id: String,
        /// The step.
        model_call_index: u32,
        /// The call.
        tool_call_id: String,
        /// Tool name.
        name: String,
        /// The status recorded.
        status: ToolStatus,
    },
    /// A tool result for a call no earlier assistant turn made is left out of the context.
    OrphanResultDropped {
        /// Position of the result.
        index: usize,
        /// The call id.
        tool_call_id: String,
    },
    /// A second result for one call is left out of the context (the first one counts).
    DuplicateResultDropped {
        /// Position of the duplicate.
        index: usize,
        /// The call id.
        tool_call_id: String,
    },
    /// A second assistant entry with the same `(run_id, model_call_index)` is left out of the
    /// context (the first one counts).
    DuplicateTurnDropped {
        /// Position of the duplicate.
        index: usize,
        /// The run.
        run_id: String,
        /// The step.
        model_call_index: u32,
    },
    /// A tool call reusing the id of an earlier call is left out of its assistant message.
    DuplicateToolCallDropped {
        /// Position of the assistant entry with the second use.
        index: usize,
        /// The call id.
        tool_call_id: String,
    },
    /// A start marker that cannot count (no earlier turn made the call, the call was already
    /// started, or it already has its result) is ignored.
    StrayStartIgnored {
        /// Position of the marker.
        index: usize,
        /// The call id.
        tool_call_id: String,
    },
    /// An interrupted run that a new prompt superseded got its run end.
    InterruptedRunEnded {
        /// The interrupted run.
        run_id: String,
        /// The outcome recorded (`aborted`, or `completed` when its final answer was committed).
        outcome: crate::outcome::Outcome,
    },
    /// A tool call in a history a port returned (R-IDEM-7) had no result in the block of tool
    /// messages right after its assistant message: an `outcome_unknown` error result was
    /// added there, so the request stays well paired. Nothing is stored for it.
    ContextResultFilled {
        /// Position of the assistant message in the history.
        index: usize,
        /// Which history.
        source: ContextSource,
        /// The call.
        tool_call_id: String,
        /// Tool name.
        name: String,
    },
    /// A tool result in a history a port returned (R-IDEM-7) that answers no call of the
    /// assistant message right before its block (an orphan, or a second result) was dropped.
    ContextResultDropped {
        /// Position of the result in the history.
        index: usize,
        /// Which history.
        source: ContextSource,
        /// The call id it names.
        tool_call_id: String,
    },
}

/// The history a [`Repair::ContextResultFilled`] or [`Repair::ContextResultDropped`] was
/// made in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContextSource {
    /// The history a run started from (`Start`: the context manager's).
    Start,
    /// A compaction's new context (`CompactionDone`: the compactor's).
    Compaction,
}

impl ContextSource {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ContextSource::Start => "start",
            ContextSource::Compaction => "compaction",
        }
    }
}

impl Repair {
    /// The position of the entry concerned (`None` for a run end).
    pub fn index(&self) -> Option<usize> {
        match self {
            Repair::MissingResultFilled { index, .. }
            | Repair::OrphanResultDropped { index, .. }
            | Repair::DuplicateResultDropped { index, .. }
            | Repair::DuplicateTurnDropped { index, .. }
            | Repair::DuplicateToolCallDropped { index, .. }
            | Repair::StrayStartIgnored { index, .. }
            | Repair::ContextResultFilled { index, .. }
            | Repair::ContextResultDropped { index, .. } => Some(*index),
            Repair::InterruptedRunEnded { .. } => None,
        }
    }

    /// The snake_case name of the repair (its serialized `kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            Repair::MissingResultFilled { .. } => "missing_result_filled",
            Repair::OrphanResultDropped { .. } => "orphan_result_dropped",
            Repair::DuplicateResultDropped { .. } => "duplicate_result_dropped",
            Repair::DuplicateTurnDropped { .. } => "duplicate_turn_dropped",
            Repair::DuplicateToolCallDropped { .. } => "duplicate_tool_call_dropped",
            Repair::StrayStartIgnored { .. } => "stray_start_ignored",
            Repair::InterruptedRunEnded { .. } => "interrupted_run_ended",
            Repair::ContextResultFilled { .. } => "context_result_filled",
            Repair::ContextResultDropped { .. } => "context_result_dropped",
        }
    }
}

impl std::fmt::Display for Repair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Repair::MissingResultFilled {
                index,
                run_id,
                model_call_index,
                tool_call_id,
                name,
                status,
            } => write!(
                f,
                "entry {index}: tool call {tool_call_id} ({name}) of run {run_id} step \
                 {model_call_index} had no result; recorded {}",
                ToolStatus::as_str(*status)
            ),
            Repair::OrphanResultDropped {
                index,
                tool_call_id,
            } => write!(
                f,
                "entry {index}: result for tool call {tool_call_id}, which no earlier turn \
                 made, dropped from the context"
            ),
            Repair::DuplicateResultDropped {
                index,
                tool_call_id,
            } => write!(
                f,
                "entry {index}: second result for tool call {tool_call_id} dropped from the \
                 context"
            ),
            Repair::DuplicateTurnDropped {
                index,
                run_id,
                model_call_index,
            } => write!(
                f,
                "entry {index}: duplicate assistant turn (run {run_id}, step \
                 {model_call_index}) dropped from the context"
            ),
            Repair::DuplicateToolCallDropped {
                index,
                tool_call_id,
            } => write!(
                f,
                "entry {index}: second use of tool call id {tool_call_id} dropped from its \
                 assistant message"
            ),
            Repair::StrayStartIgnored {
                index,
                tool_call_id,
            } => write!(
                f,
                "entry {index}: stray start marker for tool call {tool_call_id} ignored"
            ),
            Repair::InterruptedRunEnded { run_id, outcome } => write!(
                f,
                "run {run_id} was interrupted and superseded by a new prompt; recorded its run \
                 end ({outcome})"
            ),
            Repair::ContextResultFilled {
                index,
                source,
                tool_call_id,
                name,
            } => write!(
                f,
                "{} context, message {index}: tool call {tool_call_id} ({name}) had no result; \
                 added an outcome_unknown result",
                source.as_str()
            ),
            Repair::ContextResultDropped {
                index,
                source,
                tool_call_id,
            } => write!(
                f,
                "{} context, message {index}: result for tool call {tool_call_id}, which the \
                 message before it did not make (or answered already), dropped",
                source.as_str()
            ),
        }
    }
}

/// The idempotency key of an entry (R-IDEM-1, R-IDEM-3): a store keeps at most one entry
/// per key; appending a second one is a no-op.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntryKey {
    /// A committed assistant turn: `(run_id, model_call_index)`.
    Turn {
        /// The run.
        run_id: String,
        /// Step number.
        model_call_index: u32,
    },
    /// The start marker of a tool call.
    ToolStarted {
        /// The call id.
        tool_call_id: String,
    },
    /// The terminal result of a tool call.
    ToolResult {
        /// The call id.
        tool_call_id: String,
    },
}

impl Entry {
    /// The entry's idempotency key; `None` for entries that may repeat (user input,
    /// metadata, compaction, run end, repair).
    pub fn idempotency_key(&self) -> Option<EntryKey> {
        match self {
            Entry::Assistant {
                run_id,
                model_call_index,
                ..
            } => Some(EntryKey::Turn {
                run_id: run_id.clone(),
                model_call_index: *model_call_index,
            }),
            Entry::ToolStarted { tool_call_id, .. } => Some(EntryKey::ToolStarted {
                tool_call_id: tool_call_id.clone(),
            }),
            Entry::ToolResult { result, .. } => Some(EntryKey::ToolResult {
                tool_call_id: result.tool_call_id.clone(),
            }),
            _ => None,
        }
    }

    /// The run this entry belongs to (`None` for metadata).
    pub fn run_id(&self) -> Option<&str> {
        match self {
            Entry::Metadata { .. } => None,
            Entry::UserInput { run_id, .. }
            | Entry::Assistant { run_id, .. }
            | Entry::ToolStarted { run_id, .. }
            | Entry::ToolResult { run_id, .. }
            | Entry::Compaction { run_id, .. }
            | Entry::RunEnd { run_id, .. }
            | Entry::Title { run_id, .. }
            | Entry::Repair { run_id, .. } => Some(run_id),
        }
    }
}
