//! The pure-tool result cache's own rules (R-TOOL-6): only completed results of
//! well-formed calls, identical means same name and same canonical arguments, newer replaces
//! older, and both bounds (entries, bytes) hold with the oldest leaving first.

use agentloop_core::tool_cache::ToolCache;
use agentloop_core::{AssistantMessage, Message, ToolCall, ToolResult, ToolStatus};

fn call(id: &str, name: &str, args: &str) -> ToolCall {
    ToolCall::from_raw(id, name, args)
}

fn result(c: &ToolCall, content: &str, status: ToolStatus) -> ToolResult {
    ToolResult {
        tool_call_id: c.id.clone(),
        name: c.name.clone(),
        content: content.into(),
        status,
    }
}

#[test]
fn r_tool_6_identical_means_same_name_and_canonical_arguments() {
    let mut cache = ToolCache::default();
    let c1 = call("c1", "calc", r#"{"a":1,"b":2}"#);
    cache.insert(&c1, &result(&c1, "3", ToolStatus::Completed));
    let hit = cache.get(&call("c2", "calc", r#"{ "b": 2, "a": 1 }"#));
    assert_eq!(
        hit.map(|h| (h.tool_call_id.as_str(), h.content.as_str())),
        Some(("c1", "3"))
    );
    assert!(cache.get(&call("c3", "calc", r#"{"a":1,"b":3}"#)).is_none());
    assert!(cache
        .get(&call("c4", "other", r#"{"a":1,"b":2}"#))
        .is_none());
}

#[test]
fn r_tool_6_only_completed_results_of_valid_calls_are_cached() {
    let mut cache = ToolCache::default();
    for status in [ToolStatus::Error, ToolStatus::Denied, ToolStatus::Skipped] {
        let c = call("c1", "calc", "{}");
        cache.insert(&c, &result(&c, "x", status));
    }
    let bad = call("c2", "calc", "{not json");
    cache.insert(&bad, &result(&bad, "x", ToolStatus::Completed));
    assert!(cache.is_empty());
}

#[test]
fn r_tool_6_a_newer_result_replaces_the_older() {
    let mut cache = ToolCache::default();
    let c1 = call("c1", "calc", "{}");
    let c2 = call("c2", "calc", "{}");
    cache.insert(&c1, &result(&c1, "old", ToolStatus::Completed));
    cache.insert(&c2, &result(&c2, "new", ToolStatus::Completed));
    assert_eq!(cache.len(), 1);
    assert_eq!(cache.get(&c1).map(|h| h.tool_call_id.as_str()), Some("c2"));
}

#[test]
fn r_tool_6_the_cache_is_bounded_and_the_oldest_leave_first() {
    let mut cache = ToolCache::default();
    let n = ToolCache::MAX_ENTRIES + 10;
    for i in 0..n {
        let c = call(&format!("c{i}"), "calc", &format!(r#"{{"i":{i}}}"#));
        cache.insert(&c, &result(&c, "r", ToolStatus::Completed));
    }
    assert_eq!(cache.len(), ToolCache::MAX_ENTRIES);
    assert!(cache.get(&call("x", "calc", r#"{"i":0}"#)).is_none());
    assert!(cache
        .get(&call("x", "calc", &format!(r#"{{"i":{}}}"#, n - 1)))
        .is_some());
    // Bytes: two results of more than half the bound cannot both stay.
    let big = "x".repeat(ToolCache::MAX_BYTES / 2 + 1);
    let a = call("a", "calc", r#"{"big":1}"#);
    let b = call("b", "calc", r#"{"big":2}"#);
    cache.insert(&a, &result(&a, &big, ToolStatus::Completed));
    cache.insert(&b, &result(&b, &big, ToolStatus::Completed));
    assert!(cache.get(&a).is_none());
    assert!(cache.get(&b).is_some());
    // A result larger than the whole cache is not taken (and evicts nothing).
    let huge = call("h", "calc", r#"{"huge":1}"#);
    let before = cache.len();
    cache.insert(
        &huge,
        &result(
            &huge,
            &"y".repeat(ToolCache::MAX_BYTES + 1),
            ToolStatus::Completed,
        ),
    );
    assert!(cache.get(&huge).is_none());
    assert_eq!(cache.len(), before);
}

/// R-TOOL-6: `set_pure` keeps the pure tools sorted and without duplicates, and marking a tool
/// not pure any more removes it (a tool that stopped declaring itself pure must not be
/// answered from the cache).
#[test]
fn r_tool_6_set_pure_adds_and_removes_keeping_the_list_sorted() {
    let mut cfg = agentloop_core::process::StepConfig::default();
    for tool in ["ls", "calc", "ls", "grep"] {
        cfg.set_pure(tool, true);
    }
    assert_eq!(cfg.pure_tools, ["calc", "grep", "ls"]);
    assert!(cfg.is_pure("grep") && !cfg.is_pure("cat"));
    cfg.set_pure("grep", false);
    cfg.set_pure("cat", false);
    assert_eq!(cfg.pure_tools, ["calc", "ls"]);
    assert!(!cfg.is_pure("grep"));
}

#[test]
fn r_tool_6_fill_from_pairs_results_with_the_pure_calls_of_their_message() {
    let mut pure = agentloop_core::process::StepConfig::default();
    pure.set_pure("calc", true);
    let c1 = call("c1", "calc", r#"{"x":1}"#);
    let l1 = call("l1", "ls", "{}");
    let history = vec![
        Message::user("hi"),
        Message::Assistant(AssistantMessage {
            tool_calls: vec![c1.clone(), l1.clone()],
            ..AssistantMessage::default()
        }),
        Message::Tool(result(&c1, "1", ToolStatus::Completed)),
        Message::Tool(result(&l1, "files", ToolStatus::Completed)),
        // A result whose call is not in the message before it is ignored.
        Message::Tool(result(
            &call("zz", "calc", r#"{"x":9}"#),
            "9",
            ToolStatus::Completed,
        )),
    ];
    let mut cache = ToolCache::default();
    cache.fill_from(|tool| pure.is_pure(tool), &history);
    assert_eq!(cache.len(), 1);
    assert!(cache.get(&call("n", "calc", r#"{"x":1}"#)).is_some());
    assert!(cache.get(&call("n", "ls", "{}")).is_none());
    let mut none = ToolCache::default();
    let nothing_pure = agentloop_core::process::StepConfig::default();
    none.fill_from(|tool| nothing_pure.is_pure(tool), &history);
    assert!(none.is_empty());
}

/// The cache against a reference model, on sequences of inserts whose sizes sit on the byte
/// bound's edges: which calls are cached, as which call, and how many, after every insert.
mod against_a_model {
    use super::{call, result};
    use agentloop_core::tool_cache::ToolCache;
    use agentloop_core::ToolStatus;
    use proptest::prelude::*;

    const MAX: usize = ToolCache::MAX_BYTES;
    const SIZES: [usize; 9] = [
        0,
        1,
        MAX / 3,
        MAX / 2 - 1,
        MAX / 2,
        MAX / 2 + 1,
        MAX - 1,
        MAX,
        MAX + 1,
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn r_tool_6_the_cache_keeps_what_the_reference_keeps(
            ops in prop::collection::vec((0..4usize, 0..SIZES.len()), 1..14),
        ) {
            static CONTENTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
            let contents = CONTENTS.get_or_init(|| SIZES.iter().map(|n| "x".repeat(*n)).collect());
            let mut cache = ToolCache::default();
            // The reference: (key, call id, bytes), oldest first.
            let mut model: Vec<(usize, String, usize)> = Vec::new();
            for (i, (key, size)) in ops.into_iter().enumerate() {
                let id = format!("c{i}");
                let c = call(&id, "calc", &format!(r#"{{"k":{key}}}"#));
                cache.insert(&c, &result(&c, &contents[size], ToolStatus::Completed));
                let bytes = SIZES[size];
                if bytes <= MAX {
                    model.retain(|(k, _, _)| *k != key);
                    model.push((key, id, bytes));
                    while model.len() > ToolCache::MAX_ENTRIES
                        || model.iter().map(|(_, _, b)| b).sum::<usize>() > MAX
                    {
                        model.remove(0);
                    }
                }
                prop_assert_eq!(cache.len(), model.len());
                prop_assert_eq!(cache.is_empty(), model.is_empty());
                for k in 0..4 {
                    let want = model.iter().find(|(m, _, _)| *m == k).map(|(_, id, _)| id.as_str());
                    let got = cache.get(&call("q", "calc", &format!(r#"{{"k":{k}}}"#)));
                    prop_assert_eq!(got.map(|h| h.tool_call_id.as_str()), want, "key {}", k);
                }
            }
        }
    }
}
