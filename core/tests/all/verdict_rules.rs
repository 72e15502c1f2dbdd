//! The small rules behind the runtime's verdicts: near matches of unknown tool
//! names against a reference edit distance, the bounds of the names compared, tie breaking,
//! the `omitted` field on the wire, the typed-answer instruction and message, and the code
//! fence rule of `output_json`.

use agentloop_core::output::{output_json, OutputRejected, OutputSpec};
use agentloop_core::tool_check::{near_match, ArgumentsRejected, SchemaViolation};
use serde_json::json;

/// Reference Levenshtein distance (the textbook recursion, memoized).
fn distance(a: &[char], b: &[char]) -> usize {
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let sub = d[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = sub.min(d[i - 1][j] + 1).min(d[i][j - 1] + 1);
        }
    }
    d[a.len()][b.len()]
}

/// Every word over `ab` of length 1..=`max`.
fn words(max: usize) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut all = Vec::new();
    for _ in 0..max {
        out = out
            .iter()
            .flat_map(|w| ["a", "b"].map(|c| format!("{w}{c}")))
            .collect();
        all.extend(out.iter().cloned());
    }
    all
}

#[test]
fn issue_12_near_match_agrees_with_a_reference_edit_distance() {
    let all = words(6);
    for name in &all {
        for cand in &all {
            if cand == name {
                continue;
            }
            let (n, c): (Vec<char>, Vec<char>) = (name.chars().collect(), cand.chars().collect());
            let limit = if n.len() <= 4 { 1 } else { 2 };
            let expected = distance(&n, &c) <= limit;
            assert_eq!(
                near_match(name, [cand.as_str()]).is_some(),
                expected,
                "{name} ~ {cand}"
            );
        }
    }
}

#[test]
fn issue_12_near_match_bounds_ties_and_exact_names() {
    let a = |n: usize| "a".repeat(n);
    // Names up to 64 characters are compared, on both sides.
    assert_eq!(
        near_match(&format!("{}b", a(63)), [a(64).as_str()]),
        Some(a(64).as_str())
    );
    assert_eq!(near_match(&a(63), [a(64).as_str()]), Some(a(64).as_str()));
    assert_eq!(near_match(&a(64), [a(65).as_str()]), None);
    assert_eq!(near_match(&a(65), [a(66).as_str()]), None);
    // A length difference equal to the limit is still a candidate.
    assert_eq!(near_match("abcdef", ["abcdefgh"]), Some("abcdefgh"));
    // Ties go to the first offered; an offered name itself is no near match.
    assert_eq!(near_match("cat", ["bat", "hat"]), Some("bat"));
    assert_eq!(near_match("cat", ["bat", "cat"]), None);
    // Case and `-`/`_` do not count.
    assert_eq!(near_match("Read-File", ["read_file"]), Some("read_file"));
}

fn violations(n: usize) -> Vec<SchemaViolation> {
    (0..n)
        .map(|i| SchemaViolation {
            path: format!("/{i}"),
            reason: "bad".into(),
        })
        .collect()
}

#[test]
fn issue_12_omitted_is_on_the_wire_only_when_something_was_left_out() {
    let few = OutputRejected::new(violations(2)).expect("verdict");
    let many = OutputRejected::new(violations(9)).expect("verdict");
    assert!(serde_json::to_value(&few).unwrap().get("omitted").is_none());
    assert_eq!(serde_json::to_value(&many).unwrap()["omitted"], json!(4));
    assert!(!few.message().contains("more"), "{}", few.message());
    assert!(many.message().contains("- … and 4 more"));
    let args = |omitted| ArgumentsRejected {
        tool_call_id: "c1".into(),
        violations: violations(1),
        omitted,
    };
    assert!(serde_json::to_value(args(0))
        .unwrap()
        .get("omitted")
        .is_none());
    assert_eq!(serde_json::to_value(args(3)).unwrap()["omitted"], json!(3));
}

#[test]
fn issue_12_the_typed_answer_instruction_carries_the_schema() {
    let spec = OutputSpec::new("sum", json!({"type": "integer", "minimum": 7}));
    let text = spec.instruction();
    assert!(
        text.starts_with("Give your final answer as a single JSON value"),
        "{text}"
    );
    assert!(
        text.ends_with(r#"{"minimum":7,"type":"integer"}"#),
        "{text}"
    );
}

#[test]
fn issue_12_a_fence_whose_first_line_is_json_keeps_it() {
    // The first line after the fence is JSON, not an info string: it stays.
    assert_eq!(output_json("```{\"x\":\n1}```"), Ok(json!({"x": 1})));
    assert_eq!(output_json("```[1,\n2]```"), Ok(json!([1, 2])));
    assert_eq!(output_json("```json\n\"ab\"\n```"), Ok(json!("ab")));
}
