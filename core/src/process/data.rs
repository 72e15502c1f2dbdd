//! The inner machine's data and the pure helpers its handlers use to request effects.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::agent_event::AgentEvent;
use crate::chart::ProcessRow;
use crate::effect::Effect;
use crate::entry::Entry;
use crate::error::ModelError;
use crate::event::KillPolicy;
use crate::event::{AttemptId, Event};
use crate::message::{AssistantMessage, MessageDelta, ToolCall, ToolResult, ToolStatus};
use crate::model::ModelRequest;
use crate::process::accumulate::MessageAssembler;
use crate::process::config::{ApprovalPolicy, LoopAction, StepConfig};
pub(crate) use crate::process::slots::{Slot, SlotState, Slots};

/// How a step ended.
#[derive(Clone, Debug, PartialEq)]
pub enum StepOutcome {
    /// Message committed and every call has a result.
    Success,
    /// The context does not fit.
    ContextOverflow(ModelError),
    /// The step failed.
    Failed(ModelError),
    /// The step was aborted.
    Aborted,
}

/// Everything the inner machine knows. Passed to the statig handlers as their context.
#[derive(Clone, Debug)]
pub struct ProcessData {
    pub(crate) cfg: StepConfig,
    pub(crate) request: ModelRequest,
    pub(crate) whitelist: BTreeSet<String>,
    pub(crate) seen: HashSet<u64>,
    pub(crate) acc: MessageAssembler,
    /// How many times `acc` was started afresh (a new attempt): with the step and the
    /// assembler's revision it identifies the partial message (see `Process::partial_mark`).
    pub(crate) acc_epoch: u64,
    pub(crate) committed: Option<AssistantMessage>,
    pub(crate) slots: Slots,
    pub(crate) outcome: Option<StepOutcome>,
    pub(crate) retries: u32,
    /// The current attempt's request as a hook rewrote it (cleared for each attempt).
    pub(crate) sent: Option<Box<ModelRequest>>,
    /// Signatures (tool name, canonical arguments) of the run's earlier calls, oldest first.
    pub(crate) recent: Vec<(String, String)>,
    /// A doom loop with action `stop` was detected: the outer machine stops the run.
    pub(crate) stop_requested: bool,
    /// The leaf state before the current handle (set by the facade).
    pub(crate) state: crate::chart::ProcessState,
    // Per-handle outputs, drained by the facade.
    pub(crate) out: Vec<Effect>,
    pub(crate) row: Option<ProcessRow>,
    pub(crate) unhandled: bool,
}

impl ProcessData {
    pub(crate) fn new(cfg: StepConfig, request: ModelRequest, whitelist: BTreeSet<String>) -> Self {
        ProcessData {
            cfg,
            request,
            whitelist,
            seen: HashSet::new(),
            acc: MessageAssembler::default(),
            acc_epoch: 0,
            committed: None,
            slots: Slots::default(),
            outcome: None,
            retries: 0,
            sent: None,
            recent: Vec::new(),
            stop_requested: false,
            state: crate::chart::ProcessState::INITIAL,
            out: Vec::new(),
            row: None,
            unhandled: false,
        }
    }

    /// Records the chart row a handler took.
    pub(crate) fn take(&mut self, row: ProcessRow) {
        debug_assert!(
            self.row.is_none(),
            "two rows in one handle: {:?} then {row:?}",
            self.row
        );
        self.row = Some(row);
    }

    fn emit(&mut self, event: AgentEvent) {
        self.out.push(Effect::Emit { event });
    }

    fn persist(&mut self, entry: Entry) {
        self.out.push(Effect::Persist { entry });
    }

    pub(crate) fn attempt_id(&self) -> AttemptId {
        AttemptId {
            run_id: self.request.run_id.clone(),
            model_call_index: self.request.model_call_index,
            attempt: self.request.attempt,
        }
    }

    pub(crate) fn is_current(&self, a: &AttemptId) -> bool {
        a.attempt == self.request.attempt
            && a.model_call_index == self.request.model_call_index
            && a.run_id == self.request.run_id
    }

    /// Whether a stream event belongs to another run, step or attempt, or repeats a seq.
    pub(crate) fn is_stale(&self, event: &Event) -> bool {
        match event {
            Event::Delta { attempt, seq, .. } => {
                !self.is_current(attempt) || self.seen.contains(seq)
            }
            Event::StreamOpened { attempt }
            | Event::RequestRewritten { attempt, .. }
            | Event::Done { attempt }
            | Event::TransportError { attempt, .. }
            | Event::ContextOverflow { attempt, .. }
            | Event::StreamStalled { attempt, .. } => !self.is_current(attempt),
            _ => false,
        }
    }

    pub(crate) fn timer_id(&self) -> u64 {
        u64::from(self.request.model_call_index) * 1_000_000 + u64::from(self.request.attempt)
    }

    /// Sends the current attempt's request.
    pub(crate) fn call_model(&mut self) {
        self.seen.clear();
        self.sent = None;
        self.new_assembler();
        let request = self.request.clone();
        self.emit(AgentEvent::RequestStart {
            model_call_index: request.model_call_index,
            attempt: request.attempt,
            model: request.model.clone(),
        });
        self.out.push(Effect::CallModel { request });
    }

    /// Starts the message afresh (a new attempt discards the partial output).
    fn new_assembler(&mut self) {
        self.acc = MessageAssembler::default();
        self.acc_epoch += 1;
    }

    /// Whether a failed attempt may be retried.
    pub(crate) fn retry_budget_left(&self, retryable: bool) -> bool {
        retryable && self.retries < self.cfg.retry.max_retries
    }

    /// Schedules the next attempt: discards partial output, starts the backoff timer.
    pub(crate) fn schedule_retry(&mut self, reason: String, retry_after_ms: Option<u64>) {
        let delay_ms = self.cfg.retry.delay_ms(self.retries + 1, retry_after_ms);
        self.request.attempt += 1;
        self.retries += 1;
        self.new_assembler();
        self.seen.clear();
        let timer_id = self.timer_id();
        self.out.push(Effect::StartTimer { timer_id, delay_ms });
        self.emit(AgentEvent::Retry {
            model_call_index: self.request.model_call_index,
            attempt: self.request.attempt,
            delay_ms,
            reason,
        });
    }

    pub(crate) fn retried(&mut self) {
        self.emit(AgentEvent::ModelTurnRetried {
            model_call_index: self.request.model_call_index,
            attempt: self.request.attempt,
        });
        self.call_model();
    }

    pub(crate) fn cancel_model(&mut self) {
        let attempt = self.attempt_id();
        self.out.push(Effect::CancelModel { attempt });
    }

    pub(crate) fn fail(&mut self, error: ModelError) {
        self.emit(AgentEvent::StreamError {
            error: error.clone(),
        });
        self.outcome = Some(StepOutcome::Failed(error));
    }

    pub(crate) fn overflow(&mut self, error: ModelError) {
        self.emit(AgentEvent::ContextOverflow {
            message: error.message.clone(),
        });
        self.outcome = Some(StepOutcome::ContextOverflow(error));
    }

    pub(crate) fn stalled(&mut self, after_ms: u64) {
        self.cancel_model();
        self.emit(AgentEvent::StreamStalled {
            model_call_index: self.request.model_call_index,
            attempt: self.request.attempt,
            after_ms,
        });
    }

    pub(crate) fn opened(&mut self) {
        self.emit(AgentEvent::MessageStart {
            model_call_index: self.request.model_call_index,
            attempt: self.request.attempt,
        });
    }

    /// Accumulates a new delta and emits its observable form.
    pub(crate) fn delta(&mut self, seq: u64, delta: &MessageDelta) {
        self.seen.insert(seq);
        self.acc.push(delta);
        let (idx, attempt) = (self.request.model_call_index, self.request.attempt);
        let event = match delta {
            MessageDelta::TextDelta { text } => Some(AgentEvent::TextDelta {
                model_call_index: idx,
                attempt,
                text: text.clone(),
            }),
            MessageDelta::ReasoningDelta { text } => Some(AgentEvent::ReasoningDelta {
                model_call_index: idx,
                attempt,
                text: text.clone(),
            }),
            MessageDelta::ToolInputStart { id, name } => Some(AgentEvent::ToolInputStart {
                tool_call_id: id.clone(),
                name: name.clone(),
            }),
            MessageDelta::ToolInputDelta { id, delta } => Some(AgentEvent::ToolInputDelta {
                tool_call_id: id.clone(),
                delta: delta.clone(),
            }),
            _ => None,
        };
        if let Some(event) = event {
            self.emit(event);
        }
    }

    /// Whether the accumulated message has tool calls.
    pub(crate) fn has_tool_calls(&self) -> bool {
        self.acc.has_tool_calls()
    }

    /// Commits the accumulated message (R-STR-4) and, when it has tool calls, schedules them.
    pub(crate) fn commit(&mut self) {
        let message = self.acc.message();
        self.persist(Entry::Assistant {
            run_id: self.request.run_id.clone(),
            model_call_index: self.request.model_call_index,
            message: message.clone(),
        });
        self.emit(AgentEvent::ResponseComplete {
            model_call_index: self.request.model_call_index,
            usage: message.usage,
            tool_calls: message.tool_calls.len(),
            message: Box::new(message.clone()),
        });
        if !message.tool_calls.is_empty() {
            self.emit(AgentEvent::ToolCalls {
                count: message.tool_calls.len(),
            });
        }
        let offered: BTreeSet<&str> = self.request.tools.iter().map(|t| t.name.as_str()).collect();
        let mut slots = Vec::with_capacity(message.tool_calls.len());
        let mut immediate = Vec::new();
        // The run of identical signatures at the end of the history: its signature and length
        // (the history is the run's earlier calls, then this message's calls so far).
        let mut last: Option<(String, String)> = self.recent.last().cloned();
        let mut run = last.as_ref().map_or(0, |l| {
            self.recent.iter().rev().take_while(|s| *s == l).count() as u32
        });
        for call in &message.tool_calls {
            let signature = (call.name.clone(), call.arguments.to_string());
            let repeats = if last.as_ref() == Some(&signature) {
                run + 1
            } else {
                1
            };
            last = Some(signature);
            run = repeats;
            let looped = self.cfg.doom_loop.filter(|p| repeats >= p.threshold);
            if let Some(policy) = looped {
                immediate.push(AgentEvent::LoopDetected {
                    tool_call_id: Some(call.id.clone()),
                    pattern: vec![call.name.clone()],
                    repeats,
                    action: match policy.action {
                        LoopAction::Ask => "ask".into(),
                        LoopAction::Stop => "stop".into(),
                    },
                });
            }
            let (state, result) = if let Some(why) = &call.invalid_arguments {
                let r = error_result(call, ToolStatus::Error, why.clone());
                (SlotState::Done, Some(r))
            } else if !offered.contains(call.name.as_str()) {
                immediate.push(AgentEvent::ToolCallUnknown {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                });
                let r = error_result(
                    call,
                    ToolStatus::Error,
                    format!("unknown tool: {}", call.name),
                );
                (SlotState::Done, Some(r))
            } else if let Some(policy) = looped {
                match policy.action {
                    LoopAction::Ask => (SlotState::NeedsApproval, None),
                    LoopAction::Stop => {
                        self.stop_requested = true;
                        let why = format!(
                            "refused: `{}` was called {repeats} times in a row with identical arguments (doom loop)",
                            call.name
                        );
                        (
                            SlotState::Done,
                            Some(error_result(call, ToolStatus::Error, why)),
                        )
                    }
                }
            } else if self.needs_approval(call) {
                (SlotState::NeedsApproval, None)
            } else {
                (SlotState::Queued, None)
            };
            slots.push(Slot::new(call.clone(), state, result));
        }
        self.committed = Some(message);
        self.slots = Slots::new(slots);
        for e in immediate {
            self.emit(e);
        }
        for i in self.slots.in_state(SlotState::Done) {
            if let Some(r) = self.slots.get(i).result.clone() {
                self.record_result(i, r);
            }
        }
        self.start_queued();
    }

    /// Loads a committed message and its known results; calls without one are queued (or
    /// wait for approval). Nothing is persisted for the known results.
    pub(crate) fn resume(&mut self, message: AssistantMessage, results: Vec<ToolResult>) {
        // The first known result of each call id (as a linear search would find it).
        let mut known: HashMap<&str, &ToolResult> = HashMap::with_capacity(results.len());
        for r in &results {
            known.entry(r.tool_call_id.as_str()).or_insert(r);
        }
        let slots = message
            .tool_calls
            .iter()
            .map(|call| match known.get(call.id.as_str()) {
                Some(r) => Slot::new(call.clone(), SlotState::Done, Some((*r).clone())),
                None => {
                    let state = if self.needs_approval(call) {
                        SlotState::NeedsApproval
                    } else {
                        SlotState::Queued
                    };
                    Slot::new(call.clone(), state, None)
                }
            })
            .collect();
        self.slots = Slots::new(slots);
        self.committed = Some(message);
    }

    fn needs_approval(&self, call: &ToolCall) -> bool {
        self.cfg.approval.get(&call.name) == Some(&ApprovalPolicy::Always)
            && !self.whitelist.contains(&call.name)
    }

    fn record_result(&mut self, i: usize, result: ToolResult) {
        self.persist(Entry::ToolResult {
            run_id: self.request.run_id.clone(),
            result: result.clone(),
        });
        self.emit(AgentEvent::ToolEnd {
            tool_call_id: result.tool_call_id.clone(),
            name: result.name.clone(),
            status: result.status,
        });
        self.slots.set_state(i, SlotState::Done);
        self.slots.get_mut(i).result = Some(result);
    }

    /// Starts slot `i`: asks the `before_tool` hooks first when the step gates tools and the
    /// call has not been gated yet, else runs it.
    fn start(&mut self, i: usize) {
        if self.cfg.gate_tools && !self.slots.get(i).gated {
            self.slots.set_state(i, SlotState::Gating);
            self.slots.get_mut(i).gated = true;
            let call = self.slots.get(i).call.clone();
            self.out.push(Effect::GateTool { call });
            return;
        }
        self.run(i);
    }

    /// Runs slot `i`: its start marker first (R-IDEM-6), then the tool.
    fn run(&mut self, i: usize) {
        let call = self.slots.get(i).call.clone();
        self.slots.set_state(i, SlotState::Running);
        self.persist(Entry::ToolStarted {
            run_id: self.request.run_id.clone(),
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
        });
        self.emit(AgentEvent::ToolStart {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
        self.out.push(Effect::RunTool { call });
    }

    /// Starts queued calls: all of them in parallel mode, else one when none runs.
    /// In call order; starting a call never queues another, so each queued call is looked at
    /// once.
    pub(crate) fn start_queued(&mut self) {
        let mut after = None;
        while let Some(i) = self.slots.next(SlotState::Queued, after) {
            if !self.cfg.parallel_tools && self.slots.busy() {
                return;
            }
            self.start(i);
            after = Some(i);
        }
    }

    pub(crate) fn approval_needed(&self) -> bool {
        self.slots.count(SlotState::NeedsApproval) > 0 && self.slots.count(SlotState::Asking) == 0
    }

    pub(crate) fn all_results(&self) -> bool {
        self.slots.all_done()
    }

    pub(crate) fn ask_approval(&mut self) {
        if let Some(i) = self.slots.first(SlotState::NeedsApproval) {
            self.slots.set_state(i, SlotState::Asking);
            let call = self.slots.get(i).call.clone();
            self.emit(AgentEvent::ApprovalRequired {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
            self.out.push(Effect::RequestApproval { call });
        }
    }

    pub(crate) fn asking(&self, tool_call_id: &str) -> Option<usize> {
        self.slots.find(tool_call_id, SlotState::Asking)
    }

    pub(crate) fn gating(&self, tool_call_id: &str) -> Option<usize> {
        self.slots.find(tool_call_id, SlotState::Gating)
    }

    /// The hooks' verdict on gated slot `i` (R-EXT-1): run it (as it is or with their
    /// arguments), close it with a denied result, or send it down the approval path.
    pub(crate) fn gated(&mut self, i: usize, verdict: &crate::event::GateVerdict) {
        use crate::event::GateVerdict;
        match verdict {
            GateVerdict::Allow => self.run(i),
            GateVerdict::Modify { arguments } => {
                self.slots.get_mut(i).call.arguments = arguments.clone();
                self.run(i);
            }
            GateVerdict::Block { reason } => {
                let call = self.slots.get(i).call.clone();
                self.emit(AgentEvent::ToolBlocked {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                    reason: reason.clone(),
                });
                let r = error_result(&call, ToolStatus::Denied, format!("blocked: {reason}"));
                self.record_result(i, r);
                self.start_queued();
            }
            GateVerdict::Ask => self.slots.set_state(i, SlotState::NeedsApproval),
        }
    }

    pub(crate) fn running(&self, tool_call_id: &str) -> Option<usize> {
        self.slots.find(tool_call_id, SlotState::Running)
    }

    pub(crate) fn tool_finished(&mut self, i: usize, status: ToolStatus, content: String) {
        let call = &self.slots.get(i).call;
        let result = ToolResult {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            content,
            status,
        };
        self.record_result(i, result);
    }

    pub(crate) fn approved(
        &mut self,
        i: usize,
        decision: &crate::event::ApprovalDecision,
        always: bool,
    ) {
        let call = self.slots.get(i).call.clone();
        self.emit(AgentEvent::ApprovalResolved {
            tool_call_id: call.id.clone(),
            decision: decision.clone(),
        });
        if always {
            self.whitelist.insert(call.name.clone());
            for j in self.slots.in_state(SlotState::NeedsApproval) {
                if self.slots.get(j).call.name == call.name {
                    self.slots.set_state(j, SlotState::Queued);
                }
            }
        }
        self.slots.set_state(i, SlotState::Queued);
        self.start_queued_from(i);
    }

    /// Starts slot `i` now if the parallelism policy allows, else leaves it queued.
    fn start_queued_from(&mut self, i: usize) {
        if self.cfg.parallel_tools || !self.slots.busy() {
            self.start(i);
        }
        self.start_queued();
    }

    pub(crate) fn modified(&mut self, i: usize, decision: &crate::event::ApprovalDecision) {
        if let crate::event::ApprovalDecision::Modified { arguments } = decision {
            self.slots.get_mut(i).call.arguments = arguments.clone();
        }
        self.approved(i, decision, false);
    }

    pub(crate) fn rejected(
        &mut self,
        i: usize,
        decision: &crate::event::ApprovalDecision,
        reason: &str,
    ) {
        let call = self.slots.get(i).call.clone();
        self.emit(AgentEvent::ApprovalResolved {
            tool_call_id: call.id.clone(),
            decision: decision.clone(),
        });
        let r = error_result(
            &call,
            ToolStatus::Denied,
            format!("denied by user: {reason}"),
        );
        self.record_result(i, r);
    }

    fn killed_by(&self, kill: KillPolicy, name: &str) -> bool {
        match kill {
            KillPolicy::All => true,
            KillPolicy::None => false,
            KillPolicy::Killable => !self.cfg.immune.contains(name),
        }
    }

    /// Whether, under `kill`, some running call would keep running.
    pub(crate) fn would_drain(&self, kill: KillPolicy) -> bool {
        self.slots
            .in_state(SlotState::Running)
            .into_iter()
            .any(|i| !self.killed_by(kill, &self.slots.get(i).call.name))
    }

    /// Abort in ToolExecuting when some calls keep running: kill per policy, close every call
    /// that did not start or was killed; the survivors' results will be kept (R-CTL-3).
    pub(crate) fn abort_draining(&mut self, kill: KillPolicy) {
        for i in 0..self.slots.len() {
            let running = self.slots.get(i).state() == SlotState::Running;
            if self.slots.get(i).state() == SlotState::Done
                || (running && !self.killed_by(kill, &self.slots.get(i).call.name))
            {
                continue;
            }
            if running {
                let id = self.slots.get(i).call.id.clone();
                self.out.push(Effect::KillTool {
                    tool_call_id: id.clone(),
                });
                self.emit(AgentEvent::ToolKilled { tool_call_id: id });
            }
            let r = error_result(
                &self.slots.get(i).call,
                ToolStatus::Aborted,
                "aborted".into(),
            );
            self.record_result(i, r);
        }
        self.outcome = Some(StepOutcome::Aborted);
    }

    /// Steering with `skip_remaining`: calls not started are skipped, killable running calls
    /// are killed and skipped; immune running calls finish (R-CTL-2).
    pub(crate) fn skip_for_steering(&mut self) {
        for i in 0..self.slots.len() {
            let state = self.slots.get(i).state();
            let id = self.slots.get(i).call.id.clone();
            match state {
                SlotState::Done => continue,
                SlotState::Running
                    if !self.killed_by(KillPolicy::Killable, &self.slots.get(i).call.name) =>
                {
                    continue
                }
                SlotState::Running => self.out.push(Effect::KillTool {
                    tool_call_id: id.clone(),
                }),
                _ => {}
            }
            self.emit(AgentEvent::ToolSkippedForSteering { tool_call_id: id });
            let r = error_result(
                &self.slots.get(i).call,
                ToolStatus::Skipped,
                "skipped: the user sent a steering message".into(),
            );
            self.record_result(i, r);
        }
    }

    /// Abort: cancel the stream or timer, kill running tools, give every call without a
    /// result an `aborted` result (R-CTL-3, R-IDEM-7).
    pub(crate) fn abort(&mut self, in_request: bool, in_retry: bool) {
        if in_request {
            self.cancel_model();
        }
        if in_retry {
            let timer_id = self.timer_id();
            self.out.push(Effect::CancelTimer { timer_id });
        }
        for i in 0..self.slots.len() {
            match self.slots.get(i).state() {
                SlotState::Done => continue,
                SlotState::Running => {
                    let id = self.slots.get(i).call.id.clone();
                    self.out.push(Effect::KillTool {
                        tool_call_id: id.clone(),
                    });
                    self.emit(AgentEvent::ToolKilled { tool_call_id: id });
                }
                _ => {}
            }
            let r = error_result(
                &self.slots.get(i).call,
                ToolStatus::Aborted,
                "aborted".into(),
            );
            self.record_result(i, r);
        }
        self.outcome = Some(StepOutcome::Aborted);
    }

    /// Tool results in the model's call order (R-IN-4).
    pub(crate) fn results_in_call_order(&self) -> Vec<ToolResult> {
        self.slots.iter().filter_map(|s| s.result.clone()).collect()
    }
}

fn error_result(call: &ToolCall, status: ToolStatus, content: String) -> ToolResult {
    ToolResult {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        content,
        status,
    }
}
