//! The runtime's other ports (R-ARCH-4): approver, clock, ids, event sink, compactor — with
//! default implementations.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
#[cfg(feature = "testing")]
use std::sync::Mutex;

use async_trait::async_trait;

use crate::context::truncate;
use crate::event::ApprovalDecision;
use crate::message::{Message, ToolCall};

/// Decides approval requests. `None` means "a human will answer through the run's
/// [`Controller`](crate::runtime::Controller)".
///
/// A function `Fn(&ToolCall) -> Option<ApprovalDecision>` is an approver: `|_: &ToolCall|
/// None` is manual approval (a person answers through the controller or a session), and the
/// default approves everything. A session installs its own.
///
/// ```
/// use std::sync::Arc;
/// use agentloop::provider::scripted::ScriptedModel;
/// use agentloop::runtime::Agent;
/// use agentloop::{ApprovalDecision, ToolCall};
///
/// let agent = Agent::builder()
///     .model(ScriptedModel::demo())
///     .approver(Arc::new(|call: &ToolCall| {
///         if call.name == "calculator" {
///             Some(ApprovalDecision::Approved)
///         } else {
///             Some(ApprovalDecision::Rejected { reason: "only the calculator".into() })
///         }
///     }))
///     .build();
/// # let _ = agent;
/// ```
#[async_trait]
pub trait Approver: Send + Sync {
    /// Decide on `call`, or return `None` to wait for a controller decision. The wait has no
    /// deadline of its own: the step's approval timeout
    /// (`StepConfig::approval_timeout_ms`) is a timer of the machine, which decides on its own
    /// when it fires first and then calls [`withdraw`](Self::withdraw).
    async fn decide(&self, call: &ToolCall) -> Option<ApprovalDecision>;

    /// The machine stopped waiting for the decision on `tool_call_id` (its approval timer
    /// fired): forget the request, so a late answer finds nothing pending. The runtime has
    /// already dropped the `decide` future. Default: nothing to forget.
    fn withdraw(&self, tool_call_id: &str) {
        let _ = tool_call_id;
    }
}

/// A question the model asks the person through the built-in `ask_user` tool (see
/// [`UserAsker`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Question {
    /// The question's ref: the id of the call that asks.
    pub reference: String,
    /// The question.
    pub question: String,
    /// The options offered (may be empty: a free answer).
    pub options: Vec<String>,
}

/// Puts `ask_user` questions to a person (the port behind
/// [`AgentBuilder::ask_user`](crate::runtime::AgentBuilder::ask_user)). The deadline is the
/// machine's (`StepConfig::ask_user_timeout_ms`): an asker waits as long as it takes, and the
/// runtime drops the `ask` future when the deadline passes first. The default asks nobody
/// (every question fails at once); a [`Session`](crate::session::Session) installs its own,
/// answered through `Session::respond`.
///
/// ```
/// use std::sync::Arc;
/// use agentloop::async_trait;
/// use agentloop::provider::scripted::ScriptedModel;
/// use agentloop::runtime::{Agent, Question, UserAsker};
///
/// /// Answers every question with its first option (or "yes").
/// struct FirstOption;
///
/// #[async_trait]
/// impl UserAsker for FirstOption {
///     async fn ask(&self, question: &Question) -> Option<String> {
///         Some(question.options.first().cloned().unwrap_or_else(|| "yes".into()))
///     }
/// }
///
/// let agent = Agent::builder()
///     .model(ScriptedModel::demo())
///     .ask_user(None)
///     .asker(Arc::new(FirstOption))
///     .build();
/// # let _ = agent;
/// ```
#[async_trait]
pub trait UserAsker: Send + Sync {
    /// The answer to `question`, or `None` when nobody can answer.
    async fn ask(&self, question: &Question) -> Option<String>;
}

/// Nobody to ask: every question fails at once (an agent run outside a session; the
/// default).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct NoUser;

#[async_trait]
impl UserAsker for NoUser {
    async fn ask(&self, _question: &Question) -> Option<String> {
        None
    }
}

/// Approves everything (the default).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AutoApprove;

#[async_trait]
impl Approver for AutoApprove {
    async fn decide(&self, _call: &ToolCall) -> Option<ApprovalDecision> {
        Some(ApprovalDecision::Approved)
    }
}

/// A function is an approver (see [`Approver`]).
#[async_trait]
impl<F> Approver for F
where
    F: Fn(&ToolCall) -> Option<ApprovalDecision> + Send + Sync,
{
    async fn decide(&self, call: &ToolCall) -> Option<ApprovalDecision> {
        self(call)
    }
}

/// Time, for timestamps and timers: the only place the runtime reads the time. The machines
/// never read it (their timers are effects the runtime performs by sleeping on this clock);
/// event timestamps, and so the metrics computed from them, come from
/// [`now_ms`](Self::now_ms).
///
/// The default reads the system time and sleeps on tokio's timers;
/// [`AgentBuilder::deterministic`](crate::runtime::AgentBuilder::deterministic) uses tokio's
/// clock from 0 ms (virtual time under a paused runtime). A program injects its own with
/// [`AgentBuilder::clock`](crate::runtime::AgentBuilder::clock):
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use agentloop::async_trait;
/// use agentloop::provider::scripted::ScriptedModel;
/// use agentloop::runtime::{Agent, Clock};
/// use agentloop::EventEnvelope;
///
/// /// Timestamps frozen at one instant (golden files compare equal); timers are tokio's.
/// struct FrozenClock(u64);
///
/// #[async_trait]
/// impl Clock for FrozenClock {
///     fn now_ms(&self) -> u64 {
///         self.0
///     }
///     async fn sleep(&self, ms: u64) {
///         tokio::time::sleep(std::time::Duration::from_millis(ms)).await
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), agentloop::runtime::AgentError> {
/// let stamps = Arc::new(Mutex::new(Vec::new()));
/// let seen = stamps.clone();
/// let agent = Agent::builder()
///     .model(ScriptedModel::demo())
///     .clock(Arc::new(FrozenClock(1_700_000_000_000)))
///     .sink(Arc::new(move |e: &EventEnvelope| seen.lock().unwrap().push(e.ts_ms)))
///     .build();
/// agent.run("s", "hi").await?;
/// let stamps = stamps.lock().unwrap();
/// assert!(!stamps.is_empty());
/// assert!(stamps.iter().all(|&t| t == 1_700_000_000_000));
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch (for event timestamps only; never read by machines).
    fn now_ms(&self) -> u64;
    /// Sleeps `ms` milliseconds (the machines' timers: backoff, deadlines, approval and
    /// question timeouts). The runtime drops the future when something else happens first.
    async fn sleep(&self, ms: u64);
}

/// The system clock with tokio timers (the default).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SystemClock;

#[async_trait]
impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one place that reads the wall clock
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
    async fn sleep(&self, ms: u64) {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await
    }
}

/// A clock on tokio's time: with a paused runtime (`start_paused`), timestamps follow virtual
/// time, so time-per-state metrics are deterministic in tests. Reads 0 when made (inside a
/// tokio runtime).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokioClock {
    origin: tokio::time::Instant,
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

#[async_trait]
impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }
    async fn sleep(&self, ms: u64) {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await
    }
}

/// The runtime's source of fresh values: run ids, and the seed a run's backoff jitter is
/// drawn from. The machines have no randomness of their own; what comes from here is an input
/// the trace records (the run id in `start`, the seed in the header's retry policy), so a
/// replay is exact.
///
/// The default makes ids from the system time, a counter and the process id, and draws a
/// random jitter seed; [`AgentBuilder::deterministic`](crate::runtime::AgentBuilder::deterministic)
/// numbers runs `run-1`, `run-2`, .... A program injects its own (ids from its database, a
/// UUID crate, a request id) with [`AgentBuilder::ids`](crate::runtime::AgentBuilder::ids):
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use agentloop::provider::scripted::ScriptedModel;
/// use agentloop::runtime::{Agent, Ids};
///
/// /// Run ids under a program's own prefix.
/// struct Prefixed(&'static str, AtomicU64);
///
/// impl Ids for Prefixed {
///     fn run_id(&self) -> String {
///         format!("{}-{}", self.0, self.1.fetch_add(1, Ordering::SeqCst))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), agentloop::runtime::AgentError> {
/// let agent = Agent::builder()
///     .model(ScriptedModel::demo())
///     .ids(Arc::new(Prefixed("job-7", AtomicU64::new(0))))
///     .build();
/// assert_eq!(agent.run("s", "hi").await?.run_id, "job-7-0");
/// assert_eq!(agent.run("s", "again").await?.run_id, "job-7-1");
/// # Ok(()) }
/// ```
pub trait Ids: Send + Sync {
    /// A fresh run id.
    fn run_id(&self) -> String;

    /// The seed of run `run_id`'s backoff jitter. By default a hash of the run id: as random
    /// as the ids are, and fixed when they are (so deterministic ids give deterministic runs).
    fn jitter_seed(&self, run_id: &str) -> u64 {
        // FNV-1a, 64 bits.
        run_id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }
}

/// Ids from the clock and a process-wide counter: unique enough for sessions on one machine
/// (the default).
#[derive(Debug, Default)]
pub(crate) struct TimeIds {
    counter: AtomicU64,
}

impl Ids for TimeIds {
    fn run_id(&self) -> String {
        let t = SystemClock.now_ms();
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("run-{t:x}-{n}-{}", std::process::id())
    }

    /// A random draw: std's per-process random hash keys, fresh for each call.
    fn jitter_seed(&self, run_id: &str) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write(run_id.as_bytes());
        h.finish()
    }
}

/// Deterministic ids `run-1`, `run-2`, ... (tests, reproducible traces).
#[derive(Debug, Default)]
pub(crate) struct SequentialIds {
    counter: AtomicU64,
}

impl Ids for SequentialIds {
    fn run_id(&self) -> String {
        format!("run-{}", self.counter.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

use agentloop_core::agent_event::EventEnvelope;

/// Receives events. Must not block: the loop calls it inline.
///
/// A function `Fn(&EventEnvelope)` is a sink:
///
/// ```
/// use std::sync::Arc;
/// use agentloop::provider::scripted::ScriptedModel;
/// use agentloop::runtime::Agent;
/// use agentloop::EventEnvelope;
///
/// let agent = Agent::builder()
///     .model(ScriptedModel::demo())
///     .sink(Arc::new(|e: &EventEnvelope| println!("{} {}", e.index, e.event.type_name())))
///     .build();
/// # let _ = agent;
/// ```
pub trait EventSink: Send + Sync {
    /// Delivers one event.
    fn emit(&self, event: &EventEnvelope);
}

/// Drops every event (the builder's default sink).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: &EventEnvelope) {}
}

/// The builder's default sink: one shared [`NullSink`], so the driver can tell an agent whose
/// events nobody takes ([`is_null_sink`]) and skip building their envelopes.
pub(crate) fn null_sink() -> Arc<dyn EventSink> {
    NULL_SINK.get_or_init(|| Arc::new(NullSink)).clone()
}

static NULL_SINK: std::sync::OnceLock<Arc<dyn EventSink>> = std::sync::OnceLock::new();

/// Whether `sink` is the builder's default sink (no sink was set).
pub(crate) fn is_null_sink(sink: &Arc<dyn EventSink>) -> bool {
    NULL_SINK.get().is_some_and(|null| Arc::ptr_eq(null, sink))
}

/// Collects events in memory, for a program's tests (feature `testing`; `agentloop-testkit`
/// re-exports it). A program keeps events with a closure sink or
/// [`Agent::run_stream`](crate::runtime::Agent::run_stream).
#[cfg(feature = "testing")]
#[derive(Debug, Default, Clone)]
pub struct VecSink(pub Arc<Mutex<Vec<EventEnvelope>>>);

#[cfg(feature = "testing")]
impl VecSink {
    /// The events so far.
    pub fn events(&self) -> Vec<EventEnvelope> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

#[cfg(feature = "testing")]
impl EventSink for VecSink {
    fn emit(&self, event: &EventEnvelope) {
        if let Ok(mut v) = self.0.lock() {
            v.push(event.clone());
        }
    }
}

/// A function is a sink (see [`EventSink`]).
impl<F: Fn(&EventEnvelope) + Send + Sync> EventSink for F {
    fn emit(&self, event: &EventEnvelope) {
        self(event)
    }
}

/// Computes compactions (R-OUT-4). Pluggable: truncation is the default.
#[async_trait]
pub trait Compactor: Send + Sync {
    /// Returns the new context and how many messages it removed, or why it cannot fit.
    async fn compact(
        &self,
        messages: &[Message],
        budget_tokens: Option<u64>,
        max_messages: Option<usize>,
    ) -> Result<(Vec<Message>, usize), String>;
}

/// Compaction by truncation that never splits tool pairs ([`crate::context::truncate`]): the
/// default compactor.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Truncate;

#[async_trait]
impl Compactor for Truncate {
    async fn compact(
        &self,
        messages: &[Message],
        budget_tokens: Option<u64>,
        max_messages: Option<usize>,
    ) -> Result<(Vec<Message>, usize), String> {
        truncate(messages, budget_tokens, max_messages).map_err(|e| e.to_string())
    }
}

/// A compactor with a deadline (the builder's
/// [`compaction_timeout_ms`](crate::runtime::AgentBuilder::compaction_timeout_ms)): past
/// `ms` on the clock port the compaction fails, as a compactor's own error does, instead of
/// waiting (an LLM summary whose model hangs would otherwise wait until the run's deadline).
/// The machine then decides as for any failed compaction.
pub(crate) struct CompactionDeadline {
    pub(crate) inner: std::sync::Arc<dyn Compactor>,
    pub(crate) clock: std::sync::Arc<dyn Clock>,
    pub(crate) ms: u64,
}

#[async_trait]
impl Compactor for CompactionDeadline {
    async fn compact(
        &self,
        messages: &[Message],
        budget_tokens: Option<u64>,
        max_messages: Option<usize>,
    ) -> Result<(Vec<Message>, usize), String> {
        tokio::select! {
            result = self.inner.compact(messages, budget_tokens, max_messages) => result,
            () = self.clock.sleep(self.ms) => Err(format!(
                "the compaction did not finish within its deadline ({} ms)",
                self.ms
            )),
        }
    }
}
