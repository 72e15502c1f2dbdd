//! Large tool results (R-TOOL-5): a result over the size limit is written to a file and the
//! model sees a preview plus the file's path instead (`large_result_offloaded`).

use std::path::PathBuf;

/// Where and when to offload tool results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Offload {
    /// Results longer than this many bytes are offloaded.
    pub(crate) limit_bytes: usize,
    /// Directory for the files (`<dir>/<session>/<tool_call_id>.txt`).
    pub(crate) dir: PathBuf,
    /// Bytes of the result kept inline as a preview (cut at a char boundary).
    pub(crate) preview_bytes: usize,
}

impl Offload {
    /// Offload results over `limit_bytes` into `dir`, with a 1 KiB preview.
    pub(crate) fn new(dir: impl Into<PathBuf>, limit_bytes: usize) -> Self {
        Offload {
            limit_bytes,
            dir: dir.into(),
            preview_bytes: 1024,
        }
    }

    /// If `content` is over the limit, writes it to a file and returns the replacement text,
    /// the path and the original size. A failed write keeps the result inline (`None`): the
    /// model still gets its result, only larger.
    pub(crate) async fn apply(
        &self,
        session: &str,
        tool_call_id: &str,
        content: &str,
    ) -> Option<(String, String, usize)> {
        if content.len() <= self.limit_bytes {
            return None;
        }
        let dir = self.dir.join(sanitize(session));
        let path = dir.join(format!("{}.txt", sanitize(tool_call_id)));
        if let Err(e) = tokio::fs::create_dir_all(&dir).await {
            tracing::warn!(error = %e, "offload: cannot create directory; result kept inline");
            return None;
        }
        if let Err(e) = tokio::fs::write(&path, content.as_bytes()).await {
            tracing::warn!(error = %e, "offload: cannot write file; result kept inline");
            return None;
        }
        let preview = preview(content, self.preview_bytes);
        let shown = path.display().to_string();
        let replaced = format!(
            "{preview}\n\n[result truncated: {} bytes in total; the full result is in {shown}]",
            content.len()
        );
        Some((replaced, shown, content.len()))
    }
}

/// The first `max` bytes of `s`, cut back to a char boundary.
pub(crate) fn preview(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preview_respects_char_boundaries() {
        assert_eq!(preview("héllo", 2), "h");
        assert_eq!(preview("abc", 10), "abc");
    }

    #[test]
    fn sanitize_keeps_paths_inside() {
        assert_eq!(sanitize("../x/y"), "___x_y");
    }
}
