//! A loopback mock of the OpenAI Chat Completions streaming endpoint
//! (`POST /v1/chat/completions`, `stream: true`), standard library only, one thread per
//! connection, HTTP/1.1 with a chunked body of real server-sent events.
//!
//! The request's `model` names the number of text deltas: `deltas-N` answers the same
//! [`ANSWER_CHARS`]-character text in N deltas of (about) `ANSWER_CHARS / N` characters. Each
//! event is one HTTP chunk written with one `write` on a `TCP_NODELAY` socket, `--gap-us`
//! microseconds after the previous one (default 50), so the client is woken for every delta.
//! The events are what OpenAI sends with `stream_options.include_usage`: a role chunk, the
//! content chunks, a chunk with `finish_reason: "stop"`, a usage chunk with `choices: []`, and
//! `data: [DONE]`.
//!
//! `model: "two-turn"` is a run with one tool call: a request with no `role: "tool"` message
//! gets one call of the function `add` (`{"a": 40, "b": 2}`, id `call_add_1`, arguments in two
//! fragments) and `finish_reason: "tool_calls"`; the request that carries the `tool` message
//! answering it gets the text `The sum is <that message's content>` in deltas of 4 characters
//! and `finish_reason: "stop"`. A `two-turn` request that does not offer a function `add` is a
//! 400.
//!
//! `mock [--port P] [--gap-us US]` prints `PORT <p>` on stdout once it listens, then serves
//! until killed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// Length of every answer, whatever the number of deltas.
const ANSWER_CHARS: usize = 16_000;
/// The answer's text repeats this (8 characters: `deltas-2000` sends it once per delta).
const UNIT: &str = "abcdefg ";

/// The tool the two-turn route calls, its call id and its arguments (two fragments, as
/// OpenAI streams them).
const TOOL_NAME: &str = "add";
const TOOL_CALL_ID: &str = "call_add_1";
const TOOL_ARGS: [&str; 2] = ["{\"a\": 40, ", "\"b\": 2}"];
/// The two-turn answer: this text, then the tool message's content, in deltas of a few
/// characters.
const AFTER_TOOL: &str = "The sum is ";

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Error> {
    let mut port = 0u16;
    let mut gap_us = 50u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--port" => port = args.next().ok_or("--port needs a value")?.parse()?,
            "--gap-us" => gap_us = args.next().ok_or("--gap-us needs a value")?.parse()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    println!("PORT {}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    let gap = Duration::from_micros(gap_us);
    for conn in listener.incoming() {
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                eprintln!("mock: accept: {e}");
                continue;
            }
        };
        std::thread::spawn(move || {
            match serve(conn, gap) {
                // A client that exits right after `[DONE]` may reset the connection.
                Err(e) if reset(&*e) => {}
                Err(e) => eprintln!("mock: connection: {e}"),
                Ok(()) => {}
            }
        });
    }
    Ok(())
}

/// Whether `e` is the peer resetting the connection.
fn reset(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset)
}

/// Serves the requests of one keep-alive connection until the client closes it.
fn serve(conn: TcpStream, gap: Duration) -> Result<(), Error> {
    conn.set_nodelay(true)?;
    let mut writer = conn.try_clone()?;
    let mut reader = BufReader::new(conn);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        let mut content_length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    content_length = value.trim().parse()?;
                }
            }
        }
        let mut body = vec![0u8; content_length];
        reader.read_exact(&mut body)?;
        let mut parts = request_line.split_whitespace();
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        if method != "POST" || path != "/v1/chat/completions" {
            error(&mut writer, 404, &format!("no route {method} {path}"))?;
            continue;
        }
        match route(&body) {
            Ok(Answer::Deltas(n)) => stream(&mut writer, n, gap)?,
            Ok(Answer::ToolCall) => tool_call(&mut writer, gap)?,
            Ok(Answer::AfterTool(result)) => after_tool(&mut writer, &result, gap)?,
            Err(e) => error(&mut writer, 400, &e)?,
        }
    }
}

/// What a request gets.
enum Answer {
    /// `deltas-N`: the [`ANSWER_CHARS`]-character text in N deltas.
    Deltas(usize),
    /// `two-turn`, no `tool` message yet: one call of the `add` tool.
    ToolCall,
    /// `two-turn` with the `tool` message (its content): the text answer naming it.
    AfterTool(String),
}

/// Routes a request by its `model` (`stream: true` only).
fn route(body: &[u8]) -> Result<Answer, String> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if v["model"] != "two-turn" {
        return deltas(&v).map(Answer::Deltas);
    }
    if v["stream"] != serde_json::Value::Bool(true) {
        return Err("only stream: true is served".into());
    }
    let offered = v["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["type"] == "function" && t["function"]["name"] == TOOL_NAME);
    if !offered {
        return Err(format!(
            "two-turn: the request offers no function tool {TOOL_NAME:?}"
        ));
    }
    let messages = v["messages"].as_array().ok_or("no messages")?;
    match messages.iter().find(|m| m["role"] == "tool") {
        None => Ok(Answer::ToolCall),
        Some(m) => {
            if m["tool_call_id"] != TOOL_CALL_ID {
                return Err(format!(
                    "tool message answers {}, not {TOOL_CALL_ID}",
                    m["tool_call_id"]
                ));
            }
            Ok(Answer::AfterTool(text_of(&m["content"])))
        }
    }
}

/// A message content's text: a string, or the `text` of its parts.
fn text_of(content: &serde_json::Value) -> String {
    match content {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(parts) => {
            parts.iter().filter_map(|p| p["text"].as_str()).collect()
        }
        _ => String::new(),
    }
}

/// The number of deltas the request asks for (`model: "deltas-N"`, `stream: true`).
fn deltas(v: &serde_json::Value) -> Result<usize, String> {
    if v["stream"] != serde_json::Value::Bool(true) {
        return Err("only stream: true is served".into());
    }
    let model = v["model"].as_str().unwrap_or("");
    match model.strip_prefix("deltas-").map(str::parse::<usize>) {
        Some(Ok(n)) if (1..=ANSWER_CHARS).contains(&n) => Ok(n),
        _ => Err(format!(
            "model {model:?}: expected deltas-N, 1 <= N <= {ANSWER_CHARS}"
        )),
    }
}

fn error(w: &mut TcpStream, status: u16, message: &str) -> Result<(), Error> {
    let body = serde_json::json!({"error": {"message": message, "type": "invalid_request_error"}})
        .to_string();
    eprintln!("mock: {status}: {message}");
    write!(
        w,
        "HTTP/1.1 {status} Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )?;
    Ok(())
}

/// Writes one SSE event as one HTTP chunk, in one `write`.
fn event(w: &mut TcpStream, data: &str, gap: Duration) -> Result<(), Error> {
    std::thread::sleep(gap);
    let payload = format!("data: {data}\n\n");
    let chunk = format!("{:x}\r\n{payload}\r\n", payload.len());
    w.write_all(chunk.as_bytes())?;
    w.flush()?;
    Ok(())
}

/// Streams the answer in `n` deltas.
fn stream(w: &mut TcpStream, n: usize, gap: Duration) -> Result<(), Error> {
    let text = UNIT.repeat(ANSWER_CHARS / UNIT.len());
    let model = format!("deltas-{n}");
    stream_head(w)?;
    let role = envelope(
        &model,
        serde_json::json!([{
            "index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null
        }]),
    );
    event(w, &role.to_string(), gap)?;
    for i in 0..n {
        let piece = &text[i * text.len() / n..(i + 1) * text.len() / n];
        let delta = envelope(
            &model,
            serde_json::json!([{
                "index": 0, "delta": {"content": piece}, "logprobs": null, "finish_reason": null
            }]),
        );
        event(w, &delta.to_string(), gap)?;
    }
    stream_tail(w, &model, "stop", n, gap)
}

/// The chunk envelope every event carries.
fn envelope(model: &str, choices: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
        "system_fingerprint": "fp_mock",
        "choices": choices,
    })
}

/// The status line and headers of a streamed answer.
fn stream_head(w: &mut TcpStream) -> Result<(), Error> {
    w.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
          transfer-encoding: chunked\r\n\r\n",
    )?;
    Ok(())
}

/// The finish chunk, the usage chunk, `[DONE]` and the body's last chunk.
fn stream_tail(
    w: &mut TcpStream,
    model: &str,
    finish: &str,
    tokens: usize,
    gap: Duration,
) -> Result<(), Error> {
    let stop = envelope(
        model,
        serde_json::json!([{
            "index": 0, "delta": {}, "logprobs": null, "finish_reason": finish
        }]),
    );
    event(w, &stop.to_string(), gap)?;
    let mut usage = envelope(model, serde_json::json!([]));
    usage["usage"] = serde_json::json!({
        "prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens
    });
    event(w, &usage.to_string(), gap)?;
    event(w, "[DONE]", gap)?;
    w.write_all(b"0\r\n\r\n")?;
    w.flush()?;
    Ok(())
}

/// The two-turn run's first answer: one `add` call, as OpenAI streams it (the call's id and
/// name with empty arguments, then the arguments in fragments), `finish_reason: "tool_calls"`.
fn tool_call(w: &mut TcpStream, gap: Duration) -> Result<(), Error> {
    let model = "two-turn";
    stream_head(w)?;
    let role = envelope(
        model,
        serde_json::json!([{
            "index": 0, "delta": {"role": "assistant", "content": null, "tool_calls": [{
                "index": 0, "id": TOOL_CALL_ID, "type": "function",
                "function": {"name": TOOL_NAME, "arguments": ""}
            }]}, "logprobs": null, "finish_reason": null
        }]),
    );
    event(w, &role.to_string(), gap)?;
    for fragment in TOOL_ARGS {
        let delta = envelope(
            model,
            serde_json::json!([{
                "index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]},
                "logprobs": null, "finish_reason": null
            }]),
        );
        event(w, &delta.to_string(), gap)?;
    }
    stream_tail(w, model, "tool_calls", 12, gap)
}

/// The two-turn run's second answer: [`AFTER_TOOL`] and the tool's result, in deltas of four
/// characters.
fn after_tool(w: &mut TcpStream, result: &str, gap: Duration) -> Result<(), Error> {
    let model = "two-turn";
    stream_head(w)?;
    let role = envelope(
        model,
        serde_json::json!([{
            "index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null
        }]),
    );
    event(w, &role.to_string(), gap)?;
    let text: Vec<char> = format!("{AFTER_TOOL}{result}").chars().collect();
    let mut n = 0;
    for piece in text.chunks(4) {
        let piece: String = piece.iter().collect();
        let delta = envelope(
            model,
            serde_json::json!([{
                "index": 0, "delta": {"content": piece}, "logprobs": null, "finish_reason": null
            }]),
        );
        event(w, &delta.to_string(), gap)?;
        n += 1;
    }
    stream_tail(w, model, "stop", n, gap)
}
