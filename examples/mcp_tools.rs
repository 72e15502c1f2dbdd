//! MCP tools: connect to a Model Context Protocol server over stdio and let an agent call its
//! tools. No key, no network: the server is a 40-line Python script (JSON-RPC 2.0, one message
//! a line) the example writes to a temporary file and starts with `python3`.
//!
//! Run it: `cargo run --example mcp_tools` (prints "skipped" and exits 0 without `python3`)
//!
//! The server lists one tool, `add`; connected with the prefix `calc_`, the agent offers it to
//! the model as `calc_add` (the server is still called with its own name). A real server is
//! connected the same way, e.g. `McpServer::connect_stdio("uvx", ["mcp-server-time"])`, or
//! over HTTP with `McpServer::connect_http(url)`.

use std::io::Write;

use agentloop::mcp::{McpOptions, McpServer};
use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::Agent;

/// A minimal MCP server: `initialize`, `tools/list`, `tools/call` (notifications, which have no
/// id, get no answer).
const SERVER: &str = r#"
import json, sys

def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()

ADD = {
    "name": "add",
    "description": "Adds two numbers",
    "inputSchema": {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    },
}

for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        continue  # a notification, e.g. notifications/initialized
    if method == "initialize":
        result = {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "tiny-calc", "version": "1.0"},
        }
    elif method == "tools/list":
        result = {"tools": [ADD]}
    elif method == "tools/call" and msg["params"]["name"] == "add":
        args = msg["params"].get("arguments") or {}
        total = args["a"] + args["b"]
        if total == int(total):
            total = int(total)
        result = {"content": [{"type": "text", "text": str(total)}]}
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "unknown method"}})
        continue
    send({"jsonrpc": "2.0", "id": mid, "result": result})
"#;

const SCRIPT: &str = r#"{"turns": [
  {"text": "Adding with the MCP server.",
   "tool_calls": [{"name": "calc_add", "arguments": {"a": 19, "b": 23}}]},
  {"text": "19 + 23 = {{last_tool_result}}."}
]}"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output();
    if !python.is_ok_and(|o| o.status.success()) {
        println!(
            "skipped: this example starts its MCP server with python3, which is not installed"
        );
        return Ok(());
    }

    let mut file = tempfile::Builder::new()
        .prefix("tiny_mcp_server")
        .suffix(".py")
        .tempfile()?;
    file.write_all(SERVER.as_bytes())?;
    file.flush()?;
    let path = file.path().display().to_string();

    let server =
        McpServer::connect_stdio_with("python3", [path], McpOptions::default().prefix("calc_"))
            .await?;
    let names: Vec<&str> = server.specs().iter().map(|s| s.name.as_str()).collect();
    println!("MCP server tools: {names:?}");
    assert_eq!(names, ["calc_add"]);

    let agent = Agent::builder()
        .model(ScriptedModel::from_json_str(SCRIPT, "mcp_tools")?)
        .mcp(&server)
        .build();
    let out = agent.run("s1", "What is 19 + 23?").await?;
    for step in out.steps() {
        for r in step.tool_results {
            println!("  tool {} -> {}", r.name, r.content);
        }
    }
    let answer = out.result.final_text().unwrap_or_default();
    println!("answer: {answer}");
    assert_eq!(answer, "19 + 23 = 42.");
    // Dropping the server and the agent (which holds its tools) kills the child process.
    Ok(())
}
