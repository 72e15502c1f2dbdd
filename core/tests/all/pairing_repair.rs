//! R-IDEM-7, pairing repair: `check` and `repair` agree (every violation `check` reports is one
//! `repair` settles, and after it `check` reports nothing), a clean session needs no repair,
//! and `history` never holds an orphan or duplicate tool result.

use agentloop_core::entry::{Entry, Repair};
use agentloop_core::message::{AssistantMessage, Message, ToolCall, ToolResult, ToolStatus};
use agentloop_core::session_log::{
    check, history, pending, repair, repair_with, Repaired, Violation,
};
use proptest::prelude::*;
use serde_json::json;

fn user(run: &str, text: &str) -> Entry {
    Entry::UserInput {
        run_id: run.into(),
        message: Message::user(text),
    }
}

fn assistant(run: &str, index: u32, calls: &[&str]) -> Entry {
    Entry::Assistant {
        run_id: run.into(),
        model_call_index: index,
        message: AssistantMessage {
            text: format!("step {index}"),
            tool_calls: calls
                .iter()
                .map(|id| ToolCall {
                    id: (*id).into(),
                    name: "t".into(),
                    arguments: json!({}),
                    invalid_arguments: None,
                })
                .collect(),
            ..Default::default()
        },
    }
}

fn started(run: &str, id: &str) -> Entry {
    Entry::ToolStarted {
        run_id: run.into(),
        tool_call_id: id.into(),
        name: "t".into(),
    }
}

fn result(run: &str, id: &str) -> Entry {
    Entry::ToolResult {
        run_id: run.into(),
        result: ToolResult {
            tool_call_id: id.into(),
            name: "t".into(),
            content: format!("result of {id}"),
            status: ToolStatus::Completed,
        },
    }
}

fn run_end(run: &str) -> Entry {
    Entry::RunEnd {
        run_id: run.into(),
        outcome: agentloop_core::Outcome::Completed,
        reason: "final_answer".into(),
    }
}

/// A finished session: one tool call and its result, then the answer.
fn clean() -> Vec<Entry> {
    vec![
        user("r1", "go"),
        assistant("r1", 1, &["c1"]),
        started("r1", "c1"),
        result("r1", "c1"),
        assistant("r1", 2, &[]),
        run_end("r1"),
    ]
}

/// `entries` followed by everything `repair` appends, the marker written by run `run_id`.
fn repaired(entries: &[Entry], run_id: &str) -> Vec<Entry> {
    let mut all = entries.to_vec();
    all.extend(repair(entries).into_entries(run_id));
    all
}

fn tool_ids(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r.tool_call_id.clone()),
            _ => None,
        })
        .collect()
}

/// The pairing of a model context: every tool message directly follows (among tool messages)
/// the assistant message that made its call, and no call is answered twice. Returns the ids
/// of calls without a result.
fn assert_paired(messages: &[Message]) -> Vec<String> {
    let mut unanswered = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        match &messages[i] {
            Message::Tool(r) => panic!(
                "tool result {} does not follow its call: {messages:?}",
                r.tool_call_id
            ),
            Message::Assistant(a) => {
                let mut answered: Vec<&str> = Vec::new();
                i += 1;
                while let Some(Message::Tool(r)) = messages.get(i) {
                    assert!(
                        a.tool_calls.iter().any(|c| c.id == r.tool_call_id),
                        "orphan tool result {} in the context: {messages:?}",
                        r.tool_call_id
                    );
                    assert!(
                        !answered.contains(&r.tool_call_id.as_str()),
                        "tool call {} answered twice: {messages:?}",
                        r.tool_call_id
                    );
                    answered.push(&r.tool_call_id);
                    i += 1;
                }
                unanswered.extend(
                    a.tool_calls
                        .iter()
                        .filter(|c| !answered.contains(&c.id.as_str()))
                        .map(|c| c.id.clone()),
                );
            }
            _ => i += 1,
        }
    }
    unanswered
}

#[test]
fn r_idem_7_clean_session_needs_no_repair() {
    let entries = clean();
    assert_eq!(check(&entries), []);
    let r = repair(&entries);
    assert!(r.is_empty(), "{r:?}");
    assert_eq!(r.repairs, []);
    assert_eq!(
        r.into_entries("r2"),
        [],
        "no marker when nothing was repaired"
    );
    assert_eq!(assert_paired(&history(&entries)), Vec::<String>::new());
}

/// R-IDEM-7, R-IDEM-5: a call without a result is still pending only while its run is; once
/// that run has ended, the missing result is a violation (and resume has nothing to settle).
/// Another run's late result does not end it.
#[test]
fn r_idem_7_a_call_left_open_by_an_ended_run_is_missing_not_pending() {
    let open = vec![
        user("r1", "go"),
        assistant("r1", 1, &["c1", "c2"]),
        started("r1", "c1"),
        result("r2", "c2"),
    ];
    assert_eq!(check(&open), []);
    assert_eq!(
        pending(&open)
            .iter()
            .map(|p| (p.tool_call_id.as_str(), p.started))
            .collect::<Vec<_>>(),
        [("c1", true)]
    );
    let mut ended = open.clone();
    ended.push(run_end("r1"));
    assert_eq!(
        check(&ended),
        [Violation::MissingToolResult {
            index: 1,
            run_id: "r1".into(),
            model_call_index: 1,
            tool_call_id: "c1".into(),
            name: "t".into(),
        }]
    );
    assert_eq!(pending(&ended), []);
    // Another run taking a turn (here its user input) ends it too.
    let mut overtaken = open.clone();
    overtaken.push(user("r2", "next"));
    assert_eq!(check(&overtaken), check(&ended));
    assert_eq!(pending(&overtaken), []);
}

#[test]
fn r_idem_7_orphan_result_is_flagged_dropped_from_history_and_recorded() {
    let mut entries = clean();
    entries.push(result("forged", "ghost")); // 6: no turn made "ghost"
    assert_eq!(
        check(&entries),
        [Violation::OrphanToolResult {
            index: 6,
            tool_call_id: "ghost".into()
        }]
    );
    // `sessions check` prints each violation with its entry's position.
    assert_eq!(
        check(&entries)[0].to_string(),
        "entry 6: result for tool call ghost, which no earlier turn made"
    );
    // The context never holds it, even before the repair.
    let h = history(&entries);
    assert_eq!(tool_ids(&h), ["c1"]);
    assert_paired(&h);

    let r = repair(&entries);
    assert_eq!(
        r.repairs,
        [Repair::OrphanResultDropped {
            index: 6,
            tool_call_id: "ghost".into()
        }]
    );
    assert_eq!(r.entries, [], "a drop appends nothing but the marker");
    assert!(!r.is_empty(), "a repair without entries is still a repair");
    let mut gathered = Repaired::default();
    gathered.extend(r.clone());
    assert_eq!(gathered, r, "extending an empty repair gives the other");
    let after = repaired(&entries, "r2");
    assert_eq!(
        after.last(),
        Some(&Entry::Repair {
            run_id: "r2".into(),
            repairs: r.repairs.clone()
        })
    );
    assert_eq!(check(&after), []);
    assert!(repair(&after).is_empty(), "a repair is applied once");
    assert_eq!(history(&after), h, "the marker changes no message");
}

#[test]
fn r_idem_7_duplicate_result_is_flagged_and_recorded_the_first_one_counts() {
    let mut entries = clean();
    let mut second = result("r1", "c1");
    if let Entry::ToolResult { result, .. } = &mut second {
        result.content = "a second, different result".into();
    }
    entries.insert(4, second); // 4: second result for c1
    assert_eq!(
        check(&entries),
        [Violation::DuplicateToolResult {
            index: 4,
            tool_call_id: "c1".into()
        }]
    );
    let h = history(&entries);
    assert!(
        matches!(&h[2], Message::Tool(r) if r.content == "result of c1"),
        "{h:?}"
    );
    assert_eq!(tool_ids(&h), ["c1"]);
    let r = repair(&entries);
    assert_eq!(
        r.repairs,
        [Repair::DuplicateResultDropped {
            index: 4,
            tool_call_id: "c1".into()
        }]
    );
    assert_eq!(check(&repaired(&entries, "r2")), []);
}

#[test]
fn r_idem_7_a_marker_settles_only_the_entries_it_names() {
    let mut entries = clean();
    entries.push(result("forged", "ghost")); // 6
                                             // A marker for another position, and one naming an entry after itself, settle nothing.
    entries.push(Entry::Repair {
        run_id: "r2".into(),
        repairs: vec![
            Repair::OrphanResultDropped {
                index: 5,
                tool_call_id: "ghost".into(),
            },
            Repair::OrphanResultDropped {
                index: 8,
                tool_call_id: "late".into(),
            },
        ],
    });
    entries.push(result("forged", "late")); // 8
    assert_eq!(
        check(&entries)
            .iter()
            .map(Violation::index)
            .collect::<Vec<_>>(),
        [6, 8]
    );
    assert_eq!(check(&repaired(&entries, "r3")), []);
}

#[test]
fn r_idem_7_every_violation_kind_is_repaired_and_check_then_passes() {
    let entries = vec![
        user("r1", "go"),
        started("r1", "ghost"),          // 1 orphan start
        assistant("r1", 1, &["a", "b"]), // 2: b never answered
        result("r1", "a"),
        started("r1", "a"),         // 4 started after result
        started("r1", "a"),         // 5 duplicate start
        result("r1", "a"),          // 6 duplicate result
        result("r1", "nobody"),     // 7 orphan result
        assistant("r1", 1, &[]),    // 8 duplicate turn
        assistant("r1", 2, &["a"]), // 9 reused call id
        run_end("r1"),
    ];
    let violations = check(&entries);
    assert_eq!(violations.len(), 8, "{violations:?}");
    let r = repair(&entries);
    for v in &violations {
        let settled = match v {
            Violation::MissingToolResult { tool_call_id, .. } => r.repairs.iter().any(|x| {
                matches!(x, Repair::MissingResultFilled { tool_call_id: id, status, .. }
                    if id == tool_call_id && *status == ToolStatus::Aborted)
            }),
            other => other
                .drop_repair()
                .is_some_and(|drop| r.repairs.contains(&drop)),
        };
        assert!(settled, "{v} is not repaired by {:?}", r.repairs);
    }
    assert_eq!(r.repairs.len(), violations.len());
    let after = repaired(&entries, "r2");
    assert_eq!(check(&after), []);
    assert!(repair(&after).is_empty());
    let h = history(&after);
    assert_eq!(assert_paired(&h), Vec::<String>::new());
    assert_eq!(tool_ids(&h), ["a", "b"]);
    // The reused id is left out of the second message, not the first.
    assert!(
        matches!(&h.last(), Some(Message::Assistant(m)) if m.text == "step 2" && m.tool_calls.is_empty()),
        "{h:?}"
    );
    for repair in &r.repairs {
        assert!(repair.to_string().starts_with("entry "), "{repair}");
    }
}

#[test]
fn r_idem_7_repair_serializes_as_snake_case_kinds() {
    let r = Repair::OrphanResultDropped {
        index: 6,
        tool_call_id: "ghost".into(),
    };
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        json!({"kind": "orphan_result_dropped", "index": 6, "tool_call_id": "ghost"})
    );
    assert_eq!(r.kind(), "orphan_result_dropped");
    let marker = Entry::Repair {
        run_id: "r2".into(),
        repairs: vec![r],
    };
    let v = serde_json::to_value(&marker).unwrap();
    assert_eq!(v["entry"], "repair");
    assert_eq!(serde_json::from_value::<Entry>(v).unwrap(), marker);
}

// ---------------------------------------------------------------------------------------
// Random logs: check and repair agree on every one.

#[derive(Clone, Debug)]
enum Op {
    User(u8),
    Assistant(u8, u8, Vec<u8>),
    Started(u8, u8),
    Result(u8, u8),
    RunEnd(u8),
}

fn op() -> impl Strategy<Value = Op> {
    let run = 0u8..2;
    let id = 0u8..5;
    prop_oneof![
        1 => run.clone().prop_map(Op::User),
        3 => (run.clone(), 1u8..4, proptest::collection::vec(id.clone(), 0..3))
            .prop_map(|(r, i, c)| Op::Assistant(r, i, c)),
        2 => (run.clone(), id.clone()).prop_map(|(r, i)| Op::Started(r, i)),
        3 => (run.clone(), id).prop_map(|(r, i)| Op::Result(r, i)),
        1 => run.prop_map(Op::RunEnd),
    ]
}

fn entries_of(ops: &[Op]) -> Vec<Entry> {
    let run = |r: &u8| format!("r{r}");
    let id = |i: &u8| format!("c{i}");
    ops.iter()
        .map(|op| match op {
            Op::User(r) => user(&run(r), "go"),
            Op::Assistant(r, i, calls) => {
                let calls: Vec<String> = calls.iter().map(id).collect();
                let calls: Vec<&str> = calls.iter().map(String::as_str).collect();
                assistant(&run(r), u32::from(*i), &calls)
            }
            Op::Started(r, i) => started(&run(r), &id(i)),
            Op::Result(r, i) => result(&run(r), &id(i)),
            Op::RunEnd(r) => run_end(&run(r)),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn r_idem_7_check_and_repair_agree_on_random_logs(
        ops in proptest::collection::vec(op(), 0..24),
        retry_safe in any::<bool>(),
    ) {
        let entries = entries_of(&ops);
        let violations = check(&entries);
        let r = repair_with(&entries, |_| retry_safe);
        // Every violation is settled by the repair.
        for v in &violations {
            let settled = match v {
                Violation::MissingToolResult { tool_call_id, .. } => r.repairs.iter().any(|x| {
                    matches!(x, Repair::MissingResultFilled { tool_call_id: id, .. } if id == tool_call_id)
                }),
                other => other.drop_repair().is_some_and(|drop| r.repairs.contains(&drop)),
            };
            prop_assert!(settled, "{} is not repaired by {:?}", v, r.repairs);
        }
        // ... and repairs nothing else: one drop per dropped entry, fills only for calls
        // without a result.
        let drops = r.repairs.iter().filter(|x| !matches!(x, Repair::MissingResultFilled { .. })).count();
        let missing = violations.iter().filter(|v| matches!(v, Violation::MissingToolResult { .. })).count();
        prop_assert_eq!(drops, violations.len() - missing);
        prop_assert_eq!(r.entries.len(), r.repairs.len() - drops);

        // The resume applies it under the run of the last entry (the still-running one, if any).
        let run_id = entries.iter().rev().find_map(Entry::run_id).unwrap_or("r9").to_string();
        let mut after = entries.clone();
        after.extend(r.clone().into_entries(&run_id));
        prop_assert_eq!(check(&after), vec![]);
        prop_assert!(repair_with(&after, |_| retry_safe).is_empty());

        // The context never holds an orphan or a second result; after the repair only calls
        // still pending (left for resume to run) lack a result.
        assert_paired(&history(&entries));
        let left = assert_paired(&history(&after));
        let still_pending: Vec<String> = pending(&after).into_iter().map(|c| c.tool_call_id).collect();
        for id in &left {
            prop_assert!(still_pending.contains(id), "{} has no result and is not pending", id);
        }
    }
}
