//! `Entry`: one record of a session log, and its idempotency key (R-IDEM-1, R-IDEM-3).
//! Entries are plain data: the machines request them (`Effect::Persist`), stores write them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::message::{AssistantMessage, Message, ToolResult};

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
        /// `completed`, `failed` or `aborted`.
        outcome: String,
        /// Why.
        reason: String,
    },
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
    /// metadata, compaction, run end).
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
            | Entry::RunEnd { run_id, .. } => Some(run_id),
        }
    }
}
