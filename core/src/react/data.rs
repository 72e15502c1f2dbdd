//! The outer machine's data and the pure helpers its handlers use to request effects.

use std::collections::BTreeSet;

use crate::agent_event::{AgentEvent, Outcome};
use crate::chart::ProcessState;
use crate::chart::{ReactRow, ReactState};
use crate::context::estimate_tokens;
use crate::effect::Effect;
use crate::entry::Entry;
use crate::error::RunError;
use crate::execute_result::{StepEnd, StepRecord};
use crate::message::{AssistantMessage, Message, ToolResult, Usage};
use crate::model::{ModelRequest, SharedMessages};
use crate::process::{Process, StepOutcome};
use crate::react::config::{Decision, LoopResult, Observation, RunConfig, SteeringPolicy};
use crate::step::Transition;

/// Everything the outer machine knows. Passed to the statig handlers as their context.
#[derive(Debug)]
pub struct ReactData {
    pub(crate) cfg: RunConfig,
    pub(crate) run_id: String,
    /// Shared with the current step's request (O(1) per request); appended in place once
    /// the request is gone.
    pub(crate) messages: SharedMessages,
    pub(crate) session_turns: u32,
    pub(crate) committed_steps: u32,
    pub(crate) step: Option<Process>,
    /// Steps created so far (executed or resumed): names the step in a `PartialMark`.
    pub(crate) steps_created: u64,
    pub(crate) usage: Option<Usage>,
    pub(crate) last_tokens: Option<u64>,
    pub(crate) compacted_since_step: bool,
    /// Why the compaction under way started (`threshold`, `overflow`, `budget`).
    pub(crate) compacting_reason: &'static str,
    pub(crate) last_had_tools: bool,
    pub(crate) whitelist: BTreeSet<String>,
    pub(crate) result: Option<LoopResult>,
    /// The end decided by `finish`, held in `Finishing` until its run-end entry is stored.
    pub(crate) ending: Option<LoopResult>,
    pub(crate) steering: Vec<String>,
    /// Queued subtasks (row `active_subtask`): `(tool, arguments)`, run first-in first-out
    /// by row `planning_subtask` (issue 13, seed 004).
    pub(crate) subtasks: std::collections::VecDeque<(String, serde_json::Value)>,
    /// Subtasks the run started so far (names their synthetic calls).
    pub(crate) subtasks_run: u32,
    pub(crate) recent_calls: Vec<(String, String)>,
    /// Results of the session's pure-tool calls (issue 13, R-TOOL-6), shared with each step.
    pub(crate) tool_cache: std::sync::Arc<crate::tool_cache::ToolCache>,
    /// The first stop a step asked for (its run-end reason: `stopped`, `tool_rejected`).
    pub(crate) stop_requested: Option<&'static str>,
    /// The decision function's answer for the step being observed: computed once, before
    /// `Decide` is dispatched ([`prepare`](Self::prepare)); the Observing guards read it.
    pub(crate) decision: Option<Decision>,
    pub(crate) abort_emitted: bool,
    pub(crate) abort_reason: Option<String>,
    /// After a context overflow the step is re-requested with the same `model_call_index`;
    /// its attempt numbers continue so late events of the overflowed attempt stay stale.
    pub(crate) next_attempt: Option<u32>,
    pub(crate) state: ReactState,
    // Per-handle outputs, drained by the facade.
    pub(crate) out: Vec<Effect>,
    pub(crate) inner: Vec<Transition>,
    pub(crate) checks: Vec<crate::chart::GuardCheck>,
    pub(crate) row: Option<ReactRow>,
    pub(crate) unhandled: bool,
    /// What the run used so far (usage limits).
    pub(crate) spent: crate::react::limits::Spent,
    /// The usage limit the run reached (announced once).
    pub(crate) limit_hit: Option<crate::react::limits::LimitKind>,
    /// The final-answer step a reached limit asked for was started.
    pub(crate) limit_final_ran: bool,
    /// The runtime's verdict on the last committed message as a typed final answer.
    pub(crate) output_rejected: Option<crate::output::OutputRejected>,
    /// Output retries used so far.
    pub(crate) output_retries: u32,
    /// Models of the fallback chain used so far (the next one is `cfg.fallbacks[fallbacks_used]`).
    pub(crate) fallbacks_used: usize,
    /// The run's deadline timer runs.
    pub(crate) deadline_armed: bool,
    /// Row `active_run_deadline` was taken: the facade feeds the abort it stands for.
    pub(crate) deadline_abort: bool,
    /// What each ended step produced (R-IN-5), positions into `messages`.
    pub(crate) steps: Vec<StepRecord>,
}

impl ReactData {
    pub(crate) fn new(cfg: RunConfig) -> Self {
        ReactData {
            cfg,
            run_id: String::new(),
            messages: SharedMessages::default(),
            session_turns: 0,
            committed_steps: 0,
            step: None,
            steps_created: 0,
            usage: None,
            last_tokens: None,
            compacted_since_step: false,
            compacting_reason: "",
            last_had_tools: false,
            whitelist: BTreeSet::new(),
            result: None,
            ending: None,
            steering: Vec::new(),
            subtasks: Default::default(),
            subtasks_run: 0,
            recent_calls: Vec::new(),
            tool_cache: Default::default(),
            stop_requested: None,
            decision: None,
            abort_emitted: false,
            abort_reason: None,
            next_attempt: None,
            state: ReactState::INITIAL,
            out: Vec::new(),
            inner: Vec::new(),
            checks: Vec::new(),
            row: None,
            unhandled: false,
            spent: Default::default(),
            limit_hit: None,
            limit_final_ran: false,
            output_rejected: None,
            output_retries: 0,
            fallbacks_used: 0,
            deadline_armed: false,
            deadline_abort: false,
            steps: Vec::new(),
        }
    }

    /// Records the chart row a handler took.
    pub(crate) fn take(&mut self, row: ReactRow) {
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

    pub(crate) fn start(
        &mut self,
        run_id: &str,
        history: &[Message],
        input: &[Message],
        session_turns: u32,
    ) {
        self.run_id = run_id.to_string();
        if let Some(delay_ms) = self.cfg.run_deadline_ms {
            self.out.push(Effect::StartTimer {
                timer_id: crate::react::RUN_DEADLINE_TIMER,
                delay_ms,
            });
            self.deadline_armed = true;
        }
        self.messages = history.to_vec().into();
        if !self.cfg.step.pure_tools.is_empty() {
            let mut cache = crate::tool_cache::ToolCache::default();
            cache.fill_from(&self.cfg.step, history);
            self.tool_cache = cache.into();
        }
        self.session_turns = session_turns;
        for m in input {
            self.messages.push(m.clone());
            self.persist(Entry::UserInput {
                run_id: run_id.to_string(),
                message: m.clone(),
            });
        }
        self.emit(AgentEvent::RunStart {});
        if let (Some(model), 0) = (&self.cfg.title_model, session_turns) {
            let text = input
                .iter()
                .find_map(|m| match m {
                    Message::User { content, .. } => Some(content.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            self.out.push(Effect::GenerateTitle {
                model: model.clone(),
                text,
            });
        }
    }

    /// Row `active_title`: reports the title model's answer and keeps it in the session.
    pub(crate) fn titled(&mut self, title: Option<&str>) {
        if let Some(title) = title {
            self.persist(Entry::Title {
                run_id: self.run_id.clone(),
                title: title.to_string(),
            });
            self.emit(AgentEvent::TitleGenerated {
                model_call_index: 0,
                attempt: 0,
                title: title.to_string(),
            });
        }
    }

    /// Tokens of the context: the last reported usage, else an estimate.
    pub(crate) fn context_tokens(&self) -> u64 {
        self.last_tokens
            .unwrap_or_else(|| estimate_tokens(&self.messages))
    }

    /// The context budget in tokens (R-CTX-3): the configured budget, else the configured
    /// window, else the known window of the current model.
    pub(crate) fn budget_tokens(&self) -> Option<u64> {
        self.cfg
            .context_budget_tokens
            .or(self.cfg.context_window)
            .or_else(|| crate::context::known_context_window(&self.cfg.model))
    }

    pub(crate) fn over_budget(&self) -> bool {
        let by_tokens = self
            .budget_tokens()
            .is_some_and(|b| self.context_tokens() as f64 >= b as f64 * self.cfg.compact_ratio);
        let by_count = self
            .cfg
            .compact_threshold
            .is_some_and(|n| self.messages.len() > n);
        by_tokens || by_count
    }

    pub(crate) fn max_steps_reached(&self) -> bool {
        self.committed_steps >= self.cfg.max_steps
    }

    pub(crate) fn over_threshold(&self) -> bool {
        !self.compacted_since_step && self.over_budget()
    }

    pub(crate) fn compact(&mut self, reason: &'static str) {
        let budget = self
            .budget_tokens()
            .map(|b| (b as f64 * self.cfg.compact_ratio) as u64);
        self.request_compaction(reason, budget);
    }

    /// Row `executing_overflow`: the provider refused the context, so the compaction must
    /// leave less than was sent whatever the configuration says (R-OUT-6). Its budget is
    /// [`overflow_budget`](crate::context::overflow_budget) of the refused context (or the
    /// configured one when that is smaller), but never below what the pinned messages alone
    /// take while anything else is left: the oldest whole groups go as far as needed or
    /// possible, the step is requested again, and the provider judges. Each overflow
    /// shrinks the context again; once only pinned messages are left, the compactor fails
    /// and so does the run.
    pub(crate) fn compact_overflow(&mut self, error: &crate::error::ModelError) {
        let sent = estimate_tokens(&self.messages);
        let floor = crate::context::pinned_tokens(&self.messages);
        let configured = self
            .budget_tokens()
            .map(|b| (b as f64 * self.cfg.compact_ratio) as u64);
        let mut budget = crate::context::overflow_budget(sent, &error.message);
        if let Some(c) = configured {
            budget = budget.min(c);
        }
        if floor < sent {
            budget = budget.max(floor);
        }
        self.request_compaction("overflow", Some(budget));
    }

    fn request_compaction(&mut self, reason: &'static str, budget_tokens: Option<u64>) {
        self.compacting_reason = reason;
        self.emit(AgentEvent::CompactStart {
            reason: reason.to_string(),
            messages: self.messages.len(),
        });
        self.out.push(Effect::Compact {
            messages: self.messages.to_vec(),
            budget_tokens,
            max_messages: self.cfg.compact_threshold,
        });
    }

    /// Guard `compaction_required`: the compaction under way answers the model's refusal of
    /// the context (overflow); the step cannot be re-requested without it.
    pub(crate) fn compaction_required(&self) -> bool {
        self.compacting_reason == "overflow"
    }

    /// Rows `compacting_vetoed*`: reports the veto; no compaction is tried again before the
    /// next committed step (else Planning would ask the hook again at once, forever).
    pub(crate) fn compaction_vetoed(&mut self, reason: &str) {
        self.compacted_since_step = true;
        self.emit(AgentEvent::CompactVetoed {
            reason: reason.to_string(),
        });
    }

    pub(crate) fn compacted(&mut self, messages: &[Message], removed: usize) {
        let old = std::mem::replace(&mut self.messages, messages.to_vec().into());
        crate::execute_result::remap(&mut self.steps, &old, &self.messages);
        drop(old);
        self.last_tokens = None;
        self.compacted_since_step = true;
        self.persist(Entry::Compaction {
            run_id: self.run_id.clone(),
            removed,
            messages: messages.to_vec(),
        });
        self.emit(AgentEvent::CompactEnd { removed });
    }

    /// Builds the next step's request and starts the inner machine.
    pub(crate) fn execute(&mut self) {
        for text in std::mem::take(&mut self.steering) {
            let m = Message::user(text.clone());
            self.messages.push(m.clone());
            self.persist(Entry::UserInput {
                run_id: self.run_id.clone(),
                message: m,
            });
            self.emit(AgentEvent::SteeringApplied { text });
        }
        let index = self.committed_steps + 1;
        let last = index >= self.cfg.max_steps || self.limit_final_ran;
        let mut messages = self.messages.clone();
        let ctx = crate::react::reminders::ReminderContext {
            step: index,
            last_step: last,
            limit_final: self.limit_final_ran,
            messages: &self.messages,
            // Counted only for a rule that needs it (an estimate reads the whole context).
            context_tokens: if self.cfg.reminders.iter().any(|r| {
                matches!(
                    r.when,
                    crate::react::reminders::ReminderWhen::ContextTokensAtLeast(_)
                )
            }) {
                self.context_tokens()
            } else {
                0
            },
        };
        let reminders = crate::react::reminders::insert_reminders(
            &ctx,
            &self.cfg.final_reminder,
            &self.cfg.reminders,
        );
        for text in reminders {
            messages.push(Message::user(text));
        }
        let request = ModelRequest {
            run_id: self.run_id.clone(),
            model_call_index: index,
            attempt: self.next_attempt.take().unwrap_or(1),
            session_turn: self.session_turns,
            model: self.cfg.model.clone(),
            system: self.cfg.system.clone(),
            messages,
            tools: if last {
                crate::tool_spec::ToolSpecs::default()
            } else {
                self.cfg.tools.clone()
            },
            params: self.params(),
        };
        let mut step = Process::new(self.cfg.step.clone(), request, self.whitelist.clone())
            .with_recent_calls(self.recent_calls.clone())
            .with_tool_cache(self.tool_cache.clone());
        let s = step.begin();
        self.steps_created += 1;
        self.take_inner(s);
        self.step = Some(step);
    }

    /// Recreates the interrupted step around its committed message and runs its unanswered
    /// calls. The step's message was counted in `session_turns` and `committed_steps` already;
    /// `absorb_step` counts it again, so both are decremented here.
    pub(crate) fn resume_step(&mut self, p: &crate::event::PendingStep) {
        self.committed_steps = self.committed_steps.saturating_sub(1);
        self.session_turns = self.session_turns.saturating_sub(1);
        let step = self.committed_step(p.model_call_index);
        self.run_committed(step, p.message.clone(), p.results.clone());
    }

    /// An inner machine for step `model_call_index` whose message is already committed (a
    /// resumed step, a subtask): its request carries no messages, it only runs the calls.
    fn committed_step(&self, model_call_index: u32) -> Process {
        let request = ModelRequest {
            run_id: self.run_id.clone(),
            model_call_index,
            attempt: 1,
            session_turn: self.session_turns,
            model: self.cfg.model.clone(),
            system: self.cfg.system.clone(),
            messages: SharedMessages::default(),
            tools: self.cfg.tools.clone(),
            params: self.params(),
        };
        Process::new(self.cfg.step.clone(), request, self.whitelist.clone())
            .with_tool_cache(self.tool_cache.clone())
    }

    /// Runs `step` around its committed `message` (the calls without a result in `results`).
    fn run_committed(
        &mut self,
        mut step: Process,
        message: AssistantMessage,
        results: Vec<ToolResult>,
    ) {
        let s = step.resume(message, results);
        self.steps_created += 1;
        self.take_inner(s);
        self.step = Some(step);
    }

    /// Guard `subtask_queued`: a subtask waits to run before the next model step.
    pub(crate) fn subtask_queued(&self) -> bool {
        !self.subtasks.is_empty()
    }

    /// Row `planning_subtask`: runs the oldest queued subtask as a synthetic step (seed 004's
    /// outer loop runs a pending subtask part before the next model call). Its message, one
    /// tool call `subtask-<run>-<n>` and no text, is persisted like a committed turn (the next
    /// `model_call_index`), and the inner machine runs the call exactly as it runs a resumed
    /// step's unanswered calls (approval, rules, timeouts, abort); the result is committed and
    /// the next model step sees both.
    pub(crate) fn run_subtask(&mut self) {
        let Some((tool, arguments)) = self.subtasks.pop_front() else {
            return;
        };
        self.subtasks_run += 1;
        let index = self.committed_steps + 1;
        let message = AssistantMessage {
            tool_calls: vec![crate::message::ToolCall {
                id: format!("subtask-{}-{}", self.run_id, self.subtasks_run),
                name: tool,
                arguments,
                invalid_arguments: None,
            }],
            ..AssistantMessage::default()
        };
        self.persist(Entry::Assistant {
            run_id: self.run_id.clone(),
            model_call_index: index,
            message: message.clone(),
        });
        let step = self
            .committed_step(index)
            .with_recent_calls(self.recent_calls.clone());
        self.run_committed(step, message, Vec::new());
    }

    /// Takes the finished step's message and results into the context, and records the step
    /// (R-IN-5).
    pub(crate) fn absorb_step(&mut self) {
        let Some(step) = self.step.take() else { return };
        let end = match step.outcome() {
            Some(StepOutcome::Aborted) => StepEnd::Aborted,
            _ => StepEnd::Success,
        };
        let mut record = step_record(&step, end);
        if let Some(m) = step.committed() {
            let m = m.clone();
            if let Some(u) = &m.usage {
                self.usage.get_or_insert_with(Usage::default).add(u);
                self.last_tokens = Some(u.input_tokens + u.output_tokens);
            }
            self.last_had_tools = !m.tool_calls.is_empty();
            self.output_rejected = step.output_rejected().cloned();
            self.spent.tool_calls += m.tool_calls.len() as u64;
            if self.stop_requested.is_none() {
                self.stop_requested = step.stop_reason();
            }
            for c in &m.tool_calls {
                self.recent_calls
                    .push((c.name.clone(), c.arguments.to_string()));
            }
            let excess = self.recent_calls.len().saturating_sub(64);
            self.recent_calls.drain(..excess);
            // Only a step that added calls can complete a cycle: re-checking an unchanged
            // history would report the same loop again (R-TOOL-4: each loop once).
            let pattern = if m.tool_calls.is_empty() {
                None
            } else {
                crate::react::health::repeated_pattern(&self.recent_calls)
            };
            if let Some((pattern, repeats)) = pattern {
                self.emit(AgentEvent::LoopDetected {
                    tool_call_id: None,
                    pattern,
                    repeats,
                    action: "warn".into(),
                });
            }
            let results = step.results();
            self.whitelist = step.whitelist().clone();
            // The step's request shares the messages (and the cache): drop it first, so the
            // appends are in place rather than copies.
            drop(step);
            let step_cfg = &self.cfg.step;
            if !step_cfg.pure_tools.is_empty() {
                let cache = std::sync::Arc::make_mut(&mut self.tool_cache);
                for (c, r) in m.tool_calls.iter().zip(&results) {
                    if step_cfg.is_pure(&c.name) && r.tool_call_id == c.id {
                        cache.insert(c, r);
                    }
                }
            }
            record.message = Some(self.messages.len());
            record.tool_results = results.len();
            self.messages.push(Message::Assistant(m));
            self.messages.extend(results.into_iter().map(Message::Tool));
            self.committed_steps = self.committed_steps.saturating_add(1);
            self.session_turns = self.session_turns.saturating_add(1);
            self.compacted_since_step = false;
            self.record_step(record);
            return;
        }
        self.whitelist = step.whitelist().clone();
        self.record_step(record);
    }

    /// Ends the current step without taking anything into the context (a failure, an
    /// overflow), recording it as `end` (R-IN-5).
    pub(crate) fn end_step(&mut self, end: StepEnd) {
        if let Some(step) = self.step.take() {
            let record = step_record(&step, end);
            self.record_step(record);
        }
    }

    /// Keeps the record of an ended step and, unless the configuration turns it off, reports
    /// it as `step_finished` (R-IN-5).
    fn record_step(&mut self, record: StepRecord) {
        if self.cfg.report_steps {
            self.emit(AgentEvent::StepFinished {
                step: Box::new(record.clone()),
            });
        }
        self.steps.push(record);
    }

    pub(crate) fn observe(&self) -> Decision {
        let o = Observation {
            has_tool_calls: self.last_had_tools,
            steering_pending: !self.steering.is_empty(),
            subtask_pending: !self.subtasks.is_empty(),
            stop_requested: self.stop_requested.is_some(),
            over_budget: self.over_budget(),
            steps: self.committed_steps,
            max_steps: self.cfg.max_steps,
        };
        self.cfg.decider.decide(&o)
    }

    pub(crate) fn step_outcome(&self) -> Option<StepOutcome> {
        self.step.as_ref().and_then(|s| s.outcome().cloned())
    }

    /// Decides the run's end: the result is kept until the state it leads to is entered —
    /// `Finishing`, whose entry action commits the run-end entry (`CommitRunEnd`), or, when
    /// the store already failed, a terminal state, whose entry action reports the end. The
    /// handlers only decide; the two entry actions are the one place an end is committed and
    /// the one place it is reported.
    pub(crate) fn finish(&mut self, outcome: Outcome, reason: String, error: Option<RunError>) {
        let result = LoopResult {
            outcome,
            reason,
            messages: self.messages.to_vec(),
            iterations: self.committed_steps,
            usage: self.usage,
            steering_left: self.steering.clone(),
            error,
            steps: self.steps.clone(),
        };
        if std::mem::take(&mut self.deadline_armed) {
            self.out.push(Effect::CancelTimer {
                timer_id: crate::react::RUN_DEADLINE_TIMER,
            });
        }
        self.ending = Some(result);
    }

    /// Entry action of `Finishing`: commits the decided end's run-end entry.
    pub(crate) fn commit_end(&mut self) {
        if let Some(r) = &self.ending {
            let entry = Entry::RunEnd {
                run_id: self.run_id.clone(),
                outcome: r.outcome,
                reason: r.reason.clone(),
            };
            self.out.push(Effect::CommitRunEnd { entry });
        }
    }

    /// Entry action of the terminal states: reports the decided end.
    pub(crate) fn report_end(&mut self) {
        if let Some(result) = self.ending.take() {
            self.end(result);
        }
    }

    /// The outcome `finish` decided, while its run-end entry is being committed.
    pub(crate) fn ending_outcome(&self) -> Option<Outcome> {
        self.ending.as_ref().map(|r| r.outcome)
    }

    /// A write of the final step (its message or the run-end entry) failed (R-IDEM-4): the
    /// run fails, naming the end it had reached. If `agent_abort` was announced while draining, that stays the run's one
    /// end event (R-VER-1) and the failure is in the result only.
    pub(crate) fn commit_failed(&mut self, error: &str) {
        let reached = self.ending.take().map(|r| r.outcome);
        self.finish(
            Outcome::Failed,
            "store_write_failed".into(),
            Some(RunError::EndWrite {
                message: error.to_string(),
                reached,
            }),
        );
    }

    /// Reports the end: one end event per run (an abort announced while draining is that
    /// event), and the result.
    fn end(&mut self, result: LoopResult) {
        let event = match result.outcome {
            Outcome::Completed => AgentEvent::RunEnd {
                outcome: result.outcome,
                reason: result.reason.clone(),
                usage: self.usage,
                final_text: result.final_text().map(str::to_string),
            },
            Outcome::Failed => AgentEvent::RunError {
                error: result
                    .error
                    .as_ref()
                    .map_or_else(|| result.reason.clone(), RunError::to_string),
            },
            Outcome::Aborted => AgentEvent::AgentAbort {
                reason: result.reason.clone(),
            },
        };
        if !self.abort_emitted {
            self.emit(event);
        }
        self.result = Some(result);
    }

    /// Emits `agent_abort` now (the run may still drain immune tools before it ends).
    pub(crate) fn emit_abort(&mut self, reason: &str) {
        self.abort_emitted = true;
        self.emit(AgentEvent::AgentAbort {
            reason: reason.to_string(),
        });
    }

    /// Queues steering; with `skip_remaining`, a running tool batch is cut short.
    pub(crate) fn steer(&mut self, event: &crate::event::Event, text: &str) {
        self.steering.push(text.to_string());
        let batch_running = self.step.as_ref().is_some_and(|s| {
            matches!(
                s.state(),
                ProcessState::RunningTools | ProcessState::AwaitingApproval
            )
        });
        if self.cfg.steering == SteeringPolicy::SkipRemaining && batch_running {
            self.forward(event);
        }
    }

    /// Switches the model from the next step on; the same model is a no-op without event.
    pub(crate) fn switch_model(&mut self, model: &str) {
        if model != self.cfg.model {
            let from = std::mem::replace(&mut self.cfg.model, model.to_string());
            self.emit(AgentEvent::ModelSwitched {
                from,
                to: model.to_string(),
            });
        }
    }

    /// A request's parameters: the run's, with its output spec.
    fn params(&self) -> crate::model::ModelParams {
        let mut params = self.cfg.params.clone();
        params.output = self.cfg.output.clone();
        params
    }

    /// The final answer breaks the run's output schema (the decider's `Complete` with a
    /// rejected typed answer).
    fn output_rejected_now(&self) -> bool {
        self.cfg.output.is_some()
            && self.output_rejected.is_some()
            && self.decision == Some(Decision::Complete)
    }

    /// Guard `output_retry`: the typed answer was rejected and retries are left.
    pub(crate) fn output_retry(&self) -> bool {
        self.output_rejected_now()
            && self
                .cfg
                .output
                .as_ref()
                .is_some_and(|o| self.output_retries < o.retries)
    }

    /// Guard `output_invalid`: the typed answer was rejected and the retries are used up.
    pub(crate) fn output_invalid(&self) -> bool {
        self.output_rejected_now() && !self.output_retry()
    }

    /// The rejection's message (for the retry and the run's error).
    pub(crate) fn output_error(&self) -> String {
        self.output_rejected
            .as_ref()
            .map(|r| r.message())
            .unwrap_or_default()
    }

    /// Row `observing_retry_output`: the errors go back to the model as a user message.
    pub(crate) fn retry_output(&mut self) {
        self.output_retries += 1;
        let error = self.output_error();
        self.emit(AgentEvent::OutputInvalid {
            error: error.clone(),
            retrying: true,
        });
        let m = Message::user(error);
        self.messages.push(m.clone());
        self.persist(Entry::UserInput {
            run_id: self.run_id.clone(),
            message: m,
        });
        self.output_rejected = None;
    }

    /// Row `observing_output_invalid`: the run fails, naming what is wrong.
    pub(crate) fn fail_output(&mut self) {
        let error = self.output_error();
        self.emit(AgentEvent::OutputInvalid {
            error: error.clone(),
            retrying: false,
        });
        self.finish(
            Outcome::Failed,
            "output_invalid".into(),
            Some(RunError::OutputInvalid { message: error }),
        );
    }

    /// Whether the failed step can be requested from a fallback model (guard
    /// `fallback_available`): the step failed and the chain has a model left.
    pub(crate) fn fallback_available(&self) -> bool {
        matches!(self.step_outcome(), Some(StepOutcome::Failed(_)))
            && self.fallbacks_used < self.cfg.fallbacks.len()
    }

    /// Row `executing_fallback`: the next model of the chain takes the failed step (same
    /// `model_call_index`; its attempts continue the failed step's numbering, so late events of
    /// the failed attempts stay stale).
    pub(crate) fn fall_back(&mut self) {
        let Some(to) = self.cfg.fallbacks.get(self.fallbacks_used).cloned() else {
            return;
        };
        self.fallbacks_used += 1;
        let Some(step) = self.step.take() else { return };
        let error = match step.outcome() {
            Some(StepOutcome::Failed(e)) => e.clone(),
            _ => return,
        };
        let model_call_index = step.request().model_call_index;
        self.next_attempt = Some(step.request().attempt + 1);
        self.whitelist = step.whitelist().clone();
        let record = step_record(&step, StepEnd::Failed);
        drop(step);
        self.record_step(record);
        let from = std::mem::replace(&mut self.cfg.model, to.clone());
        self.emit(AgentEvent::ModelFallback {
            from,
            to,
            model_call_index,
            error,
        });
        self.execute();
    }

    /// The work an input needs done before the guards are evaluated, so that every guard
    /// only reads: in a state of `Active`, an abort reaches a live inner step first (once; the
    /// step's transitions and effects follow the outer one's, as the step's own), so guard
    /// `tools_draining` reads whether the step now drains; `Decide` runs the decision
    /// function once, and the Observing guards read its answer.
    pub(crate) fn prepare(&mut self, state: ReactState, input: &crate::react::machine::Input<'_>) {
        use crate::react::machine::Input;
        match input {
            Input::Ext(e @ crate::event::Event::Abort { .. })
                if state.in_active() && !self.step_ended() && self.step.is_some() =>
            {
                self.forward(e);
            }
            Input::Decide => self.decision = Some(self.observe()),
            _ => {}
        }
    }

    /// Whether the current step ended (terminal inner state).
    pub(crate) fn step_ended(&self) -> bool {
        self.step.as_ref().is_some_and(|s| s.state().is_terminal())
    }

    /// Forwards an event to the inner machine, collecting its transitions and effects.
    pub(crate) fn forward(&mut self, event: &crate::event::Event) -> bool {
        match self.step.as_mut() {
            Some(step) => {
                let s = step.handle(event);
                self.take_inner(s)
            }
            None => true,
        }
    }

    /// Takes what the inner machine did (transitions, guard checks, effects) and counts the
    /// model requests among the effects (usage limits); returns whether the event was unhandled.
    fn take_inner(&mut self, s: crate::process::ProcessStep) -> bool {
        self.spent.model_calls += s
            .effects
            .iter()
            .filter(|e| matches!(e, Effect::CallModel { .. }))
            .count() as u64;
        self.inner.extend(s.transitions);
        self.checks.extend(s.guard_checks);
        self.out.extend(s.effects);
        s.unhandled
    }

    /// The usage limit the run has reached, if any (with what was used and the limit).
    fn limit_reached(&self) -> Option<(crate::react::limits::LimitKind, f64, f64)> {
        let mut spent = self.spent;
        spent.usage = self.usage.unwrap_or_default();
        self.cfg.limits.reached(&spent)
    }

    /// Guard `limit_stop`: a limit is reached and the run ends now.
    pub(crate) fn limit_stops(&self) -> bool {
        self.limit_reached().is_some()
            && (self.cfg.limits.on_limit == crate::react::limits::LimitAction::Stop
                || self.limit_final_ran)
    }

    /// Guard `limit_final_answer`: a limit is reached and asks for one final-answer step.
    pub(crate) fn limit_asks_final_answer(&self) -> bool {
        self.limit_reached().is_some()
            && self.cfg.limits.on_limit == crate::react::limits::LimitAction::FinalAnswer
            && !self.limit_final_ran
    }

    /// Announces the reached limit (once per run); returns the run-end reason it gives.
    pub(crate) fn note_limit(&mut self) -> String {
        let Some((limit, used, max)) = self.limit_reached() else {
            return "usage_limit".into();
        };
        if self.limit_hit.is_none() {
            self.limit_hit = Some(limit);
            self.emit(AgentEvent::UsageLimitReached {
                limit,
                used,
                max,
                action: if self.limit_final_ran {
                    crate::react::limits::LimitAction::Stop
                } else {
                    self.cfg.limits.on_limit
                },
            });
        }
        self.limit_hit.unwrap_or(limit).reason()
    }

    /// Store failure: stop the stream and every running tool, persist nothing more.
    pub(crate) fn halt_io(&mut self) {
        if let Some(step) = &self.step {
            let state = step.state();
            if state.in_requesting() {
                let r = step.request();
                self.out.push(Effect::CancelModel {
                    attempt: crate::event::AttemptId {
                        run_id: r.run_id.clone(),
                        model_call_index: r.model_call_index,
                        attempt: r.attempt,
                    },
                });
            }
            for id in step.running_calls() {
                self.out.push(Effect::KillTool { tool_call_id: id });
            }
        }
        // The step ends with the run: nothing may reach it (and persist) after the failure.
        self.step = None;
    }
}

impl ReactData {
    /// On abort: keep the committed message of the current step and its (possibly aborted)
    /// results, so the result's messages keep the pairing invariant.
    pub(crate) fn absorb_aborted_step(&mut self) {
        if let Some(step) = &self.step {
            if step.outcome() == Some(&StepOutcome::Aborted) && step.committed().is_some() {
                self.absorb_step();
                return;
            }
        }
        self.end_step(StepEnd::Aborted);
    }
}

/// The record of a step that ended as `end` (R-IN-5), without its message's position (the
/// caller knows where the message goes).
fn step_record(step: &Process, end: StepEnd) -> StepRecord {
    let committed = step.committed();
    let error = match step.outcome() {
        Some(StepOutcome::Failed(e) | StepOutcome::ContextOverflow(e)) => Some(e.clone()),
        _ => None,
    };
    StepRecord {
        model_call_index: step.request().model_call_index,
        model: step.request().model.clone(),
        attempts: step.attempts(),
        end,
        message: None,
        compacted: false,
        tool_calls: committed.map_or(0, |m| m.tool_calls.len()),
        tool_results: 0,
        usage: committed.and_then(|m| m.usage),
        error,
    }
}
