//! The outer machine's data and the pure helpers its handlers use to request effects.

use crate::agent_event::{AgentEvent, Outcome};
use crate::chart::{ReactRow, ReactState};
use crate::context::estimate_tokens;
use crate::effect::Effect;
use crate::entry::Entry;
use crate::error::RunError;
use crate::execute_result::{StepEnd, StepRecord};
use crate::message::{AssistantMessage, Message, ToolResult};
use crate::model::{ModelRequest, SharedMessages};
use crate::outbox::Outbox;
use crate::process::{Process, StepOutcome};
use crate::react::config::{Decision, LoopResult, Observation, RunConfig, SteeringPolicy};
use crate::react::context::{
    Compaction, Counters, CurrentStep, Ended, Ending, Observed, Queues, Transcript,
};

/// Everything the outer machine knows. Passed to the statig handlers as their context: the
/// run's configuration and identity, and one field per part of the context that spans states
/// ([`crate::react::context`]).
#[derive(Debug)]
pub(crate) struct ReactData {
    pub(crate) cfg: RunConfig,
    pub(crate) run_id: String,
    pub(crate) transcript: Transcript,
    pub(crate) counters: Counters,
    pub(crate) current: CurrentStep,
    pub(crate) queues: Queues,
    pub(crate) observed: Observed,
    pub(crate) end: Ending,
    pub(crate) outbox: Outbox<ReactRow>,
}

impl ReactData {
    pub(crate) fn new(cfg: RunConfig) -> Self {
        // The approvals whitelisted before the run (a session's "always") seed its first step.
        let current = CurrentStep {
            whitelist: cfg.approved_always.clone(),
            ..CurrentStep::default()
        };
        ReactData {
            cfg,
            run_id: String::new(),
            transcript: Transcript::default(),
            counters: Counters::default(),
            current,
            queues: Queues::default(),
            observed: Observed::default(),
            end: Ending::default(),
            outbox: Outbox::default(),
        }
    }

    /// `messages` made well paired (R-IDEM-7), with one `session_repaired` event per repair.
    fn paired(
        &mut self,
        messages: &[Message],
        source: crate::entry::ContextSource,
    ) -> Vec<Message> {
        let (messages, repairs) = crate::session_log::pair_messages(messages, source);
        for repair in repairs {
            self.outbox.emit(AgentEvent::SessionRepaired { repair });
        }
        messages
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
            self.outbox.push(Effect::StartTimer {
                timer_id: crate::react::RUN_DEADLINE_TIMER,
                delay_ms,
            });
            self.end.deadline_armed = true;
        }
        // The history is a port's (the context manager's): keep the pairing invariant
        // whatever it built (R-IDEM-7).
        let history = self.paired(history, crate::entry::ContextSource::Start);
        if !self.cfg.step.pure_tools.is_empty() {
            let mut cache = crate::tool_cache::ToolCache::default();
            cache.fill_from(|tool| self.cfg.step.is_pure(tool), &history);
            self.current.tool_cache = cache.into();
        }
        self.current.call_ids = std::sync::Arc::new(
            history
                .iter()
                .filter_map(|m| match m {
                    Message::Assistant(a) => Some(a.tool_calls.iter().map(|c| c.id.clone())),
                    _ => None,
                })
                .flatten()
                .collect(),
        );
        self.transcript.messages = history.into();
        self.counters.session_turns = session_turns;
        for m in input {
            self.transcript.messages.push(m.clone());
            self.outbox.persist(Entry::UserInput {
                run_id: run_id.to_string(),
                message: m.clone(),
            });
        }
        self.outbox.emit(AgentEvent::RunStart {});
        if let (Some(model), 0) = (&self.cfg.title_model, session_turns) {
            let text = input
                .iter()
                .find_map(|m| match m {
                    Message::User { content, .. } => Some(content.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            self.outbox.push(Effect::GenerateTitle {
                model: model.clone(),
                text,
            });
        }
    }

    /// Row `active_title`: reports the title model's answer and keeps it in the session.
    pub(crate) fn titled(&mut self, title: Option<&str>) {
        if let Some(title) = title {
            self.outbox.persist(Entry::Title {
                run_id: self.run_id.clone(),
                title: title.to_string(),
            });
            self.outbox.emit(AgentEvent::TitleGenerated {
                model_call_index: 0,
                attempt: 0,
                title: title.to_string(),
            });
        }
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
            .is_some_and(|b| self.transcript.tokens() as f64 >= b as f64 * self.cfg.compact_ratio);
        let by_count = self
            .cfg
            .compact_threshold
            .is_some_and(|n| self.transcript.messages.len() > n);
        by_tokens || by_count
    }

    pub(crate) fn max_steps_reached(&self) -> bool {
        self.counters.committed_steps >= self.cfg.max_steps
    }

    pub(crate) fn over_threshold(&self) -> bool {
        !self.transcript.compacted_since_step && self.over_budget()
    }

    /// Rows `planning_compact` / `observing_compact`: Compacting will compact to the
    /// configured budget (its entry action requests it).
    pub(crate) fn compaction(&self, reason: &'static str) -> Compaction {
        Compaction {
            reason,
            budget_tokens: self.compaction_point(),
        }
    }

    /// The compaction point: `compact_ratio` of the budget, when one is known.
    fn compaction_point(&self) -> Option<u64> {
        let ratio = self.cfg.compact_ratio;
        self.budget_tokens().map(|b| (b as f64 * ratio) as u64)
    }

    /// Row `executing_overflow`: the provider refused the context, so the compaction must
    /// leave less than was sent whatever the configuration says (R-OUT-6). Its budget is
    /// [`overflow_budget`](crate::context::overflow_budget) of the refused context (or the
    /// configured one when that is smaller), but never below what the pinned messages alone
    /// take while anything else is left: the oldest whole groups go as far as needed or
    /// possible, the step is requested again, and the provider judges. Each overflow
    /// shrinks the context again; once only pinned messages are left, the compactor fails
    /// and so does the run.
    pub(crate) fn overflow_compaction(&self, error: &crate::error::ModelError) -> Compaction {
        let sent = estimate_tokens(&self.transcript.messages);
        let floor = crate::context::pinned_tokens(&self.transcript.messages);
        let mut budget = crate::context::overflow_budget(sent, &error.message);
        if let Some(c) = self.compaction_point() {
            budget = budget.min(c);
        }
        if floor < sent {
            budget = budget.max(floor);
        }
        Compaction {
            reason: "overflow",
            budget_tokens: Some(budget),
        }
    }

    /// Entry action of `Compacting`: requests the compaction the row that led here decided.
    pub(crate) fn start_compaction(&mut self, compaction: &Compaction) {
        self.outbox.emit(AgentEvent::CompactStart {
            reason: compaction.reason.to_string(),
            messages: self.transcript.messages.len(),
        });
        self.outbox.push(Effect::Compact {
            messages: self.transcript.messages.to_vec(),
            budget_tokens: compaction.budget_tokens,
            max_messages: self.cfg.compact_threshold,
        });
    }

    /// Rows `compacting_vetoed*`: reports the veto; no compaction is tried again before the
    /// next committed step (else Planning would ask the hook again at once, forever).
    pub(crate) fn compaction_vetoed(&mut self, reason: &str) {
        self.transcript.compacted_since_step = true;
        self.outbox.emit(AgentEvent::CompactVetoed {
            reason: reason.to_string(),
        });
    }

    /// A compaction removed nothing but the context fits: the step goes out as it is, with
    /// no further compaction tried before the next committed step.
    pub(crate) fn compaction_skipped(&mut self) {
        self.transcript.compacted_since_step = true;
        self.outbox.emit(AgentEvent::CompactEnd { removed: 0 });
    }

    pub(crate) fn compacted(&mut self, messages: &[Message], removed: usize) {
        // The new context is a port's (the compactor's): keep the pairing invariant whatever
        // it returned (R-IDEM-7); the stored compaction holds the repaired context.
        let messages = self.paired(messages, crate::entry::ContextSource::Compaction);
        self.transcript.compacted(&messages);
        self.outbox.persist(Entry::Compaction {
            run_id: self.run_id.clone(),
            removed,
            messages,
        });
        self.outbox.emit(AgentEvent::CompactEnd { removed });
    }

    /// Builds the next step's request and starts the inner machine.
    pub(crate) fn execute(&mut self) {
        let steering = self.queues.take_steering();
        // Seed 001: a run whose last committed answer had no tool calls would have ended; the
        // steering that keeps it going resumes it (announced before the steering is applied).
        if !steering.is_empty()
            && self.counters.committed_steps > 0
            && !self.observed.last_had_tools
        {
            self.outbox.emit(AgentEvent::AgentResumed {
                trigger: "steering".into(),
            });
        }
        for text in steering {
            let m = Message::user(text.clone());
            self.transcript.messages.push(m.clone());
            self.outbox.persist(Entry::UserInput {
                run_id: self.run_id.clone(),
                message: m,
            });
            self.outbox.emit(AgentEvent::SteeringApplied { text });
        }
        let index = self.counters.committed_steps + 1;
        let last = index >= self.cfg.max_steps || self.counters.limit_final_ran;
        let mut messages = self.transcript.messages.clone();
        let ctx = crate::react::reminders::ReminderContext {
            step: index,
            last_step: last,
            limit_final: self.counters.limit_final_ran,
            messages: &self.transcript.messages,
            // Counted only for a rule that needs it (an estimate reads the whole context).
            context_tokens: if self.cfg.reminders.iter().any(|r| {
                matches!(
                    r.when,
                    crate::react::reminders::ReminderWhen::ContextTokensAtLeast(_)
                )
            }) {
                self.transcript.tokens()
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
            attempt: self.current.next_attempt.take().unwrap_or(1),
            messages,
            tools: if last {
                crate::tool_spec::ToolSpecs::default()
            } else {
                self.cfg.tools.clone()
            },
            ..self.request(index)
        };
        let mut step = self
            .process(request)
            .with_recent_calls(self.current.recent_calls.clone())
            .with_earlier_call_ids(self.current.call_ids.clone());
        let s = step.begin();
        self.counters.steps_created += 1;
        self.take_inner(s);
        self.current.step = Some(step);
    }

    /// Recreates the interrupted step around its committed message and runs its unanswered
    /// calls. The step's message was counted in `session_turns` and `committed_steps` already;
    /// `absorb_step` counts it again, so both are decremented here.
    pub(crate) fn resume_step(&mut self, p: &crate::event::PendingStep) {
        self.counters.uncount_step();
        let step = self.committed_step(p.model_call_index);
        self.run_committed(step, p.message.clone(), p.results.clone());
    }

    /// The first attempt's request of step `model_call_index`, without messages.
    fn request(&self, model_call_index: u32) -> ModelRequest {
        ModelRequest {
            run_id: self.run_id.clone(),
            model_call_index,
            attempt: 1,
            session_turn: self.counters.session_turns,
            model: self.cfg.model.clone(),
            system: self.cfg.system.clone(),
            messages: SharedMessages::default(),
            tools: self.cfg.tools.clone(),
            params: self.params(),
        }
    }

    /// An inner machine for `request`, with the run's approval whitelist and tool cache.
    fn process(&self, request: ModelRequest) -> Process {
        let whitelist = self.current.whitelist.clone();
        Process::new(self.cfg.step.clone(), request, whitelist)
            .with_tool_cache(self.current.tool_cache.clone())
    }

    /// An inner machine for step `model_call_index` whose message is already committed (a
    /// resumed step, a subtask): its request carries no messages, it only runs the calls.
    fn committed_step(&self, model_call_index: u32) -> Process {
        self.process(self.request(model_call_index))
    }

    /// Runs `step` around its committed `message` (the calls without a result in `results`).
    fn run_committed(
        &mut self,
        mut step: Process,
        message: AssistantMessage,
        results: Vec<ToolResult>,
    ) {
        let s = step.resume(message, results);
        self.counters.steps_created += 1;
        self.take_inner(s);
        self.current.step = Some(step);
    }

    /// Row `planning_subtask`: runs the oldest queued subtask as a synthetic step (a pending
    /// subtask runs before the next model call). Its message, one tool call `subtask-<run>-<n>`
    /// and no text, is persisted like a committed turn (the next `model_call_index`), and the inner machine runs the call exactly as it runs a resumed
    /// step's unanswered calls (approval, rules, timeouts, abort); the result is committed and
    /// the next model step sees both.
    pub(crate) fn run_subtask(&mut self) {
        let Some((n, tool, arguments)) = self.queues.next_subtask() else {
            return;
        };
        let index = self.counters.committed_steps + 1;
        let message = AssistantMessage {
            tool_calls: vec![crate::message::ToolCall {
                id: format!("subtask-{}-{n}", self.run_id),
                name: tool,
                arguments,
                invalid_arguments: None,
            }],
            ..AssistantMessage::default()
        };
        self.outbox.persist(Entry::Assistant {
            run_id: self.run_id.clone(),
            model_call_index: index,
            message: message.clone(),
        });
        let step = self
            .committed_step(index)
            .with_recent_calls(self.current.recent_calls.clone());
        self.run_committed(step, message, Vec::new());
    }

    /// Takes the finished step's message and results into the context, and records the step
    /// (R-IN-5).
    pub(crate) fn absorb_step(&mut self) {
        let Some(step) = self.current.step.take() else {
            return;
        };
        let end = match step.outcome() {
            Some(StepOutcome::Aborted) => StepEnd::Aborted,
            _ => StepEnd::Success,
        };
        let mut record = step_record(&step, end);
        if let Some(m) = step.committed() {
            let m = m.clone();
            if let Some(u) = &m.usage {
                self.transcript.last_tokens = Some(u.input_tokens + u.output_tokens);
            }
            self.counters
                .count_step(m.usage.as_ref(), m.tool_calls.len());
            self.observed
                .step_committed(&step, !m.tool_calls.is_empty());
            // A repeated pattern of calls, then each file touched too often: a warning each.
            use crate::agent_event::LoopKind;
            let calls = self.current.remember_calls(&m.tool_calls);
            let calls = calls.map(|(pattern, repeats)| (LoopKind::Repeat, None, pattern, repeats));
            let files = self.current.remember_files(&m.tool_calls).into_iter();
            let files =
                files.map(|(path, tools, touches)| (LoopKind::File, Some(path), tools, touches));
            for (kind, path, pattern, repeats) in calls.into_iter().chain(files) {
                self.outbox.emit(AgentEvent::LoopDetected {
                    tool_call_id: None,
                    pattern,
                    repeats,
                    action: "warn".into(),
                    kind,
                    path,
                });
            }
            let results = step.results();
            self.current.hand_over(&step);
            // The step's request shares the messages (and the cache): drop it first, so the
            // appends are in place rather than copies.
            drop(step);
            if !m.tool_calls.is_empty() {
                let ids = std::sync::Arc::make_mut(&mut self.current.call_ids);
                ids.extend(m.tool_calls.iter().map(|c| c.id.clone()));
            }
            let step_cfg = &self.cfg.step;
            if !step_cfg.pure_tools.is_empty() {
                let cache = std::sync::Arc::make_mut(&mut self.current.tool_cache);
                for (c, r) in m.tool_calls.iter().zip(&results) {
                    if step_cfg.is_pure(&c.name) && r.tool_call_id == c.id {
                        cache.insert(c, r);
                    }
                }
            }
            record.tool_results = results.len();
            record.message = Some(self.transcript.commit(m, results));
            self.record_step(record);
            return;
        }
        self.current.hand_over(&step);
        self.record_step(record);
    }

    /// Ends the current step without taking anything into the context (a failure, an
    /// overflow), recording it as `end` (R-IN-5).
    pub(crate) fn end_step(&mut self, end: StepEnd) {
        if let Some(step) = self.current.step.take() {
            let record = step_record(&step, end);
            self.record_step(record);
        }
    }

    /// Keeps the record of an ended step and, unless the configuration turns it off, reports
    /// it as `step_finished` (R-IN-5).
    fn record_step(&mut self, record: StepRecord) {
        if self.cfg.report_steps {
            self.outbox.emit(AgentEvent::StepFinished {
                step: Box::new(record.clone()),
            });
        }
        self.transcript.steps.push(record);
    }

    pub(crate) fn observe(&self) -> Decision {
        let message = self
            .transcript
            .steps
            .last()
            .and_then(|r| r.message)
            .and_then(|at| match self.transcript.messages.get(at) {
                Some(Message::Assistant(m)) => Some(m),
                _ => None,
            });
        let o = Observation {
            message,
            has_tool_calls: self.observed.last_had_tools,
            steering_pending: self.queues.steering_pending(),
            subtask_pending: self.queues.subtask_queued(),
            stop_requested: self.observed.stop_requested.is_some(),
            over_budget: self.over_budget(),
            steps: self.counters.committed_steps,
            max_steps: self.cfg.max_steps,
        };
        self.cfg.decider.decide(&o)
    }

    /// The run's end a row decided, as the result the state it leads to holds: `Finishing`,
    /// whose entry action commits the run-end entry (`CommitRunEnd`), or, when the store
    /// already failed, a terminal state, whose entry action reports the end. The rows only
    /// decide; the two entry actions are the one place an end is committed and the one place
    /// it is reported.
    pub(crate) fn decide_end(
        &self,
        outcome: Outcome,
        reason: String,
        error: Option<RunError>,
    ) -> Ended {
        Ended {
            result: Some(LoopResult {
                outcome,
                reason,
                messages: self.transcript.messages.to_vec(),
                iterations: self.counters.committed_steps,
                usage: self.counters.usage,
                steering_left: self.queues.steering.clone(),
                error,
                steps: self.transcript.steps.clone(),
            }),
        }
    }

    /// The run fails with `error` (reason `reason`).
    pub(crate) fn fail(&self, reason: &str, error: RunError) -> Ended {
        self.decide_end(Outcome::Failed, reason.into(), Some(error))
    }

    /// Exit action of `Active`: the run's deadline timer, if armed, is cancelled.
    pub(crate) fn disarm_deadline(&mut self) {
        if self.end.disarm_deadline() {
            self.outbox.push(Effect::CancelTimer {
                timer_id: crate::react::RUN_DEADLINE_TIMER,
            });
        }
    }

    /// Entry action of `Finishing`: commits the decided end's run-end entry.
    pub(crate) fn commit_end(&mut self, ended: &Ended) {
        if let Some(r) = &ended.result {
            let entry = Entry::RunEnd {
                run_id: self.run_id.clone(),
                outcome: r.outcome,
                reason: r.reason.clone(),
            };
            self.outbox.push(Effect::CommitRunEnd { entry });
        }
    }

    /// Entry action of the terminal states: reports the decided end (taking it out).
    pub(crate) fn report_end(&mut self, ended: &mut Ended) {
        if let Some(result) = ended.result.take() {
            self.end(result);
        }
    }

    /// A write of the final step (its message or the run-end entry) failed (R-IDEM-4): the
    /// run fails, naming the end it had reached (`ended`, Finishing's). If `agent_abort` was
    /// announced while draining, that stays the run's one end event (R-VER-1) and the failure
    /// is in the result only.
    pub(crate) fn commit_failed(&self, ended: &Ended, error: &str) -> Ended {
        let error = RunError::EndWrite {
            message: error.to_string(),
            reached: ended.outcome(),
        };
        self.fail("store_write_failed", error)
    }

    /// Reports the end: one end event per run (an abort announced while draining is that
    /// event), and the result.
    fn end(&mut self, result: LoopResult) {
        let event = match result.outcome {
            Outcome::Completed => AgentEvent::RunEnd {
                outcome: result.outcome,
                reason: result.reason.clone(),
                usage: self.counters.usage,
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
        if !self.end.abort_emitted {
            self.outbox.emit(event);
        }
        self.end.result = Some(result);
    }

    /// Emits `agent_abort` now (the run may still drain immune tools before it ends).
    pub(crate) fn emit_abort(&mut self, reason: &str) {
        self.end.abort_emitted = true;
        self.outbox.emit(AgentEvent::AgentAbort {
            reason: reason.to_string(),
        });
    }

    /// Queues steering; with `skip_remaining`, a running tool batch is cut short.
    pub(crate) fn steer(&mut self, event: &crate::event::Event, text: &str) {
        self.queues.steer(text);
        let batch_running = self.current.batch_running();
        if self.cfg.steering == SteeringPolicy::SkipRemaining && batch_running {
            self.forward(event);
        }
    }

    /// Switches the model from the next step on; the same model is a no-op without event.
    pub(crate) fn switch_model(&mut self, model: &str) {
        if model != self.cfg.model {
            let from = std::mem::replace(&mut self.cfg.model, model.to_string());
            self.outbox.emit(AgentEvent::ModelSwitched {
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

    /// The final answer breaks the run's output schema (`complete`: the decider answered
    /// `Complete`, and the typed answer was rejected).
    fn output_rejected_now(&self, complete: bool) -> bool {
        complete && self.answer_rejected()
    }

    /// The run asks for a typed answer and the last step's answer was rejected.
    pub(crate) fn answer_rejected(&self) -> bool {
        self.cfg.output.is_some() && self.observed.output_rejected.is_some()
    }

    /// Guard `output_retry`: the typed answer was rejected, retries are left and so is a step
    /// to ask again in (`complete`: the decider answered `Complete`). Without a step left, a
    /// retry would end the run at `max_steps` as completed with the rejected answer.
    pub(crate) fn output_retry(&self, complete: bool) -> bool {
        self.output_rejected_now(complete)
            && !self.max_steps_reached()
            && self
                .cfg
                .output
                .as_ref()
                .is_some_and(|o| self.counters.output_retries < o.retries)
    }

    /// Guard `output_invalid`: the typed answer was rejected and the retries (or the steps)
    /// are used up.
    pub(crate) fn output_invalid(&self, complete: bool) -> bool {
        self.output_rejected_now(complete) && !self.output_retry(complete)
    }

    /// The rejection's message (for the retry and the run's error).
    pub(crate) fn output_error(&self) -> String {
        self.observed
            .output_rejected
            .as_ref()
            .map(|r| r.message())
            .unwrap_or_default()
    }

    /// Row `observing_retry_output`: the errors go back to the model as a user message.
    pub(crate) fn retry_output(&mut self) {
        self.counters.output_retries += 1;
        let error = self.output_error();
        self.outbox.emit(AgentEvent::OutputInvalid {
            error: error.clone(),
            retrying: true,
        });
        let m = Message::user(error);
        self.transcript.messages.push(m.clone());
        self.outbox.persist(Entry::UserInput {
            run_id: self.run_id.clone(),
            message: m,
        });
        self.observed.output_rejected = None;
    }

    /// Row `observing_output_invalid`: the run fails, naming what is wrong.
    pub(crate) fn fail_output(&mut self) -> Ended {
        let error = self.output_error();
        self.outbox.emit(AgentEvent::OutputInvalid {
            error: error.clone(),
            retrying: false,
        });
        self.fail("output_invalid", RunError::OutputInvalid { message: error })
    }

    /// Whether the failed step can be requested from a fallback model (guard
    /// `fallback_available`): the step failed and the chain has a model left.
    pub(crate) fn fallback_available(&self) -> bool {
        matches!(self.current.outcome(), Some(StepOutcome::Failed(_)))
            && self.counters.fallbacks_used < self.cfg.fallbacks.len()
    }

    /// Row `executing_fallback`: the next model of the chain takes the failed step (same
    /// `model_call_index`; its attempts continue the failed step's numbering, so late events of
    /// the failed attempts stay stale).
    pub(crate) fn fall_back(&mut self) {
        let Some(to) = self
            .cfg
            .fallbacks
            .get(self.counters.fallbacks_used)
            .cloned()
        else {
            return;
        };
        self.counters.fallbacks_used += 1;
        let Some(step) = self.current.step.take() else {
            return;
        };
        let error = match step.outcome() {
            Some(StepOutcome::Failed(e)) => e.clone(),
            _ => return,
        };
        let model_call_index = step.request().model_call_index;
        self.current.next_attempt = Some(step.request().attempt + 1);
        self.current.hand_over(&step);
        let record = step_record(&step, StepEnd::Failed);
        drop(step);
        self.record_step(record);
        let from = std::mem::replace(&mut self.cfg.model, to.clone());
        self.outbox.emit(AgentEvent::ModelFallback {
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
    /// `tools_draining` reads whether the step now drains. (`Decide` carries the decision
    /// function's answer, computed once by the facade; the Observing guards read it there.)
    pub(crate) fn prepare(&mut self, state: ReactState, input: &crate::react::machine::Input<'_>) {
        use crate::react::machine::Input;
        if let Input::Ext(e @ crate::event::Event::Abort { .. }) = input {
            if state.in_active() && !self.current.ended() && self.current.step.is_some() {
                self.forward(e);
            }
        }
    }

    /// Forwards an event to the inner machine, collecting its transitions and effects.
    pub(crate) fn forward(&mut self, event: &crate::event::Event) -> bool {
        match self.current.step.as_mut() {
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
        let (model_calls, unhandled) = self.outbox.take_inner(s);
        self.counters.spent.model_calls += model_calls;
        unhandled
    }

    /// The usage limit the run has reached, if any (with what was used and the limit).
    pub(crate) fn limit_reached(&self) -> Option<(crate::react::limits::LimitKind, f64, f64)> {
        self.cfg.limits.reached(&self.counters.spent_now())
    }

    /// Announces the reached limit (once per run); returns the run-end reason it gives.
    pub(crate) fn note_limit(&mut self) -> String {
        let Some((limit, used, max)) = self.limit_reached() else {
            return "usage_limit".into();
        };
        if self.counters.limit_hit.is_none() {
            self.counters.limit_hit = Some(limit);
            self.outbox.emit(AgentEvent::UsageLimitReached {
                limit,
                used,
                max,
                action: if self.counters.limit_final_ran {
                    crate::react::limits::LimitAction::Stop
                } else {
                    self.cfg.limits.on_limit
                },
            });
        }
        self.counters.limit_hit.unwrap_or(limit).reason()
    }

    /// Store failure: stop the stream and every running tool, persist nothing more.
    pub(crate) fn halt_io(&mut self) {
        if let Some(step) = &self.current.step {
            let state = step.state();
            if state.in_requesting() {
                let r = step.request();
                self.outbox.push(Effect::CancelModel {
                    attempt: crate::event::AttemptId {
                        run_id: r.run_id.clone(),
                        model_call_index: r.model_call_index,
                        attempt: r.attempt,
                    },
                });
            }
            for id in step.running_calls() {
                self.outbox.push(Effect::KillTool { tool_call_id: id });
            }
        }
        // The step ends with the run: nothing may reach it (and persist) after the failure.
        self.current.step = None;
    }
}

impl ReactData {
    /// On abort: keep the committed message of the current step and its (possibly aborted)
    /// results, so the result's messages keep the pairing invariant.
    pub(crate) fn absorb_aborted_step(&mut self) {
        if let Some(step) = &self.current.step {
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
