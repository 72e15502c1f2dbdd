//! Configuration of a run, the run result, and Observing's replaceable decision (R-OUT-3).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::agent_event::Outcome;
use crate::execute_result::{ExecuteResult, StepRecord};
use crate::message::{AssistantMessage, Message, Usage};
use crate::model::ModelParams;
use crate::named_fn::named_fn;
use crate::process::{RetryDecider, RetryDeciderRegistry, StepConfig};
use crate::react::limits::UsageLimits;
use crate::tool_spec::ToolSpecs;

/// What Observing sees.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation<'a> {
    /// The message the step just committed (its text, tool calls and finish reason), the one
    /// the decision is about; `None` only when no step of this run committed one.
    pub message: Option<&'a AssistantMessage>,
    /// The committed message had tool calls.
    pub has_tool_calls: bool,
    /// Steering messages wait to be merged.
    pub steering_pending: bool,
    /// Subtasks wait to run: like steering, they keep the run going.
    pub subtask_pending: bool,
    /// Something (a doom loop with action `stop`, a hook) asked to stop.
    pub stop_requested: bool,
    /// The context is over its budget (from reported usage or the estimate).
    pub over_budget: bool,
    /// Steps committed so far in this run.
    pub steps: u32,
    /// The run's `max_steps`.
    pub max_steps: u32,
}

/// What Observing decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Stop the run now (`Completed`, reason `stopped`).
    Stop,
    /// Compact, then continue.
    Compact,
    /// Plan the next step.
    Continue,
    /// The message is the final answer.
    Complete,
}

/// Observing's decision function (R-OUT-3): a function or a closure of the observation, so it
/// stays pure and replaceable. Anything `Fn(&Observation) -> Decision + Send + Sync + 'static`
/// converts into one (`Decider::from`, or wherever an `impl Into<Decider>` is taken); it is
/// recorded by the name it is registered under, never by its code.
#[derive(Clone)]
pub struct Decider(std::sync::Arc<dyn Fn(&Observation<'_>) -> Decision + Send + Sync>);

impl Decider {
    /// Decides on `o`.
    pub fn decide(&self, o: &Observation<'_>) -> Decision {
        (self.0)(o)
    }
}

impl<F> From<F> for Decider
where
    F: Fn(&Observation<'_>) -> Decision + Send + Sync + 'static,
{
    fn from(f: F) -> Self {
        Decider(std::sync::Arc::new(f))
    }
}

impl std::fmt::Debug for Decider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Decider(..)")
    }
}

/// The name [`default_decider`] is recorded under.
pub const DEFAULT_DECIDER: &str = "default";

/// Observing's decision function together with the name it is recorded under (R-OUT-3).
///
/// A function cannot be serialized, so a configuration (and the header of a trace) records the
/// decider by name only: it serializes as that string. Deserializing resolves the name
/// against the built-in deciders ([`DEFAULT_DECIDER`] only); any other name comes back
/// *unresolved* — it keeps its name but has no function — until it is resolved with a
/// [`DeciderRegistry`] ([`RunConfig::resolve_decider`]; trace replay does this and fails with
/// a typed error when the name is not registered, never falling back to another function).
///
/// ```
/// use agentloop_core::react::{default_decider, DeciderRef, DeciderRegistry, Decision, Observation};
/// fn always_stop(_: &Observation) -> Decision { Decision::Stop }
/// let d = DeciderRef::new("always_stop", always_stop);
/// assert_eq!(serde_json::to_string(&d).unwrap(), r#""always_stop""#);
/// let back: DeciderRef = serde_json::from_str(r#""always_stop""#).unwrap();
/// assert!(!back.is_resolved());
/// let registry = DeciderRegistry::new().with("always_stop", always_stop);
/// assert!(registry.resolve(&back).unwrap().is_resolved());
/// assert!(DeciderRegistry::new().resolve(&back).is_err());
///
/// // A closure that reads the committed answer, registered by name like a function.
/// let marker = String::from("DONE");
/// let until_done = move |o: &Observation| match o.message {
///     Some(m) if m.text.contains(marker.as_str()) => Decision::Stop,
///     _ => default_decider(o),
/// };
/// let registry = DeciderRegistry::new().with("until_done", until_done);
/// let d = registry.resolve(&DeciderRef::unresolved("until_done")).unwrap();
/// assert_eq!(serde_json::to_string(&d).unwrap(), r#""until_done""#);
/// ```
#[derive(Clone)]
pub struct DeciderRef {
    name: String,
    f: Option<Decider>,
}

impl DeciderRef {
    /// `f` (a function or a closure), recorded as `name`. Register the same pair in the
    /// [`DeciderRegistry`] used for replay.
    pub fn new(name: impl Into<String>, f: impl Into<Decider>) -> Self {
        DeciderRef {
            name: name.into(),
            f: Some(f.into()),
        }
    }

    /// Decides. An unresolved decider (a configuration deserialized with a name nothing
    /// resolved) decides like [`default_decider`]; resolve it first
    /// ([`RunConfig::resolve_decider`]) wherever that difference matters, as replay does.
    pub fn decide(&self, o: &Observation<'_>) -> Decision {
        match &self.f {
            Some(f) => f.decide(o),
            None => default_decider(o),
        }
    }
}

impl Default for DeciderRef {
    fn default() -> Self {
        DeciderRef::new(DEFAULT_DECIDER, default_decider)
    }
}

/// A decider name no registry entry matches.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown decider `{name}`: no decision function is registered under that name (registered: \
     {}); register it in the DeciderRegistry used for replay",
    .known.join(", ")
)]
pub struct UnknownDecider {
    /// The missing name.
    pub name: String,
    /// The names the registry has.
    pub known: Vec<String>,
}

/// Decision functions by name (R-OUT-3), for rebuilding a recorded configuration: replay
/// looks the trace header's decider name up here. Always holds [`DEFAULT_DECIDER`].
///
/// It also holds the retry decision functions (R-EXT-3; [`with_retry`](Self::with_retry)),
/// which replay looks the header's `step.retry.decider` up in, so one registry names every
/// function a trace can name.
#[derive(Clone, Debug)]
pub struct DeciderRegistry {
    deciders: std::collections::BTreeMap<String, Decider>,
    retry: RetryDeciderRegistry,
}

named_fn!(
    DeciderRef(impl Into<String>),
    DeciderRegistry(impl Into<Decider>),
    UnknownDecider,
    Decider
);

impl DeciderRegistry {
    /// A registry with the built-in [`DEFAULT_DECIDER`].
    pub fn new() -> Self {
        let mut deciders = std::collections::BTreeMap::new();
        deciders.insert(DEFAULT_DECIDER.to_string(), Decider::from(default_decider));
        DeciderRegistry {
            deciders,
            retry: RetryDeciderRegistry::new(),
        }
    }

    /// Registers the retry decision function `f` under `name` (R-EXT-3; builder style).
    pub fn with_retry(mut self, name: impl Into<String>, f: RetryDecider) -> Self {
        self.retry.register(name, f);
        self
    }

    /// Registers the retry decision function `f` under `name`; returns the function it
    /// replaces, if any.
    pub fn register_retry(
        &mut self,
        name: impl Into<String>,
        f: RetryDecider,
    ) -> Option<RetryDecider> {
        self.retry.register(name, f)
    }

    /// The retry decision functions.
    pub fn retry(&self) -> &RetryDeciderRegistry {
        &self.retry
    }

    /// Registers `f` (a function or a closure: `impl Fn(&Observation) -> Decision + Send +
    /// Sync + 'static`) under `name`; returns the decider it replaces, if any.
    pub fn register(&mut self, name: impl Into<String>, f: impl Into<Decider>) -> Option<Decider> {
        self.deciders.insert(name.into(), f.into())
    }
}

/// The default decision: continue after tool calls (compacting first when over budget),
/// complete otherwise.
pub fn default_decider(o: &Observation<'_>) -> Decision {
    if o.stop_requested {
        return Decision::Stop;
    }
    match (
        o.has_tool_calls || o.steering_pending || o.subtask_pending,
        o.over_budget,
    ) {
        (true, true) => Decision::Compact,
        (true, false) => Decision::Continue,
        (false, _) => Decision::Complete,
    }
}

/// What steering does to the running tool batch (R-CTL-2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SteeringPolicy {
    /// The batch finishes; the message joins the next model call.
    #[default]
    DeliverAtBoundary,
    /// Calls not yet started are skipped; killable running calls are killed.
    SkipRemaining,
}

/// The reminder appended on the last allowed step (R-OUT-5).
pub const FINAL_REMINDER: &str =
    "Maximum steps reached. Answer now with what you have, without calling tools.";

/// Configuration of a run (R-OUT-2).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct RunConfig {
    /// Model name.
    pub model: String,
    /// System prompt.
    #[serde(default)]
    pub system: Option<String>,
    /// Tools offered to the model.
    #[serde(default)]
    pub tools: ToolSpecs,
    /// Sampling parameters.
    #[serde(default)]
    pub params: ModelParams,
    /// Maximum model steps per run; the last one gets the reminder and no tools.
    pub max_steps: u32,
    /// Inner-machine configuration (retries, approvals, parallel tools).
    #[serde(default)]
    pub step: StepConfig,
    /// Compact when the context has more messages than this.
    #[serde(default)]
    pub compact_threshold: Option<usize>,
    /// Context window budget in tokens (default: the `context_window`).
    #[serde(default)]
    pub context_budget_tokens: Option<u64>,
    /// The model's context window in tokens (R-CTX-3): the budget when
    /// `context_budget_tokens` is not set. `None`: the window
    /// [`known_context_window`](crate::context::known_context_window) gives for the run's
    /// current model, if it knows it. With neither, only a message cap
    /// (`compact_threshold`) or a provider's overflow compacts (R-OUT-6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Compact when tokens reach `budget * compact_ratio` (default 0.8). This is where
    /// compacting starts, not a limit: a context that cannot be compacted below it but still
    /// fits the budget is sent as it is (the compaction reports `compact_end` with nothing
    /// removed); only a context over the whole budget fails the run (`compaction_failed`).
    pub compact_ratio: f64,
    /// Text of the final-step reminder.
    pub final_reminder: String,
    /// What steering does to a running tool batch.
    #[serde(default)]
    pub steering: SteeringPolicy,
    /// Observing's decision function, recorded by name (R-OUT-3); a configuration without
    /// the field has the default decider.
    #[serde(default)]
    #[schemars(with = "String")]
    pub decider: DeciderRef,
    /// Whole-run deadline (R-IN-7): the run starts it as a timer at `Start` / `Resume`; when
    /// it fires, the run is aborted with reason `run deadline exceeded` (`None`: none; the
    /// runtime fills in its `Timeouts::run_deadline_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_deadline_ms: Option<u64>,
    /// The fallback chain (model fallback): when a step fails with a provider error
    /// that is not retried, or exhausts its retries (not on a context overflow, not on an
    /// abort), the same step is requested again from the next model of this list (row
    /// `executing_fallback`, event `model_fallback`). The run stays on that model for its
    /// later steps. Each model is tried once per run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<String>,
    /// Usage limits (tokens, cost, model calls, tool calls; none by default), checked by
    /// Planning before each step (rows `planning_limit_final`, `planning_limit_stop`).
    #[serde(default, skip_serializing_if = "UsageLimits::is_none")]
    pub limits: UsageLimits,
    /// A typed final answer (structured output): requests carry its schema
    /// (`params.output`), the runtime checks the answer, and Observing retries or fails an
    /// invalid one (rows `observing_retry_output`, `observing_output_invalid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<crate::output::OutputSpec>,
    /// Reminder rules: texts added to a step's request when their condition holds, after the
    /// built-in max-steps / limit reminder; see
    /// [`insert_reminders`](crate::react::reminders::insert_reminders).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reminders: Vec<crate::react::reminders::Reminder>,
    /// A small model that titles a new session (off by default): on a session's first run,
    /// `Start` also asks it (effect `generate_title`), in parallel with the first step; its
    /// answer is a `title_generated` event and a `title` entry (row `active_title`). A title
    /// that arrives after the run's end is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title_model: Option<String>,
    /// Report each step's end as a `step_finished` event carrying its
    /// [`StepRecord`] (R-IN-5), so the trace holds it.
    /// On by default; a configuration serialized without the field (a trace recorded before it
    /// existed) reads as off, the behaviour it was recorded with. The run's
    /// [`LoopResult::steps`] are kept either way.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub report_steps: bool,
    /// Approval scopes ([`approval_scope`](crate::tool_rules::approval_scope)) approved
    /// "always" before the run started: the approval whitelist its first step starts with (a
    /// session hands every run it starts its whitelist, R-CTL-4). Empty by default.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub approved_always: std::collections::BTreeSet<String>,
}

impl RunConfig {
    /// Replaces the decider's function with the one `registry` has under its name. Fails,
    /// naming the function, when the registry has none: a recorded configuration is never
    /// rebuilt with another decision function.
    pub fn resolve_decider(&mut self, registry: &DeciderRegistry) -> Result<(), UnknownDecider> {
        self.decider = registry.resolve(&self.decider)?;
        Ok(())
    }
}

impl PartialEq for RunConfig {
    fn eq(&self, other: &Self) -> bool {
        // Configs compare by data; the decider by its name.
        serde_json::to_value(self).ok() == serde_json::to_value(other).ok()
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            model: "scripted".into(),
            system: None,
            tools: ToolSpecs::default(),
            params: ModelParams::default(),
            max_steps: 10,
            step: StepConfig::default(),
            compact_threshold: None,
            context_budget_tokens: None,
            context_window: None,
            compact_ratio: 0.8,
            final_reminder: FINAL_REMINDER.into(),
            steering: SteeringPolicy::default(),
            decider: DeciderRef::default(),
            run_deadline_ms: None,
            fallbacks: Vec::new(),
            limits: UsageLimits::default(),
            output: None,
            reminders: Vec::new(),
            title_model: None,
            report_steps: true,
            approved_always: std::collections::BTreeSet::new(),
        }
    }
}

/// The result of a run (R-OUT-1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LoopResult {
    /// How it ended.
    pub outcome: Outcome,
    /// Why (`final_answer`, `max_steps`, `stopped`, `tool_rejected`, `aborted: ...`, the error).
    pub reason: String,
    /// The context at the end (history + this run's messages, after compaction).
    pub messages: Vec<Message>,
    /// Model steps committed.
    pub iterations: u32,
    /// Usage of the run: the sum of what the steps reported (`None` when no step reported
    /// any: unknown, never zeros).
    #[serde(default)]
    pub usage: Option<Usage>,
    /// Steering messages the run had queued and not applied when it ended (R-CTL-2): the
    /// run's steering queue is the machine's, so a session takes them from here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steering_left: Vec<String>,
    /// Why it failed (`None` unless the outcome is `failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<crate::error::RunError>,
    /// What each step produced, in order (R-IN-5): one record per step that ended — a step a
    /// fallback model took again, or requested again after a context overflow, has two, the
    /// failed one first; a step cut short by a failed store write (R-IDEM-4) has none. The
    /// records name their messages by position in `messages`;
    /// [`execute_results`](Self::execute_results) resolves them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepRecord>,
}

impl LoopResult {
    /// Each step's [`ExecuteResult`] (R-IN-5): its committed message, tool calls,
    /// tool results, usage and error, borrowed from [`messages`](Self::messages).
    pub fn execute_results(&self) -> Vec<ExecuteResult<'_>> {
        self.steps
            .iter()
            .map(|s| s.resolve(&self.messages))
            .collect()
    }

    /// The text of the last assistant message, if any.
    pub fn final_text(&self) -> Option<&str> {
        self.messages.iter().rev().find_map(|m| match m {
            Message::Assistant(a) => Some(a.text.as_str()),
            _ => None,
        })
    }
}
