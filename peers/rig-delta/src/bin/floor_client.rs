//! The transport floor: the same request with reqwest 0.13 (what agentloop's provider uses, one
//! connection), the SSE body split into events by hand and each event's JSON read
//! with `serde_json::Value` (`src/sse.rs`), the text of `choices[0].delta.content` gathered. No
//! agent, no events, no state machine: what any reqwest-based client pays per delta. Prints the
//! answer's length.
//!
//! `floor_client BASE_URL MODEL` (runtime: see `PEER_RUNTIME` in `src/runtime.rs`)

use futures::StreamExt;

#[path = "../runtime.rs"]
mod runtime;
#[path = "../sse.rs"]
mod sse;

use sse::Error;

fn main() -> Result<(), Error> {
    runtime::build()?.block_on(run())
}

async fn run() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let base = args.next().ok_or("usage: floor_client BASE_URL MODEL")?;
    let model = args.next().ok_or("MODEL missing")?;
    let client = reqwest::Client::builder().build()?;
    let response = client
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth("sk-mock")
        .json(&serde_json::json!({
            "model": model,
            "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": "talk"}],
        }))
        .send()
        .await?
        .error_for_status()?;
    let mut body = response.bytes_stream();
    let mut pending: Vec<u8> = Vec::new();
    let mut text = String::new();
    let mut done = false;
    while let Some(bytes) = body.next().await {
        pending.extend_from_slice(&bytes?);
        done |= sse::drain_events(&mut pending, &mut text)?;
    }
    if !done {
        return Err("the stream ended before [DONE]".into());
    }
    println!("{}", text.len());
    Ok(())
}
