//! The tool calls of the committed message ([`Slot`]s) and the indexes that keep every
//! per-call operation of a step O(log n): a slot is found by call id through a map, the
//! slots in each [`ToolCallState`] are kept in call-ordered sets, so "is any call running", "the
//! first call waiting for approval", "every call has its result" never scan the slots.
//!
//! A slot's state is its place in the tool-call lifecycle chart (`statecharts/tool_call.toml`,
//! [`ToolCallState`]). It changes in one place, [`Slots::apply`], which moves it along a chart
//! row ([`ToolCallRow`]) and keeps the indexes right; the field is private to this module so
//! nothing else can change it. Iteration order never
//! comes from the hash map: the map only answers "which slots carry this id", and those are
//! kept in call order.

use std::collections::{BTreeSet, HashMap};

use crate::chart::{ToolCallRow, ToolCallState};
use crate::message::{ToolCall, ToolResult};
use crate::tool_check::ArgumentsRejected;
use crate::tool_rules::CallPolicy;

/// Number of lifecycle states (the indexes keep one set per state).
const STATES: usize = ToolCallState::ALL.len();

/// A state's index into the per-state sets.
fn index(state: ToolCallState) -> usize {
    state as usize
}

/// One tool call of the committed message.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Slot {
    /// The call (arguments possibly modified by a human or a hook).
    pub call: ToolCall,
    /// Where it stands; changed only by [`Slots::apply`].
    state: ToolCallState,
    /// Its terminal result.
    pub result: Option<ToolResult>,
    /// The `before_tool` hooks have had their say (a call they sent to a human is not
    /// gated again once approved).
    pub gated: bool,
    /// The runtime's verdict that the arguments break the tool's JSON Schema (R-TOOL-1),
    /// from the `done` event the call was committed on.
    pub rejected: Option<ArgumentsRejected>,
    /// What decides the call (R-TOOL-3): the tool rule that matched it when it was
    /// committed or restored (or the approval map), its action and deadline.
    pub policy: CallPolicy,
}

impl Slot {
    /// A slot for `call`, in the chart's initial state (`Pending`).
    pub(crate) fn new(call: ToolCall) -> Self {
        Slot {
            call,
            state: ToolCallState::INITIAL,
            result: None,
            gated: false,
            rejected: None,
            policy: CallPolicy::default(),
        }
    }

    /// Where the call stands.
    pub(crate) fn state(&self) -> ToolCallState {
        self.state
    }
}

/// The slots of a step, in call order, with their indexes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Slots {
    list: Vec<Slot>,
    /// Slot indices by call id, in call order (a malformed message may repeat an id).
    by_id: HashMap<String, Vec<usize>>,
    /// Slot indices in each state (by [`index`]), in call order.
    by_state: [BTreeSet<usize>; STATES],
    /// Slots looked at by lookups and iterations (each index visited counts once): the
    /// complexity guard of the unit tests reads it.
    #[cfg(test)]
    pub(crate) visits: std::cell::Cell<u64>,
}

impl Slots {
    /// Indexes `list`.
    pub(crate) fn new(list: Vec<Slot>) -> Self {
        let mut by_id: HashMap<String, Vec<usize>> = HashMap::with_capacity(list.len());
        let mut by_state: [BTreeSet<usize>; STATES] = Default::default();
        for (i, slot) in list.iter().enumerate() {
            by_id.entry(slot.call.id.clone()).or_default().push(i);
            by_state[index(slot.state)].insert(i);
        }
        Slots {
            list,
            by_id,
            by_state,
            #[cfg(test)]
            visits: Default::default(),
        }
    }

    #[cfg(test)]
    fn visit(&self, n: usize) {
        self.visits.set(self.visits.get() + n as u64);
    }

    #[cfg(not(test))]
    fn visit(&self, _n: usize) {}

    /// Number of slots.
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// Slot `i`.
    pub(crate) fn get(&self, i: usize) -> &Slot {
        &self.list[i]
    }

    /// Slot `i`, to change its call, result or gated flag (its state goes through
    /// [`Slots::apply`]).
    pub(crate) fn get_mut(&mut self, i: usize) -> &mut Slot {
        &mut self.list[i]
    }

    /// All slots in call order (a whole-step pass: abort, steering, results).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Slot> {
        self.visit(self.list.len());
        self.list.iter()
    }

    /// Moves slot `i` along chart row `row` (an internal row leaves it where it is): the one
    /// place a slot's state changes. Returns the states before and after; the caller records
    /// the transition.
    pub(crate) fn apply(&mut self, i: usize, row: ToolCallRow) -> (ToolCallState, ToolCallState) {
        let old = self.list[i].state;
        let Some(new) = row.target() else {
            return (old, old);
        };
        self.by_state[index(old)].remove(&i);
        self.by_state[index(new)].insert(i);
        self.list[i].state = new;
        (old, new)
    }

    /// How many slots are in `state`.
    pub(crate) fn count(&self, state: ToolCallState) -> usize {
        self.by_state[index(state)].len()
    }

    /// The first slot (in call order) in `state`.
    pub(crate) fn first(&self, state: ToolCallState) -> Option<usize> {
        self.visit(1);
        self.by_state[index(state)].first().copied()
    }

    /// The first slot in `state` after slot `after` (all of them with `None`).
    pub(crate) fn next(&self, state: ToolCallState, after: Option<usize>) -> Option<usize> {
        self.visit(1);
        let set = &self.by_state[index(state)];
        match after {
            None => set.first().copied(),
            Some(a) => set
                .range((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded))
                .next()
                .copied(),
        }
    }

    /// The slots in `state`, in call order (a snapshot of the indices).
    pub(crate) fn in_state(&self, state: ToolCallState) -> Vec<usize> {
        let set = &self.by_state[index(state)];
        self.visit(set.len());
        set.iter().copied().collect()
    }

    /// The first slot (in call order) in `state` whose call has id `tool_call_id`.
    pub(crate) fn find(&self, tool_call_id: &str, state: ToolCallState) -> Option<usize> {
        let candidates = self.by_id.get(tool_call_id)?;
        candidates
            .iter()
            .copied()
            .inspect(|_| self.visit(1))
            .find(|&i| self.list[i].state == state)
    }

    /// Whether some call is running or being gated (the sequential lane is taken).
    pub(crate) fn busy(&self) -> bool {
        self.count(ToolCallState::Running) + self.count(ToolCallState::Gating) > 0
    }

    /// Whether every call has its terminal result.
    pub(crate) fn all_done(&self) -> bool {
        let ended: usize = ToolCallState::ALL
            .iter()
            .filter(|s| s.is_terminal())
            .map(|&s| self.count(s))
            .sum();
        ended == self.list.len()
    }
}
