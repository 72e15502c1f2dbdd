//! A loopback HTTP/1.1 server for the provider clients, and the client-side helpers that talk
//! to it.
//!
//! The server is a small hand-written responder on tokio rather than hyper/axum: the faults
//! under test (a reset after N body bytes, headers that never come, a body that stops
//! mid-chunk, a body that never ends) are exactly what a well-behaved server framework will
//! not do.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentloop::model::{Model, ModelParams, ModelRequest};
use agentloop::provider::http::{build_model, HttpConfig, ProviderKind};
use agentloop::tools::ToolSpec;
use agentloop::ModelError;
use agentloop::{Message, MessageDelta};
use futures::StreamExt;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The API key the helpers configure; tests check it never leaks.
pub const KEY: &str = "sk-test-SUPERSECRETKEY0123456789";

/// What the server does with one connection.
#[derive(Clone)]
pub enum Reply {
    /// 200 `text/event-stream`, chunked; each piece written and flushed on its own.
    Sse { pieces: Vec<Vec<u8>>, gap: Duration },
    /// 200 `text/event-stream`, chunked: `head`, then `piece` again and again until the
    /// client goes away (the bytes written are counted in [`Server::bytes_sent`]).
    Endless { head: Vec<u8>, piece: Vec<u8> },
    /// A complete response with this status, headers and body.
    Status {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// Headers and these body pieces, then a TCP reset.
    ResetAfter { pieces: Vec<Vec<u8>> },
    /// Headers and these body pieces, then silence for `hold`.
    StallAfter {
        pieces: Vec<Vec<u8>>,
        hold: Duration,
    },
    /// Reads the request and answers nothing for `hold`.
    NoHeaders { hold: Duration },
    /// Reads the request and closes the connection without a byte.
    Close,
}

/// One request as the server read it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Request line and headers.
    pub head: String,
    /// The JSON body (`null` when it was not JSON).
    pub body: serde_json::Value,
}

impl Recorded {
    /// The value of header `name` (case-insensitive), if sent.
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }
}

/// A running server; it lives as long as the test's runtime.
pub struct Server {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The bound address.
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Recorded>>>,
    sent: Arc<AtomicU64>,
}

impl Server {
    /// Serves `replies` in order, one per connection; further connections get a 500.
    pub async fn start(replies: Vec<Reply>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let sent = Arc::new(AtomicU64::new(0));
        let (recorded, counter) = (requests.clone(), sent.clone());
        tokio::spawn(async move {
            let mut replies = replies.into_iter();
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                let reply = replies.next().unwrap_or(Reply::Status {
                    status: 500,
                    headers: vec![],
                    body: "{}".into(),
                });
                let (recorded, counter) = (recorded.clone(), counter.clone());
                tokio::spawn(async move {
                    serve(sock, reply, recorded, counter).await;
                });
            }
        });
        Server {
            url: format!("http://{addr}"),
            addr,
            requests,
            sent,
        }
    }

    /// The server's URL under another host name that resolves to it (`localhost`): another
    /// origin for the client.
    pub fn url_as(&self, host: &str) -> String {
        format!("http://{host}:{}", self.addr.port())
    }

    /// Every request read so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    /// Body bytes written by [`Reply::Endless`] so far.
    pub fn bytes_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

async fn read_request(sock: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body = serde_json::from_slice(&buf[head_end..]).unwrap_or(serde_json::Value::Null);
    Some(Recorded { head, body })
}

async fn write_piece(sock: &mut TcpStream, piece: &[u8]) -> std::io::Result<()> {
    if piece.is_empty() {
        return Ok(()); // a zero-size chunk would end the body
    }
    sock.write_all(format!("{:x}\r\n", piece.len()).as_bytes())
        .await?;
    sock.write_all(piece).await?;
    sock.write_all(b"\r\n").await?;
    sock.flush().await
}

const SSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";

async fn serve(
    mut sock: TcpStream,
    reply: Reply,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    sent: Arc<AtomicU64>,
) {
    sock.set_nodelay(true).ok();
    let Some(req) = read_request(&mut sock).await else {
        return;
    };
    recorded.lock().unwrap().push(req);
    match reply {
        Reply::Sse { pieces, gap } => {
            if sock.write_all(SSE_HEAD).await.is_err() {
                return;
            }
            for p in pieces {
                if write_piece(&mut sock, &p).await.is_err() {
                    return;
                }
                if !gap.is_zero() {
                    tokio::time::sleep(gap).await;
                }
            }
            let _ = sock.write_all(b"0\r\n\r\n").await;
            let _ = sock.shutdown().await;
        }
        Reply::Endless { head, piece } => {
            if sock.write_all(SSE_HEAD).await.is_err()
                || write_piece(&mut sock, &head).await.is_err()
            {
                return;
            }
            while write_piece(&mut sock, &piece).await.is_ok() {
                sent.fetch_add(piece.len() as u64, Ordering::Relaxed);
            }
        }
        Reply::Status {
            status,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock.write_all(body.as_bytes()).await;
            let _ = sock.shutdown().await;
        }
        Reply::ResetAfter { pieces } => {
            let _ = sock.write_all(SSE_HEAD).await;
            for p in pieces {
                let _ = write_piece(&mut sock, &p).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            #[allow(deprecated)] // linger 0 does not block: it makes close() send RST
            let _ = sock.set_linger(Some(Duration::ZERO));
            drop(sock);
        }
        Reply::StallAfter { pieces, hold } => {
            let _ = sock.write_all(SSE_HEAD).await;
            for p in pieces {
                let _ = write_piece(&mut sock, &p).await;
            }
            tokio::time::sleep(hold).await;
        }
        Reply::NoHeaders { hold } => tokio::time::sleep(hold).await,
        Reply::Close => drop(sock),
    }
}

/// A request with a system prompt, one user message and one tool.
pub fn request(model: &str) -> ModelRequest {
    ModelRequest {
        run_id: "run-1".into(),
        model_call_index: 1,
        attempt: 1,
        session_turn: 0,
        model: model.into(),
        system: Some("You are terse.".into()),
        messages: vec![Message::user("What is 2+2?")].into(),
        tools: vec![ToolSpec {
            name: "calculator".into(),
            description: "Evaluates arithmetic".into(),
            parameters: json!({"type": "object", "properties": {"expression": {"type": "string"}}}),
        }]
        .into(),
        params: ModelParams::default(),
    }
}

/// A client configuration pointing at `server`, with [`KEY`] and short timeouts.
pub fn config(p: ProviderKind, server: &Server) -> HttpConfig {
    config_for(p, &server.url)
}

/// Like [`config`], for a server URL (`http://host:port`).
pub fn config_for(p: ProviderKind, url: &str) -> HttpConfig {
    let base = match p {
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => format!("{url}/v1"),
        ProviderKind::Anthropic => url.to_string(),
        ProviderKind::Gemini => format!("{url}/v1beta"),
    };
    let mut c = HttpConfig::new(p).with_base_url(base).with_api_key(KEY);
    c.connect_timeout = Duration::from_secs(2);
    c.first_byte_timeout = Duration::from_secs(5);
    c
}

/// The client for `p`.
pub fn model(p: ProviderKind, cfg: HttpConfig) -> Box<dyn Model> {
    let name = match p {
        ProviderKind::Anthropic => "claude-test",
        ProviderKind::Gemini => "gemini-test",
        _ => "gpt-test",
    };
    assert_eq!(cfg.provider, p);
    Box::new(build_model(name, cfg).unwrap())
}

/// Runs one request; returns the deltas and the error that ended the stream, if any.
pub async fn run(
    p: ProviderKind,
    cfg: HttpConfig,
) -> Result<(Vec<MessageDelta>, Option<ModelError>), ModelError> {
    let m = model(p, cfg);
    let mut s = m.stream(request("")).await?;
    let mut deltas = Vec::new();
    while let Some(item) = s.next().await {
        match item {
            Ok(d) => deltas.push(d),
            Err(e) => {
                assert!(s.next().await.is_none(), "an error ends the stream");
                return Ok((deltas, Some(e)));
            }
        }
    }
    Ok((deltas, None))
}
