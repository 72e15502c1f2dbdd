//! Loop health (R-TOOL-4): repeated cycles of 2 to 4 tool calls are found once, at exactly the
//! third repetition, and only when names and arguments repeat.

use agentloop_core::react::health::{repeated_pattern, PATTERN_REPEATS};

fn calls(names: &str) -> Vec<(String, String)> {
    names
        .chars()
        .map(|n| (n.to_string(), "{}".to_string()))
        .collect()
}

fn names(cycle: &str) -> Option<(Vec<String>, u32)> {
    Some((
        cycle.chars().map(|c| c.to_string()).collect(),
        PATTERN_REPEATS,
    ))
}

#[test]
fn r_tool_4_cycles_of_two_three_and_four_calls_are_found_at_the_third_repetition() {
    assert_eq!(PATTERN_REPEATS, 3);
    assert_eq!(repeated_pattern(&calls("ababab")), names("ab"));
    assert_eq!(repeated_pattern(&calls("abcabcabc")), names("abc"));
    assert_eq!(repeated_pattern(&calls("abcdabcdabcd")), names("abcd"));
    // A cycle may contain a repeated call, as long as it is not one call repeated.
    assert_eq!(repeated_pattern(&calls("aabaabaab")), names("aab"));
    // Earlier unrelated calls do not matter.
    assert_eq!(repeated_pattern(&calls("xyzababab")), names("ab"));
    assert_eq!(repeated_pattern(&calls("qabcabcabc")), names("abc"));
    assert_eq!(repeated_pattern(&calls("qrstabcdabcdabcd")), names("abcd"));
}

#[test]
fn r_tool_4_fewer_repetitions_are_not_a_loop() {
    for s in [
        "",
        "a",
        "ab",
        "abab",
        "ababa",
        "abcabcab",
        "abcdabcdabc",
        "babab",
    ] {
        assert_eq!(repeated_pattern(&calls(s)), None, "{s}");
    }
}

#[test]
fn r_tool_4_a_loop_is_reported_once() {
    // The fourth repetition is not reported again. (A rotation of the cycle, e.g. `ba` after
    // `abababa`, currently is: see the report; not pinned here.)
    assert_eq!(repeated_pattern(&calls("abababab")), None);
    assert_eq!(repeated_pattern(&calls("ababababab")), None);
    assert_eq!(repeated_pattern(&calls("abcabcabcabc")), None);
    assert_eq!(repeated_pattern(&calls("abcdabcdabcdabcd")), None);
    // A preceding full cycle of other calls is not a fourth repetition.
    assert_eq!(repeated_pattern(&calls("xyababab")), names("ab"));
    assert_eq!(repeated_pattern(&calls("xaababab")), names("ab"));
}

#[test]
fn r_tool_4_one_call_repeated_is_not_a_cycle() {
    for n in 1..=12 {
        assert_eq!(repeated_pattern(&calls(&"a".repeat(n))), None, "{n}");
    }
}

#[test]
fn r_tool_4_arguments_are_part_of_the_signature() {
    let mut c = calls("ababab");
    c[2].1 = r#"{"x":1}"#.into();
    assert_eq!(repeated_pattern(&c), None);
    // Same names and same (non-empty) arguments throughout are a loop.
    let c: Vec<_> = calls("ababab")
        .into_iter()
        .map(|(n, _)| (n, r#"{"x":1}"#.to_string()))
        .collect();
    assert_eq!(repeated_pattern(&c), names("ab"));
}
