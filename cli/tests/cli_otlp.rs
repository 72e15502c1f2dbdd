//! OpenTelemetry both ways, as a real child process: `trace export --format otlp` writes a run's
//! GenAI spans, which `trace import --from otel-genai` reads back as the same run (with
//! `--include-content`), and `run --otlp-endpoint` never fails a run when the collector is down.
//! (`scripts/check_phoenix.py` sends a run's spans to a real Arize Phoenix.)

use std::path::Path;
use std::process::Output;

mod support;
use support::{agentloop, export, import, imported_traces, stderr, stdout};

/// The lines of `trace show` that name an assistant step (its tool calls, finish and usage),
/// without the record numbers.
fn assistant_lines(o: &Output) -> Vec<String> {
    stdout(o)
        .lines()
        .filter(|l| l.contains("assistant: "))
        .map(|l| l.split(" #").next().unwrap_or_default().to_string())
        .collect()
}

fn spans(file: &Path) -> Vec<serde_json::Value> {
    let export: serde_json::Value =
        serde_json::from_slice(&std::fs::read(file).expect("export")).expect("JSON");
    export["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn has_attribute(span: &serde_json::Value, key: &str) -> bool {
    span["attributes"]
        .as_array()
        .is_some_and(|a| a.iter().any(|kv| kv["key"] == key))
}

#[test]
fn an_exported_run_imports_back_as_recorded_and_replays_identically() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = agentloop(dir.path(), &["run", "--trace", "a.jsonl", "What is 2+3?"]);
    assert!(run.status.success(), "{}", stderr(&run));

    // Without content: the spans, their GenAI attributes, no messages.
    let bare = export(dir.path(), "otlp", &["a.jsonl", "-o", "bare.json"]);
    assert!(bare.status.success(), "{}", stderr(&bare));
    assert!(
        stdout(&bare).contains("wrote bare.json (OTLP JSON: 4 spans from 1 trace)"),
        "{}",
        stdout(&bare)
    );
    let s = spans(&dir.path().join("bare.json"));
    let names: Vec<&str> = s.iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "invoke_agent agentloop",
            "chat scripted",
            "execute_tool calculator",
            "chat scripted"
        ]
    );
    assert!(s
        .iter()
        .skip(1)
        .all(|c| c["parentSpanId"] == s[0]["spanId"]));
    assert!(has_attribute(&s[1], "gen_ai.usage.input_tokens"));
    assert!(!s.iter().any(|x| has_attribute(x, "gen_ai.input.messages")
        || has_attribute(x, "gen_ai.tool.call.arguments")));
    // The timing sidecar placed the spans: real wall-clock times, the run's first.
    let times = std::fs::read_to_string(dir.path().join("a.times.jsonl")).expect("sidecar");
    let first: serde_json::Value =
        serde_json::from_str(times.lines().next().expect("a line")).expect("JSON");
    assert_eq!(
        s[0]["startTimeUnixNano"],
        format!("{}000000", first["ts_ms"].as_u64().expect("ts_ms"))
    );
    // Content-free spans hold no conversation to import.
    let nothing = agentloop(
        dir.path(),
        &["trace", "import", "--from", "otel-genai", "bare.json"],
    );
    assert_eq!(nothing.status.code(), Some(2), "{}", stdout(&nothing));
    assert!(
        stderr(&nothing).contains("carry no messages"),
        "{}",
        stderr(&nothing)
    );

    // With content: the same run comes back, with its usage per step and its tools' schemas.
    let exported = export(
        dir.path(),
        "otlp",
        &["--include-content", "a.jsonl", "-o", "spans.json"],
    );
    assert!(exported.status.success(), "{}", stderr(&exported));
    let again = export(
        dir.path(),
        "otlp",
        &["--include-content", "a.jsonl", "-o", "again.json"],
    );
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(
        std::fs::read(dir.path().join("spans.json")).expect("spans"),
        std::fs::read(dir.path().join("again.json")).expect("again"),
        "an export is reproducible"
    );
    let back = import(dir.path(), "otel-genai", "spans.json", "back");
    assert!(back.status.success(), "{}{}", stdout(&back), stderr(&back));
    assert!(
        stdout(&back).contains("imported 1 trace into back (0 with differences)"),
        "{}",
        stdout(&back)
    );
    let imported = imported_traces(&dir.path().join("back"));
    assert_eq!(imported.len(), 1, "{imported:?}");
    let imported = imported[0].display().to_string();
    let show = agentloop(dir.path(), &["trace", "show", &imported]);
    let original = agentloop(dir.path(), &["trace", "show", "a.jsonl"]);
    assert!(!assistant_lines(&original).is_empty());
    assert_eq!(assistant_lines(&show), assistant_lines(&original));
    let tools = |o: &Output| -> Vec<String> {
        stdout(o)
            .lines()
            .filter(|l| l.contains("calculator: "))
            .map(str::to_string)
            .collect()
    };
    assert!(!tools(&original).is_empty(), "{}", stdout(&original));
    assert_eq!(tools(&show), tools(&original));
    let replay = agentloop(dir.path(), &["replay", "back"]);
    assert!(replay.status.success(), "{}", stdout(&replay));
    assert!(
        stdout(&replay).contains("1 identical"),
        "{}",
        stdout(&replay)
    );
}

#[test]
fn a_collector_that_is_down_costs_a_warning_not_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Nothing listens on a port just freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let endpoint = format!("http://127.0.0.1:{port}/v1/traces");
    let run = agentloop(
        dir.path(),
        &[
            "run",
            "--otlp-endpoint",
            &endpoint,
            "--trace",
            "t.jsonl",
            "What is 2+3?",
        ],
    );
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(
        stdout(&run).contains("The answer is 5."),
        "{}",
        stdout(&run)
    );
    assert!(
        stderr(&run).contains("[otlp] warning: spans not sent"),
        "{}",
        stderr(&run)
    );
    let refused = agentloop(dir.path(), &["run", "--otlp-header", "k=v", "hi"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(stderr(&refused).contains("need --otlp-endpoint"));
    let bad_url = agentloop(
        dir.path(),
        &["run", "--otlp-endpoint", "localhost:4318", "hi"],
    );
    assert_eq!(bad_url.status.code(), Some(2));
    assert!(stderr(&bad_url).contains("not an http:// or https:// URL"));
    let mixed = agentloop(
        dir.path(),
        &[
            "trace",
            "export",
            "--include-content",
            "t.jsonl",
            "--table",
            "runs",
            "-o",
            "x.csv",
        ],
    );
    assert_eq!(mixed.status.code(), Some(2));
    assert!(stderr(&mixed).contains("--include-content is for --format otlp"));
}

/// The span exports the instrumentations themselves wrote (`scripts/fixtures/otel_fixtures.py`:
/// OpenTelemetry's openai-v2, pydantic-ai, OpenInference) import as one trace each, with the
/// usage of both steps and the request settings, and replay identically.
#[test]
fn real_instrumentations_spans_import_and_replay_identically() {
    for name in ["openai_v2", "pydantic_ai", "openinference"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = support::fixture("otel", &format!("{name}.json"));
        let import = import(dir.path(), "otel-genai", &file, "back");
        // 1: imported, with findings (the seed has no place in a trace).
        assert_eq!(import.status.code(), Some(1), "{name}: {}", stderr(&import));
        let out = stdout(&import);
        assert!(
            out.contains("imported 1 trace into back (1 with differences)"),
            "{name}: {out}"
        );
        assert!(out.contains("seed = 7"), "{name}: {out}");
        let trace = imported_traces(&dir.path().join("back")).remove(0);
        let show = agentloop(dir.path(), &["trace", "show", &trace.display().to_string()]);
        let lines = assistant_lines(&show);
        assert_eq!(lines.len(), 2, "{name}: {}", stdout(&show));
        assert!(
            lines[0].contains("61") && lines[0].contains("17"),
            "{name}: {lines:?}"
        );
        assert!(
            lines[1].contains("98") && lines[1].contains("12"),
            "{name}: {lines:?}"
        );
        let header = std::fs::read_to_string(&trace).expect("trace");
        let header: serde_json::Value =
            serde_json::from_str(header.lines().next().expect("a header")).expect("JSON");
        let params = &header["config"]["params"];
        assert_eq!(params["temperature"], 0.2, "{name}: {header}");
        assert_eq!(params["max_tokens"], 200, "{name}: {header}");
        let replay = agentloop(dir.path(), &["replay", "back"]);
        assert!(replay.status.success(), "{name}: {}", stdout(&replay));
        assert!(
            stdout(&replay).contains("1 identical"),
            "{name}: {}",
            stdout(&replay)
        );
    }
}
