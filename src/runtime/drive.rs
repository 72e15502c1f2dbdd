//! How an [`Agent`] runs a prompt: the run's set-up (session, context, trace), then the
//! driver loop that performs the machines' effects and feeds the results back.

use super::*;

impl Agent {
    /// An emitter for background tasks of a run (tool tasks emit their own events).
    pub(crate) fn emitter(&self, run_id: &str) -> driver::Emitter {
        driver::Emitter {
            sink: self.sink.clone(),
            clock: self.clock.clone(),
            index: self.event_index.clone(),
            run_id: run_id.to_string(),
        }
    }

    /// The next event index (monotonic over the agent's lifetime).
    pub(crate) fn next_event_index(&self) -> u64 {
        self.event_index
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The run configuration.
    pub fn config(&self) -> &RunConfig {
        &self.config
    }

    /// The model serving `name`, if registered.
    pub fn model_named(&self, name: &str) -> Option<Arc<dyn Model>> {
        self.models.get(name).cloned()
    }

    /// Names of the registered models.
    pub fn model_names(&self) -> Vec<String> {
        self.models.keys().cloned().collect()
    }

    /// The model for a request: by name, else the default model.
    pub(crate) fn model_for(&self, name: &str) -> Arc<dyn Model> {
        self.models
            .get(name)
            .cloned()
            .unwrap_or_else(|| self.model.clone())
    }

    /// The hooks.
    pub fn hooks(&self) -> &Arc<dyn Hooks> {
        &self.hooks
    }

    /// Resumes the interrupted run of `session`, without external control or trace.
    pub async fn resume(&self, session: &str) -> Result<RunOutput, AgentError> {
        self.resume_with(session, None, false).await
    }

    /// Runs one prompt in `session` to completion, without external control or trace.
    ///
    /// On a tokio runtime the run is a task of its own on that runtime (so a streamed delta
    /// is handled by the thread that read it), which the runtime must be driving
    /// (`Runtime::block_on`, `#[tokio::main]`); dropping the returned future aborts it. See
    /// "Design choices" in `docs/architecture.md`.
    pub async fn run(&self, session: &str, prompt: &str) -> Result<RunOutput, AgentError> {
        self.run_with(session, vec![Message::user(prompt)], None, false)
            .await
    }

    /// Runs a prompt with images and files ([`Prompt`](crate::attachment::Prompt): text, then
    /// content parts) in `session` to completion, without external control or trace.
    pub async fn run_prompt(
        &self,
        session: &str,
        prompt: impl Into<crate::attachment::Prompt>,
    ) -> Result<RunOutput, AgentError> {
        let prompt = prompt.into();
        let before = prompt.subtask_events();
        self.run_queued(
            session,
            vec![prompt.into_message()],
            before,
            (*self.config).clone(),
            None,
            false,
        )
        .await
    }

    /// Runs `prompt` in `session` asking for a final answer of type `T` (structured output):
    /// requests carry `T`'s JSON Schema (OpenAI-compatible servers get it as
    /// `response_format`, Anthropic as an instruction), the runtime checks each final answer
    /// against it, and an invalid one goes back to the model with its errors, at most
    /// `config.output.retries` times (default 1; rows `observing_retry_output`,
    /// `observing_output_invalid`). Returns the parsed value and the run's output.
    ///
    /// ```no_run
    /// # async fn f(agent: agentloop::runtime::Agent) -> Result<(), agentloop::runtime::AgentError> {
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Point { x: i64, y: i64 }
    /// let (point, _output) = agent.run_typed::<Point>("s1", "A point on the diagonal").await?;
    /// # let _ = point.x + point.y; Ok(()) }
    /// ```
    pub async fn run_typed<T>(
        &self,
        session: &str,
        prompt: &str,
    ) -> Result<(T, RunOutput), AgentError>
    where
        T: schemars::JsonSchema + serde::de::DeserializeOwned,
    {
        let type_name = T::schema_name().to_string();
        let schema =
            serde_json::to_value(schemars::schema_for!(T)).map_err(|e| AgentError::Output {
                type_name: type_name.clone(),
                error: format!("the type's JSON Schema does not serialize: {e}"),
            })?;
        // Without a JSON Schema validator the answer is checked by deserializing into `T`.
        #[cfg(not(feature = "json-schema"))]
        crate::tools::register_type::<T>(&schema);
        let mut config = (*self.config).clone();
        let retries = config.output.as_ref().map_or(1, |o| o.retries);
        config.output = Some(agentloop_core::output::OutputSpec {
            name: type_name.clone(),
            schema,
            retries,
        });
        let output = self
            .run_configured(session, vec![Message::user(prompt)], config, None, false)
            .await?;
        let result = &output.result;
        if result.outcome != crate::agent_event::Outcome::Completed {
            return Err(AgentError::Ended {
                outcome: result.outcome,
                reason: result.reason.clone(),
                error: result.error.clone(),
            });
        }
        let value = agentloop_core::output::output_json(result.final_text().unwrap_or_default())
            .and_then(|v| serde_json::from_value::<T>(v).map_err(|e| e.to_string()))
            .map_err(|error| AgentError::Output {
                type_name: type_name.clone(),
                error: format!("{error} (run ended: {})", result.reason),
            })?;
        Ok((value, output))
    }

    /// Runs `input` in `session` to completion. `control` receives aborts and approvals;
    /// `record` keeps a trace of every input, transition and effect. A session left with
    /// unanswered tool calls by an interrupted run is repaired first (R-IDEM-7).
    pub async fn run_with(
        &self,
        session: &str,
        input: Vec<Message>,
        control: Option<&Controller>,
        record: bool,
    ) -> Result<RunOutput, AgentError> {
        self.run_configured(session, input, (*self.config).clone(), control, record)
            .await
    }

    /// Like [`Agent::run_with`], with a run configuration other than the agent's (a session
    /// passes its current model and tool set).
    pub async fn run_configured(
        &self,
        session: &str,
        input: Vec<Message>,
        config: RunConfig,
        control: Option<&Controller>,
        record: bool,
    ) -> Result<RunOutput, AgentError> {
        let control = control.map(Controller::receiver);
        self.run_queued(session, input, Vec::new(), config, control, record)
            .await
    }

    /// Like [`Agent::run_configured`], with machine inputs fed before `Start` (queued
    /// subtasks: rows `active_subtask`, then `planning_subtask` before the first
    /// model step).
    ///
    /// On a tokio runtime the run is a task of its own ([`worker::on_worker`]).
    pub(crate) async fn run_queued(
        &self,
        session: &str,
        input: Vec<Message>,
        before: Vec<Event>,
        config: RunConfig,
        control: Option<ControlReceiver>,
        record: bool,
    ) -> Result<RunOutput, AgentError> {
        let agent = self.clone();
        let session = session.to_string();
        // Boxed: the run's future is tens of kilobytes; moved by value (into the caller's
        // future, into a task) it is copied through the stack each time, and those stack
        // pages stay resident.
        worker::on_worker(Box::pin(async move {
            agent
                .run_queued_here(&session, input, before, config, control, record)
                .await
        }))
        .await
    }

    /// [`Agent::run_queued`] in the caller's task (a [`Session`](crate::session::Session)
    /// already runs it in a task of its own).
    pub(crate) async fn run_queued_here(
        &self,
        session: &str,
        input: Vec<Message>,
        before: Vec<Event>,
        config: RunConfig,
        control: Option<ControlReceiver>,
        record: bool,
    ) -> Result<RunOutput, AgentError> {
        let run_id = self.ids.run_id();
        let entries = self.store.load(session).await?;
        let entries = self.settle(session, entries, &run_id, false).await?;
        let session_turns = agentloop_core::session_log::committed_turns(&entries);
        let mut config = config;
        let hints = serde_json::json!({
            "model": config.model,
            "max_steps": config.max_steps,
            "context_budget_tokens": config.context_budget_tokens,
            "compact_threshold": config.compact_threshold,
            "session_turns": session_turns,
        });
        let mut context = RunContext {
            session,
            run_id: &run_id,
            entries: &entries,
            input: &input,
            runtime_init_data: &self.context_init_data,
            runtime_hints: &hints,
            messages: agentloop_core::session_log::history(&entries),
            system_prompt: config.system.take(),
            tool_specs: config.tools.clone(),
            entries_to_append: Vec::new(),
        };
        self.context_manager.build_context(&mut context).await;
        let RunContext {
            messages: history,
            system_prompt,
            tool_specs,
            entries_to_append,
            ..
        } = context;
        config.system = system_prompt;
        config.tools = tool_specs;
        let mut entries = entries;
        for e in entries_to_append {
            self.store.append(session, &e).await?;
            entries.push(e);
        }
        let updates = self.context_manager.updates_context();
        let input_for_updates = if updates { input.clone() } else { Vec::new() };
        let start = Event::Start {
            run_id: run_id.clone(),
            history,
            input,
            session_turns,
        };
        let mut first = before;
        first.push(start);
        let output = self
            .drive(session, run_id, first, config, control, record)
            .await?;
        if updates {
            self.update_context(session, &output, &entries, input_for_updates)
                .await?;
        }
        Ok(output)
    }

    /// Calls the context manager's `compute_context_updates` after a run (R-CTX-2) and
    /// persists what it returns.
    async fn update_context(
        &self,
        session: &str,
        output: &RunOutput,
        entries: &[crate::store::Entry],
        input: Vec<Message>,
    ) -> Result<(), AgentError> {
        let result = &output.result;
        let mut new_messages = input;
        for step in &result.steps {
            if let Some(i) = step.message {
                let end = (i + 1 + step.tool_results).min(result.messages.len());
                new_messages.extend_from_slice(result.messages.get(i..end).unwrap_or_default());
            }
        }
        let overflow = result
            .steps
            .iter()
            .any(|s| s.end == crate::execute_result::StepEnd::ContextOverflow);
        let updates = self
            .context_manager
            .compute_context_updates(entries, &new_messages, overflow)
            .await;
        for e in &updates.entries_to_append {
            self.store.append(session, e).await?;
        }
        if let Some(messages) = updates.messages {
            let e = crate::store::Entry::Compaction {
                run_id: output.run_id.clone(),
                removed: 0,
                messages,
            };
            self.store.append(session, &e).await?;
        }
        Ok(())
    }

    /// Continues the interrupted run of `session` (R-IDEM-5..7): calls started without a
    /// result get `outcome_unknown` (unless their tool is retry-safe), calls that never started
    /// run now, an uncommitted step is re-requested with the same `model_call_index`.
    pub async fn resume_with(
        &self,
        session: &str,
        control: Option<&Controller>,
        record: bool,
    ) -> Result<RunOutput, AgentError> {
        let control = control.map(Controller::receiver);
        let agent = self.clone();
        let session = session.to_string();
        // Boxed, as in `run_queued`.
        worker::on_worker(Box::pin(async move {
            agent.resume_here(&session, control, record).await
        }))
        .await
    }

    /// [`Agent::resume_with`] in the caller's task.
    async fn resume_here(
        &self,
        session: &str,
        control: Option<ControlReceiver>,
        record: bool,
    ) -> Result<RunOutput, AgentError> {
        let entries = self.store.load(session).await?;
        let Some(run_id) = resume::interrupted_run(&entries) else {
            return Err(AgentError::NothingToResume {
                session: session.to_string(),
            });
        };
        let entries = self.settle(session, entries, &run_id, true).await?;
        let resume = resume::resume_event(&entries, &run_id);
        self.drive(
            session,
            run_id,
            vec![resume],
            (*self.config).clone(),
            control,
            record,
        )
        .await
    }

    /// Appends the repairs the loaded `entries` of `session` need before the next request
    /// (R-IDEM-7): the entries [`repair_with`](agentloop_core::session_log::repair_with) adds, then one
    /// [`Entry::Repair`](crate::store::Entry::Repair) marker of `run_id` listing every repair,
    /// and emits one `session_repaired` event per repair. For a resume, calls of the
    /// interrupted step that never started are left to run; for a new run they are closed as
    /// aborted, with a run end. Returns the entries with the appended ones.
    async fn settle(
        &self,
        session: &str,
        mut entries: Vec<crate::store::Entry>,
        run_id: &str,
        resuming: bool,
    ) -> Result<Vec<crate::store::Entry>, AgentError> {
        let tools = &self.tools;
        let mut repaired = agentloop_core::session_log::repair_with(&entries, |name| {
            resuming && tools.get(name).is_some_and(|t| t.retry_safe())
        });
        if !resuming {
            let superseded = resume::supersede(&entries, &repaired.entries);
            repaired.extend(superseded);
        }
        if repaired.is_empty() {
            return Ok(entries);
        }
        let repairs = repaired.repairs.clone();
        for e in repaired.into_entries(run_id) {
            self.store.append(session, &e).await?;
            entries.push(e);
        }
        let emitter = self.emitter(run_id);
        for repair in repairs {
            tracing::info!(session, run_id, %repair, "session_repaired");
            emitter.emit(crate::agent_event::AgentEvent::SessionRepaired { repair });
        }
        Ok(entries)
    }

    async fn drive(
        &self,
        session: &str,
        run_id: String,
        first: Vec<Event>,
        config: RunConfig,
        control: Option<ControlReceiver>,
        record: bool,
    ) -> Result<RunOutput, AgentError> {
        // OpenTelemetry GenAI semantic conventions (`invoke_agent`), beside our own fields.
        let span = tracing::info_span!(
            "run",
            otel.name = "invoke_agent agentloop",
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = "agentloop",
            gen_ai.conversation.id = %session,
            gen_ai.request.model = %config.model,
            session,
            run_id = %run_id,
            model = %config.model
        );
        // The run's tools and hooks may emit events of their own (`emit_custom`).
        let emitter = self.emitter(&run_id);
        with_custom_events(emitter, async move {
            let mut config = config;
            kit::apply_timeouts(&mut config, &self.timeouts);
            // Backoff jitter is drawn from the injected ids port, and recorded with the config.
            if config.step.retry.jitter_percent > 0 && config.step.retry.jitter_seed.is_none() {
                config.step.retry.jitter_seed = Some(self.ids.jitter_seed(&run_id));
            }
            let output_check = kit::OutputCheck::new(config.output.as_ref());
            let mut run = Run::new(config.clone());
            let mut trace = record.then(|| {
                Trace::new(TraceHeader {
                    version: TRACE_VERSION,
                    agentloop: env!("CARGO_PKG_VERSION").to_string(),
                    session: session.to_string(),
                    timeouts: Some(self.timeouts),
                    tools: config.tools.clone(),
                    config,
                })
            });
            let (tx, mut rx) = mpsc::unbounded_channel();
            let (model_tx, model_rx) = mpsc::unbounded_channel();
            let (mut ctl, partial, steering) = match control {
                Some(c) => (Some(c.rx), Some(c.partial), Some(c.steering)),
                None => (None, None, None),
            };
            let mut driver = Driver {
                agent: self,
                session: session.to_string(),
                run_id: run_id.clone(),
                tx,
                tasks: Tasks::default(),
                state_since: [None; 2],
                order: (self.timeouts.tool_order == ToolOrder::CallOrder)
                    .then(CompletionOrder::default),
                answers: Vec::new(),
                attempts: Vec::new(),
                model_tx,
                model_rx,
                metrics: RunMetrics::default(),
                compact_before: None,
            };
            // The first inputs: queued subtasks (if any), then `Start` or `Resume`.
            let mut pending = VecDeque::from(first);
            let mut partial_mark = None;
            // Steering the machine did not take (it arrived after the run's end was decided).
            let mut undelivered = Vec::new();
            loop {
                let event = match pending.pop_front() {
                    Some(e) => e,
                    None => {
                        tokio::select! {
                            e = std::future::poll_fn(|cx| driver.poll_inputs(cx)) => {
                                driver.arrived(e, &mut pending);
                                continue;
                            }
                            Some(e) = rx.recv() => {
                                driver.arrived(e, &mut pending);
                                continue;
                            }
                            Some(e) = async { match ctl.as_mut() { Some(c) => c.recv().await, None => None } } => e,
                        }
                    }
                };
                // A typed final answer's verdict rides on its `done` (recorded with it).
                let event = match &output_check {
                    Some(check) => check.annotate(event, &run),
                    None => event,
                };
                // The event is cloned only when a trace keeps it.
                let kept = trace.as_ref().map(|_| event.clone());
                let steer = match &event {
                    Event::Steer { text } => Some(text.clone()),
                    _ => None,
                };
                let step = run.handle(event);
                // A run past its last step boundary does not take steering: it is handed back.
                if let Some(text) = steer.as_ref().filter(|_| step.unhandled) {
                    undelivered.push(text.clone());
                }
                if let Some(s) = &steering {
                    if steer.is_some() {
                        s.received.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    s.pending
                        .store(run.steering().len(), std::sync::atomic::Ordering::SeqCst);
                }
                if let (Some(t), Some(event)) = (trace.as_mut(), kept.as_ref()) {
                    t.record(event, &step);
                }
                // R-STR-2: observers see the message as the machines assembled it, before the
                // step's events (a `text_delta`, say) are delivered.
                if let Some(p) = &partial {
                    p.refresh(&run, &mut partial_mark);
                }
                if let Some(failed) = driver.perform(step.effects).await {
                    pending.push_front(failed);
                }
                pending.extend(driver.answers.drain(..));
                if run.is_terminal() && pending.is_empty() {
                    break;
                }
            }
            driver.tasks.shutdown();
            if let Some(p) = &partial {
                p.set(None);
            }
            // Steering sent after the run's last step never reached its machine: it is handed
            // back with the queue's leftovers.
            if let Some(c) = ctl.as_mut() {
                while let Ok(e) = c.try_recv() {
                    if let Event::Steer { text } = e {
                        undelivered.push(text);
                    }
                }
            }
            let mut result = run.result().cloned().unwrap_or_else(|| LoopResult {
                outcome: crate::agent_event::Outcome::Failed,
                reason: "no result".into(),
                messages: run.messages().to_vec(),
                iterations: 0,
                usage: Default::default(),
                steering_left: run.steering().to_vec(),
                error: Some(crate::error::RunError::NoResult),
                steps: run.steps().to_vec(),
            });
            result.steering_left.extend(undelivered);
            if let Some(s) = &steering {
                s.pending.store(0, std::sync::atomic::Ordering::SeqCst);
            }
            let metrics = std::mem::take(&mut driver.metrics);
            metrics.trace(&run_id);
            Ok(RunOutput {
                run_id,
                result,
                trace,
                metrics,
            })
        })
        .instrument(span)
        .await
    }
}
