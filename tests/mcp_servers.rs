//! MCP tool servers against real third-party servers: npm's
//! `@modelcontextprotocol/server-everything` (stdio and streamable HTTP) and PyPI's
//! `mcp-server-time` (stdio), plus connect failures that need no server.
//!
//! The servers are found through `MCP_EVERYTHING_BIN` (the `mcp-server-everything` script) and
//! `MCP_TIME_PY` (a Python with `mcp_server_time` importable); `.ci/run` installs both. Without
//! them a test prints why it skips, except with `CI` set, where it fails.
#![cfg(feature = "mcp")]
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::mcp::{McpError, McpOptions, McpServer};
use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::Agent;
use agentloop::tools::{Tool, ToolContext, ToolError, ToolRegistry};
use agentloop::Message;
use agentloop_testkit::external::{process_ended, read_pid_file, server_env, wait_process_ended};
use serde_json::{json, Value};

fn ctx() -> ToolContext {
    ToolContext {
        call_id: "call_1".into(),
        root: PathBuf::from("."),
        idempotency_key: None,
        allow_instruction_writes: false,
    }
}

fn tool(server: &McpServer, name: &str) -> Arc<dyn Tool> {
    server
        .tools()
        .into_iter()
        .find(|t| t.spec().name == name)
        .unwrap_or_else(|| panic!("no tool {name} in {:?}", server.specs()))
}

/// The arguments of `sh -c` that writes its pid to `pid_file` and then becomes `bin stdio`:
/// the test knows the server's pid (the same process) and can kill it.
fn everything_with_pid_file(bin: &str, pid_file: &Path) -> Vec<String> {
    vec![
        "-c".into(),
        format!("echo $$ > '{}'; exec \"$0\" stdio", pid_file.display()),
        bin.into(),
    ]
}

/// server-everything connected through [`everything_with_pid_file`]; the pid file is `pid` in
/// the returned directory. `None`: skipped.
async fn everything_with_pid() -> Option<(McpServer, tempfile::TempDir)> {
    let bin = server_env("MCP_EVERYTHING_BIN")?;
    let dir = tempfile::tempdir().expect("tempdir");
    let args = everything_with_pid_file(&bin, &dir.path().join("pid"));
    let server = McpServer::connect_stdio_with("sh", args, McpOptions::default())
        .await
        .expect("connects");
    Some((server, dir))
}

/// server-everything on stdio, connected; `None`: skipped.
async fn everything() -> Option<McpServer> {
    let bin = server_env("MCP_EVERYTHING_BIN")?;
    let server = McpServer::connect_stdio(&bin, ["stdio"])
        .await
        .expect("connects");
    Some(server)
}

/// An agent with only `server`'s tools, a scripted model serving `script`, and a tool timeout
/// of `tool_ms` (default: 120 s).
fn agent(server: &McpServer, script: Value, tool_ms: Option<u64>) -> Agent {
    let model = ScriptedModel::from_json_str(&script.to_string(), "test").expect("script");
    Agent::builder()
        .model(model)
        .tools(ToolRegistry::new())
        .mcp(server)
        .tool_timeout_ms(tool_ms.unwrap_or(120_000))
        .build()
}

/// mcp-server-time, connected; `None`: skipped.
async fn time_server() -> Option<McpServer> {
    let py = server_env("MCP_TIME_PY")?;
    let server = McpServer::connect_stdio(&py, ["-m", "mcp_server_time"])
        .await
        .expect("connects");
    Some(server)
}

fn read_pid(pid_file: &Path) -> i32 {
    read_pid_file(pid_file, Duration::from_secs(10))
}

/// Waits for `pid` to end off the runtime's thread (the runtime must run to kill it).
async fn wait_dead(pid: i32) {
    tokio::task::spawn_blocking(move || wait_process_ended(pid, Duration::from_secs(10)))
        .await
        .expect("joins");
}

#[tokio::test]
async fn everything_over_stdio_lists_tools_and_maps_results() {
    let Some(server) = everything().await else {
        return;
    };
    let names: Vec<&str> = server.specs().iter().map(|s| s.name.as_str()).collect();
    for expected in [
        "echo",
        "get-sum",
        "get-tiny-image",
        "get-structured-content",
    ] {
        assert!(names.contains(&expected), "{expected} not in {names:?}");
    }
    let echo = tool(&server, "echo");
    let spec = echo.spec();
    assert!(!spec.description.is_empty());
    assert_eq!(spec.parameters["type"], "object");
    assert!(spec.parameters["properties"]["message"].is_object());

    let text = echo
        .call(ctx(), json!({"message": "hello mcp"}))
        .await
        .expect("echo");
    assert_eq!(text, "Echo: hello mcp");
    let sum = tool(&server, "get-sum")
        .call(ctx(), json!({"a": 2, "b": 40}))
        .await
        .expect("sum");
    assert!(sum.contains("42"), "{sum}");
    let image = tool(&server, "get-tiny-image")
        .call(ctx(), json!({}))
        .await
        .expect("image");
    assert!(image.contains("[image: image/png]"), "{image}");
    // Invalid arguments: the server says so; an error result, the connection stays.
    let bad = echo.call(ctx(), json!({"message": 5})).await;
    assert!(
        matches!(&bad, Err(ToolError::Failed(m)) if m.contains("message")),
        "{bad:?}"
    );
    let again = echo.call(ctx(), json!({"message": "still here"})).await;
    assert_eq!(again.expect("echo again"), "Echo: still here");
}

#[tokio::test]
async fn a_prefix_renames_the_tools_but_calls_the_servers_name() {
    let Some(bin) = server_env("MCP_EVERYTHING_BIN") else {
        return;
    };
    let server = McpServer::connect_stdio_with(bin, ["stdio"], McpOptions::default().prefix("ev_"))
        .await
        .expect("connects");
    assert!(server.specs().iter().all(|s| s.name.starts_with("ev_")));
    let text = tool(&server, "ev_echo")
        .call(ctx(), json!({"message": "x"}))
        .await
        .expect("echo");
    assert_eq!(text, "Echo: x");
}

#[tokio::test]
async fn time_server_answers_and_reports_errors_as_tool_errors() {
    let Some(server) = time_server().await else {
        return;
    };
    let now = tool(&server, "get_current_time")
        .call(ctx(), json!({"timezone": "UTC"}))
        .await
        .expect("time");
    let parsed: Value = serde_json::from_str(&now).expect("the result is JSON text");
    assert_eq!(parsed["timezone"], "UTC", "{now}");
    let bad = tool(&server, "get_current_time")
        .call(ctx(), json!({"timezone": "Nowhere/Atlantis"}))
        .await;
    assert!(
        matches!(&bad, Err(ToolError::Failed(m)) if m.contains("Atlantis")),
        "{bad:?}"
    );
}

#[tokio::test]
async fn an_agent_run_calls_an_mcp_tool() {
    let Some(server) = time_server().await else {
        return;
    };
    let script = json!({"turns": [
        {"tool_calls": [{"name": "get_current_time", "arguments": {"timezone": "Europe/Paris"}}]},
        {"text": "Time: {{last_tool_result}}"}]});
    let agent = agent(&server, script, None);
    let out = agent
        .run_with("s", vec![Message::user("what time is it?")], None, false)
        .await
        .expect("runs");
    let text = out.result.final_text().unwrap_or_default();
    assert!(text.contains("Europe/Paris"), "{:?}", out.result);
}

#[tokio::test]
async fn the_runtimes_tool_timeout_bounds_an_mcp_call() {
    let Some(server) = everything().await else {
        return;
    };
    let script = json!({"turns": [
        {"tool_calls": [{"name": "trigger-long-running-operation",
                         "arguments": {"duration": 60, "steps": 2}}]},
        {"text": "{{last_tool_result}}"}]});
    let agent = agent(&server, script, Some(500));
    let started = Instant::now();
    let out = agent
        .run_with("s", vec![Message::user("go")], None, false)
        .await
        .expect("runs");
    assert!(started.elapsed() < Duration::from_secs(20));
    let text = out.result.final_text().unwrap_or_default();
    assert!(
        text.contains("tool timed out after 500 ms"),
        "{:?}",
        out.result
    );
    // The connection survives a timed-out call.
    let echo = tool(&server, "echo")
        .call(ctx(), json!({"message": "after"}))
        .await
        .expect("echo");
    assert_eq!(echo, "Echo: after");
}

#[tokio::test]
async fn everything_over_streamable_http() {
    let Some(bin) = server_env("MCP_EVERYTHING_BIN") else {
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut child = tokio::process::Command::new(&bin)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("starts the HTTP server");
    let url = format!("http://127.0.0.1:{port}/mcp");
    let deadline = Instant::now() + Duration::from_secs(20);
    let server = loop {
        match McpServer::connect_http(&url).await {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("no HTTP server at {url}: {e}"),
        }
    };
    let text = tool(&server, "echo")
        .call(ctx(), json!({"message": "over http"}))
        .await
        .expect("echo");
    assert_eq!(text, "Echo: over http");
    drop(server);
    let _ = child.kill().await;
}

#[tokio::test]
async fn a_server_killed_mid_call_fails_that_call_and_restarts_on_the_next() {
    let Some((server, dir)) = everything_with_pid().await else {
        return;
    };
    let pid_file = dir.path().join("pid");
    let first = read_pid(&pid_file);
    let long = tool(&server, "trigger-long-running-operation");
    let call =
        tokio::spawn(async move { long.call(ctx(), json!({"duration": 60, "steps": 2})).await });
    // Time for the request to be on the wire (a kill before it would restart the server).
    tokio::time::sleep(Duration::from_secs(1)).await;
    std::fs::remove_file(&pid_file).expect("pid file");
    // SAFETY: kill(2) on the pid of the server this test started.
    assert_eq!(unsafe { libc::kill(first, libc::SIGKILL) }, 0);
    let started = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the call ends when the server dies, not at its 60 s")
        .expect("joins");
    match &result {
        Err(ToolError::Failed(m)) => {
            assert!(m.contains("sh") && m.contains("died"), "{m}")
        }
        other => panic!("expected a failed call, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    // The next call starts the server again.
    let text = tool(&server, "echo")
        .call(ctx(), json!({"message": "back"}))
        .await
        .expect("echo after restart");
    assert_eq!(text, "Echo: back");
    let second = read_pid(&pid_file);
    assert_ne!(first, second);
    drop(server);
    wait_dead(second).await;
}

#[tokio::test]
async fn dropping_the_tools_kills_the_child() {
    let Some((server, dir)) = everything_with_pid().await else {
        return;
    };
    let pid = read_pid(&dir.path().join("pid"));
    let tools = server.tools();
    drop(server);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!process_ended(pid), "the tools still hold the connection");
    drop(tools);
    wait_dead(pid).await;
}

#[tokio::test]
async fn connect_failures_are_typed_errors() {
    let missing = McpServer::connect_stdio("/nonexistent/mcp-server", Vec::<String>::new()).await;
    assert!(
        matches!(&missing, Err(McpError::Spawn { server, .. }) if server == "/nonexistent/mcp-server"),
        "{missing:?}"
    );
    let exits = McpServer::connect_stdio("sh", ["-c", "echo boom >&2; exit 3"]).await;
    match &exits {
        Err(e @ McpError::Initialize { stderr, .. }) => {
            assert!(stderr.contains("boom"), "{e}");
            assert!(e.to_string().contains("boom"), "{e}");
        }
        other => panic!("expected Initialize, got {other:?}"),
    }
    let silent = McpServer::connect_stdio_with(
        "sleep",
        ["30"],
        McpOptions::default().connect_timeout(Duration::from_millis(300)),
    )
    .await;
    assert!(
        matches!(&silent, Err(McpError::Timeout { .. })),
        "{silent:?}"
    );
    let nobody = McpServer::connect_http_with(
        "http://127.0.0.1:9/mcp",
        McpOptions::default().connect_timeout(Duration::from_secs(5)),
    )
    .await;
    assert!(
        matches!(
            &nobody,
            Err(McpError::Initialize { .. } | McpError::Timeout { .. })
        ),
        "{nobody:?}"
    );
}
