//! Comparing two traces (`agentloop trace diff`): the header's configuration field by field,
//! then the records in order up to the first divergence, with the input that led to it, and a
//! summary of each side. Volatile fields — run ids, the backoff jitter's seed (drawn from the
//! same ids port), wall-clock fields, the writing crate's version — are normalized away unless
//! the comparison is strict.

use std::collections::BTreeMap;

use serde_json::Value;

use agentloop_core::trace::{Trace, TraceRecord};

use crate::transcript::{Summary, Transcript};

/// How [`diff`] compares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiffOptions {
    /// Compare volatile fields too (run ids, wall-clock fields, the crate version).
    pub strict: bool,
}

/// A header field that differs.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldChange {
    /// JSON path, e.g. `config.max_steps`.
    pub path: String,
    /// The value in the first trace (`None`: absent).
    pub a: Option<Value>,
    /// The value in the second trace.
    pub b: Option<Value>,
}

/// The first record where two traces differ.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordDivergence {
    /// Its index in the first trace (`None`: the first trace has no record there).
    pub index_a: Option<u64>,
    /// Its index in the second trace.
    pub index_b: Option<u64>,
    /// The input whose step holds the divergence in the first trace: index and event name.
    pub input_a: Option<(u64, String)>,
    /// The same in the second trace.
    pub input_b: Option<(u64, String)>,
    /// The first trace's record.
    pub a: Option<TraceRecord>,
    /// The second trace's record.
    pub b: Option<TraceRecord>,
    /// A unified diff of the two records (normalized unless strict), pretty-printed.
    pub diff: String,
}

/// The result of comparing two traces.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceDiff {
    /// Header fields that differ.
    pub header: Vec<FieldChange>,
    /// The first differing record, if any.
    pub divergence: Option<RecordDivergence>,
    /// Number of records in each trace.
    pub records: (usize, usize),
    /// The first trace's summary.
    pub a: Summary,
    /// The second trace's summary.
    pub b: Summary,
}

impl TraceDiff {
    /// Whether the traces are equivalent (under the options they were compared with).
    pub fn is_equivalent(&self) -> bool {
        self.header.is_empty() && self.divergence.is_none()
    }
}

/// Keys whose values are wall-clock readings (never compared unless strict).
fn is_clock_key(key: &str) -> bool {
    matches!(
        key,
        "timestamp" | "ts" | "now_ms" | "wall_ms" | "elapsed_ms"
    ) || key.ends_with("_at")
        || key.ends_with("_at_ms")
}

/// Replaces volatile values in `v`: each distinct run id by `run#N` (in order of first
/// appearance, remembered in `runs`), wall-clock fields and the jitter seed by `null`. (A run
/// that retried with another seed still differs: in its retries' delays.)
pub fn normalize(v: &mut Value, runs: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(map) => {
            for (k, x) in map.iter_mut() {
                if k == "run_id" {
                    if let Value::String(id) = x {
                        let n = runs.len() + 1;
                        *id = runs
                            .entry(id.clone())
                            .or_insert_with(|| format!("run#{n}"))
                            .clone();
                    }
                } else if is_clock_key(k) || k == "jitter_seed" {
                    *x = Value::Null;
                } else {
                    normalize(x, runs);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|x| normalize(x, runs)),
        _ => {}
    }
}

/// For display: each tool list (`"tools": [{name, description, parameters}, ..]`) becomes the
/// list of its names, so a diff of a model request shows what changed, not every schema.
pub fn compact_tools(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, x) in map.iter_mut() {
                let specs = k == "tools"
                    && x.as_array().is_some_and(|a| {
                        a.iter()
                            .all(|t| t.get("name").is_some() && t.get("parameters").is_some())
                    });
                if specs {
                    if let Value::Array(a) = x {
                        for t in a.iter_mut() {
                            *t = t.get("name").cloned().unwrap_or(Value::Null);
                        }
                    }
                } else {
                    compact_tools(x);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(compact_tools),
        _ => {}
    }
}

/// A unified diff of two records for people: tool lists shortened to names
/// ([`compact_tools`]), then [`json_diff`].
pub fn record_diff(a: Option<&Value>, b: Option<&Value>, names: (&str, &str)) -> String {
    let compact = |v: Option<&Value>| {
        v.cloned().map(|mut v| {
            compact_tools(&mut v);
            v
        })
    };
    json_diff(compact(a).as_ref(), compact(b).as_ref(), names)
}

/// The trace's records as JSON values, normalized unless `strict`.
fn values(trace: &Trace, strict: bool) -> Vec<Value> {
    let mut runs = BTreeMap::new();
    trace
        .records
        .iter()
        .map(|r| {
            let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
            if !strict {
                normalize(&mut v, &mut runs);
            }
            v
        })
        .collect()
}

fn header_value(trace: &Trace, strict: bool) -> Value {
    let mut v = serde_json::to_value(&trace.header).unwrap_or(Value::Null);
    if !strict {
        if let Value::Object(map) = &mut v {
            map.remove("agentloop");
        }
        normalize(&mut v, &mut BTreeMap::new());
    }
    v
}

/// The leaf paths where `a` and `b` differ.
pub fn changed_paths(a: Option<&Value>, b: Option<&Value>, path: &str, out: &mut Vec<FieldChange>) {
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                changed_paths(x.get(k), y.get(k), &p, out);
            }
        }
        (a, b) if a != b => out.push(FieldChange {
            path: path.to_string(),
            a: a.cloned(),
            b: b.cloned(),
        }),
        _ => {}
    }
}

/// The last input at or before `index`: its index and event name.
pub fn input_before(trace: &Trace, index: usize) -> Option<(u64, String)> {
    trace
        .records
        .get(..=index.min(trace.records.len().saturating_sub(1)))?
        .iter()
        .rev()
        .find_map(|r| match r {
            TraceRecord::Input { index, event } => Some((*index, event.name().to_string())),
            _ => None,
        })
}

/// A unified diff of two JSON values, pretty-printed (`<none>` for a missing one).
pub fn json_diff(a: Option<&Value>, b: Option<&Value>, names: (&str, &str)) -> String {
    let pretty = |v: Option<&Value>| {
        v.map(|v| serde_json::to_string_pretty(v).unwrap_or_default())
            .unwrap_or_else(|| "<none>".into())
            + "\n"
    };
    let (a, b) = (pretty(a), pretty(b));
    similar::TextDiff::from_lines(&a, &b)
        .unified_diff()
        .header(names.0, names.1)
        .to_string()
}

/// Compares two traces.
pub fn diff(a: &Trace, b: &Trace, options: DiffOptions) -> TraceDiff {
    let mut header = Vec::new();
    let (ha, hb) = (
        header_value(a, options.strict),
        header_value(b, options.strict),
    );
    changed_paths(Some(&ha), Some(&hb), "", &mut header);
    let (va, vb) = (values(a, options.strict), values(b, options.strict));
    let n = va.len().max(vb.len());
    let divergence = (0..n)
        .find(|&i| va.get(i) != vb.get(i))
        .map(|i| RecordDivergence {
            index_a: (i < va.len()).then_some(i as u64),
            index_b: (i < vb.len()).then_some(i as u64),
            input_a: input_before(a, i),
            input_b: input_before(b, i),
            a: a.records.get(i).cloned(),
            b: b.records.get(i).cloned(),
            diff: record_diff(va.get(i), vb.get(i), ("a", "b")),
        });
    TraceDiff {
        header,
        divergence,
        records: (a.records.len(), b.records.len()),
        a: Transcript::from_trace(a).summary,
        b: Transcript::from_trace(b).summary,
    }
}
