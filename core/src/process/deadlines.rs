//! The deadlines the inner machine keeps as timers (R-IN-7): a model attempt's first chunk,
//! stall watchdog and whole request, and each running tool call's deadline. The machine starts
//! and cancels them as effects (`StartTimer` / `CancelTimer`) and decides what an elapsed one
//! means, so the trace holds every deadline and replay needs no clock.
//!
//! Timer ids are plain numbers in one space per run: a backoff timer is
//! `model_call_index * 1_000_000 + attempt`; an attempt deadline adds its kind in bits 60–61;
//! a tool deadline sets bit 63 with the model-call index above the call's position; an approval
//! timeout (R-CTL-4) sets bit 62 the same way.

use crate::effect::Effect;
use crate::outbox::Outbox;

/// An attempt deadline's kind, in bits 60–61 of its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AttemptTimer {
    /// Until the first delta.
    FirstChunk,
    /// The stall watchdog, once deltas flow.
    Stall,
    /// The whole attempt.
    Request,
}

impl AttemptTimer {
    fn bits(self) -> u64 {
        match self {
            AttemptTimer::FirstChunk => 1 << 60,
            AttemptTimer::Stall => 2 << 60,
            AttemptTimer::Request => 3 << 60,
        }
    }

    /// The id of this kind of timer for the attempt whose backoff timer is `base`.
    pub(crate) fn id(self, base: u64) -> u64 {
        self.bits() | base
    }
}

/// Marks a timer id as a tool call's deadline.
const TOOL_BIT: u64 = 1 << 63;
/// Bits of a tool deadline's id that hold the call's position.
const SLOT_BITS: u32 = 24;

/// The deadline timer of the call at position `slot` in step `model_call_index`.
pub(crate) fn tool_timer(model_call_index: u32, slot: usize) -> u64 {
    TOOL_BIT | (u64::from(model_call_index) << SLOT_BITS) | slot as u64
}

/// The position of the call whose deadline timer is `timer_id`, if it is one of step
/// `model_call_index`.
pub(crate) fn tool_slot(timer_id: u64, model_call_index: u32) -> Option<usize> {
    slot_of(timer_id, TOOL_BIT, model_call_index)
}

/// Marks a timer id as a call's approval timeout.
const APPROVAL_BIT: u64 = 1 << 62;

/// The approval timer of the call at position `slot` in step `model_call_index`.
pub(crate) fn approval_timer(model_call_index: u32, slot: usize) -> u64 {
    APPROVAL_BIT | (u64::from(model_call_index) << SLOT_BITS) | slot as u64
}

/// Whether `timer_id` is an approval timer (of any step).
pub(crate) fn is_approval_timer(timer_id: u64) -> bool {
    timer_id & (TOOL_BIT | APPROVAL_BIT) == APPROVAL_BIT
}

/// The position of the call whose approval timer is `timer_id`, if it is one of step
/// `model_call_index`.
pub(crate) fn approval_slot(timer_id: u64, model_call_index: u32) -> Option<usize> {
    slot_of(timer_id, APPROVAL_BIT, model_call_index)
}

/// The position a timer with marker `bit` (and no other marker) holds, if it is one of step
/// `model_call_index`.
fn slot_of(timer_id: u64, bit: u64, model_call_index: u32) -> Option<usize> {
    let markers = TOOL_BIT | APPROVAL_BIT;
    if timer_id & markers != bit
        || (timer_id & !markers) >> SLOT_BITS != u64::from(model_call_index)
    {
        return None;
    }
    usize::try_from(timer_id & ((1 << SLOT_BITS) - 1)).ok()
}

/// The current attempt's armed deadline timers.
#[derive(Clone, Debug, Default)]
pub(crate) struct AttemptTimers {
    /// Armed timers: (kind, id, delay).
    armed: Vec<(AttemptTimer, u64, u64)>,
    /// A delta arrived since the stall watchdog was (re)armed.
    pub(crate) moved: bool,
}

impl AttemptTimers {
    /// Starts timer `kind` (id `id`) for `delay_ms`.
    pub(crate) fn arm<R: std::fmt::Debug>(
        &mut self,
        kind: AttemptTimer,
        id: u64,
        delay_ms: u64,
        out: &mut Outbox<R>,
    ) {
        self.armed.retain(|(k, _, _)| *k != kind);
        self.armed.push((kind, id, delay_ms));
        out.push(Effect::StartTimer {
            timer_id: id,
            delay_ms,
        });
    }

    /// Cancels timer `kind` if it is armed.
    pub(crate) fn disarm<R: std::fmt::Debug>(&mut self, kind: AttemptTimer, out: &mut Outbox<R>) {
        if let Some(p) = self.armed.iter().position(|(k, _, _)| *k == kind) {
            let (_, timer_id, _) = self.armed.remove(p);
            out.push(Effect::CancelTimer { timer_id });
        }
    }

    /// Cancels every armed timer (the attempt ended).
    pub(crate) fn clear<R: std::fmt::Debug>(&mut self, out: &mut Outbox<R>) {
        for (_, timer_id, _) in self.armed.drain(..) {
            out.push(Effect::CancelTimer { timer_id });
        }
        self.moved = false;
    }

    /// The armed timer `timer_id`: its kind and delay.
    pub(crate) fn get(&self, timer_id: u64) -> Option<(AttemptTimer, u64)> {
        self.armed
            .iter()
            .find(|(_, id, _)| *id == timer_id)
            .map(|&(k, _, ms)| (k, ms))
    }

    /// Whether timer `kind` is armed.
    pub(crate) fn armed(&self, kind: AttemptTimer) -> bool {
        self.armed.iter().any(|(k, _, _)| *k == kind)
    }

    /// Timer `timer_id` fired: forgets it (it is not armed any more).
    pub(crate) fn fired(&mut self, timer_id: u64) {
        self.armed.retain(|(_, id, _)| *id != timer_id);
    }
}
