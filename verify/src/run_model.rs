//! The run (outer machine, inner machine and every tool call's lifecycle: [`Run`]) as a
//! `stateright` [`Model`] over a small abstract alphabet ([`Input`]).
//!
//! # State and fingerprint
//!
//! [`Run`] is neither `Clone` nor `Hash`, so a model state ([`RunState`]) is the input
//! sequence that reaches it: every successor replays that sequence into a fresh run (the
//! machines are deterministic, so the replay is exact; the test kit's [`Feeder`] turns each
//! abstract input into a concrete event by following the effects, as a runtime would). Two
//! input sequences are the same state for the checker when their *fingerprints* agree
//! ([`Key`]): the run's state kind as it displays it, the counts a run's future depends on
//! (messages in the context, steps ended, steering queued), and the observer's abstract
//! ledger (current step and attempt, stream open, deltas of the attempt and the tools its
//! calls name, each committed call's tool and result/start/run/approval marks, outstanding model call, compaction and
//! run-end commit, live timers, pending tools and approvals, end events, violated
//! properties). Ids and texts are left out, so the same situation reached by different
//! paths is explored once; what a fingerprint leaves out could in principle hide a state,
//! which is why it keeps every count the specification's decisions read.

use agentloop_core::{Event, Run, Step};
use agentloop_testkit::harness::{
    Action, ArgsPick, AttemptPick, DecisionPick, DeltaPick, ErrPick, Feeder, GatePick, IdPick,
    SeqPick, Setup, ToolPick, APPROVAL_TOOL,
};
use stateright::{Model, Property};

use crate::explored::Explored;
use crate::properties::{run, RunLimits, RunSpec};

/// The kinds of tool call a model reply may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CallKind {
    /// `calculator`, valid arguments.
    Calculator,
    /// `shell`, which needs approval.
    Shell,
    /// `read_file`, immune to abort when the setup says so (an abort then drains it).
    ReadFile,
    /// A tool that is not offered.
    Unknown,
    /// `calculator` with arguments that are not JSON.
    Malformed,
    /// The built-in `ask_user` (a question to the person), when the run offers it.
    AskUser,
}

/// A `before_tool` hook's verdict on a gated call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    /// The call may run.
    Allow,
    /// The call is blocked.
    Block,
    /// A human is asked (the approval path).
    Ask,
}

/// The error classes of a model request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorClass {
    /// 429 (retryable, with a hint).
    RateLimited,
    /// 500 (retryable).
    Server,
    /// 401 (not retryable).
    Auth,
    /// Context length exceeded.
    Overflow,
    /// No delta for the stall timeout.
    Stalled,
}

/// One abstract input to a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Input {
    /// The run starts (a prompt).
    Start,
    /// The current request's stream opened.
    Opened,
    /// A text delta with a new seq.
    Text,
    /// The last delta again (same seq).
    DuplicateText,
    /// A text delta of the previous attempt (late).
    StaleText,
    /// A complete tool call.
    Call(CallKind),
    /// The reply is complete.
    Done,
    /// A late `Done` of the previous attempt.
    StaleDone,
    /// The request failed.
    Error(ErrorClass),
    /// A live timer of the step fires (backoff, stream deadline, tool timeout: a slow tool).
    Timer,
    /// The run's deadline fires.
    Deadline,
    /// A running tool finished; `ok`; which of the running calls.
    Tool(bool, u8),
    /// A human answered the first pending approval.
    Approval(Answer),
    /// The person answered the first pending `ask_user` question (`true`), or nobody could.
    User(bool),
    /// The `before_tool` hook's verdict on the first gated call.
    Gate(Verdict),
    /// A steering message.
    Steer,
    /// The user aborts (default kill policy).
    Abort,
    /// Compaction finished.
    Compacted,
    /// Compaction failed.
    CompactionFailed,
    /// The store acknowledged the run-end entry.
    StoreAck,
    /// A store write failed.
    StoreFailed,
}

/// A human's answer to an approval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Answer {
    /// Approved.
    Approve,
    /// Approved, and always for this tool.
    Always,
    /// Rejected.
    Reject,
    /// Nobody answered in time.
    TimedOut,
}

/// Every input, in the order the checker tries them.
pub const ALPHABET: [Input; 34] = [
    Input::Start,
    Input::Opened,
    Input::Text,
    Input::DuplicateText,
    Input::StaleText,
    Input::Call(CallKind::Calculator),
    Input::Call(CallKind::Shell),
    Input::Call(CallKind::ReadFile),
    Input::Call(CallKind::Unknown),
    Input::Call(CallKind::Malformed),
    Input::Call(CallKind::AskUser),
    Input::Done,
    Input::StaleDone,
    Input::Error(ErrorClass::RateLimited),
    Input::Error(ErrorClass::Server),
    Input::Error(ErrorClass::Auth),
    Input::Error(ErrorClass::Overflow),
    Input::Error(ErrorClass::Stalled),
    Input::Timer,
    Input::Tool(true, 0),
    Input::Tool(false, 1),
    Input::Approval(Answer::Approve),
    Input::Approval(Answer::Always),
    Input::Approval(Answer::Reject),
    Input::Approval(Answer::TimedOut),
    Input::User(true),
    Input::User(false),
    Input::Gate(Verdict::Allow),
    Input::Gate(Verdict::Block),
    Input::Gate(Verdict::Ask),
    Input::Steer,
    Input::Abort,
    Input::Compacted,
    Input::StoreFailed,
];

impl Input {
    /// The test kit's action for this input.
    fn action(self) -> Action {
        let current = AttemptPick::Current;
        match self {
            Input::Start => Action::Start {
                long_history: false,
            },
            Input::Opened => Action::StreamOpened(current),
            Input::Text => Action::Delta(current, SeqPick::Next, DeltaPick::Text(0)),
            Input::DuplicateText => Action::Delta(current, SeqPick::Repeat, DeltaPick::Text(1)),
            Input::StaleText => {
                Action::Delta(AttemptPick::PrevAttempt, SeqPick::Next, DeltaPick::Text(2))
            }
            Input::Call(kind) => {
                let (tool, args) = match kind {
                    CallKind::Calculator => (ToolPick::Known(0), ArgsPick::Valid),
                    CallKind::Shell => (ToolPick::Known(2), ArgsPick::Valid),
                    CallKind::ReadFile => (ToolPick::Known(1), ArgsPick::Valid),
                    CallKind::Unknown => (ToolPick::Unknown, ArgsPick::Valid),
                    CallKind::Malformed => (ToolPick::Known(0), ArgsPick::Invalid),
                    CallKind::AskUser => (ToolPick::AskUser, ArgsPick::Valid),
                };
                Action::Delta(current, SeqPick::Next, DeltaPick::ToolCall(tool, args))
            }
            Input::Done => Action::Done(current),
            Input::StaleDone => Action::Done(AttemptPick::PrevAttempt),
            Input::Error(ErrorClass::RateLimited) => {
                Action::TransportError(current, ErrPick::RateLimited)
            }
            Input::Error(ErrorClass::Server) => Action::TransportError(current, ErrPick::Server),
            Input::Error(ErrorClass::Auth) => Action::TransportError(current, ErrPick::Auth),
            Input::Error(ErrorClass::Overflow) => Action::ContextOverflow(current),
            Input::Error(ErrorClass::Stalled) => Action::StreamStalled(current),
            Input::Timer => Action::TimerElapsed(true),
            Input::Deadline => Action::RunDeadline,
            Input::Tool(ok, i) => Action::ToolFinished(IdPick::Tracked(i), ok),
            Input::Approval(a) => Action::Approval(
                IdPick::Tracked(0),
                match a {
                    Answer::Approve => DecisionPick::Approved,
                    Answer::Always => DecisionPick::ApprovedAlways,
                    Answer::Reject => DecisionPick::Rejected,
                    Answer::TimedOut => DecisionPick::TimedOut,
                },
            ),
            Input::User(answered) => Action::UserAnswered(IdPick::Tracked(0), answered),
            Input::Gate(v) => Action::Gate(
                IdPick::Tracked(0),
                match v {
                    Verdict::Allow => GatePick::Allow,
                    Verdict::Block => GatePick::Block,
                    Verdict::Ask => GatePick::Ask,
                },
            ),
            Input::Steer => Action::Steer,
            Input::Abort => Action::Abort,
            Input::Compacted => Action::CompactionDone,
            Input::CompactionFailed => Action::CompactionFailed,
            Input::StoreAck => Action::RunEndCommitted,
            Input::StoreFailed => Action::StoreWriteFailed,
        }
    }
}

/// A run replayed to the end of an input sequence: the machine, the feeder that concretized
/// the inputs, and the observer.
pub struct Replayed {
    /// The run.
    pub run: Run,
    /// The feeder.
    pub feeder: Feeder,
    /// The observer.
    pub spec: RunSpec,
    /// The last step (none before the first input).
    pub last: Option<Step>,
    /// The run offers `ask_user`.
    offers_ask_user: bool,
}

impl Replayed {
    /// A fresh run with `setup`.
    pub fn new(setup: &Setup) -> Self {
        let config = setup.run_config();
        let limits = RunLimits {
            max_steps: config.max_steps,
            max_retries: config.step.retry.max_retries,
            tools: config.tools.iter().map(|t| t.name.clone()).collect(),
            approval: [APPROVAL_TOOL.to_string()].into(),
            compact_threshold: config.compact_threshold,
        };
        Replayed {
            run: Run::new(config),
            feeder: Feeder {
                output_rejections: setup.typed_output.unwrap_or(0),
                ..Feeder::default()
            },
            spec: RunSpec::new(limits),
            last: None,
            offers_ask_user: setup.ask_user,
        }
    }

    /// Replays `inputs` into a fresh run.
    pub fn replay(setup: &Setup, inputs: &[Input]) -> Self {
        let mut r = Replayed::new(setup);
        for i in inputs {
            r.feed(*i);
        }
        r
    }

    /// Feeds one input; returns the concrete event and whether the run took it.
    pub fn feed(&mut self, input: Input) -> (Event, bool) {
        let event = self.feeder.event(input.action());
        let was_terminal = self.run.is_terminal();
        let step = self.run.handle(event.clone());
        let terminal = self.run.is_terminal();
        self.spec
            .observe(&event, &step, was_terminal, terminal, self.run.result());
        self.feeder.observe(&step.effects);
        let taken = !step.unhandled;
        self.last = Some(step);
        (event, taken)
    }

    /// The inputs worth trying now: what the effects so far await (a model call's stream
    /// and its end, running tools, approvals, timers, a compaction, the run-end commit),
    /// plus the user's steer and abort and a store failure at any time; every input once the
    /// run ended (they must all be refused).
    pub fn enabled(&self) -> Vec<Input> {
        if self.run.is_terminal() {
            return ALPHABET.to_vec();
        }
        let s = &self.spec;
        let f = &self.feeder;
        let mut v = Vec::new();
        if f.request.is_none() {
            v.push(Input::Start);
        }
        if s.model_call_outstanding {
            v.push(Input::Opened);
        }
        if s.model_call_outstanding || s.opened {
            v.extend([
                Input::Error(ErrorClass::RateLimited),
                Input::Error(ErrorClass::Server),
                Input::Error(ErrorClass::Auth),
                Input::Error(ErrorClass::Overflow),
                Input::Error(ErrorClass::Stalled),
            ]);
        }
        if s.opened {
            if s.texts == 0 {
                v.push(Input::Text);
            } else {
                v.push(Input::DuplicateText);
            }
            if s.attempt_calls() < 2 {
                v.extend([
                    Input::Call(CallKind::Calculator),
                    Input::Call(CallKind::Shell),
                    Input::Call(CallKind::ReadFile),
                    Input::Call(CallKind::Unknown),
                    Input::Call(CallKind::Malformed),
                ]);
                if self.offers_ask_user {
                    v.push(Input::Call(CallKind::AskUser));
                }
            }
            v.push(Input::Done);
        }
        if s.attempt().is_some_and(|(_, a)| a > 1) {
            v.extend([Input::StaleText, Input::StaleDone]);
        }
        let step_timers = f
            .live_timers
            .iter()
            .filter(|t| **t != agentloop_core::react::RUN_DEADLINE_TIMER)
            .count();
        if step_timers > 0 {
            v.push(Input::Timer);
        }
        if f.live_timers
            .contains(&agentloop_core::react::RUN_DEADLINE_TIMER)
        {
            v.push(Input::Deadline);
        }
        for (i, _) in f.running.iter().enumerate().take(2) {
            v.push(Input::Tool(true, i as u8));
            v.push(Input::Tool(false, i as u8));
        }
        if s.asked() > 0 {
            v.extend([
                Input::Approval(Answer::Approve),
                Input::Approval(Answer::Always),
                Input::Approval(Answer::Reject),
                Input::Approval(Answer::TimedOut),
            ]);
        }
        if !f.asking_user.is_empty() {
            v.extend([Input::User(true), Input::User(false)]);
        }
        if !f.gating.is_empty() {
            v.extend([
                Input::Gate(Verdict::Allow),
                Input::Gate(Verdict::Block),
                Input::Gate(Verdict::Ask),
            ]);
        }
        if s.compact_outstanding {
            v.extend([Input::Compacted, Input::CompactionFailed]);
        }
        if s.run_end_outstanding {
            v.push(Input::StoreAck);
        }
        if f.request.is_some() {
            v.extend([Input::Steer, Input::Abort, Input::StoreFailed]);
        }
        v
    }

    /// The input a fair environment delivers next: whatever is awaited, answered the way
    /// that ends the run soonest (a compaction succeeds, the store acknowledges, approvals
    /// are granted, tools succeed, the model answers in text), else a live step timer; never
    /// the run's deadline.
    pub fn fair(&self) -> Option<Input> {
        let s = &self.spec;
        let f = &self.feeder;
        if f.request.is_none() {
            return Some(Input::Start);
        }
        Some(if s.compact_outstanding {
            Input::Compacted
        } else if s.run_end_outstanding {
            Input::StoreAck
        } else if s.asked() > 0 {
            Input::Approval(Answer::Approve)
        } else if !f.gating.is_empty() {
            Input::Gate(Verdict::Allow)
        } else if !f.asking_user.is_empty() {
            Input::User(true)
        } else if !f.running.is_empty() {
            Input::Tool(true, 0)
        } else if s.model_call_outstanding {
            Input::Opened
        } else if s.opened && s.texts == 0 && s.attempt_calls() == 0 {
            Input::Text
        } else if s.opened {
            Input::Done
        } else if f
            .live_timers
            .iter()
            .any(|t| *t != agentloop_core::react::RUN_DEADLINE_TIMER)
        {
            Input::Timer
        } else {
            // The run's deadline is never fair delivery: it bounds a run that is stuck, so a
            // run that needs it to end was stuck.
            return None;
        })
    }

    /// Drives the run with [`fair`](Self::fair) inputs for at most `bound` inputs; whether it
    /// ended.
    pub fn drive_fair(&mut self, bound: usize) -> bool {
        for _ in 0..bound {
            if self.run.is_terminal() {
                return true;
            }
            match self.fair() {
                Some(i) => {
                    self.feed(i);
                }
                None => return false,
            }
        }
        self.run.is_terminal()
    }

    /// The fingerprint of this run (see the module docs).
    pub fn key(&self) -> Key {
        let s = &self.spec;
        let f = &self.feeder;
        Key {
            state: self.run.state().to_string(),
            messages: self.run.messages().len(),
            steps: self.run.steps().len(),
            steering: self.run.steering().len(),
            attempt: s.attempt(),
            opened: s.opened,
            outstanding: (
                s.model_call_outstanding,
                s.compact_outstanding,
                s.run_end_outstanding,
            ),
            texts: s.texts,
            attempt_calls: s.attempt_kinds().to_vec(),
            calls: s.call_summary(),
            pending: (
                f.running.len(),
                f.asking.len(),
                f.live_timers.len(),
                f.gating.len(),
                f.asking_user.len(),
            ),
            ends: s.ends(),
            outcome: s.outcome().map(|o| o.to_string()),
            violated: s.violations.names(),
        }
    }
}

/// A run's fingerprint: what the checker compares states by (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    state: String,
    messages: usize,
    steps: usize,
    steering: usize,
    attempt: Option<(u32, u32)>,
    opened: bool,
    outstanding: (bool, bool, bool),
    texts: u32,
    attempt_calls: Vec<String>,
    calls: Vec<(String, bool, u32, bool, bool, bool, bool)>,
    pending: (usize, usize, usize, usize, usize),
    ends: u32,
    outcome: Option<String>,
    violated: Vec<&'static str>,
}

/// A run model's state: the inputs that reach it and its fingerprint.
pub type RunState = Explored<Input, Key>;

fn state_of(parent: Option<&RunState>, inputs: Vec<Input>, r: &Replayed) -> RunState {
    Explored::new(parent, inputs, r.key(), &r.spec.violations, r.enabled())
}

/// The run as a `stateright` model: a [`Setup`] of the test kit and the bounds of the
/// liveness probes.
#[derive(Clone, Debug)]
pub struct RunModel {
    /// The run's configuration knobs.
    pub setup: Setup,
    /// Inputs a fair environment needs at most to end a run from any state.
    pub fair_bound: usize,
    /// The [`SOMETIMES`] examples this configuration cannot reach (by design, not by a
    /// defect), left out of its properties.
    pub unreachable: &'static [&'static str],
}

impl RunModel {
    /// A model of runs with `setup`.
    pub fn new(setup: Setup) -> Self {
        // Each step needs at most: open, text, done, a result per call, approvals, a retry's
        // timer; plus compaction and the run-end commit.
        let per_step = 12 + 2 * setup.max_retries as usize;
        RunModel {
            setup,
            fair_bound: 4 + per_step * (setup.max_steps as usize + 2),
            unreachable: &[],
        }
    }

    /// Replays a state's inputs.
    pub fn replay(&self, state: &RunState) -> Replayed {
        Replayed::replay(&self.setup, &state.inputs)
    }

    /// Whether an abort, then fair delivery of what still runs, ends the run as `Aborted`
    /// (or as it had already ended or announced).
    fn abort_ends(&self, state: &RunState) -> Result<(), String> {
        let mut r = self.replay(state);
        if r.run.is_terminal() || r.feeder.request.is_none() {
            return Ok(());
        }
        // An end already decided (announced, or its run-end entry being committed) stands.
        let decided = r.spec.ends() > 0 || r.spec.run_end_outstanding;
        r.feed(Input::Abort);
        // Only what finishes regardless: immune tools' results and the run-end commit.
        for _ in 0..self.fair_bound {
            if r.run.is_terminal() {
                break;
            }
            let next = if r.spec.run_end_outstanding {
                Input::StoreAck
            } else if !r.feeder.running.is_empty() {
                Input::Tool(true, 0)
            } else {
                break;
            };
            r.feed(next);
        }
        match r.run.result() {
            None => Err(format!("still {} after the abort", r.run.state())),
            Some(res) if res.outcome == agentloop_core::Outcome::Aborted || decided => Ok(()),
            Some(res) => Err(format!(
                "ended {} ({}) after the abort",
                res.outcome, res.reason
            )),
        }
    }

    fn fair_ends(&self, state: &RunState) -> Result<(), String> {
        let mut r = self.replay(state);
        if r.drive_fair(self.fair_bound) {
            Ok(())
        } else {
            Err(format!(
                "still {} after {} fair inputs",
                r.run.state(),
                self.fair_bound
            ))
        }
    }

    /// Why a probe property fails in `state` (for reports and regression tests).
    pub fn probe(&self, property: &str, state: &RunState) -> Result<(), String> {
        match property {
            run::ABORT_ENDS => self.abort_ends(state),
            run::FAIR_RUNS_END => self.fair_ends(state),
            _ => state.why(property),
        }
    }
}

macro_rules! always {
    ($($f:ident => $name:expr),* $(,)?) => {
        $(fn $f(_: &RunModel, s: &RunState) -> bool { !s.violated($name) })*
    };
}

always!(
    p_double => run::NO_DOUBLE_EXECUTION,
    p_paired => run::PAIRED_BEFORE_REQUEST,
    p_context => run::CONTEXT_PAIRED,
    p_attempt => run::NOTHING_FROM_FAILED_ATTEMPT,
    p_denied => run::DENIED_NEVER_RUNS,
    p_absorb => run::TERMINAL_ABSORBS,
    p_outcome => run::ONE_OUTCOME,
    p_bounded => run::MODEL_CALLS_BOUNDED,
    p_threshold => run::CONTEXT_WITHIN_THRESHOLD,
    p_awaited => run::AWAITED_TAKEN,
    p_inert => run::UNHANDLED_IS_INERT,
    p_aborted => run::ABORTED_ONLY_BY_ABORT,
    p_committed => run::END_COMMITTED,
    p_events => run::EVENTS_MATCH_WORK,
    p_typed => run::TYPED_ANSWER_CHECKED,
);

fn p_abort(m: &RunModel, s: &RunState) -> bool {
    m.abort_ends(s).is_ok()
}

fn p_fair(m: &RunModel, s: &RunState) -> bool {
    m.fair_ends(s).is_ok()
}

/// `eventually` property: a path the checker cannot extend (no input is taken) has ended.
fn p_ends(_: &RunModel, s: &RunState) -> bool {
    s.key.outcome.is_some()
}

/// `sometimes`: a run completes.
fn p_completes(_: &RunModel, s: &RunState) -> bool {
    s.key.outcome.as_deref() == Some("completed")
}

/// `sometimes`: a tool runs and the run then completes.
fn p_tool_then_done(_: &RunModel, s: &RunState) -> bool {
    s.key.outcome.as_deref() == Some("completed") && s.key.calls.iter().any(|c| c.4)
}

/// `sometimes`: a retried step commits.
fn p_retry_commits(_: &RunModel, s: &RunState) -> bool {
    s.key.attempt.is_some_and(|(_, a)| a > 1) && s.key.steps > 0
}

/// The `sometimes` properties: reachability checks that the alphabet reaches the
/// interesting parts (a vacuous model would pass every `always`).
pub const SOMETIMES: [&str; 3] = [
    "a run completes",
    "a tool runs and the run completes",
    "a retried step ends",
];

/// `eventually`: every maximal path ends the run.
pub const EVENTUALLY: &str = "every maximal path ends in an outcome";

impl Model for RunModel {
    type State = RunState;
    type Action = Input;

    fn init_states(&self) -> Vec<RunState> {
        vec![state_of(None, Vec::new(), &Replayed::new(&self.setup))]
    }

    fn actions(&self, state: &RunState, actions: &mut Vec<Input>) {
        actions.extend(state.enabled.iter().copied());
    }

    fn next_state(&self, state: &RunState, input: Input) -> Option<RunState> {
        let mut r = self.replay(state);
        let before = r.spec.violations.names();
        let (_, taken) = r.feed(input);
        let step = r.last.as_ref()?;
        // An input refused without effect changes nothing: no new state. (A refused input
        // that did something is a violation, kept as a state.)
        if !taken && step.effects.is_empty() && r.spec.violations.names() == before {
            return None;
        }
        let mut inputs = state.inputs.clone();
        inputs.push(input);
        Some(state_of(Some(state), inputs, &r))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        [
            Property::always(run::NO_DOUBLE_EXECUTION, p_double),
            Property::always(run::PAIRED_BEFORE_REQUEST, p_paired),
            Property::always(run::CONTEXT_PAIRED, p_context),
            Property::always(run::NOTHING_FROM_FAILED_ATTEMPT, p_attempt),
            Property::always(run::DENIED_NEVER_RUNS, p_denied),
            Property::always(run::TERMINAL_ABSORBS, p_absorb),
            Property::always(run::ONE_OUTCOME, p_outcome),
            Property::always(run::MODEL_CALLS_BOUNDED, p_bounded),
            Property::always(run::CONTEXT_WITHIN_THRESHOLD, p_threshold),
            Property::always(run::AWAITED_TAKEN, p_awaited),
            Property::always(run::UNHANDLED_IS_INERT, p_inert),
            Property::always(run::ABORTED_ONLY_BY_ABORT, p_aborted),
            Property::always(run::END_COMMITTED, p_committed),
            Property::always(run::EVENTS_MATCH_WORK, p_events),
            Property::always(run::TYPED_ANSWER_CHECKED, p_typed),
            Property::always(run::ABORT_ENDS, p_abort),
            Property::always(run::FAIR_RUNS_END, p_fair),
            Property::eventually(EVENTUALLY, p_ends),
        ]
        .into_iter()
        .chain(
            [
                Property::sometimes(SOMETIMES[0], p_completes),
                Property::sometimes(SOMETIMES[1], p_tool_then_done),
                Property::sometimes(SOMETIMES[2], p_retry_commits),
            ]
            .into_iter()
            .filter(|p| !self.unreachable.contains(&p.name)),
        )
        .collect()
    }
}
