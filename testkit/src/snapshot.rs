//! Compact, stable snapshots of traces for `insta` ([`assert_trace_snapshot!`](crate::assert_trace_snapshot)).
//!
//! A snapshot is the run's transcript ([`agentloop_trace_tools::transcript`]): one line per
//! meaningful record — a request, the committed text (deltas joined), a tool call with its
//! arguments and result, a retry, an approval, a compaction, the machines' state changes per
//! input, the end — with the tool schemas once (as argument lists) in the first lines. Run ids
//! become `run#1`, `run#2`, …, wall-clock fields are dropped, and the crate version and record
//! indexes are left out, so the snapshot changes only when behaviour does.

use std::collections::BTreeMap;

use agentloop_core::trace::Trace;
use agentloop_trace_tools::trace_diff::normalize;
use agentloop_trace_tools::transcript::{RenderOptions, Style, Transcript};

/// The snapshot text of `trace`.
pub fn render(trace: &Trace) -> String {
    let transcript = Transcript::from_trace(trace);
    // Normalize through JSON: run ids and clock fields wherever they appear.
    let normalized = serde_json::to_value(&transcript)
        .ok()
        .map(|mut v| {
            normalize(&mut v, &mut BTreeMap::new());
            v
        })
        .and_then(|v| serde_json::from_value::<Transcript>(v).ok())
        .unwrap_or(transcript);
    normalized.render(RenderOptions {
        style: Style::Text,
        states: true,
        indexes: false,
        schemas: false,
    })
}

/// Asserts an `insta` snapshot of a trace ([`render`]): `assert_trace_snapshot!(trace)` or,
/// named, `assert_trace_snapshot!("name", trace)`. `trace` is a `Trace` or a `&Trace`.
#[macro_export]
macro_rules! assert_trace_snapshot {
    ($trace:expr $(,)?) => {{
        let trace_snapshot = $crate::snapshot::render(&$trace);
        $crate::insta::assert_snapshot!(trace_snapshot)
    }};
    ($name:expr, $trace:expr $(,)?) => {{
        let trace_snapshot = $crate::snapshot::render(&$trace);
        $crate::insta::assert_snapshot!($name, trace_snapshot)
    }};
}
