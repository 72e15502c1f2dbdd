//! CLI hygiene, met by the real binary: a closed stdout pipe
//! ends the process without a panic; `trace view` never overwrites the trace it shows; a
//! FIFO or a device given as an input file fails at once with a typed error (R-SEC: inputs
//! are regular files, read with a size cap); an `--output-schema` the run could not enforce
//! is refused with exit 2; and terminal control sequences from a model, a tool name,
//! `<title>`/`<status>` text or a stored session never reach the terminal raw.
#![cfg(unix)]
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::bin;

/// See tests/durable_crash.rs: `$AGENTLOOP_BIN` overrides the binary under test (to check
/// that these tests fail on a build without the fixes).
fn agentloop(dir: &Path, args: &[&str]) -> Output {
    support::command(dir, args)
        .env_remove("RUST_LOG")
        .env("AGENTLOOP_STORE", dir.join("store"))
        .output()
        .expect("run agentloop")
}

fn both(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `args` in `dir` with stdout a pipe whose reading end is already closed.
fn with_closed_stdout(dir: &Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    Command::new(bin())
        .args(args)
        .current_dir(dir)
        .env("AGENTLOOP_STORE", dir.join("store"))
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run agentloop")
}

/// `trace schema | head -1`, `trace show T | head`, `chart react | head` and a `run` into a
/// closed pipe: the process ends as a Unix filter does (SIGPIPE), with no panic, no
/// backtrace and nothing on stderr.
#[test]
fn a_closed_stdout_pipe_ends_the_process_without_a_panic() {
    use std::os::unix::process::ExitStatusExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let recorded = agentloop(dir.path(), &["run", "What is 2+3?", "--trace", "t.jsonl"]);
    assert!(recorded.status.success(), "{}", both(&recorded));
    std::fs::write(
        dir.path().join("five.json"),
        r#"{"turns": [{"text": "5"}]}"#,
    )
    .expect("script");
    std::fs::write(dir.path().join("number.json"), r#"{"type": "number"}"#).expect("schema");
    for args in [
        &["trace", "schema"][..],
        // The typed answer `--output-schema` prints on stdout.
        &[
            "run",
            "n?",
            "--script",
            "five.json",
            "--output-schema",
            "number.json",
        ],
        &["trace", "show", "t.jsonl"],
        &["chart", "react"],
        &["run", "What is 2+3?"],
        &["tools"],
    ] {
        let out = with_closed_stdout(dir.path(), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(101), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("backtrace"), "{args:?}: {stderr}");
        // A `run` reports on stderr as it goes (tool lines) until its first answer text.
        if args[0] != "run" {
            assert_eq!(stderr, "", "{args:?}");
        }
        assert_eq!(out.status.signal(), Some(libc_sigpipe()), "{args:?}");
    }
    // And through a real `head -1`, as a person types it.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("'{}' trace schema | head -1", bin().display()))
        .current_dir(dir.path())
        .output()
        .expect("sh");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "{\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

fn libc_sigpipe() -> i32 {
    13
}

/// `trace view x.html` without `-o` would write the page over `x.html`: refused with exit
/// 2 when that is the trace itself (a trace named `.html`, or `-o` naming the trace), and a
/// file that is not a trace is left as it was too.
#[test]
fn trace_view_never_overwrites_its_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let recorded = agentloop(dir.path(), &["run", "What is 2+3?", "--trace", "run.html"]);
    assert!(recorded.status.success(), "{}", both(&recorded));
    let trace = std::fs::read(dir.path().join("run.html")).expect("trace");
    for args in [
        &["trace", "view", "run.html"][..],
        &["trace", "view", "run.html", "-o", "run.html"],
        &["trace", "view", "run.html", "-o", "./run.html"],
    ] {
        let out = agentloop(dir.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", both(&out));
        assert!(
            both(&out).contains("would overwrite the trace"),
            "{args:?}: {}",
            both(&out)
        );
        assert_eq!(
            std::fs::read(dir.path().join("run.html")).expect("trace"),
            trace
        );
    }
    // With another name the page is written, and the trace is still a trace.
    let out = agentloop(
        dir.path(),
        &["trace", "view", "run.html", "-o", "page.html"],
    );
    assert!(out.status.success(), "{}", both(&out));
    let page = std::fs::read_to_string(dir.path().join("page.html")).expect("page");
    // The page streamed a record at a time: its data is one JSON value, every record in it.
    let data = page
        .split_once("id=\"trace-data\">")
        .and_then(|(_, rest)| rest.split_once("</script>"))
        .map(|(data, _)| data)
        .expect("the trace-data element");
    let data: serde_json::Value = serde_json::from_str(data).expect("the page data is JSON");
    let records = data["records"].as_array().expect("records");
    assert_eq!(
        records.len() as u64,
        data["meta"]["end"].as_u64().expect("end")
    );
    let lines = String::from_utf8_lossy(&trace).lines().count();
    assert_eq!(records.len(), lines - 1, "every record but the header");
    assert_eq!(
        std::fs::read(dir.path().join("run.html")).expect("trace"),
        trace
    );
    // A page that is not a trace: refused as a trace, left intact, no stray temporary file.
    std::fs::write(dir.path().join("x.html"), "<html>mine</html>").expect("write");
    let out = agentloop(dir.path(), &["trace", "view", "x.html"]);
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("x.html")).expect("x"),
        "<html>mine</html>"
    );
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
}

/// Runs the CLI and kills it when it has not exited after `limit`; returns its output and
/// whether it had to be killed.
fn run_bounded(dir: &Path, args: &[&str], limit: Duration) -> (Output, bool) {
    let mut child = Command::new(bin())
        .args(args)
        .current_dir(dir)
        .env("AGENTLOOP_STORE", dir.join("store"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agentloop");
    let started = Instant::now();
    let mut killed = false;
    while child.try_wait().expect("try_wait").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            killed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (child.wait_with_output().expect("wait"), killed)
}

/// R-SEC: every input file the CLI reads — `--script`, `--tool-rules`, `--output-schema`, a
/// trace (`trace show|view|diff`, `replay`), an import (`trace import`), a capture
/// (`decode`) — given as a FIFO nobody writes to or as `/dev/zero` fails within 10 s with
/// exit 2 and says what the path is, instead of blocking forever or reading until memory
/// runs out.
#[test]
fn r_sec_a_fifo_or_a_device_as_an_input_file_fails_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("pipe");
    let status = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(status.success());
    let recorded = agentloop(dir.path(), &["run", "What is 2+3?", "--trace", "t.jsonl"]);
    assert!(recorded.status.success(), "{}", both(&recorded));
    for (path, kind) in [("pipe", "FIFO"), ("/dev/zero", "character device")] {
        let cases: Vec<Vec<&str>> = vec![
            vec!["run", "hi", "--script", path],
            vec!["run", "hi", "--tool-rules", path],
            vec!["run", "hi", "--output-schema", path],
            vec!["trace", "show", path],
            vec!["trace", "view", path, "-o", "page.html"],
            vec!["trace", "diff", "t.jsonl", path],
            vec!["replay", path],
            vec!["replay", path, "--set", "max_steps=3"],
            vec!["trace", "import", "--from", "openai-chat", path],
            vec!["decode", "--provider", "openai", path],
        ];
        for args in cases {
            let started = Instant::now();
            let (out, killed) = run_bounded(dir.path(), &args, Duration::from_secs(10));
            let all = both(&out);
            assert!(!killed, "{args:?} still running after 10 s: {all}");
            assert!(started.elapsed() < Duration::from_secs(10), "{args:?}");
            assert_eq!(out.status.code(), Some(2), "{args:?}: {all}");
            assert!(
                all.contains("not a regular file") && all.contains(kind),
                "{args:?}: {all}"
            );
        }
    }
}

/// An `--output-schema` whose `$ref` cannot be resolved (a missing definition, or a remote
/// document this program does not fetch) would leave answers unchecked: exit 2, naming the
/// flag and the problem, before any model call.
#[test]
fn an_output_schema_with_an_unresolvable_ref_is_refused_with_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, schema) in [
        (
            "missing.json",
            serde_json::json!({"type": "object", "properties": {"n": {"$ref": "#/$defs/nope"}}}),
        ),
        (
            "remote.json",
            serde_json::json!({"$ref": "https://example.invalid/schema.json"}),
        ),
        // A definition no validation reaches still has its `$ref`s checked (the validator
        // builds without them; the provider gets the whole schema).
        (
            "unused.json",
            serde_json::json!({"type": "object", "$defs": {"a": {"$ref": "#/$defs/nope"}}}),
        ),
        (
            "unused_remote.json",
            serde_json::json!({"definitions": {"a": {"items": {"$ref": "https://example.invalid/a.json"}}}}),
        ),
    ] {
        std::fs::write(dir.path().join(name), schema.to_string()).expect("schema");
        let out = agentloop(
            dir.path(),
            &["run", "What is 2+3?", "--output-schema", name],
        );
        let all = both(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {all}");
        assert!(all.contains("--output-schema"), "{name}: {all}");
        assert!(all.contains("the run can enforce"), "{name}: {all}");
        assert!(!all.contains("The answer is"), "no run: {all}");
    }
    // A schema that resolves still runs.
    std::fs::write(
        dir.path().join("ok.json"),
        serde_json::json!({"$defs": {
            "n": {"type": "number"},
            "tree": {"type": "array", "items": {"$ref": "#/$defs/tree"}},
            "root": {"$ref": "#"},
            "meta": {"$ref": "https://json-schema.org/draft/2020-12/schema"}},
            "$ref": "#/$defs/n"})
        .to_string(),
    )
    .expect("schema");
    let script = serde_json::json!({"turns": [{"text": "5"}]});
    std::fs::write(dir.path().join("s.json"), script.to_string()).expect("script");
    let out = agentloop(
        dir.path(),
        &[
            "run",
            "n?",
            "--script",
            "s.json",
            "--output-schema",
            "ok.json",
        ],
    );
    assert!(out.status.success(), "{}", both(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "5");
}

/// An OSC 52 clipboard write (`ESC ] 52 ; c ; … BEL`).
const OSC52: &str = "\x1b]52;c;ZXZpbA==\x07";

/// No ESC, BEL or C1 control in `bytes` (what a terminal would act on).
fn raw_controls(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    text.chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
}

/// A model that calls a tool whose name carries an OSC 52 sequence, says `<status>` and
/// `<title>` with control sequences, and answers with one: the text output (stdout and
/// stderr), `trace show`, `sessions show` and `sessions export --format markdown` print it
/// escaped (`\x1b]52…`), never raw; `--events json` and `trace show --format json` keep it as
/// JSON escapes.
#[test]
fn control_sequences_from_the_model_never_reach_the_terminal_raw() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = serde_json::json!({"turns": [
        {"text": format!("<status>busy{OSC52}</status><title>t\x1b]0;pwned\x07</title>"),
         "tool_calls": [{"name": format!("calc{OSC52}"), "arguments": {"x": OSC52}}]},
        {"text": format!("done {OSC52} \u{9b}2J bye")}
    ]});
    std::fs::write(dir.path().join("s.json"), script.to_string()).expect("script");
    let out = agentloop(
        dir.path(),
        &[
            "run",
            "go",
            "--script",
            "s.json",
            "--session",
            "osc",
            "--trace",
            "t.jsonl",
        ],
    );
    let all = both(&out);
    assert!(!raw_controls(&out.stdout), "stdout: {all:?}");
    assert!(!raw_controls(&out.stderr), "stderr: {all:?}");
    assert!(all.contains("done \\x1b]52;c;ZXZpbA==\\x07"), "{all}");
    assert!(
        all.contains("calc\\x1b]52"),
        "the tool name, escaped: {all}"
    );
    assert!(all.contains("[status] busy\\x1b]52"), "{all}");
    for args in [
        &["trace", "show", "t.jsonl"][..],
        &["sessions", "show", "osc"],
        &["sessions", "export", "osc", "--format", "markdown"],
        &["sessions", "list"],
        &["replay", "t.jsonl", "--set", "max_steps=1"],
    ] {
        let shown = agentloop(dir.path(), args);
        let text = both(&shown);
        assert!(!raw_controls(&shown.stdout), "{args:?}: {text:?}");
        assert!(!raw_controls(&shown.stderr), "{args:?}: {text:?}");
    }
    let shown = agentloop(dir.path(), &["sessions", "show", "osc"]);
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains("\\x1b]52"),
        "{}",
        both(&shown)
    );
    // Machine output: JSON escapes, and the values are intact.
    let json = agentloop(
        dir.path(),
        &["run", "go", "--script", "s.json", "--events", "json"],
    );
    assert!(!raw_controls(&json.stdout), "{}", both(&json));
    let texts: Vec<serde_json::Value> = String::from_utf8_lossy(&json.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert!(
        texts
            .iter()
            .any(|e| e.to_string().contains("\\u001b]52;c;ZXZpbA==\\u0007")),
        "the sequence is in the events, as JSON escapes"
    );
    let show = agentloop(
        dir.path(),
        &["trace", "show", "t.jsonl", "--format", "json"],
    );
    assert!(show.status.success(), "{}", both(&show));
    assert!(!raw_controls(&show.stdout), "{}", both(&show));
    let value: serde_json::Value = serde_json::from_slice(&show.stdout).expect("JSON");
    assert!(value.to_string().contains("\u{9b}2J"), "C1 kept as a value");
}

/// A minimal MCP stdio server (Python) with one tool whose description carries an OSC 52
/// clipboard write and a clear-screen: `agentloop tools` lists it escaped, never raw.
const OSC_SERVER: &str = r#"
import json, sys
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line); mid = msg.get("id"); method = msg.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}}, "serverInfo": {"name": "osc", "version": "0"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [{
            "name": "osc_tool",
            "description": "copies \u001b]52;c;ZXZpbA==\u0007 then \u001b[2J\u009b2J clears",
            "inputSchema": {"type": "object"}}]}})
    elif mid is not None and method is not None:
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
"#;

#[test]
fn mcp_tool_descriptions_are_listed_escaped() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("server.py"), OSC_SERVER).expect("server");
    let out = agentloop(dir.path(), &["tools", "--mcp", "python3 server.py"]);
    let all = both(&out);
    assert!(out.status.success(), "{all}");
    assert!(!raw_controls(&out.stdout), "{all:?}");
    assert!(!raw_controls(&out.stderr), "{all:?}");
    assert!(
        all.contains("copies \\x1b]52;c;ZXZpbA==\\x07 then \\x1b[2J\\u{9b}2J clears"),
        "{all}"
    );
}

/// Log lines (`RUST_LOG`) follow `--color` and `NO_COLOR` like the rest of the output: no
/// escape sequence with `--color never` or `NO_COLOR`, colors with `--color always`.
#[test]
fn log_output_follows_color_never_and_no_color() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logged = |args: &[&str], no_color: bool| {
        let mut cmd = Command::new(bin());
        cmd.args(args)
            .current_dir(dir.path())
            .env("RUST_LOG", "agentloop=info")
            .env("AGENTLOOP_STORE", dir.path().join("store"))
            .stdin(Stdio::null());
        if no_color {
            cmd.env("NO_COLOR", "1");
        } else {
            cmd.env_remove("NO_COLOR");
        }
        let out = cmd.output().expect("run agentloop");
        assert!(out.status.success(), "{}", both(&out));
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(stderr.contains("state_changed"), "logged: {stderr}");
        stderr
    };
    let never = logged(&["run", "--color", "never", "What is 2+3?"], false);
    assert!(!never.contains('\u{1b}'), "{never:?}");
    let no_color = logged(&["run", "What is 2+3?"], true);
    assert!(!no_color.contains('\u{1b}'), "{no_color:?}");
    let always = logged(&["run", "--color", "always", "What is 2+3?"], false);
    assert!(always.contains('\u{1b}'), "{always:?}");
}
