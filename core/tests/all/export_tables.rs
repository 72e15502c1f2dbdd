//! The export tables (`agentloop trace export`) of the fixture traces, checked against the
//! transcript of the same trace and against the trace's records.

use agentloop_core::trace::TraceRecord;
use agentloop_trace_tools::export::{columns, rows, Table, Timing};
use agentloop_trace_tools::transcript::Transcript;
use serde_json::{json, Value};

use crate::trace_tools::fixture;

/// The column `name` of `row` in `table`.
fn col<'a>(table: Table, row: &'a [Value], name: &str) -> &'a Value {
    let i = columns(table)
        .iter()
        .position(|c| *c == name)
        .unwrap_or_else(|| panic!("no column {name} in {table:?}"));
    &row[i]
}

#[test]
fn the_runs_row_counts_what_the_transcript_summary_counts() {
    for (name, retries) in [("v4-retry-tool.jsonl", 2), ("v4-calc.jsonl", 0)] {
        let trace = fixture(name);
        let summary = Transcript::from_trace(&trace).summary;
        let runs = rows(&trace, name, Table::Runs, &Timing::default());
        assert_eq!(runs.len(), 1, "{name}");
        let run = &runs[0];
        assert_eq!(summary.retries, retries, "{name}");
        let usage = summary.usage.expect("usage reported");
        for (column, want) in [
            ("steps", json!(summary.steps)),
            ("tool_calls", json!(summary.tool_calls)),
            ("retries", json!(summary.retries)),
            ("tokens_in", json!(usage.input_tokens)),
            ("tokens_out", json!(usage.output_tokens)),
            ("outcome", json!("completed")),
        ] {
            assert_eq!(col(Table::Runs, run, column), &want, "{name}: {column}");
        }
        assert_eq!(col(Table::Runs, run, "steps"), &json!(2), "{name}");
        assert_eq!(col(Table::Runs, run, "latency_ms"), &Value::Null);
    }
}

#[test]
fn steps_and_tool_calls_have_a_row_each_and_events_one_per_record() {
    let trace = fixture("v4-retry-tool.jsonl");
    let steps = rows(&trace, "t", Table::Steps, &Timing::default());
    let numbers: Vec<&Value> = steps.iter().map(|r| col(Table::Steps, r, "step")).collect();
    assert_eq!(numbers, [&json!(1), &json!(2)]);
    let reasons: Vec<&Value> = steps
        .iter()
        .map(|r| col(Table::Steps, r, "finish_reason"))
        .collect();
    assert_eq!(reasons, [&json!("tool_calls"), &json!("stop")]);
    let tokens_in: u64 = steps
        .iter()
        .filter_map(|r| col(Table::Steps, r, "tokens_in").as_u64())
        .sum();
    let runs = rows(&trace, "t", Table::Runs, &Timing::default());
    assert_eq!(&json!(tokens_in), col(Table::Runs, &runs[0], "tokens_in"));

    let calls = rows(&trace, "t", Table::ToolCalls, &Timing::default());
    assert_eq!(calls.len(), 1);
    assert_eq!(col(Table::ToolCalls, &calls[0], "tool"), "calculator");
    assert_eq!(col(Table::ToolCalls, &calls[0], "step"), &json!(1));
    assert_eq!(col(Table::ToolCalls, &calls[0], "result"), "42");

    let events = rows(&trace, "t", Table::Events, &Timing::default());
    let records: Vec<&TraceRecord> = trace
        .records
        .iter()
        .filter(|r| !matches!(r, TraceRecord::Header(_)))
        .collect();
    assert_eq!(events.len(), records.len());
    for (row, record) in events.iter().zip(&records) {
        let kind = match record {
            TraceRecord::Input { .. } => "input",
            TraceRecord::Transition { .. } => "transition",
            TraceRecord::Effect { .. } => "effect",
            TraceRecord::Header(_) => unreachable!("filtered out"),
        };
        assert_eq!(col(Table::Events, row, "kind"), kind);
        assert_eq!(row.len(), columns(Table::Events).len());
    }
    assert_eq!(col(Table::Events, &events[0], "name"), "start");
    assert_eq!(col(Table::Events, &events[1], "detail"), "Init -> Planning");
}
