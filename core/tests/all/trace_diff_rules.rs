//! The rules of comparing two traces: which fields are volatile (run ids, wall-clock readings),
//! how tool lists are shortened for display, and when two traces are equivalent.

use std::collections::BTreeMap;

use agentloop_core::Event;
use agentloop_trace_tools::trace_diff::{compact_tools, diff, normalize, DiffOptions};
use serde_json::json;

use crate::records::Records;

fn steer(text: &str) -> Event {
    Event::Steer { text: text.into() }
}

#[test]
fn normalize_numbers_run_ids_in_order_and_blanks_clock_fields() {
    let mut v = json!({
        "run_id": "zeta",
        "runs": [{"run_id": "alpha"}, {"run_id": "zeta"}, [{"run_id": "beta"}]],
        "clock": {
            "timestamp": 1, "ts": 2, "now_ms": 3, "wall_ms": 4, "elapsed_ms": 5,
            "started_at": "noon", "ended_at_ms": 6,
            "at": 7, "at_ms_total": 8, "delay_ms": 9, "format": "x", "run_ids": "kept"
        },
        "other": "kept"
    });
    let mut runs = BTreeMap::new();
    normalize(&mut v, &mut runs);
    assert_eq!(
        v,
        json!({
            "run_id": "run#1",
            "runs": [{"run_id": "run#2"}, {"run_id": "run#1"}, [{"run_id": "run#3"}]],
            "clock": {
                "timestamp": null, "ts": null, "now_ms": null, "wall_ms": null,
                "elapsed_ms": null, "started_at": null, "ended_at_ms": null,
                "at": 7, "at_ms_total": 8, "delay_ms": 9, "format": "x", "run_ids": "kept"
            },
            "other": "kept"
        })
    );
    // The map remembers the numbering for the next value (keys are visited in sorted order).
    assert_eq!(runs.get("zeta").map(String::as_str), Some("run#1"));
    let mut again = json!([{"run_id": "alpha"}, {"run_id": "new"}]);
    normalize(&mut again, &mut runs);
    assert_eq!(again, json!([{"run_id": "run#2"}, {"run_id": "run#4"}]));
}

#[test]
fn compact_tools_shortens_only_lists_of_tool_specs() {
    let spec = |name: &str| json!({"name": name, "description": "d", "parameters": {}});
    let mut v = json!({
        "request": {"tools": [spec("a"), spec("b")], "model": "m"},
        "steps": [{"tools": [spec("c")]}],
        "names_only": {"tools": [{"name": "x"}]},
        "mixed": {"tools": [spec("y"), {"name": "z"}]},
        "toolbox": [spec("w")],
        "empty": {"tools": []}
    });
    compact_tools(&mut v);
    assert_eq!(
        v,
        json!({
            "request": {"tools": ["a", "b"], "model": "m"},
            "steps": [{"tools": ["c"]}],
            "names_only": {"tools": [{"name": "x"}]},
            "mixed": {"tools": [spec("y"), {"name": "z"}]},
            "toolbox": [spec("w")],
            "empty": {"tools": []}
        })
    );
}

#[test]
fn equivalent_only_without_header_changes_and_without_a_divergent_record() {
    let a = Records::new("m", vec![]).input(steer("x")).trace;
    let same = diff(&a, &a.clone(), DiffOptions::default());
    assert!(same.is_equivalent(), "{same:?}");

    let other_model = Records::new("n", vec![]).input(steer("x")).trace;
    let d = diff(&a, &other_model, DiffOptions::default());
    assert_eq!(d.divergence, None);
    assert_eq!(d.header.len(), 1);
    assert_eq!(d.header[0].path, "config.model");
    assert!(!d.is_equivalent());

    let other_record = Records::new("m", vec![]).input(steer("y")).trace;
    let d = diff(&a, &other_record, DiffOptions::default());
    assert_eq!(d.header, []);
    assert_eq!(d.divergence.as_ref().map(|v| v.index_a), Some(Some(0)));
    assert!(!d.is_equivalent());
}

#[test]
fn a_trace_that_stops_early_diverges_where_it_has_no_record() {
    let short = Records::new("m", vec![]).input(steer("x")).trace;
    let long = Records::new("m", vec![])
        .input(steer("x"))
        .input(steer("y"))
        .trace;
    let d = diff(&short, &long, DiffOptions::default());
    let v = d.divergence.expect("a divergence");
    assert_eq!((v.index_a, v.index_b), (None, Some(1)));
    assert_eq!(v.a, None);
    assert_eq!(v.input_b, Some((1, "steer".into())));
    assert_eq!(d.records, (1, 2));
    let back = diff(&long, &short, DiffOptions::default())
        .divergence
        .expect("a divergence");
    assert_eq!((back.index_a, back.index_b), (Some(1), None));
}
