//! The tool rules' wildcard matcher (R-TOOL-3) against a reference implementation:
//! the textbook dynamic program over (pattern prefix, text prefix), quadratic but obviously
//! right, with OpenCode's `" *"` tail rule on top.

use agentloop_core::wildcard::{matches, Pattern};
use proptest::prelude::*;

/// `dp[i][j]`: the first `i` pattern characters match the first `j` text characters.
fn reference_glob(pattern: &[char], text: &[char]) -> bool {
    let mut dp = vec![vec![false; text.len() + 1]; pattern.len() + 1];
    dp[0][0] = true;
    for i in 1..=pattern.len() {
        for j in 0..=text.len() {
            dp[i][j] = match pattern[i - 1] {
                '*' => dp[i - 1][j] || (j > 0 && dp[i][j - 1]),
                '?' => j > 0 && dp[i - 1][j - 1],
                c => j > 0 && dp[i - 1][j - 1] && text[j - 1] == c,
            };
        }
    }
    dp[pattern.len()][text.len()]
}

fn reference(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    if let Some(head) = pattern.strip_suffix(" *") {
        let h: Vec<char> = head.chars().collect();
        if reference_glob(&h, &t) {
            return true;
        }
    }
    reference_glob(&p, &t)
}

/// Strings over a small alphabet (so matches are common), with a two-byte character.
fn word(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![Just('a'), Just('b'), Just(' '), Just('é'), Just('/')],
        0..max,
    )
    .prop_map(|v| v.into_iter().collect())
}

fn pattern(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => Just('a'),
            2 => Just('b'),
            2 => Just(' '),
            1 => Just('é'),
            3 => Just('*'),
            2 => Just('?'),
        ],
        0..max,
    )
    .prop_map(|v| v.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    #[test]
    fn r_tool_3_the_matcher_agrees_with_the_reference(p in pattern(12), t in word(16)) {
        prop_assert_eq!(matches(&p, &t), reference(&p, &t), "pattern {:?} text {:?}", p, t);
    }

}

proptest! {
    // Each case fills a dynamic program of up to 150 × 450 cells (in a debug build), so
    // fewer cases than above: about 350 of 600 have patterns of more than 63 tokens.
    #![proptest_config(ProptestConfig::with_cases(600))]

    /// Patterns of more than 63 tokens take several words per state set. Texts are the
    /// pattern filled in (each `*` with one of a few words, empty ones included), then perhaps
    /// with one character changed, so matches and near misses are both common.
    #[test]
    fn r_tool_3_long_patterns_agree_with_the_reference(
        p in pattern(150),
        fills in prop::collection::vec(word(3), 1..4),
        edit in prop::option::of((any::<prop::sample::Index>(), prop_oneof![Just('a'), Just('b'), Just(' ')])),
    ) {
        let mut stars = 0;
        let mut t: Vec<char> = Vec::new();
        for c in p.chars() {
            match c {
                '*' => {
                    t.extend(fills[stars % fills.len()].chars());
                    stars += 1;
                }
                '?' => t.push('b'),
                c => t.push(c),
            }
        }
        if let (Some((at, c)), false) = (edit, t.is_empty()) {
            let i = at.index(t.len());
            t[i] = c;
        }
        let pc: Vec<char> = p.chars().collect();
        let text: String = t.iter().collect();
        prop_assert_eq!(Pattern::new(&p).matches(&text), reference_glob(&pc, &t), "pattern {:?} text {:?}", p, text);
        prop_assert_eq!(matches(&p, &text), reference(&p, &text));
    }
}

/// A state crossing from one 64-bit word into the next, also while the `*` it lands on is
/// already active (the carried bit and the staying bit coincide). A pattern `*`, then `?`s,
/// then a `*` at token `k` near a word edge, then `a`; texts around that length. The random
/// long patterns above hit these alignments too rarely; dropping the carry fails this test.
#[test]
fn r_tool_3_a_state_carried_into_an_active_star_at_a_word_edge_stays() {
    for k in [62, 63, 64, 65, 66, 127, 128, 129] {
        let p = format!("*{}*a", "?".repeat(k - 1));
        let pc: Vec<char> = p.chars().collect();
        let compiled = Pattern::new(&p);
        for n in k.saturating_sub(3)..k + 5 {
            for fill in ['a', 'b'] {
                let t: Vec<char> = std::iter::repeat_n(fill, n).chain(['a']).collect();
                let text: String = t.iter().collect();
                assert_eq!(
                    compiled.matches(&text),
                    reference_glob(&pc, &t),
                    "star at token {k}, text of {} chars",
                    t.len()
                );
            }
        }
    }
}
