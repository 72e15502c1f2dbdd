//! Unique tool-call ids within a message. A provider may stream two tool calls with one id (a
//! proxy that numbers calls per chunk, a server that reuses `call_0`); the session keys a
//! call's start marker and its result by the id, so two calls under one id would share one
//! record and one of them would have run without its own. The rule (the process chart's
//! `streaming_done_tools` row): the first call keeps the provider's id, each later call with an
//! id already taken in the message gets a derived one, `<id>_<n>` with the smallest `n ≥ 2`
//! not taken, and the commit announces each derivation (`tool_call_id_derived`). The
//! derivation is a pure function of the message's ids in order, so the machine, the runtime's
//! argument checks and `agentloop decode` agree on it.

use std::collections::HashSet;

/// Assigns each tool call of one message an id no earlier call of the message has.
#[derive(Clone, Debug, Default)]
pub struct CallIds {
    taken: HashSet<String>,
}

impl CallIds {
    /// No id taken yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The id the next call gets: `provided` when no earlier call took it, else the first
    /// `<provided>_<n>` (`n` = 2, 3, …) that none did. Constant time per call, but for a
    /// message that repeats one id `k` times (`O(k)` candidates then, `O(k²)` in all: ids
    /// are bounded by the provider's response size cap).
    pub fn assign(&mut self, provided: &str) -> String {
        if self.taken.insert(provided.to_string()) {
            return provided.to_string();
        }
        let mut n = 2u64;
        loop {
            let candidate = format!("{provided}_{n}");
            if self.taken.insert(candidate.clone()) {
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
    fn distinct_ids_are_kept_as_they_are() {
        let mut ids = CallIds::new();
        for id in ["call_1", "call_2", "toolu_x"] {
            assert_eq!(ids.assign(id), id);
        }
    }
}
