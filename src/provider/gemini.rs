//! Google Gemini (the Gemini API's `streamGenerateContent`): the request body
//! (`request_body`) and the `Provider` the generic HTTP client drives; the stream normalizer
//! is in `normalize` (`GeminiNormalizer`, public with feature `wire`).
//!
//! The request: `POST {base}/models/{model}:streamGenerateContent?alt=sse` (base
//! `https://generativelanguage.googleapis.com/v1beta`), the key in the `x-goog-api-key` header
//! (never in the URL: a URL ends up in logs and error messages). The model name is one
//! percent-encoded path segment, so no model name can move the request (and its key) to
//! another path, let alone another host. The history becomes `contents` of role `user` and
//! `model`: an assistant turn's text and `functionCall` parts, a tool result as a
//! `functionResponse` part (`{"output": …}`, or `{"error": …}` for a failed tool) of a user
//! turn; consecutive turns of one role are merged. System messages become
//! `systemInstruction`; tools `functionDeclarations` (their JSON Schema as
//! `parametersJsonSchema`); the tool choice `toolConfig.functionCallingConfig`; a typed answer
//! `generationConfig.responseJsonSchema` with `responseMimeType: application/json`.
//!
//! # Example
//!
//! ```
//! use agentloop::provider::http::{build_model, HttpConfig, ProviderKind};
//!
//! let config = HttpConfig::new(ProviderKind::Gemini).with_api_key("key");
//! let model = build_model("gemini-2.0-flash", config)?;
//! # let _ = model;
//! # Ok::<(), agentloop::ModelError>(())
//! ```

use serde_json::{json, Map, Value};

use crate::error::ModelError;
use crate::message::{ContentPart, MediaSource, Message};
use crate::model::{ModelRequest, ToolChoice};
use crate::provider::http::{HttpConfig, Provider};
use crate::provider::request::{self, arguments_object, call_id_prefix, Turns};

mod normalize;
#[cfg(not(feature = "wire"))]
pub(crate) use normalize::GeminiNormalizer;
#[cfg(feature = "wire")]
pub use normalize::{map_finish_reason, GeminiNormalizer};

/// The Gemini API as a [`Provider`]. It has no settings of its own beyond the shared ones.
#[derive(Clone, Debug)]
pub(crate) struct Gemini;

impl Provider for Gemini {
    const NAME: &'static str = "gemini";
    const KEY_ENV: &'static [&'static str] = &["GEMINI_API_KEY", "GOOGLE_API_KEY"];
    const BASE_URL_ENV: &'static str = "GEMINI_BASE_URL";
    const DEFAULT_BASE_URL: &'static str = "https://generativelanguage.googleapis.com/v1beta";
    const ENABLED: bool = cfg!(feature = "gemini");
    type Normalizer = GeminiNormalizer;

    fn from_config(_config: &HttpConfig) -> Self {
        Gemini
    }

    fn endpoint(&self, base_url: &str, model: &str) -> String {
        // `models/gemini-x` (the API's resource name) and `gemini-x` name the same model.
        let model = model.strip_prefix("models/").unwrap_or(model);
        let model = path_segment(model);
        format!("{base_url}/models/{model}:streamGenerateContent?alt=sse")
    }

    fn headers(&self, api_key: Option<&str>) -> Vec<(String, String)> {
        api_key
            .map(|key| ("x-goog-api-key".to_string(), key.to_string()))
            .into_iter()
            .collect()
    }

    fn body(&self, request: &ModelRequest, model: &str) -> Result<Value, ModelError> {
        let _ = model; // the model travels in the URL
        Ok(request_body(request))
    }

    fn normalizer(&self) -> GeminiNormalizer {
        GeminiNormalizer::new()
    }

    fn normalizer_for(&self, request: &ModelRequest) -> GeminiNormalizer {
        // Gemini's function calls usually carry no id: derive unique ones per step.
        GeminiNormalizer::new().with_id_prefix(call_id_prefix(request))
    }
}

/// `s` as one URL path segment: every byte but RFC 3986's unreserved ones percent-encoded (so
/// `/`, `?`, `#`, `@` and `:` cannot change what the URL names).
fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

wire_pub! {
/// The `streamGenerateContent` request body for `req` (see the module docs).
pub fn request_body(req: &ModelRequest) -> Value {
    let mut system: Vec<&str> = req.system.iter().map(String::as_str).collect();
    let mut turns = Turns::default();
    for m in req.messages.iter() {
        match m {
            Message::System { content } => system.push(content),
            Message::User { content, parts } => turns.push("user", user_parts(content, parts)),
            Message::Assistant(a) => {
                let mut parts = Vec::new();
                if !a.text.is_empty() {
                    parts.push(json!({"text": a.text}));
                }
                for (i, c) in a.tool_calls.iter().enumerate() {
                    let args = arguments_object(&c.arguments);
                    let mut part = json!({"functionCall": {"name": c.name, "args": args}});
                    // Gemini's thinking models sign their first function call of a turn and
                    // want the signature back with it.
                    if let (0, Some(sig)) = (i, &a.reasoning_signature) {
                        part["thoughtSignature"] = json!(sig);
                    }
                    parts.push(part);
                }
                turns.push("model", parts);
            }
            Message::Tool(r) => {
                let key = if r.is_error() { "error" } else { "output" };
                let part = json!({"functionResponse": {
                    "name": r.name,
                    "response": {key: r.content},
                }});
                turns.push("user", vec![part]);
            }
        }
    }
    let mut body = json!({ "contents": turns.into_json("parts") });
    if !system.is_empty() {
        body["systemInstruction"] = json!({"parts": [{"text": system.join("\n\n")}]});
    }
    if !req.tools.is_empty() {
        let decls: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "parametersJsonSchema": t.parameters,
                })
            })
            .collect();
        body["tools"] = json!([{ "functionDeclarations": decls }]);
        if let Some(choice) = &req.params.tool_choice {
            body["toolConfig"] = json!({ "functionCallingConfig": tool_choice(choice) });
        }
    }
    let mut generation = Map::new();
    if let Some(t) = req.params.temperature {
        generation.insert("temperature".into(), json!(t));
    }
    if let Some(n) = req.params.max_tokens {
        generation.insert("maxOutputTokens".into(), json!(n));
    }
    if let Some(output) = &req.params.output {
        generation.insert("responseMimeType".into(), json!("application/json"));
        generation.insert("responseJsonSchema".into(), output.schema.clone());
    }
    if !generation.is_empty() {
        body["generationConfig"] = Value::Object(generation);
    }
    body
}
}

/// A user message's parts: its text (left out when empty and the message has parts), then
/// one part per content part: `text`, `inlineData` (base64 bytes) or `fileData` (a URL).
fn user_parts(content: &str, parts: &[ContentPart]) -> Vec<Value> {
    let text = |text: &str| json!({"text": text});
    request::user_parts(content, parts, text, |p| match p {
        ContentPart::Text { text: t } => text(t),
        ContentPart::Image { source } | ContentPart::File { source, .. } => match source {
            MediaSource::Base64 { media_type, data } => {
                json!({"inlineData": {"mimeType": media_type, "data": data}})
            }
            MediaSource::Url { url } => json!({"fileData": {"fileUri": url}}),
        },
    })
}

/// `toolConfig.functionCallingConfig` for `choice`.
fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!({"mode": "AUTO"}),
        ToolChoice::None => json!({"mode": "NONE"}),
        ToolChoice::Required => json!({"mode": "ANY"}),
        ToolChoice::Tool(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_one_path_segment_and_the_key_a_header() {
        let g = Gemini;
        let base = "http://127.0.0.1:1/v1beta";
        assert_eq!(
            g.endpoint(base, "models/gemini-2.0-flash"),
            "http://127.0.0.1:1/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse"
        );
        // Nothing in a model name reaches the authority, the query or another path.
        let evil = g.endpoint(base, "@evil.example/x?key=1#");
        assert!(
            evil.starts_with("http://127.0.0.1:1/v1beta/models/%40evil.example%2Fx%3Fkey%3D1%23:")
        );
        assert_eq!(
            g.headers(Some("k")),
            [("x-goog-api-key".to_string(), "k".to_string())]
        );
        assert!(g.headers(None).is_empty());
    }
}
