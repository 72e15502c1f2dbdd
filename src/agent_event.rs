//! `AgentEvent`: what observers see (SPEC §9, R-EVT). The machines emit these as
//! `Effect::Emit`; the runtime adds `state_changed` from each step's transitions and delivers
//! them, indexed and timestamped, to the event sink.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::chart::MachineKind;
use crate::error::ModelError;
use crate::event::ApprovalDecision;
use crate::message::{ToolStatus, Usage};

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Ended normally.
    Completed,
    /// Ended with an error.
    Failed,
    /// Aborted.
    Aborted,
}

impl Outcome {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Aborted => "aborted",
        }
    }
}

/// One observable event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    /// A run started.
    RunStart {
        /// The run.
        run_id: String,
    },
    /// A run ended (completed: final answer, `max_steps` or `stopped`).
    RunEnd {
        /// The run.
        run_id: String,
        /// Outcome.
        outcome: Outcome,
        /// Reason (`final_answer`, `max_steps`, `stopped`, ...).
        reason: String,
        /// Usage of the whole run.
        usage: Usage,
    },
    /// A run failed.
    RunError {
        /// The run.
        run_id: String,
        /// What went wrong.
        error: String,
    },
    /// The run was aborted.
    AgentAbort {
        /// The run.
        run_id: String,
        /// Why.
        reason: String,
    },
    /// A loaded session was repaired before the next request (R-IDEM-7).
    SessionRepaired {
        /// What was repaired, one note per tool call.
        notes: Vec<String>,
    },
    /// A machine changed state (added by the runtime, with a timestamp in the envelope).
    StateChanged {
        /// Which machine.
        machine: MachineKind,
        /// Previous state.
        from: String,
        /// New state.
        to: String,
        /// The event that caused it.
        event: String,
    },
    /// A model request is being sent.
    RequestStart {
        /// Step.
        model_call_index: u32,
        /// Attempt.
        attempt: u32,
        /// Model name.
        model: String,
    },
    /// The response of an attempt started.
    MessageStart {
        /// Step.
        model_call_index: u32,
        /// Attempt.
        attempt: u32,
    },
    /// Visible text (provisional until `response_complete`; drop on `model_turn_retried`).
    TextDelta {
        /// Step.
        model_call_index: u32,
        /// Attempt.
        attempt: u32,
        /// The text.
        text: String,
    },
    /// Reasoning text.
    ReasoningDelta {
        /// Step.
        model_call_index: u32,
        /// Attempt.
        attempt: u32,
        /// The text.
        text: String,
    },
    /// A tool call's arguments started streaming.
    ToolInputStart {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        name: String,
    },
    /// A fragment of a tool call's arguments.
    ToolInputDelta {
        /// Call id.
        tool_call_id: String,
        /// Fragment.
        delta: String,
    },
    /// The assistant message was committed.
    ResponseComplete {
        /// Step.
        model_call_index: u32,
        /// The step's usage.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        /// Number of tool calls.
        tool_calls: usize,
    },
    /// A retry was scheduled (R-IN-1).
    Retry {
        /// Step.
        model_call_index: u32,
        /// The attempt that will run next.
        attempt: u32,
        /// Delay before it.
        delay_ms: u64,
        /// The error that caused it.
        reason: String,
    },
    /// The failed attempt's provisional output must be dropped (R-IN-6).
    ModelTurnRetried {
        /// Step.
        model_call_index: u32,
        /// The new attempt.
        attempt: u32,
    },
    /// A request failed for good.
    StreamError {
        /// The error.
        error: ModelError,
    },
    /// No delta within the stall timeout.
    StreamStalled {
        /// Step.
        model_call_index: u32,
        /// Attempt.
        attempt: u32,
        /// How long.
        after_ms: u64,
    },
    /// The provider reported a context overflow.
    ContextOverflow {
        /// The error.
        message: String,
    },
    /// The committed message asks for tools.
    ToolCalls {
        /// How many.
        count: usize,
    },
    /// A tool started.
    ToolStart {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        name: String,
        /// Arguments.
        arguments: Value,
    },
    /// A tool call got its terminal result.
    ToolEnd {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        name: String,
        /// Terminal status.
        status: ToolStatus,
    },
    /// A running tool is being killed (abort).
    ToolKilled {
        /// Call id.
        tool_call_id: String,
    },
    /// The model called a tool that is not offered.
    ToolCallUnknown {
        /// Call id.
        tool_call_id: String,
        /// The unknown name.
        name: String,
    },
    /// A call waits for a human.
    ApprovalRequired {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        name: String,
        /// Arguments.
        arguments: Value,
    },
    /// A human decided.
    ApprovalResolved {
        /// Call id.
        tool_call_id: String,
        /// The decision.
        decision: ApprovalDecision,
    },
    /// A steering message was merged into the context (R-CTL-2).
    SteeringApplied {
        /// The message.
        text: String,
    },
    /// A call was skipped because steering arrived (policy `skip_remaining`).
    ToolSkippedForSteering {
        /// Call id.
        tool_call_id: String,
    },
    /// The model changed (R-CTL-5).
    ModelSwitched {
        /// Previous model.
        from: String,
        /// New model.
        to: String,
    },
    /// A doom loop or repeated pattern of tool calls (R-TOOL-4).
    LoopDetected {
        /// The call that completed the loop, if one call repeats.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_call_id: Option<String>,
        /// The repeating tool names.
        pattern: Vec<String>,
        /// How many times it repeated.
        repeats: u32,
        /// What the run does: `ask` (approval) or `stop`.
        action: String,
    },
    /// Compaction started.
    CompactStart {
        /// Why (`threshold`, `overflow`, `budget`).
        reason: String,
        /// Context size before.
        messages: usize,
    },
    /// Compaction finished.
    CompactEnd {
        /// Messages removed.
        removed: usize,
    },
}

impl AgentEvent {
    /// The event's type name (its serialized `type`).
    pub fn type_name(&self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string))
            .unwrap_or_default()
    }
}
