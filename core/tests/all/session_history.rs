//! The model context rebuilt from session entries (R-IN-4, R-IDEM-1, R-IDEM-5, R-IDEM-7):
//! result placement in call order, duplicates and orphans left out, compaction, and the turn
//! counters used on resume.

use agentloop_core::session_log::{committed_turns, history, next_model_call_index};
use agentloop_core::{AssistantMessage, Entry, Message, ToolCall, ToolResult, ToolStatus};

fn user(run: &str, text: &str) -> Entry {
    Entry::UserInput {
        run_id: run.into(),
        message: Message::user(text),
    }
}

fn turn(run: &str, index: u32, text: &str, calls: &[&str]) -> Entry {
    Entry::Assistant {
        run_id: run.into(),
        model_call_index: index,
        message: assistant(text, calls),
    }
}

fn assistant(text: &str, calls: &[&str]) -> AssistantMessage {
    AssistantMessage {
        text: text.into(),
        tool_calls: calls
            .iter()
            .map(|id| ToolCall::from_raw(*id, "t", ""))
            .collect(),
        ..Default::default()
    }
}

fn tool_result(id: &str, content: &str) -> ToolResult {
    ToolResult {
        tool_call_id: id.into(),
        name: "t".into(),
        content: content.into(),
        status: ToolStatus::Completed,
    }
}

fn result(run: &str, id: &str) -> Entry {
    Entry::ToolResult {
        run_id: run.into(),
        result: tool_result(id, &format!("out-{id}")),
    }
}

/// A compact rendering of the context: `u:text`, `a:text`, `t:call id`.
fn shape(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .map(|m| match m {
            Message::System { content } => format!("s:{content}"),
            Message::User { content, .. } => format!("u:{content}"),
            Message::Assistant(a) => {
                let ids: Vec<_> = a.tool_calls.iter().map(|c| c.id.as_str()).collect();
                format!("a:{}[{}]", a.text, ids.join(","))
            }
            Message::Tool(r) => format!("t:{}", r.tool_call_id),
        })
        .collect()
}

#[test]
fn r_in_4_results_follow_their_call_in_call_order_whatever_the_persist_order() {
    let entries = vec![
        Entry::Metadata {
            model: "m".into(),
            config: serde_json::json!({}),
        },
        user("r1", "go"),
        turn("r1", 1, "one", &["c1", "c2", "c3"]),
        Entry::ToolStarted {
            run_id: "r1".into(),
            tool_call_id: "c3".into(),
            name: "t".into(),
        },
        result("r1", "c3"),
        result("r1", "c1"),
        result("r1", "c2"),
        turn("r1", 2, "done", &[]),
        Entry::RunEnd {
            run_id: "r1".into(),
            outcome: agentloop_core::Outcome::Completed,
            reason: "final_answer".into(),
        },
        Entry::Repair {
            run_id: "r1".into(),
            repairs: vec![],
        },
    ];
    let h = history(&entries);
    assert_eq!(
        shape(&h),
        [
            "u:go",
            "a:one[c1,c2,c3]",
            "t:c1",
            "t:c2",
            "t:c3",
            "a:done[]"
        ]
    );
    // The results themselves are kept intact.
    assert_eq!(h[2], Message::Tool(tool_result("c1", "out-c1")));
}

#[test]
fn r_in_4_a_late_result_goes_after_its_own_turn_not_the_latest() {
    let entries = vec![
        user("r1", "go"),
        turn("r1", 1, "one", &["c1"]),
        turn("r1", 2, "two", &["c2"]),
        result("r1", "c2"),
        result("r1", "c1"),
    ];
    assert_eq!(
        shape(&history(&entries)),
        ["u:go", "a:one[c1]", "t:c1", "a:two[c2]", "t:c2"]
    );
}

#[test]
fn r_idem_7_duplicates_and_orphans_are_left_out() {
    let mut dup_result = result("r1", "c1");
    if let Entry::ToolResult { result, .. } = &mut dup_result {
        result.content = "second".into();
    }
    let entries = vec![
        user("r1", "go"),
        result("r1", "c9"), // orphan: no call made it (yet)
        turn("r1", 1, "one", &["c1"]),
        turn("r1", 1, "one again", &["c1"]), // same key: skipped
        result("r1", "c1"),
        dup_result,                          // second result: skipped
        turn("r1", 2, "two", &["c1", "c2"]), // reuses c1: that call is dropped
        result("r1", "c2"),
    ];
    let h = history(&entries);
    assert_eq!(
        shape(&h),
        ["u:go", "a:one[c1]", "t:c1", "a:two[c2]", "t:c2"]
    );
    assert_eq!(h[2], Message::Tool(tool_result("c1", "out-c1")));
}

#[test]
fn r_idem_7_an_orphan_is_kept_once_its_call_appears() {
    // An orphan claims no key: a later real call's result still counts.
    let entries = vec![
        user("r1", "go"),
        result("r1", "c1"),
        turn("r1", 1, "one", &["c1"]),
        result("r1", "c1"),
    ];
    assert_eq!(shape(&history(&entries)), ["u:go", "a:one[c1]", "t:c1"]);
}

#[test]
fn r_out_4_a_compaction_replaces_everything_before_it() {
    let entries = vec![
        user("r1", "go"),
        turn("r1", 1, "one", &["c1"]),
        result("r1", "c1"),
        Entry::Compaction {
            run_id: "r1".into(),
            removed: 3,
            messages: vec![Message::user("summary")],
        },
        turn("r1", 2, "two", &[]),
        result("r1", "c1"), // its call was compacted away: left out
    ];
    assert_eq!(shape(&history(&entries)), ["u:summary", "a:two[]"]);
    assert!(history(&[]).is_empty());
}

#[test]
fn r_idem_5_turn_counters() {
    let entries = vec![
        user("r1", "go"),
        turn("r1", 1, "a", &[]),
        turn("r1", 2, "b", &[]),
        turn("r1", 2, "b again", &[]),
        turn("r2", 1, "c", &[]),
        turn("r2", 5, "d", &[]),
        user("r3", "new"),
    ];
    assert_eq!(committed_turns(&entries), 4);
    assert_eq!(committed_turns(&entries[..2]), 1);
    assert_eq!(committed_turns(&[]), 0);
    assert_eq!(next_model_call_index(&entries, "r1"), 3);
    assert_eq!(next_model_call_index(&entries, "r2"), 6);
    assert_eq!(next_model_call_index(&entries, "r3"), 1);
    assert_eq!(next_model_call_index(&[], "r1"), 1);
}

#[test]
fn r_idem_1_duplicate_keys_names_each_repeated_key_once() {
    use agentloop_core::session_log::duplicate_keys;
    use agentloop_core::EntryKey;
    let clean = vec![
        user("r", "hi"),
        turn("r", 1, "", &["c1", "c2"]),
        result("r", "c1"),
        result("r", "c2"),
    ];
    assert!(duplicate_keys(&clean).is_empty());
    let mut dup = clean.clone();
    dup.push(result("r", "c1"));
    dup.push(result("r", "c1"));
    dup.push(turn("r", 1, "again", &[]));
    assert_eq!(
        duplicate_keys(&dup),
        vec![
            EntryKey::ToolResult {
                tool_call_id: "c1".into()
            },
            EntryKey::Turn {
                run_id: "r".into(),
                model_call_index: 1
            },
        ],
        "a key stored three times is named once, in the order it became a duplicate"
    );
}
