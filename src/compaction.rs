//! Compaction strategies (R-OUT-4, R-OUT-6) as [`Compactor`]s over the core's one grouping and
//! pinning ([`groups`], [`pinned`]): truncation (the default compactor, [`truncation`]), a
//! sliding window ([`sliding_window`]) and an LLM summary ([`llm_summary`]).
//!
//! Every strategy works on *groups*: an assistant message together with the tool results that
//! follow it is one unit, so a tool call is never separated from its result. Pinned groups are
//! always kept: system messages, the first user message (the original goal) and the latest user
//! message (the task frontier), and the most recent group (the step the model continues from).
//! A strategy that cannot bring the context under budget fails with a clear error, which fails
//! the run instead of looping. After a provider's context overflow the machine asks for a
//! budget below what was sent (but not below the pinned messages while anything else is
//! left), so a strategy always has something to drop until only pins remain.
//!
//! # Example
//!
//! Summarise the dropped history with a model (here the offline scripted one) instead of
//! truncating it:
//!
//! ```
//! use std::sync::Arc;
//!
//! use agentloop::compaction::llm_summary;
//! use agentloop::prelude::*;
//!
//! let agent = Agent::builder()
//!     .model(ScriptedModel::demo())
//!     .compactor(llm_summary(Arc::new(ScriptedModel::demo()), 2))
//!     .build();
//! # let _ = agent;
//! ```

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;

use crate::context::SlidingWindow;
pub use crate::context::SUMMARY_PREFIX;
pub use crate::context::{cannot_fit, collect, fits, groups, pinned};
use crate::message::{Message, MessageDelta};
use crate::model::Model;
use crate::runtime::title::one_shot;
use crate::runtime::{Clock, Compactor, SystemClock, Truncate};
use agentloop_core::timeouts::Timeouts;

/// The sliding-window compactor: keeps the pinned groups and the most recent `window` groups
/// (an assistant turn with its tool results is one group) and drops everything older. If that
/// is still over budget, the window shrinks until it fits; if even the pinned groups alone do
/// not fit, compaction fails (and so does the run).
///
/// ```
/// use agentloop::prelude::*;
///
/// let agent = Agent::builder()
///     .model(ScriptedModel::demo())
///     .compactor(agentloop::compaction::sliding_window(4))
///     .build();
/// # let _ = agent;
/// ```
pub fn sliding_window(window: usize) -> Arc<dyn Compactor> {
    Arc::new(Window(SlidingWindow { window }))
}

/// The core's pure [`SlidingWindow`] as a [`Compactor`] (a wrapper, so the core type's impl is
/// not part of this crate's surface).
struct Window(SlidingWindow);

/// The agent's default compactor, truncation (the oldest turns go until the context fits the
/// budget, pinned messages kept), as a value: to pass explicitly, or to wrap in a compactor of
/// your own that decides when to fall back to it.
pub fn truncation() -> Arc<dyn Compactor> {
    Arc::new(Truncate)
}

#[async_trait]
impl Compactor for Window {
    async fn compact(
        &self,
        messages: &[Message],
        budget_tokens: Option<u64>,
        max_messages: Option<usize>,
    ) -> Result<(Vec<Message>, usize), String> {
        self.0.apply(messages, budget_tokens, max_messages)
    }
}

/// The instructions of the summary call.
pub const SUMMARY_PROMPT: &str = "Summarize the conversation below for your own later use. Keep \
every fact, decision, file name, number and open question that the task still needs; drop \
chatter. Answer with the summary only.";

/// The LLM summary compactor over `model`: one extra model call, with [`SUMMARY_PROMPT`] as
/// its instructions, summarizes the older, unpinned groups; the summary (one user message
/// after the pinned goal, starting with [`SUMMARY_PREFIX`]) replaces them and the most recent
/// `keep_recent` groups stay verbatim. The machine persists the result as a compaction
/// marker: earlier entries stay in the store but leave the context. The call has a model
/// step's default deadlines (first delta within 60 s, no gap over 30 s); when it fails (a
/// deadline, a model error, an empty summary), the compaction falls
/// back to truncation, so a slow or broken summary model never stalls or fails a run.
pub fn llm_summary(model: Arc<dyn Model>, keep_recent: usize) -> Arc<dyn Compactor> {
    Arc::new(LlmSummary {
        keep_recent,
        ..LlmSummary::new(model)
    })
}

/// LLM summary: one extra model call through the [`Model`] port summarizes the older,
/// unpinned groups; the summary (one user message after the pinned goal) replaces them, the
/// most recent `keep_recent` groups stay verbatim. The machine persists the result as a
/// compaction marker: earlier entries stay in the store but leave the context.
///
/// The summary call has the deadlines of a model step (R-CTX-3, R-OUT-4): the first delta
/// within `timeouts.first_chunk_ms`, then no gap over `timeouts.stall_ms`, and the whole call
/// within `timeouts.request_ms` when set, measured on `clock`. When the call fails (a
/// deadline, a model error, an empty summary), the compaction falls back
/// to truncation (the default compactor) unless `fallback_to_truncate` is off, so a slow or broken
/// summary model never stalls or fails a run that truncation could continue.
pub(crate) struct LlmSummary {
    /// The model (usually the agent's own, shared as `Arc`); its name goes in the request.
    pub(crate) model: Arc<dyn Model>,
    /// Recent groups kept verbatim.
    pub(crate) keep_recent: usize,
    /// The summary call's deadlines (`first_chunk_ms`, `stall_ms`, `request_ms`; the tool and
    /// run fields are not used). Default: a model step's defaults.
    pub(crate) timeouts: Timeouts,
    /// The clock the deadlines are measured on (the system clock).
    pub(crate) clock: Arc<dyn Clock>,
    /// Truncate instead when the summary call fails (default on).
    pub(crate) fallback_to_truncate: bool,
}

impl std::fmt::Debug for LlmSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmSummary")
            .field("model", &self.model.name())
            .field("keep_recent", &self.keep_recent)
            .field("timeouts", &self.timeouts)
            .field("fallback_to_truncate", &self.fallback_to_truncate)
            .finish()
    }
}

/// Why the summary call of an `LlmSummary` gave no summary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SummaryFailure {
    /// No delta within the first-chunk deadline.
    #[error("summary call timed out: no first delta within {0} ms")]
    FirstChunkTimeout(u64),
    /// A gap between deltas over the stall deadline.
    #[error("summary call stalled: no delta for {0} ms")]
    Stalled(u64),
    /// The whole call over the request deadline.
    #[error("summary call timed out after {0} ms")]
    RequestTimeout(u64),
    /// The model failed the call.
    #[error("summary call failed: {0}")]
    Model(String),
    /// The model answered with no text.
    #[error("summary call returned no text")]
    Empty,
}

impl LlmSummary {
    /// A summary compactor over `model`, keeping the 2 most recent groups, with a model
    /// step's default deadlines on the system clock and the fallback to truncation on.
    pub(crate) fn new(model: Arc<dyn Model>) -> Self {
        LlmSummary {
            model,
            keep_recent: 2,
            timeouts: Timeouts::default(),
            clock: Arc::new(SystemClock),
            fallback_to_truncate: true,
        }
    }

    /// The summary call's deadlines.
    #[cfg(test)]
    pub(crate) fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// One summary call of `transcript`, within the deadlines.
    pub(crate) async fn summarize(&self, transcript: String) -> Result<String, SummaryFailure> {
        let model = self.model.name();
        let request = one_shot("compaction", &model, SUMMARY_PROMPT, transcript);
        let call = async {
            let t = &self.timeouts;
            let mut stream = self
                .within(t.first_chunk_ms, SummaryFailure::FirstChunkTimeout, async {
                    self.model
                        .stream(request)
                        .await
                        .map_err(|e| SummaryFailure::Model(e.message))
                })
                .await??;
            let mut text = String::new();
            // The first delta has the first-chunk deadline, every later one the stall deadline.
            let (mut ms, mut timeout): (u64, fn(u64) -> SummaryFailure) =
                (t.first_chunk_ms, SummaryFailure::FirstChunkTimeout);
            loop {
                let next = self.within(ms, timeout, stream.next()).await?;
                (ms, timeout) = (t.stall_ms, SummaryFailure::Stalled);
                match next.map(|item| item.map_err(|e| SummaryFailure::Model(e.message))) {
                    None | Some(Ok(MessageDelta::Finish)) => break,
                    Some(Ok(MessageDelta::TextDelta { text: t })) => text.push_str(&t),
                    Some(Ok(MessageDelta::Error { error })) => {
                        return Err(SummaryFailure::Model(error.message))
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(e),
                }
            }
            if text.trim().is_empty() {
                return Err(SummaryFailure::Empty);
            }
            Ok(text)
        };
        match self.timeouts.request_ms {
            Some(ms) => {
                self.within(ms, SummaryFailure::RequestTimeout, call)
                    .await?
            }
            None => call.await,
        }
    }

    /// `fut`, or `timeout(ms)` if it takes longer than `ms` on the clock.
    async fn within<T>(
        &self,
        ms: u64,
        timeout: fn(u64) -> SummaryFailure,
        fut: impl std::future::Future<Output = T>,
    ) -> Result<T, SummaryFailure> {
        tokio::select! {
            out = fut => Ok(out),
            () = self.clock.sleep(ms) => Err(timeout(ms)),
        }
    }
}

/// Renders messages as plain text for the summary request.
pub(crate) fn render(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        let line = match m {
            Message::System { content } => format!("system: {content}"),
            user @ Message::User { .. } => {
                format!("user: {}", user.user_text().unwrap_or_default())
            }
            Message::Assistant(a) => {
                let calls: Vec<String> = a
                    .tool_calls
                    .iter()
                    .map(|c| format!("{}({})", c.name, c.arguments))
                    .collect();
                if calls.is_empty() {
                    format!("assistant: {}", a.text)
                } else {
                    format!("assistant: {} [calls: {}]", a.text, calls.join(", "))
                }
            }
            Message::Tool(r) => format!("tool {} ({:?}): {}", r.name, r.status, r.content),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[async_trait]
impl Compactor for LlmSummary {
    async fn compact(
        &self,
        messages: &[Message],
        budget_tokens: Option<u64>,
        max_messages: Option<usize>,
    ) -> Result<(Vec<Message>, usize), String> {
        let groups = groups(messages);
        let pinned = pinned(messages, &groups);
        let n = groups.len();
        let recent = |gi: usize| gi + self.keep_recent >= n;
        let old: Vec<usize> = (0..n).filter(|&gi| !pinned[gi] && !recent(gi)).collect();
        if old.is_empty() {
            return Err(cannot_fit(messages));
        }
        let old_messages: Vec<Message> = old
            .iter()
            .flat_map(|&gi| groups[gi].iter().map(|&i| messages[i].clone()))
            .collect();
        let summary = match self.summarize(render(&old_messages)).await {
            Ok(summary) => summary,
            Err(failure) if self.fallback_to_truncate => {
                tracing::warn!(%failure, "compaction summary failed; truncating instead");
                return Truncate
                    .compact(messages, budget_tokens, max_messages)
                    .await;
            }
            Err(failure) => return Err(failure.to_string()),
        };
        // The summary takes the place of the first summarized group.
        let mut kept = Vec::new();
        let mut placed = false;
        for (gi, g) in groups.iter().enumerate() {
            if old.contains(&gi) {
                if !placed {
                    kept.push(Message::user(format!("{SUMMARY_PREFIX}{summary}")));
                    placed = true;
                }
                continue;
            }
            kept.extend(g.iter().map(|&i| messages[i].clone()));
        }
        if !fits(&kept, budget_tokens, max_messages) {
            return Err(cannot_fit(&kept));
        }
        Ok((kept, old_messages.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AssistantMessage, ToolCall, ToolResult, ToolStatus};
    use crate::model::ModelRequest;

    fn call(id: &str) -> Message {
        Message::Assistant(AssistantMessage {
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "t".into(),
                arguments: serde_json::json!({}),
                invalid_arguments: None,
            }],
            ..Default::default()
        })
    }

    fn result(id: &str) -> Message {
        Message::Tool(ToolResult {
            tool_call_id: id.into(),
            name: "t".into(),
            content: "x".repeat(40),
            status: ToolStatus::Completed,
        })
    }

    #[test]
    fn groups_keep_results_with_their_call() {
        let m = vec![
            Message::user("goal"),
            call("a"),
            result("a"),
            call("b"),
            result("b"),
        ];
        assert_eq!(groups(&m), vec![vec![0], vec![1, 2], vec![3, 4]]);
    }

    /// A summary model that answers `first` (if any) and then never sends another delta,
    /// or (`opens: false`) never even starts its response.
    struct Slow {
        opens: bool,
        first: Option<&'static str>,
    }

    #[async_trait]
    impl Model for Slow {
        fn name(&self) -> String {
            "slow".into()
        }
        async fn stream(
            &self,
            _request: ModelRequest,
        ) -> Result<crate::model::DeltaStream, crate::error::ModelError> {
            if !self.opens {
                std::future::pending::<()>().await;
            }
            let first = self
                .first
                .map(|t| Ok(MessageDelta::TextDelta { text: t.into() }));
            Ok(Box::pin(
                futures::stream::iter(first).chain(futures::stream::pending()),
            ))
        }
    }

    fn summary(opens: bool, first: Option<&'static str>) -> LlmSummary {
        LlmSummary::new(Arc::new(Slow { opens, first })).with_timeouts(Timeouts {
            first_chunk_ms: 1_000,
            stall_ms: 500,
            request_ms: None,
            ..Timeouts::default()
        })
    }

    /// A long history: the goal, six tool groups, the latest request.
    fn history() -> Vec<Message> {
        let mut m = vec![Message::user("goal")];
        for i in 0..6 {
            m.push(call(&format!("c{i}")));
            m.push(result(&format!("c{i}")));
        }
        m.push(Message::user("latest"));
        m
    }

    /// R-CTX-3 / R-OUT-4: the summary call has a model step's deadlines (tokio's paused clock
    /// jumps to each deadline; without them these calls would wait forever).
    #[tokio::test(start_paused = true)]
    async fn r_ctx_3_the_summary_call_has_a_model_steps_deadlines() {
        let never_opens = summary(false, None).summarize("t".into()).await;
        assert_eq!(never_opens, Err(SummaryFailure::FirstChunkTimeout(1_000)));
        let never_sends = summary(true, None).summarize("t".into()).await;
        assert_eq!(never_sends, Err(SummaryFailure::FirstChunkTimeout(1_000)));
        let stalls = summary(true, Some("half a summ"))
            .summarize("t".into())
            .await;
        assert_eq!(stalls, Err(SummaryFailure::Stalled(500)));
        let mut whole = summary(true, Some("x"));
        whole.timeouts.stall_ms = 10_000;
        whole.timeouts.request_ms = Some(2_000);
        assert_eq!(
            whole.summarize("t".into()).await,
            Err(SummaryFailure::RequestTimeout(2_000))
        );
    }

    /// R-OUT-4: a failed summary call falls back to truncation (the same context
    /// truncation gives), or fails the compaction with the typed reason when the fallback
    /// is off.
    #[tokio::test(start_paused = true)]
    async fn r_out_4_a_failed_summary_falls_back_to_truncation() {
        let messages = history();
        let truncated = Truncate.compact(&messages, None, Some(6)).await;
        assert!(truncated.is_ok(), "{truncated:?}");
        let stalled = summary(true, Some("half"));
        assert_eq!(stalled.compact(&messages, None, Some(6)).await, truncated);
        let mut strict = summary(true, Some("half"));
        strict.fallback_to_truncate = false;
        let err = strict.compact(&messages, None, Some(6)).await;
        assert_eq!(
            err,
            Err("summary call stalled: no delta for 500 ms".to_string())
        );
    }
}
