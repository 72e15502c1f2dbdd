//! Hostile files: a trace whose header carries tool rules no run
//! could have been configured with is refused when read, with a typed error; a rule set at the
//! bounds replays; a rule changed after its first match matches by its new pattern.

use agentloop_core::tool_rules::{
    last_match, validate_rules, RuleError, RulesError, ToolRule, MAX_RULES_PATTERN_CHARS,
    MAX_TOOL_RULES,
};
use agentloop_core::trace::{replay, Trace, TraceError};
use agentloop_core::wildcard::MAX_PATTERN_CHARS;
use agentloop_core::ToolCall;
use agentloop_trace_tools::import::{openai_chat, ImportOptions};
use serde_json::{json, Value};

/// A recorded conversation: `calls` calls of `bash`, each with an `argument_bytes` command.
fn conversation(calls: usize, argument_bytes: usize) -> Value {
    let mut m = vec![json!({"role": "user", "content": "go"})];
    for i in 0..calls {
        let command = format!("{i} {}", "a".repeat(argument_bytes));
        m.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{i}"), "type": "function",
             "function": {"name": "bash", "arguments": json!({"command": command}).to_string()}}]}));
        m.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "ok"}));
    }
    m.push(json!({"role": "assistant", "content": "done"}));
    Value::Array(m)
}

/// The generator of hostile traces: a recorded run of `calls` calls with `argument_bytes`
/// arguments, its header carrying `rules` (which match none of the calls, so the records are
/// those of a run with these rules). Returns the JSON Lines text.
fn trace_with_rules(rules: Vec<ToolRule>, calls: usize, argument_bytes: usize) -> String {
    let imported = openai_chat(
        &conversation(calls, argument_bytes),
        &ImportOptions::default(),
    )
    .expect("import");
    let mut trace = imported.trace;
    trace.header.config.step.tool_rules = rules;
    trace.to_jsonl()
}

/// A rule looking at `command` with a `pattern_chars`-character pattern that has a middle (so
/// matching reads the whole argument) and never matches: many distinct characters, a `?`.
fn hostile_rule(i: usize, pattern_chars: usize) -> ToolRule {
    let filler: String = (0..pattern_chars.saturating_sub(4))
        .map(|k| char::from_u32(0x4e00 + ((i * 7919 + k) % 20_000) as u32).unwrap_or('x'))
        .collect();
    ToolRule::deny("bash").argument("command", format!("*?{filler}*z"))
}

fn refused(text: &str) -> RulesError {
    match Trace::parse(text, "hostile.jsonl") {
        Err(TraceError::ToolRules { path, error }) => {
            assert_eq!(path, "hostile.jsonl");
            error
        }
        other => panic!("expected a tool-rules error, got {other:?}"),
    }
}

#[test]
fn r_trace_4_a_header_pattern_over_the_bound_is_refused_when_read() {
    // The 1.35 MB trace of the issue: one rule whose pattern is 1.35 million characters.
    let text = trace_with_rules(vec![hostile_rule(0, 1_350_000)], 2, 10);
    assert!(text.len() > 1_350_000, "{}", text.len());
    assert_eq!(
        refused(&text),
        RulesError {
            rule: Some(0),
            error: RuleError::PatternTooLong
        }
    );
    let error = Trace::parse(&text, "hostile.jsonl")
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("hostile.jsonl:1: rule 0: a pattern is longer than 1024"),
        "{error}"
    );
    // So is a rule with an empty tool pattern, and an argument pattern over the bound.
    let empty = trace_with_rules(vec![ToolRule::allow("calc"), ToolRule::deny("")], 1, 1);
    assert_eq!(
        refused(&empty),
        RulesError {
            rule: Some(1),
            error: RuleError::EmptyTool
        }
    );
    let long_argument = trace_with_rules(
        vec![ToolRule::deny("bash").argument("command", "x".repeat(MAX_PATTERN_CHARS + 1))],
        1,
        1,
    );
    assert_eq!(refused(&long_argument).error, RuleError::PatternTooLong);
}

#[test]
fn r_trace_4_too_many_rules_or_too_much_pattern_in_a_header_is_refused_when_read() {
    let many = trace_with_rules(vec![ToolRule::deny("x"); MAX_TOOL_RULES + 1], 1, 1);
    assert_eq!(
        refused(&many),
        RulesError {
            rule: None,
            error: RuleError::TooManyRules {
                count: MAX_TOOL_RULES + 1
            }
        }
    );
    // Each pattern within its bound, together over theirs: 1,024-character patterns.
    let n = MAX_RULES_PATTERN_CHARS / MAX_PATTERN_CHARS + 1;
    let heavy: Vec<ToolRule> = (0..n).map(|i| hostile_rule(i, MAX_PATTERN_CHARS)).collect();
    let chars = n * (MAX_PATTERN_CHARS + "bash".len());
    assert_eq!(
        refused(&trace_with_rules(heavy, 1, 1)),
        RulesError {
            rule: None,
            error: RuleError::PatternsTooLong { chars }
        }
    );
}

#[test]
fn r_trace_2_a_header_at_the_bounds_loads_and_replays() {
    // As many rules as allowed, with as much pattern as allowed, each reading the whole of
    // every 10 KB argument (a middle with a `?`) and matching none.
    let per_rule = MAX_RULES_PATTERN_CHARS / MAX_TOOL_RULES - "bash".len();
    let rules: Vec<ToolRule> = (0..MAX_TOOL_RULES)
        .map(|i| hostile_rule(i, per_rule))
        .collect();
    assert_eq!(validate_rules(&rules), Ok(()));
    let text = trace_with_rules(rules.clone(), 3, 10_000);
    let trace = Trace::parse(&text, "bounds.jsonl").expect("a trace at the bounds loads");
    assert_eq!(trace.header.config.step.tool_rules, rules);
    assert_eq!(replay(&trace), None);
}

#[test]
fn r_tool_3_ten_thousand_rules_are_refused_with_a_typed_error() {
    let rules = vec![ToolRule::deny("bash").argument("command", "*a?b*"); 10_000];
    assert_eq!(
        validate_rules(&rules),
        Err(RulesError {
            rule: None,
            error: RuleError::TooManyRules { count: 10_000 }
        })
    );
    assert_eq!(validate_rules(&rules[..MAX_TOOL_RULES]), Ok(()));
}

#[test]
fn r_tool_3_a_rule_rebuilt_after_its_first_match_matches_by_its_new_pattern() {
    let call = |command: &str| ToolCall {
        id: "c1".into(),
        name: "bash".into(),
        arguments: json!({ "command": command }),
        invalid_arguments: None,
    };
    let mut rules = vec![ToolRule::deny("bash").argument("command", "rm *")];
    assert_eq!(last_match(&rules, &call("rm -rf /")), Some(0));
    // The compiled patterns are a cache: a clone shares them, a new argument pattern (the only
    // way to change a built rule's patterns) is seen.
    let copy = rules.clone();
    rules[0] = rules[0].clone().argument("command", "git *");
    assert_eq!(last_match(&rules, &call("rm -rf /")), None);
    assert_eq!(last_match(&rules, &call("git push")), Some(0));
    assert_eq!(last_match(&copy, &call("rm -rf /")), Some(0));
    // Several rules naming one argument, the last that matches decides.
    let rules = [
        ToolRule::ask("bash"),
        ToolRule::allow("bash").argument("command", "git *"),
        ToolRule::deny("bash").argument("command", "*--force*"),
        ToolRule::allow("bash").argument("/command", "*status"),
    ];
    assert_eq!(last_match(&rules, &call("git status")), Some(3));
    assert_eq!(last_match(&rules, &call("git push --force")), Some(2));
    assert_eq!(last_match(&rules, &call("git push")), Some(1));
    assert_eq!(last_match(&rules, &call("ls")), Some(0));
}

#[test]
fn r_trace_1_a_streamed_import_hands_the_sink_the_records_of_the_collected_one() {
    use agentloop_core::trace::TraceRecord;
    use agentloop_trace_tools::import::{openai_chat_to, StreamError};
    use agentloop_trace_tools::transcript::Transcript;
    let recording = conversation(5, 10);
    let collected = openai_chat(&recording, &ImportOptions::default()).expect("import");
    let mut lines = Vec::new();
    let mut encoder = agentloop_core::trace::TraceEncoder::new();
    let streamed = openai_chat_to(&recording, &ImportOptions::default(), |r| {
        encoder.encode(r, &mut lines).expect("json");
        Ok::<(), ()>(())
    })
    .expect("import");
    let text = String::from_utf8(lines).expect("utf-8");
    assert_eq!(text, collected.trace.to_jsonl());
    assert_eq!(streamed.records, collected.trace.records.len() as u64);
    assert_eq!(
        streamed.summary,
        Transcript::from_trace(&collected.trace).summary
    );
    assert_eq!(streamed.replies, collected.replies);
    assert_eq!(streamed.findings, collected.findings);
    // The sink's first error stops the import.
    let mut seen = 0;
    let stopped = openai_chat_to(&recording, &ImportOptions::default(), |r| {
        seen += 1;
        match r {
            TraceRecord::Effect { .. } => Err("disk full"),
            _ => Ok(()),
        }
    });
    assert_eq!(stopped, Err(StreamError::Sink("disk full")));
    assert!(seen < text.lines().count(), "{seen}");
    // Bad input reaches no sink.
    let bad = openai_chat_to(
        &json!({"not": "an array"}),
        &ImportOptions::default(),
        |_| Ok::<(), ()>(()),
    );
    assert!(matches!(bad, Err(StreamError::Import(_))));
}
