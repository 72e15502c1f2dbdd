//! Files that are not regular files, met by the real CLI binary:
//! a FIFO under `--root` read by `read_file` or appended to by `append_line` must not keep the
//! process alive after the run ends (R-TOOL-3: the per-tool timeout bounds a tool, and the
//! process exits when the run does), and a session file that is a symbolic link is refused by
//! `run`, `resume` and `sessions check`/`list`, never followed out of the store (R-IDEM-4: a
//! store failure is reported, not worked around).
#![cfg(unix)]
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::bin;

/// See tests/durable_crash.rs: `$AGENTLOOP_BIN` overrides the binary under test.
fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Runs the CLI and kills it when it has not exited after `limit`; returns its output and
/// whether it had to be killed.
fn run_bounded(mut cmd: Command, limit: Duration) -> (Output, bool) {
    let mut child = cmd
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
        std::thread::sleep(Duration::from_millis(50));
    }
    (child.wait_with_output().expect("wait"), killed)
}

/// One turn calling `tool` with `arguments`, then a final answer.
fn one_tool_script(dir: &Path, tool: &str, arguments: serde_json::Value) -> PathBuf {
    let script = serde_json::json!({"turns": [
        {"tool_calls": [{"name": tool, "arguments": arguments}]},
        {"text": "done: {{last_tool_result}}"}
    ]});
    let path = dir.join("script.json");
    std::fs::write(&path, script.to_string()).expect("script");
    path
}

/// R-TOOL-3, R-IN-3: `read_file` and `append_line` on a FIFO are refused as error results
/// (the FIFO is not a regular file) and the process exits when the run completes.
#[test]
fn r_tool_3_a_fifo_under_the_root_never_keeps_the_process_alive() {
    for (tool, arguments) in [
        ("read_file", serde_json::json!({"path": "pipe"})),
        (
            "append_line",
            serde_json::json!({"path": "pipe", "line": "x"}),
        ),
    ] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("root");
        std::fs::create_dir(&root).expect("root");
        mkfifo(&root.join("pipe"));
        let script = one_tool_script(tmp.path(), tool, arguments);
        let mut cmd = Command::new(bin());
        cmd.args(["run", "--tool-timeout", "2", "--script"])
            .arg(&script)
            .arg("--root")
            .arg(&root)
            .arg("use the pipe")
            .current_dir(tmp.path());
        let started = Instant::now();
        let (out, killed) = run_bounded(cmd, Duration::from_secs(20));
        let all = text(&out);
        assert!(
            !killed,
            "{tool}: the process did not exit within 20 s (killed): {all}"
        );
        assert!(out.status.success(), "{tool}: {all}");
        assert!(all.contains("[completed]"), "{tool}: {all}");
        assert!(
            all.contains("not a regular file") && all.contains("FIFO"),
            "{tool}: the FIFO is refused, not waited on: {all}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{tool}: took {:?}",
            started.elapsed()
        );
    }
}

fn agentloop(args: &[&str], store: &Path) -> Output {
    Command::new(bin())
        .args(args)
        .arg("--store")
        .arg(store)
        .stdin(Stdio::null())
        .output()
        .expect("run agentloop")
}

/// R-IDEM-4: a session file that is a symbolic link to a file outside the store is reported
/// by `sessions list`, refused by `sessions check`/`show`, `run` and `resume` (exit 2, naming
/// the link), and the file it points to is never read or changed.
#[test]
fn r_idem_4_a_symlinked_session_file_is_reported_and_refused_never_followed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("store");
    let out = agentloop(&["run", "--session", "real", "what is 6*7"], &store);
    assert!(out.status.success(), "{}", text(&out));
    // A valid session outside the store, whose last line is torn: a writer following the
    // link would cut it.
    let mut outside_bytes = std::fs::read(store.join("real.jsonl")).expect("session");
    outside_bytes.extend_from_slice(br#"{"v":1,"seq":99,"entry":"run_e"#);
    let outside = tmp.path().join("outside.jsonl");
    std::fs::write(&outside, &outside_bytes).expect("outside");
    std::os::unix::fs::symlink(&outside, store.join("evil.jsonl")).expect("symlink");

    let out = agentloop(&["sessions", "list"], &store);
    assert!(out.status.success(), "{}", text(&out));
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    let evil = listing
        .lines()
        .find(|l| l.starts_with("evil"))
        .unwrap_or_else(|| panic!("evil is listed: {listing}"));
    assert!(evil.contains("symbolic link"), "{listing}");
    assert!(
        !evil.contains("completed"),
        "the link was followed: {listing}"
    );

    for args in [
        &["sessions", "check", "evil"][..],
        &["sessions", "show", "evil"][..],
        &["run", "--session", "evil", "more"][..],
        &["resume", "evil"][..],
    ] {
        let out = agentloop(args, &store);
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {msg}");
        assert!(
            msg.contains("evil.jsonl") && msg.contains("symbolic link"),
            "{args:?}: {msg}"
        );
        assert!(!msg.contains("panicked"), "{msg}");
    }
    assert_eq!(
        std::fs::read(&outside).expect("outside"),
        outside_bytes,
        "the file outside the store changed"
    );
}
