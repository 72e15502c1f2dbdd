//! The session CLI as a user meets it: the lock ("locked"), a torn last line (warning), a
//! corrupt middle line (error naming file and offset), `sessions check` on a broken session,
//! export, and `resume` on a finished session.
#![allow(clippy::disallowed_methods)] // tests and benchmarks may read the wall clock

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::bin;

/// See tests/durable_crash.rs: `$AGENTLOOP_BIN` overrides the binary under test.
fn agentloop(args: &[&str], store: &Path) -> Output {
    Command::new(bin())
        .args(args)
        .arg("--store")
        .arg(store)
        .output()
        .expect("run agentloop")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A completed session `done` (demo script: one calculator call, then the answer).
fn completed_session(store: &Path) -> Vec<u8> {
    let out = agentloop(&["run", "--session", "done", "what is 6*7"], store);
    assert!(out.status.success(), "{}", text(&out));
    std::fs::read(store.join("done.jsonl")).unwrap()
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_second_run_on_a_locked_session_fails_with_locked() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let script = tmp.path().join("stall.json");
    std::fs::write(
        &script,
        r#"{"turns": [{"errors": [{"stall": true}], "text": "never"}]}"#,
    )
    .unwrap();
    let first = KillOnDrop(
        Command::new(bin())
            .args(["run", "--session", "x", "--stall-timeout", "60"])
            .args(["--first-chunk-timeout", "60", "--store"])
            .arg(&store)
            .arg("--script")
            .arg(&script)
            .arg("hold the lock")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // The user input is written under the lock.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(store.join("x.jsonl")).is_ok_and(|s| s.contains("user_input")) {
        assert!(Instant::now() < deadline, "the first run never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    for args in [
        &["run", "--session", "x", "again"][..],
        &["resume", "x"][..],
    ] {
        let out = agentloop(args, &store);
        assert!(!out.status.success());
        let msg = text(&out);
        assert!(msg.contains("locked"), "{msg}");
        assert!(msg.contains("session x"), "{msg}");
    }
    // Reading is allowed beside the running session.
    let out = agentloop(&["sessions", "show", "x"], &store);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("interrupted"), "{}", text(&out));
    drop(first);
}

#[test]
fn torn_last_line_is_a_warning_and_is_cut_by_the_next_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let good = completed_session(&store);
    let mut torn = good.clone();
    torn.extend_from_slice(br#"{"v":1,"seq":99,"entry":"run_e"#);
    std::fs::write(store.join("done.jsonl"), &torn).unwrap();

    let out = agentloop(&["sessions", "show", "done"], &store);
    assert!(out.status.success(), "{}", text(&out));
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(msg.contains("warning") && msg.contains(&format!("byte offset {}", good.len())));
    assert_eq!(
        std::fs::read(store.join("done.jsonl")).unwrap(),
        torn,
        "show only reads"
    );
    let out = agentloop(&["sessions", "check", "done"], &store);
    assert!(out.status.success(), "{}", text(&out));

    // resume takes the lock, cuts the torn tail, and finds nothing to resume.
    let out = agentloop(&["resume", "done"], &store);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("no interrupted run"), "{}", text(&out));
    assert_eq!(std::fs::read(store.join("done.jsonl")).unwrap(), good);
}

#[test]
fn corrupt_middle_line_is_an_error_naming_file_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let good = completed_session(&store);
    let second_line = good.iter().position(|&b| b == b'\n').unwrap() + 1;
    let mut bad = good.clone();
    bad[second_line + 3] = b'#';
    std::fs::write(store.join("done.jsonl"), &bad).unwrap();
    for args in [
        &["sessions", "show", "done"][..],
        &["sessions", "check", "done"][..],
        &["sessions", "export", "done"][..],
        &["resume", "done"][..],
        &["run", "--session", "done", "more"][..],
    ] {
        let out = agentloop(args, &store);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let msg = text(&out);
        assert!(msg.contains("done.jsonl"), "{args:?}: {msg}");
        assert!(
            msg.contains(&format!("byte offset {second_line}")),
            "{args:?}: {msg}"
        );
        assert!(!msg.contains("panicked"), "{msg}");
    }
    assert_eq!(
        std::fs::read(store.join("done.jsonl")).unwrap(),
        bad,
        "never rewritten"
    );
    let out = agentloop(&["sessions", "list"], &store);
    assert!(out.status.success());
    assert!(text(&out).contains("corrupt"), "{}", text(&out));
}

#[test]
fn check_reports_violations_and_exits_1() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let good = String::from_utf8(completed_session(&store)).unwrap();
    // Duplicate the tool result line (with the next seq) before the run end.
    let lines: Vec<&str> = good.lines().collect();
    let result = lines
        .iter()
        .position(|l| l.contains(r#""entry":"tool_result""#))
        .unwrap();
    let mut out_lines: Vec<String> = lines[..=result].iter().map(|s| s.to_string()).collect();
    out_lines.push(lines[result].replace(
        &format!(r#""seq":{}"#, result + 1),
        &format!(r#""seq":{}"#, result + 2),
    ));
    for (i, l) in lines[result + 1..].iter().enumerate() {
        let seq = result + 2 + i;
        out_lines.push(l.replace(
            &format!(r#""seq":{}"#, seq),
            &format!(r#""seq":{}"#, seq + 1),
        ));
    }
    std::fs::write(store.join("done.jsonl"), out_lines.join("\n") + "\n").unwrap();
    let out = agentloop(&["sessions", "check", "done"], &store);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("second result for tool call"),
        "{}",
        text(&out)
    );
}

#[test]
fn export_jsonl_reproduces_the_file_and_markdown_is_readable() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let good = completed_session(&store);
    let out = agentloop(&["sessions", "export", "done", "--format", "jsonl"], &store);
    assert!(out.status.success());
    assert_eq!(out.stdout, good);
    let out = agentloop(
        &["sessions", "export", "done", "--format", "markdown"],
        &store,
    );
    assert!(out.status.success());
    let md = String::from_utf8(out.stdout).unwrap();
    assert!(md.starts_with("# Session `done`"), "{md}");
    assert!(md.contains("calculator") && md.contains("42"), "{md}");
    let out = agentloop(&["sessions", "show", "nope"], &store);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("no session nope"), "{}", text(&out));
}

/// R-IDEM-7: a session file holding a forged orphan tool result (a result for a call no turn
/// made) fails `sessions check`; the next `run` on the session repairs it before its model
/// request (a `session_repaired` event in `--events json`, the orphan nowhere in the trace)
/// and records the repair, so `sessions check` passes afterwards.
#[test]
fn r_idem_7_run_repairs_a_forged_orphan_result_and_check_then_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let good = String::from_utf8(completed_session(&store)).unwrap();
    let seq = good.lines().count() + 1;
    let forged = format!(
        r#"{{"v":1,"seq":{seq},"entry":"tool_result","run_id":"forged","result":{{"tool_call_id":"forged_call_1","name":"calculator","content":"999","status":"completed"}}}}"#
    );
    std::fs::write(store.join("done.jsonl"), format!("{good}{forged}\n")).unwrap();

    let out = agentloop(&["sessions", "check", "done"], &store);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = text(&out);
    assert!(
        report.contains(&format!(
            "entry {}: result for tool call forged_call_1, which no earlier turn made",
            seq - 1
        )),
        "{report}"
    );

    // The demo script has two turns, both used by the session: a third answers the new prompt.
    let script = tmp.path().join("three.json");
    std::fs::write(
        &script,
        r#"{"turns": [{"text": "unused"}, {"text": "unused"}, {"text": "repaired and answered"}]}"#,
    )
    .unwrap();
    let trace = tmp.path().join("trace.jsonl");
    let out = Command::new(bin())
        .args(["run", "--session", "done", "--events", "json", "--script"])
        .arg(&script)
        .arg("--trace")
        .arg(&trace)
        .arg("--store")
        .arg(&store)
        .arg("and now?")
        .output()
        .expect("run agentloop");
    assert!(out.status.success(), "{}", text(&out));
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let repaired: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["type"] == "session_repaired")
        .collect();
    assert_eq!(repaired.len(), 1, "{events:?}");
    assert_eq!(
        repaired[0]["repair"],
        serde_json::json!({"kind": "orphan_result_dropped", "index": seq - 1, "tool_call_id": "forged_call_1"})
    );
    let first_request = events.iter().position(|e| e["type"] == "request_start");
    let repair_at = events.iter().position(|e| e["type"] == "session_repaired");
    assert!(repair_at < first_request, "{events:?}");
    // The model request (in the trace: the run's history and its call_model effects) never
    // holds the orphan.
    let trace = std::fs::read_to_string(&trace).unwrap();
    assert!(trace.contains("call_model"), "{trace}");
    assert!(!trace.contains("forged_call_1"), "{trace}");

    let out = agentloop(&["sessions", "check", "done"], &store);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("session done: ok"), "{}", text(&out));
    let out = agentloop(&["sessions", "show", "done"], &store);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("repair") && text(&out).contains("forged_call_1"),
        "{}",
        text(&out)
    );
    // The file was only appended to.
    let after = std::fs::read_to_string(store.join("done.jsonl")).unwrap();
    assert!(after.starts_with(&format!("{good}{forged}\n")));
}
