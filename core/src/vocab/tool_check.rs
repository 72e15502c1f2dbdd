//! Checks on a tool call before it runs (R-TOOL-1): the runtime's verdict on a call's arguments
//! against the tool's JSON Schema, carried as data of the `done` input event so the machine
//! decides on it (row `commit_schema_invalid`) and a replay needs no validator; and the error
//! texts the model sees for a rejected call or an unknown tool name, with the near-match
//! suggestion ("unknown tool: read-file; did you mean read_file?"); and a tool rule's
//! [`RuleAction`] (R-TOOL-3), the verdict the `tool_rule_matched` event reports (the rules
//! themselves are policy, [`tool_rules`](crate::tool_rules)).
//!
//! Everything here is pure: the validator lives in the runtime (`agentloop::tools`), which
//! compiles each tool's schema once and reports violations through [`ArgumentsRejected::new`].

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// At most this many violations are kept per call (the rest are counted in
/// [`ArgumentsRejected::omitted`]): enough for the model to repair the call, bounded for the
/// trace and the context.
pub const MAX_VIOLATIONS: usize = 5;

/// A violation's path and reason are each cut to this many characters.
pub const MAX_VIOLATION_CHARS: usize = 160;

/// One way the arguments break the schema.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SchemaViolation {
    /// Where in the arguments: a JSON Pointer (`/n`, `/items/0`; empty for the whole object).
    pub path: String,
    /// What is wrong there, as the validator words it (`"abc" is not of type "integer"`).
    pub reason: String,
}

/// The runtime's verdict that a tool call's arguments break the tool's JSON Schema (R-TOOL-1).
/// Calls whose arguments pass, whose tool is unknown, or whose arguments are not JSON get no
/// verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArgumentsRejected {
    /// The call.
    pub tool_call_id: String,
    /// The first violations (at most [`MAX_VIOLATIONS`], each cut to
    /// [`MAX_VIOLATION_CHARS`]).
    pub violations: Vec<SchemaViolation>,
    /// How many more violations the validator reported.
    #[serde(default, skip_serializing_if = "crate::vocab::is_zero")]
    pub omitted: u32,
}

/// `s` cut to `max` characters, with `…` when something was cut.
fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

/// The first [`MAX_VIOLATIONS`] of `violations`, each field cut to [`MAX_VIOLATION_CHARS`],
/// and how many more there were.
pub fn bounded_violations(
    violations: impl IntoIterator<Item = SchemaViolation>,
) -> (Vec<SchemaViolation>, u32) {
    let mut violations = violations.into_iter();
    let kept = (&mut violations)
        .take(MAX_VIOLATIONS)
        .map(|v| SchemaViolation {
            path: truncate(&v.path, MAX_VIOLATION_CHARS),
            reason: truncate(&v.reason, MAX_VIOLATION_CHARS),
        })
        .collect();
    let omitted = u32::try_from(violations.count()).unwrap_or(u32::MAX);
    (kept, omitted)
}

impl ArgumentsRejected {
    /// The verdict on call `tool_call_id` from the validator's violations, bounded (the first
    /// [`MAX_VIOLATIONS`], each field cut to [`MAX_VIOLATION_CHARS`]); `None` when there are
    /// none (the arguments pass).
    pub fn new(
        tool_call_id: impl Into<String>,
        violations: impl IntoIterator<Item = SchemaViolation>,
    ) -> Option<Self> {
        let (kept, omitted) = bounded_violations(violations);
        (!kept.is_empty()).then(|| ArgumentsRejected {
            tool_call_id: tool_call_id.into(),
            violations: kept,
            omitted,
        })
    }

    /// The error result the model gets for the rejected call of tool `name`: one line per
    /// violation with its path and reason, so the model can repair the call.
    ///
    /// ```text
    /// invalid arguments for calculator (they do not match its JSON Schema):
    /// - /n: "abc" is not of type "integer"
    /// The tool did not run; call it again with corrected arguments.
    /// ```
    pub fn message(&self, name: &str) -> String {
        format!(
            "invalid arguments for {name} (they do not match its JSON Schema):\n{}The tool did \
             not run; call it again with corrected arguments.",
            violation_lines(&self.violations, self.omitted)
        )
    }
}

/// One line per violation, then one for those omitted, if any.
pub(crate) fn violation_lines(violations: &[SchemaViolation], omitted: u32) -> String {
    let mut out = String::new();
    for v in violations {
        let path = if v.path.is_empty() { "(root)" } else { &v.path };
        out.push_str(&format!("- {path}: {}\n", v.reason));
    }
    if omitted > 0 {
        out.push_str(&format!("- … and {omitted} more\n"));
    }
    out
}

/// Names longer than this are not compared for a near match (bounds the edit-distance work on
/// whatever the model sent).
const MAX_COMPARED_CHARS: usize = 64;

/// The tool name among `offered` that `name` most likely meant, if one is close: equal but for
/// case or `-`/`_`, or within a small edit distance (1 for names up to 4 characters, 2 above).
/// Ties go to the first offered. `None` when `name` itself is offered.
pub fn near_match<'a>(name: &str, offered: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let wanted = normalize(name);
    if wanted.len() > MAX_COMPARED_CHARS {
        return None;
    }
    let limit = if wanted.len() <= 4 { 1 } else { 2 };
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in offered {
        if candidate == name {
            return None;
        }
        let c = normalize(candidate);
        if c.len().abs_diff(wanted.len()) > limit || c.len() > MAX_COMPARED_CHARS {
            continue;
        }
        let d = edit_distance(&wanted, &c);
        if d <= limit && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// Lower case, `-` as `_`, as characters.
fn normalize(name: &str) -> Vec<char> {
    name.chars()
        .flat_map(char::to_lowercase)
        .map(|c| if c == '-' { '_' } else { c })
        .collect()
}

/// Levenshtein distance (insertions, deletions, substitutions).
fn edit_distance(a: &[char], b: &[char]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != cb);
            cur[j + 1] = substitute.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The error result the model gets for a call of a tool the step does not offer, with the
/// near match among `offered` when there is one: `unknown tool: read-file; did you mean
/// read_file?`.
pub fn unknown_tool_message<'a>(name: &str, offered: impl IntoIterator<Item = &'a str>) -> String {
    let shown = truncate(name, MAX_VIOLATION_CHARS);
    match near_match(name, offered) {
        Some(m) => format!("unknown tool: {shown}; did you mean {m}?"),
        None => format!("unknown tool: {shown}"),
    }
}

/// What a rule does with the calls it decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleAction {
    /// Run the call without asking (the default).
    #[default]
    Allow,
    /// Put the call to a human first (R-CTL-4).
    Ask,
    /// Do not run the call: it gets a denied result that says which rule denied it and why,
    /// and the run goes on (the model sees the result).
    Deny,
}

impl RuleAction {
    /// `allow`, `ask` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleAction::Allow => "allow",
            RuleAction::Ask => "ask",
            RuleAction::Deny => "deny",
        }
    }
}

impl fmt::Display for RuleAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFFERED: [&str; 3] = ["append_line", "calculator", "read_file"];

    #[test]
    fn r_tool_1_near_match_case_and_separator() {
        assert_eq!(near_match("read-file", OFFERED), Some("read_file"));
        assert_eq!(near_match("Read_File", OFFERED), Some("read_file"));
        assert_eq!(near_match("CALCULATOR", OFFERED), Some("calculator"));
    }

    #[test]
    fn r_tool_1_near_match_small_edit_distance() {
        assert_eq!(near_match("calculater", OFFERED), Some("calculator"));
        assert_eq!(near_match("readfile", OFFERED), Some("read_file"));
        assert_eq!(near_match("apend_lines", OFFERED), Some("append_line"));
        assert_eq!(near_match("ab", ["abc", "xy"]), Some("abc"));
    }

    #[test]
    fn r_tool_1_near_match_none() {
        assert_eq!(near_match("shell", OFFERED), None);
        assert_eq!(near_match("write_file", OFFERED), None);
        assert_eq!(near_match("read_file", OFFERED), None);
        assert_eq!(near_match("", OFFERED), None);
        assert_eq!(near_match(&"x".repeat(10_000), OFFERED), None);
        assert_eq!(near_match("read-file", std::iter::empty()), None);
    }

    #[test]
    fn r_tool_1_near_match_prefers_the_closest() {
        assert_eq!(near_match("abcd_x", ["abcd_yy", "abcd_y"]), Some("abcd_y"));
    }

    #[test]
    fn r_tool_1_unknown_tool_message() {
        assert_eq!(
            unknown_tool_message("read-file", OFFERED),
            "unknown tool: read-file; did you mean read_file?"
        );
        assert_eq!(
            unknown_tool_message("shell", OFFERED),
            "unknown tool: shell"
        );
    }

    fn v(path: &str, reason: &str) -> SchemaViolation {
        SchemaViolation {
            path: path.into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn r_tool_1_verdict_message_names_each_path() {
        let r = ArgumentsRejected::new(
            "c1",
            [
                v("/n", "\"abc\" is not of type \"integer\""),
                v("", "\"m\" is a required property"),
            ],
        )
        .expect("violations");
        assert_eq!(
            r.message("counter"),
            "invalid arguments for counter (they do not match its JSON Schema):\n\
             - /n: \"abc\" is not of type \"integer\"\n\
             - (root): \"m\" is a required property\n\
             The tool did not run; call it again with corrected arguments."
        );
    }

    #[test]
    fn r_tool_1_verdict_is_bounded() {
        let long = "y".repeat(1000);
        let r = ArgumentsRejected::new("c1", (0..12).map(|i| v(&format!("/{i}"), &long)))
            .expect("violations");
        assert_eq!(r.violations.len(), MAX_VIOLATIONS);
        assert_eq!(r.omitted, 7);
        assert!(r
            .violations
            .iter()
            .all(|v| v.reason.chars().count() == MAX_VIOLATION_CHARS + 1));
        let m = r.message("t");
        assert!(m.contains("- … and 7 more\n"), "{m}");
        assert!(m.len() < 1500, "{}", m.len());
    }

    #[test]
    fn r_tool_1_no_violations_no_verdict() {
        assert_eq!(ArgumentsRejected::new("c1", []), None);
    }

    /// A `done` of a trace written before the check reads as "no verdicts", and one without
    /// verdicts is written as before (the trace version stays 4).
    #[test]
    fn r_tool_1_done_without_verdicts_reads_and_writes_as_before() {
        use crate::event::{AttemptId, Event};
        let old = r#"{"type":"done","attempt":{"run_id":"r","model_call_index":1,"attempt":1}}"#;
        let e: Event = serde_json::from_str(old).expect("parses");
        let attempt = AttemptId {
            run_id: "r".into(),
            model_call_index: 1,
            attempt: 1,
        };
        assert_eq!(e, Event::done(attempt.clone()));
        assert_eq!(serde_json::to_string(&e).expect("serializes"), old);
        let with = Event::Done {
            attempt,
            rejected_arguments: vec![ArgumentsRejected::new("c", [v("/n", "bad")]).expect("v")],
            output_rejected: None,
        };
        let json = serde_json::to_string(&with).expect("serializes");
        assert_eq!(serde_json::from_str::<Event>(&json).expect("parses"), with);
    }

    #[test]
    fn r_tool_1_verdict_round_trips_and_omits_zero() {
        let r = ArgumentsRejected::new("c1", [v("/n", "bad")]).expect("violations");
        let json = serde_json::to_string(&r).expect("serializes");
        assert!(!json.contains("omitted"), "{json}");
        assert_eq!(
            serde_json::from_str::<ArgumentsRejected>(&json).expect("parses"),
            r
        );
    }
}
