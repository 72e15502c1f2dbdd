//! What an MCP tool result becomes for the model: the pure mapping from a `tools/call` result
//! to the text of a tool result or a [`ToolError`].

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};

use crate::tools::ToolError;

/// The text of a result: each content block rendered (text as itself, an embedded text
/// resource as its text, anything else as a short placeholder naming its type), blocks joined
/// by newlines; a result without content blocks is its structured content's JSON text. A
/// result marked `is_error` is [`ToolError::Failed`] with that text.
pub(crate) fn render(result: &CallToolResult) -> Result<String, ToolError> {
    let text = if result.content.is_empty() {
        match &result.structured_content {
            Some(value) => value.to_string(),
            None => String::new(),
        }
    } else {
        result
            .content
            .iter()
            .map(render_block)
            .collect::<Vec<_>>()
            .join("\n")
    };
    if result.is_error == Some(true) {
        let text = if text.is_empty() {
            "the tool reported an error without a message".to_string()
        } else {
            text
        };
        return Err(ToolError::Failed(text));
    }
    Ok(text)
}

/// One content block as text.
fn render_block(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(t) => t.text.clone(),
        ContentBlock::Image(i) => format!("[image: {}]", i.mime_type),
        ContentBlock::Audio(a) => format!("[audio: {}]", a.mime_type),
        ContentBlock::Resource(r) => match &r.resource {
            ResourceContents::TextResourceContents { text, .. } => text.clone(),
            ResourceContents::BlobResourceContents { uri, mime_type, .. } => format!(
                "[binary resource: {uri} ({})]",
                mime_type.as_deref().unwrap_or("unknown type")
            ),
            #[allow(unreachable_patterns)] // `ResourceContents` is `#[non_exhaustive]`.
            _ => "[resource of an unknown type]".to_string(),
        },
        ContentBlock::ResourceLink(link) => format!("[resource link: {}]", link.uri),
        #[allow(unreachable_patterns)] // `ContentBlock` is `#[non_exhaustive]`.
        _ => "[content of an unknown type]".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(value: serde_json::Value) -> CallToolResult {
        serde_json::from_value(value).expect("a CallToolResult")
    }

    #[test]
    fn text_blocks_are_their_text_joined_by_newlines() {
        let r = result(json!({"content": [
            {"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}));
        assert_eq!(render(&r).expect("ok"), "one\ntwo");
    }

    #[test]
    fn structured_content_alone_is_its_json_text() {
        let r = result(json!({"content": [], "structuredContent": {"sum": 3}}));
        assert_eq!(render(&r).expect("ok"), r#"{"sum":3}"#);
    }

    #[test]
    fn is_error_is_a_failed_tool_error_with_the_text() {
        let r = result(
            json!({"content": [{"type": "text", "text": "no such city"}],
            "isError": true}),
        );
        match render(&r) {
            Err(ToolError::Failed(m)) => assert_eq!(m, "no such city"),
            other => panic!("expected Failed, got {other:?}"),
        }
    }

    #[test]
    fn images_audio_and_links_are_placeholders_naming_the_type() {
        let r = result(json!({"content": [
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "test://a", "name": "a"},
            {"type": "resource", "resource": {"uri": "test://t", "text": "inline"}},
            {"type": "resource", "resource": {"uri": "test://b", "blob": "AAAA",
                "mimeType": "application/gzip"}}]}));
        assert_eq!(
            render(&r).expect("ok"),
            "[image: image/png]\n[audio: audio/wav]\n[resource link: test://a]\ninline\n\
             [binary resource: test://b (application/gzip)]"
        );
    }
}
