//! The delta seqs an attempt delivered (R-STR-3: a repeated seq is stale), kept as the longest
//! run `0..next` seen so far plus the seqs above it. A driver numbers an attempt's deltas
//! 0, 1, 2, …, so the run absorbs each one and the set stays empty: no hashing and no growth
//! per delta. Any other order (a replay, a duplicate, a gap) is answered exactly like a set.

use std::collections::BTreeSet;

/// A set of `u64` seqs, cheap when they arrive in order from 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SeenSeqs {
    /// Every seq below this one was seen.
    next: u64,
    /// Seen seqs above `next` (a gap before them).
    above: BTreeSet<u64>,
}

impl SeenSeqs {
    /// Whether `seq` was seen.
    pub(crate) fn contains(&self, seq: u64) -> bool {
        seq < self.next || self.above.contains(&seq)
    }

    /// Records `seq` as seen.
    pub(crate) fn insert(&mut self, seq: u64) {
        if seq < self.next {
            return;
        }
        if seq > self.next {
            self.above.insert(seq);
            return;
        }
        self.next += 1;
        while self.above.remove(&self.next) {
            self.next += 1;
        }
    }

    /// Forgets every seq (a new attempt).
    pub(crate) fn clear(&mut self) {
        self.next = 0;
        self.above.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::SeenSeqs;
    use proptest::prelude::*;
    use std::collections::HashSet;

    proptest! {
        /// Any sequence of inserts answers `contains` like a set.
        #[test]
        fn answers_like_a_set(seqs in proptest::collection::vec(0u64..40, 0..80), probe in 0u64..45) {
            let mut seen = SeenSeqs::default();
            let mut set = HashSet::new();
            for s in seqs {
                prop_assert_eq!(seen.contains(s), set.contains(&s));
                seen.insert(s);
                set.insert(s);
            }
            prop_assert_eq!(seen.contains(probe), set.contains(&probe));
        }
    }

    #[test]
    fn in_order_seqs_keep_nothing_above() {
        let mut seen = SeenSeqs::default();
        for s in 0..2000 {
            assert!(!seen.contains(s));
            seen.insert(s);
        }
        assert!(seen.above.is_empty());
        assert!(seen.contains(1999) && !seen.contains(2000));
        seen.clear();
        assert!(!seen.contains(0));
    }
}
