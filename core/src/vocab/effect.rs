//! `Effect`: the one output enum. The machines return effects; the runtime performs them and
//! feeds the results back as events. Effects are plain data, so a trace records them and
//! replay compares them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::agent_event::AgentEvent;
use crate::entry::Entry;
use crate::event::AttemptId;
use crate::message::{Message, ToolCall};
use crate::model::ModelRequest;

/// A request from a machine to the outside world. The runtime performs effects in order;
/// a `Persist` must succeed before later effects of the same step run (R-IDEM-4, R-IDEM-6).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "effect", rename_all = "snake_case")]
pub enum Effect {
    /// Ask the small model `model` for a title of the conversation that starts with `text`;
    /// the answer is `Event::TitleReady`.
    GenerateTitle {
        /// The title model.
        model: String,
        /// The session's first user message.
        text: String,
    },
    /// Append an entry to the session store.
    Persist {
        /// The entry.
        entry: Entry,
    },
    /// Append the run-end entry, the run's final commit. The runtime answers with
    /// `Event::RunEndCommitted`, or `Event::StoreWriteFailed` if the write failed.
    CommitRunEnd {
        /// The entry (an `Entry::RunEnd`).
        entry: Entry,
    },
    /// Start a streaming model request.
    CallModel {
        /// The request (carries run id, step and attempt).
        request: ModelRequest,
    },
    /// Cancel the stream of this attempt.
    CancelModel {
        /// Which attempt.
        attempt: AttemptId,
    },
    /// Start a timer; it fires as `Event::TimerElapsed`.
    StartTimer {
        /// The timer.
        timer_id: u64,
        /// Delay.
        delay_ms: u64,
    },
    /// Cancel a timer.
    CancelTimer {
        /// The timer.
        timer_id: u64,
    },
    /// Run a tool call; it ends as `Event::ToolFinished`.
    RunTool {
        /// The call.
        call: ToolCall,
    },
    /// Kill a running tool call (killable tools only; immune tools run on).
    KillTool {
        /// The call.
        tool_call_id: String,
    },
    /// Ask the `before_tool` hooks about a call before it runs; the answer comes back as
    /// `Event::ToolGated`.
    GateTool {
        /// The call.
        call: ToolCall,
    },
    /// Put an `ask_user` call's question to the person; the answer comes back as
    /// `Event::UserAnswered`.
    AskUser {
        /// The call (its id is the question's ref).
        tool_call_id: String,
        /// The question.
        question: String,
        /// The options offered (may be empty: a free answer).
        options: Vec<String>,
    },
    /// Ask a human about a call; the answer comes back as `Event::Approval`.
    RequestApproval {
        /// The call.
        call: ToolCall,
    },
    /// Stop asking a human about a call: its approval timer fired first (R-CTL-4), so the
    /// machine decided without an answer. The runtime stops waiting and the approver forgets
    /// the request (a late answer finds nothing pending).
    WithdrawApproval {
        /// The call.
        tool_call_id: String,
    },
    /// Compact the context; the answer is `Event::CompactionDone` or `CompactionFailed`.
    Compact {
        /// The current context.
        messages: Vec<Message>,
        /// Token budget the result must fit (if configured).
        budget_tokens: Option<u64>,
        /// Message count the result must not exceed (if configured).
        max_messages: Option<usize>,
    },
    /// Deliver an event to observers.
    Emit {
        /// The event.
        event: AgentEvent,
    },
}
