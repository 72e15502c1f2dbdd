//! R-OUT-6 / R-CTX-3 through the binary: five `agentloop run --session`
//! prompts against a loopback OpenAI-compatible server that refuses (HTTP 400
//! `context_length_exceeded`) any request body over a size limit. With the default flags the
//! fifth prompt is refused once, compacted and retried shorter, and completes; with
//! `--context-window` the context is compacted before the provider ever refuses it.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

const KEY: &str = "sk-test-SECRET-0123456789";
/// Request bodies more than this many bytes over the first one (system prompt, tool specs,
/// one question) are refused: four turns (1000-character answers) fit, five do not.
const EXTRA: usize = 3_500;

/// A streamed answer of 1000 characters.
fn answer() -> String {
    let text = "x".repeat(1000);
    let delta = serde_json::json!({"id": "c", "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]});
    let stop = serde_json::json!({"id": "c", "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    format!("data: {delta}\n\ndata: {stop}\n\ndata: [DONE]\n\n")
}

fn refusal(limit: usize, sent: usize) -> String {
    serde_json::json!({"error": {
        "message": format!("This model's maximum context length is {} tokens. However, your messages resulted in {} tokens. Please reduce the length of the messages.", limit / 4, sent / 4),
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
    .to_string()
}

fn read_body(stream: &mut TcpStream) -> Option<String> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
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
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(String::from_utf8_lossy(&body).into_owned())
}

/// The sizes of the request bodies the server read, each with whether it refused it.
type Seen = Arc<Mutex<Vec<(usize, bool)>>>;

/// The server: its base URL and the sizes of the bodies it read, with whether it refused.
fn serve() -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        let mut limit = None;
        for mut stream in listener.incoming().filter_map(Result::ok) {
            let Some(body) = read_body(&mut stream) else {
                continue;
            };
            let limit = *limit.get_or_insert(body.len() + EXTRA);
            let refused = body.len() > limit;
            log.lock().expect("log").push((body.len(), refused));
            let response = if refused {
                let b = refusal(limit, body.len());
                format!("HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}", b.len())
            } else {
                let b = answer();
                format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}", b.len())
            };
            let _ = stream.write_all(response.as_bytes());
        }
    });
    (base, seen)
}

/// `agentloop run --session s` with `prompt` and `extra` flags; returns (success, stdout).
fn run(store: &Path, base: &str, extra: &[&str], prompt: &str) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_agentloop"))
        .args(["run", "--session", "s", "--store"])
        .arg(store)
        .args([
            "--provider",
            "openai",
            "--model",
            "gpt-test",
            "--base-url",
            base,
            "--events",
            "json",
        ])
        .args(extra)
        .arg(prompt)
        .env("OPENAI_API_KEY", KEY)
        .env_remove("OPENAI_BASE_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run agentloop");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stdout.contains(KEY) && !stderr.contains(KEY),
        "the key leaked"
    );
    (out.status.success(), stdout + &stderr)
}

/// The `compact_start` reasons in `--events json` output.
fn compactions(output: &str) -> Vec<String> {
    output
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            let e = v.get("event").unwrap_or(&v);
            (e["type"] == "compact_start").then(|| e["reason"].as_str().unwrap_or("").to_string())
        })
        .collect()
}

#[test]
fn r_out_6_the_fifth_prompt_overflows_and_completes_with_default_flags() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (base, seen) = serve();
    for i in 1..=4 {
        let (ok, out) = run(dir.path(), &base, &[], &format!("question {i}"));
        assert!(ok, "prompt {i}: {out}");
        assert!(compactions(&out).is_empty(), "prompt {i}: {out}");
    }
    assert!(seen
        .lock()
        .expect("log")
        .iter()
        .all(|(_, refused)| !refused));
    let (ok, out) = run(dir.path(), &base, &[], "question 5");
    assert!(ok, "the fifth prompt completes: {out}");
    assert_eq!(compactions(&out), ["overflow"], "{out}");
    let seen = seen.lock().expect("log").clone();
    assert_eq!(seen.len(), 6, "one refusal, one retry: {seen:?}");
    let ((refused_len, refused), (retried_len, retried)) = (seen[4], seen[5]);
    assert!(refused && !retried, "{seen:?}");
    assert!(retried_len < refused_len, "a shorter retry: {seen:?}");
}

#[test]
fn r_ctx_3_context_window_compacts_before_the_provider_refuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (base, seen) = serve();
    let mut reasons = Vec::new();
    for i in 1..=5 {
        // Compaction starts at 80 % (880 tokens of messages, ~3500 bytes): before the fifth
        // request, which the server would refuse.
        let (ok, out) = run(
            dir.path(),
            &base,
            &["--context-window", "1100"],
            &format!("question {i}"),
        );
        assert!(ok, "prompt {i}: {out}");
        reasons.extend(compactions(&out));
    }
    assert!(!reasons.is_empty(), "compacted by the window");
    assert!(
        reasons.iter().all(|r| r == "threshold"),
        "never after a refusal: {reasons:?}"
    );
    let seen = seen.lock().expect("log").clone();
    assert_eq!(seen.len(), 5, "one request per prompt: {seen:?}");
    assert!(seen.iter().all(|(_, refused)| !refused), "{seen:?}");
    // A window of 0 is refused by the flag's parser.
    let (ok, out) = run(dir.path(), &base, &["--context-window", "0"], "x");
    assert!(!ok, "{out}");
    assert!(out.contains("--context-window"), "{out}");
}
