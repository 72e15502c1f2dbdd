//! The SSE reading both floor clients share: complete events split off the bytes received so
//! far, each `data:` line's JSON read with `serde_json::Value`, the text of
//! `choices[0].delta.content` gathered.

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The position just past the first `needle` in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + needle.len())
}

/// Takes every complete event off the front of `pending`, appends its content to `text`;
/// whether `data: [DONE]` was among them.
pub fn drain_events(pending: &mut Vec<u8>, text: &mut String) -> Result<bool, Error> {
    let mut done = false;
    while let Some(end) = find(pending, b"\n\n") {
        let event: Vec<u8> = pending.drain(..end).collect();
        for data in std::str::from_utf8(&event)?
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
        {
            if data == "[DONE]" {
                done = true;
                continue;
            }
            let chunk: serde_json::Value = serde_json::from_str(data)?;
            if let Some(t) = chunk["choices"][0]["delta"]["content"].as_str() {
                text.push_str(t);
            }
        }
    }
    Ok(done)
}
