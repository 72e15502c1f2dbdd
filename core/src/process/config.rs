//! Configuration of one step: retry policy, tool approval policy and rules, parallelism.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::ModelError;
pub use crate::inline_tags::InlineTags;
use crate::message::ToolCall;
use crate::process::retry::{RetryDeciderRef, RetryDeciderRegistry, UnknownRetryDecider};
use crate::tool_rules::{last_match, CallPolicy, RuleAction, ToolRule};

/// The deadlines of one model attempt (R-IN-7), which the inner machine starts as timer
/// effects with each `CallModel` and turns into a stall or a timeout when they pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StreamDeadlines {
    /// Until the first delta of the attempt arrives.
    pub first_chunk_ms: u64,
    /// Without any delta, once the stream has started: a watchdog that checks every
    /// `stall_ms` whether a delta arrived since it last looked, so a stall is detected between
    /// `stall_ms` and twice that after the last delta (one timer per period, not per delta).
    pub stall_ms: u64,
    /// The whole attempt, from sending to the last delta (`None`: no limit); expiry is a
    /// retryable `timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_ms: Option<u64>,
}

/// Retry and backoff (R-IN-1): initial 1 s, doubling, cap 10 s, 3 retries, by default; which
/// errors are retried is the [`decider`](Self::decider)'s call (R-EXT-3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RetryPolicy {
    /// Retries per step after the first attempt.
    pub max_retries: u32,
    /// First backoff delay.
    pub initial_backoff_ms: u64,
    /// Backoff cap.
    pub max_backoff_ms: u64,
    /// Cap on a server's `retry-after` hint.
    pub retry_after_cap_ms: u64,
    /// Jitter: each backoff delay is shortened by a fraction of up to this many percent (as
    /// the OpenAI SDKs do, 25 by default), so clients that failed together do not retry
    /// together. Drawn from `jitter_seed`; 0 turns jitter off.
    #[serde(default = "default_jitter_percent")]
    pub jitter_percent: u8,
    /// The seed the jitter is drawn from. The runtime fills it at each run's start from its
    /// injected `Ids` port (a random draw by default, a fixed sequence for `SequentialIds`),
    /// and the trace header records it, so a replay takes the same delays. `None`: no jitter
    /// (the pure machine has no randomness of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_seed: Option<u64>,
    /// Whether a failed attempt is worth retrying (R-EXT-3):
    /// a plain function of the typed error, recorded by name (absent when it is the default,
    /// [`default_retry_decider`](crate::process::default_retry_decider), so a configuration
    /// without the field has the default). The retry rows' guards ask it; `max_retries`
    /// still bounds the retries.
    #[serde(default, skip_serializing_if = "RetryDeciderRef::is_default")]
    #[schemars(with = "String")]
    pub decider: RetryDeciderRef,
    /// How a server's `retry-after` hint combines with the backoff (R-IN-1): it overrides it
    /// by default; [`RetryAfterRule::Floor`] is the rule traces before version 6 were recorded
    /// with, which the trace reader sets on them so they replay with the same delays.
    #[serde(default, skip_serializing_if = "RetryAfterRule::is_override")]
    pub retry_after: RetryAfterRule,
}

/// How a server's `retry-after` / `retry-after-ms` hint combines with the computed backoff.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RetryAfterRule {
    /// The hint replaces the backoff, within `[0, retry_after_cap_ms]` (R-IN-1; the default):
    /// a provider that sends a short `retry-after` means it.
    #[default]
    Override,
    /// The hint only lengthens the backoff (`max(hint, backoff)`, the hint capped): the rule
    /// before trace version 6, kept so older traces replay with the delays they recorded.
    Floor,
}

impl RetryAfterRule {
    /// Whether this is the default rule (so a configuration omits it).
    pub fn is_override(&self) -> bool {
        *self == RetryAfterRule::Override
    }
}

fn default_jitter_percent() -> u8 {
    25
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            initial_backoff_ms: 1_000,
            max_backoff_ms: 10_000,
            retry_after_cap_ms: 60_000,
            jitter_percent: default_jitter_percent(),
            jitter_seed: None,
            decider: RetryDeciderRef::default(),
            retry_after: RetryAfterRule::Override,
        }
    }
}

impl RetryPolicy {
    /// Whether a step that has made `retries` retries retries after `error` (R-IN-2,
    /// R-EXT-3): retries are left, the error is not a context overflow (compacted, never
    /// retried as it is), and the decider says so for attempt `retries + 1`.
    pub fn retries_after(&self, error: &ModelError, retries: u32) -> bool {
        retries < self.max_retries
            && !error.context_overflow()
            && self.decider.decide(error, retries.saturating_add(1))
    }

    /// Replaces the decider's function with the one `registry` has under its name. Fails,
    /// naming the function, when the registry has none: a recorded configuration is never
    /// rebuilt with another retry decision.
    pub fn resolve_decider(
        &mut self,
        registry: &RetryDeciderRegistry,
    ) -> Result<(), UnknownRetryDecider> {
        self.decider = registry.resolve(&self.decider)?;
        Ok(())
    }

    /// Delay before the retry that follows failed attempt `attempt` (1-based) (R-IN-1): a
    /// server's hint when it sent one, honoured within `[0, retry_after_cap_ms]` (a provider
    /// that answers `retry-after-ms: 150` means 150 ms, shorter than the backoff or not; the
    /// retries stay bounded by `max_retries`), else the exponential backoff.
    pub fn delay_ms(&self, attempt: u32, retry_after_ms: Option<u64>) -> u64 {
        self.with_hint(self.backoff_ms(attempt), retry_after_ms)
    }

    /// [`delay_ms`](Self::delay_ms) with jitter: the backoff is shortened by up to
    /// `jitter_percent` %, by a fraction that is a pure function of `jitter_seed` and `draw`
    /// (the step's model call index and attempt), so the same run takes the same delays on
    /// replay. A server's hint replaces the backoff and is not jittered.
    pub fn jittered_delay_ms(&self, attempt: u32, retry_after_ms: Option<u64>, draw: u64) -> u64 {
        let backoff = self.backoff_ms(attempt);
        let backoff = match self.jitter_seed {
            // At 0 % the cut is 0: no separate case.
            Some(seed) => {
                let percent = u128::from(self.jitter_percent.min(100));
                // A uniform fraction in [0, 1) as a 64-bit fixed-point number.
                let fraction = u128::from(splitmix64(seed ^ splitmix64(draw)));
                // cut = ⌊backoff · percent · fraction / (100 · 2⁶⁴)⌋, computed without
                // overflowing 128 bits for any backoff: backoff · fraction fits exactly, and
                // its high and low words are scaled by the percentage separately.
                let product = u128::from(backoff) * fraction;
                let (high, low) = (product >> 64, product & u128::from(u64::MAX));
                let cut = (high * percent + ((low * percent) >> 64)) / 100;
                backoff - u64::try_from(cut).unwrap_or(backoff)
            }
            None => backoff,
        };
        self.with_hint(backoff, retry_after_ms)
    }

    fn backoff_ms(&self, attempt: u32) -> u64 {
        let shift = attempt.saturating_sub(1).min(32);
        self.initial_backoff_ms
            .saturating_mul(1u64 << shift)
            .min(self.max_backoff_ms)
    }

    /// The hint overrides the backoff (R-IN-1), capped; the backoff is the fallback.
    fn with_hint(&self, backoff: u64, retry_after_ms: Option<u64>) -> u64 {
        match (retry_after_ms, self.retry_after) {
            (Some(hint), RetryAfterRule::Override) => hint.min(self.retry_after_cap_ms),
            (Some(hint), RetryAfterRule::Floor) => hint.min(self.retry_after_cap_ms).max(backoff),
            (None, _) => backoff,
        }
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): a bijective mixer, enough to spread a seed.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Whether a tool's calls need a human's approval (R-TOOL-3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalPolicy {
    /// Never ask.
    Never,
    /// Always ask.
    Always,
}

/// What to do when the model repeats the same call (R-TOOL-4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LoopAction {
    /// Ask a human before running the repeated call (approval request).
    Ask,
    /// Refuse the call and stop the run (`Completed`, reason `stopped`).
    Stop,
}

/// Doom-loop detection: the same tool with identical arguments `threshold` times in a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DoomLoopPolicy {
    /// Consecutive identical calls that count as a loop (default 3).
    pub threshold: u32,
    /// What to do.
    pub action: LoopAction,
}

impl Default for DoomLoopPolicy {
    fn default() -> Self {
        DoomLoopPolicy {
            threshold: 3,
            action: LoopAction::Ask,
        }
    }
}

/// Configuration of the inner machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepConfig {
    /// Retry policy.
    pub retry: RetryPolicy,
    /// Run a message's tool calls concurrently (results still in call order, R-IN-4).
    pub parallel_tools: bool,
    /// Per-tool approval policy; tools not listed need no approval. [`tool_rules`](Self::tool_rules)
    /// come first: this map decides the calls no rule matches.
    pub approval: BTreeMap<String, ApprovalPolicy>,
    /// Rules that decide, per call, by tool name and an argument pattern, whether it runs,
    /// waits for a human or is denied, and its deadline (R-TOOL-3; see
    /// [`crate::tool_rules`]). The last matching rule decides; a call no rule matches falls
    /// back to [`approval`](Self::approval) and [`tool_timeout_ms`](Self::tool_timeout_ms).
    /// A configuration serialized without the field (a trace recorded before rules existed)
    /// reads as no rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_rules: Vec<ToolRule>,
    /// Tools that abort does not kill (`Tool::killable() == false`); filled by the agent builder.
    #[serde(default)]
    pub immune: std::collections::BTreeSet<String>,
    /// Doom-loop detection (`None` disables it).
    #[serde(default)]
    pub doom_loop: Option<DoomLoopPolicy>,
    /// Ask the runtime's `before_tool` hooks about each call before it runs
    /// ([`Effect::GateTool`](crate::Effect), answered by [`Event::ToolGated`](crate::Event));
    /// the agent builder sets it when hooks are installed.
    #[serde(default)]
    pub gate_tools: bool,
    /// Per-call deadline: a call still running this long after it started is killed and
    /// gets an error result (R-IN-7). The machine starts it as a timer effect with each
    /// `RunTool` (`None`: no deadline; the agent builder sets the runtime's `tool_ms`). The
    /// rule that decides a call may set its own ([`ToolRule::timeout_ms`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout_ms: Option<u64>,
    /// A model attempt's deadlines (`None`: none; the runtime fills in its `Timeouts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamDeadlines>,
    /// What a rejected (or timed-out) approval does to the run: `false` (the default) stops the run after the step
    /// with reason `tool_rejected`; `true` continues, the model seeing the denied result.
    /// An approval always resumes the run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auto_resume: bool,
    /// Tools that declared themselves pure (`Tool::pure`; filled by the agent builder): an
    /// identical call later in the session is answered from the cache of their results
    /// (row `commit_cached`, event `tool_cache_hit`; R-TOOL-6). Sorted, without
    /// duplicates (a vector, not a set: an idle session keeps a copy, R-PERF memory budget).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pure_tools: Vec<String>,
    /// Calls to the built-in [`ASK_USER_TOOL`] put their question to the person instead of
    /// running (row `start_ask_user`). The agent builder's `ask_user`
    /// sets it and offers the tool.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ask_user: bool,
    /// How long an `ask_user` question waits for its answer (`None`: as long as it takes);
    /// then the call fails (row `user_deadline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask_user_timeout_ms: Option<u64>,
    /// How long a call waits for a human's approval (R-CTL-4; `None`, the default: as long as
    /// it takes). The machine starts it as a timer with the approval request and cancels it
    /// when the answer comes; when it fires first, the call gets a denied result
    /// (`approval_resolved{status: timeout}`, rows `awaiting_timed_out*`) and the runtime stops
    /// waiting for the answer ([`Effect::WithdrawApproval`](crate::Effect)). A session sets it
    /// from its `approval_timeout_ms` (5 minutes by default); a plain agent run has none unless
    /// its builder sets one, since its approver is code that answers on its own terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_timeout_ms: Option<u64>,
    /// Inline `<status>`, `<title>` and `<plan>` tags in the model's text: each
    /// closed tag is reported as a `status_update` / `title_generated` / `plan_generated` event
    /// and, with the default [`InlineTags::Strip`], removed from the `text_delta` events and
    /// the committed message; [`InlineTags::Keep`] leaves the text as written,
    /// [`InlineTags::Off`] looks for no tags. A configuration serialized without the field
    /// (a trace recorded before it existed) reads as `off`, the behaviour it was recorded with.
    #[serde(
        default = "InlineTags::absent",
        skip_serializing_if = "InlineTags::is_off"
    )]
    pub inline_tags: InlineTags,
    /// Report the boundaries of the streamed parts (`reasoning_start`, `reasoning_end`,
    /// `tool_input_end`, from the provider's block starts and ends) and an `ask_user` answer's
    /// `agent_resumed` (trigger `user_respond`). On by default; a configuration serialized
    /// without the field (a trace recorded before these events existed) reads as off, the
    /// behaviour it was recorded with.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub detailed_events: bool,
}

/// The name of the built-in tool that asks the person a question.
pub const ASK_USER_TOOL: &str = "ask_user";

impl StepConfig {
    /// What decides `call` (R-TOOL-3): the last of [`tool_rules`](Self::tool_rules)
    /// that matches it, its action and deadline (the rule's `timeout_ms`, else
    /// `tool_timeout_ms`); without a matching rule, the approval map (`always`: ask) and
    /// `tool_timeout_ms`. Linear in the rules and the argument values they look at.
    pub fn policy(&self, call: &ToolCall) -> CallPolicy {
        match last_match(&self.tool_rules, call) {
            Some(i) => {
                let rule = &self.tool_rules[i];
                CallPolicy {
                    rule: Some(i),
                    action: rule.action,
                    timeout_ms: rule.timeout_ms.or(self.tool_timeout_ms),
                    by_argument: rule.argument.is_some(),
                }
            }
            None => CallPolicy {
                rule: None,
                action: match self.approval.get(&call.name) {
                    Some(ApprovalPolicy::Always) => RuleAction::Ask,
                    _ => RuleAction::Allow,
                },
                timeout_ms: self.tool_timeout_ms,
                by_argument: false,
            },
        }
    }

    /// Whether the kill policy `kill` kills a running call of `tool` (an abort's or a
    /// steering skip's).
    pub(crate) fn kills(&self, kill: crate::event::KillPolicy, tool: &str) -> bool {
        match kill {
            crate::event::KillPolicy::All => true,
            crate::event::KillPolicy::None => false,
            crate::event::KillPolicy::Killable => !self.immune.contains(tool),
        }
    }

    /// Whether `tool` declared itself pure (see [`StepConfig::pure_tools`]).
    pub fn is_pure(&self, tool: &str) -> bool {
        self.pure_tools
            .binary_search_by(|t| t.as_str().cmp(tool))
            .is_ok()
    }

    /// Marks `tool` pure or not, keeping [`StepConfig::pure_tools`] sorted.
    pub fn set_pure(&mut self, tool: &str, pure: bool) {
        match (
            self.pure_tools.binary_search_by(|t| t.as_str().cmp(tool)),
            pure,
        ) {
            (Err(i), true) => self.pure_tools.insert(i, tool.to_string()),
            (Ok(i), false) => {
                self.pure_tools.remove(i);
            }
            _ => {}
        }
    }
}

impl Default for StepConfig {
    fn default() -> Self {
        StepConfig {
            retry: RetryPolicy::default(),
            parallel_tools: true,
            approval: BTreeMap::new(),
            tool_rules: Vec::new(),
            immune: Default::default(),
            doom_loop: Some(DoomLoopPolicy::default()),
            gate_tools: false,
            tool_timeout_ms: None,
            stream: None,
            auto_resume: false,
            pure_tools: Default::default(),
            ask_user: false,
            ask_user_timeout_ms: None,
            approval_timeout_ms: None,
            inline_tags: InlineTags::default(),
            detailed_events: true,
        }
    }
}
