//! `agentloop tools --mcp` against a hostile MCP server: 10,000 tools are
//! listed in seconds (inserting them one by one was O(n²): 87 s for 8,000), endless
//! `tools/list` pagination ends with a typed error, and names the providers refuse (one over
//! 65,535 bytes made the listing panic) are skipped. The server is
//! `tests/fixtures/mcp/hostile_server.py`, a real child process.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn tools(server_args: &str) -> (Output, Duration) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/mcp/hostile_server.py")
        .display()
        .to_string();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_agentloop"))
        .args([
            "tools",
            "--mcp",
            &format!("python3 '{script}' {server_args}"),
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run agentloop");
    (out, started.elapsed())
}

#[test]
fn ten_thousand_tools_are_listed_in_seconds() {
    let (out, took) = tools("many 10000 100");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = stdout.lines().filter(|l| l.starts_with('t')).count();
    assert_eq!(listed, 10_000);
    assert!(stdout.lines().any(|l| l.starts_with("t09999 ")), "{stdout}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn endless_pagination_fails_with_a_typed_error() {
    let (out, took) = tools("endless 0 0");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("its tool list has more than 1024 pages (McpOptions::max_list_pages)"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
}

#[test]
fn names_the_providers_refuse_are_skipped_without_a_panic() {
    let (out, _) = tools("names");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stdout.lines().any(|l| l.starts_with("good_tool-1 ")),
        "{stdout}"
    );
    assert!(stdout.lines().any(|l| l.starts_with("dup ")), "{stdout}");
    assert!(!stdout.contains("xxxxxxxx"), "the 1 MB name is not listed");
    assert!(!stdout.contains("../etc"), "{stdout}");
    // Each skipped tool is named on stderr with its reason, escaped and cut.
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("[mcp] warning: MCP server") && l.contains("skipped"))
        .collect();
    assert!(warnings.len() >= 3, "{stderr}");
    assert!(
        !stderr.contains('\x1b'),
        "no raw escape on stderr: {stderr:?}"
    );
    assert!(warnings.iter().all(|l| l.len() < 400), "{warnings:?}");
    assert!(
        stdout.lines().all(|l| l.len() < 300),
        "every line is short: {}",
        stdout.lines().map(str::len).max().unwrap_or(0)
    );
}
