//! R-OBS: `agentloop run --metrics` prints the run's metrics on stderr at its end (a real
//! child process on the built-in scripted demo model).

use std::process::{Command, Output, Stdio};

fn agentloop(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentloop"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run agentloop")
}

#[test]
fn r_obs_run_with_metrics_prints_latency_percentiles_tokens_retries_and_compactions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = agentloop(dir.path(), &["run", "--metrics", "What is 2+3?"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("The answer is 5."), "{stdout}");
    assert!(
        !stdout.contains("metrics:"),
        "the summary goes to stderr: {stdout}"
    );
    let at = stderr
        .find("metrics:")
        .expect("a metrics summary on stderr");
    let summary = &stderr[at..];
    for needle in [
        "steps: 2 (2 model requests)",
        "step latency: p50 ",
        "time to first token: p50 ",
        "tool latency: p50 ",
        "(1 calls, 0 errors)",
        "tokens: ",
        " in, ",
        " out, ",
        " cached, ",
        " reasoning",
        "retries: 0",
        "compactions: 0",
    ] {
        assert!(summary.contains(needle), "want {needle:?} in:\n{summary}");
    }
    for p in ["p50", "p90", "p99", "max"] {
        assert!(summary.contains(p), "want {p} in:\n{summary}");
    }
    // Without the flag, no summary.
    let plain = agentloop(dir.path(), &["run", "What is 2+3?"]);
    assert!(!String::from_utf8_lossy(&plain.stderr).contains("metrics:"));
}

#[test]
fn r_obs_run_with_metrics_counts_retries_by_kind() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("s.json"),
        r#"{"turns": [{"errors": [{"status": 429, "retry_after_ms": 5}, {"status": 503, "retry_after_ms": 5}], "text": "ok"}]}"#,
    )
    .expect("script");
    let out = agentloop(
        dir.path(),
        &["run", "--script", "s.json", "--metrics", "hi"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("retries: 2 (rate_limited 1, server_error 1)"),
        "{stderr}"
    );
    assert!(stderr.contains("steps: 1 (3 model requests)"), "{stderr}");
}
