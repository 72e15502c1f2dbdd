//! MCP tool servers (feature `mcp`): the tools of a [Model Context Protocol] server, reached
//! over stdio (a child process) or streamable HTTP with the official Rust SDK `rmcp`, as agent
//! [`Tool`]s.
//!
//! Connecting is IO, so it is an `async fn` ([`McpServer::connect`]) that returns a typed
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
//! [Model Context Protocol]: https://modelcontextprotocol.io

mod content;

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::model::CallToolRequestParams;
use rmcp::service::{Peer, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::AsyncReadExt;

use crate::tools::{Tool, ToolContext, ToolError, ToolSpec};

/// Where an MCP server is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpEndpoint {
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
    pub fn label(&self) -> &str {
        match self {
            McpEndpoint::Stdio { command, .. } => command,
            McpEndpoint::Http { url } => url,
        }
    }
}

/// How tools of a server are named and how long connecting may take.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct McpOptions {
    /// Put before every tool name (e.g. `time_` makes `time_get_current_time`); the server
    /// is still called with its own name. Default: none.
    pub prefix: Option<String>,
    /// The most a connect (spawn or HTTP connect, initialize, list tools) may take, including
    /// the restart after a server died. Default: 30 s.
    pub connect_timeout: Duration,
}

impl Default for McpOptions {
    fn default() -> Self {
        McpOptions {
            prefix: None,
            connect_timeout: Duration::from_secs(30),
        }
    }
}

impl McpOptions {
    /// Sets the tool name prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Sets the connect timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
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
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("endpoint", &self.conn.endpoint)
            .field(
                "tools",
                &self.tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
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
        let endpoint = McpEndpoint::Stdio {
            command: command.into(),
            args: args.into_iter().map(Into::into).collect(),
        };
        Self::connect(endpoint, McpOptions::default()).await
    }

    /// Connects to a streamable HTTP endpoint (default options).
    pub async fn connect_http(url: impl Into<String>) -> Result<Self, McpError> {
        let endpoint = McpEndpoint::Http { url: url.into() };
        Self::connect(endpoint, McpOptions::default()).await
    }

    /// Connects (spawning the child for stdio), initializes and lists the server's tools.
    pub async fn connect(endpoint: McpEndpoint, options: McpOptions) -> Result<Self, McpError> {
        let conn = Connection {
            endpoint,
            options,
            live: tokio::sync::Mutex::new(Live::default()),
        };
        let (peer, _) = conn.peer().await?;
        let server = conn.endpoint.label().to_string();
        let listed = tokio::time::timeout(conn.options.connect_timeout, peer.list_all_tools())
            .await
            .map_err(|_| McpError::Timeout {
                server: server.clone(),
                timeout: conn.options.connect_timeout,
                stderr: String::new(),
            })?
            .map_err(|e| McpError::ListTools {
                server,
                message: e.to_string(),
            })?;
        let prefix = conn.options.prefix.clone().unwrap_or_default();
        let tools = listed
            .into_iter()
            .map(|t| ToolSpec {
                name: format!("{prefix}{}", t.name),
                description: t
                    .description
                    .map(|d| d.into_owned())
                    .or(t.title)
                    .unwrap_or_default(),
                parameters: Value::Object((*t.input_schema).clone()),
            })
            .collect();
        Ok(McpServer {
            conn: Arc::new(conn),
            tools,
        })
    }

    /// Where the server is.
    pub fn endpoint(&self) -> &McpEndpoint {
        &self.conn.endpoint
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
    generation: u64,
}

impl Connection {
    /// A peer of a running client: the current one, or a new one when there is none or the
    /// current one's transport closed. Returns the client's generation.
    async fn peer(&self) -> Result<(Peer<RoleClient>, u64), McpError> {
        let mut live = self.live.lock().await;
        if let Some(client) = &live.client {
            if !client.is_transport_closed() {
                return Ok((client.peer().clone(), live.generation));
            }
        }
        live.client = None;
        let (client, stderr) = self.start().await?;
        let peer = client.peer().clone();
        live.client = Some(client);
        live.stderr = stderr;
        live.generation += 1;
        Ok((peer, live.generation))
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
    async fn start(&self) -> Result<(Client, Option<StderrTail>), McpError> {
        let server = self.endpoint.label().to_string();
        let timeout = self.options.connect_timeout;
        let (serving, stderr) = match &self.endpoint {
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
                (
                    tokio::time::timeout(timeout, ().serve(transport)).await,
                    tail,
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
                (
                    tokio::time::timeout(timeout, ().serve(transport)).await,
                    None,
                )
            }
        };
        let stderr_text = |tail: &Option<StderrTail>| tail.as_ref().map(|t| t.text());
        match serving {
            Ok(Ok(client)) => Ok((client, stderr)),
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

/// reqwest 0.13 (rmcp's) over rustls with ring and the webpki roots, like the providers'
/// client; redirects are not followed (a redirected POST would lose its JSON-RPC body).
fn http_client(connect_timeout: Duration) -> Result<reqwest13::Client, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest13::Client::builder()
        .tls_backend_preconfigured(tls)
        .connect_timeout(connect_timeout)
        .redirect(reqwest13::redirect::Policy::none())
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
        let (peer, generation) = self.conn.peer().await.map_err(|e| {
            ToolError::Failed(format!(
                "{e} (the call was not made; the next call tries again)"
            ))
        })?;
        let mut params = CallToolRequestParams::new(self.remote_name.clone());
        params.arguments = arguments;
        match peer.call_tool(params).await {
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
