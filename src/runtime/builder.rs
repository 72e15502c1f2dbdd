//! [`AgentBuilder`]: an [`Agent`]'s ports, limits and policies, set one method at a time.

use super::*;

/// Builds an [`Agent`]. `build` exists only once a model was given: [`Agent::builder`] returns
/// an `AgentBuilder<()>`, [`model`](AgentBuilder::model) an `AgentBuilder<Arc<dyn Model>>`.
pub struct AgentBuilder<M = Arc<dyn Model>> {
    model: M,
    parts: Parts,
}

/// What an [`AgentBuilder`] holds besides its model (apart, so that giving the model changes
/// only the builder's type).
struct Parts {
    models: BTreeMap<String, Arc<dyn Model>>,
    hooks: Arc<dyn Hooks>,
    offload: Option<Offload>,
    offload_preview: Option<usize>,
    tools: ToolRegistry,
    store: Arc<dyn SessionStore>,
    approver: Arc<dyn Approver>,
    asker: Arc<dyn UserAsker>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn Ids>,
    sink: Arc<dyn EventSink>,
    compactor: Arc<dyn Compactor>,
    compaction_timeout_ms: Option<u64>,
    context_manager: Arc<dyn ContextManager>,
    context_init_data: serde_json::Value,
    config: RunConfig,
    timeouts: Timeouts,
    root: PathBuf,
    allow_instruction_writes: bool,
}

/// The default deadline of one compaction (`AgentBuilder::compaction_timeout_ms`): 2 min.
const DEFAULT_COMPACTION_TIMEOUT_MS: u64 = 120_000;

impl Agent {
    /// A builder with defaults: no tools (the built-ins are opt-in:
    /// [`builtin_tools`](AgentBuilder::builtin_tools)), in-memory store, auto-approve, system
    /// clock, time-based ids, no event sink, truncation compaction, root `.`.
    pub fn builder() -> AgentBuilder<()> {
        AgentBuilder {
            model: (),
            parts: Parts {
                models: BTreeMap::new(),
                hooks: Arc::new(NoHooks),
                offload: None,
                offload_preview: None,
                tools: ToolRegistry::new(),
                store: Arc::new(MemoryStore::new()),
                approver: Arc::new(AutoApprove),
                asker: Arc::new(NoUser),
                clock: Arc::new(SystemClock),
                ids: Arc::new(TimeIds::default()),
                sink: ports::null_sink(),
                compactor: Arc::new(Truncate),
                compaction_timeout_ms: Some(DEFAULT_COMPACTION_TIMEOUT_MS),
                context_manager: Arc::new(DefaultContextManager),
                context_init_data: serde_json::Value::Null,
                config: RunConfig::default(),
                timeouts: Timeouts::default(),
                root: PathBuf::from("."),
                allow_instruction_writes: false,
            },
        }
    }
}

impl<M> AgentBuilder<M> {
    setters! {
        /// Sets the retry decision (R-EXT-3): `f` says whether an attempt that failed with a
        /// typed error is worth retrying, given the error and the failed attempt's number among
        /// the step's attempts on its current model, from 1 (the retry policy's `max_retries`
        /// still bounds the retries). `f` is a plain function (or a closure that captures
        /// nothing): traces record it as `name` (`config.step.retry.decider`), and a replay finds
        /// it by that name in its registry (`agentloop_core::react::DeciderRegistry::with_retry`,
        /// passed to [`agentloop_core::trace::replay_with`]).
        ///
        /// ```
        /// use agentloop::prelude::*;
        /// use agentloop::{ErrorKind, ModelError};
        ///
        /// fn rate_limits_only(error: &ModelError, _attempt: u32) -> bool {
        ///     error.kind == ErrorKind::RateLimited
        /// }
        /// let agent = Agent::builder()
        ///     .model(ScriptedModel::demo())
        ///     .retry_decider("rate-limits-only", rate_limits_only)
        ///     .build();
        /// # let _ = agent;
        /// ```
        retry_decider(
            name: impl Into<std::borrow::Cow<'static, str>>,
            f: fn(&crate::ModelError, u32) -> bool
        ) =>
            parts.config.step.retry.decider = crate::process::RetryDeciderRef::new(name, f);

        /// Limits the input (prompt) tokens the run's committed steps may report. Reaching a
        /// usage limit asks the model for a final answer without tools (or stops the run, with
        /// [`stop_at_limit`](Self::stop_at_limit)); the run ends with reason
        /// `usage_limit:<limit>`. No limits by default.
        ///
        /// ```
        /// use agentloop::provider::scripted::ScriptedModel;
        /// use agentloop::runtime::Agent;
        /// let agent = Agent::builder()
        ///     .model(ScriptedModel::demo())
        ///     .max_total_tokens(50_000)
        ///     .max_tool_calls(20)
        ///     // at most 50 cents at 2.5 / 10 USD per million tokens
        ///     .max_cost_usd(0.50, 2.5, 10.0)
        ///     .build();
        /// assert_eq!(agent.config().limits.tool_calls, Some(20));
        /// ```
        max_input_tokens(tokens: u64) => parts.config.limits.input_tokens = Some(tokens);

        /// Limits the output tokens the run's committed steps may report (see
        /// [`max_input_tokens`](Self::max_input_tokens)).
        max_output_tokens(tokens: u64) => parts.config.limits.output_tokens = Some(tokens);

        /// Limits the input plus output tokens the run's committed steps may report (see
        /// [`max_input_tokens`](Self::max_input_tokens)).
        max_total_tokens(tokens: u64) => parts.config.limits.total_tokens = Some(tokens);

        /// Limits the model requests the run may send, retries and fallbacks included (see
        /// [`max_input_tokens`](Self::max_input_tokens)).
        max_model_calls(calls: u64) => parts.config.limits.model_calls = Some(calls);

        /// Limits the tool calls of the run's committed messages (see
        /// [`max_input_tokens`](Self::max_input_tokens)).
        max_tool_calls(calls: u64) => parts.config.limits.tool_calls = Some(calls);

        /// Limits what the run may cost, in US dollars, its usage priced at
        /// `input_usd_per_mtok` and `output_usd_per_mtok` per million tokens (see
        /// [`max_input_tokens`](Self::max_input_tokens)).
        max_cost_usd(max_usd: f64, input_usd_per_mtok: f64, output_usd_per_mtok: f64) =>
            parts.config.limits.cost = Some(agentloop_core::react::CostLimit {
                max_usd,
                input_usd_per_mtok,
                output_usd_per_mtok,
            });

        /// Ends the run at once when it reaches a usage limit, instead of asking the model for a
        /// final answer first.
        stop_at_limit() =>
            parts.config.limits.on_limit = agentloop_core::react::LimitAction::Stop;

        /// Keeps inline `<status>`, `<title>` and `<plan>` tags in the answer's text: they are
        /// still reported (`status_update` / `title_generated` / `plan_generated` events), and the
        /// text stays as the model wrote it. By default they are reported and removed from the
        /// answer.
        keep_inline_tags() =>
            parts.config.step.inline_tags = agentloop_core::process::InlineTags::Keep;

        /// Looks for no inline `<status>`, `<title>` or `<plan>` tags: the text is the answer,
        /// and no tag event is emitted.
        ignore_inline_tags() =>
            parts.config.step.inline_tags = agentloop_core::process::InlineTags::Off;

        /// Sets the hooks (R-EXT-1); a `Vec<Arc<dyn Hooks>>` is hooks that call several in order.
        hooks(hooks: Arc<dyn Hooks>) => parts.hooks = hooks;

        /// Offloads tool results longer than `limit_bytes` to files under `dir`
        /// (`<dir>/<session>/<tool_call_id>.txt`, R-TOOL-5): the model sees a preview (1 KiB, see
        /// [`offload_preview`](Self::offload_preview)) and the file's path instead
        /// (`large_result_offloaded`).
        offload(dir: impl Into<PathBuf>, limit_bytes: usize) =>
            parts.offload = Some(Offload::new(dir, limit_bytes));

        /// Bytes of an offloaded result kept inline as its preview (cut at a char boundary;
        /// default 1024). Only with [`offload`](Self::offload).
        offload_preview(bytes: usize) => parts.offload_preview = Some(bytes);

        /// Sets the tools.
        tools(tools: ToolRegistry) => parts.tools = tools;

        /// Sets the session store.
        store(store: Arc<dyn SessionStore>) => parts.store = store;

        /// Sets the approver.
        approver(approver: Arc<dyn Approver>) => parts.approver = approver;

        /// Makes runs reproducible for tests: run ids `run-1`, `run-2`, ... (so each run's
        /// backoff jitter seed is fixed too), and event timestamps from tokio's clock, starting at
        /// 0 ms when the agent is built (virtual time under a paused runtime, `start_paused`).
        /// Two runs of the same script then record the same trace and the same events.
        deterministic() =>
            parts.ids = Arc::new(SequentialIds::default()),
            parts.clock = Arc::new(TokioClock::default());

        /// Sets the clock: event timestamps and the machines' timers (the default reads the
        /// system time and sleeps on tokio's timers). See [`Clock`] for an example.
        clock(clock: Arc<dyn Clock>) => parts.clock = clock;

        /// Sets the id generator: run ids and each run's backoff jitter seed (the default:
        /// time-based ids and a random seed). See [`Ids`] for an example.
        ids(ids: Arc<dyn Ids>) => parts.ids = ids;

        /// Sets the event sink.
        sink(sink: Arc<dyn EventSink>) => parts.sink = sink;

        /// Sets the compaction strategy.
        compactor(compactor: Arc<dyn Compactor>) => parts.compactor = compactor;

        /// How long one compaction may take, on the agent's clock (default 2 minutes; `None`: as
        /// long as it takes). Past it the compaction fails like a compactor's error:
        /// a context that still fits is sent as it is, one that does not fails the run
        /// (`compaction_failed`). An LLM summary whose model hangs no longer waits until the
        /// run's deadline.
        compaction_timeout_ms(ms: Option<u64>) => parts.compaction_timeout_ms = ms;

        /// Sets the context manager (R-CTX-1/2): it builds each new run's history,
        /// system prompt and tools, and may keep entries before and after the run; see
        /// [`ContextManager`]. Default: the history rebuilt from the session's entries, the run's
        /// own system prompt and tools (see [`RunContext`]).
        context_manager(manager: Arc<dyn ContextManager>) => parts.context_manager = manager;

        /// The data every [`RunContext`] carries as `runtime_init_data` (default `null`).
        context_init_data(data: serde_json::Value) => parts.context_init_data = data;

        /// Caps a run at `steps` model steps (default 10): the last one gets a reminder that it is
        /// the last and is offered no tools (R-OUT-5), so the run ends with an answer.
        max_steps(steps: u32) => parts.config.max_steps = steps;

        /// Tells the agent its model's context window in tokens (R-CTX-3). The run compacts its
        /// context before it would overflow the window (a `context_budget_tokens` set through
        /// [`configure`](Self::configure) takes precedence). Without either, the window is looked
        /// up by model name; for an unknown model only a message cap
        /// ([`compact_after_messages`](Self::compact_after_messages)) or a provider's overflow
        /// error compacts.
        context_window(tokens: u64) => parts.config.context_window = Some(tokens);

        /// Compacts the context when it has more than `messages` messages, whatever its size in
        /// tokens (off by default).
        compact_after_messages(messages: usize) => parts.config.compact_threshold = Some(messages);

        /// Sets the whole run configuration (its `tools` are replaced by the registry's specs). The
        /// builder's other methods each set a part of it; this and [`configure`](Self::configure)
        /// reach the rest ([`RunConfig`]'s fields are documented with the core's machines).
        config(config: RunConfig) => parts.config = config;

        /// Fixes the seed of every run's retry backoff jitter (by default each run draws one
        /// from the agent's id source). The seed is recorded in the trace's header either way; a
        /// fixed one makes the header and the delays the same on every run (CLI: `--seed N`).
        seed(seed: u64) => parts.config.step.retry.jitter_seed = Some(seed);

        /// Caps each model step's output at `max_tokens` tokens (the request's `max_tokens`;
        /// without it OpenAI-compatible servers use their own default, which for a local server
        /// can be the whole context, and Anthropic uses `HttpConfig::default_max_tokens`).
        max_tokens(max_tokens: u32) => parts.config.params.max_tokens = Some(max_tokens);

        /// Sets whether and which tool the model must call on the steps that offer tools (the
        /// final step offers none, R-OUT-5, so a forced tool cannot loop past `max_steps`).
        /// A [`ToolChoice::Tool`](crate::model::ToolChoice::Tool) naming no registered tool is
        /// not checked here: the provider refuses it.
        tool_choice(choice: crate::model::ToolChoice) => parts.config.params.tool_choice = Some(choice);

        /// Sets what a rejected or timed-out approval does: `false`
        /// (the default) stops the run after the step with reason `tool_rejected`; `true`
        /// continues, the model seeing the denied result. An approval always resumes.
        auto_resume(on: bool) => parts.config.step.auto_resume = on;

        /// Sets how long a call waits for its approval (R-CTL-4; default `None`: as long as the
        /// approver takes). The step's machine starts it as a timer with each approval request;
        /// when it fires first the call is denied with status `timeout` (a rejection, so
        /// [`auto_resume`](Self::auto_resume) decides whether the run goes on) and the approver's
        /// wait is withdrawn. A session replaces it with its own
        /// [`SessionConfig::approval_timeout_ms`](crate::session::SessionConfig::approval_timeout_ms).
        approval_timeout(timeout_ms: Option<u64>) => parts.config.step.approval_timeout_ms = timeout_ms;

        /// Sets the system prompt (replacing any).
        system(text: impl Into<String>) => parts.config.system = Some(text.into());

        /// Sets who answers `ask_user` questions (the default: nobody, so a question fails at
        /// once; a session installs its own). See [`UserAsker`] for an example.
        asker(asker: Arc<dyn UserAsker>) => parts.asker = asker;

        /// How long a tool call may run before it gets a `timeout` error result (R-IN-3; default
        /// 120 s). A [`ToolRule`]'s timeout overrides it for the calls the rule matches.
        tool_timeout_ms(ms: u64) => parts.timeouts.tool_ms = ms;

        /// How long a model attempt may wait for its response to start and its first delta to
        /// arrive (default 60 s), and then at most between two deltas (default 30 s). Expiry is a
        /// retryable `stalled` failure of the attempt.
        stream_timeouts_ms(first_chunk_ms: u64, stall_ms: u64) =>
            parts.timeouts.first_chunk_ms = first_chunk_ms,
            parts.timeouts.stall_ms = stall_ms;

        /// How long one model attempt may take, from sending to its last delta (default: no
        /// limit). Expiry is a retryable `timeout` error.
        request_timeout_ms(ms: u64) => parts.timeouts.request_ms = Some(ms);

        /// How long a whole run may take (default: no limit). Expiry aborts the run.
        run_deadline_ms(ms: u64) => parts.timeouts.run_deadline_ms = Some(ms);

        /// Feeds parallel tools' results to the machine as each call finishes, so each result is
        /// stored as early as possible (R-IN-4). By default they reach it in the order the calls
        /// were started, so identical runs record identical traces; with this, traces of
        /// parallel calls may differ from run to run.
        tool_results_as_completed() => parts.timeouts.tool_order = ToolOrder::Completion;

        /// Sets the directory file tools are confined to.
        root(root: impl Into<PathBuf>) => parts.root = root.into();

        /// Lets the built-in file tools write instruction, agent and rule files (`AGENTS.md`,
        /// `agents/ID.md`, a tool rules file; see [`crate::tools::protected`]). Off by default:
        /// a model that appends to its own instructions or rules changes every later run.
        ///
        /// ```
        /// use agentloop::prelude::*;
        /// let agent = Agent::builder()
        ///     .model(ScriptedModel::demo())
        ///     .allow_instruction_writes(true)
        ///     .build();
        /// # let _ = agent;
        /// ```
        allow_instruction_writes(allow: bool) => parts.allow_instruction_writes = allow;
    }

    /// Sets the model.
    pub fn model(self, model: impl Model + 'static) -> AgentBuilder<Arc<dyn Model>> {
        self.model_arc(Arc::new(model))
    }

    /// Sets a shared model.
    pub fn model_arc(self, model: Arc<dyn Model>) -> AgentBuilder<Arc<dyn Model>> {
        AgentBuilder {
            model,
            parts: self.parts,
        }
    }

    /// Registers another model under `name`; a run whose configured model is `name` (e.g.
    /// after `switch_model(name)`) is served by it.
    pub fn extra_model(mut self, name: impl Into<String>, model: Arc<dyn Model>) -> Self {
        self.parts.models.insert(name.into(), model);
        self
    }

    /// Adds a model to the run's fallback chain: when a step fails with a provider
    /// error that is not retried, or exhausts its retries (not on a context overflow, not on
    /// an abort), the step is requested again from the next model of the chain, in the order
    /// they were added (row `executing_fallback`, event `model_fallback`). `name` is what the
    /// requests carry; `model` serves it. To fall back to another model name of the same
    /// client, put the name in [`RunConfig::fallbacks`] instead.
    pub fn fallback_model(mut self, name: impl Into<String>, model: Arc<dyn Model>) -> Self {
        let name = name.into();
        self.parts.models.insert(name.clone(), model);
        self.parts.config.fallbacks.push(name);
        self
    }

    /// Adds one tool to the agent's tools.
    pub fn tool(mut self, tool: Arc<dyn crate::tools::Tool>) -> Self {
        self.parts.tools.insert(tool);
        self
    }

    /// Adds the built-in tools: `calculator`, `read_file` and `append_line` (which writes
    /// files under [`root`](Self::root); mind the approver, which auto-approves by default).
    #[cfg(feature = "builtin-tools")]
    pub fn builtin_tools(mut self) -> Self {
        self.parts.tools.extend(ToolRegistry::builtin());
        self
    }

    /// Adds the tools of a connected MCP server (feature `mcp`; see [`crate::mcp`]). The
    /// builder stays synchronous: connecting is IO, done before by
    /// [`McpServer::connect_stdio`](crate::mcp::McpServer::connect_stdio) and its siblings. A
    /// tool named like one already registered replaces it.
    #[cfg(feature = "mcp")]
    pub fn mcp(mut self, server: &crate::mcp::McpServer) -> Self {
        for tool in server.tools() {
            self.parts.tools.insert(tool);
        }
        self
    }

    /// Changes the run configuration in place.
    pub fn configure(mut self, f: impl FnOnce(&mut RunConfig)) -> Self {
        f(&mut self.parts.config);
        self
    }

    /// Titles each new session with `model`, registered as `name` (off by
    /// default): on a session's first run the title model is asked in parallel with the
    /// first step, and its answer is a `title_generated` event and a `title` session entry.
    pub fn title_model(mut self, name: impl Into<String>, model: Arc<dyn Model>) -> Self {
        let name = name.into();
        self.parts.models.insert(name.clone(), model);
        self.parts.config.title_model = Some(name);
        self
    }

    /// Composes an agent's instructions into the system prompt with
    /// [`build_system_prompt`](crate::instructions::build_system_prompt), after any system
    /// prompt already set. Load them by agent id with
    /// [`instructions::load`](crate::instructions::load).
    pub fn instructions(mut self, text: &str) -> Self {
        self.parts.config.system = Some(crate::instructions::build_system_prompt(
            self.parts.config.system.as_deref(),
            text,
        ));
        self
    }

    /// Adds a reminder rule: `text` goes to the model, as a user message after the context,
    /// before each step `when` holds for (every step, every n-th, after a failed tool call,
    /// or from a context size on). Reminders are not stored in the session.
    ///
    /// ```
    /// use agentloop::provider::scripted::ScriptedModel;
    /// use agentloop::runtime::{Agent, ReminderWhen};
    /// let agent = Agent::builder()
    ///     .model(ScriptedModel::demo())
    ///     .reminder(ReminderWhen::AfterToolFailure, "Read the tool's error before retrying.")
    ///     .reminder(ReminderWhen::EveryNSteps(5), "Keep the plan short.")
    ///     .build();
    /// # let _ = agent;
    /// ```
    pub fn reminder(mut self, when: ReminderWhen, text: impl Into<String>) -> Self {
        self.parts
            .config
            .reminders
            .push(crate::react::reminders::Reminder {
                when,
                text: text.into(),
            });
        self
    }

    /// Adds a tool rule after those already set (R-TOOL-3): per call, by tool name
    /// and an argument pattern, whether it runs, waits for the approver or gets a denied
    /// result without running, and its deadline. The last matching rule decides, so add the
    /// general rules first and their exceptions after; calls no rule matches keep the
    /// per-tool approval map and timeout. See `agentloop_core::tool_rules`.
    ///
    /// ```
    /// use agentloop::provider::scripted::ScriptedModel;
    /// use agentloop::runtime::{Agent, ToolRule};
    /// let agent = Agent::builder()
    ///     .model(ScriptedModel::demo())
    ///     .tool_rule(ToolRule::ask("*"))
    ///     .tool_rule(ToolRule::allow("calculator").timeout_ms(5_000))
    ///     .tool_rule(ToolRule::deny("append_line").argument("line", "*password*"))
    ///     .build();
    /// assert_eq!(agent.config().step.tool_rules.len(), 3);
    /// ```
    pub fn tool_rule(mut self, rule: ToolRule) -> Self {
        self.parts.config.step.tool_rules.push(rule);
        self
    }

    /// Adds tool rules in order after those already set (see [`tool_rule`](Self::tool_rule)).
    pub fn tool_rules(mut self, rules: impl IntoIterator<Item = ToolRule>) -> Self {
        self.parts.config.step.tool_rules.extend(rules);
        self
    }

    /// Offers the built-in `write_todos` tool: the model keeps a todo
    /// list, each completed call reported as a `todo_change{todos}` event.
    pub fn write_todos(mut self) -> Self {
        self.parts.tools.insert(Arc::new(crate::tools::WriteTodos));
        self
    }

    /// Offers the built-in `ask_user` tool: the model asks the person a
    /// question, with options; the call waits for the answer (a session's
    /// [`respond`](crate::session::Session::respond), the CLI's `chat`), at most
    /// `timeout_ms` when given. Outside a session nobody can answer and the call fails.
    pub fn ask_user(mut self, timeout_ms: Option<u64>) -> Self {
        self.parts.tools.insert(Arc::new(crate::tools::AskUser));
        self.parts.config.step.ask_user = true;
        self.parts.config.step.ask_user_timeout_ms = timeout_ms;
        self
    }
}

impl AgentBuilder<Arc<dyn Model>> {
    /// Builds the agent.
    pub fn build(self) -> Agent {
        let mut config = self.parts.config;
        kit::configure_tools(&mut config, &self.parts.tools);
        config.step.gate_tools = self.parts.hooks.gates_tools();
        if config.model.is_empty() || config.model == "scripted" {
            config.model = self.model.name();
        }
        let mut models = self.parts.models;
        models
            .entry(self.model.name())
            .or_insert_with(|| self.model.clone());
        models
            .entry(config.model.clone())
            .or_insert_with(|| self.model.clone());
        let compactor: Arc<dyn Compactor> = match self.parts.compaction_timeout_ms {
            Some(ms) => Arc::new(CompactionDeadline {
                inner: self.parts.compactor,
                clock: self.parts.clock.clone(),
                ms,
            }),
            None => self.parts.compactor,
        };
        Agent {
            model: self.model,
            models,
            hooks: self.parts.hooks,
            offload: self.parts.offload.map(|mut o| {
                if let Some(bytes) = self.parts.offload_preview {
                    o.preview_bytes = bytes;
                }
                o
            }),
            tools: SharedTools::new(self.parts.tools),
            store: self.parts.store,
            approver: self.parts.approver,
            asker: self.parts.asker,
            clock: self.parts.clock,
            ids: self.parts.ids,
            sink: self.parts.sink,
            compactor,
            context_manager: self.parts.context_manager,
            context_init_data: Arc::new(self.parts.context_init_data),
            config: Arc::new(config),
            timeouts: self.parts.timeouts,
            root: self.parts.root,
            allow_instruction_writes: self.parts.allow_instruction_writes,
            event_index: Default::default(),
        }
    }
}
