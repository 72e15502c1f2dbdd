//! The context manager's pure parts (R-OUT-6, R-CTX): exact token estimates, grouping, pins,
//! the budget check, truncation and the sliding window, including their failure paths.

use agentloop_core::context::{
    cannot_fit, collect, estimate_tokens, fits, groups, pinned, truncate, CompactionError,
    SlidingWindow, SUMMARY_PREFIX,
};
use agentloop_core::{AssistantMessage, Message, ToolCall, ToolResult, ToolStatus};

fn call(id: &str, name: &str, raw: &str) -> ToolCall {
    ToolCall::from_raw(id, name, raw)
}

fn assistant(text: &str, calls: Vec<ToolCall>) -> Message {
    Message::Assistant(AssistantMessage {
        text: text.into(),
        tool_calls: calls,
        ..Default::default()
    })
}

fn result(id: &str, content: &str) -> Message {
    Message::Tool(ToolResult {
        tool_call_id: id.into(),
        name: "t".into(),
        content: content.into(),
        status: ToolStatus::Completed,
    })
}

#[test]
fn r_ctx_token_estimate_of_plain_messages_is_chars_over_four_rounded_up_plus_four() {
    assert_eq!(estimate_tokens(&[Message::user("abcdefgh")]), 2 + 4);
    assert_eq!(estimate_tokens(&[Message::user("abcdefghi")]), 3 + 4);
    assert_eq!(estimate_tokens(&[Message::system("abcdefghijkl")]), 3 + 4);
    assert_eq!(estimate_tokens(&[Message::user("")]), 4);
    assert_eq!(estimate_tokens(&[]), 0);
    // Estimates of several messages add up.
    assert_eq!(
        estimate_tokens(&[Message::user("abcdefgh"), Message::system("abcdefghijkl")]),
        6 + 7
    );
}

#[test]
fn r_ctx_token_estimate_of_an_assistant_turn_counts_text_reasoning_and_every_call() {
    // text 8 + reasoning 12 + name 5 + arguments `{"a":1}` (7) = 32 chars = 8 tokens, + 4.
    let m = Message::Assistant(AssistantMessage {
        text: "t".repeat(8),
        reasoning: "r".repeat(12),
        tool_calls: vec![call("c1", "nnnnn", r#"{"a":1}"#)],
        ..Default::default()
    });
    assert_eq!(estimate_tokens(std::slice::from_ref(&m)), 12);
    // Two calls: name 2 + `{}` (2) and name 3 + `{"b":22}` (8) = 15 chars, + text 1 = 16.
    let two = assistant(
        "x",
        vec![call("c1", "ab", ""), call("c2", "abc", r#"{"b":22}"#)],
    );
    assert_eq!(estimate_tokens(&[two]), 4 + 4);
}

#[test]
fn r_ctx_token_estimate_of_a_tool_result_counts_content_and_name() {
    // content 10 + name 6 = 16 chars = 4 tokens, + 4.
    let r = Message::Tool(ToolResult {
        tool_call_id: "c1".into(),
        name: "abcdef".into(),
        content: "0123456789".into(),
        status: ToolStatus::Completed,
    });
    assert_eq!(estimate_tokens(&[r]), 8);
}

#[test]
fn tool_results_stay_in_the_group_of_their_call() {
    let m = vec![
        Message::system("s"),
        Message::user("u"),
        assistant("", vec![call("a", "t", ""), call("b", "t", "")]),
        result("a", "1"),
        result("b", "2"),
        assistant("done", vec![]),
        Message::user("again"),
    ];
    assert_eq!(
        groups(&m),
        vec![vec![0], vec![1], vec![2, 3, 4], vec![5], vec![6]]
    );
    assert!(groups(&[]).is_empty());
    // A leading tool result (no group yet) opens its own group.
    assert_eq!(
        groups(&[result("x", "1"), result("y", "2")]),
        vec![vec![0, 1]]
    );
}

#[test]
fn r_ctx_pins_are_system_first_user_latest_user_and_last_group() {
    let m = vec![
        assistant("early", vec![]),                          // 0: not pinned
        Message::system("s"),                                // 1: system
        assistant("a", vec![]),                              // 2: not pinned
        Message::user("goal"),                               // 3: first user
        assistant("b", vec![call("c", "t", "")]),            // 4: not pinned
        result("c", "r"),                                    //    (same group)
        Message::user(format!("{SUMMARY_PREFIX}old")),       // 5: summary, not pinned
        Message::user("latest"),                             // 6: latest user
        assistant("c", vec![]),                              // 7: not pinned
        Message::user(format!("{SUMMARY_PREFIX}newer sum")), // 8: summary, not pinned
        assistant("last", vec![]),                           // 9: last group
    ];
    let g = groups(&m);
    assert_eq!(g.len(), 10);
    assert_eq!(
        pinned(&m, &g),
        vec![false, true, false, true, false, false, true, false, false, true]
    );
    // With a single user message it is both first and latest; the last group is pinned.
    let m = vec![
        Message::user("only"),
        assistant("a", vec![]),
        assistant("b", vec![]),
    ];
    assert_eq!(pinned(&m, &groups(&m)), vec![true, false, true]);
    assert!(pinned(&[], &[]).is_empty());
}

#[test]
fn r_ctx_fits_is_inclusive_and_checks_both_limits() {
    let m = vec![Message::user("abcdefgh"), Message::user("abcdefgh")]; // 12 tokens, 2 msgs
    assert!(fits(&m, None, None));
    assert!(fits(&m, Some(12), None));
    assert!(!fits(&m, Some(11), None));
    assert!(fits(&m, None, Some(2)));
    assert!(!fits(&m, None, Some(1)));
    assert!(fits(&m, Some(12), Some(2)));
    assert!(!fits(&m, Some(12), Some(1)), "both limits must hold");
    assert!(!fits(&m, Some(11), Some(2)), "both limits must hold");
}

#[test]
fn collect_keeps_the_marked_groups_in_order() {
    let m = vec![
        Message::user("u"),
        assistant("", vec![call("a", "t", "")]),
        result("a", "1"),
        assistant("end", vec![]),
    ];
    let g = groups(&m);
    assert_eq!(
        collect(&m, &g, &[true, false, true]),
        vec![m[0].clone(), m[3].clone()]
    );
    assert_eq!(
        collect(&m, &g, &[false, true, false]),
        vec![m[1].clone(), m[2].clone()]
    );
    assert!(collect(&m, &g, &[false, false, false]).is_empty());
}

#[test]
fn cannot_fit_names_the_messages_and_tokens_left() {
    let kept = vec![Message::user("abcdefgh"), Message::user("abcdefgh")];
    assert_eq!(
        cannot_fit(&kept),
        "cannot compact below budget: 2 messages / ~12 tokens remain after removing everything removable"
    );
    // The typed error renders the same text.
    assert_eq!(
        CompactionError::CannotFit {
            messages: 2,
            tokens: 12
        }
        .to_string(),
        cannot_fit(&kept)
    );
}

/// goal, then `n` turns of an assistant call with a 40-char result, then the latest user
/// message and a final answer.
fn conversation(n: usize) -> Vec<Message> {
    let mut m = vec![Message::system("sys"), Message::user("goal")];
    for i in 0..n {
        let id = format!("c{i}");
        m.push(assistant("", vec![call(&id, "t", "")]));
        m.push(result(&id, &"x".repeat(40)));
    }
    m.push(Message::user("latest"));
    m.push(assistant("answer", vec![]));
    m
}

#[test]
fn r_out_6_truncation_drops_oldest_groups_until_it_fits() {
    let m = conversation(4);
    // Each turn: assistant ("t" + "{}" = 3 chars → 1+4 = 5) + result (41 chars → 11+4 = 15).
    let all = estimate_tokens(&m);
    let pins = estimate_tokens(&[
        Message::system("sys"),
        Message::user("goal"),
        Message::user("latest"),
        assistant("answer", vec![]),
    ]);
    assert_eq!(all, pins + 4 * 20);
    // Room for exactly one turn: the three oldest go, the newest stays.
    let (kept, removed) = truncate(&m, Some(pins + 20), None).expect("fits");
    assert_eq!(removed, 6);
    let mut expect = vec![m[0].clone(), m[1].clone(), m[8].clone(), m[9].clone()];
    expect.extend(m[10..].iter().cloned());
    assert_eq!(kept, expect);
    // A message cap works the same way.
    let (kept, removed) = truncate(&m, None, Some(6)).expect("fits");
    assert_eq!((kept.len(), removed), (6, 6));
    assert_eq!(kept, expect);
}

#[test]
fn r_out_6_truncation_fails_when_nothing_needs_or_can_be_removed() {
    let m = conversation(2);
    // Already fits: nothing to remove is a failure, not a loop.
    assert_eq!(
        truncate(&m, Some(10_000), None),
        Err(CompactionError::CannotFit {
            messages: m.len(),
            tokens: estimate_tokens(&m)
        })
    );
    // Even the pins alone do not fit: fails after removing what it could.
    let err = truncate(&m, Some(1), None).unwrap_err();
    assert_eq!(
        err,
        CompactionError::CannotFit {
            messages: 4,
            tokens: estimate_tokens(&[
                Message::system("sys"),
                Message::user("goal"),
                Message::user("latest"),
                assistant("answer", vec![]),
            ])
        }
    );
}

#[test]
fn sliding_window_keeps_pins_and_the_last_window_groups() {
    // Groups: sys, goal, t0, t1, t2, t3, latest, answer (n = 8).
    let m = conversation(4);
    let (kept, removed) = SlidingWindow { window: 3 }
        .apply(&m, None, None)
        .expect("drops the old turns");
    // The last three groups are t3, latest, answer; t0..t2 go.
    assert_eq!(removed, 6);
    let mut expect = vec![m[0].clone(), m[1].clone()];
    expect.extend(m[8..].iter().cloned());
    assert_eq!(kept, expect);
    let (kept, removed) = SlidingWindow { window: 4 }
        .apply(&m, None, None)
        .expect("drops the old turns");
    assert_eq!(removed, 4);
    assert_eq!(kept.len(), m.len() - 4);
    assert_eq!(kept[2], m[6]);
}

#[test]
fn sliding_window_shrinks_until_it_fits() {
    let m = conversation(4);
    let pins = estimate_tokens(&[
        Message::system("sys"),
        Message::user("goal"),
        Message::user("latest"),
        assistant("answer", vec![]),
    ]);
    // A window of 5 would keep three turns; the budget only has room for one.
    let (kept, removed) = SlidingWindow { window: 5 }
        .apply(&m, Some(pins + 20), None)
        .expect("shrinks");
    assert_eq!(removed, 6);
    assert_eq!(estimate_tokens(&kept), pins + 20);
    assert_eq!(kept, truncate(&m, Some(pins + 20), None).unwrap().0);
}

#[test]
fn sliding_window_fails_when_it_removes_nothing_or_pins_do_not_fit() {
    let m = conversation(2);
    let window = SlidingWindow { window: 10 };
    assert_eq!(window.apply(&m, None, None), Err(cannot_fit(&m)));
    let err = window.apply(&m, Some(1), None).unwrap_err();
    assert_eq!(
        err,
        cannot_fit(&[
            Message::system("sys"),
            Message::user("goal"),
            Message::user("latest"),
            assistant("answer", vec![]),
        ])
    );
}

/// An image counts a fixed `IMAGE_TOKENS` whatever its size (providers scale
/// images down), a file its decoded bytes / 4, a URL its length, more text its length.
#[test]
fn issue12_item6_parts_count_in_the_estimate() {
    use agentloop_core::context::IMAGE_TOKENS;
    use agentloop_core::ContentPart;
    let with = |parts| estimate_tokens(&[Message::user_with_parts("abcd", parts)]);
    let base = estimate_tokens(&[Message::user("abcd")]);
    assert_eq!(
        with(vec![ContentPart::image_base64(
            "image/png",
            "A".repeat(1 << 20)
        )]),
        base + IMAGE_TOKENS
    );
    assert_eq!(with(vec![ContentPart::image_url("u")]), base + IMAGE_TOKENS);
    // 4,000 base64 digits are 3,000 bytes: 750 tokens.
    assert_eq!(
        with(vec![ContentPart::file_base64(
            "application/pdf",
            "A".repeat(4000),
            None
        )]),
        base + 750
    );
    assert_eq!(with(vec![ContentPart::file_url("abcdefgh")]), base + 2);
    assert_eq!(with(vec![ContentPart::text("abcdefgh")]), base + 2);
}
