//! Unique tool-call ids. A provider may stream two tool calls with one id (a proxy that
//! numbers calls per chunk, a server that reuses `call_0` in every response); the session keys
//! a call's start marker and its result by the id, so two calls under one id would share one
//! record and one of them would have run without its own. The rule (the process chart's
//! `streaming_done_tools` row): a call keeps the provider's id unless an earlier call of the
//! message, or of the run's context (the calls the run started from and those it committed
//! since: [`CallIds::after`]), has it; then it gets a derived one, `<id>_<n>` with the smallest
//! `n ≥ 2` not taken, and the commit announces each derivation (`tool_call_id_derived`).
//!
//! Within one message the derivation is a pure function of the message's ids in order
//! ([`CallIds::new`]), which is how the runtime's argument checks and `agentloop decode` see a
//! message; the machine maps their ids onto the ones it commits
//! ([`MessageAssembler::message_local_ids`](super::accumulate::MessageAssembler::message_local_ids)).

use std::collections::HashSet;
use std::sync::Arc;

/// Assigns each tool call an id no earlier call (of the message, or of the context it was
/// created [`after`](Self::after)) has.
#[derive(Clone, Debug, Default)]
pub struct CallIds {
    earlier: Arc<HashSet<String>>,
    taken: HashSet<String>,
}

impl CallIds {
    /// No id taken yet: unique within one message.
    pub fn new() -> Self {
        Self::default()
    }

    /// The ids `earlier` are taken already (the run's context): unique within it too.
    pub fn after(earlier: Arc<HashSet<String>>) -> Self {
        CallIds {
            earlier,
            taken: HashSet::new(),
        }
    }

    fn take(&mut self, id: &str) -> bool {
        !self.earlier.contains(id) && self.taken.insert(id.to_string())
    }

    /// The id the next call gets: `provided` when no earlier call took it, else the first
    /// `<provided>_<n>` (`n` = 2, 3, …) that none did. Constant time per call, but for a
    /// message that repeats one id `k` times (`O(k)` candidates then, `O(k²)` in all: ids
    /// are bounded by the provider's response size cap).
    pub fn assign(&mut self, provided: &str) -> String {
        if self.take(provided) {
            return provided.to_string();
        }
        let mut n = 2u64;
        loop {
            let candidate = format!("{provided}_{n}");
            if self.take(&candidate) {
                return candidate;
            }
            n += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_keeps_its_id_later_ones_are_derived_and_never_collide() {
        let mut ids = CallIds::new();
        let got: Vec<String> = ["a", "a", "a_2", "b", "a"]
            .iter()
            .map(|id| ids.assign(id))
            .collect();
        assert_eq!(got, ["a", "a_2", "a_2_2", "b", "a_3"]);
        let unique: HashSet<&String> = got.iter().collect();
        assert_eq!(unique.len(), got.len());
    }

    #[test]
    fn ids_of_the_context_are_taken_too() {
        let earlier: HashSet<String> = ["call_0".to_string(), "call_0_2".to_string()].into();
        let mut ids = CallIds::after(Arc::new(earlier));
        let got: Vec<String> = ["call_0", "call_1", "call_0"]
            .iter()
            .map(|id| ids.assign(id))
            .collect();
        assert_eq!(got, ["call_0_3", "call_1", "call_0_4"]);
    }

    #[test]
    fn distinct_ids_are_kept_as_they_are() {
        let mut ids = CallIds::new();
        for id in ["call_1", "call_2", "toolu_x"] {
            assert_eq!(ids.assign(id), id);
        }
    }
}
