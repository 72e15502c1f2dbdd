//! `Event`: the one input enum of the machines. Everything the outside world tells a run
//! arrives as an `Event`; the runtime produces them from effect results, and a trace records them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ModelError;
use crate::message::{AssistantMessage, Message, MessageDelta, ToolResult, ToolStatus};

/// Identifies one attempt of one step of one run. Stream events carry it so that events from a
/// cancelled or failed attempt are recognised as stale (R-STR-3, R-IN-6).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct AttemptId {
    /// The run.
    pub run_id: String,
    /// The step, from 1.
    pub model_call_index: u32,
    /// The attempt, from 1.
    pub attempt: u32,
}

/// A human's answer to an approval request (R-CTL-4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Run the call.
    Approved,
    /// Run the call, and every later call of the same tool in this run without asking.
    ApprovedAlways,
    /// Do not run the call; the model sees a denied result.
    Rejected {
        /// Why.
        reason: String,
    },
    /// Run the call with these arguments instead.
    Modified {
        /// Replacement arguments.
        arguments: Value,
    },
    /// Nobody answered within the approval timeout: the call is not run, as if rejected
    /// (reported as `approval_resolved{status: timeout}`).
    TimedOut {
        /// How long the request waited.
        after_ms: u64,
    },
}

impl ApprovalDecision {
    /// The outcome as `approval_resolved` reports it.
    pub fn status(&self) -> ApprovalStatus {
        match self {
            ApprovalDecision::Approved
            | ApprovalDecision::ApprovedAlways
            | ApprovalDecision::Modified { .. } => ApprovalStatus::Approved,
            ApprovalDecision::Rejected { .. } => ApprovalStatus::Rejected,
            ApprovalDecision::TimedOut { .. } => ApprovalStatus::Timeout,
        }
    }
}

/// How an approval request ended (the `status` of `approval_resolved`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Approved (as asked, always, or with modified arguments): the call runs.
    Approved,
    /// Rejected by a human: the call gets a denied result.
    Rejected,
    /// Nobody answered in time: the call gets a denied result.
    Timeout,
}

/// What the `before_tool` hooks said about a call (R-EXT-1), fed back as
/// [`Event::ToolGated`]: each verdict is a row of the process chart, so the trace holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "verdict", rename_all = "snake_case")]
#[non_exhaustive]
pub enum GateVerdict {
    /// Run the call as it is.
    Allow,
    /// Run the call with these arguments instead.
    Modify {
        /// Replacement arguments.
        arguments: Value,
    },
    /// Do not run it: the model sees a `denied` result with this reason.
    Block {
        /// Why.
        reason: String,
    },
    /// Ask a human first: the call takes the approval path of approval-policy calls.
    Ask,
}

/// Which running tools an abort kills (R-CTL-3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KillPolicy {
    /// Kill killable tools; immune tools finish and keep their results (default).
    #[default]
    Killable,
    /// Kill every running tool.
    All,
    /// Kill nothing: running tools finish and keep their results.
    None,
}

/// A committed assistant message whose tool calls are not all answered (resume).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PendingStep {
    /// Its step number.
    pub model_call_index: u32,
    /// The committed message.
    pub message: AssistantMessage,
    /// Results already persisted (including repaired `outcome_unknown` ones).
    pub results: Vec<ToolResult>,
}

/// Everything that can happen to a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// Start the run: the loaded session context plus the new user input.
    Start {
        /// The run id (from the ids port).
        run_id: String,
        /// The session's context so far (after any compaction marker).
        history: Vec<Message>,
        /// New input for this run (usually one user message).
        input: Vec<Message>,
        /// Assistant turns the session committed before this run.
        session_turns: u32,
    },
    /// Continue an interrupted run from the persisted session (R-IDEM-5).
    Resume {
        /// The interrupted run's id (kept, so idempotency keys stay stable).
        run_id: String,
        /// The session's context, without the pending step below.
        history: Vec<Message>,
        /// Assistant turns the session committed, including the pending step's.
        session_turns: u32,
        /// Steps of this run already committed (the next step uses `committed_steps + 1`).
        committed_steps: u32,
        /// The last committed message, when some of its tool calls have no result yet.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pending: Option<PendingStep>,
    },
    /// The model response for an attempt started.
    StreamOpened {
        /// Which attempt.
        attempt: AttemptId,
    },
    /// A `before_model_call` hook changed the request of an attempt; this is what was sent.
    RequestRewritten {
        /// Which attempt.
        attempt: AttemptId,
        /// The request as sent.
        request: Box<crate::model::ModelRequest>,
    },
    /// One normalized delta.
    Delta {
        /// Which attempt.
        attempt: AttemptId,
        /// Per-attempt sequence number, from 0 (dedupe key, R-STR-3).
        seq: u64,
        /// The delta.
        delta: MessageDelta,
    },
    /// The stream ended with terminal evidence.
    Done {
        /// Which attempt.
        attempt: AttemptId,
        /// The runtime's verdicts on the completed tool calls' arguments against their tools'
        /// JSON Schemas (R-TOOL-1): one per call that breaks its schema, none for a call that
        /// passes. The machine fails those calls at commit (row `commit_schema_invalid`), so
        /// the decision is recorded with the input and replays without a validator. Absent in
        /// traces written before the check existed (no verdict: every call passes).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        rejected_arguments: Vec<crate::tool_check::ArgumentsRejected>,
        /// The runtime's verdict on the final answer when the run asks for a typed one
        /// ([`OutputSpec`](crate::output::OutputSpec)) and the message has no tool calls:
        /// `None` when it matches (or nothing was asked). Observing decides on it (rows
        /// `observing_retry_output`, `observing_output_invalid`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output_rejected: Option<crate::output::OutputRejected>,
    },
    /// The attempt failed.
    TransportError {
        /// Which attempt.
        attempt: AttemptId,
        /// The classified error.
        error: ModelError,
    },
    /// The provider says the context does not fit.
    ContextOverflow {
        /// Which attempt.
        attempt: AttemptId,
        /// The classified error.
        error: ModelError,
    },
    /// No first chunk or no delta within the stall timeout (R-IN-7).
    StreamStalled {
        /// Which attempt.
        attempt: AttemptId,
        /// How long the runtime waited.
        after_ms: u64,
    },
    /// A timer started by `Effect::StartTimer` fired.
    TimerElapsed {
        /// The timer.
        timer_id: u64,
    },
    /// A tool call ended.
    ToolFinished {
        /// The call.
        tool_call_id: String,
        /// Completed or Error (timeouts and panics are errors, R-IN-3).
        status: ToolStatus,
        /// Output or error text.
        content: String,
    },
    /// A human decided on a pending approval.
    Approval {
        /// The call.
        tool_call_id: String,
        /// The decision.
        decision: ApprovalDecision,
    },
    /// The `before_tool` hooks' verdict on a call the machine asked about (`GateTool`).
    ToolGated {
        /// The call.
        tool_call_id: String,
        /// The verdict.
        verdict: GateVerdict,
    },
    /// The person's answer to an `ask_user` question (`Effect::AskUser`).
    UserAnswered {
        /// The call that asked (the question's ref).
        tool_call_id: String,
        /// The answer; `None` when nobody can answer (no session, no person).
        answer: Option<String>,
    },
    /// The compaction effect finished.
    CompactionDone {
        /// The new context.
        messages: Vec<Message>,
        /// How many messages were removed.
        removed: usize,
    },
    /// The compaction effect could not bring the context under budget.
    CompactionFailed {
        /// Why.
        error: String,
    },
    /// The title model answered (`GenerateTitle`): the title, or `None` when it failed.
    TitleReady {
        /// The title.
        title: Option<String>,
    },
    /// A `before_compact` hook vetoed the compaction (R-EXT-1): the compactor did not run.
    CompactionVetoed {
        /// The hook's reason.
        reason: String,
    },
    /// Abort the run (R-CTL-3).
    Abort {
        /// Why.
        reason: String,
        /// Which running tools to kill.
        #[serde(default)]
        kill: KillPolicy,
    },
    /// Steering input (R-CTL-2): merged into the context at the next step boundary.
    Steer {
        /// The message.
        text: String,
    },
    /// A subtask: queued, and run before the next model
    /// step as a synthetic step whose one tool call is `tool(arguments)` (a subagent tool).
    Subtask {
        /// The tool to call (a `SubagentTool`'s name, or any tool).
        tool: String,
        /// Its arguments.
        arguments: serde_json::Value,
    },
    /// Use another model from the next step on (R-CTL-5).
    SwitchModel {
        /// Model name.
        model: String,
    },
    /// Offer these tools from the next step on (R-CTL-6).
    SetTools {
        /// The tool specs.
        tools: crate::tool_spec::ToolSpecs,
        /// Tools among them that abort must not kill (`Tool::killable() == false`).
        #[serde(default)]
        immune: std::collections::BTreeSet<String>,
    },
    /// A session store write failed (R-IDEM-4).
    StoreWriteFailed {
        /// The store's error.
        error: String,
    },
    /// The store acknowledged the run-end entry ([`Effect::CommitRunEnd`](crate::Effect)):
    /// the run may report its end (R-IDEM-4).
    RunEndCommitted,
}

impl Event {
    /// `Done` of `attempt` with no argument verdicts (every tool call passes its schema, or
    /// nothing checked them).
    pub fn done(attempt: AttemptId) -> Self {
        Event::Done {
            attempt,
            rejected_arguments: Vec::new(),
            output_rejected: None,
        }
    }

    /// The event's name (its serialized `type`).
    pub fn name(&self) -> &'static str {
        match self {
            Event::Start { .. } => "start",
            Event::Resume { .. } => "resume",
            Event::StreamOpened { .. } => "stream_opened",
            Event::RequestRewritten { .. } => "request_rewritten",
            Event::Delta { .. } => "delta",
            Event::Done { .. } => "done",
            Event::TransportError { .. } => "transport_error",
            Event::ContextOverflow { .. } => "context_overflow",
            Event::StreamStalled { .. } => "stream_stalled",
            Event::TimerElapsed { .. } => "timer_elapsed",
            Event::ToolFinished { .. } => "tool_finished",
            Event::Approval { .. } => "approval",
            Event::ToolGated { .. } => "tool_gated",
            Event::UserAnswered { .. } => "user_answered",
            Event::CompactionDone { .. } => "compaction_done",
            Event::CompactionFailed { .. } => "compaction_failed",
            Event::CompactionVetoed { .. } => "compaction_vetoed",
            Event::TitleReady { .. } => "title_ready",
            Event::Abort { .. } => "abort",
            Event::StoreWriteFailed { .. } => "store_write_failed",
            Event::RunEndCommitted => "run_end_committed",
            Event::Steer { .. } => "steer",
            Event::Subtask { .. } => "subtask",
            Event::SwitchModel { .. } => "switch_model",
            Event::SetTools { .. } => "set_tools",
        }
    }
}
