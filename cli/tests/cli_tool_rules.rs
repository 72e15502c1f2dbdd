//! Tool rules from the command line as a real child process (R-TOOL-3):
//! `--tool-rule ACTION[@TIMEOUT]:TOOL[:FIELD=PATTERN]` and `--tool-rules FILE`. A denied
//! `append_line` call never writes its line and the model reads why; the allowed one writes;
//! the events and the trace name the deciding rule, and the trace replays.

use std::process::Output;

use serde_json::Value;

mod support;
use support::agentloop;

fn json_events(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A directory with the script `s.json`: one step appending two lines (the second one holds a
/// password), then an answer quoting the last tool result.
fn scripted() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = serde_json::json!({"turns": [
        {"tool_calls": [
            {"id": "a1", "name": "append_line", "arguments": {"path": "notes.txt", "line": "buy milk"}},
            {"id": "a2", "name": "append_line", "arguments": {"path": "notes.txt", "line": "my password is hunter2"}}
        ]},
        {"text": "Last result: {{last_tool_result}}"}
    ]});
    std::fs::write(dir.path().join("s.json"), script.to_string()).expect("script");
    dir
}

fn run(dir: &tempfile::TempDir, extra: &[&str]) -> Output {
    let mut args = vec!["run", "--script", "s.json", "--root", "."];
    args.extend_from_slice(extra);
    args.push("Take notes");
    agentloop(dir.path(), &args)
}

fn notes(dir: &tempfile::TempDir) -> String {
    std::fs::read_to_string(dir.path().join("notes.txt")).unwrap_or_default()
}

#[test]
fn r_tool_3_a_tool_rule_flag_denies_a_call_by_argument_pattern() {
    let dir = scripted();
    let out = run(
        &dir,
        &[
            "--tool-rule",
            "deny:append_line:line=*password*",
            "--events",
            "json",
            "--trace",
            "t.jsonl",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        notes(&dir),
        "buy milk\n",
        "the denied line was never written"
    );
    let events = json_events(&out);
    let matched: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_rule_matched")
        .collect();
    assert_eq!(matched.len(), 1, "{events:?}");
    assert_eq!(matched[0]["tool_call_id"], "a2");
    assert_eq!(matched[0]["rule"], 0);
    assert_eq!(matched[0]["action"], "deny");
    let denied = events
        .iter()
        .find(|e| e["type"] == "tool_end" && e["tool_call_id"] == "a2")
        .expect("a2 ends");
    assert_eq!(denied["status"], "denied");
    // The model read which rule denied the call.
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("denied by rule 0 (deny:append_line:line=*password*)"),
        "{text}"
    );
    // The trace records the rule in its header and the row, and replays.
    let trace = std::fs::read_to_string(dir.path().join("t.jsonl")).expect("trace");
    let header = trace.lines().next().expect("header");
    assert!(header.contains("\"tool_rules\""), "{header}");
    assert!(trace.contains("\"row\":\"CommitDeniedByRule\""));
    let replay = agentloop(dir.path(), &["replay", "t.jsonl"]);
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
}

#[test]
fn r_tool_3_text_mode_shows_the_denial_and_rules_apply_file_first_then_flags() {
    let dir = scripted();
    // The file denies every append_line; the flag after it allows the harmless line again
    // (the last matching rule decides).
    std::fs::write(
        dir.path().join("rules.json"),
        r#"[{"tool": "append_line", "action": "deny", "reason": "no writing today"}]"#,
    )
    .expect("rules");
    let out = run(
        &dir,
        &[
            "--tool-rules",
            "rules.json",
            "--tool-rule",
            "allow@5s:append_line:line=buy *",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(notes(&dir), "buy milk\n");
    assert!(
        stderr.contains("[rule] append_line (a2): deny by rule 0"),
        "{stderr}"
    );
    assert!(
        stderr.contains("[rule] append_line (a1): allow by rule 1, deadline 5000 ms"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("no writing today"), "{stdout}");
}

#[test]
fn r_tool_3_malformed_rules_get_clear_errors() {
    let dir = scripted();
    let out = run(&dir, &["--tool-rule", "permit:append_line"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--tool-rule"), "{stderr}");
    assert!(stderr.contains("unknown action"), "{stderr}");

    std::fs::write(
        dir.path().join("bad.json"),
        r#"[{"tool": "x", "action": "maybe"}]"#,
    )
    .expect("write");
    let out = run(&dir, &["--tool-rules", "bad.json"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--tool-rules bad.json"), "{stderr}");
    assert_eq!(notes(&dir), "", "nothing ran");

    // A rule for a tool that does not exist is probably a typo: a warning, not an error.
    let out = run(&dir, &["--tool-rule", "deny:append_lines"]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rule 0 (deny:append_lines) matches no tool"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// R-TOOL-3: a rule set over the bounds a trace header has (1,024 rules) is refused before the
/// run with exit 2, naming the bound, instead of making every tool call's matching long.
#[test]
fn r_tool_3_too_many_rules_are_refused_with_exit_2() {
    let dir = scripted();
    let rules: Vec<Value> = (0..1_100)
        .map(|i| serde_json::json!({"action": "deny", "tool": "append_line", "argument": {"field": "line", "pattern": format!("*secret-{i}*")}}))
        .collect();
    std::fs::write(
        dir.path().join("rules.json"),
        Value::from(rules).to_string(),
    )
    .expect("rules");
    let out = agentloop(
        dir.path(),
        &[
            "run",
            "go",
            "--script",
            "s.json",
            "--tool-rules",
            "rules.json",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("tool rules"), "{stderr}");
    assert!(
        stderr.contains("1100") || stderr.contains("1,100"),
        "{stderr}"
    );
    assert!(!dir.path().join("notes.txt").exists(), "nothing ran");
}
