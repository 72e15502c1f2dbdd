//! What each step of a run produced (R-IN-5): its message, tool calls, tool results
//! and error.
//!
//! The outer machine records a [`StepRecord`] when a step ends — committed, failed, overflowed
//! or aborted — keeps it in the run's [`LoopResult::steps`](crate::react::LoopResult::steps)
//! and, unless the configuration turns it off, reports it as a `step_finished` event (so it is
//! in the trace). A record does not copy the step's message or tool results: it names their
//! position in the run's messages, so a long run keeps each message once and a record costs
//! the same whatever the session's length. [`ExecuteResult`] is that view of a step, borrowed
//! from a record and the messages it points into
//! ([`LoopResult::execute_results`](crate::react::LoopResult::execute_results)).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::ModelError;
use crate::message::{AssistantMessage, Message, ToolCall, ToolResult, Usage};

/// How a step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepEnd {
    /// The message was committed and every tool call has a result (tool failures included:
    /// they are results, R-IN-3).
    Success,
    /// The model request failed: the error was not retried, or the retries ran out. The run
    /// fails, or a fallback model takes the step again (a new record, same `model_call_index`).
    Failed,
    /// The context did not fit: the run compacts and requests the step again.
    ContextOverflow,
    /// The run was aborted during the step.
    Aborted,
}

impl StepEnd {
    /// The snake_case name (as serialized).
    pub fn as_str(self) -> &'static str {
        match self {
            StepEnd::Success => "success",
            StepEnd::Failed => "failed",
            StepEnd::ContextOverflow => "context_overflow",
            StepEnd::Aborted => "aborted",
        }
    }
}

/// One step's result as the outer machine records it (R-IN-5): small and of a size independent
/// of the session's length — the committed message and its tool results stay in the run's
/// messages, named here by position.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepRecord {
    /// The step (R-IDEM-1); a step taken again by a fallback model keeps it.
    pub model_call_index: u32,
    /// The model the step was requested from.
    pub model: String,
    /// Model attempts the step made (1 + its retries; 0 for a resumed step, whose message an
    /// earlier run committed).
    pub attempts: u32,
    /// How the step ended.
    pub end: StepEnd,
    /// Position of the committed message in the run's messages
    /// ([`LoopResult::messages`](crate::react::LoopResult::messages)); its tool results follow
    /// it. `None` when the step committed nothing, or when compaction removed the message from
    /// the context (then `compacted`; the session store keeps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<usize>,
    /// The message was committed, then compacted away.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compacted: bool,
    /// Tool calls of the committed message.
    #[serde(default, skip_serializing_if = "crate::vocab::is_zero")]
    pub tool_calls: usize,
    /// Tool results the step recorded (every call has one when the step succeeded, R-IDEM-7);
    /// they follow the message in the run's messages, in call order.
    #[serde(default, skip_serializing_if = "crate::vocab::is_zero")]
    pub tool_results: usize,
    /// Token usage the provider reported for the step (`None`: none reported, or nothing
    /// committed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Why the step failed (`failed`, `context_overflow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ModelError>,
}

impl StepRecord {
    /// The [`ExecuteResult`] of this step, borrowed from `messages` (the run's messages,
    /// [`LoopResult::messages`](crate::react::LoopResult::messages)). A position that does not
    /// name an assistant message there (messages of another run) gives no message.
    pub fn resolve<'a>(&'a self, messages: &'a [Message]) -> ExecuteResult<'a> {
        let message = self.message.and_then(|i| match messages.get(i) {
            Some(Message::Assistant(m)) => Some(m),
            _ => None,
        });
        let tool_results = match (message, self.message) {
            (Some(_), Some(i)) => messages
                .iter()
                .skip(i + 1)
                .take(self.tool_results)
                .map_while(|m| match m {
                    Message::Tool(r) => Some(r),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        ExecuteResult {
            model_call_index: self.model_call_index,
            model: &self.model,
            attempts: self.attempts,
            end: self.end,
            message,
            tool_calls: message.map_or(&[], |m| m.tool_calls.as_slice()),
            tool_results,
            usage: self.usage,
            error: self.error.as_ref(),
            compacted: self.compacted,
        }
    }
}

/// One step's result (R-IN-5): the committed message, its tool calls and
/// results, usage and error — borrowed from the run's messages, never copied.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExecuteResult<'a> {
    /// The step.
    pub model_call_index: u32,
    /// The model the step was requested from.
    pub model: &'a str,
    /// Model attempts the step made (1 + its retries).
    pub attempts: u32,
    /// How the step ended.
    pub end: StepEnd,
    /// The committed message (`None`: nothing committed, or compacted away).
    pub message: Option<&'a AssistantMessage>,
    /// The message's tool calls, in the model's order.
    pub tool_calls: &'a [ToolCall],
    /// Their results, in call order.
    pub tool_results: Vec<&'a ToolResult>,
    /// Token usage the provider reported for the step.
    pub usage: Option<Usage>,
    /// Why the step failed.
    pub error: Option<&'a ModelError>,
    /// The message was committed, then compacted away from the run's context.
    pub compacted: bool,
}

impl ExecuteResult<'_> {
    /// Whether the step succeeded.
    pub fn success(&self) -> bool {
        self.end == StepEnd::Success
    }
}

/// Where the messages of `old` that `new` still holds at its end are: the length of the longest
/// common suffix, compared from the end and at most `limit` messages deep.
pub(crate) fn common_suffix(old: &[Message], new: &[Message], limit: usize) -> usize {
    old.iter()
        .rev()
        .zip(new.iter().rev())
        .take(limit)
        .take_while(|(a, b)| a == b)
        .count()
}

/// Moves the records' positions from the messages `old` to `new`, the context compaction left
/// (R-IN-5): a message in the common suffix keeps its record (at its new position), an earlier
/// one was compacted away. Costs the comparisons down to the oldest message a record names.
pub(crate) fn remap(records: &mut [StepRecord], old: &[Message], new: &[Message]) {
    let Some(oldest) = records.iter().filter_map(|r| r.message).min() else {
        return;
    };
    let kept = common_suffix(old, new, old.len().saturating_sub(oldest));
    let first_kept = old.len() - kept;
    for r in records.iter_mut() {
        if let Some(i) = r.message {
            if i >= first_kept {
                r.message = Some(i - first_kept + (new.len() - kept));
            } else {
                r.message = None;
                r.compacted = true;
            }
        }
    }
}
