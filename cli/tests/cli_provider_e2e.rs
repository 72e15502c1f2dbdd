//! End to end through the CLI binary against real HTTP servers on loopback:
//! `agentloop run --provider openai --base-url http://127.0.0.1:PORT` performs a two-step
//! tool-calling conversation with one injected 429 + `retry-after-ms`, a 401 fails at once
//! without leaking the key, and the same run works against a third-party mock server
//! (`llmock` from npm `@copilotkit/aimock`) when it is installed.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KEY: &str = "sk-test-SECRET-0123456789";

fn chunk(delta: serde_json::Value, finish: Option<&str>) -> String {
    let c = serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    });
    format!("data: {c}\n\n")
}

fn tool_call_stream() -> String {
    let mut s = chunk(
        serde_json::json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": ""}}]}),
        None,
    );
    for part in ["{\"expres", "sion\": \"2", "+3\"}"] {
        s += &chunk(
            serde_json::json!({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}),
            None,
        );
    }
    s += &chunk(serde_json::json!({}), Some("tool_calls"));
    s += "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":10,\"total_tokens\":60}}\n\n";
    s + "data: [DONE]\n\n"
}

fn answer_stream() -> String {
    let mut s = String::new();
    for part in ["The answer", " is 5."] {
        s += &chunk(serde_json::json!({"content": part}), None);
    }
    s += &chunk(serde_json::json!({}), Some("stop"));
    s + "data: [DONE]\n\n"
}

/// A canned HTTP response.
#[derive(Clone)]
enum Reply {
    Status(u16, Vec<(&'static str, String)>, String),
    Sse(String),
}

/// A loopback server answering requests in order with `replies`; records request bodies and times.
struct Server {
    base: String,
    requests: Arc<Mutex<Vec<(Instant, String, String)>>>,
}

fn read_request(stream: &mut TcpStream) -> Option<(String, String)> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut head = String::new();
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().ok()?;
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some((head, String::from_utf8_lossy(&body).into_owned()))
}

fn serve(replies: Vec<Reply>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let log = requests.clone();
    std::thread::spawn(move || {
        for (mut stream, reply) in listener.incoming().filter_map(Result::ok).zip(replies) {
            let Some((head, body)) = read_request(&mut stream) else {
                continue;
            };
            log.lock().expect("log").push((Instant::now(), head, body));
            let response = match reply {
                Reply::Status(code, headers, body) => {
                    let mut r = format!("HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n", body.len());
                    for (k, v) in headers {
                        r += &format!("{k}: {v}\r\n");
                    }
                    r + "connection: close\r\n\r\n" + &body
                }
                Reply::Sse(body) => format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                ),
            };
            let _ = stream.write_all(response.as_bytes());
        }
    });
    Server { base, requests }
}

fn agentloop(args: &[&str]) -> Output {
    agentloop_in(std::path::Path::new("."), args)
}

/// `agentloop` run in `dir` (its default session store is `dir/.agentloop/sessions`).
fn agentloop_in(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentloop"))
        .args(args)
        .current_dir(dir)
        .env("OPENAI_API_KEY", KEY)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("AGENTLOOP_STORE")
        .stdin(Stdio::null())
        .output()
        .expect("run agentloop")
}

#[test]
fn two_step_tool_conversation_with_one_retry() {
    let server = serve(vec![
        Reply::Status(
            429,
            vec![("retry-after-ms", "50".into())],
            r#"{"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}"#.into(),
        ),
        Reply::Sse(tool_call_stream()),
        Reply::Sse(answer_stream()),
    ]);
    let out = agentloop(&[
        "run",
        "--provider",
        "openai",
        "--model",
        "gpt-test",
        "--base-url",
        &server.base,
        // The server's hint is the delay whatever the backoff (R-IN-1).
        "--initial-backoff-ms",
        "10",
        "What is 2+3?",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("The answer is 5."), "{stdout}");
    assert!(
        stderr.contains("[retry] attempt 2 in 50 ms"),
        "one retry after the server's 50 ms: {stderr}"
    );
    assert!(
        !stdout.contains(KEY) && !stderr.contains(KEY),
        "the key leaked"
    );
    let requests = server.requests.lock().expect("log").clone();
    assert_eq!(requests.len(), 3, "429, tool call, answer");
    let waited = requests[1].0.duration_since(requests[0].0);
    assert!(
        waited >= Duration::from_millis(50),
        "retried after {waited:?}"
    );
    assert!(
        requests[0]
            .1
            .to_ascii_lowercase()
            .contains("authorization: bearer"),
        "the key is sent as a header"
    );
    let second: serde_json::Value = serde_json::from_str(&requests[1].2).expect("json body");
    assert_eq!(second["stream"], true);
    assert_eq!(
        second["model"], "gpt-test",
        "the model name as given, without the registry's `openai:` prefix"
    );
    assert!(second["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "calculator")));
    // The third request carries the tool result computed by the calculator tool.
    let third: serde_json::Value = serde_json::from_str(&requests[2].2).expect("json body");
    let messages = third["messages"].as_array().expect("messages");
    assert!(
        messages
            .iter()
            .any(|m| m["role"] == "tool" && m["tool_call_id"] == "call_1" && m["content"] == "5"),
        "{messages:?}"
    );
}

/// Two tool calls streamed under one id (a proxy that numbers calls per chunk): both run,
/// each under its own id and with its own record, the session passes `sessions check`, and
/// the next request pairs each call with its result.
fn duplicate_id_stream() -> String {
    let mut s = String::new();
    for (index, expression) in [(0, "2+3"), (1, "4*5")] {
        s += &chunk(
            serde_json::json!({"role": "assistant", "tool_calls": [{"index": index, "id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": format!("{{\"expression\": \"{expression}\"}}")}}]}),
            None,
        );
    }
    s += &chunk(serde_json::json!({}), Some("tool_calls"));
    s + "data: [DONE]\n\n"
}

#[test]
fn two_tool_calls_with_one_id_each_run_once_with_their_own_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = serve(vec![
        Reply::Sse(duplicate_id_stream()),
        Reply::Sse(answer_stream()),
    ]);
    let run = |args: &[&str]| agentloop_in(dir.path(), args);
    let out = run(&[
        "run",
        "--provider",
        "openai",
        "--model",
        "gpt-test",
        "--base-url",
        &server.base,
        "--session",
        "dup",
        "--events",
        "json",
        "What is 2+3 and 4*5?",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(r#""type":"tool_call_id_derived""#)
            && stdout.contains(r#""tool_call_id":"call_1_2""#),
        "the derived id is announced: {stdout}"
    );
    let check = run(&["sessions", "check", "dup"]);
    assert!(
        check.status.success(),
        "sessions check: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let requests = server.requests.lock().expect("log").clone();
    assert_eq!(requests.len(), 2, "tool calls, answer");
    let second: serde_json::Value = serde_json::from_str(&requests[1].2).expect("json body");
    let messages = second["messages"].as_array().expect("messages");
    let calls: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(calls, ["call_1", "call_1_2"], "{messages:?}");
    let results: Vec<(&str, &str)> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| Some((m["tool_call_id"].as_str()?, m["content"].as_str()?)))
        .collect();
    assert_eq!(
        results,
        [("call_1", "5"), ("call_1_2", "20")],
        "{messages:?}"
    );
    // Each call has its own start marker and result in the stored session.
    let session = std::fs::read_to_string(dir.path().join(".agentloop/sessions/dup.jsonl"))
        .expect("session file");
    for id in ["call_1", "call_1_2"] {
        let records = session
            .lines()
            .filter(|l| l.contains(&format!(r#""tool_call_id":"{id}""#)))
            .count();
        assert!(records >= 2, "start marker and result for {id}: {session}");
    }
}

#[test]
fn unauthorized_fails_at_once_without_the_key() {
    let body = format!(
        r#"{{"error": {{"message": "Incorrect API key provided: {KEY}", "type": "invalid_request_error", "code": "invalid_api_key"}}}}"#
    );
    let server = serve(vec![Reply::Status(401, vec![], body)]);
    let started = Instant::now();
    let out = agentloop(&[
        "run",
        "--provider",
        "openai",
        "--model",
        "gpt-test",
        "--base-url",
        &server.base,
        "hi",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("authentication"), "{stderr}");
    assert!(!stderr.contains(KEY), "the key leaked: {stderr}");
    assert_eq!(
        server.requests.lock().expect("log").len(),
        1,
        "no retry on 401"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Model fallback: the primary model answers 401, the same step is requested from
/// `--fallback second` (same server), the run completes, and its trace replays.
#[test]
fn a_401_on_the_primary_model_falls_back_to_the_next_and_the_trace_replays() {
    let server = serve(vec![
        Reply::Status(
            401,
            vec![],
            r#"{"error": {"message": "no access to primary", "type": "invalid_request_error"}}"#
                .into(),
        ),
        Reply::Sse(answer_stream()),
    ]);
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("fallback.jsonl");
    let trace = trace.to_str().expect("utf-8 path");
    let out = agentloop(&[
        "run",
        "--provider",
        "openai",
        "--model",
        "primary",
        "--fallback",
        "second",
        "--base-url",
        &server.base,
        "--trace",
        trace,
        "--events",
        "json",
        "hi",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let fallback = events
        .iter()
        .find(|e| e["type"] == "model_fallback")
        .unwrap_or_else(|| panic!("no model_fallback event: {stdout}"));
    assert_eq!(fallback["from"], "openai:primary");
    assert_eq!(fallback["to"], "openai:second");
    assert_eq!(fallback["error"]["kind"], "authentication");
    let end = events
        .iter()
        .find(|e| e["type"] == "run_end")
        .unwrap_or_else(|| panic!("no run_end: {stdout}"));
    assert_eq!(end["final_text"], "The answer is 5.");
    let requests = server.requests.lock().expect("log").clone();
    let models: Vec<String> = requests
        .iter()
        .map(|r| {
            let body: serde_json::Value = serde_json::from_str(&r.2).expect("json body");
            body["model"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    assert_eq!(
        models,
        ["primary", "second"],
        "one request per model, each under its own name (without the registry's prefix)"
    );
    let replay = agentloop(&["replay", trace]);
    assert!(
        replay.status.success(),
        "the trace replays: {}{}",
        String::from_utf8_lossy(&replay.stdout),
        String::from_utf8_lossy(&replay.stderr)
    );
}

#[test]
fn missing_model_is_a_clear_cli_error() {
    let out = agentloop(&["run", "--provider", "openai", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--model is required"));
}

/// `llmock` (npm `@copilotkit/aimock`, installed by `.ci/run`) serving the calculator round
/// for "What is 6 times 7?": its address and the process (killed by the caller), or `None`
/// (with a notice) when `AIMOCK_BIN` is not set.
fn calculator_mock() -> Option<(String, std::process::Child, tempfile::TempDir)> {
    let bin = std::env::var("AIMOCK_BIN").ok().filter(|b| !b.is_empty());
    let Some(bin) = bin else {
        assert!(
            std::env::var("AGENTLOOP_REQUIRE_AIMOCK").is_err(),
            "AGENTLOOP_REQUIRE_AIMOCK is set but AIMOCK_BIN is not"
        );
        println!("NOTICE: skipping: AIMOCK_BIN (npm @copilotkit/aimock) not set");
        return None;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let fixtures = dir.path().join("fixtures.json");
    std::fs::write(
        &fixtures,
        r#"{"fixtures": [
          {"match": {"userMessage": "What is 6 times 7?", "hasToolResult": true}, "response": {"content": "The answer is 42."}},
          {"match": {"userMessage": "What is 6 times 7?"}, "response": {"toolCalls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}}
        ]}"#,
    )
    .expect("fixtures");
    let mut child = Command::new(&bin)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--chunk-size",
            "5",
            "--fixtures",
        ])
        .arg(&fixtures)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start llmock");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(i) = line.find("http://127.0.0.1:") {
                let _ = tx.send(line[i..].trim().to_string());
            }
        }
    });
    let base = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("llmock reports its address");
    Some((base, child, dir))
}

/// The third-party mock server (npm `@copilotkit/aimock`), installed by `.ci/run`.
#[test]
fn cli_against_third_party_mock_server() {
    let Some((base, mut child, _dir)) = calculator_mock() else {
        return;
    };
    let out = agentloop(&[
        "run",
        "--provider",
        "openai",
        "--model",
        "gpt-4o",
        "--base-url",
        &base,
        "What is 6 times 7?",
    ]);
    let _ = child.kill();
    let _ = child.wait();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.contains("[tool] calculator"), "{stderr}");
    assert!(stdout.contains("The answer is 42."), "{stdout}");
}

/// `--provider gemini` against the same mock's `/v1beta/models/{model}:streamGenerateContent`:
/// the calculator runs through Gemini function calling (a `functionCall` part, its result
/// back as a `functionResponse`, which the answer's fixture needs) and the answer streams.
/// The key comes from `GEMINI_API_KEY`, as the CLI reads it.
#[test]
fn cli_gemini_against_third_party_mock_server() {
    let Some((base, mut child, dir)) = calculator_mock() else {
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_agentloop"))
        .args([
            "run",
            "--provider",
            "gemini",
            "--base-url",
            &format!("{base}/v1beta"),
            "--model",
            "gemini-2.0-flash",
            "What is 6 times 7?",
        ])
        .current_dir(dir.path())
        .env("GEMINI_API_KEY", KEY)
        .env_remove("GOOGLE_API_KEY")
        .env_remove("GEMINI_BASE_URL")
        .env_remove("AGENTLOOP_STORE")
        .stdin(Stdio::null())
        .output()
        .expect("run agentloop");
    let _ = child.kill();
    let _ = child.wait();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stderr.contains("[tool] calculator {\"expression\":\"6*7\"}"),
        "{stderr}"
    );
    assert!(
        stderr.contains("[tool] calculator -> Completed"),
        "{stderr}"
    );
    assert!(stdout.contains("The answer is 42."), "{stdout}");
    assert!(!stdout.contains(KEY) && !stderr.contains(KEY));
}

/// `--provider openai-responses` against the same third-party mock server's `/v1/responses`
/// (issue 26): a calculator round whose first attempt at each step meets a fault the mock
/// injects (429, a stream truncated after a few events; 500, a disconnect mid-stream, a stall
/// past `--stall-timeout`), every one retried. The answer's fixture only matches when the
/// last input item is a `function_call_output` for the mock's `call_id` carrying the
/// calculator's result, so the run completing shows the second request carried it. The
/// trace replays identically.
#[test]
fn cli_openai_responses_against_third_party_mock_server_with_faults() {
    let bin = std::env::var("AIMOCK_BIN").ok().filter(|b| !b.is_empty());
    let Some(bin) = bin else {
        assert!(
            std::env::var("AGENTLOOP_REQUIRE_AIMOCK").is_err(),
            "AGENTLOOP_REQUIRE_AIMOCK is set but AIMOCK_BIN is not"
        );
        println!("NOTICE: skipping: AIMOCK_BIN (npm @copilotkit/aimock) not set");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let fixtures = dir.path().join("fixtures.json");
    let call = r#"{"toolCalls": [{"name": "calculator", "arguments": "{\"expression\":\"2+3\"}", "id": "call_mock_1"}]}"#;
    let answer = r#"{"content": "The answer is 5."}"#;
    let leg2 = r#""userMessage": "What is 2+3?", "hasToolResult": true, "toolCallId": "call_mock_1", "toolResultContains": "5""#;
    std::fs::write(
        &fixtures,
        format!(
            r#"{{"fixtures": [
          {{"match": {{{leg2}, "sequenceIndex": 0}}, "response": {answer}, "chaos": {{"dropRate": 1}}}},
          {{"match": {{{leg2}, "sequenceIndex": 1}}, "response": {answer}, "latency": 30, "disconnectAfterMs": 100}},
          {{"match": {{{leg2}, "sequenceIndex": 2}}, "response": {answer}, "latency": 3000}},
          {{"match": {{{leg2}, "sequenceIndex": 3}}, "response": {answer}}},
          {{"match": {{"userMessage": "What is 2+3?", "sequenceIndex": 0}}, "response": {call}, "chaos": {{"rateLimitRate": 1}}}},
          {{"match": {{"userMessage": "What is 2+3?", "sequenceIndex": 1}}, "response": {call}, "latency": 5, "truncateAfterChunks": 4}},
          {{"match": {{"userMessage": "What is 2+3?", "sequenceIndex": 2}}, "response": {call}}}
        ]}}"#
        ),
    )
    .expect("fixtures");
    let mut child = Command::new(&bin)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--chunk-size",
            "5",
            "--fixtures",
        ])
        .arg(&fixtures)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start llmock");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(i) = line.find("http://127.0.0.1:") {
                let _ = tx.send(line[i..].trim().to_string());
            }
        }
    });
    let base = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("llmock reports its address");
    let trace = dir.path().join("responses.jsonl");
    let trace = trace.to_str().expect("utf-8 path");
    let out = agentloop(&[
        "run",
        "--provider",
        "openai-responses",
        "--model",
        "gpt-4o",
        "--base-url",
        &format!("{base}/v1"),
        "--initial-backoff-ms",
        "10",
        "--max-retries",
        "6",
        "--stall-timeout",
        "1",
        "--trace",
        trace,
        "What is 2+3?",
    ]);
    let _ = child.kill();
    let _ = child.wait();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.ends_with("The answer is 5.\n"), "{stdout}");
    assert!(stderr.contains("[tool] calculator"), "{stderr}");
    for fault in [
        "rate_limited: HTTP 429",
        "server_error: HTTP 500",
        "stream stalled",
    ] {
        assert!(stderr.contains(fault), "no retry after {fault}: {stderr}");
    }
    assert!(
        stderr.matches("[retry]").count() >= 5,
        "429, truncated, 500, disconnect, stall: {stderr}"
    );
    let replay = agentloop(&["replay", trace]);
    assert!(
        replay.status.success(),
        "the trace replays: {}{}",
        String::from_utf8_lossy(&replay.stdout),
        String::from_utf8_lossy(&replay.stderr)
    );
}

/// R-IN-6: an attempt that fails mid-stream after some text reached stdout is retried, and
/// stdout marks the retry on its own line, so the text after the last marker is the answer.
/// The marker is on stdout, in order with the text it discards.
#[test]
fn r_in_6_a_retry_after_partial_text_is_marked_on_stdout() {
    // The first stream ends (EOF) after some text, without finish_reason or [DONE]: a
    // retryable incomplete stream.
    let partial = chunk(
        serde_json::json!({"role": "assistant", "content": "Partial answer th"}),
        None,
    );
    let server = serve(vec![Reply::Sse(partial), Reply::Sse(answer_stream())]);
    let out = agentloop(&[
        "run",
        "--provider",
        "openai",
        "--model",
        "gpt-test",
        "--base-url",
        &server.base,
        "--initial-backoff-ms",
        "10",
        "What is 2+3?",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert_eq!(server.requests.lock().expect("log").len(), 2, "one retry");
    let marker = "[retrying: previous output discarded]";
    let (discarded, answer) = stdout
        .rsplit_once(&format!("{marker}\n"))
        .unwrap_or_else(|| panic!("no retry marker line on stdout: {stdout:?}"));
    assert_eq!(discarded, "Partial answer th\n", "{stdout:?}");
    assert_eq!(answer, "The answer is 5.\n", "{stdout:?}");
    assert!(stderr.contains("[retry] attempt 2"), "{stderr}");
}

/// R-STR-5: `--image` and `--file` read the files, take their media types
/// from the extensions and send them after the prompt's text as content parts (images first,
/// in the order given, then files).
#[test]
fn r_str_5_issue12_item6_run_sends_images_and_files_as_content_parts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let png = dir.path().join("dot.PNG");
    std::fs::write(&png, [0x89, b'P', b'N', b'G']).expect("png");
    let gif = dir.path().join("anim.gif");
    std::fs::write(&gif, b"GIF89a").expect("gif");
    let pdf = dir.path().join("report.pdf");
    std::fs::write(&pdf, b"%PDF-1.4").expect("pdf");
    let server = serve(vec![Reply::Sse(answer_stream())]);
    let out = agentloop(&[
        "run",
        "--provider",
        "openai",
        "--model",
        "gpt-test",
        "--base-url",
        &server.base,
        "--file",
        &pdf.display().to_string(),
        "--image",
        &png.display().to_string(),
        "--image",
        &gif.display().to_string(),
        "What is in these?",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr: {stderr}");
    let requests = server.requests.lock().expect("log").clone();
    assert_eq!(requests.len(), 1);
    let body: serde_json::Value = serde_json::from_str(&requests[0].2).expect("json body");
    let user = body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .expect("a user message");
    assert_eq!(
        user["content"],
        serde_json::json!([
            {"type": "text", "text": "What is in these?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}},
            {"type": "image_url", "image_url": {"url": "data:image/gif;base64,R0lGODlh"}},
            {"type": "file", "file": {"filename": "report.pdf", "file_data": "data:application/pdf;base64,JVBERi0xLjQ="}},
        ])
    );
}

/// An attachment that cannot be sent is a clear error (exit 2) before any
/// request: an extension of the wrong kind, a file over the 10 MiB limit, a missing file, a
/// directory. Nothing reaches the server.
#[test]
fn issue12_item6_run_refuses_bad_attachments_before_any_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hi").expect("txt");
    let big = dir.path().join("huge.pdf");
    std::fs::File::create(&big)
        .and_then(|f| f.set_len(10 * 1024 * 1024 + 1))
        .expect("sparse file");
    let missing = dir.path().join("missing.png");
    let folder = dir.path().join("folder.png");
    std::fs::create_dir(&folder).expect("dir");
    let server = serve(vec![Reply::Sse(answer_stream())]);
    for (flag, path, needle) in [
        (
            "--image",
            &text,
            "unknown image type \"txt\" (known: png, jpg, jpeg, gif, webp)",
        ),
        ("--file", &text, "unknown file type \"txt\" (known: pdf)"),
        ("--image", &big, "unknown image type \"pdf\""),
        (
            "--file",
            &big,
            "10485761 bytes, more than the 10485760 bytes left",
        ),
        ("--image", &missing, "No such file"),
        ("--image", &folder, "not a regular file (a directory)"),
    ] {
        let out = agentloop(&[
            "run",
            "--provider",
            "openai",
            "--model",
            "gpt-test",
            "--base-url",
            &server.base,
            flag,
            &path.display().to_string(),
            "hi",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{flag} {}: {stderr}",
            path.display()
        );
        assert!(
            stderr.contains(needle),
            "{flag} {}: {stderr}",
            path.display()
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    assert!(server.requests.lock().expect("log").is_empty());
}

/// `agentloop decode --provider openai-responses` on a captured Responses stream (reasoning
/// summary, an encrypted reasoning item, a calculator call, usage).
#[test]
fn decode_reads_a_captured_responses_stream() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/sse/responses_reasoning_tool_call.sse"
    );
    let out = agentloop(&["decode", "--provider", "openai-responses", path]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON report");
    assert_eq!(report["outcome"], "completed");
    assert_eq!(report["committed"], true);
    assert_eq!(report["finish_reason"], "tool_calls");
    let message = &report["message"];
    assert!(message["reasoning"]
        .as_str()
        .is_some_and(|r| r.starts_with("**Computing the sum**")));
    assert_eq!(
        message["redacted_reasoning"].as_array().map(Vec::len),
        Some(1)
    );
    assert_eq!(
        message["tool_calls"][0]["id"],
        "call_Xq7bN2mKp4Lr9sTv1wYz3A5c"
    );
    assert_eq!(message["tool_calls"][0]["arguments"]["expression"], "2+3");
    assert_eq!(report["usage"]["reasoning_tokens"], 64);
    assert_eq!(report["usage"]["cache_read_input_tokens"], 128);
}
