//! `agentloop run` and `agentloop resume`: the shared agent setup (model, tools, timeouts,
//! event printing, store) and the two commands.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, ValueEnum};

use crate::mcp::{add_tools, McpArgs};
use crate::print::{EventsFormat, Output};
use crate::regular_file::read_regular_to_string;
use crate::term::ColorChoice;

use agentloop::attachment::{AttachmentError, Prompt};
use agentloop::mcp::McpServer;
use agentloop::model::{Model, ToolChoice};
use agentloop::otlp::OtlpExporter;
use agentloop::provider::http::{model_from_flags, ProviderKind};
use agentloop::provider::openai::ReasoningReplay;
use agentloop::runtime::{Agent, AgentBuilder, AgentError, Controller, RunOutput};
use agentloop::store::{AnyStore, Durability, Entry, SessionLock, SessionStore};
use agentloop::tools::ToolRegistry;
use agentloop::EventEnvelope;
use agentloop::Outcome;
use agentloop_core::output::OutputSpec;
use agentloop_core::process::{InlineTags, ToolRule};
use agentloop_core::react::{CostLimit, LimitAction, UsageLimits};

/// Arguments of `agentloop run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The prompt.
    pub prompt: String,
    /// An image to send with the prompt (repeatable): png, jpg/jpeg, gif or webp; its media
    /// type comes from the extension. Images follow the prompt's text, in the order given,
    /// then the `--file`s. All images and files together may have 10 MiB.
    #[arg(long = "image", value_name = "PATH")]
    pub images: Vec<PathBuf>,
    /// A file to send with the prompt (repeatable): a pdf. OpenAI-compatible servers get it as
    /// a `file` part, Anthropic as a `document` block.
    #[arg(long = "file", value_name = "PATH")]
    pub files: Vec<PathBuf>,
    /// Session id: create or continue this session in the store (without it, the run is a
    /// one-shot in-memory session).
    #[arg(long)]
    pub session: Option<String>,
    /// Store options (used with `--session`).
    #[command(flatten)]
    pub store: StoreArgs,
    /// Model, tools and runtime options.
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Arguments of `agentloop resume`.
#[derive(Debug, Args)]
pub(crate) struct ResumeArgs {
    /// The session whose interrupted run to continue.
    pub session: String,
    /// Store options.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Model, tools and runtime options.
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Where sessions live.
#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// Session store: a directory (default: `$AGENTLOOP_STORE`, else
    /// `./.agentloop/sessions`), `sqlite:PATH` or `postgres://user@host:port/db`.
    #[arg(long)]
    pub store: Option<String>,
    /// When appends reach the disk: `sync` (fsync every entry), `batched` (fsync every 64
    /// entries) or `batched:N`.
    #[arg(long, default_value = "sync")]
    pub durability: Durability,
}

/// Opens the store `url` names (the default file store without one): the one place the CLI
/// turns a `--store` value into a store.
pub(crate) async fn open_store(
    url: Option<&str>,
    durability: Durability,
) -> Result<AnyStore, String> {
    let opened = match url {
        Some(url) => AnyStore::open(url, durability).await,
        None => AnyStore::open_default(durability).await,
    };
    opened.map_err(|e| {
        let name = url.map_or_else(
            || "(the default: $AGENTLOOP_STORE, else ./.agentloop/sessions)".to_string(),
            str::to_string,
        );
        format!("cannot open the session store {name}: {e}")
    })
}

/// The database file of a `sqlite:PATH` (or `sqlite://PATH`) store URL.
pub(crate) fn sqlite_path(url: &str) -> Option<std::path::PathBuf> {
    let path = url.strip_prefix("sqlite:")?;
    let path = path.strip_prefix("//").unwrap_or(path);
    (!path.is_empty()).then(|| std::path::PathBuf::from(path))
}

/// Options shared by `run` and `resume`: the model, the tools and the runtime.
#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// Which model client: the offline scripted model (default), or a registered provider
    /// (OpenAI-compatible Chat Completions, Anthropic Messages, the OpenAI Responses API,
    /// Google Gemini; key from OPENAI_API_KEY / ANTHROPIC_API_KEY / GEMINI_API_KEY).
    #[arg(long, default_value = "scripted", value_parser = ProviderArg::parser())]
    pub provider: ProviderArg,
    /// Model name sent to the provider (required with a real provider).
    #[arg(long)]
    pub model: Option<String>,
    /// Provider base URL (default: $OPENAI_BASE_URL / $ANTHROPIC_BASE_URL / $GEMINI_BASE_URL,
    /// else the public API).
    #[arg(long)]
    pub base_url: Option<String>,
    /// TCP connect timeout for real providers, in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub connect_timeout: f64,
    /// OpenAI-compatible: which assistant messages carry their reasoning back as
    /// `reasoning_content`: `all` (every one that has some: DeepSeek's thinking mode with
    /// tools requires it, Moonshot and Z.ai ask for it), `current-turn` (only those after the
    /// last user message: the first deepseek-reasoner refused earlier ones) or `off`.
    #[arg(long, value_name = "off|current-turn|all", default_value = "all")]
    pub reasoning_replay: ReasoningReplay,
    /// Anthropic: extended thinking with this budget of tokens (at least 1024, and below
    /// `--max-tokens`, 8192 by default). The model's thinking (with its signature) is sent
    /// back with each of its turns, as the API requires.
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1024..))]
    pub thinking_budget: Option<u32>,
    /// OpenAI Responses: the reasoning effort (`reasoning.effort`: `minimal`, `low`, `medium`,
    /// `high`, as the model accepts).
    #[arg(long, value_name = "LEVEL")]
    pub reasoning_effort: Option<String>,
    /// OpenAI Responses: ask for a summary of the model's reasoning (`reasoning.summary`),
    /// streamed as reasoning text.
    #[arg(long, value_name = "auto|concise|detailed")]
    pub reasoning_summary: Option<String>,
    /// A scripted-model JSON script (default: the built-in calculator demo).
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// Write a JSON Lines trace of the run here.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Print the run's metrics on stderr when it ends (R-OBS): step and tool latency
    /// percentiles, time to first token, token totals, retries by kind, compactions.
    #[arg(long)]
    pub metrics: bool,
    /// Send each run's spans (OpenTelemetry GenAI conventions: `invoke_agent`, `chat`,
    /// `execute_tool`, with token usage) to this OTLP/HTTP traces endpoint when the run ends,
    /// e.g. `http://127.0.0.1:4318/v1/traces`. A collector that is down costs a warning.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// A header for the OTLP requests (`NAME=VALUE`, e.g. an API key); repeatable.
    #[arg(long, value_name = "NAME=VALUE")]
    pub otlp_header: Vec<String>,
    /// Put the messages, tool definitions, arguments and results in the spans sent to
    /// `--otlp-endpoint` (off by default: they may hold personal or secret data).
    #[arg(long)]
    pub otlp_content: bool,
    /// Maximum model steps.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_steps: u32,
    /// How to print events: `text` (answer on stdout, state changes on stderr) or `json`
    /// (every event as a JSON line on stdout).
    #[arg(long, value_enum, default_value_t = EventsFormat::Text)]
    pub events: EventsFormat,
    /// Directory the file tools are confined to.
    #[arg(long, default_value = ".")]
    pub root: PathBuf,
    /// Stall timeout between deltas, in seconds.
    #[arg(long, default_value_t = 30.0)]
    pub stall_timeout: f64,
    /// Timeout for the first chunk of a response, in seconds.
    #[arg(long, default_value_t = 60.0)]
    pub first_chunk_timeout: f64,
    /// Whole-request timeout per attempt, in seconds (default: none).
    #[arg(long)]
    pub request_timeout: Option<f64>,
    /// Whole-run deadline, in seconds; expiry aborts the run (default: none).
    #[arg(long)]
    pub deadline: Option<f64>,
    /// Per-tool timeout, in seconds.
    #[arg(long, default_value_t = 120.0)]
    pub tool_timeout: f64,
    /// A tool rule (repeatable; rules apply in order and the last one that matches a call
    /// decides): `ACTION[@TIMEOUT]:TOOL[:FIELD=PATTERN]`. ACTION is `allow` (run), `ask` (wait
    /// for approval: `/approve` in `chat`; `run` approves by itself) or `deny` (the call does
    /// not run; the model gets a denied result naming the rule). TIMEOUT (`500ms`, `30s`) is
    /// the call's deadline instead of `--tool-timeout`. TOOL and PATTERN are wildcards (`*`
    /// any run of characters, `?` one; `git *` also matches `git`); FIELD is an argument name,
    /// a JSON Pointer (`/opts/0`) or empty for all the arguments as JSON. E.g.
    /// `--tool-rule 'deny:append_line:line=*password*'`, `--tool-rule 'allow@5s:calculator'`.
    #[arg(long = "tool-rule", value_name = "RULE")]
    pub tool_rule: Vec<ToolRule>,
    /// Tool rules from a JSON file: an array of `{"tool": "append_line", "argument":
    /// {"field": "line", "pattern": "*password*"}, "action": "deny", "reason": "...",
    /// "timeout_ms": 5000}` (`argument`, `reason` and `timeout_ms` optional). They come
    /// before the `--tool-rule`s, which therefore win where both match.
    #[arg(long = "tool-rules", value_name = "FILE")]
    pub tool_rules: Option<PathBuf>,
    /// Inline `<status>` / `<title>` / `<plan>` tags in the model's text: `strip`
    /// (report them as `status_update` / `title_generated` / `plan_generated` events and remove them from the
    /// answer), `keep` (report them, leave the answer as written) or `off` (no tag handling).
    #[arg(long, value_enum, default_value_t = InlineTagsArg::Strip)]
    pub inline_tags: InlineTagsArg,
    /// A system prompt for the model.
    #[arg(long)]
    pub system: Option<String>,
    /// Load the instructions of agent ID from `--agents-dir` (`ID.md`) into the system
    /// prompt (after `--system`).
    #[arg(long, value_name = "ID")]
    pub agent: Option<String>,
    /// The directory of agent instructions, one `ID.md` per agent.
    #[arg(long, value_name = "DIR", default_value = "agents")]
    pub agents_dir: PathBuf,
    /// Let the model's file tools write instruction, agent and rule files (`AGENTS.md`,
    /// `--agents-dir`'s `ID.md`, the `--tool-rules` file). Off by default: what the model
    /// appends there would steer every later run.
    #[arg(long)]
    pub allow_instruction_writes: bool,
    /// Offer the built-in `write_todos` tool: the model keeps a todo list, each change shown
    /// (`[todo]` lines; `todo_change` in `--events json`).
    #[arg(long)]
    pub todos: bool,
    /// Retries per step.
    #[arg(long, default_value_t = 3)]
    pub max_retries: u32,
    /// Initial backoff in milliseconds (doubles, capped at 10 s).
    #[arg(long, default_value_t = 1000)]
    pub initial_backoff_ms: u64,
    /// Seed of the retry backoff's jitter (default: a fresh one per run). Recorded in the
    /// trace's header either way; fixing it makes the header, and the delays, the same on
    /// every run.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Compact the context (by truncation, never splitting a tool call from its result) when
    /// it holds more than N messages (R-OUT-2; default: no limit by count).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub compact_threshold: Option<u64>,
    /// The model's context window in tokens: the context is compacted (oldest whole turns
    /// first; the first and the latest request stay) once it reaches 80 % of it, before the
    /// provider refuses it. Default: the window of a known model (`gpt-4o` 128000,
    /// `claude-*` 200000, ...), else none. A provider's context-overflow answer compacts and
    /// retries either way.
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u64).range(1..))]
    pub context_window: Option<u64>,
    /// Most output tokens per model step (default: the provider's; Anthropic: 8192). A small
    /// local model without it can ramble up to its context limit.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: Option<u32>,
    /// Whether the model may call tools: `auto`, `none`, `required`, or a tool's name to force
    /// that tool. Sent on the steps that offer tools; the final step (`--max-steps`) offers
    /// none, so `--tool-choice calculator --max-steps 2` is one forced call, then an answer.
    #[arg(long)]
    pub tool_choice: Option<ToolChoice>,
    /// A fallback model (repeatable, tried in order): when a step fails with an error that is
    /// not retried (401, 400, ...) or exhausts its retries, the same step is requested again
    /// from the next fallback, served by the same provider and base URL under this model name.
    #[arg(long = "fallback", value_name = "MODEL")]
    pub fallbacks: Vec<String>,
    /// Title a new session with this (small) model, served by the same provider and base URL:
    /// asked once, in parallel with the first step; shown as `[title]`, kept in the session.
    #[arg(long, value_name = "MODEL")]
    pub title_model: Option<String>,
    /// A typed final answer: the JSON Schema in FILE. Requests carry it (OpenAI-compatible:
    /// `response_format`; Anthropic: an instruction), an answer that does not match goes back
    /// to the model with its errors (`--output-retries` times), and stdout gets only the
    /// validated JSON, on one line, when the run completes.
    #[arg(long, value_name = "FILE")]
    pub output_schema: Option<PathBuf>,
    /// How many times an answer that does not match `--output-schema` is sent back.
    #[arg(long, default_value_t = 1)]
    pub output_retries: u32,
    /// Usage limits of the run; reaching one asks for a final answer (or stops, see
    /// `--on-limit`) and the run ends with reason `usage_limit:<limit>`.
    #[command(flatten)]
    pub limits: LimitArgs,
    /// MCP tool servers.
    #[command(flatten)]
    pub mcp: McpArgs,
    /// Also print every state transition (and, on a terminal, tool calls and retries) as
    /// lines on stderr.
    #[arg(short, long)]
    pub verbose: bool,
    /// Colors in the status and final lines on a terminal: `auto` (unless `NO_COLOR` is
    /// set), `always` or `never`.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// Model price in USD per million tokens, `INPUT,OUTPUT` (e.g. `2.5,10`): the final line
    /// adds the run's cost.
    #[arg(long, value_name = "IN,OUT", value_parser = parse_price)]
    pub price: Option<Price>,
}

/// `--max-input-tokens` ... `--on-limit`: the run's usage limits.
#[derive(Debug, Args)]
pub(crate) struct LimitArgs {
    /// Most input tokens the run's steps may report.
    #[arg(long)]
    pub max_input_tokens: Option<u64>,
    /// Most output tokens the run's steps may report.
    #[arg(long)]
    pub max_output_tokens: Option<u64>,
    /// Most input plus output tokens.
    #[arg(long)]
    pub max_total_tokens: Option<u64>,
    /// Most model requests (retries and fallbacks included).
    #[arg(long)]
    pub max_model_calls: Option<u64>,
    /// Most tool calls.
    #[arg(long)]
    pub max_tool_calls: Option<u64>,
    /// Most US dollars the run may cost, at `--price`'s prices (needs `--price`).
    #[arg(long, requires = "price")]
    pub max_cost: Option<f64>,
    /// What reaching a limit does: `final-answer` (one more step without tools) or `stop`.
    #[arg(long, value_enum, default_value_t = OnLimit::FinalAnswer)]
    pub on_limit: OnLimit,
}

/// `--on-limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnLimit {
    /// One more step without tools for a final answer.
    FinalAnswer,
    /// End the run at once.
    Stop,
}

/// `--inline-tags`: what a run does with inline `<status>`, `<title>` and `<plan>` tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InlineTagsArg {
    /// Report the tags as events and remove them from the answer.
    Strip,
    /// Report the tags as events and leave the answer as the model wrote it.
    Keep,
    /// No tag handling.
    Off,
}

impl From<InlineTagsArg> for InlineTags {
    fn from(a: InlineTagsArg) -> Self {
        match a {
            InlineTagsArg::Strip => InlineTags::Strip,
            InlineTagsArg::Keep => InlineTags::Keep,
            InlineTagsArg::Off => InlineTags::Off,
        }
    }
}

impl LimitArgs {
    /// The limits the flags set (`price`: `--price`, for `--max-cost`).
    pub(crate) fn limits(&self, price: Option<Price>) -> UsageLimits {
        UsageLimits {
            input_tokens: self.max_input_tokens,
            output_tokens: self.max_output_tokens,
            total_tokens: self.max_total_tokens,
            model_calls: self.max_model_calls,
            tool_calls: self.max_tool_calls,
            cost: self.max_cost.zip(price).map(|(max_usd, p)| CostLimit {
                max_usd,
                input_usd_per_mtok: p.input_per_mtok,
                output_usd_per_mtok: p.output_per_mtok,
            }),
            on_limit: match self.on_limit {
                OnLimit::FinalAnswer => LimitAction::FinalAnswer,
                OnLimit::Stop => LimitAction::Stop,
            },
        }
    }
}

impl AgentArgs {
    /// Whether runs record their trace: for `--trace` and for `--otlp-endpoint` (whose spans
    /// are built from it).
    pub(crate) fn records(&self) -> bool {
        self.trace.is_some() || self.otlp_endpoint.is_some()
    }

    /// Whether to color (`--color`, `NO_COLOR`, stderr a terminal).
    pub(crate) fn color_enabled(&self) -> bool {
        use std::io::IsTerminal;
        let no_color = std::env::var("NO_COLOR").ok();
        crate::term::color_enabled(
            self.color,
            std::io::stderr().is_terminal(),
            no_color.as_deref(),
        )
    }

    /// The cost of `usage` at `--price`.
    pub(crate) fn cost(&self, usage: Option<&agentloop::Usage>) -> Option<f64> {
        Some(self.price?.cost(usage?))
    }
}

/// `--price IN,OUT`: a model's price in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Price {
    /// Per million input tokens.
    pub input_per_mtok: f64,
    /// Per million output tokens.
    pub output_per_mtok: f64,
}

impl Price {
    /// The cost of `usage` (cache reads and writes unpriced).
    fn cost(&self, usage: &agentloop::Usage) -> f64 {
        (usage.input_tokens as f64 * self.input_per_mtok
            + usage.output_tokens as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}

/// `--price IN,OUT`: two non-negative numbers.
fn parse_price(s: &str) -> Result<Price, String> {
    let parse = |v: &str| -> Result<f64, String> {
        match v.trim().parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
            _ => Err(format!("{v:?} is not a price (a non-negative number)")),
        }
    };
    let (input, output) = s
        .split_once(',')
        .ok_or_else(|| format!("expected IN,OUT (USD per million tokens), got {s:?}"))?;
    Ok(Price {
        input_per_mtok: parse(input)?,
        output_per_mtok: parse(output)?,
    })
}

fn secs(s: f64) -> u64 {
    (s.max(0.0) * 1000.0) as u64
}

/// `--provider`: `scripted` (the offline model) or a provider of the library's registry
/// ([`ProviderKind::ALL`]), so a provider registered there needs no CLI change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProviderArg(Option<ProviderKind>);

impl ProviderArg {
    /// The provider's wire format (`None`: the scripted model).
    pub(crate) fn kind(self) -> Option<ProviderKind> {
        self.0
    }

    /// The flag's parser: `scripted` and the registered names, listed in `--help`.
    pub(crate) fn parser() -> impl clap::builder::TypedValueParser<Value = ProviderArg> {
        use clap::builder::TypedValueParser;
        let names = std::iter::once("scripted").chain(ProviderKind::ALL.iter().map(|k| k.as_str()));
        clap::builder::PossibleValuesParser::new(names).map(|s| ProviderArg(s.parse().ok()))
    }
}

fn model(args: &AgentArgs) -> Result<Arc<dyn Model>, String> {
    model_named(args, args.model.as_deref())
}

/// The model the flags name, under the model name `name` (`chat --extra-model`).
pub(crate) fn model_named(args: &AgentArgs, name: Option<&str>) -> Result<Arc<dyn Model>, String> {
    if let (None, Some(path)) = (args.provider.kind(), &args.script) {
        // Read here, as a regular file with a cap: a FIFO or a device would block or never end.
        let text = read_regular_to_string(path, crate::out::INPUT_LIMIT)
            .map_err(|e| format!("--script {}: {e}", path.display()))?;
        let model = agentloop::provider::scripted::ScriptedModel::from_json_str(
            &text,
            &path.display().to_string(),
        )
        .map_err(|e| e.to_string())?;
        return Ok(Arc::new(model));
    }
    model_from_flags(
        args.provider.kind(),
        name,
        args.base_url.as_deref(),
        args.script.as_deref(),
        |cfg| {
            cfg.connect_timeout = std::time::Duration::from_millis(secs(args.connect_timeout));
            cfg.first_byte_timeout =
                std::time::Duration::from_millis(secs(args.first_chunk_timeout));
            cfg.reasoning_replay = args.reasoning_replay;
            cfg.thinking_budget = args.thinking_budget;
            cfg.reasoning_effort = args.reasoning_effort.clone();
            cfg.reasoning_summary = args.reasoning_summary.clone();
        },
    )
}

/// What [`agent`] builds: the agent, its output, and the `--otlp-endpoint` exporter.
type Built = (Agent, Arc<Output>, Option<Arc<OtlpExporter>>);

/// The agent (model, tools with the MCP servers' ones, timeouts, event printing, session
/// store), its output and the `--otlp-endpoint` exporter (fed the run's events by the sink).
fn agent(
    args: &AgentArgs,
    store: Option<Arc<dyn SessionStore>>,
    mcp: &[McpServer],
) -> Result<Built, String> {
    let otlp = crate::otlp::exporter(args)?;
    let observer = otlp.clone();
    let output = Arc::new(Output::for_args(
        args.events,
        args.verbose,
        args.color_enabled(),
    ));
    let sink_output = output.clone();
    // With `--output-schema` in text mode, stdout gets the validated JSON at the end, not the
    // streamed answer (which may be an invalid first try).
    let typed = args.output_schema.is_some() && matches!(args.events, EventsFormat::Text);
    // With `--trace T.jsonl`: the run's wall-clock times go to `T.times.jsonl`, out of the
    // trace (replay stays deterministic); `trace export` reads them for its latency columns.
    let times = match args.trace.as_deref().map(crate::times::Recorder::create) {
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => {
            crate::out::errln!("warning: timing sidecar not written: {e}");
            None
        }
        None => None,
    };
    let sink = Arc::new(move |env: &EventEnvelope| {
        if let Some(t) = &times {
            t.record(env);
        }
        if let Some(o) = &observer {
            o.observe(env);
        }
        if !(typed && matches!(env.event, agentloop::AgentEvent::TextDelta { .. })) {
            sink_output.print(env)
        }
    });
    Ok((
        agent_builder(args, store, mcp)?.sink(sink).build(),
        output,
        otlp,
    ))
}

/// The agent's builder from the flags (model, tools with the MCP servers' ones, timeouts,
/// store); events go nowhere until the caller sets a sink.
pub(crate) fn agent_builder(
    args: &AgentArgs,
    store: Option<Arc<dyn SessionStore>>,
    mcp: &[McpServer],
) -> Result<AgentBuilder, String> {
    let mut tools = ToolRegistry::defaults();
    add_tools(&mut tools, mcp);
    if args.todos {
        tools.insert(agentloop::tools::write_todos());
    }
    if let Some(ToolChoice::Tool(name)) = &args.tool_choice {
        if tools.get(name).is_none() {
            let known: Vec<String> = tools.specs().iter().map(|s| s.name.clone()).collect();
            return Err(format!(
                "--tool-choice {name}: no such tool (auto, none, required, or one of: {})",
                known.join(", ")
            ));
        }
    }
    // The model may read its instructions and rules, not rewrite them (unless allowed).
    agentloop::tools::protected::protect_agents_dir(&args.agents_dir);
    if let Some(path) = &args.tool_rules {
        agentloop::tools::protected::protect_from_writes(path);
    }
    let instructions = match &args.agent {
        Some(id) => Some(
            agentloop::instructions::load(&args.agents_dir, id)
                .map_err(|e| format!("--agent {id}: {e}"))?,
        ),
        None => None,
    };
    let rules = tool_rules(args, &tools)?;
    let mut builder = Agent::builder()
        .model_arc(model(args)?)
        .tools(tools)
        .root(args.root.clone())
        .allow_instruction_writes(args.allow_instruction_writes)
        .stream_timeouts_ms(secs(args.first_chunk_timeout), secs(args.stall_timeout))
        .tool_timeout_ms(secs(args.tool_timeout));
    if let Some(s) = args.request_timeout {
        builder = builder.request_timeout_ms(secs(s));
    }
    if let Some(s) = args.deadline {
        builder = builder.run_deadline_ms(secs(s));
    }
    builder = builder.configure(|c| {
        c.max_steps = args.max_steps;
        c.step.retry.max_retries = args.max_retries;
        c.step.retry.initial_backoff_ms = args.initial_backoff_ms;
        if let Some(seed) = args.seed {
            c.step.retry.jitter_seed = Some(seed);
        }
        c.step.inline_tags = args.inline_tags.into();
        c.compact_threshold = args
            .compact_threshold
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        c.context_window = args.context_window;
        // Served by the same client: registered under its provider's prefix, as the
        // primary model is (`openai:NAME`), and sent without it.
        let served = |m: &String| match args.provider.kind() {
            Some(kind) => format!("{kind}:{m}"),
            None => m.clone(),
        };
        c.fallbacks = args.fallbacks.iter().map(served).collect();
        c.title_model = args.title_model.as_ref().map(served);
    });
    let limits = args.limits.limits(args.price);
    builder = builder.configure(|c| c.limits = limits);
    builder = builder.tool_rules(rules);
    if let Some(path) = &args.output_schema {
        let spec = output_spec(path, args.output_retries)?;
        builder = builder.configure(|c| c.output = Some(spec));
    }
    if let Some(store) = store {
        builder = builder.store(store);
    }
    if let Some(n) = args.max_tokens {
        builder = builder.max_tokens(n);
    }
    if let Some(choice) = args.tool_choice.clone() {
        builder = builder.tool_choice(choice);
    }
    if let Some(system) = &args.system {
        builder = builder.system(system.clone());
    }
    if let Some(text) = &instructions {
        builder = builder.instructions(text);
    }
    Ok(builder)
}

/// The tool rules of `--tool-rules FILE` then `--tool-rule`s, each checked; a rule whose tool
/// pattern matches none of `tools` gets a warning (a typo would silently never apply).
fn tool_rules(args: &AgentArgs, tools: &ToolRegistry) -> Result<Vec<ToolRule>, String> {
    let mut rules = Vec::new();
    if let Some(path) = &args.tool_rules {
        let text = read_regular_to_string(path, crate::out::SMALL_INPUT_LIMIT)
            .map_err(|e| format!("--tool-rules {}: {e}", path.display()))?;
        let from_file: Vec<ToolRule> = serde_json::from_str(&text).map_err(|e| {
            format!(
                "--tool-rules {}: not a JSON array of rules: {e}",
                path.display()
            )
        })?;
        for (i, rule) in from_file.iter().enumerate() {
            rule.validate()
                .map_err(|e| format!("--tool-rules {}: rule {i}: {e}", path.display()))?;
        }
        rules.extend(from_file);
    }
    rules.extend(args.tool_rule.iter().cloned());
    // The whole set is bounded as a trace header's is (count and pattern characters), so no
    // rule set can make one machine step's matching run long.
    agentloop_core::tool_rules::validate_rules(&rules).map_err(|e| format!("tool rules: {e}"))?;
    let names: Vec<String> = tools.specs().iter().map(|s| s.name.clone()).collect();
    for (i, rule) in rules.iter().enumerate() {
        if !names
            .iter()
            .any(|n| agentloop_core::wildcard::matches(rule.tool(), n))
        {
            crate::out::errln!(
                "[rules] warning: rule {i} ({rule}) matches no tool (tools: {})",
                names.join(", ")
            );
        }
    }
    Ok(rules)
}

/// A store with `session` locked for the whole command; torn-tail warnings printed.
pub(crate) struct Locked {
    store: Arc<AnyStore>,
    session: String,
    _lock: SessionLock,
}

impl Locked {
    pub(crate) async fn open(args: &StoreArgs, session: &str) -> Result<Self, String> {
        let store = Arc::new(open_store(args.store.as_deref(), args.durability).await?);
        let lock = store.lock(session).await.map_err(|e| format!("{e}"))?;
        // Loading under the lock validates the session and cuts a torn last entry.
        let (_, report) = store
            .load_report(session)
            .await
            .map_err(|e| e.to_string())?;
        for w in &report {
            crate::out::errln!("[store] warning: {w}");
        }
        Ok(Locked {
            store,
            session: session.to_string(),
            _lock: lock,
        })
    }

    /// The store, as the agent takes it.
    pub(crate) fn session_store(&self) -> Arc<dyn SessionStore> {
        self.store.clone()
    }

    /// Syncs batched appends and releases the writer.
    pub(crate) async fn close(&self) -> Result<(), String> {
        self.store
            .close(&self.session)
            .await
            .map_err(|e| format!("closing session {}: {e}", self.session))
    }
}

/// The CLI's runtime: one thread. A command drives one run (or one session's runs in turn):
/// the model's stream and the tools wait on IO, the file tools and SQLite go to tokio's
/// blocking pool, and the file store's appends (a write and, by default, an fdatasync) run
/// inline, holding the thread for their duration as they held the run before. Worker threads
/// would only add cross-thread wake-ups and memory (about 0.5 MiB of a short run's peak).
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// How long the runtime's shutdown waits for blocking work still running when the run has
/// ended (a tool abandoned at its timeout, stuck in a file system call).
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// Runs `fut` to completion, then shuts the runtime down without waiting more than
/// [`SHUTDOWN_GRACE`] for blocking tasks: dropping a runtime waits for every blocking task,
/// so one abandoned tool could otherwise keep the process alive forever after the run ended.
/// Everything the run must persist (session entries, the trace) is written inside `fut`.
pub(crate) fn block_on_bounded<F: std::future::Future>(
    rt: tokio::runtime::Runtime,
    fut: F,
) -> F::Output {
    let out = rt.block_on(fut);
    rt.shutdown_timeout(SHUTDOWN_GRACE);
    out
}

/// With `--otlp-endpoint`: sends the spans of the run that ended (a warning when they could
/// not be sent).
async fn send_spans<E>(otlp: Option<&OtlpExporter>, ran: &Result<RunOutput, E>, output: &Output) {
    if let (
        Some(otlp),
        Ok(RunOutput {
            trace: Some(trace), ..
        }),
    ) = (otlp, ran)
    {
        let said = crate::otlp::send(otlp, trace).await;
        output.say(&said);
    }
}

pub(crate) fn fail(message: impl std::fmt::Display) -> ExitCode {
    crate::out::errln!("error: {message}");
    ExitCode::from(2)
}

/// Writes the trace, prints the summary and maps the outcome to an exit code.
fn finish(args: &AgentArgs, output: &Output, out: &RunOutput) -> ExitCode {
    if let (Some(path), Some(trace)) = (&args.trace, &out.trace) {
        if let Err(e) = agentloop::trace::write(trace, path) {
            output.finish();
            return fail(format!("writing trace: {e}"));
        }
    }
    if let Err(e) = print_typed(args, out) {
        output.finish();
        crate::out::errln!("error: {e}");
        return ExitCode::from(1);
    }
    let r = &out.result;
    output.summary(
        r.outcome.as_str(),
        &r.reason,
        r.iterations,
        r.usage.as_ref(),
        args.cost(r.usage.as_ref()),
    );
    if args.metrics {
        crate::out::errln!("{}", out.metrics.summary_text().trim_end());
    }
    outcome_code(r.outcome)
}

/// The typed final answer `--output-schema FILE` asks for: FILE's JSON Schema, named after it.
fn output_spec(path: &std::path::Path, retries: u32) -> Result<OutputSpec, String> {
    let shown = path.display();
    // Only a regular file of at most 1 MiB (a FIFO would block the open, R-SEC).
    let text = read_regular_to_string(path, crate::out::SMALL_INPUT_LIMIT)
        .map_err(|e| format!("--output-schema {shown}: {e}"))?;
    let schema: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("--output-schema {shown}: not JSON: {e}"))?;
    // The runtime checks answers with this validator, and one it cannot build (an unresolvable
    // `$ref`, a keyword of the wrong type) would check only that the answer is JSON: refused.
    if let Err(e) = jsonschema::validator_for(&schema) {
        return Err(format!(
            "--output-schema {shown}: not a JSON Schema the run can enforce: {e}"
        ));
    }
    // The validator resolves only the `$ref`s a validation reaches; one in a definition nothing
    // uses would still go to the provider with the schema: every one must resolve.
    unresolved_ref(&schema).map_err(|e| {
        format!("--output-schema {shown}: not a JSON Schema the run can enforce: {e}")
    })?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    Ok(OutputSpec {
        name,
        schema,
        retries,
    })
}

/// Looks up every `$ref` of `schema`, in every subschema whether or not a validation reaches
/// it (each relative to its own resource's base URI); the first that does not resolve is the
/// error. Remote documents are never fetched, so a remote `$ref` resolves only to a schema the
/// validator knows (the drafts' meta-schemas). One lookup per `$ref`: linear in the schema.
fn unresolved_ref(schema: &serde_json::Value) -> Result<(), String> {
    let draft = jsonschema::Draft::default().detect(schema);
    let resource = draft.create_resource_ref(schema);
    // The validator's own default base URI for a schema without an `$id`.
    let base = resource.id().unwrap_or("json-schema:///").to_string();
    let base_uri = jsonschema::uri::from_str(&base).map_err(|e| e.to_string())?;
    let registry = jsonschema::Registry::new()
        .draft(draft)
        .add(&base, resource)
        .and_then(|b| b.prepare())
        .map_err(|e| e.to_string())?;
    let mut pending = vec![(schema, registry.resolver(base_uri))];
    while let Some((node, parent)) = pending.pop() {
        if !node.is_object() {
            continue;
        }
        let resolver = parent
            .in_subresource(draft.create_resource_ref(node))
            .map_err(|e| e.to_string())?;
        if let Some(serde_json::Value::String(reference)) = node.get("$ref") {
            resolver.lookup(reference).map_err(|e| e.to_string())?;
        }
        pending.extend(draft.subresources_of(node).map(|s| (s, resolver.clone())));
    }
    Ok(())
}

/// With `--output-schema`, the completed run's answer as validated JSON on stdout.
fn print_typed(args: &AgentArgs, out: &RunOutput) -> Result<(), String> {
    if args.output_schema.is_none() || out.result.outcome != Outcome::Completed {
        return Ok(());
    }
    let value = agentloop_core::output::output_json(out.result.final_text().unwrap_or_default())
        .map_err(|e| {
            format!(
                "the final answer is not the JSON --output-schema asks for ({e}); the run ended: {}",
                out.result.reason
            )
        })?;
    if matches!(args.events, EventsFormat::Text) {
        // Machine output: JSON, with what JSON leaves raw (DEL, C1) escaped.
        crate::out::stdout_raw(&format!("{}\n", crate::out::json(&value.to_string())));
    }
    Ok(())
}

fn outcome_code(outcome: Outcome) -> ExitCode {
    match outcome {
        Outcome::Completed => ExitCode::SUCCESS,
        Outcome::Failed => ExitCode::from(1),
        Outcome::Aborted => ExitCode::from(130),
    }
}

/// The runtime, and the store with `session` locked when one is named (opened on the
/// runtime: a PostgreSQL store's connections run on it). `run` and `chat` start so.
pub(crate) fn runtime_and_store(
    session: Option<&str>,
    store: &StoreArgs,
) -> Result<(tokio::runtime::Runtime, Option<Locked>), String> {
    let rt = runtime()?;
    // The model's file tools stay out of the store, whether or not this command opens it
    // (a one-shot run stores nothing, but other sessions may live there).
    agentloop::tools::protected::protect_store(store.store.as_deref());
    let locked = match session {
        Some(session) => Some(rt.block_on(Locked::open(store, session))?),
        None => None,
    };
    Ok((rt, locked))
}

/// The prompt with its `--image`s and `--file`s (read, checked and encoded before anything
/// starts).
fn prompt(args: &RunArgs) -> Result<Prompt, AttachmentError> {
    let mut prompt = Prompt::new(args.prompt.clone());
    for path in &args.images {
        prompt = prompt.image(path)?;
    }
    for path in &args.files {
        prompt = prompt.file(path)?;
    }
    Ok(prompt)
}

/// Runs the `run` command.
pub(crate) fn main(args: RunArgs) -> ExitCode {
    let prompt = match prompt(&args) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let (rt, locked) = match runtime_and_store(args.session.as_deref(), &args.store) {
        Ok(started) => started,
        Err(e) => return fail(e),
    };
    let store = locked.as_ref().map(Locked::session_store);
    let mcp = match rt.block_on(args.agent.mcp.connect()) {
        Ok(servers) => servers,
        Err(e) => return fail(e),
    };
    let (agent, output, otlp) = match agent(&args.agent, store, &mcp) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let session = args.session.clone().unwrap_or_else(|| "default".into());
    let code = block_on_bounded(rt, async {
        let controller = Controller::new();
        let rx = controller.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                controller.abort("interrupted (Ctrl-C)");
            }
        });
        let input = vec![prompt.into_message()];
        let ticker = output.spawn_ticker();
        let ran = agent
            .run_with(&session, input, Some(&rx), args.agent.records())
            .await;
        send_spans(otlp.as_deref(), &ran, &output).await;
        drop(ticker);
        let code = match ran {
            Ok(out) => finish(&args.agent, &output, &out),
            Err(e) => {
                output.finish();
                fail(e)
            }
        };
        // MCP children are killed while the runtime still runs.
        drop((agent, mcp));
        if let Some(locked) = &locked {
            if let Err(e) = locked.close().await {
                return fail(e);
            }
        }
        code
    });
    code
}

/// The outcome of the last ended run of a session, if its last run ended.
fn last_outcome(entries: &[Entry]) -> Option<(String, String)> {
    entries.iter().rev().find_map(|e| match e {
        Entry::RunEnd {
            outcome, reason, ..
        } => Some((outcome.to_string(), reason.clone())),
        _ => None,
    })
}

/// Exit code of `resume` when the session has no entries (missing, or an empty file): there
/// is nothing to resume. Distinct from 2 (an error), so a "resume until it exits 0" loop can
/// stop on it and start the session again with `run`.
pub(crate) const NOTHING_TO_RESUME: u8 = 3;

/// Reports a session without entries; [`NOTHING_TO_RESUME`].
async fn nothing_to_resume(session: &str, store: &AnyStore) -> ExitCode {
    let found = match (store.exists(session).await, store.as_file_store()) {
        (Ok(true), Some(files)) => format!(
            "session {session} has no entries ({} is empty)",
            files
                .session_path(session)
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        ),
        (Ok(true), _) => format!("session {session} has no entries"),
        _ => format!("no session {session} in {}", store.location()),
    };
    crate::out::errln!(
        "{found}: nothing to resume (a run killed before its first write stores nothing); \
         start it with `agentloop run --session {session} PROMPT`"
    );
    ExitCode::from(NOTHING_TO_RESUME)
}

/// Runs the `resume` command. A session with nothing to resume is reported, and the exit
/// code is that of its last run (so "resume until it exits 0" is a safe loop); a session
/// without entries exits [`NOTHING_TO_RESUME`].
pub(crate) fn resume_main(args: ResumeArgs) -> ExitCode {
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(e),
    };
    let opened = rt.block_on(async {
        let locked = Locked::open(&args.store, &args.session).await?;
        let entries = locked.store.load_report(&args.session).await;
        Ok::<_, String>((locked, entries.map_err(|e| e.to_string())?.0))
    });
    let (locked, entries) = match opened {
        Ok(opened) => opened,
        Err(e) => return fail(e),
    };
    if entries.is_empty() {
        return rt.block_on(nothing_to_resume(&args.session, &locked.store));
    }
    let mcp = match rt.block_on(args.agent.mcp.connect()) {
        Ok(servers) => servers,
        Err(e) => return fail(e),
    };
    let (agent, output, otlp) = match agent(&args.agent, Some(locked.store.clone()), &mcp) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let code = block_on_bounded(rt, async {
        let controller = Controller::new();
        let rx = controller.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                controller.abort("interrupted (Ctrl-C)");
            }
        });
        let ticker = output.spawn_ticker();
        let resumed = agent
            .resume_with(&args.session, Some(&rx), args.agent.records())
            .await;
        send_spans(otlp.as_deref(), &resumed, &output).await;
        drop(ticker);
        output.finish();
        let code = match resumed {
            Ok(out) => finish(&args.agent, &output, &out),
            Err(AgentError::NothingToResume { session }) => match last_outcome(&entries) {
                Some((outcome, reason)) => {
                    crate::out::errln!(
                            "session {session} has no interrupted run; its last run ended {outcome} ({reason})"
                        );
                    match outcome.as_str() {
                        "completed" => ExitCode::SUCCESS,
                        "aborted" => ExitCode::from(130),
                        _ => ExitCode::from(1),
                    }
                }
                None => fail(format!("session {session} has no run to resume")),
            },
            Err(e) => fail(e),
        };
        drop((agent, mcp));
        if let Err(e) = locked.close().await {
            return fail(e);
        }
        code
    });
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    /// R-IN-7 / R-TOOL-3: the process exits promptly after the run even when
    /// a tool abandoned at its timeout is still stuck on a blocking thread (the library test
    /// `tests/tool_outcomes.rs::r_in_7_a_tool_blocked_on_a_thread_does_not_hold_the_run`
    /// shows the run returns in that case; this is the CLI's half: dropping a runtime would
    /// wait for the thread forever). The built-in tools cannot be made to block (`read_file`
    /// refuses FIFOs and devices), so the real binary cannot be driven into this state; the
    /// test runs the binary's own `block_on_bounded` on a runtime from `runtime()`. The thread
    /// is released only after the check, or when the check gave up after 60 s.
    #[test]
    fn r_in_7_shutdown_does_not_wait_for_an_abandoned_blocking_tool() {
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let (done_tx, done) = std::sync::mpsc::channel();
        let runner = std::thread::spawn(move || {
            let rt = runtime().expect("runtime");
            let out = block_on_bounded(rt, async move {
                // As the driver leaves a timed-out tool: started, never awaited again.
                drop(tokio::task::spawn_blocking(move || {
                    let _ = blocked.recv();
                }));
                "completed"
            });
            let _ = done_tx.send(out);
        });
        let returned = done.recv_timeout(std::time::Duration::from_secs(60));
        let _ = release.send(());
        runner.join().expect("runner");
        assert_eq!(
            returned,
            Ok("completed"),
            "block_on_bounded waited for the blocked thread"
        );
    }
}
