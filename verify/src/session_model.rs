//! The session machine ([`Session`]) as a `stateright` [`Model`] over the handle's commands
//! and the end of a run ([`Command`]).
//!
//! As for the run ([`crate::run_model`]), a state is the command sequence that reaches it,
//! replayed into a fresh session for every successor; its fingerprint is the session's state
//! as it displays it, the model the next run uses, the queued prompts' count and the
//! observer's ledger (a run in progress, prompts queued, steering forwarded, closed,
//! violated properties).

use agentloop_core::event::KillPolicy;
use agentloop_core::session_machine::{Session, SessionInput};
use stateright::{Model, Property};

use crate::explored::Explored;
use crate::properties::{session, SessionCommand, SessionSpec};

/// One abstract input to the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Command {
    /// `prompt(text)`, allowed by the hook.
    Prompt,
    /// `prompt(text)`, rejected by the `before_prompt` hook.
    PromptRejected,
    /// `steer(text)`.
    Steer,
    /// `abort`; `true`: clear the queue.
    Abort(bool),
    /// The running run ended; `true`: it handed back steering it never applied.
    RunEnded(bool),
    /// `switch_model` to a known model (`true`) or an unknown one.
    SwitchModel(bool),
    /// The tool set changed.
    ToolsChanged,
    /// A parked approval was answered "always".
    ApprovedAlways,
    /// Every handle is gone.
    Close,
}

/// Every command, in the order the checker tries them.
pub const COMMANDS: [Command; 11] = [
    Command::Prompt,
    Command::PromptRejected,
    Command::Steer,
    Command::Abort(false),
    Command::Abort(true),
    Command::RunEnded(false),
    Command::RunEnded(true),
    Command::SwitchModel(true),
    Command::SwitchModel(false),
    Command::ToolsChanged,
    Command::ApprovedAlways,
];

/// A session replayed to the end of a command sequence.
pub struct Replayed {
    /// The machine.
    pub session: Session,
    /// The observer.
    pub spec: SessionSpec,
    /// Effects of the last command.
    pub effects: usize,
}

/// The steering capacity the model uses.
pub const CAPACITY: usize = 2;

impl Replayed {
    /// A fresh session.
    pub fn new() -> Self {
        Replayed {
            session: Session::new("model-a", CAPACITY),
            spec: SessionSpec::new(CAPACITY),
            effects: 0,
        }
    }

    /// Replays `commands` into a fresh session.
    pub fn replay(commands: &[Command]) -> Self {
        let mut r = Replayed::new();
        for c in commands {
            r.feed(*c);
        }
        r
    }

    /// Feeds one command.
    pub fn feed(&mut self, command: Command) {
        let leftover = ["steer left over".to_string()];
        let pending = self.spec.steering;
        let input = match command {
            Command::Prompt => SessionInput::Prompt {
                text: "hi",
                rejected: None,
            },
            Command::PromptRejected => SessionInput::Prompt {
                text: "hi",
                rejected: Some("a hook said no"),
            },
            Command::Steer => SessionInput::Steer {
                text: "focus",
                rejected: None,
                run_pending: pending,
                run_received: pending as u64,
            },
            Command::Abort(clear_queue) => SessionInput::Abort {
                reason: "user",
                kill: KillPolicy::default(),
                clear_queue,
            },
            Command::RunEnded(with_leftover) => SessionInput::RunEnded {
                leftover: if with_leftover { &leftover } else { &[] },
                announced_abort: false,
            },
            Command::SwitchModel(known) => SessionInput::SwitchModel {
                model: if known { "model-b" } else { "no-such-model" },
                known,
            },
            Command::ToolsChanged => SessionInput::ToolsChanged,
            Command::ApprovedAlways => SessionInput::ApprovalAnswered {
                scope: "shell",
                always: true,
            },
            Command::Close => SessionInput::Close,
        };
        let step = self.session.handle(input);
        let judged = match command {
            Command::Prompt => SessionCommand::Prompt,
            Command::PromptRejected => SessionCommand::PromptRejected,
            Command::Steer => SessionCommand::Steer,
            Command::Abort(c) => SessionCommand::Abort(c),
            Command::RunEnded(l) => SessionCommand::RunEnded(l),
            Command::SwitchModel(_) => SessionCommand::SwitchModel,
            Command::ToolsChanged | Command::ApprovedAlways => SessionCommand::Other,
            Command::Close => SessionCommand::Close,
        };
        self.spec.observe(judged, &step.effects);
        self.effects = step.effects.len();
    }

    /// The commands worth trying: the handle's commands at any time; a run's end only while
    /// one runs (the actor sees only its own run end).
    pub fn enabled(&self) -> Vec<Command> {
        COMMANDS
            .iter()
            .copied()
            .filter(|c| !matches!(c, Command::RunEnded(_)) || self.spec.running)
            .collect()
    }

    /// Ends runs (no steering left over) until idle; whether idle with nothing queued within
    /// `bound` ends.
    pub fn drain(&mut self, bound: usize) -> bool {
        for _ in 0..bound {
            if !self.spec.running {
                break;
            }
            self.feed(Command::RunEnded(false));
        }
        !self.spec.running && self.spec.queued == 0
    }

    fn key(&self) -> Key {
        Key {
            state: format!("{:?}", self.session.state()),
            model: self.session.data().model().to_string(),
            queued: self.session.data().queued().count(),
            whitelist: self.session.data().whitelist().len(),
            running: self.spec.running,
            spec_queued: self.spec.queued,
            steering: self.spec.steering,
            closed: self.spec.closed,
            violated: self.spec.violations.names(),
        }
    }
}

impl Default for Replayed {
    fn default() -> Self {
        Replayed::new()
    }
}

/// A session's fingerprint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    state: String,
    model: String,
    queued: usize,
    whitelist: usize,
    running: bool,
    spec_queued: usize,
    steering: usize,
    closed: bool,
    violated: Vec<&'static str>,
}

/// A session model's state: the commands that reach it and its fingerprint.
pub type SessionState = Explored<Command, Key>;

fn state_of(parent: Option<&SessionState>, commands: Vec<Command>, r: &Replayed) -> SessionState {
    Explored::new(parent, commands, r.key(), &r.spec.violations, r.enabled())
}

/// The session as a `stateright` model; `max_queue` bounds the prompts queued (the state
/// space is otherwise infinite).
#[derive(Clone, Debug)]
pub struct SessionModel {
    /// Prompts queued at most.
    pub max_queue: usize,
}

impl SessionModel {
    /// Why a property fails in `state`.
    pub fn probe(&self, property: &str, state: &SessionState) -> Result<(), String> {
        if property == session::DRAINS_TO_IDLE {
            let mut r = Replayed::replay(&state.inputs);
            if r.spec.closed {
                // Every handle is gone: nobody is left to serve.
                return Ok(());
            }
            let bound = r.spec.queued + 2;
            return if r.drain(bound) {
                Ok(())
            } else {
                Err(format!(
                    "not idle after {bound} run ends: {:?}, {} queued",
                    r.session.state(),
                    r.spec.queued
                ))
            };
        }
        state.why(property)
    }
}

macro_rules! always {
    ($($f:ident => $name:expr),* $(,)?) => {
        $(fn $f(_: &SessionModel, s: &SessionState) -> bool { !s.violated($name) })*
    };
}

always!(
    p_one_run => session::ONE_RUN_AT_A_TIME,
    p_lost => session::NO_LOST_PROMPT,
    p_starts => session::IDLE_STARTS_BUSY_QUEUES,
    p_steering => session::STEERING_BOUNDED,
    p_abort => session::ABORT_HEARD,
    p_reply => session::ONE_REPLY,
);

fn p_drains(m: &SessionModel, s: &SessionState) -> bool {
    m.probe(session::DRAINS_TO_IDLE, s).is_ok()
}

fn p_queue_two(_: &SessionModel, s: &SessionState) -> bool {
    s.key.spec_queued >= 2
}

fn p_steering_full(_: &SessionModel, s: &SessionState) -> bool {
    s.key.steering >= CAPACITY
}

/// The `sometimes` properties of the session model.
pub const SOMETIMES: [&str; 2] = ["two prompts are queued", "the steering queue fills"];

impl Model for SessionModel {
    type State = SessionState;
    type Action = Command;

    fn init_states(&self) -> Vec<SessionState> {
        vec![state_of(None, Vec::new(), &Replayed::new())]
    }

    fn actions(&self, state: &SessionState, actions: &mut Vec<Command>) {
        actions.extend(state.enabled.iter().copied());
        if !state.key.closed {
            actions.push(Command::Close);
        }
    }

    fn next_state(&self, state: &SessionState, command: Command) -> Option<SessionState> {
        if state.key.closed
            || (command == Command::Prompt && state.key.spec_queued >= self.max_queue)
        {
            return None;
        }
        let mut r = Replayed::replay(&state.inputs);
        r.feed(command);
        let mut commands = state.inputs.clone();
        commands.push(command);
        Some(state_of(Some(state), commands, &r))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(session::ONE_RUN_AT_A_TIME, p_one_run),
            Property::always(session::NO_LOST_PROMPT, p_lost),
            Property::always(session::IDLE_STARTS_BUSY_QUEUES, p_starts),
            Property::always(session::STEERING_BOUNDED, p_steering),
            Property::always(session::ABORT_HEARD, p_abort),
            Property::always(session::ONE_REPLY, p_reply),
            Property::always(session::DRAINS_TO_IDLE, p_drains),
            Property::sometimes(SOMETIMES[0], p_queue_two),
            Property::sometimes(SOMETIMES[1], p_steering_full),
        ]
    }
}
