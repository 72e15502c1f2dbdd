//! The core CLI as a real child process: the main job, trace + replay (identical, and a changed
//! event named by index), Ctrl-C aborting cleanly, clear errors for malformed input, and inline
//! status/title tags.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

mod support;
use support::agentloop;

#[test]
fn main_job_answers_with_the_calculator_and_replays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = agentloop(dir.path(), &["run", "What is 2+3?", "--trace", "t.jsonl"]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("The answer is 5."), "{stdout}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("[tool] calculator {\"expression\":\"2+3\"}")
    );

    let replay = agentloop(dir.path(), &["replay", "t.jsonl"]);
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );

    // Change one recorded delta: replay exits 1 and names where it diverged.
    let text = std::fs::read_to_string(dir.path().join("t.jsonl")).expect("trace");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let (i, line) = lines
        .iter()
        .enumerate()
        .find(|(_, l)| l.contains("\"text-delta\""))
        .map(|(i, l)| (i, l.clone()))
        .expect("a text delta input");
    lines[i] = line.replacen("\"text\":\"", "\"text\":\"CHANGED ", 1);
    std::fs::write(dir.path().join("t2.jsonl"), lines.join("\n")).expect("write");
    let replay = agentloop(dir.path(), &["replay", "t2.jsonl"]);
    assert_eq!(replay.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&replay.stderr);
    let input_index = i - 1; // line 0 is the header
    assert!(
        stderr.contains(&format!("(in the step of input {input_index})")),
        "names the changed input: {stderr}"
    );
    assert!(stderr.contains("CHANGED"), "shows a diff: {stderr}");
}

#[test]
fn retry_script_reports_one_retry() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("s.json"),
        r#"{"turns": [{"errors": [{"status": 429, "retry_after_ms": 20}], "text": "ok"}]}"#,
    )
    .expect("script");
    // The hint is the delay (R-IN-1: it overrides the backoff), and the event says so.
    let out = agentloop(
        dir.path(),
        &[
            "run",
            "--script",
            "s.json",
            "--events",
            "json",
            "--initial-backoff-ms",
            "10",
            "hi",
        ],
    );
    assert!(out.status.success());
    let events = json_events(&out);
    let retries: Vec<_> = events.iter().filter(|e| e["type"] == "retry").collect();
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0]["delay_ms"], 20);
    assert_eq!(retries[0]["retry_after_ms"], 20);
    assert!(events
        .iter()
        .any(|e| e["type"] == "text_delta" && e["text"] == "ok"));
    let indexes: Vec<u64> = events.iter().filter_map(|e| e["index"].as_u64()).collect();
    assert!(indexes.windows(2).all(|w| w[0] < w[1]), "indexes increase");
}

/// Every stdout line of `--events json`, parsed.
fn json_events(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON event per line"))
        .collect()
}

#[test]
fn r_str_4_json_events_carry_the_committed_message_and_the_final_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = agentloop(dir.path(), &["run", "--events", "json", "What is 2+3?"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = json_events(&out);
    // The final answer is a field of the end event: no delta re-assembly needed.
    let ends: Vec<_> = events.iter().filter(|e| e["type"] == "run_end").collect();
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["final_text"], "The answer is 5.");
    assert_eq!(ends[0]["outcome"], "completed");
    // Each commit carries its whole message.
    let commits: Vec<_> = events
        .iter()
        .filter(|e| e["type"] == "response_complete")
        .collect();
    assert_eq!(commits.len(), 2);
    let first = &commits[0]["message"];
    assert_eq!(first["text"], "Let me calculate that.");
    assert_eq!(first["tool_calls"][0]["name"], "calculator");
    assert_eq!(first["tool_calls"][0]["arguments"]["expression"], "2+3");
    assert_eq!(commits[0]["tool_calls"], 1, "the old count field stays");
    assert_eq!(commits[1]["message"]["text"], "The answer is 5.");
    assert_eq!(commits[1]["message"]["finish_reason"], "stop");
}

/// Usage limits: `--max-tool-calls 1` lets the demo's calculator call run, then
/// asks for a final answer (or, with `--on-limit stop`, ends at once); the run's end names
/// the limit, and the trace replays.
#[test]
fn usage_limits_end_the_run_naming_the_limit_and_replay() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (action, steps) in [("final-answer", 2), ("stop", 1)] {
        let trace = format!("limit-{action}.jsonl");
        let out = agentloop(
            dir.path(),
            &[
                "run",
                "What is 2+3?",
                "--max-tool-calls",
                "1",
                "--on-limit",
                action,
                "--events",
                "json",
                "--trace",
                &trace,
            ],
        );
        assert!(out.status.success(), "{out:?}");
        let events = json_events(&out);
        let limit = events
            .iter()
            .find(|e| e["type"] == "usage_limit_reached")
            .unwrap_or_else(|| panic!("no usage_limit_reached: {events:?}"));
        assert_eq!(limit["limit"], "tool_calls");
        assert_eq!(limit["max"], 1.0);
        assert_eq!(limit["action"], action.replace('-', "_"));
        let end = events
            .iter()
            .find(|e| e["type"] == "run_end")
            .expect("run_end");
        assert_eq!(end["reason"], "usage_limit:tool_calls", "{end}");
        let requests = events
            .iter()
            .filter(|e| e["type"] == "request_start")
            .count();
        assert_eq!(requests, steps, "{action}: {events:?}");
        let replay = agentloop(dir.path(), &["replay", &trace]);
        assert!(replay.status.success(), "{replay:?}");
    }
    let bad = agentloop(dir.path(), &["run", "x", "--max-cost", "1"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--price"));
}

/// Typed final answers: `--output-schema FILE` sends the first, non-JSON answer back
/// with its errors; stdout then holds only the validated JSON. With no retries left the run
/// fails with reason `output_invalid`.
#[test]
fn output_schema_retries_an_invalid_answer_and_prints_the_validated_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("point.json"),
        r#"{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},"required":["x","y"]}"#,
    )
    .expect("schema");
    std::fs::write(
        dir.path().join("s.json"),
        r#"{"turns":[{"text":"The point is (1, 2)."},{"text":"```json\n{\"x\": 1, \"y\": 2}\n```"}]}"#,
    )
    .expect("script");
    let args = [
        "run",
        "--script",
        "s.json",
        "--output-schema",
        "point.json",
        "a point",
    ];
    let out = agentloop(dir.path(), &args);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "{\"x\":1,\"y\":2}\n");
    let failed = agentloop(
        dir.path(),
        &[&args[..], &["--output-retries", "0"]].concat(),
    );
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");
    assert!(failed.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        stderr.contains("output_invalid") && stderr.contains("not JSON"),
        "{stderr}"
    );
    let missing = agentloop(dir.path(), &["run", "--output-schema", "nope.json", "x"]);
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn r_out_3_replay_of_a_trace_naming_an_unknown_decider_exits_2_and_names_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = agentloop(dir.path(), &["run", "What is 2+3?", "--trace", "t.jsonl"]);
    assert!(out.status.success());
    let text = std::fs::read_to_string(dir.path().join("t.jsonl")).expect("trace");
    let (header, rest) = text.split_once('\n').expect("a header line");
    let mut header: serde_json::Value = serde_json::from_str(header).expect("JSON header");
    assert_eq!(
        header["config"]["decider"], "default",
        "the header names the decider"
    );
    header["config"]["decider"] = "my_custom_decider".into();
    std::fs::write(dir.path().join("custom.jsonl"), format!("{header}\n{rest}")).expect("write");
    let replay = agentloop(dir.path(), &["replay", "custom.jsonl"]);
    let stderr = String::from_utf8_lossy(&replay.stderr);
    assert_eq!(replay.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("custom.jsonl"), "{stderr}");
    assert!(stderr.contains("`my_custom_decider`"), "{stderr}");
    assert!(stderr.contains("not registered"), "{stderr}");
    assert!(
        !stderr.contains("diverged"),
        "no false divergence: {stderr}"
    );
}

#[test]
fn r_out_3_replay_maps_an_unknown_decider_to_a_builtin_with_decider_name_eq_builtin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = agentloop(dir.path(), &["run", "What is 2+3?", "--trace", "t.jsonl"]);
    assert!(out.status.success());
    let text = std::fs::read_to_string(dir.path().join("t.jsonl")).expect("trace");
    let (header, rest) = text.split_once('\n').expect("a header line");
    let mut header: serde_json::Value = serde_json::from_str(header).expect("JSON header");
    header["config"]["decider"] = "my_custom_decider".into();
    std::fs::write(dir.path().join("custom.jsonl"), format!("{header}\n{rest}")).expect("write");
    // The hint names the way out.
    let refused = agentloop(dir.path(), &["replay", "custom.jsonl"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--decider NAME=default"));
    // Mapped to the built-in, the trace replays identically.
    let mapped = agentloop(
        dir.path(),
        &[
            "replay",
            "custom.jsonl",
            "--decider",
            "my_custom_decider=default",
        ],
    );
    let stdout = String::from_utf8_lossy(&mapped.stdout);
    assert!(
        mapped.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&mapped.stderr)
    );
    assert!(stdout.contains("replay identical"), "{stdout}");
    // An unknown built-in is a typed refusal naming it.
    let bad = agentloop(
        dir.path(),
        &[
            "replay",
            "custom.jsonl",
            "--decider",
            "my_custom_decider=nope",
        ],
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown built-in decider `nope`"));
}

#[cfg(unix)]
#[test]
fn ctrl_c_aborts_cleanly_and_the_trace_records_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The model calls a tool and then stalls forever: Ctrl-C lands mid-stream of step 2.
    std::fs::write(
        dir.path().join("s.json"),
        r#"{"turns": [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]}, {"errors": [{"stall": true}], "text": "never"}]}"#,
    )
    .expect("script");
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentloop"))
        .args([
            "run",
            "--script",
            "s.json",
            "--trace",
            "t.jsonl",
            "--stall-timeout",
            "600",
            "--first-chunk-timeout",
            "600",
            // The state transitions on stderr, which the test waits on.
            "-v",
            "go",
        ])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Wait until step 2 is streaming (the stall), reading the state changes on stderr.
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut seen = 0;
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("--StreamOpened--> Streaming") {
                seen += 1;
                if seen == 2 {
                    let _ = tx.send(());
                }
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("step 2 starts streaming");
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = child.wait().expect("wait");
    let stderr = reader.join().expect("stderr reader");
    assert_eq!(exit.code(), Some(130), "{stderr}");
    assert!(stderr.contains("[abort] interrupted (Ctrl-C)"), "{stderr}");
    let trace =
        std::fs::read_to_string(dir.path().join("t.jsonl")).expect("trace written after the abort");
    assert!(
        trace.contains("\"type\":\"abort\""),
        "the abort is recorded"
    );
    assert!(trace.contains("\"type\":\"agent_abort\""));
    // Every started tool call ended with a result.
    let started = trace.matches("\"entry\":\"tool_started\"").count();
    let results = trace.matches("\"entry\":\"tool_result\"").count();
    assert_eq!((started, results), (1, 1));
    let replay = Command::new(env!("CARGO_BIN_EXE_agentloop"))
        .args(["replay", "t.jsonl"])
        .current_dir(dir.path())
        .output()
        .expect("replay");
    assert!(replay.status.success());
}

#[test]
fn malformed_inputs_get_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("bad.json"),
        "{\"turns\": [\n  {\"text\": 5}\n]}",
    )
    .expect("write");
    let out = agentloop(dir.path(), &["run", "--script", "bad.json", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("bad.json:2:"),
        "names file and line"
    );

    std::fs::write(
        dir.path().join("t.jsonl"),
        "{\"kind\":\"header\",\"version\":99}\n",
    )
    .expect("write");
    let out = agentloop(dir.path(), &["replay", "t.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unsupported trace version 99"));

    let out = agentloop(dir.path(), &["run", "--max-steps", "zero", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-steps"));

    // Issue 14: the two model parameters.
    let out = agentloop(dir.path(), &["run", "--max-tokens", "0", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-tokens"));
    let out = agentloop(dir.path(), &["run", "--tool-choice", "calculater", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--tool-choice calculater: no such tool") && stderr.contains("calculator"),
        "names the tool and the known ones: {stderr}"
    );
    let out = agentloop(dir.path(), &["run", "--tool-choice", "", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty tool choice"));
    // Accepted values run (the scripted model ignores them).
    let out = agentloop(
        dir.path(),
        &[
            "run",
            "--tool-choice",
            "required",
            "--max-tokens",
            "16",
            "What is 2+3?",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = agentloop(dir.path(), &["chart", "react"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("---\ntitle: Outer ReAct machine"));
}

/// R-TRACE-2: 16 runs of a script whose first step calls four tools in parallel record one
/// trace once run ids are normalized (the header and records hold no wall-clock field).
#[test]
fn r_trace_2_sixteen_runs_with_four_parallel_tools_give_one_trace() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/scripts/four_parallel.json")
        .canonicalize()
        .expect("script");
    let script = script.to_str().expect("utf-8 path");
    let mut traces = std::collections::BTreeSet::new();
    for i in 0..16 {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("notes.txt"), "seed\n").expect("notes");
        let t = format!("t{i}.jsonl");
        let out = agentloop(
            dir.path(),
            &[
                "run", "--root", ".", "--script", script, "--trace", &t, "go",
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(dir.path().join(&t)).expect("trace");
        assert_eq!(
            text.matches("\"effect\":\"run_tool\"").count(),
            4,
            "four tools started"
        );
        let mut normalized = String::new();
        // Run ids and the jitter seed are drawn from the (time-based) ids port: normalized
        // as `agentloop trace diff` does.
        let mut runs = std::collections::BTreeMap::new();
        for line in text.lines() {
            let mut v: serde_json::Value = serde_json::from_str(line).expect("json line");
            agentloop_trace_tools::trace_diff::normalize(&mut v, &mut runs);
            normalized.push_str(&v.to_string());
            normalized.push('\n');
        }
        traces.insert(normalized);
    }
    assert_eq!(traces.len(), 1, "16 recordings, {} traces", traces.len());
}

/// A huge tool argument is echoed to stderr cut at 2 KiB with a marker
/// naming how much was left out; the tool still gets the whole argument (R-TOOL-1).
#[test]
fn huge_tool_arguments_are_echoed_truncated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let line = "y".repeat(10_000);
    let script = serde_json::json!({"turns": [
        {"tool_calls": [{"name": "append_line", "arguments": {"path": "log.txt", "line": line}}]},
        {"text": "done"}
    ]});
    std::fs::write(dir.path().join("s.json"), script.to_string()).expect("script");
    let out = agentloop(
        dir.path(),
        &["run", "--root", ".", "--script", "s.json", "go"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let echoed = stderr
        .lines()
        .find(|l| l.starts_with("[tool] append_line {"))
        .unwrap_or_else(|| panic!("the call is echoed: {stderr}"));
    let arguments = serde_json::json!({"path": "log.txt", "line": line}).to_string();
    let expected = format!(
        "[tool] append_line {}… ({} bytes truncated)",
        &arguments[..2048],
        arguments.len() - 2048
    );
    assert!(
        echoed == expected,
        "echoed {} bytes, expected {}: …{}",
        echoed.len(),
        expected.len(),
        &echoed[echoed.len().saturating_sub(60)..]
    );
    let written = std::fs::read_to_string(dir.path().join("log.txt")).expect("log");
    assert_eq!(
        written,
        format!("{line}\n"),
        "the tool got the whole argument"
    );
}

// Inline tags: a scripted model streams its answer a few characters at a
// time (so the tags arrive split across deltas); `<status>…</status>` and `<title>…</title>`
// come out as `status_update` and `title_generated` in `--events json`, and leave the answer
// unless `--inline-tags keep`.

const ANSWER: &str = "<status>Reading</status>The sum is 5.<title>Sum</title>";

/// A directory with the script `s.json`: one turn answering [`ANSWER`] in 3-character deltas.
fn scripted() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = serde_json::json!({"turns": [{"text": ANSWER, "chunk_chars": 3}]});
    std::fs::write(dir.path().join("s.json"), script.to_string()).expect("script");
    dir
}

/// The events `agentloop run --script s.json --events json EXTRA.. "What is 2+3?"` printed
/// in `dir`, once it succeeded.
fn run_scripted(dir: &tempfile::TempDir, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["run", "--script", "s.json", "--events", "json"];
    args.extend_from_slice(extra);
    args.push("What is 2+3?");
    let out = agentloop(dir.path(), &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    json_events(&out)
}

fn of_type<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

fn streamed(events: &[Value]) -> String {
    of_type(events, "text_delta")
        .iter()
        .map(|e| e["text"].as_str().expect("text"))
        .collect()
}

/// The tags become `status_update{text}` and `title_generated{title}`;
/// the streamed text, the committed message and the final answer have no tags; the trace
/// replays identically.
#[test]
fn issue_13_inline_tags_become_events_and_leave_the_answer() {
    let dir = scripted();
    let events = run_scripted(&dir, &["--trace", "t.jsonl"]);
    let status = of_type(&events, "status_update");
    assert_eq!(status.len(), 1, "{events:#?}");
    assert_eq!(status[0]["text"], "Reading");
    let title = of_type(&events, "title_generated");
    assert_eq!(title.len(), 1, "{events:#?}");
    assert_eq!(title[0]["title"], "Sum");
    assert_eq!(streamed(&events), "The sum is 5.");
    let complete = of_type(&events, "response_complete");
    assert_eq!(complete[0]["message"]["text"], "The sum is 5.");
    let end = of_type(&events, "run_end");
    assert_eq!(end[0]["final_text"], "The sum is 5.");

    let replay = agentloop(dir.path(), &["replay", "t.jsonl"]);
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );

    // Text mode: stdout is the answer without tags; piped stderr names the status and title.
    let out = agentloop(dir.path(), &["run", "--script", "s.json", "What is 2+3?"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        "The sum is 5."
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("[status] Reading"), "{stderr}");
    assert!(stderr.contains("[title] Sum"), "{stderr}");
}

/// `--inline-tags keep` reports the tags and leaves the answer as the
/// model wrote it; `--inline-tags off` looks for no tags; a trace without the option in its
/// header (as before it existed) replays as `off`.
#[test]
fn issue_13_inline_tags_keep_and_off() {
    let dir = scripted();
    let run = |mode: &str| run_scripted(&dir, &["--inline-tags", mode]);
    let keep = run("keep");
    assert_eq!(of_type(&keep, "status_update")[0]["text"], "Reading");
    assert_eq!(of_type(&keep, "title_generated")[0]["title"], "Sum");
    assert_eq!(streamed(&keep), ANSWER);
    assert_eq!(of_type(&keep, "run_end")[0]["final_text"], ANSWER);

    // `off` writes the header a trace had before the option existed (no `inline_tags`), and
    // such a trace replays with no tag handling, as it was recorded.
    let off = run_scripted(&dir, &["--inline-tags", "off", "--trace", "off.jsonl"]);
    assert!(of_type(&off, "status_update").is_empty());
    assert!(of_type(&off, "title_generated").is_empty());
    assert_eq!(of_type(&off, "run_end")[0]["final_text"], ANSWER);
    let trace = std::fs::read_to_string(dir.path().join("off.jsonl")).expect("trace");
    let header = trace.lines().next().expect("a header");
    assert!(!header.contains("inline_tags"), "{header}");
    let replay = agentloop(dir.path(), &["replay", "off.jsonl"]);
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
}

/// `--agent ID` loads `ID.md` from `--agents-dir` into the system prompt
/// (after `--system`); the trace header records the composed prompt; an id that names a path
/// is refused before any request.
#[test]
fn seed_002_agent_instructions_by_id_become_the_system_prompt() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("agents")).expect("agents dir");
    std::fs::write(
        dir.path().join("agents/adder.md"),
        "You add numbers with the calculator.\n",
    )
    .expect("instructions");
    let out = agentloop(
        dir.path(),
        &[
            "run",
            "--system",
            "Be brief.",
            "--agent",
            "adder",
            "--trace",
            "t.jsonl",
            "What is 2+3?",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace = std::fs::read_to_string(dir.path().join("t.jsonl")).expect("trace");
    let header: Value = serde_json::from_str(trace.lines().next().expect("header")).expect("json");
    assert_eq!(
        header["config"]["system"],
        "Be brief.\n\nYou add numbers with the calculator."
    );
    // Every model request carries it.
    let requests: Vec<Value> = trace
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["effect"]["effect"] == "call_model")
        .collect();
    assert!(!requests.is_empty());
    assert!(requests
        .iter()
        .all(|r| r["effect"]["request"]["system"] == header["config"]["system"]));
    for (id, needle) in [
        ("../adder", "not a plain name"),
        ("nobody", "no instructions"),
    ] {
        let bad = agentloop(dir.path(), &["run", "--agent", id, "hi"]);
        assert_eq!(bad.status.code(), Some(2), "{bad:?}");
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(err.contains(needle), "{err}");
    }
}

/// A server that reuses `call_1` in every response: each later call gets a derived id
/// (`call_1_2`, then across runs `call_1_3`), every call runs once with its own record, the
/// session passes `sessions check` after each run, and the trace replays. The arguments check
/// reaches a call under its derived id: invalid arguments are that call's error result.
#[test]
fn a_call_id_repeated_across_steps_and_runs_is_derived_and_every_call_is_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(
        d.join("s.json"),
        r#"{"turns": [
          {"tool_calls": [{"id": "call_1", "name": "calculator", "arguments": {"expression": "2+3"}}]},
          {"tool_calls": [{"id": "call_1", "name": "calculator", "arguments": {"expression": "4*5"}}]},
          {"text": "first {{last_tool_result}}"},
          {"tool_calls": [{"id": "call_1", "name": "calculator", "arguments": {"expression": "3+4"}},
                          {"id": "call_1", "name": "calculator", "arguments": {"nope": 1}}]},
          {"text": "second {{last_tool_result}}"}
        ]}"#,
    )
    .expect("script");
    let mut ends = Vec::new();
    let mut started = Vec::new();
    for (prompt, trace) in [("go", "t1.jsonl"), ("again", "t2.jsonl")] {
        let out = agentloop(
            d,
            &[
                "run",
                "--script",
                "s.json",
                "--session",
                "r",
                "--events",
                "json",
                "--trace",
                trace,
                prompt,
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for e in json_events(&out) {
            if e["type"] == "tool_start" {
                started.push(e["tool_call_id"].as_str().unwrap_or_default().to_string());
            }
            if e["type"] == "tool_end" {
                ends.push((
                    e["tool_call_id"].as_str().unwrap_or_default().to_string(),
                    e["status"].as_str().unwrap_or_default().to_string(),
                    e["result"].as_str().unwrap_or_default().to_string(),
                ));
            }
        }
        let check = agentloop(d, &["sessions", "check", "r"]);
        assert!(
            check.status.success(),
            "{prompt}: {}",
            String::from_utf8_lossy(&check.stdout)
        );
        let replay = agentloop(d, &["replay", trace]);
        assert!(
            replay.status.success(),
            "{}",
            String::from_utf8_lossy(&replay.stderr)
        );
    }
    // (an invalid call's error result comes before the other calls of its message run)
    ends.sort();
    let got: Vec<(&str, &str)> = ends
        .iter()
        .map(|(id, status, _)| (id.as_str(), status.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("call_1", "completed"),
            ("call_1_2", "completed"),
            ("call_1_3", "completed"),
            ("call_1_4", "error"),
        ]
    );
    let results: Vec<&str> = ends.iter().map(|(_, _, r)| r.as_str()).collect();
    assert_eq!(results[..3], ["5", "20", "7"]);
    // Refused before it ran, by the check that names calls by their id in the message alone.
    assert!(
        results[3].contains("The tool did not run"),
        "{}",
        results[3]
    );
    assert!(results[3].contains("nope"), "{}", results[3]);
    assert_eq!(started, ["call_1", "call_1_2", "call_1_3"]);
}
