//! The tool-call lifecycle: [`Calls`], the part of the inner machine's data a tool call's rows
//! read and write (the committed message's calls, the outbox, the step's configuration, request
//! and ending), borrowed from it by [`ProcessData::calls`]. The committed (or resumed) message's
//! calls become slots, each fed its tool-call chart events ([`Calls::call_event`]: the generated
//! dispatch picks the row, the slot moves along it, the row's action runs), and the inner
//! machine's tool rows ask the calls to start, gate, approve, deny, answer, kill or close.

use std::collections::HashMap;

use crate::agent_event::AgentEvent;
use crate::chart::{ProcessRow, ToolCallEventKind, ToolCallRow, ToolCallState};
use crate::effect::Effect;
use crate::entry::Entry;
use crate::event::{ApprovalDecision, GateVerdict, KillPolicy};
use crate::message::{AssistantMessage, ToolCall, ToolResult, ToolStatus};
use crate::model::ModelRequest;
use crate::outbox::Outbox;
use crate::process::call_dispatch;
use crate::process::call_guards::Facts;
use crate::process::config::{LoopAction, StepConfig};
use crate::process::context::{Ending, ToolCalls};
use crate::process::data::ProcessData;
use crate::process::deadlines::{approval_timer, tool_timer};
use crate::process::slots::{Slot, Slots};
use crate::step::Transition;
use crate::tool_check::ArgumentsRejected;
use crate::tool_rules::RuleAction;

/// What the tool-call lifecycle works on: the inner machine's data without the model attempt
/// (only its request, read). The tool-call chart's guards, actions and generated dispatch take
/// this, never the whole [`ProcessData`].
pub(crate) struct Calls<'a> {
    /// The committed message's calls and what decides them beyond the configuration.
    pub(crate) tools: &'a mut ToolCalls,
    /// What the current handle produces.
    pub(crate) outbox: &'a mut Outbox<ProcessRow>,
    /// How the step ends: a refused loop or a rejection asks the run to stop after it.
    pub(crate) ending: &'a mut Ending,
    /// The step's configuration.
    pub(crate) cfg: &'a StepConfig,
    /// The step's request: the offered tools, and the run and model-call ids the calls'
    /// entries and timers carry.
    pub(crate) request: &'a ModelRequest,
}

impl ProcessData {
    /// The tool-call lifecycle's view of the data.
    pub(crate) fn calls(&mut self) -> Calls<'_> {
        Calls {
            tools: &mut self.tools,
            outbox: &mut self.outbox,
            ending: &mut self.ending,
            cfg: &self.cfg,
            request: &self.attempt.request,
        }
    }
}

impl Calls<'_> {
    /// Makes the committed message's calls slots (with the runtime's schema verdicts, named by
    /// the calls' message-local ids `local_ids`) and feeds each its `Commit` event, announcing
    /// a doom loop first; then starts the queued calls.
    pub(crate) fn commit(
        &mut self,
        message: AssistantMessage,
        local_ids: &[String],
        rejected: &[ArgumentsRejected],
    ) {
        // The first verdict on each call id (ids are unique in a well-formed message). The
        // runtime names a call by its id within the message alone: a call whose id was also
        // derived from the run's context has another id here.
        let mut verdicts: HashMap<&str, &ArgumentsRejected> =
            HashMap::with_capacity(rejected.len());
        for r in rejected {
            verdicts.entry(r.tool_call_id.as_str()).or_insert(r);
        }
        let slots = message
            .tool_calls
            .iter()
            .zip(local_ids)
            .map(|(call, local)| {
                let mut slot = Slot::new(call.clone());
                slot.rejected = verdicts.get(local.as_str()).map(|v| {
                    let mut v = (*v).clone();
                    v.tool_call_id.clone_from(&call.id);
                    v
                });
                slot.policy = self.cfg.policy(call);
                slot
            })
            .collect();
        self.tools.slots = Slots::new(slots);
        // The run of identical signatures at the end of the history: its signature and length
        // (the history is the run's earlier calls, then this message's calls so far).
        let recent = &self.tools.recent;
        let mut last = recent.last().cloned();
        let same = |s: &&(String, String)| Some(*s) == last.as_ref();
        let mut repeats = recent.iter().rev().take_while(same).count() as u32;
        for (i, call) in message.tool_calls.iter().enumerate() {
            let signature = Some((call.name.clone(), call.arguments.to_string()));
            repeats = if last == signature { repeats + 1 } else { 1 };
            last = signature;
            let looped = self.cfg.doom_loop.filter(|p| repeats >= p.threshold);
            if let Some(policy) = looped {
                self.outbox.emit(AgentEvent::LoopDetected {
                    tool_call_id: Some(call.id.clone()),
                    pattern: vec![call.name.clone()],
                    repeats,
                    action: match policy.action {
                        LoopAction::Ask => "ask".into(),
                        LoopAction::Stop => "stop".into(),
                    },
                    kind: Default::default(),
                    path: None,
                });
            }
            let looped = looped.map(|p| p.action);
            self.call_event(
                i,
                ToolCallEventKind::Commit,
                Facts::Commit { looped, repeats },
            );
        }
        self.ending.committed = Some(message);
        self.start_queued();
    }

    /// Loads a committed message and its known results and feeds each call its `Restore`
    /// event: a call with a result keeps it, the others are decided again by the rules the run
    /// resumes with. Nothing is persisted for the known results.
    pub(crate) fn resume(&mut self, message: AssistantMessage, results: Vec<ToolResult>) {
        // The first known result of each call id (as a linear search would find it).
        let mut known: HashMap<&str, &ToolResult> = HashMap::with_capacity(results.len());
        for r in &results {
            known.entry(r.tool_call_id.as_str()).or_insert(r);
        }
        let slots = message
            .tool_calls
            .iter()
            .map(|call| {
                let mut slot = Slot::new(call.clone());
                slot.policy = self.cfg.policy(call);
                slot
            })
            .collect();
        self.tools.slots = Slots::new(slots);
        for (i, call) in message.tool_calls.iter().enumerate() {
            let stored = known.get(call.id.as_str()).copied();
            self.call_event(i, ToolCallEventKind::Restore, Facts::Restore { stored });
        }
        self.ending.committed = Some(message);
    }

    /// Feeds slot `i` a tool-call chart event: the generated dispatch picks the row (the first
    /// of the call's state and superstates whose guard holds), the call moves along it (the
    /// one place), the transition is recorded with the oracle's verdict, and the row's action
    /// runs; in debug
    /// builds what the action produced is checked against the row's declared effects. `None`
    /// when no row of the call's state takes the event (nothing happens).
    pub(crate) fn call_event(
        &mut self,
        i: usize,
        event: ToolCallEventKind,
        facts: Facts<'_>,
    ) -> Option<ToolCallRow> {
        let row = call_dispatch::select(event, self, i, &facts)?;
        // The row the guards select, evaluated before the move.
        let state = self.tools.slots.get(i).state();
        let verdict = call_dispatch::expected(state, event, self, i, &facts);
        let (from, to) = self.tools.slots.apply(i, row);
        let call = self.tools.slots.get(i).call.id.clone();
        let transition = Transition::ToolCall {
            index: i,
            call,
            from,
            event,
            to,
            row,
        };
        self.outbox.transitions.push(transition);
        let check = ToolCallRow::guard_check(from.name(), event.name(), Some(row), verdict);
        self.outbox.checks.push(check);
        let mark = self.outbox.out.len();
        call_dispatch::act(row, self, i, from, &facts);
        if crate::chart::ORACLE {
            let own: Vec<String> = self.outbox.out[mark..]
                .iter()
                .map(crate::chart::effect_name)
                .collect();
            self.outbox.effect_checks.extend(row.effect_check(&own));
        }
        Some(row)
    }

    /// The cached result for an identical earlier call of a pure tool (R-TOOL-6).
    pub(crate) fn cached(&self, call: &ToolCall) -> Option<&crate::tool_cache::Cached> {
        if !self.cfg.is_pure(&call.name) {
            return None;
        }
        self.tools.cache.get(call)
    }

    /// Why slot `i`'s deciding rule denies it (`denied` when the rule is gone).
    pub(crate) fn denial(&self, i: usize) -> String {
        let policy = &self.tools.slots.get(i).policy;
        let rule = policy.rule.filter(|_| policy.action == RuleAction::Deny);
        rule.and_then(|r| Some(self.cfg.tool_rules.get(r)?.denial(r)))
            .unwrap_or_else(|| "denied".into())
    }

    /// `tool_rule_matched` for slot `i` if a rule decided it (rows that act on the rules'
    /// decision call this).
    pub(crate) fn announce_rule(&mut self, i: usize) {
        let slot = self.tools.slots.get(i);
        let policy = &slot.policy;
        let Some(rule) = policy.rule else {
            return;
        };
        let event = AgentEvent::ToolRuleMatched {
            tool_call_id: slot.call.id.clone(),
            name: slot.call.name.clone(),
            rule,
            action: policy.action,
            // A denied call never runs: it has no deadline.
            timeout_ms: policy
                .timeout_ms
                .filter(|_| policy.action != RuleAction::Deny),
        };
        self.outbox.emit(event);
    }

    /// Gives slot `i`, which a chart row has just ended, its result (`status`, `content`):
    /// persisted and announced.
    pub(crate) fn record_result(&mut self, i: usize, status: ToolStatus, content: String) {
        let call = &self.tools.slots.get(i).call;
        let result = ToolResult {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            content,
            status,
        };
        self.outbox.persist(Entry::ToolResult {
            run_id: self.request.run_id.clone(),
            result: result.clone(),
        });
        self.outbox.emit(AgentEvent::tool_end(&result));
        if result.status == ToolStatus::Completed && result.name == crate::todo::WRITE_TODOS_TOOL {
            if let Some(todos) = crate::todo::todos_of(&self.tools.slots.get(i).call.arguments) {
                self.outbox.emit(AgentEvent::TodoChange {
                    tool_call_id: result.tool_call_id.clone(),
                    todos,
                });
            }
        }
        self.tools.slots.get_mut(i).result = Some(result);
    }

    /// Runs slot `i`: its start marker first (R-IDEM-6), then the tool, then its deadline.
    pub(crate) fn run(&mut self, i: usize) {
        let call = self.tools.slots.get(i).call.clone();
        self.outbox.persist(Entry::ToolStarted {
            run_id: self.request.run_id.clone(),
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
        });
        self.outbox.emit(AgentEvent::ToolStart {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
        self.outbox.push(Effect::RunTool { call });
        if let Some(delay_ms) = self.tools.slots.get(i).policy.timeout_ms {
            let timer_id = tool_timer(self.request.model_call_index, i);
            self.outbox.push(Effect::StartTimer { timer_id, delay_ms });
        }
    }

    /// Puts slot `i`'s question to the person: the question and the options are the call's
    /// `question` and `options` arguments (a call without a string `question` asks its whole
    /// arguments).
    pub(crate) fn ask_user(&mut self, i: usize) {
        let call = &self.tools.slots.get(i).call;
        // A string as it is, any other value as JSON text.
        let text = |v: &serde_json::Value| v.as_str().map_or_else(|| v.to_string(), Into::into);
        let question = call.arguments.get("question").filter(|q| q.is_string());
        let question = question.map_or_else(|| call.arguments.to_string(), text);
        let options = call.arguments.get("options").and_then(|o| o.as_array());
        let options: Vec<String> = options
            .map(|a| a.iter().map(text).collect())
            .unwrap_or_default();
        let tool_call_id = call.id.clone();
        self.outbox.emit(AgentEvent::AskUser {
            reference: tool_call_id.clone(),
            question: question.clone(),
            options: options.clone(),
        });
        self.outbox.push(Effect::AskUser {
            tool_call_id,
            question,
            options,
        });
        if let Some(delay_ms) = self.cfg.ask_user_timeout_ms {
            let timer_id = tool_timer(self.request.model_call_index, i);
            self.outbox.push(Effect::StartTimer { timer_id, delay_ms });
        }
    }

    /// Ends the deadline timer of slot `i`, which left `from` (running, or waiting for an
    /// answer).
    pub(crate) fn cancel_deadline(&mut self, i: usize, from: ToolCallState) {
        let asks = from == ToolCallState::AwaitingUser;
        let set = if asks {
            self.cfg.ask_user_timeout_ms.is_some()
        } else {
            self.tools.slots.get(i).policy.timeout_ms.is_some()
        };
        if set {
            let timer_id = tool_timer(self.request.model_call_index, i);
            self.outbox.push(Effect::CancelTimer { timer_id });
        }
    }

    /// Starts queued calls: all of them in parallel mode, else one when none runs.
    /// In call order; starting a call never queues another, so each queued call is looked at
    /// once.
    pub(crate) fn start_queued(&mut self) {
        let mut after = None;
        while let Some(i) = self.tools.slots.next(ToolCallState::Queued, after) {
            if !self.cfg.parallel_tools && self.tools.slots.busy() {
                return;
            }
            self.call_event(i, ToolCallEventKind::Start, Facts::None);
            after = Some(i);
        }
    }

    /// Starts slot `i`'s approval timer, if the step has an approval timeout.
    pub(crate) fn start_approval_timer(&mut self, i: usize) {
        if let Some(delay_ms) = self.cfg.approval_timeout_ms {
            let timer_id = approval_timer(self.request.model_call_index, i);
            self.outbox.push(Effect::StartTimer { timer_id, delay_ms });
        }
    }

    /// Ends the approval timer of slot `i`, which is no longer asked about (answered or
    /// closed).
    pub(crate) fn cancel_approval_timer(&mut self, i: usize) {
        if self.cfg.approval_timeout_ms.is_some() {
            let timer_id = approval_timer(self.request.model_call_index, i);
            self.outbox.push(Effect::CancelTimer { timer_id });
        }
    }

    /// The hooks' verdict on gated slot `i` (R-EXT-1), as the chart event it stands for; a
    /// blocked call lets the next queued one start, and an asked call that an "approve always"
    /// covers (this run's, or the session's handed to the run) is answered by it at once.
    pub(crate) fn gated(&mut self, i: usize, verdict: &GateVerdict) {
        let event = match verdict {
            GateVerdict::Allow => ToolCallEventKind::GateAllowed,
            GateVerdict::Modify { .. } => ToolCallEventKind::GateModified,
            GateVerdict::Block { .. } => ToolCallEventKind::GateBlocked,
            GateVerdict::Ask => ToolCallEventKind::GateAsked,
        };
        self.call_event(i, event, Facts::Gate(verdict));
        match verdict {
            GateVerdict::Block { .. } => self.start_queued(),
            GateVerdict::Ask if self.tools.covers(self.tools.slots.get(i)) => {
                self.call_event(i, ToolCallEventKind::Whitelisted, Facts::None);
                self.start_queued_from(i);
            }
            _ => {}
        }
    }

    /// A human approved slot `i` (with new arguments, for `Modified`); "always" also answers
    /// every call of the same scope waiting for approval (R-CTL-4), and the approved call
    /// starts if the parallelism policy lets it.
    pub(crate) fn approved(&mut self, i: usize, decision: &ApprovalDecision, always: bool) {
        let event = match decision {
            ApprovalDecision::Modified { .. } => ToolCallEventKind::Modified,
            _ => ToolCallEventKind::Approved,
        };
        self.call_event(i, event, Facts::Approval(decision));
        if always {
            // "Always" covers the call's command family, not the whole tool (R-CTL-4).
            let scope = crate::tool_rules::approval_scope(&self.tools.slots.get(i).call);
            for j in self.tools.slots.in_state(ToolCallState::NeedsApproval) {
                let other = self.tools.slots.get(j);
                if crate::tool_rules::approval_scope(&other.call) == scope
                    && !other.policy.by_argument
                {
                    self.call_event(j, ToolCallEventKind::Whitelisted, Facts::None);
                }
            }
            self.tools.whitelist.insert(scope);
        }
        self.start_queued_from(i);
    }

    /// Starts slot `i` now if the parallelism policy allows, else leaves it queued.
    fn start_queued_from(&mut self, i: usize) {
        if self.cfg.parallel_tools || !self.tools.slots.busy() {
            self.call_event(i, ToolCallEventKind::Start, Facts::None);
        }
        self.start_queued();
    }

    /// A rejection or approval timeout (row `rejected`): the call gets a denied result; the
    /// run stops after the step (`tool_rejected`) unless auto_resume, which announces the
    /// resume instead.
    pub(crate) fn denied(&mut self, i: usize, decision: &ApprovalDecision) {
        self.outbox.emit(AgentEvent::ApprovalResolved {
            tool_call_id: self.tools.slots.get(i).call.id.clone(),
            decision: decision.clone(),
            status: decision.status(),
        });
        let (why, trigger) = match decision {
            ApprovalDecision::TimedOut { after_ms } => (
                format!("denied: nobody approved the call within {after_ms} ms"),
                "tool_approval_timeout",
            ),
            ApprovalDecision::Rejected { reason } => {
                (format!("denied by user: {reason}"), "tool_rejected")
            }
            _ => (String::from("denied"), "tool_rejected"),
        };
        if self.cfg.auto_resume {
            self.outbox.emit(AgentEvent::AgentResumed {
                trigger: trigger.into(),
            });
        } else {
            self.ending.stop("tool_rejected");
        }
        self.record_result(i, ToolStatus::Denied, why);
    }

    /// Feeds every call without a result, in call order, `event` (`Abort` or `Skip`) under
    /// the kill policy `kill`: the chart kills or spares a running call and closes one that
    /// has not started.
    pub(crate) fn close_open_calls(&mut self, event: ToolCallEventKind, kill: KillPolicy) {
        for i in 0..self.tools.slots.len() {
            if !self.tools.slots.get(i).state().is_terminal() {
                self.call_event(i, event, Facts::Kill(kill));
            }
        }
    }
}
