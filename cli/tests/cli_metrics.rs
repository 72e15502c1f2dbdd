//! R-OBS: `agentloop run --metrics` prints the run's metrics on stderr at its end (a real
//! child process on the built-in scripted demo model).

mod support;
use support::agentloop;

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

/// "Time to first token" has one meaning: an attempt's request to its first token. The step's
/// first attempt fails (a 429 that asks for 400 ms); the second streams at once. `trace
/// export`'s step `ttft_ms` is the committed attempt's figure (well under the 400 ms back-off,
/// which the step's `latency_ms` includes), as `--metrics` reports it per attempt.
#[test]
fn ttft_is_the_committed_attempts_request_to_first_token_in_export_and_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("s.json"),
        r#"{"turns": [{"errors": [{"status": 429, "retry_after_ms": 400}], "text": "ok"}]}"#,
    )
    .expect("script");
    let out = agentloop(
        dir.path(),
        &[
            "run",
            "--script",
            "s.json",
            "--metrics",
            "--trace",
            "t.jsonl",
            "hi",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let sidecar = std::fs::read_to_string(dir.path().join("t.times.jsonl")).expect("sidecar");
    let firsts: Vec<&str> = sidecar
        .lines()
        .filter(|l| l.contains(r#""type":"first_token""#))
        .collect();
    assert_eq!(firsts.len(), 1, "{sidecar}");
    assert!(firsts[0].contains(r#""attempt":2"#), "{sidecar}");

    let out = agentloop(
        dir.path(),
        &[
            "trace", "export", "t.jsonl", "--table", "steps", "--format", "jsonl", "-o", "s.jsonl",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(dir.path().join("s.jsonl"))
            .expect("export")
            .lines()
            .next()
            .expect("a step row"),
    )
    .expect("json row");
    let ttft = row["ttft_ms"].as_u64().expect("ttft_ms");
    let latency = row["latency_ms"].as_u64().expect("latency_ms");
    assert!(latency >= 400, "{row}");
    assert!(ttft < 400, "the back-off is not time to first token: {row}");
}
