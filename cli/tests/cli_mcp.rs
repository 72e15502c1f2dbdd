//! `agentloop run --mcp` / `--mcp-http` and `agentloop tools` as real child processes, with the
//! scripted model calling the tools of real third-party MCP servers: npm's
//! `@modelcontextprotocol/server-everything` and PyPI's `mcp-server-time`.
//!
//! The servers are found through `MCP_EVERYTHING_BIN` and `MCP_TIME_PY` (`.ci/run` installs
//! both); without them a test prints why it skips, except with `CI` set, where it fails.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentloop_testkit::external::{read_pid_file, server_env, wait_process_ended};
use serde_json::{json, Value};

mod support;
use support::agentloop;

fn write_script(dir: &Path, script: Value) {
    std::fs::write(dir.join("s.json"), script.to_string()).expect("script");
}

/// `agentloop run --script s.json --events json ARGS` in `dir`, which must succeed; its stdout.
fn run_script(dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["run", "--script", "s.json", "--events", "json"];
    all.extend_from_slice(args);
    let out = agentloop(dir, &all);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The `run_end` event's final answer in `--events json` output.
fn final_answer(stdout: &str) -> String {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "run_end")
        .and_then(|e| e["final_text"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no run_end with a final_text in {stdout}"))
}

/// A `--mcp` value that starts server-everything on stdio after writing its pid to
/// `pid_file` (the shell execs the server, so the pid is the server's).
fn everything_with_pid_file(bin: &str, pid_file: &Path) -> String {
    format!(
        "sh -c 'echo $$ > \"{}\"; exec \"$0\" stdio' '{bin}'",
        pid_file.display()
    )
}

/// A child killed (and reaped) when dropped, also when an assertion fails first.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn tools_lists_builtins_and_both_servers_tools() {
    let (Some(bin), Some(py)) = (server_env("MCP_EVERYTHING_BIN"), server_env("MCP_TIME_PY"))
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let out = agentloop(
        dir.path(),
        &[
            "tools",
            "--mcp",
            &format!("'{bin}' stdio"),
            "--mcp",
            &format!("{py} -m mcp_server_time"),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for expected in [
        "calculator",
        "read_file",
        "echo",
        "get-sum",
        "get_current_time",
        "convert_time",
    ] {
        assert!(names.contains(&expected), "{expected} not in:\n{stdout}");
    }
    let echo = stdout
        .lines()
        .find(|l| l.starts_with("echo "))
        .expect("echo line");
    assert!(
        echo.contains("Echo"),
        "first line of the description: {echo}"
    );
    assert_eq!(stdout.lines().count(), names.len(), "one line a tool");
}

#[test]
fn run_calls_the_time_servers_tool() {
    let Some(py) = server_env("MCP_TIME_PY") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    write_script(
        dir.path(),
        json!({"turns": [
            {"tool_calls": [{"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}]},
            {"text": "It is {{last_tool_result}}"}]}),
    );
    let mcp = format!("{py} -m mcp_server_time");
    let stdout = run_script(dir.path(), &["--mcp", &mcp, "time?"]);
    let answer = final_answer(&stdout);
    let result: Value = serde_json::from_str(answer.trim_start_matches("It is "))
        .unwrap_or_else(|e| panic!("the tool result is the server's JSON ({e}): {answer}"));
    assert_eq!(result["timezone"], "Asia/Tokyo", "{answer}");
    assert!(stdout.contains(r#""type":"tool_end","tool_call_id":"call_0_0","name":"get_current_time","status":"completed""#));
}

#[test]
fn run_calls_everything_over_stdio_and_over_http() {
    let Some(bin) = server_env("MCP_EVERYTHING_BIN") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    write_script(
        dir.path(),
        json!({"turns": [
            {"tool_calls": [{"name": "echo", "arguments": {"message": "hi from the cli"}}]},
            {"text": "Got {{last_tool_result}}"}]}),
    );
    let stdio = format!("'{bin}' stdio");
    let stdout = run_script(dir.path(), &["--mcp", &stdio, "go"]);
    assert_eq!(final_answer(&stdout), "Got Echo: hi from the cli");

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let _http = Killed(
        Command::new(&bin)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starts the HTTP server"),
    );
    let url = format!("http://127.0.0.1:{port}/mcp");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the HTTP server did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    let stdout = run_script(dir.path(), &["--mcp-http", &url, "go"]);
    assert_eq!(final_answer(&stdout), "Got Echo: hi from the cli");
}

#[test]
fn a_server_killed_mid_call_is_an_error_result_and_the_run_completes() {
    let Some(bin) = server_env("MCP_EVERYTHING_BIN") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("server.pid");
    // A 60 s call the test cuts short by killing the server, then a call to the restarted
    // server, then an answer quoting both results.
    write_script(
        dir.path(),
        json!({"turns": [
            {"tool_calls": [{"name": "trigger-long-running-operation",
                             "arguments": {"duration": 60, "steps": 2}}]},
            {"text": "first: {{last_tool_result}}",
             "tool_calls": [{"name": "echo", "arguments": {"message": "after the restart"}}]},
            {"text": "second: {{last_tool_result}}"}]}),
    );
    let mcp = everything_with_pid_file(&bin, &pid_file);
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentloop"))
        .args([
            "run", "--script", "s.json", "--events", "json", "--mcp", &mcp, "go",
        ])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run agentloop");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    // Wait for the long call to start, then kill the server under it.
    for line in lines.by_ref() {
        let line = line.expect("a line");
        let started_long = line.contains(r#""type":"tool_start""#)
            && line.contains("trigger-long-running-operation");
        seen.push(line);
        if started_long {
            break;
        }
    }
    let first = read_pid_file(&pid_file, Duration::from_secs(10));
    std::fs::remove_file(&pid_file).expect("pid file");
    // `tool_start` comes just before the request is sent; a second is ample for it to be on
    // the wire (a kill before it would make the call restart the server and run for 60 s).
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: kill(2) on the pid of the MCP server this test's agentloop started.
    assert_eq!(unsafe { libc::kill(first, libc::SIGKILL) }, 0);
    seen.extend(lines.map_while(Result::ok));
    let status = child.wait().expect("agentloop exits");
    let stdout = seen.join("\n");
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "the killed call waited for its 60 s"
    );
    let long_end = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "tool_end" && e["name"] == "trigger-long-running-operation")
        .expect("the long call ended");
    assert_eq!(long_end["status"], "error", "{long_end}");
    // The second step quoted the killed call's result; the answer, the restarted server's.
    let second_step = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "response_complete" && e["model_call_index"] == 2)
        .expect("a second step");
    let quoted = second_step["message"]["text"].as_str().unwrap_or_default();
    assert!(
        quoted.starts_with("first: MCP server sh died during the call"),
        "the error result names the server: {quoted}"
    );
    assert_eq!(final_answer(&stdout), "second: Echo: after the restart");
    // The restarted server did not outlive agentloop.
    let second = read_pid_file(&pid_file, Duration::from_secs(10));
    assert_ne!(first, second);
    wait_process_ended(second, Duration::from_secs(10));
}

#[test]
fn an_mcp_server_that_cannot_start_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = agentloop(
        dir.path(),
        &["run", "--mcp", "/nonexistent/mcp-server --flag", "go"],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("MCP server /nonexistent/mcp-server: cannot start it"),
        "{stderr}"
    );
    let out = agentloop(dir.path(), &["tools", "--mcp", "srv 'unbalanced"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--mcp"));
}
