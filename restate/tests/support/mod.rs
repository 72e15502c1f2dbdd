//! The harness of the Restate real-process tests: the CI gate, a lock that serializes the tests
//! (the ports are fixed), a Restate server (`scripts/restate_up.sh`), `agentloop-restate`
//! workers, a round-robin TCP balancer, ingress calls and scripted-model scripts.

// Each test binary uses part of the harness; real processes on the wall clock.
#![allow(dead_code, clippy::disallowed_methods)]

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const INGRESS: &str = "http://127.0.0.1:8080";
pub const ADMIN: &str = "http://127.0.0.1:9070";

/// Whether the Restate tests run: mandatory when `CI` is set, else only with
/// `AGENTLOOP_RESTATE_TEST=1`; otherwise prints why they are skipped.
pub fn wanted() -> bool {
    let wanted = std::env::var_os("CI").is_some()
        || std::env::var("AGENTLOOP_RESTATE_TEST").is_ok_and(|v| v == "1");
    if !wanted {
        eprintln!(
            "skipped: needs a Restate server from npm; runs when CI or AGENTLOOP_RESTATE_TEST=1 is set"
        );
    }
    wanted
}

/// Holds an exclusive lock on a file in the temp dir while a test uses the fixed ports
/// (8080, 9070, 5122, 9080, 9081, 9090): test binaries (and concurrent `cargo test` runs)
/// take turns.
pub struct PortsLock(std::fs::File);

pub fn ports_lock() -> PortsLock {
    let path = std::env::temp_dir().join("agentloop-restate-tests.lock");
    let f = std::fs::File::create(&path).expect("lock file");
    f.lock().expect("lock the Restate test ports");
    PortsLock(f)
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn up() -> PathBuf {
    repo().join("scripts/restate_up.sh")
}

/// Whether something accepts connections on 127.0.0.1:`port`.
pub fn listening(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_ok()
}

/// A Restate server started by `scripts/restate_up.sh start DIR`; killed (SIGKILL) on drop.
pub struct Server {
    pub pid: i32,
    pub dir: PathBuf,
}

impl Server {
    /// Starts a server with its data in `dir` and waits until admin and ingress answer.
    pub fn start(dir: &Path) -> Server {
        Server {
            pid: start_server(dir),
            dir: dir.to_path_buf(),
        }
    }

    /// `kill -9` the server and wait until its ports are closed.
    pub fn kill9(&mut self) {
        let _ = Command::new("kill")
            .args(["-9", &self.pid.to_string()])
            .status();
        let t = Instant::now();
        while listening(8080) || listening(9070) {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the server outlived kill -9"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the server again on the same base dir (after [`Server::kill9`]).
    pub fn restart(&mut self) {
        self.pid = start_server(&self.dir);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// `restate_up.sh start DIR`: the server's pid, once admin and ingress answer.
fn start_server(dir: &Path) -> i32 {
    let out = Command::new(up())
        .arg("start")
        .arg(dir)
        .output()
        .expect("restate_up.sh start");
    assert!(
        out.status.success(),
        "restate_up.sh start: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("server pid")
}

/// Registers a deployment URI with the admin API (the newest registration serves new
/// invocations).
pub fn register(uri: &str) {
    let ok = Command::new(up())
        .args(["register", uri])
        .env("RESTATE_ADMIN", ADMIN)
        .stdout(Stdio::null())
        .status()
        .expect("register");
    assert!(ok.success(), "register {uri}");
}

/// An `agentloop-restate serve` process; killed (SIGKILL) on drop.
pub struct Worker(pub Child);

impl Worker {
    /// Starts a worker on 127.0.0.1:`port` with the scripted model `script`, file tools under
    /// `root`, logging at info to `log` (appended) when given.
    pub fn start(port: u16, script: &Path, root: &Path, log: Option<&Path>) -> Worker {
        let args = [
            "--script".as_ref(),
            script.as_os_str(),
            "--root".as_ref(),
            root.as_os_str(),
        ];
        Worker::start_with(port, &args, log)
    }

    /// Starts a worker on 127.0.0.1:`port` with `--max-steps 1000` and `args` (model, tools,
    /// store flags), logging at info to `log` (appended) when given.
    pub fn start_with(port: u16, args: &[&std::ffi::OsStr], log: Option<&Path>) -> Worker {
        let stderr = match log {
            Some(p) => Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .expect("worker log"),
            ),
            None => Stdio::null(),
        };
        let child = Command::new(env!("CARGO_BIN_EXE_agentloop-restate"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--max-steps", "1000"])
            .args(args)
            .env("RUST_LOG", if log.is_some() { "info" } else { "warn" })
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start the worker");
        let t = Instant::now();
        while !listening(port) {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "worker on {port} did not listen"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Worker(child)
    }

    /// SIGKILL, and reap.
    pub fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn curl(args: &[&str]) -> Result<String, String> {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "600"])
        .args(args)
        .output()
        .map_err(|e| format!("curl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "curl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// POSTs `body` to `Session/<session>/<handler>` through ingress and returns the response.
pub fn call(session: &str, handler: &str, body: &serde_json::Value) -> serde_json::Value {
    json(
        &curl(&[
            "-X",
            "POST",
            &format!("{INGRESS}/Session/{session}/{handler}"),
            "-H",
            "content-type: application/json",
            "-d",
            &body.to_string(),
        ])
        .expect("call"),
    )
}

/// Runs `prompt` in `session` and waits for its result.
pub fn prompt(session: &str, prompt: &str) -> serde_json::Value {
    call(session, "prompt", &serde_json::json!({ "prompt": prompt }))
}

/// `Session/<session>/status`.
pub fn status(session: &str) -> serde_json::Value {
    json(&curl(&[&format!("{INGRESS}/Session/{session}/status")]).expect("status"))
}

/// Sends `prompt` to `session` with an idempotency key; returns the invocation id.
pub fn send(session: &str, prompt: &str, key: &str) -> String {
    let body = serde_json::json!({ "prompt": prompt }).to_string();
    let out = curl(&[
        "-X",
        "POST",
        &format!("{INGRESS}/Session/{session}/prompt/send"),
        "-H",
        "content-type: application/json",
        "-H",
        &format!("idempotency-key: {key}"),
        "-d",
        &body,
    ])
    .expect("send");
    let v = json(&out);
    v["invocationId"].as_str().expect(&out).to_string()
}

/// Waits for an invocation's result (`/restate/invocation/<id>/attach`).
pub fn attach(invocation: &str) -> serde_json::Value {
    json(&curl(&[&format!("{INGRESS}/restate/invocation/{invocation}/attach")]).expect("attach"))
}

/// Like [`attach`], but attaches again while the server is away (killed and restarting), until
/// `limit`.
pub fn attach_through_restarts(invocation: &str, limit: Duration) -> serde_json::Value {
    let t = Instant::now();
    loop {
        let url = format!("{INGRESS}/restate/invocation/{invocation}/attach");
        if let Ok(out) = curl(&[&url]) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&out) {
                if v.get("outcome").is_some() {
                    return v;
                }
            }
        }
        assert!(
            t.elapsed() < limit,
            "{invocation} did not finish within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The lines of a file (none if it does not exist).
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|c| c.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// A script whose first two turns answer "What is 2+3?" like the demo, then one `append_line`
/// of `line <i>` to `out.txt` per turn for `i` in `0..lines`, then "done".
pub fn append_script(path: &Path, lines: usize) {
    let mut turns = vec![
        serde_json::json!({"text": "Let me calculate that.",
            "tool_calls": [{"name": "calculator", "arguments": {"expression": "{{prompt_expression}}"}}]}),
        serde_json::json!({"text": "The answer is {{last_tool_result}}."}),
    ];
    for i in 0..lines {
        turns.push(serde_json::json!({"tool_calls": [{"name": "append_line",
            "arguments": {"path": "out.txt", "line": format!("line {i}")}}]}));
    }
    turns.push(serde_json::json!({"text": "done"}));
    std::fs::write(path, serde_json::json!({ "turns": turns }).to_string()).expect("script");
}

/// A script whose first two turns answer "What is 2+3?" like the demo, then `steps` turns of
/// two `append_line` calls each (`line 2k` and `line 2k+1` to `out.txt` at step `k`), then
/// "done".
pub fn paired_append_script(path: &Path, steps: usize) {
    let mut turns = vec![
        serde_json::json!({"text": "Let me calculate that.",
            "tool_calls": [{"name": "calculator", "arguments": {"expression": "{{prompt_expression}}"}}]}),
        serde_json::json!({"text": "The answer is {{last_tool_result}}."}),
    ];
    for k in 0..steps {
        let call = |i: usize| {
            serde_json::json!({"name": "append_line",
                "arguments": {"path": "out.txt", "line": format!("line {i}")}})
        };
        turns.push(serde_json::json!({"tool_calls": [call(2 * k), call(2 * k + 1)]}));
    }
    turns.push(serde_json::json!({"text": "done"}));
    std::fs::write(path, serde_json::json!({ "turns": turns }).to_string()).expect("script");
}

/// The `agentloop` CLI binary of this build (built with `cargo build -p agentloop-cli` when it
/// is not there yet).
pub fn cli_binary() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_agentloop-restate")).with_file_name("agentloop");
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Command::new(cargo)
            .args(["build", "-q", "-p", "agentloop-cli"])
            .current_dir(repo())
            .status()
            .expect("cargo build -p agentloop-cli");
        assert!(ok.success(), "cargo build -p agentloop-cli");
    }
    assert!(bin.exists(), "no agentloop binary at {}", bin.display());
    bin
}

/// A loopback model server that answers every request with a streaming response's headers
/// (200, `text/event-stream`) and then sends nothing: a stalled model attempt. Returns its
/// port and the count of requests it got. Runs until the test process exits.
pub fn stalled_model_server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind the model server");
    let port = listener.local_addr().expect("addr").port();
    let requests = Arc::new(AtomicUsize::new(0));
    let r = requests.clone();
    std::thread::spawn(move || {
        let mut open = Vec::new();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match std::io::Read::read(&mut conn, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = conn.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                  cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n",
            );
            let _ = conn.flush();
            r.fetch_add(1, Ordering::SeqCst);
            // Keep the connection open, silent.
            open.push(conn);
        }
    });
    (port, requests)
}

/// A script for `prompts` prompts of `steps` appends each: prompt `p`'s step `k` appends
/// `line <p*steps+k>` to `s<n>.txt`, `n` being the number in the prompt (`"session 7"` →
/// `s7.txt`), so every session writes its own file; each prompt ends with "done".
pub fn numbered_script(path: &Path, prompts: usize, steps: usize) {
    let mut turns = Vec::new();
    for p in 0..prompts {
        for k in 0..steps {
            turns.push(serde_json::json!({"tool_calls": [{"name": "append_line",
                "arguments": {"path": "s{{prompt_expression}}.txt",
                              "line": format!("line {}", p * steps + k)}}]}));
        }
        turns.push(serde_json::json!({"text": "done"}));
    }
    std::fs::write(path, serde_json::json!({ "turns": turns }).to_string()).expect("script");
}

/// A tiny round-robin TCP balancer on 127.0.0.1:`port` in front of `backends`: each accepted
/// connection goes to the next backend that accepts one (a dead backend is skipped). Returns
/// the count of connections each backend got. Runs until the test process exits.
pub fn balancer(port: u16, backends: Vec<u16>) -> Arc<Vec<AtomicUsize>> {
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the balancer");
    let counts: Arc<Vec<AtomicUsize>> =
        Arc::new(backends.iter().map(|_| AtomicUsize::new(0)).collect());
    let c = counts.clone();
    std::thread::spawn(move || {
        let mut next = 0;
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let backend = (0..backends.len()).find_map(|i| {
                let b = (next + i) % backends.len();
                TcpStream::connect(("127.0.0.1", backends[b]))
                    .ok()
                    .map(|s| (b, s))
            });
            let Some((b, server)) = backend else { continue };
            next = b + 1;
            c[b].fetch_add(1, Ordering::SeqCst);
            pipe(client, server);
        }
    });
    counts
}

fn pipe(a: TcpStream, b: TcpStream) {
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let copy = |mut from: TcpStream, mut to: TcpStream| {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.flush();
            let _ = to.shutdown(std::net::Shutdown::Write);
        });
    };
    copy(a, b2);
    copy(b, a2);
}

/// A xorshift step, for random kill moments.
pub fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}
