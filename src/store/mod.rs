//! The session store port: append-only session entries, and the in-memory store.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
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

/// A store failure. A failed write ends the run at once (R-IDEM-4).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// IO failure.
    #[error("session store io error at {path}: {source}")]
    Io {
        /// The file involved.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The session is locked by another process.
    #[error("session {session} is locked by another process ({path})")]
    Locked {
        /// The session id.
        session: String,
        /// The lock file.
        path: String,
    },
    /// A stored entry could not be read.
    #[error("corrupt session file {path} at byte offset {offset}: {detail}")]
    Corrupt {
        /// The file.
        path: String,
        /// Byte offset of the bad entry.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// Any other failure (injected faults, backends).
    #[error("session store error: {0}")]
    Other(String),
}

/// Where session entries live (R-ARCH-4). `append` must be durable when it returns `Ok`
/// (per the store's durability mode).
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// All entries of `session`, oldest first (empty for a new session).
    async fn load(&self, session: &str) -> Result<Vec<Entry>, StoreError>;
    /// Appends one entry.
    async fn append(&self, session: &str, entry: &Entry) -> Result<(), StoreError>;
}

/// A store that keeps sessions in memory (tests, one-shot runs).
#[derive(Debug, Default)]
pub struct MemoryStore {
    sessions: Mutex<HashMap<String, Vec<Entry>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn load(&self, session: &str) -> Result<Vec<Entry>, StoreError> {
        let map = self
            .sessions
            .lock()
            .map_err(|_| StoreError::Other("memory store poisoned".into()))?;
        Ok(map.get(session).cloned().unwrap_or_default())
    }

    async fn append(&self, session: &str, entry: &Entry) -> Result<(), StoreError> {
        let mut map = self
            .sessions
            .lock()
            .map_err(|_| StoreError::Other("memory store poisoned".into()))?;
        map.entry(session.to_string())
            .or_default()
            .push(entry.clone());
        Ok(())
    }
}
