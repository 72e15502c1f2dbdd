//! `trace import` on large and failing inputs, met by the real binary:
//! a 2,000-turn, half-megabyte recording imports fully inside a 1 GiB address space
//! (the import held every request in memory and died there, leaving an empty trace file); a
//! failed import leaves no trace, no script and no temporary file, and an existing trace as
//! it was.
#![cfg(unix)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

mod support;
use support::bin;

/// `$AGENTLOOP_BIN` overrides the binary under test (to check that these tests fail on a
/// build without the fixes).
/// Runs `agentloop ARGS` in `dir` with its address space capped at `limit_kib` (`ulimit -v`).
fn agentloop_within(dir: &Path, limit_kib: u64, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {limit_kib} && exec \"$0\" \"$@\""))
        .arg(bin())
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env("AGENTLOOP_STORE", dir.join("store"))
        .stdin(Stdio::null())
        .output()
        .expect("run agentloop")
}

fn agentloop(dir: &Path, args: &[&str]) -> Output {
    agentloop_within(dir, 4 * 1024 * 1024, args)
}

fn both(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A chat-completions recording of `turns` tool calls with their results, each result
/// `pad` bytes long.
fn recording(turns: usize, pad: usize) -> String {
    let mut m = vec![
        serde_json::json!({"role": "system", "content": "sys"}),
        serde_json::json!({"role": "user", "content": "go"}),
    ];
    for i in 0..turns {
        m.push(
            serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{i}"), "type": "function",
             "function": {"name": "calc", "arguments": format!("{{\"x\":{i}}}")}}]}),
        );
        m.push(
            serde_json::json!({"role": "tool", "tool_call_id": format!("c{i}"),
                                  "content": format!("{i}{}", "r".repeat(pad))}),
        );
    }
    m.push(serde_json::json!({"role": "assistant", "content": "done"}));
    serde_json::Value::Array(m).to_string()
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    n.sort();
    n
}

#[test]
fn r_trace_1_a_2000_turn_half_megabyte_recording_imports_fully_in_bounded_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = recording(2_000, 60);
    assert!(text.len() > 500_000, "{}", text.len());
    std::fs::write(dir.path().join("chat.json"), &text).expect("write");
    let out = agentloop_within(
        dir.path(),
        1024 * 1024,
        &["trace", "import", "--from", "openai-chat", "chat.json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("imported 2001 assistant messages as chat.trace.jsonl (98041 records;"),
        "{stdout}"
    );
    assert!(stdout.contains("2001 steps, 2000 tool calls"), "{stdout}");
    // The whole trace, and nothing else, is there: a header, then every record in order.
    let trace = dir.path().join("chat.trace.jsonl");
    let file = std::fs::File::open(&trace).expect("open trace");
    let mut lines = 0usize;
    let mut last = String::new();
    for line in std::io::BufRead::lines(std::io::BufReader::new(file)) {
        last = line.expect("line");
        lines += 1;
    }
    assert_eq!(lines, 98_042);
    let last: serde_json::Value = serde_json::from_str(&last).expect("json");
    assert_eq!(last["index"], 98_040);
    assert_eq!(
        names(dir.path()),
        ["chat.json", "chat.script.json", "chat.trace.jsonl"]
    );
}

#[test]
fn r_trace_1_a_failed_import_leaves_no_trace_and_an_existing_one_as_it_was() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Bad input: nothing is written.
    std::fs::write(
        dir.path().join("bad.json"),
        r#"[{"role": "user", "content": "hi"}, {"role": "wizard"}]"#,
    )
    .expect("write");
    let out = agentloop(
        dir.path(),
        &["trace", "import", "--from", "openai-chat", "bad.json"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    assert!(
        both(&out).contains("unknown role `wizard`"),
        "{}",
        both(&out)
    );
    assert_eq!(names(dir.path()), ["bad.json"]);
    // An existing trace stays as it was when the import fails.
    std::fs::write(dir.path().join("bad.trace.jsonl"), "kept\n").expect("write");
    let out = agentloop(
        dir.path(),
        &["trace", "import", "--from", "openai-chat", "bad.json"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("bad.trace.jsonl")).expect("read"),
        "kept\n"
    );
    // A trace that cannot be written (a directory in its place): no script, no temporary
    // file, the directory untouched.
    std::fs::write(dir.path().join("ok.json"), recording(3, 0)).expect("write");
    std::fs::create_dir(dir.path().join("taken")).expect("mkdir");
    let out = agentloop(
        dir.path(),
        &[
            "trace",
            "import",
            "--from",
            "openai-chat",
            "ok.json",
            "--out",
            "taken",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    assert!(both(&out).contains("error: taken:"), "{}", both(&out));
    assert_eq!(
        names(dir.path()),
        ["bad.json", "bad.trace.jsonl", "ok.json", "taken"]
    );
    assert!(names(&dir.path().join("taken")).is_empty());
}

#[test]
fn r_trace_1_a_2_megabyte_conversation_imports_linearly_and_a_corpus_replays_past_an_oversized_trace(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    // 1,000 turns of 2 KB results (every turn also costs about 9 KB of fixed records:
    // transitions, events, and the result recorded as input, event and session entry).
    let text = recording(1_000, 2_000);
    assert!(text.len() > 2_000_000, "{}", text.len());
    std::fs::write(dir.path().join("chat.json"), &text).expect("write");
    let out = agentloop(
        dir.path(),
        &["trace", "import", "--from", "openai-chat", "chat.json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    // Each request records only the messages added since the previous one.
    let trace = std::fs::metadata(dir.path().join("chat.trace.jsonl"))
        .expect("trace")
        .len();
    assert!(
        trace < 10 * text.len() as u64,
        "a {} byte conversation wrote a {trace} byte trace",
        text.len()
    );
    // A corpus: the imported trace (replayed a record at a time, in bounded memory), a
    // recorded one, and one whose line is over the line limit.
    let corpus = dir.path().join("corpus");
    std::fs::create_dir(&corpus).expect("mkdir");
    std::fs::rename(
        dir.path().join("chat.trace.jsonl"),
        corpus.join("chat.jsonl"),
    )
    .expect("move");
    let out = agentloop(
        dir.path(),
        &["run", "What is 2+3?", "--trace", "corpus/run.jsonl"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let header = std::fs::read_to_string(corpus.join("run.jsonl"))
        .expect("run trace")
        .lines()
        .next()
        .expect("header")
        .to_string();
    let huge = format!(
        "{header}\n{{\"kind\":\"input\",\"pad\":\"{}\"}}\n",
        "x".repeat(300_000)
    );
    std::fs::write(corpus.join("huge.jsonl"), huge).expect("write");
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 1048576 && exec \"$0\" \"$@\"")
        .arg(bin())
        .args(["replay", "corpus"])
        .current_dir(dir.path())
        .env("AGENTLOOP_TRACE_MAX_LINE_BYTES", "200000")
        .output()
        .expect("run agentloop");
    let all = both(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains("replayed 3 traces: 2 identical, 0 diverged, 1 unreadable"),
        "{all}"
    );
    assert!(
        all.contains("huge.jsonl:2: the trace is over its line limit of 200000 bytes"),
        "{all}"
    );
    // The HTML view holds each record as the file does: it grows with the trace too.
    let out = agentloop(
        dir.path(),
        &["trace", "view", "corpus/chat.jsonl", "-o", "chat.html"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let page = std::fs::metadata(dir.path().join("chat.html"))
        .expect("page")
        .len();
    assert!(page < 2 * trace, "a {trace} byte trace, a {page} byte page");
}

#[test]
fn r_trace_1_export_writes_the_rows_of_each_trace_as_it_reads_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 1,500 names of one recorded trace: their 106,500 rows collected need more than 48 MiB
    // of data segment (about 70 MiB); written as each trace is read, they need about 27.
    let corpus = dir.path().join("corpus");
    std::fs::create_dir(&corpus).expect("mkdir");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/traces/v6-retry-after.jsonl");
    for i in 0..1_500 {
        std::fs::hard_link(&fixture, corpus.join(format!("t{i:04}.jsonl"))).expect("link");
    }
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -d 49152 && exec \"$0\" \"$@\"")
        .arg(bin())
        .args([
            "trace",
            "export",
            "corpus",
            "--table",
            "events",
            "-o",
            "events.csv",
        ])
        .current_dir(dir.path())
        .output()
        .expect("run agentloop");
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("wrote events.csv (106500 rows from 1500 traces)"),
        "{stdout}"
    );
    let csv = std::fs::File::open(dir.path().join("events.csv")).expect("csv");
    assert_eq!(
        std::io::BufRead::lines(std::io::BufReader::new(csv)).count(),
        106_501
    );
}
