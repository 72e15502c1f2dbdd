//! Reminders inserted into the model's context before a step: [`insert_reminders`] is the one pure function that decides them. The
//! built-in ones — the max-steps reminder on the last step (R-OUT-5) and the usage-limit
//! reminder on a limit's final-answer step — are two of them; a configuration adds its own
//! [`Reminder`] rules (`RunConfig::reminders`), data rather than code, so the trace header
//! records them and a replay needs nothing registered.
//!
//! A reminder is a user message at the end of that step's request only: it is not committed
//! to the session, so it does not pile up in the history.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::message::{Message, ToolStatus};

/// When a [`Reminder`] applies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReminderWhen {
    /// Before every step.
    Always,
    /// Before every `n`-th step of the run (steps `n`, `2n`, ...); `0` never.
    EveryNSteps(u32),
    /// Before a step that follows a step with a tool result that is not `completed` (an
    /// error, a denied or aborted call).
    AfterToolFailure,
    /// When the context is at least this many tokens (the last reported input, else an
    /// estimate).
    ContextTokensAtLeast(u64),
}

/// A reminder rule: its text goes to the model, as a user message after the context, before
/// each step its condition holds for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Reminder {
    /// When.
    pub when: ReminderWhen,
    /// What the model is told.
    pub text: String,
}

/// What [`insert_reminders`] looks at: the step about to be requested.
#[derive(Clone, Copy, Debug)]
pub struct ReminderContext<'a> {
    /// The step's 1-based index in the run.
    pub step: u32,
    /// Whether it is the run's last allowed step (it gets no tools).
    pub last_step: bool,
    /// Whether it is a usage limit's final-answer step.
    pub limit_final: bool,
    /// The context the request carries (the run's messages).
    pub messages: &'a [Message],
    /// Tokens of that context.
    pub context_tokens: u64,
}

/// The reminders for the step `ctx` describes, in order: the built-in limit or max-steps
/// reminder first, then each configured rule that holds. Cost: the rules, plus the last
/// step's tool results for [`ReminderWhen::AfterToolFailure`] (not the whole history).
pub fn insert_reminders(
    ctx: &ReminderContext<'_>,
    final_reminder: &str,
    rules: &[Reminder],
) -> Vec<String> {
    let mut out = Vec::new();
    if ctx.limit_final {
        out.push(crate::react::limits::LIMIT_REMINDER.to_string());
    } else if ctx.last_step {
        out.push(final_reminder.to_string());
    }
    let mut tool_failure = None;
    for rule in rules {
        let holds = match rule.when {
            ReminderWhen::Always => true,
            ReminderWhen::EveryNSteps(n) => n > 0 && ctx.step.is_multiple_of(n),
            ReminderWhen::AfterToolFailure => {
                *tool_failure.get_or_insert_with(|| last_step_failed(ctx.messages))
            }
            ReminderWhen::ContextTokensAtLeast(t) => ctx.context_tokens >= t,
        };
        if holds {
            out.push(rule.text.clone());
        }
    }
    out
}

/// Whether the tool results after the last assistant message include one that is not
/// completed.
fn last_step_failed(messages: &[Message]) -> bool {
    messages
        .iter()
        .rev()
        .take_while(|m| !matches!(m, Message::Assistant(_)))
        .any(|m| matches!(m, Message::Tool(r) if r.status != ToolStatus::Completed))
}
