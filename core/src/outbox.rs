//! The outbox both machines write to during one `handle`, drained by their facades: the
//! effects in order, the chart row the handler took (`R`: the machine's row type), whether no
//! state accepted the input, and what the machines this one drives did (the outer machine's
//! inner steps, the inner machine's tool calls): their transitions with the chart oracle's
//! verdicts and their effect checks.

use crate::agent_event::AgentEvent;
use crate::chart::{EffectCheck, GuardCheck};
use crate::effect::Effect;
use crate::entry::Entry;
use crate::step::Transition;

/// What one `handle` produced (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct Outbox<R> {
    /// The effects requested, in order (the driven machines' included).
    pub(crate) out: Vec<Effect>,
    /// The chart row the handler took.
    pub(crate) row: Option<R>,
    /// No state accepted the input.
    pub(crate) unhandled: bool,
    /// The driven machines' transitions, in order.
    pub(crate) transitions: Vec<Transition>,
    /// The chart oracle's verdicts on those transitions.
    pub(crate) checks: Vec<GuardCheck>,
    /// The driven machines' effect checks (debug builds).
    pub(crate) effect_checks: Vec<EffectCheck>,
    /// The names of the effects this machine's own actions pushed in this handle (debug
    /// builds; not a driven machine's taken in whole): checked against the row's declared
    /// effects.
    pub(crate) own: Vec<String>,
}

impl<R> Default for Outbox<R> {
    fn default() -> Self {
        Outbox {
            out: Vec::new(),
            row: None,
            unhandled: false,
            transitions: Vec::new(),
            checks: Vec::new(),
            effect_checks: Vec::new(),
            own: Vec::new(),
        }
    }
}

impl<R: std::fmt::Debug> Outbox<R> {
    /// Starts a handle: no row taken, nothing unhandled, no own effects yet. Returns where
    /// this handle's effects begin in `out`.
    pub(crate) fn open(&mut self) -> usize {
        self.row = None;
        self.unhandled = false;
        self.own.clear();
        self.out.len()
    }

    /// Records the chart row a handler took (one per handle; the generated dispatch calls it).
    pub(crate) fn take(&mut self, row: R) {
        debug_assert!(
            self.row.is_none(),
            "two rows in one handle: {:?} then {row:?}",
            self.row
        );
        self.row = Some(row);
    }

    /// Requests `effect`.
    pub(crate) fn push(&mut self, effect: Effect) {
        if crate::chart::ORACLE {
            self.own.push(crate::chart::effect_name(&effect));
        }
        self.out.push(effect);
    }

    /// Delivers `event` to observers.
    pub(crate) fn emit(&mut self, event: AgentEvent) {
        self.push(Effect::Emit { event });
    }

    /// Appends `entry` to the session store.
    pub(crate) fn persist(&mut self, entry: Entry) {
        self.push(Effect::Persist { entry });
    }
}
