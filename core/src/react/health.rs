//! Loop health (R-TOOL-4): repeated-pattern detection over the run's tool-call signatures.
//! (A single call repeated with identical arguments is caught by the inner machine, which asks
//! for approval or stops; this module finds longer cycles such as A, B, A, B, A, B.)

/// How many repetitions of a cycle count as a loop.
pub const PATTERN_REPEATS: u32 = 3;

/// Finds a cycle of 2 to 4 calls repeated [`PATTERN_REPEATS`] times at the end of `calls`
/// (name, canonical arguments). Returns the cycle's tool names when the last call completed
/// exactly the threshold repetition, so each loop is reported once.
pub fn repeated_pattern(calls: &[(String, String)]) -> Option<(Vec<String>, u32)> {
    for len in 2..=4usize {
        let need = len * PATTERN_REPEATS as usize;
        if calls.len() < need {
            continue;
        }
        let tail = &calls[calls.len() - need..];
        let cycle = &tail[..len];
        // A cycle of one repeated call is not a pattern of this length.
        if cycle.iter().all(|c| *c == cycle[0]) {
            continue;
        }
        if tail.chunks(len).all(|c| c == cycle) {
            let longer = calls.len() >= need + len
                && calls[calls.len() - need - len..calls.len() - need] == *cycle;
            if !longer {
                return Some((cycle.iter().map(|c| c.0.clone()).collect(), PATTERN_REPEATS));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str) -> (String, String) {
        (name.to_string(), "{}".to_string())
    }

    #[test]
    fn finds_an_abab_cycle_once() {
        let calls: Vec<_> = ["a", "b", "a", "b", "a", "b"]
            .iter()
            .map(|n| c(n))
            .collect();
        assert_eq!(
            repeated_pattern(&calls),
            Some((vec!["a".into(), "b".into()], 3))
        );
        let mut more = calls.clone();
        more.extend([c("a"), c("b")]);
        assert_eq!(
            repeated_pattern(&more),
            None,
            "reported once, at the threshold"
        );
    }

    #[test]
    fn ignores_varied_calls_and_single_repeats() {
        let calls: Vec<_> = ["a", "b", "c", "a", "b", "d"]
            .iter()
            .map(|n| c(n))
            .collect();
        assert_eq!(repeated_pattern(&calls), None);
        let same: Vec<_> = (0..9).map(|_| c("a")).collect();
        assert_eq!(repeated_pattern(&same), None);
    }
}
