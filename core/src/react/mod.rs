//! The outer ReAct machine (SPEC §2): one run — plan, execute a step, observe, compact.
//! [`Run`] is the documented facade: `handle(Event) -> Step`. It owns the inner
//! [`Process`](crate::process::Process) of the current step and runs internal events
//! (`Plan`, `Decide`, inner machine finished) to completion inside one call.

pub(crate) mod actions;
pub mod config;
pub(crate) mod context;
pub(crate) mod data;
pub(crate) mod dispatch;
pub(crate) mod guards;
pub mod health;
pub mod limits;
pub(crate) mod machine;
pub mod reminders;

use statig::blocking::{InitializedStateMachine, IntoStateMachineExt};

use crate::chart::{ProcessState, ReactEventKind, ReactRow, ReactState};
use crate::event::Event;
use crate::message::{AssistantMessage, Message};
use crate::step::{AgentState, Step, Transition};

pub use config::{
    default_decider, Decider, DeciderRef, DeciderRegistry, Decision, LoopResult, Observation,
    RunConfig, SteeringPolicy, UnknownDecider, DEFAULT_DECIDER, FINAL_REMINDER,
};
use data::ReactData;
pub use limits::{CostLimit, LimitAction, LimitKind, UsageLimits, LIMIT_REMINDER};
use machine::{kind, Input, ReactMachine};

/// One run: the outer machine, its data and the current step's inner machine.
///
/// ```
/// use agentloop_core::{Event, Message, Run, RunConfig};
/// let mut run = Run::new(RunConfig::default());
/// let step = run.handle(Event::Start {
///     run_id: "r1".into(),
///     history: vec![],
///     input: vec![Message::user("hi")],
///     session_turns: 0,
/// });
/// assert_eq!(step.to.to_string(), "Executing.Calling");
/// assert!(step.transitions.iter().all(|t| t.conforms()));
/// ```
pub struct Run {
    sm: InitializedStateMachine<ReactMachine>,
    data: ReactData,
    /// The verdicts on the effects of the rows the last `handle` took (debug builds).
    effect_checks: Vec<crate::chart::EffectCheck>,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run").field("state", &self.state()).finish()
    }
}

/// The id of the whole-run deadline's timer (R-IN-7): no step's timer uses it (see
/// `process::deadlines`).
pub const RUN_DEADLINE_TIMER: u64 = u64::MAX;

impl Run {
    /// A new run in `Init`.
    pub fn new(config: RunConfig) -> Self {
        let mut data = ReactData::new(config);
        let sm = ReactMachine
            .uninitialized_state_machine()
            .init_with_context(&mut data);
        Run {
            sm,
            data,
            effect_checks: Vec::new(),
        }
    }

    /// Feeds one event and runs internal events to completion. Returns what happened: every
    /// transition with its chart row, and the effects to perform, in order. An event that no
    /// state accepts is reported with `unhandled: true`, never dropped silently.
    pub fn handle(&mut self, event: Event) -> Step {
        let from = self.state();
        self.effect_checks.clear();
        let mut step = Step {
            from,
            event: std::borrow::Cow::Borrowed(event.name()),
            to: from,
            effects: Vec::new(),
            unhandled: false,
            transitions: Vec::new(),
            guard_checks: Vec::new(),
        };
        step.unhandled = match crate::route::route(&event).react {
            Some(ReactEventKind::RunDeadline) => self.run_deadline(&mut step),
            Some(k) => self.feed(Input::Ext(&event), k, &mut step),
            // The inner machine's input: the current step takes it.
            None => {
                let unhandled = if self.react_state() == ReactState::Executing {
                    self.data.forward(&event)
                } else {
                    true
                };
                self.drain(&mut step);
                unhandled
            }
        };
        self.run_to_completion(&mut step);
        step.to = self.state();
        step
    }

    /// The run's deadline fired: row `active_run_deadline` (or `finishing_run_deadline`), then,
    /// from an active state, the abort it stands for as an internal event.
    fn run_deadline(&mut self, step: &mut Step) -> bool {
        let timer = Event::TimerElapsed {
            timer_id: RUN_DEADLINE_TIMER,
        };
        let k = ReactEventKind::RunDeadline;
        let unhandled = self.feed(Input::Ext(&timer), k, step);
        if std::mem::take(&mut self.data.end.deadline_abort) {
            let abort = Event::Abort {
                reason: "run deadline exceeded".into(),
                kill: crate::event::KillPolicy::default(),
            };
            self.feed(Input::Ext(&abort), ReactEventKind::Abort, step);
        }
        unhandled
    }

    fn drain(&mut self, step: &mut Step) {
        step.transitions.append(&mut self.data.outbox.transitions);
        step.effects.append(&mut self.data.outbox.out);
        step.guard_checks.append(&mut self.data.outbox.checks);
        // The inner machine's rows (and the tool-call rows they drove) checked their effects
        // even when the outer machine did not move.
        self.effect_checks
            .append(&mut self.data.outbox.effect_checks);
    }

    fn feed(&mut self, input: Input<'_>, k: ReactEventKind, step: &mut Step) -> bool {
        let from = self.react_state();
        let mark = self.data.outbox.open();
        self.data.prepare(from, &input);
        let verdict = dispatch::expected(from, k, &self.data, self.sm.state(), &input);
        self.sm.handle_with_context(&input, &mut self.data);
        let to = self.react_state();
        if from != to {
            let ev = crate::process::state_changed(
                crate::chart::MachineKind::React,
                from.name(),
                k.name(),
                to.name(),
            );
            self.data.outbox.out.insert(mark, ev);
        }
        let unhandled = self.data.outbox.unhandled;
        let row = self.data.outbox.row.take();
        let own = std::mem::take(&mut self.data.outbox.own);
        self.effect_checks
            .append(&mut self.data.outbox.effect_checks);
        self.effect_checks
            .extend(row.and_then(|r| r.effect_check(&own)));
        step.guard_checks
            .push(ReactRow::guard_check(from.name(), k.name(), row, verdict));
        step.transitions.push(Transition::React {
            from,
            event: k,
            to,
            row,
            unhandled,
        });
        // Inner transitions caused by this outer handler (Begin) come after it.
        self.drain(step);
        unhandled
    }

    fn run_to_completion(&mut self, step: &mut Step) {
        loop {
            match self.react_state() {
                ReactState::Planning => {
                    self.feed(Input::Plan, ReactEventKind::Plan, step);
                }
                ReactState::Observing => {
                    // The decision function runs once per observed step; its answer rides
                    // on the internal event the Observing guards read.
                    let decision = self.data.observe();
                    self.feed(Input::Decide(decision), ReactEventKind::Decide, step);
                }
                ReactState::Executing if self.data.current.ended() => {
                    let Some(k) = dispatch::chart_event(&self.data, &Input::InnerEnded) else {
                        break;
                    };
                    self.feed(Input::InnerEnded, k, step);
                }
                _ => break,
            }
        }
    }

    fn react_state(&self) -> ReactState {
        kind(self.sm.state())
    }

    /// The current state (outer, and inner while a step exists).
    pub fn state(&self) -> AgentState {
        AgentState {
            react: self.react_state(),
            process: self.data.current.step.as_ref().map(|s| s.state()),
        }
    }

    /// The verdicts on the effects of the rows the last [`Run::handle`] took — the outer
    /// machine's, the inner machine's and the tool calls' — each row's action (and, for the
    /// outer machine, the entry/exit actions of its transition) produced the effects its chart
    /// row declares (see [`check_effects`](crate::chart::check_effects)). Recorded in debug builds
    /// only (empty in release builds); the test kit's harness asserts them.
    pub fn effect_checks(&self) -> &[crate::chart::EffectCheck] {
        &self.effect_checks
    }

    /// The current inner state, if a step exists.
    pub fn process_state(&self) -> Option<ProcessState> {
        self.data.current.step.as_ref().map(|s| s.state())
    }

    /// The steering messages the run has queued and not yet applied (R-CTL-2): the queue is
    /// the machine's (row `active_steer` fills it, the next step boundary empties it).
    pub fn steering(&self) -> &[String] {
        &self.data.queues.steering
    }

    /// The run's result, once it ended.
    pub fn result(&self) -> Option<&LoopResult> {
        self.data.end.result.as_ref()
    }

    /// What each step that ended so far produced (R-IN-5), in order; positions name
    /// [`messages`](Self::messages).
    pub fn steps(&self) -> &[crate::execute_result::StepRecord] {
        &self.data.transcript.steps
    }

    /// Whether the run ended.
    pub fn is_terminal(&self) -> bool {
        self.react_state().is_terminal()
    }

    /// The context as it stands.
    pub fn messages(&self) -> &[Message] {
        &self.data.transcript.messages
    }

    /// A snapshot of the message being streamed, if a step is streaming (R-STR-2).
    pub fn partial(&self) -> Option<AssistantMessage> {
        self.data.current.step.as_ref().map(|s| s.partial())
    }

    /// Identifies [`partial`](Self::partial)'s content (`None` when it is `None`): equal marks,
    /// equal messages. See [`PartialMark`](crate::process::PartialMark).
    pub fn partial_mark(&self) -> Option<crate::process::PartialMark> {
        self.data.current.step.as_ref().map(|s| {
            let mut mark = s.partial_mark();
            mark.step = self.data.counters.steps_created;
            mark
        })
    }

    /// Brings `snapshot`, an earlier [`partial`](Self::partial) whose mark is of the same
    /// source as the current one, up to date in time proportional to what arrived since.
    pub fn update_partial(&self, snapshot: &mut AssistantMessage) {
        match &self.data.current.step {
            Some(s) => s.update_partial(snapshot),
            None => *snapshot = AssistantMessage::default(),
        }
    }

    /// The run's configuration.
    pub fn config(&self) -> &RunConfig {
        &self.data.cfg
    }

    /// The run id (empty before `Start`).
    pub fn run_id(&self) -> &str {
        &self.data.run_id
    }
}
