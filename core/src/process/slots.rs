//! The tool calls of the committed message ([`Slot`]s) and the indexes that keep every
//! per-call operation of a step O(log n): a slot is found by call id through a map, the
//! slots in each [`SlotState`] are kept in call-ordered sets, so "is any call running", "the
//! first call waiting for approval", "every call has its result" never scan the slots.
//!
//! A slot's state changes in one place, [`Slots::set_state`], which keeps the indexes right;
//! the field is private to this module so nothing else can change it. Iteration order never
//! comes from the hash map: the map only answers "which slots carry this id", and those are
//! kept in call order.

use std::collections::{BTreeSet, HashMap};

use crate::message::{ToolCall, ToolResult};

/// Where a tool call of the committed message stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Waiting to run (sequential mode).
    Queued,
    /// Waiting for its turn to be approved.
    NeedsApproval,
    /// A human is being asked.
    Asking,
    /// The runtime's `before_tool` hooks are being asked (`GateTool`).
    Gating,
    /// Running.
    Running,
    /// Has its terminal result.
    Done,
}

impl SlotState {
    const COUNT: usize = 6;

    fn index(self) -> usize {
        match self {
            SlotState::Queued => 0,
            SlotState::NeedsApproval => 1,
            SlotState::Asking => 2,
            SlotState::Gating => 3,
            SlotState::Running => 4,
            SlotState::Done => 5,
        }
    }
}

/// One tool call of the committed message.
#[derive(Clone, Debug, PartialEq)]
pub struct Slot {
    /// The call (arguments possibly modified by a human or a hook).
    pub call: ToolCall,
    /// Where it stands; changed only by [`Slots::set_state`].
    state: SlotState,
    /// Its terminal result.
    pub result: Option<ToolResult>,
    /// The `before_tool` hooks have had their say (a call they sent to a human is not
    /// gated again once approved).
    pub gated: bool,
}

impl Slot {
    /// A slot in `state`, with its result if it already has one.
    pub(crate) fn new(call: ToolCall, state: SlotState, result: Option<ToolResult>) -> Self {
        Slot {
            call,
            state,
            result,
            gated: false,
        }
    }

    /// Where the call stands.
    pub(crate) fn state(&self) -> SlotState {
        self.state
    }
}

/// The slots of a step, in call order, with their indexes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Slots {
    list: Vec<Slot>,
    /// Slot indices by call id, in call order (a malformed message may repeat an id).
    by_id: HashMap<String, Vec<usize>>,
    /// Slot indices in each state (by [`SlotState::index`]), in call order.
    by_state: [BTreeSet<usize>; SlotState::COUNT],
    /// Slots looked at by lookups and iterations (each index visited counts once): the
    /// complexity guard of the unit tests reads it.
    #[cfg(test)]
    pub(crate) visits: std::cell::Cell<u64>,
}

impl Slots {
    /// Indexes `list`.
    pub(crate) fn new(list: Vec<Slot>) -> Self {
        let mut by_id: HashMap<String, Vec<usize>> = HashMap::with_capacity(list.len());
        let mut by_state: [BTreeSet<usize>; SlotState::COUNT] = Default::default();
        for (i, slot) in list.iter().enumerate() {
            by_id.entry(slot.call.id.clone()).or_default().push(i);
            by_state[slot.state.index()].insert(i);
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
    /// [`Slots::set_state`]).
    pub(crate) fn get_mut(&mut self, i: usize) -> &mut Slot {
        &mut self.list[i]
    }

    /// All slots in call order (a whole-step pass: abort, steering, results).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Slot> {
        self.visit(self.list.len());
        self.list.iter()
    }

    /// Moves slot `i` to `state`: the one place a slot's state changes.
    pub(crate) fn set_state(&mut self, i: usize, state: SlotState) {
        let old = self.list[i].state;
        if old == state {
            return;
        }
        self.by_state[old.index()].remove(&i);
        self.by_state[state.index()].insert(i);
        self.list[i].state = state;
    }

    /// How many slots are in `state`.
    pub(crate) fn count(&self, state: SlotState) -> usize {
        self.by_state[state.index()].len()
    }

    /// The first slot (in call order) in `state`.
    pub(crate) fn first(&self, state: SlotState) -> Option<usize> {
        self.visit(1);
        self.by_state[state.index()].first().copied()
    }

    /// The first slot in `state` after slot `after` (all of them with `None`).
    pub(crate) fn next(&self, state: SlotState, after: Option<usize>) -> Option<usize> {
        self.visit(1);
        let set = &self.by_state[state.index()];
        match after {
            None => set.first().copied(),
            Some(a) => set
                .range((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded))
                .next()
                .copied(),
        }
    }

    /// The slots in `state`, in call order (a snapshot of the indices).
    pub(crate) fn in_state(&self, state: SlotState) -> Vec<usize> {
        let set = &self.by_state[state.index()];
        self.visit(set.len());
        set.iter().copied().collect()
    }

    /// The first slot (in call order) in `state` whose call has id `tool_call_id`.
    pub(crate) fn find(&self, tool_call_id: &str, state: SlotState) -> Option<usize> {
        let candidates = self.by_id.get(tool_call_id)?;
        candidates
            .iter()
            .copied()
            .inspect(|_| self.visit(1))
            .find(|&i| self.list[i].state == state)
    }

    /// Whether some call is running or being gated (the sequential lane is taken).
    pub(crate) fn busy(&self) -> bool {
        self.count(SlotState::Running) + self.count(SlotState::Gating) > 0
    }

    /// Whether every call has its terminal result.
    pub(crate) fn all_done(&self) -> bool {
        self.count(SlotState::Done) == self.list.len()
    }
}
