//! Files that are not regular files, met by the real CLI binary (issue 9, items 2 and 3):
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

/// See tests/durable_crash.rs: `$AGENTLOOP_BIN` overrides the binary under test.
fn bin() -> PathBuf {
    std::env::var_os("AGENTLOOP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_agentloop")))
}

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
