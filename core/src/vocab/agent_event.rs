//! `AgentEvent`: what observers see (SPEC §9, R-EVT). The machines emit these as
//! `Effect::Emit`; the runtime adds `state_changed` from each step's transitions and delivers
//! them, indexed and timestamped, to the event sink.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::chart::MachineKind;
use crate::entry::Repair;
use crate::error::ModelError;
use crate::event::{ApprovalDecision, ApprovalStatus};
use crate::message::{AssistantMessage, ToolResult, ToolStatus, Usage};
use crate::outcome::{LimitAction, LimitKind};

/// Re-exported from [`outcome`](crate::outcome), where it lives (`agentloop_core::agent_event::Outcome`
/// keeps naming it).
pub use crate::outcome::Outcome;

/// One observable event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentEvent {
    /// A run started. The run is the envelope's `run_id` (as for every event: an event
    /// carries no `run_id` of its own, so its JSON object has each key once).
    RunStart {},
    /// A run ended (completed: final answer, `max_steps` or `stopped`).
    RunEnd {
        /// Outcome.
        outcome: Outcome,
        /// Reason (`final_answer`, `max_steps`, `stopped`, ...).
        reason: String,
        /// Usage of the whole run: the sum of what the steps reported (`null` when no step
        /// reported any: unknown, never zeros).
        usage: Option<Usage>,
        /// The final answer: the text of the last assistant message, as
        /// [`LoopResult::final_text`](crate::react::LoopResult::final_text) gives it (empty
        /// when that message had only tool calls; `None` when the context has no assistant
        /// message).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        final_text: Option<String>,
    },
    /// A run failed.
    RunError {
        /// What went wrong.
        error: String,
    },
    /// The run was aborted (the envelope's `run_id` is empty when the session was idle).
    AgentAbort {
        /// Why.
        reason: String,
    },
    /// A loaded session was repaired before the next request (R-IDEM-7): one event per
    /// repair, all recorded in the session's `repair` entry.
    SessionRepaired {
        /// What was repaired (its `Display` is a readable note).
        repair: Repair,
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
        /// The request's context, oldest first (shared with the request, not copied). The
        /// runtime fills it from the request it sends; the machine's effect (and so a trace,
        /// whose `call_model` effect holds the request) leaves it out.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        messages: Option<crate::model::SharedMessages>,
    },
    /// The response of an attempt started.
    MessageStart {
        /// Step.
        model_call_index: u32,
        /// Attempt.
        attempt: u32,
    },
    /// Visible text (provisional until `response_complete`; drop on `model_turn_retried`);
    /// without the inline tags the step strips (`StepConfig::inline_tags`).
    TextDelta {
        /// Step.
        model_call_index: u32,
        /// Attempt.
        attempt: u32,
        /// The text.
        text: String,
    },
    /// The model reported what it is doing with an inline `<status>…</status>` tag in its
    /// text, emitted when the tag closed; provisional like `text_delta`.
    StatusUpdate {
        /// Step.
        model_call_index: u32,
        /// Attempt.
        attempt: u32,
        /// The tag's body, trimmed.
        text: String,
    },
    /// The model proposed a title for the conversation with an inline `<title>…</title>` tag
    /// in its text, emitted when the tag closed; provisional like `text_delta`.
    TitleGenerated {
        /// Step.
        model_call_index: u32,
        /// Attempt.
        attempt: u32,
        /// The tag's body, trimmed.
        title: String,
    },
    /// The model set out its plan with an inline `<plan>…</plan>` tag in its text,
    /// emitted when the tag closed; provisional like `text_delta`.
    PlanGenerated {
        /// Step.
        model_call_index: u32,
        /// Attempt.
        attempt: u32,
        /// The plan's steps: its non-empty lines without list markers.
        steps: Vec<String>,
    },
    /// A reasoning block started (before its `reasoning_delta` events).
    ReasoningStart {
        /// Step.
        model_call_index: u32,
        /// Attempt.
        attempt: u32,
    },
    /// The reasoning block ended.
    ReasoningEnd {
        /// Step.
        model_call_index: u32,
        /// Attempt.
        attempt: u32,
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
    /// A tool call's arguments are complete (after its `tool_input_delta` events).
    ToolInputEnd {
        /// Call id.
        tool_call_id: String,
    },
    /// The assistant message was committed (R-STR-4). It carries the whole committed message,
    /// so consumers never re-assemble the deltas.
    ResponseComplete {
        /// Step.
        model_call_index: u32,
        /// The step's usage (also in `message.usage`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        /// Number of tool calls (`message.tool_calls.len()`).
        tool_calls: usize,
        /// The committed message: text, reasoning, tool calls, finish reason, usage (boxed:
        /// it keeps every other event small).
        #[serde(default)]
        message: Box<AssistantMessage>,
    },
    /// A step ended (R-IN-5): how, after how many attempts, on
    /// which model, with what usage or error, and where its committed message and tool results
    /// are in the run's messages (the message itself is in `response_complete`). Reported
    /// unless `RunConfig::report_steps` is off. A step aborted while immune tools drain ends,
    /// and is reported, after the run's `agent_abort`.
    StepFinished {
        /// The step's record (boxed: it keeps every other event small).
        step: Box<crate::execute_result::StepRecord>,
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
        /// The server's `retry-after` / `retry-after-ms` hint, when it sent one: the delay
        /// then came from it (capped by `RetryPolicy::retry_after_cap_ms`) instead of the
        /// backoff (R-IN-1). Absent when the delay is the backoff.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
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
    /// A tool call of the committed message came with an id an earlier call of the same
    /// message already had; it runs, and is recorded, under a derived id (`<id>_<n>`) so each
    /// call has its own start marker and result.
    ToolCallIdDerived {
        /// The id the provider sent.
        provided: String,
        /// The id the call is committed, run and recorded under.
        tool_call_id: String,
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
    /// A tool call got its terminal result. Build it with
    /// [`AgentEvent::tool_end`], which bounds the result.
    ToolEnd {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        name: String,
        /// Terminal status.
        status: ToolStatus,
        /// The result's text as the model sees it: the tool's output, or the error's text
        /// when the call did not complete (failed, denied, skipped, ...). At most
        /// [`TOOL_END_RESULT_MAX_BYTES`] bytes, cut at a character boundary; `result_truncated`
        /// says whether it was cut.
        #[serde(default)]
        result: String,
        /// Whether `result` is only the first part of the result.
        #[serde(default)]
        result_truncated: bool,
        /// The whole result's size in bytes (`result.len()` unless truncated).
        #[serde(default)]
        result_bytes: usize,
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
    /// A pure tool's call was answered with the result of an identical earlier call instead
    /// of running (R-TOOL-6).
    ToolCacheHit {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        name: String,
        /// The earlier call whose result was reused.
        cached_from: String,
    },
    /// A tool rule decided a call when it was committed (R-TOOL-3): it runs
    /// (`allow`), waits for a human (`ask`, then `approval_required`) or gets a denied result
    /// without running (`deny`, then `tool_end` with status `denied`). Calls no rule matches
    /// have no such event.
    ToolRuleMatched {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        name: String,
        /// The deciding rule's index in `StepConfig::tool_rules` (the last one that matched).
        rule: usize,
        /// What it decided.
        action: crate::tool_check::RuleAction,
        /// The call's deadline once it runs (the rule's, else the step's per-tool timeout;
        /// none for a denied call).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// The model asks the person a question through the built-in `ask_user` tool; answer
    /// with `Session::respond(reference, answer)`.
    AskUser {
        /// The question's ref: the call's id.
        reference: String,
        /// The question.
        question: String,
        /// The options offered (may be empty: a free answer).
        options: Vec<String>,
    },
    /// The person answered an `ask_user` question.
    UserResponded {
        /// The question's ref.
        reference: String,
        /// The answer.
        answer: String,
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
        /// approved, rejected or timeout.
        status: ApprovalStatus,
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
    /// The final answer does not match the run's output schema (rows
    /// `observing_retry_output`, `observing_output_invalid`).
    OutputInvalid {
        /// What is wrong (the message the model gets with a retry).
        error: String,
        /// Whether the run asks again (else it fails with reason `output_invalid`).
        retrying: bool,
    },
    /// A step failed on `from` and is requested again from `to`, the next model of the run's
    /// fallback chain (row `executing_fallback`).
    ModelFallback {
        /// The model that failed.
        from: String,
        /// The model the step is requested from now.
        to: String,
        /// The step (its `model_call_index`).
        model_call_index: u32,
        /// Why `from` failed.
        error: crate::error::ModelError,
    },
    /// The run reached a usage limit (rows `planning_limit_final` / `planning_limit_stop`);
    /// emitted once per run.
    UsageLimitReached {
        /// Which limit.
        limit: LimitKind,
        /// What the run used (tokens, calls, or US dollars for `cost`).
        used: f64,
        /// The limit.
        max: f64,
        /// What the run does now: one final-answer step, or stop.
        action: LimitAction,
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
        /// What repeats: the same calls (`repeat`, the default, not serialized) or the same
        /// file touched in a tight cycle (`file`).
        #[serde(default, skip_serializing_if = "LoopKind::is_repeat")]
        kind: LoopKind,
        /// The file, for a `file` loop.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
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
    // ---- session control (R-CTL), emitted by the session handle ----
    /// A prompt arrived at the session.
    PromptReceived {
        /// The prompt.
        text: String,
    },
    /// A prompt arrived while a run was busy and waits in the queue (R-CTL-1).
    PromptQueued {
        /// The prompt.
        text: String,
        /// Prompts waiting, including this one.
        queued: usize,
    },
    /// A queued prompt was dropped (`abort` with `clear_queue`, R-CTL-3).
    PromptDropped {
        /// The prompt.
        text: String,
    },
    /// A `before_prompt` hook rejected a prompt.
    PromptRejected {
        /// The prompt.
        text: String,
        /// Why.
        reason: String,
    },
    /// What happened to a `steer` call (R-CTL-2).
    SteeringReceived {
        /// Per-session steering reference, from 1.
        steering_ref: u64,
        /// The message.
        text: String,
        /// Queued, started a run (idle), or rejected.
        status: SteeringStatus,
    },
    /// A run resumed because of an outside signal.
    AgentResumed {
        /// `tool_approved`, `tool_rejected`, `tool_approval_timeout`, `user_respond` (the
        /// person answered an `ask_user` question), `queued_prompt`, `steering` (steering
        /// kept a run going that its last answer would have ended).
        trigger: String,
    },
    /// `approve(call_id, always: true)` whitelisted a tool and command family for the session.
    ToolApprovedAlways {
        /// Tool name.
        tool: String,
        /// Command family (first word of a shell command; the tool name otherwise).
        command_family: String,
    },
    /// A `before_compact` hook vetoed a compaction (R-EXT-1): the run goes on
    /// uncompacted (or fails with `compaction_vetoed` when the model refused the context).
    CompactVetoed {
        /// The hook's reason.
        reason: String,
    },
    /// A `write_todos` call completed: the model's todo
    /// list is now `todos` (each call replaces the whole list).
    TodoChange {
        /// The call that set it.
        tool_call_id: String,
        /// The whole list.
        todos: Vec<crate::todo::Todo>,
    },
    /// `update_tools` attached and detached a batch of tools at once (R-CTL-6): the
    /// next step sees all of the change or, on an error, none of it.
    ToolsUpdated {
        /// Names attached (or replaced).
        attached: Vec<String>,
        /// Names detached.
        detached: Vec<String>,
    },
    /// `attach_tool` added a tool (R-CTL-6).
    ToolAttached {
        /// Tool name.
        name: String,
    },
    /// `detach_tool` removed a tool (R-CTL-6).
    ToolDetached {
        /// Tool name.
        name: String,
    },
    // ---- tools and loop health (R-TOOL, R-EXT-1), emitted by the runtime ----
    /// A `before_tool` hook blocked a call; the model sees a denied result.
    ToolBlocked {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        name: String,
        /// Why.
        reason: String,
    },
    /// How long a tool call took: emitted by the
    /// runtime when the call's task ends, so it is not in the trace (its times are the clock
    /// port's readings).
    ToolMetrics {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        name: String,
        /// When the call started, in milliseconds since the Unix epoch (clock port).
        #[serde(default)]
        started_at_ms: u64,
        /// When it ended (after the `after_tool` hook and any offload).
        #[serde(default)]
        ended_at_ms: u64,
        /// `ended_at_ms - started_at_ms`.
        duration_ms: u64,
    },
    /// A tool result over the size limit was written to a file; the model sees a preview
    /// and the path (R-TOOL-5).
    LargeResultOffloaded {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        name: String,
        /// Where the full result is.
        path: String,
        /// Size of the full result.
        bytes: usize,
    },
    // ---- usage and cost (R-CTX-3) ----
    /// Usage and cost of one step (`model_call_index` set) or of a whole run (unset). A run's
    /// report is emitted on every ending, also on abort (usage so far is kept), when some step
    /// reported usage; a run whose steps reported none has no total (unknown, not zeros).
    UsageReport {
        /// The step, or none for the run total.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_call_index: Option<u32>,
        /// Model name the price was looked up with.
        model: String,
        /// Tokens.
        usage: Usage,
        /// Cost in USD, when the price table knows the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
    // ---- a program's own events ----
    /// An event of the program's own kind, emitted by one of its tools or hooks during a run
    /// (`agentloop::runtime::emit_custom`). Not recorded in traces: it is no decision of the
    /// machines.
    Custom {
        /// The program's name for the kind of event.
        name: String,
        /// Its data.
        payload: Value,
    },
    // ---- subagents (R-EXT-2) ----
    /// A subagent tool started a child session.
    SubagentStart {
        /// The parent's tool call.
        tool_call_id: String,
        /// The child session id.
        child_session: String,
        /// The task given to the child.
        description: String,
    },
    /// A child session finished.
    SubagentEnd {
        /// The parent's tool call.
        tool_call_id: String,
        /// The child session id.
        child_session: String,
        /// How the child's run ended.
        outcome: Outcome,
        /// The child's final text (or error).
        result: String,
    },
    /// An event of a child session, forwarded wrapped.
    SubagentEvent {
        /// The parent's tool call.
        tool_call_id: String,
        /// The child session id.
        child_session: String,
        /// The child's event, with the child's index.
        event: Box<EventEnvelope>,
    },
}

/// What happened to a steering message (R-CTL-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SteeringStatus {
    /// Queued; merged at the next step boundary.
    Queued,
    /// The session was idle: the message started a run, like a prompt.
    StartedRun,
    /// The steering queue was full (`QueueFull`).
    RejectedFull,
    /// A `before_steering` hook rejected it.
    RejectedHook,
}

/// The most bytes of a tool's result a `tool_end` event carries (16 KiB); the rest is cut,
/// with `result_truncated` set and `result_bytes` the whole size. The model and the session
/// log still get the whole result.
pub const TOOL_END_RESULT_MAX_BYTES: usize = 16 * 1024;

impl AgentEvent {
    /// The `tool_end` event of `result`: its text bounded to [`TOOL_END_RESULT_MAX_BYTES`]
    /// (cut at a character boundary, flagged in `result_truncated`).
    pub fn tool_end(result: &ToolResult) -> AgentEvent {
        let content = &result.content;
        let mut cut = content.len().min(TOOL_END_RESULT_MAX_BYTES);
        while !content.is_char_boundary(cut) {
            cut -= 1;
        }
        AgentEvent::ToolEnd {
            tool_call_id: result.tool_call_id.clone(),
            name: result.name.clone(),
            status: result.status,
            result: content.get(..cut).unwrap_or_default().to_string(),
            result_truncated: cut < content.len(),
            result_bytes: content.len(),
        }
    }

    /// Whether the event is a token of a model's answer: a text or reasoning delta, or the start
    /// of a tool call's input. Time to first token is a request's time to the first of these.
    pub fn is_token(&self) -> bool {
        matches!(
            self,
            AgentEvent::TextDelta { .. }
                | AgentEvent::ReasoningDelta { .. }
                | AgentEvent::ToolInputStart { .. }
        )
    }

    /// The event's type name (its serialized `type`).
    pub fn type_name(&self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string))
            .unwrap_or_default()
    }
}

/// An event as delivered: indexed (monotonic per agent), timestamped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventEnvelope {
    /// Monotonically increasing index.
    pub index: u64,
    /// Milliseconds since the Unix epoch.
    pub ts_ms: u64,
    /// The run (empty for a session event outside any run).
    pub run_id: String,
    /// The event: its `type` and fields, flattened into the envelope's object (no event has
    /// a field named `index`, `ts_ms` or `run_id`).
    #[serde(flatten)]
    pub event: AgentEvent,
}

/// What a `loop_detected` event found repeating.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LoopKind {
    /// The same calls (or cycle of calls) again and again (R-TOOL-4).
    #[default]
    Repeat,
    /// The same file read or written again and again within a short window of calls, whatever
    /// the other arguments.
    File,
}

impl LoopKind {
    /// Whether this is [`LoopKind::Repeat`] (left out of the JSON).
    pub fn is_repeat(&self) -> bool {
        matches!(self, LoopKind::Repeat)
    }
}
