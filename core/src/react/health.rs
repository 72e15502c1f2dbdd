//! Loop health (R-TOOL-4): repeated-pattern detection over the run's tool-call signatures.
//! (A single call repeated with identical arguments is caught by the inner machine, which asks
//! for approval or stops; this module finds longer cycles such as A, B, A, B, A, B.)

/// How many touches of one file within [`FILE_LOOP_WINDOW`] file calls are a file loop.
pub const FILE_LOOP_TOUCHES: u32 = 4;

/// How many recent calls with a `path` argument the file-loop detector looks back over.
pub const FILE_LOOP_WINDOW: usize = 6;

/// How many repetitions of a cycle count as a loop.
pub const PATTERN_REPEATS: u32 = 3;

/// Finds a cycle of 2 to 4 calls repeated [`PATTERN_REPEATS`] times at the end of `calls`
/// (name, canonical arguments). Returns the cycle's tool names when the last call completed
/// exactly the threshold repetition, so each loop is reported once: a periodic run that
/// already reached the threshold earlier (in any rotation: `ababab` then `a` is `bababa`) is
/// not reported again, nor is a cycle that is itself a shorter cycle repeated (`abab`).
pub fn repeated_pattern(calls: &[(String, String)]) -> Option<(Vec<String>, u32)> {
    let n = calls.len();
    for len in 2..=4usize {
        let need = len * PATTERN_REPEATS as usize;
        if n < need {
            continue;
        }
        let tail = &calls[n - need..];
        let cycle = &tail[..len];
        // A cycle made of a shorter one (`aa`, `abab`) is that shorter cycle's loop.
        if (1..len).any(|d| len % d == 0 && cycle.iter().zip(&cycle[d..]).all(|(x, y)| x == y)) {
            continue;
        }
        if tail.chunks(len).all(|c| c == cycle) {
            // The run reached the threshold before this call if it extends one call back.
            let started_earlier = n > need && calls[n - need - 1] == calls[n - need - 1 + len];
            if !started_earlier {
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

    fn calls(names: &[&str]) -> Vec<(String, String)> {
        names.iter().map(|n| c(n)).collect()
    }

    #[test]
    fn finds_an_abab_cycle_once() {
        let calls = calls(&["a", "b", "a", "b", "a", "b"]);
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

    /// R-TOOL-4: one loop, one report — also when the loop goes on past the threshold in
    /// another rotation, or long enough to look like a longer cycle.
    #[test]
    fn a_loop_is_reported_once_in_every_rotation_and_length() {
        let seq = |s: &str| -> Vec<_> { s.chars().map(|ch| c(&ch.to_string())).collect() };
        let reports: Vec<usize> = (1..=16)
            .filter(|&k| repeated_pattern(&seq(&"ab".repeat(8)[..k])).is_some())
            .collect();
        assert_eq!(reports, [6], "ab×3 is reported at its sixth call only");
        let reports: Vec<usize> = (1..=18)
            .filter(|&k| repeated_pattern(&seq(&"abc".repeat(6)[..k])).is_some())
            .collect();
        assert_eq!(reports, [9]);
        // A new loop after a break is a new report.
        let mut calls = seq("ababab");
        calls.extend(seq("xcdcdcd"));
        assert_eq!(
            repeated_pattern(&calls),
            Some((vec!["c".into(), "d".into()], 3))
        );
    }

    #[test]
    fn ignores_varied_calls_and_single_repeats() {
        let calls = calls(&["a", "b", "c", "a", "b", "d"]);
        assert_eq!(repeated_pattern(&calls), None);
        let same: Vec<_> = (0..9).map(|_| c("a")).collect();
        assert_eq!(repeated_pattern(&same), None);
    }
}
