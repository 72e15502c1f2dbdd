//! `agentloop trace show`, `trace diff` and what-if `replay --set` as a real child process, on
//! the fixture traces of each supported version and on a fresh recording.

mod support;
use support::{agentloop, import, stderr, stdout};

fn fixture(name: &str) -> String {
    support::fixture("traces", name)
}

#[test]
fn show_reads_v3_v4_and_v5_in_every_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["v3-calc.jsonl", "v4-calc.jsonl", "v5-calc.jsonl"] {
        let f = fixture(name);
        let text = agentloop(dir.path(), &["trace", "show", &f]);
        assert!(text.status.success(), "{}", stderr(&text));
        let s = stdout(&text);
        assert!(s.contains(r#"assistant: "Let me calculate that.""#), "{s}");
        assert!(
            s.contains(r#"tool calculator call_0_0 {"expression":"2+3"} → completed: "5""#),
            "{s}"
        );
        assert!(s.contains("process Calling→Streaming"), "{s}");
        assert!(
            s.contains("summary: completed (final_answer), 2 steps, 1 tool call, 0 retries, usage in=19 out=17"),
            "{s}"
        );
        let md = agentloop(dir.path(), &["trace", "show", "--format", "markdown", &f]);
        assert!(stdout(&md).contains("### Step 2"), "{}", stdout(&md));
        let json = agentloop(dir.path(), &["trace", "show", "--format", "json", &f]);
        let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
        assert_eq!(v["summary"]["steps"], 2);
        assert_eq!(v["summary"]["outcome"], "completed");
    }
}

#[test]
fn show_diff_and_view_refuse_bad_input_with_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("v9.jsonl"),
        r#"{"kind":"header","version":9}"#,
    )
    .expect("write");
    let v4 = fixture("v4-calc.jsonl");
    let runs: [(&[&str], &str); 4] = [
        (&["trace", "show", "nope.jsonl"], "nope.jsonl"),
        (
            &["trace", "view", "nope.jsonl", "-o", "x.html"],
            "nope.jsonl",
        ),
        (
            &["trace", "diff", "v9.jsonl", &v4],
            "unsupported trace version 9",
        ),
        (
            &["trace", "view", "v9.jsonl", "-o", "x.html"],
            "unsupported trace version 9",
        ),
    ];
    for (args, message) in runs {
        let o = agentloop(dir.path(), args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(message), "{args:?}: {}", stderr(&o));
    }
    assert!(!dir.path().join("x.html").exists());
}

/// R-TOOL-1 through the command line: a scripted call whose `expression` is a number breaks
/// the calculator's schema and gets an error result naming `/expression` (the tool does not
/// run); a call of `Calculator` is told the near match; the corrected call runs and its result
/// is the answer. The recorded trace replays identically and `trace show` lists the verdict.
#[test]
fn r_tool_1_a_schema_breaking_call_is_reported_and_the_trace_replays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = serde_json::json!({"turns": [
        {"text": "trying", "tool_calls": [
            {"id": "bad", "name": "calculator", "arguments": {"expression": 5}},
            {"id": "typo", "name": "Calculator", "arguments": {"expression": "1"}}
        ]},
        {"text": "again", "tool_calls": [
            {"id": "good", "name": "calculator", "arguments": {"expression": "2+3"}}
        ]},
        {"text": "The answer is {{last_tool_result}}."}
    ]});
    std::fs::write(dir.path().join("script.json"), script.to_string()).expect("write");
    let run = agentloop(
        dir.path(),
        &["run", "--script", "script.json", "--trace", "t.jsonl", "go"],
    );
    assert!(run.status.success(), "{}", stderr(&run));
    assert_eq!(stdout(&run).lines().last(), Some("The answer is 5."));
    // One calculator run: only the corrected call started.
    let started = stderr(&run).matches("[tool] calculator {").count();
    assert_eq!(started, 1, "{}", stderr(&run));

    let replay = agentloop(dir.path(), &["replay", "t.jsonl"]);
    assert_eq!(replay.status.code(), Some(0), "{}", stderr(&replay));
    assert!(
        stdout(&replay).starts_with("replay identical"),
        "{}",
        stdout(&replay)
    );

    let show = agentloop(dir.path(), &["trace", "show", "t.jsonl"]);
    let s = stdout(&show);
    assert!(
        s.contains(r#"- /expression: invalid type: integer `5`, expected a string"#),
        "{s}"
    );
    assert!(
        s.contains("unknown tool: Calculator; did you mean calculator?"),
        "{s}"
    );
}

#[test]
fn diff_is_0_for_two_recordings_of_one_run_and_1_for_a_changed_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    for t in ["a.jsonl", "b.jsonl"] {
        let run = agentloop(dir.path(), &["run", "--trace", t, "What is 2+3?"]);
        assert!(run.status.success(), "{}", stderr(&run));
    }
    let same = agentloop(dir.path(), &["trace", "diff", "a.jsonl", "b.jsonl"]);
    assert_eq!(same.status.code(), Some(0), "{}", stdout(&same));
    assert!(stdout(&same).starts_with("equivalent"), "{}", stdout(&same));
    // Run ids differ (time-based): strict comparison sees them.
    let strict = agentloop(
        dir.path(),
        &["trace", "diff", "--strict", "a.jsonl", "b.jsonl"],
    );
    assert_eq!(strict.status.code(), Some(1), "{}", stdout(&strict));

    let text = std::fs::read_to_string(dir.path().join("b.jsonl")).expect("b");
    std::fs::write(
        dir.path().join("c.jsonl"),
        text.replace("er is 5.", "er is 6."),
    )
    .expect("write");
    let changed = agentloop(dir.path(), &["trace", "diff", "a.jsonl", "c.jsonl"]);
    assert_eq!(changed.status.code(), Some(1));
    let s = stdout(&changed);
    assert!(s.contains("first divergence: a.jsonl index "), "{s}");
    assert!(s.contains("(in the step of input "), "{s}");
    assert!(s.contains("+") && s.contains("er is 6."), "{s}");
    assert!(
        s.contains("c.jsonl: completed (final_answer), 2 steps"),
        "{s}"
    );
}

#[test]
fn diff_reads_a_v3_and_a_v4_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = agentloop(
        dir.path(),
        &[
            "trace",
            "diff",
            &fixture("v3-calc.jsonl"),
            &fixture("v4-calc.jsonl"),
        ],
    );
    assert_eq!(d.status.code(), Some(1));
    assert!(
        stdout(&d).contains("header version: 3 | 4"),
        "{}",
        stdout(&d)
    );
}

#[test]
fn what_if_replay_reports_the_changed_outcome() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = fixture("v4-calc.jsonl");
    let w = agentloop(dir.path(), &["replay", &f, "--set", "max_steps=1"]);
    assert_eq!(w.status.code(), Some(1), "{}", stderr(&w));
    let s = stdout(&w);
    assert!(s.contains("behaviour first differs at index 10"), "{s}");
    assert!(s.contains("changed:  completed (max_steps), 1 step"), "{s}");
    let same = agentloop(dir.path(), &["replay", &f, "--set", "max_steps=20"]);
    assert_eq!(same.status.code(), Some(0), "{}", stdout(&same));

    let retry = agentloop(
        dir.path(),
        &[
            "replay",
            &fixture("v4-retry-tool.jsonl"),
            "--set",
            "retry.max_retries=0",
        ],
    );
    assert_eq!(retry.status.code(), Some(1));
    assert!(
        stdout(&retry).contains("changed:  failed"),
        "{}",
        stdout(&retry)
    );
}

#[test]
fn what_if_replay_refuses_bad_settings_with_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = fixture("v4-calc.jsonl");
    for (args, needle) in [
        (vec!["--set", "colour=blue"], "unknown setting `colour`"),
        (
            vec!["--set", "max_steps=lots"],
            "bad value `lots` for `max_steps`",
        ),
        (vec!["--set", "max_steps"], "is not KEY=VALUE"),
        (vec!["--decider", "mine"], "unknown decider"),
    ] {
        let mut all = vec!["replay", f.as_str()];
        all.extend(args);
        let o = agentloop(dir.path(), &all);
        assert_eq!(o.status.code(), Some(2), "{all:?}");
        assert!(stderr(&o).contains(needle), "{}", stderr(&o));
    }
}

fn openai(name: &str) -> String {
    support::fixture("openai", name)
}

#[test]
fn import_writes_a_trace_replay_accepts_and_a_script_run_accepts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = [
        "trace",
        "import",
        "--from",
        "openai-chat",
        &openai("calc.json"),
        "--out",
        "t.jsonl",
        "--script",
        "s.json",
    ];
    let import = agentloop(dir.path(), &args);
    assert_eq!(import.status.code(), Some(0), "{}", stderr(&import));
    assert!(
        stdout(&import).contains("imported 2 assistant messages"),
        "{}",
        stdout(&import)
    );
    let replay = agentloop(dir.path(), &["replay", "t.jsonl"]);
    assert!(replay.status.success(), "{}", stderr(&replay));
    let run = agentloop(dir.path(), &["run", "--script", "s.json", "What is 2+3?"]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(
        stdout(&run).contains("The answer is 5."),
        "{}",
        stdout(&run)
    );
}

#[test]
fn import_reports_where_the_machines_differ_and_refuses_bad_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = openai("missing-result.json");
    let args = [
        "trace",
        "import",
        "--from",
        "openai-chat",
        &f,
        "--out",
        "t.jsonl",
        "--script",
        "s.json",
    ];
    let import = agentloop(dir.path(), &args);
    assert_eq!(import.status.code(), Some(1));
    assert!(
        stdout(&import).contains("differs: step 1: tool call call_2 (calculator) has no result"),
        "{}",
        stdout(&import)
    );
    std::fs::write(dir.path().join("bad.json"), "{}").expect("write");
    let bad = agentloop(
        dir.path(),
        &["trace", "import", "--from", "openai-chat", "bad.json"],
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("not a JSON array"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn import_of_an_inspect_eval_log_writes_a_trace_and_a_script_per_sample() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = support::fixture("inspect", "eval.json");
    let import = import(dir.path(), "inspect-eval", &log, "evals");
    // The second sample's reasoning part is not imported: a difference, exit 1.
    assert_eq!(import.status.code(), Some(1), "{}", stderr(&import));
    let out = stdout(&import);
    assert!(
        out.contains("imported 2 samples into evals (1 with differences)"),
        "{out}"
    );
    assert!(
        out.contains("differs: sample two words (epoch 2): message 2: content parts not imported"),
        "{out}"
    );
    for f in [
        "1_epoch1.jsonl",
        "1_epoch1.script.json",
        "two_words_epoch2.jsonl",
        "two_words_epoch2.script.json",
    ] {
        assert!(dir.path().join("evals").join(f).is_file(), "{f}");
    }
    let replay = agentloop(dir.path(), &["replay", "evals"]);
    assert!(replay.status.success(), "{}", stdout(&replay));
    assert!(
        stdout(&replay).contains("2 identical"),
        "{}",
        stdout(&replay)
    );
    let run = agentloop(
        &dir.path().join("evals"),
        &["run", "--script", "1_epoch1.script.json", "What is 2+3?"],
    );
    assert!(
        stdout(&run).contains("The answer is 5."),
        "{}",
        stdout(&run)
    );
    std::fs::write(dir.path().join("bad.json"), r#"{"eval": {}}"#).expect("write");
    let bad = agentloop(
        dir.path(),
        &["trace", "import", "--from", "inspect-eval", "bad.json"],
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("no `samples`"), "{}", stderr(&bad));
}

#[test]
fn an_overlong_sample_id_is_shortened_with_a_hash_not_a_half_finished_import() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/inspect/eval.json");
    let mut log: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture).expect("fixture")).expect("json");
    // Longer than any file name a file system takes.
    log["samples"][0]["id"] = serde_json::json!("sample-".repeat(1_000));
    std::fs::write(dir.path().join("long.json"), log.to_string()).expect("write");
    let import = import(dir.path(), "inspect-eval", "long.json", "evals");
    // The second sample differs (as in the fixture): exit 1, both imported.
    assert_eq!(import.status.code(), Some(1), "{}", stderr(&import));
    assert!(
        stdout(&import).contains("imported 2 samples into evals"),
        "{}",
        stdout(&import)
    );
    let mut names: Vec<String> = std::fs::read_dir(dir.path().join("evals"))
        .expect("evals")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 6, "{names:?}");
    let long = names
        .iter()
        .find(|n| n.starts_with("sample-") && n.ends_with("_epoch1.jsonl"))
        .expect("the long sample's trace");
    assert!(long.len() < 160, "{long}");
    let replay = agentloop(dir.path(), &["replay", "evals"]);
    assert!(
        stdout(&replay).contains("2 identical"),
        "{}",
        stdout(&replay)
    );
}

#[test]
fn import_of_otel_genai_spans_writes_a_trace_and_a_script_per_trace_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spans = support::fixture("otel", "genai.json");
    let import = import(dir.path(), "otel-genai", &spans, "otel");
    // The final answer's reasoning part is not imported: a difference, exit 1.
    assert_eq!(import.status.code(), Some(1), "{}", stderr(&import));
    let out = stdout(&import);
    assert!(
        out.contains("imported 2 traces into otel (1 with differences)"),
        "{out}"
    );
    assert!(
        out.contains("differs: trace 5b8efff798038103d269b633813fc60c: chat span 2:"),
        "{out}"
    );
    for f in [
        "5b8efff798038103d269b633813fc60c.jsonl",
        "5b8efff798038103d269b633813fc60c.script.json",
        "0af7651916cd43dd8448eb211c80319c.jsonl",
        "0af7651916cd43dd8448eb211c80319c.script.json",
    ] {
        assert!(dir.path().join("otel").join(f).is_file(), "{f}");
    }
    let replay = agentloop(dir.path(), &["replay", "otel"]);
    assert!(replay.status.success(), "{}", stdout(&replay));
    assert!(
        stdout(&replay).contains("2 identical"),
        "{}",
        stdout(&replay)
    );
    let show = agentloop(
        dir.path(),
        &[
            "trace",
            "show",
            "otel/5b8efff798038103d269b633813fc60c.jsonl",
        ],
    );
    assert!(show.status.success(), "{}", stderr(&show));
    assert!(stdout(&show).contains("get_weather"), "{}", stdout(&show));
    std::fs::write(dir.path().join("bad.json"), r#"{"resourceSpans": 1}"#).expect("write");
    let bad = agentloop(
        dir.path(),
        &["trace", "import", "--from", "otel-genai", "bad.json"],
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("`resourceSpans` is not an array"),
        "{}",
        stderr(&bad)
    );
}
