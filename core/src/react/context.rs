//! The outer machine's context in parts: each part is one concept that spans states, with the
//! methods that keep it consistent. [`ReactData`](crate::react::data::ReactData) holds the
//! run's configuration and identity and one field per part.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use crate::chart::ReactRow;
use crate::effect::Effect;
use crate::execute_result::StepRecord;
use crate::message::{Message, ToolCall, Usage};
use crate::model::SharedMessages;
use crate::outbox::Outbox;
use crate::process::{Process, ProcessStep, StepOutcome};
use crate::react::config::LoopResult;
use crate::react::limits::{LimitKind, Spent};
use crate::tool_cache::ToolCache;

/// The outer machine's outbox: the inner machine's steps go in whole.
impl Outbox<ReactRow> {
    /// Takes what the inner machine did (transitions, guard checks, effects); returns the
    /// number of model requests among the effects and whether the event was unhandled.
    pub(crate) fn take_inner(&mut self, s: ProcessStep) -> (u64, bool) {
        let model_calls = s
            .effects
            .iter()
            .filter(|e| matches!(e, Effect::CallModel { .. }))
            .count() as u64;
        self.transitions.extend(s.transitions);
        self.checks.extend(s.guard_checks);
        self.effect_checks.extend(s.effect_checks);
        self.out.extend(s.effects);
        (model_calls, s.unhandled)
    }
}

/// The context the model sees and what each ended step left in it: the messages, the step
/// records (positions into the messages), and what the compaction threshold reads.
#[derive(Debug, Default)]
pub(crate) struct Transcript {
    /// Shared with the current step's request (O(1) per request); appended in place once
    /// the request is gone.
    pub(crate) messages: SharedMessages,
    /// What each ended step produced (R-IN-5), positions into `messages`.
    pub(crate) steps: Vec<StepRecord>,
    /// Tokens the last committed step reported (input + output); `None` after a compaction.
    pub(crate) last_tokens: Option<u64>,
    pub(crate) compacted_since_step: bool,
}

impl Transcript {
    /// Tokens of the context: the last reported usage, else an estimate.
    pub(crate) fn tokens(&self) -> u64 {
        self.last_tokens
            .unwrap_or_else(|| crate::context::estimate_tokens(&self.messages))
    }

    /// Replaces the messages by the compacted ones, moving the step records' positions.
    pub(crate) fn compacted(&mut self, messages: &[Message]) {
        let old = std::mem::replace(&mut self.messages, messages.to_vec().into());
        crate::execute_result::remap(&mut self.steps, &old, &self.messages);
        drop(old);
        self.last_tokens = None;
        self.compacted_since_step = true;
    }

    /// Appends a committed step's message and results; returns the message's position.
    pub(crate) fn commit(
        &mut self,
        message: crate::message::AssistantMessage,
        results: Vec<crate::message::ToolResult>,
    ) -> usize {
        let at = self.messages.len();
        self.messages.push(Message::Assistant(message));
        self.messages.extend(results.into_iter().map(Message::Tool));
        self.compacted_since_step = false;
        at
    }
}

/// What the run counted and used so far: steps, turns, token usage, the usage limits' ledger
/// and the retries and fallbacks spent.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) session_turns: u32,
    pub(crate) committed_steps: u32,
    /// Steps created so far (executed or resumed): names the step in a `PartialMark`.
    pub(crate) steps_created: u64,
    pub(crate) usage: Option<Usage>,
    /// What the run used so far (usage limits).
    pub(crate) spent: Spent,
    /// The usage limit the run reached (announced once).
    pub(crate) limit_hit: Option<LimitKind>,
    /// The final-answer step a reached limit asked for was started.
    pub(crate) limit_final_ran: bool,
    /// Output retries used so far.
    pub(crate) output_retries: u32,
    /// Models of the fallback chain used so far (the next one is `cfg.fallbacks[fallbacks_used]`).
    pub(crate) fallbacks_used: usize,
}

impl Counters {
    /// A committed step: one more step and session turn, its usage and tool calls counted.
    pub(crate) fn count_step(&mut self, usage: Option<&Usage>, tool_calls: usize) {
        if let Some(u) = usage {
            self.usage.get_or_insert_with(Usage::default).add(u);
        }
        self.spent.tool_calls += tool_calls as u64;
        self.committed_steps = self.committed_steps.saturating_add(1);
        self.session_turns = self.session_turns.saturating_add(1);
    }

    /// A resumed step was counted when it was committed; it is counted again when it ends.
    pub(crate) fn uncount_step(&mut self) {
        self.committed_steps = self.committed_steps.saturating_sub(1);
        self.session_turns = self.session_turns.saturating_sub(1);
    }

    /// What the usage limits compare: what was spent, with the token usage.
    pub(crate) fn spent_now(&self) -> Spent {
        let mut spent = self.spent;
        spent.usage = self.usage.unwrap_or_default();
        spent
    }
}

/// The current step (the inner machine) and what each step hands to the next: the approvals
/// whitelist, the recent calls (loop detection), the pure-tool cache and, after an overflow or
/// a fallback, where the attempt numbering continues.
#[derive(Debug, Default)]
pub(crate) struct CurrentStep {
    pub(crate) step: Option<Process>,
    /// After a context overflow or a fallback the step is re-requested with the same
    /// `model_call_index`; its attempt numbers continue so late events of the earlier attempts
    /// stay stale.
    pub(crate) next_attempt: Option<u32>,
    pub(crate) whitelist: BTreeSet<String>,
    pub(crate) recent_calls: Vec<(String, String)>,
    /// The `path` arguments (and tool names) of the recent calls that had one (file-loop
    /// detection).
    pub(crate) recent_files: std::collections::VecDeque<(String, String)>,
    /// Results of the session's pure-tool calls (R-TOOL-6), shared with each step.
    pub(crate) tool_cache: Arc<ToolCache>,
    /// The call ids of the run's context (its history's and its own commits'), shared with
    /// each step: a repeated id is derived (`process::call_ids`).
    pub(crate) call_ids: Arc<std::collections::HashSet<String>>,
}

impl CurrentStep {
    /// Whether the current step ended (terminal inner state).
    pub(crate) fn ended(&self) -> bool {
        self.step.as_ref().is_some_and(|s| s.state().is_terminal())
    }

    /// How the current step ended, if it did.
    pub(crate) fn outcome(&self) -> Option<StepOutcome> {
        self.step.as_ref().and_then(|s| s.outcome().cloned())
    }

    /// Whether the step runs a tool batch (running tools or awaiting an approval).
    pub(crate) fn batch_running(&self) -> bool {
        self.step.as_ref().is_some_and(|s| {
            matches!(
                s.state(),
                crate::chart::ProcessState::RunningTools
                    | crate::chart::ProcessState::AwaitingApproval
            )
        })
    }

    /// Keeps what an ended step hands to the next: the approvals it whitelisted.
    pub(crate) fn hand_over(&mut self, step: &Process) {
        self.whitelist = step.whitelist().clone();
    }

    /// Adds the files the step's calls touch (a string `path` argument) to the window of
    /// recent file touches; returns each path that now reached
    /// [`FILE_LOOP_TOUCHES`](crate::react::health::FILE_LOOP_TOUCHES) touches in the window,
    /// once per crossing, with the tools that touched it in the window and its count.
    pub(crate) fn remember_files(&mut self, calls: &[ToolCall]) -> Vec<(String, Vec<String>, u32)> {
        use crate::react::health::{FILE_LOOP_TOUCHES, FILE_LOOP_WINDOW};
        let mut found = Vec::new();
        for c in calls {
            let Some(path) = c.arguments.get("path").and_then(|p| p.as_str()) else {
                continue;
            };
            self.recent_files
                .push_back((path.to_string(), c.name.clone()));
            if self.recent_files.len() > FILE_LOOP_WINDOW {
                self.recent_files.pop_front();
            }
            let touching: Vec<&String> = self
                .recent_files
                .iter()
                .filter(|(p, _)| p == path)
                .map(|(_, tool)| tool)
                .collect();
            let touches = touching.len() as u32;
            if touches == FILE_LOOP_TOUCHES && !found.iter().any(|(p, _, _)| p == path) {
                let mut tools: Vec<String> = Vec::new();
                for t in touching {
                    if !tools.contains(t) {
                        tools.push(t.clone());
                    }
                }
                found.push((path.to_string(), tools, touches));
            }
        }
        found
    }

    /// Remembers a committed step's calls (the last 64); returns a repeated pattern they
    /// complete, if any. Only a step that added calls can complete a cycle: re-checking an
    /// unchanged history would report the same loop again (R-TOOL-4: each loop once).
    pub(crate) fn remember_calls(&mut self, calls: &[ToolCall]) -> Option<(Vec<String>, u32)> {
        for c in calls {
            self.recent_calls
                .push((c.name.clone(), c.arguments.to_string()));
        }
        let excess = self.recent_calls.len().saturating_sub(64);
        self.recent_calls.drain(..excess);
        if calls.is_empty() {
            None
        } else {
            crate::react::health::repeated_pattern(&self.recent_calls)
        }
    }
}

/// Work queued for the run's next step boundaries: steering messages and subtasks.
#[derive(Debug, Default)]
pub(crate) struct Queues {
    pub(crate) steering: Vec<String>,
    /// Queued subtasks (row `active_subtask`): `(tool, arguments)`, run first-in first-out
    /// by row `planning_subtask`.
    pub(crate) subtasks: VecDeque<(String, serde_json::Value)>,
    /// Subtasks the run started so far (names their synthetic calls).
    pub(crate) subtasks_run: u32,
}

impl Queues {
    /// Queues a steering message for the next step boundary.
    pub(crate) fn steer(&mut self, text: &str) {
        self.steering.push(text.to_string());
    }

    /// The queued steering messages, oldest first, leaving the queue empty.
    pub(crate) fn take_steering(&mut self) -> Vec<String> {
        std::mem::take(&mut self.steering)
    }

    pub(crate) fn steering_pending(&self) -> bool {
        !self.steering.is_empty()
    }

    pub(crate) fn subtask_queued(&self) -> bool {
        !self.subtasks.is_empty()
    }

    /// The oldest queued subtask, numbered (from 1) among the run's subtasks.
    pub(crate) fn next_subtask(&mut self) -> Option<(u32, String, serde_json::Value)> {
        let (tool, arguments) = self.subtasks.pop_front()?;
        self.subtasks_run += 1;
        Some((self.subtasks_run, tool, arguments))
    }
}

/// What the committed steps left for `Observing` to decide on.
#[derive(Debug, Default)]
pub(crate) struct Observed {
    pub(crate) last_had_tools: bool,
    /// The runtime's verdict on the last committed message as a typed final answer.
    pub(crate) output_rejected: Option<crate::output::OutputRejected>,
    /// The first stop a step asked for (its run-end reason: `stopped`, `tool_rejected`).
    pub(crate) stop_requested: Option<&'static str>,
}

impl Observed {
    /// Takes in what a committed step left: whether it called tools, the verdict on its
    /// typed answer, and its stop request (the first one wins).
    pub(crate) fn step_committed(&mut self, step: &Process, had_tools: bool) {
        self.last_had_tools = had_tools;
        self.output_rejected = step.output_rejected().cloned();
        if self.stop_requested.is_none() {
            self.stop_requested = step.stop_reason();
        }
    }
}

/// How the run ends across states: the reported result, whether the abort was announced ahead
/// of it, and the run deadline's timer.
#[derive(Debug, Default)]
pub(crate) struct Ending {
    pub(crate) result: Option<LoopResult>,
    pub(crate) abort_emitted: bool,
    /// The run's deadline timer runs.
    pub(crate) deadline_armed: bool,
    /// Row `active_run_deadline` was taken: the facade feeds the abort it stands for.
    pub(crate) deadline_abort: bool,
}

impl Ending {
    /// Stops the run deadline's timer if it runs; returns whether it did.
    pub(crate) fn disarm_deadline(&mut self) -> bool {
        std::mem::take(&mut self.deadline_armed)
    }
}

/// `Executing`'s own data (statig state-local storage; starts empty on entering the state):
/// the abort's reason once an abort left immune tools draining (row `executing_abort_drain`),
/// the run's end reason when the step has drained (row `executing_aborted`).
#[derive(Debug, Default)]
pub(crate) struct Drain {
    pub(crate) abort_reason: Option<String>,
}

/// `Compacting`'s own data (statig state-local storage), returned by the row that enters
/// it: why the compaction started (`threshold`, `overflow`, `budget`) and the budget it must
/// reach. The state's entry action (`start_compaction`) requests it; its guard
/// `compaction_required` reads the reason.
#[derive(Debug)]
pub(crate) struct Compaction {
    pub(crate) reason: &'static str,
    pub(crate) budget_tokens: Option<u64>,
}

/// The own data of `Finishing` and the terminal states (statig state-local storage): the end
/// the row that led there decided, as the run's result. `Finishing`'s entry action commits
/// its run-end entry and its guards read its outcome; a terminal state's entry action reports
/// it, taking it out.
#[derive(Debug)]
pub(crate) struct Ended {
    pub(crate) result: Option<LoopResult>,
}

impl Ended {
    /// The decided end's outcome (`None` once reported).
    pub(crate) fn outcome(&self) -> Option<crate::agent_event::Outcome> {
        self.result.as_ref().map(|r| r.outcome)
    }

    /// Moves the decided end out (to the state the run goes on to).
    pub(crate) fn take(&mut self) -> Ended {
        Ended {
            result: self.result.take(),
        }
    }
}
