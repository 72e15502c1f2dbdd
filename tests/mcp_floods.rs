//! MCP servers that flood the client: thousands of tools, a `tools/list`
//! whose cursors never end, a tool list too large, tool names the providers refuse, and a
//! server that floods `sampling/createMessage` requests during a call. The server is a real
//! child process: `tests/fixtures/mcp/hostile_server.py` (Python 3, no packages).
#![cfg(feature = "mcp")]
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::mcp::{McpError, McpOptions, McpServer};
use agentloop::tools::{Tool, ToolContext, ToolError, ToolRegistry};
use serde_json::json;

fn script() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp/hostile_server.py")
        .display()
        .to_string()
}

/// The hostile server's arguments for `python3`.
fn hostile(args: &[&str]) -> Vec<String> {
    std::iter::once(script())
        .chain(args.iter().map(|a| a.to_string()))
        .collect()
}

async fn connect(args: &[&str], options: McpOptions) -> Result<McpServer, McpError> {
    McpServer::connect_stdio_with("python3", hostile(args), options).await
}

fn ctx() -> ToolContext {
    ToolContext {
        call_id: "call_1".into(),
        root: PathBuf::from("."),
        idempotency_key: None,
        allow_instruction_writes: false,
    }
}

/// 10,000 tools over 100 pages connect, and go into a registry, in seconds (inserting them
/// one by one rebuilt the whole spec list per tool: O(n²), 87 s for 8,000).
#[tokio::test]
async fn ten_thousand_tools_connect_and_register_in_seconds() {
    let started = Instant::now();
    let server = connect(&["many", "10000", "100"], McpOptions::default())
        .await
        .expect("connects");
    assert_eq!(server.specs().len(), 10_000);
    assert!(server.skipped().is_empty());
    let mut registry = ToolRegistry::new();
    for tool in server.tools() {
        registry.insert(tool);
    }
    let specs = registry.specs();
    assert_eq!(specs.len(), 10_000);
    assert_eq!(specs[0].name, "t00000");
    assert_eq!(specs[9_999].name, "t09999");
    assert!(registry.get("t05000").is_some());
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

/// The registry's shared spec list follows inserts and removes, sorted by name.
#[test]
fn registry_specs_follow_inserts_and_removes() {
    struct Named(&'static str);
    #[async_trait::async_trait]
    impl Tool for Named {
        fn spec(&self) -> agentloop::tools::ToolSpec {
            agentloop::tools::ToolSpec {
                name: self.0.into(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            }
        }
        async fn call(&self, _: ToolContext, _: serde_json::Value) -> Result<String, ToolError> {
            Ok(String::new())
        }
    }
    let mut r = ToolRegistry::new();
    r.insert(Arc::new(Named("b")));
    r.insert(Arc::new(Named("a")));
    let names = |r: &ToolRegistry| r.specs().iter().map(|s| s.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&r), ["a", "b"]);
    let before = r.specs();
    r.insert(Arc::new(Named("c")));
    r.insert(Arc::new(Named("a")));
    assert_eq!(names(&r), ["a", "b", "c"]);
    assert_eq!(before.len(), 2, "a spec list handed out does not change");
    let clone = r.clone();
    assert!(r.remove("b").is_some());
    assert_eq!(names(&r), ["a", "c"]);
    assert_eq!(names(&clone), ["a", "b", "c"]);
    assert!(r.remove("b").is_none());
}

/// Cursors that never end: the read stops at `max_list_pages` (empty pages) or `max_tools`
/// (pages of tools) with a typed error, not at the connect timeout after gigabytes.
#[tokio::test]
async fn endless_pagination_ends_with_a_typed_error() {
    let started = Instant::now();
    match connect(&["endless", "0", "0"], McpOptions::default()).await {
        Err(McpError::TooManyPages { limit, .. }) => assert_eq!(limit, 1_024),
        other => panic!("{other:?}"),
    }
    match connect(&["endless", "500", "10"], McpOptions::default()).await {
        Err(e @ McpError::TooManyTools { .. }) => {
            assert!(e.to_string().contains("McpOptions::max_tools"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(25));
    let small = McpOptions::default().max_list_pages(3).max_tools(1_000_000);
    match connect(&["endless", "1", "0"], small).await {
        Err(McpError::TooManyPages { limit, .. }) => assert_eq!(limit, 3),
        other => panic!("{other:?}"),
    }
}

/// Pages of 1 MB descriptions: the bytes bound ends the read.
#[tokio::test]
async fn a_tool_list_too_large_ends_with_a_typed_error() {
    match connect(&["endless", "1", "1000000"], McpOptions::default()).await {
        Err(McpError::ToolListTooLarge { limit, .. }) => assert_eq!(limit, 32 * 1024 * 1024),
        other => panic!("{other:?}"),
    }
    let small = McpOptions::default().max_list_bytes(100);
    match connect(&["many", "3", "3"], small).await {
        Err(McpError::ToolListTooLarge { limit, .. }) => assert_eq!(limit, 100),
        other => panic!("{other:?}"),
    }
}

/// Names the providers refuse (`^[a-zA-Z0-9_-]{1,64}$`) and a repeated name are skipped, each
/// with its reason; the rest are offered.
#[tokio::test]
async fn tools_with_names_the_providers_refuse_are_skipped_with_a_reason() {
    let server = connect(&["names"], McpOptions::default())
        .await
        .expect("connects");
    let names: Vec<&str> = server.specs().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["dup", "good_tool-1"]);
    assert_eq!(server.specs()[0].description, "first");
    let reasons: Vec<&str> = server.skipped().iter().map(|s| s.reason.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "the name is empty",
            "the name has '\\0' at byte 1 (allowed: a-z A-Z 0-9 _ -)",
            "the name has '\\u{1b}' at byte 0 (allowed: a-z A-Z 0-9 _ -)",
            "the name has '\\n' at byte 4 (allowed: a-z A-Z 0-9 _ -)",
            "the name has '.' at byte 0 (allowed: a-z A-Z 0-9 _ -)",
            "the name is 1000000 bytes long (at most 64)",
            "an earlier tool of the server has the same name",
        ]
    );
    for skipped in server.skipped() {
        let shown = skipped.to_string();
        assert!(shown.len() < 200, "{shown}");
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
    }
    // With a prefix, the whole name is checked: `p_` + 63 bytes is too long.
    let server = connect(&["names"], McpOptions::default().prefix("p_"))
        .await
        .expect("connects");
    let names: Vec<&str> = server.specs().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["p_dup", "p_good_tool-1"]);
    // A prefix that cannot start a name fails the connect.
    match connect(&["names"], McpOptions::default().prefix("my tools.")).await {
        Err(McpError::InvalidPrefix { reason, .. }) => {
            assert_eq!(
                reason,
                "the name has ' ' at byte 2 (allowed: a-z A-Z 0-9 _ -)"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// Calls the hostile server's tool in `mode` (20,000 requests it never reads the answers of)
/// and checks that the connection is dropped at the default bound of 64, in seconds.
async fn flood_drops_the_connection(mode: &str) {
    let server = connect(&[mode, "20000"], McpOptions::default())
        .await
        .expect("connects");
    let echo = server.tools().pop().expect("a tool");
    let started = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(30), echo.call(ctx(), json!({})))
        .await
        .expect("the call ends");
    match result {
        Err(ToolError::Failed(message)) => {
            assert!(
                message.contains("more than 64 requests")
                    && message.contains("max_pending_requests"),
                "{mode}: {message}"
            );
        }
        other => panic!("{mode}: {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10), "{mode}");
}

/// The bound counts requests, not ids: a server that sends every request with one id is cut
/// off at the same bound (the client kept an answer task per request: 2.3 GB before).
#[tokio::test]
async fn a_flood_reusing_one_request_id_drops_the_connection() {
    flood_drops_the_connection("flood-same-id").await;
}

/// A cancel does not free the slot of an answer already being written: a server that pairs
/// each request with a cancel and never reads is cut off at the same bound (1.2 GB before).
#[tokio::test]
async fn a_flood_pairing_each_request_with_a_cancel_drops_the_connection() {
    flood_drops_the_connection("flood-cancel").await;
}

/// A server that answers a call only after 20,000 `sampling/createMessage` requests it never
/// reads the answers of: past `max_pending_requests` the connection is dropped and the call
/// fails naming the bound (before, the client kept every answer, ~1.85 KB each); the next call
/// starts the server again.
#[tokio::test]
async fn a_sampling_flood_during_a_call_drops_the_connection() {
    flood_drops_the_connection("flood").await;
    // Under the bound the same flood is answered: the bound is on requests left unanswered.
    let patient = connect(
        &["flood", "2000"],
        McpOptions::default().max_pending_requests(30_000),
    )
    .await
    .expect("connects");
    let echo = patient.tools().pop().expect("a tool");
    let text = tokio::time::timeout(Duration::from_secs(30), echo.call(ctx(), json!({})))
        .await
        .expect("the call ends")
        .expect("answers");
    assert_eq!(text, "done");
}
