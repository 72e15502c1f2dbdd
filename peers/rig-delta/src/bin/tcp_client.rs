//! The socket floor: the same request over a bare tokio `TcpStream` in the run's own task (no
//! HTTP library, so no connection task handing body bytes to the reader), the chunked body
//! decoded and the SSE events split by hand (`src/sse.rs`), each event's JSON read with
//! `serde_json::Value`. What a client pays per delta for the socket wakeups alone. Prints the
//! answer's length.
//!
//! `tcp_client BASE_URL MODEL` (`BASE_URL` = `http://127.0.0.1:PORT`; runtime: see
//! `PEER_RUNTIME` in `src/runtime.rs`)

use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[path = "../runtime.rs"]
mod runtime;
#[path = "../sse.rs"]
mod sse;

use sse::{find, Error};

fn main() -> Result<(), Error> {
    runtime::build()?.block_on(run())
}

async fn run() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let base = args.next().ok_or("usage: tcp_client BASE_URL MODEL")?;
    let model = args.next().ok_or("MODEL missing")?;
    let addr = base
        .strip_prefix("http://")
        .ok_or("BASE_URL must be http://HOST:PORT")?;
    let body = serde_json::json!({
        "model": model,
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "talk"}],
    })
    .to_string();
    let mut socket = tokio::net::TcpStream::connect(addr).await?;
    socket.set_nodelay(true)?;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer sk-mock\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).await?;

    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut read = [0u8; 64 * 1024];
    let mut headers_done = false;
    let mut events: Vec<u8> = Vec::new();
    let mut text = String::new();
    let mut done = false;
    while !done {
        let n = socket.read(&mut read).await?;
        if n == 0 {
            return Err("the connection closed before [DONE]".into());
        }
        buf.extend_from_slice(&read[..n]);
        if !headers_done {
            let Some(end) = find(&buf, b"\r\n\r\n") else {
                continue;
            };
            if !buf.starts_with(b"HTTP/1.1 200") {
                return Err(String::from_utf8_lossy(&buf).into_owned().into());
            }
            buf.drain(..end);
            headers_done = true;
        }
        // Chunked framing: `SIZE\r\nPAYLOAD\r\n`; the payloads are the SSE text.
        while let Some(line_end) = find(&buf, b"\r\n") {
            let size = usize::from_str_radix(std::str::from_utf8(&buf[..line_end - 2])?, 16)?;
            if buf.len() < line_end + size + 2 {
                break;
            }
            events.extend_from_slice(&buf[line_end..line_end + size]);
            buf.drain(..line_end + size + 2);
        }
        done |= sse::drain_events(&mut events, &mut text)?;
    }
    println!("{}", text.len());
    Ok(())
}
