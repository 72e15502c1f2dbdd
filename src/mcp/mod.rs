//! MCP tool servers (feature `mcp`): the tools of a [Model Context Protocol] server, reached
//! over stdio (a child process) or streamable HTTP with the official Rust SDK `rmcp`, as agent
//! [`Tool`]s.
//!
//! Connecting is IO, so it is an `async fn` ([`McpServer::connect_stdio`],
//! [`McpServer::connect_http`], and their `_with` forms taking [`McpOptions`]) that returns a typed
//! [`McpError`]; the agent builder stays synchronous and takes the connected server
//! ([`AgentBuilder::mcp`](crate::runtime::AgentBuilder::mcp)):
//!
//! ```no_run
//! # async fn demo() -> Result<(), agentloop::mcp::McpError> {
//! use agentloop::mcp::McpServer;
//! use agentloop::provider::scripted::ScriptedModel;
//! use agentloop::runtime::Agent;
//!
//! let time = McpServer::connect_stdio("python3", ["-m", "mcp_server_time"]).await?;
//! let agent = Agent::builder()
//!     .model(ScriptedModel::demo())
//!     .mcp(&time)
//!     .build();
//! # drop(agent);
//! # Ok(())
//! # }
//! ```
//!
//! Each tool the server lists becomes a tool with the server's name (optionally prefixed,
//! [`McpOptions::prefix`]), description and input schema. A result's text content is the
//! tool result, structured content alone its JSON text, images and other binary content a
//! short placeholder naming the type; `isError: true` is a [`ToolError::Failed`].
//!
//! **A server that dies** (the child exits, the HTTP server goes away) fails the call in
//! flight with a [`ToolError::Failed`] naming the server, at once (the SDK sees the pipe or
//! connection close; nothing waits for a reply that cannot come). The connection is dropped,
//! and **the next call starts the server again** (and initializes a new session); the tool
//! list is the one read at the first connect. Calls are bounded by the runtime's per-tool
//! timeout like every tool's. A child process is killed when the last handle to its
//! connection (the [`McpServer`] and the tools it made, e.g. inside an agent) is dropped.
//!
//! **Bounds** (a server is not trusted with the client's memory): `tools/list` is read page by
//! page, at most [`McpOptions::max_list_pages`] pages, [`McpOptions::max_tools`] tools and
//! [`McpOptions::max_list_bytes`] bytes of names, descriptions and schemas, each crossed bound
//! a typed [`McpError`]; rmcp's response cache is off (the list is read once). A tool whose
//! name (with the prefix) the providers would refuse (`^[a-zA-Z0-9_-]{1,64}$`, see
//! [`check_tool_name`]) or that repeats an earlier tool's name is **skipped with a warning**
//! ([`McpServer::skipped`], and a `tracing` warning) rather than failing the connect: one bad
//! tool would otherwise make every request to an OpenAI-compatible or Anthropic model fail.
//! A server may have at most [`McpOptions::max_pending_requests`] requests to the client
//! (`sampling/createMessage`...) unanswered; past that its connection is dropped and the call
//! in flight fails.
//!
//! [Model Context Protocol]: https://modelcontextprotocol.io

mod content;
mod guard;
mod names;

use names::InvalidToolName;
pub use names::{check_tool_name, SkippedTool, MAX_TOOL_NAME_LEN};

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::model::{CallToolRequestParams, PaginatedRequestParams};
use rmcp::service::{Peer, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::AsyncReadExt;

use crate::tools::{Tool, ToolContext, ToolError, ToolSpec};

/// Where an MCP server is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum McpEndpoint {
    /// A child process speaking MCP on its stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// A streamable HTTP endpoint (e.g. `http://127.0.0.1:3001/mcp`).
    Http {
        /// The endpoint URL.
        url: String,
    },
}

impl McpEndpoint {
    /// The name errors use for the server: the program (as given) or the URL.
    fn label(&self) -> &str {
        match self {
            McpEndpoint::Stdio { command, .. } => command,
            McpEndpoint::Http { url } => url,
        }
    }
}

/// Default [`McpOptions::max_tools`]: 16,384.
pub const DEFAULT_MAX_TOOLS: usize = 16_384;
/// Default [`McpOptions::max_list_pages`]: 1,024.
pub const DEFAULT_MAX_LIST_PAGES: usize = 1_024;
/// Default [`McpOptions::max_list_bytes`]: 32 MiB.
pub const DEFAULT_MAX_LIST_BYTES: usize = 32 * 1024 * 1024;
/// Default [`McpOptions::max_pending_requests`]: 64.
pub const DEFAULT_MAX_PENDING_REQUESTS: usize = 64;

/// How tools of a server are named, how long connecting may take, and how much a server may
/// send.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct McpOptions {
    /// Put before every tool name (e.g. `time_` makes `time_get_current_time`); the server
    /// is still called with its own name. Default: none.
    pub prefix: Option<String>,
    /// The most a connect (spawn or HTTP connect, initialize, list tools) may take, including
    /// the restart after a server died. Default: 30 s.
    pub connect_timeout: Duration,
    /// The most tools a server may list ([`McpError::TooManyTools`] past it). Default:
    /// [`DEFAULT_MAX_TOOLS`] (16,384; every tool is offered to the model on every request,
    /// so even a thousand is far beyond use).
    pub max_tools: usize,
    /// The most `tools/list` pages read ([`McpError::TooManyPages`] past it; a server whose
    /// cursors never end). Default: [`DEFAULT_MAX_LIST_PAGES`] (1,024).
    pub max_list_pages: usize,
    /// The most bytes of tool names, titles, descriptions and input schemas (as JSON) a
    /// server may list ([`McpError::ToolListTooLarge`] past it). Default:
    /// [`DEFAULT_MAX_LIST_BYTES`] (32 MiB).
    pub max_list_bytes: usize,
    /// The most requests the server may have sent to the client (`sampling/createMessage`,
    /// `roots/list`, `ping`...) whose answers are not written yet; past it the connection is
    /// dropped and the call in flight fails. Default: [`DEFAULT_MAX_PENDING_REQUESTS`] (64).
    pub max_pending_requests: usize,
}

impl Default for McpOptions {
    fn default() -> Self {
        McpOptions {
            prefix: None,
            connect_timeout: Duration::from_secs(30),
            max_tools: DEFAULT_MAX_TOOLS,
            max_list_pages: DEFAULT_MAX_LIST_PAGES,
            max_list_bytes: DEFAULT_MAX_LIST_BYTES,
            max_pending_requests: DEFAULT_MAX_PENDING_REQUESTS,
        }
    }
}

impl McpOptions {
    setters! {
        /// Sets the tool name prefix.
        prefix(prefix: impl Into<String>) => prefix = Some(prefix.into());

        /// Sets the connect timeout.
        connect_timeout(timeout: Duration) => connect_timeout = timeout;

        /// Sets [`McpOptions::max_tools`].
        max_tools(n: usize) => max_tools = n;

        /// Sets [`McpOptions::max_list_pages`].
        max_list_pages(n: usize) => max_list_pages = n;

        /// Sets [`McpOptions::max_list_bytes`].
        max_list_bytes(n: usize) => max_list_bytes = n;

        /// Sets [`McpOptions::max_pending_requests`].
        max_pending_requests(n: usize) => max_pending_requests = n;
    }
}

/// Why an MCP server could not be connected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The child process could not be started.
    #[error("MCP server {server}: cannot start it: {source}")]
    Spawn {
        /// The server (program or URL).
        server: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The HTTP client could not be built.
    #[error("MCP server {server}: cannot build the HTTP client: {message}")]
    HttpClient {
        /// The server.
        server: String,
        /// What failed.
        message: String,
    },
    /// The MCP initialization handshake failed (the process exited, spoke something else,
    /// the URL answered with an error...).
    #[error("MCP server {server}: initialization failed: {message}{}", stderr_note(.stderr))]
    Initialize {
        /// The server.
        server: String,
        /// What failed.
        message: String,
        /// The end of the child's stderr, if it wrote any.
        stderr: String,
    },
    /// `tools/list` failed.
    #[error("MCP server {server}: listing its tools failed: {message}")]
    ListTools {
        /// The server.
        server: String,
        /// What failed.
        message: String,
    },
    /// The server listed more than [`McpOptions::max_tools`] tools.
    #[error("MCP server {server}: it lists more than {limit} tools (McpOptions::max_tools)")]
    TooManyTools {
        /// The server.
        server: String,
        /// The bound.
        limit: usize,
    },
    /// `tools/list` had more than [`McpOptions::max_list_pages`] pages (its cursors did not
    /// end).
    #[error(
        "MCP server {server}: its tool list has more than {limit} pages (McpOptions::max_list_pages)"
    )]
    TooManyPages {
        /// The server.
        server: String,
        /// The bound.
        limit: usize,
    },
    /// The listed tools' names, descriptions and schemas took more than
    /// [`McpOptions::max_list_bytes`] bytes.
    #[error(
        "MCP server {server}: its tool list is larger than {limit} bytes (McpOptions::max_list_bytes)"
    )]
    ToolListTooLarge {
        /// The server.
        server: String,
        /// The bound.
        limit: usize,
    },
    /// The [`McpOptions::prefix`] has a character the providers refuse in a tool name, or
    /// leaves no room for one: every tool would be skipped.
    #[error(
        "MCP server {server}: the tool name prefix {prefix} cannot start a tool name: {reason}"
    )]
    InvalidPrefix {
        /// The server.
        server: String,
        /// The prefix (quoted, escaped, cut).
        prefix: String,
        /// Why (e.g. `the name has ' ' at byte 2 (allowed: a-z A-Z 0-9 _ -)`).
        reason: String,
    },
    /// Connecting took longer than [`McpOptions::connect_timeout`].
    #[error("MCP server {server}: no answer within {timeout:?} while connecting{}", stderr_note(.stderr))]
    Timeout {
        /// The server.
        server: String,
        /// The timeout.
        timeout: Duration,
        /// The end of the child's stderr, if it wrote any.
        stderr: String,
    },
}

fn stderr_note(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        format!(" (its stderr ends: {})", stderr.trim())
    }
}

/// A connected MCP server: its tools, and the connection they share.
///
/// Cloning shares the connection. The child process (stdio) lives as long as the server or any
/// of its tools.
#[derive(Clone)]
pub struct McpServer {
    conn: Arc<Connection>,
    tools: Vec<ToolSpec>,
    skipped: Vec<SkippedTool>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("endpoint", &self.conn.endpoint)
            .field(
                "tools",
                &self.tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .field("skipped", &self.skipped)
            .finish()
    }
}

impl McpServer {
    /// Starts `command args` and connects to it over stdio (default options).
    pub async fn connect_stdio<I, S>(command: impl Into<String>, args: I) -> Result<Self, McpError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::connect_stdio_with(command, args, McpOptions::default()).await
    }

    /// Starts `command args` and connects to it over stdio, with `options`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), agentloop::mcp::McpError> {
    /// use agentloop::mcp::{McpOptions, McpServer};
    ///
    /// let options = McpOptions::default().prefix("time_");
    /// let time = McpServer::connect_stdio_with("uvx", ["mcp-server-time"], options).await?;
    /// assert!(time.specs().iter().all(|s| s.name.starts_with("time_")));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_stdio_with<I, S>(
        command: impl Into<String>,
        args: I,
        options: McpOptions,
    ) -> Result<Self, McpError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let endpoint = McpEndpoint::Stdio {
            command: command.into(),
            args: args.into_iter().map(Into::into).collect(),
        };
        Self::connect(endpoint, options).await
    }

    /// Connects to a streamable HTTP endpoint (e.g. `http://127.0.0.1:3001/mcp`; default
    /// options).
    pub async fn connect_http(url: impl Into<String>) -> Result<Self, McpError> {
        Self::connect_http_with(url, McpOptions::default()).await
    }

    /// Connects to a streamable HTTP endpoint, with `options`.
    pub async fn connect_http_with(
        url: impl Into<String>,
        options: McpOptions,
    ) -> Result<Self, McpError> {
        Self::connect(McpEndpoint::Http { url: url.into() }, options).await
    }

    /// Connects (spawning the child for stdio), initializes and lists the server's tools
    /// (within the bounds of [`McpOptions`]; tools with names the providers refuse are
    /// skipped, see [`McpServer::skipped`]).
    async fn connect(endpoint: McpEndpoint, options: McpOptions) -> Result<Self, McpError> {
        let server = endpoint.label().to_string();
        let prefix = options.prefix.clone().unwrap_or_default();
        if !prefix.is_empty() {
            // The prefix alone must be a valid name with room for at least one more byte.
            let reason = match names::check(&prefix) {
                Ok(()) if prefix.len() >= MAX_TOOL_NAME_LEN => Some(InvalidToolName::TooLong {
                    len: prefix.len() + 1,
                }),
                Ok(()) => None,
                Err(e) => Some(e),
            };
            if let Some(reason) = reason {
                return Err(McpError::InvalidPrefix {
                    server,
                    prefix: names::shown(&prefix),
                    reason: reason.to_string(),
                });
            }
        }
        let conn = Connection {
            endpoint,
            options,
            live: tokio::sync::Mutex::new(Live::default()),
        };
        let (peer, _, _) = conn.peer().await?;
        // The list is read once: rmcp's cache would only keep a second copy of every page.
        peer.set_response_cache_config(rmcp::ClientCacheConfig::disabled())
            .await;
        let listed = tokio::time::timeout(conn.options.connect_timeout, list_tools(&peer, &conn))
            .await
            .map_err(|_| McpError::Timeout {
                server: server.clone(),
                timeout: conn.options.connect_timeout,
                stderr: String::new(),
            })??;
        let mut seen = std::collections::HashSet::new();
        let mut tools = Vec::with_capacity(listed.len());
        let mut skipped = Vec::new();
        for t in listed {
            let name = format!("{prefix}{}", t.name);
            // The server's own name must not be empty either (`p_` + `` is not a tool).
            let verdict = match names::check(&name) {
                _ if t.name.is_empty() => Err(InvalidToolName::Empty),
                Ok(()) if !seen.insert(name.clone()) => Err(InvalidToolName::Duplicate),
                checked => checked,
            };
            if let Err(reason) = verdict {
                let skip = SkippedTool {
                    name: names::shown(&name),
                    reason: reason.to_string(),
                };
                tracing::warn!(server = %server, "MCP {skip}");
                skipped.push(skip);
                continue;
            }
            tools.push(ToolSpec {
                name,
                description: t
                    .description
                    .map(|d| d.into_owned())
                    .or(t.title)
                    .unwrap_or_default(),
                parameters: Value::Object(Arc::unwrap_or_clone(t.input_schema)),
            });
        }
        Ok(McpServer {
            conn: Arc::new(conn),
            tools,
            skipped,
        })
    }

    /// The tools the server listed that are not offered (a name the providers refuse, or a
    /// repeated name), with why; each was also logged as a `tracing` warning.
    pub fn skipped(&self) -> &[SkippedTool] {
        &self.skipped
    }

    /// Where the server is: the program (as given) of a stdio server, the URL of an HTTP
    /// server; the name its errors use.
    pub fn label(&self) -> &str {
        self.conn.endpoint.label()
    }

    /// The specs of the server's tools, as the model sees them (prefixed), in the server's
    /// order.
    pub fn specs(&self) -> &[ToolSpec] {
        &self.tools
    }

    /// The server's tools as agent tools, sharing this connection.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let prefix_len = self.conn.options.prefix.as_deref().map_or(0, str::len);
        self.tools
            .iter()
            .map(|spec| {
                Arc::new(McpTool {
                    conn: self.conn.clone(),
                    remote_name: spec.name[prefix_len..].to_string(),
                    spec: spec.clone(),
                }) as Arc<dyn Tool>
            })
            .collect()
    }
}

/// Reads `tools/list` page by page within the bounds of the connection's options.
async fn list_tools(
    peer: &Peer<RoleClient>,
    conn: &Connection,
) -> Result<Vec<rmcp::model::Tool>, McpError> {
    let server = || conn.endpoint.label().to_string();
    let options = &conn.options;
    let mut tools = Vec::new();
    let mut bytes = 0usize;
    let mut cursor = None;
    for _ in 0..options.max_list_pages {
        let params = cursor.map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let page = peer
            .list_tools(params)
            .await
            .map_err(|e| McpError::ListTools {
                server: server(),
                message: e.to_string(),
            })?;
        for tool in page.tools {
            if tools.len() >= options.max_tools {
                return Err(McpError::TooManyTools {
                    server: server(),
                    limit: options.max_tools,
                });
            }
            bytes = bytes.saturating_add(tool_bytes(&tool));
            if bytes > options.max_list_bytes {
                return Err(McpError::ToolListTooLarge {
                    server: server(),
                    limit: options.max_list_bytes,
                });
            }
            tools.push(tool);
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(tools),
        }
    }
    Err(McpError::TooManyPages {
        server: server(),
        limit: options.max_list_pages,
    })
}

/// The bytes of a listed tool that are kept: name, title, description and input schema (as
/// compact JSON, counted without building the text).
fn tool_bytes(tool: &rmcp::model::Tool) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut schema = Count(0);
    // Writing into a counter cannot fail; a schema that could not be written counts 0.
    let _ = serde_json::to_writer(&mut schema, &*tool.input_schema);
    tool.name.len()
        + tool.title.as_ref().map_or(0, String::len)
        + tool.description.as_ref().map_or(0, |d| d.len())
        + schema.0
}

type Client = RunningService<RoleClient, ()>;

/// The connection recipe and the live session, replaced after the server died.
struct Connection {
    endpoint: McpEndpoint,
    options: McpOptions,
    live: tokio::sync::Mutex<Live>,
}

/// The running client (if any) and a counter of the clients started, so a failed call drops
/// only the client it used, not a newer one another call already started.
#[derive(Default)]
struct Live {
    client: Option<Client>,
    stderr: Option<StderrTail>,
    /// The bound on the current client's unanswered server requests.
    guard: Option<Arc<guard::RequestGuard>>,
    generation: u64,
}

impl Connection {
    /// A peer of a running client: the current one, or a new one when there is none or the
    /// current one's transport closed. Returns the client's generation and the bound on its
    /// unanswered server requests.
    async fn peer(&self) -> Result<(Peer<RoleClient>, u64, Arc<guard::RequestGuard>), McpError> {
        let mut live = self.live.lock().await;
        if let (Some(client), Some(guard)) = (&live.client, &live.guard) {
            if !client.is_transport_closed() && guard.tripped().is_none() {
                return Ok((client.peer().clone(), live.generation, guard.clone()));
            }
        }
        live.client = None;
        let (client, stderr, guard) = self.start().await?;
        let peer = client.peer().clone();
        live.client = Some(client);
        live.stderr = stderr;
        live.guard = Some(guard.clone());
        live.generation += 1;
        Ok((peer, live.generation, guard))
    }

    /// Drops the client of `generation` if it is still the current one (its server died); the
    /// next [`peer`](Self::peer) starts a new one. Returns the end of the dead child's stderr.
    async fn discard(&self, generation: u64) -> String {
        let mut live = self.live.lock().await;
        if live.generation != generation {
            return String::new();
        }
        live.client = None;
        live.stderr.take().map(|s| s.text()).unwrap_or_default()
    }

    /// Spawns or connects, and initializes, within the connect timeout.
    async fn start(
        &self,
    ) -> Result<(Client, Option<StderrTail>, Arc<guard::RequestGuard>), McpError> {
        let server = self.endpoint.label().to_string();
        let timeout = self.options.connect_timeout;
        let max_pending = self.options.max_pending_requests;
        let (serving, stderr, request_guard) = match &self.endpoint {
            McpEndpoint::Stdio { command, args } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args);
                // Killed with its process group when the transport is dropped; `KillOnDrop`
                // kills the child itself even when no runtime is left to run rmcp's cleanup.
                let mut wrapped = CommandWrap::from(cmd);
                wrapped.wrap(KillOnDrop).wrap(ProcessGroup::leader());
                let (transport, stderr) = TokioChildProcess::builder(wrapped)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|source| McpError::Spawn {
                        server: server.clone(),
                        source,
                    })?;
                let tail = stderr.map(StderrTail::spawn);
                let (transport, guard) =
                    guard::Guarded::new(transport, max_pending, server.clone());
                (
                    tokio::time::timeout(timeout, ().serve(transport)).await,
                    tail,
                    guard,
                )
            }
            McpEndpoint::Http { url } => {
                let client = http_client(timeout).map_err(|message| McpError::HttpClient {
                    server: server.clone(),
                    message,
                })?;
                let transport = StreamableHttpClientTransport::with_client(
                    client,
                    StreamableHttpClientTransportConfig::with_uri(url.as_str()),
                );
                let (transport, guard) =
                    guard::Guarded::new(transport, max_pending, server.clone());
                (
                    tokio::time::timeout(timeout, ().serve(transport)).await,
                    None,
                    guard,
                )
            }
        };
        let stderr_text = |tail: &Option<StderrTail>| tail.as_ref().map(|t| t.text());
        match serving {
            Ok(Ok(client)) => Ok((client, stderr, request_guard)),
            Ok(Err(e)) => {
                // Give the dying child a moment to finish writing why it failed.
                tokio::time::sleep(Duration::from_millis(100)).await;
                Err(McpError::Initialize {
                    server,
                    message: e.to_string(),
                    stderr: stderr_text(&stderr).unwrap_or_default(),
                })
            }
            Err(_) => Err(McpError::Timeout {
                server,
                timeout,
                stderr: stderr_text(&stderr).unwrap_or_default(),
            }),
        }
    }
}

/// rmcp's reqwest (the providers' too) over the crate's TLS configuration
/// ([`crate::provider::tls`]); redirects are not followed (a redirected POST would lose its
/// JSON-RPC body).
fn http_client(connect_timeout: Duration) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .tls_backend_preconfigured(crate::provider::tls::client_config(true)?)
        .connect_timeout(connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| e.to_string())
}

/// The last bytes a child wrote to stderr (at most [`StderrTail::MAX`]), for error messages.
/// A reader task drains the pipe so a chatty server never blocks on it.
#[derive(Clone)]
struct StderrTail(Arc<std::sync::Mutex<VecDeque<u8>>>);

impl StderrTail {
    const MAX: usize = 2048;

    fn spawn(mut stderr: tokio::process::ChildStderr) -> Self {
        let tail = StderrTail(Arc::default());
        let keep = tail.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                if let Ok(mut t) = keep.0.lock() {
                    t.extend(&buf[..n]);
                    let excess = t.len().saturating_sub(Self::MAX);
                    t.drain(..excess);
                }
            }
        });
        tail
    }

    fn text(&self) -> String {
        match self.0.lock() {
            Ok(t) => String::from_utf8_lossy(&t.iter().copied().collect::<Vec<_>>()).into_owned(),
            Err(_) => String::new(),
        }
    }
}

/// One tool of an MCP server.
struct McpTool {
    conn: Arc<Connection>,
    /// The server's name for the tool (without the prefix).
    remote_name: String,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, _ctx: ToolContext, arguments: Value) -> Result<String, ToolError> {
        let arguments = match arguments {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => {
                return Err(ToolError::InvalidArguments(format!(
                    "MCP tool arguments must be a JSON object, got {other}"
                )))
            }
        };
        let server = self.conn.endpoint.label();
        let (peer, generation, guard) = self.conn.peer().await.map_err(|e| {
            ToolError::Failed(format!(
                "{e} (the call was not made; the next call tries again)"
            ))
        })?;
        let mut params = CallToolRequestParams::new(self.remote_name.clone());
        params.arguments = arguments;
        let answer = tokio::select! {
            answer = peer.call_tool(params) => answer,
            // The server flooded the client with requests: its connection was ended.
            why = guard.wait_tripped() => {
                let why = why.to_string();
                let stderr = self.conn.discard(generation).await;
                return Err(ToolError::Failed(format!(
                    "{why}; it is restarted on the next call{}",
                    stderr_note(&stderr)
                )));
            }
        };
        match answer {
            Ok(result) => content::render(&result),
            // The server answered with a JSON-RPC error (unknown tool, invalid params): it is
            // alive, the call failed.
            Err(ServiceError::McpError(e)) => Err(ToolError::Failed(format!(
                "MCP server {server}: {}",
                e.message
            ))),
            Err(e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                let stderr = self.conn.discard(generation).await;
                Err(ToolError::Failed(format!(
                    "MCP server {server} died during the call ({e}); it is restarted on the \
                     next call{}",
                    stderr_note(&stderr)
                )))
            }
            Err(e) => Err(ToolError::Failed(format!("MCP server {server}: {e}"))),
        }
    }
}
