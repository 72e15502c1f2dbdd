//! The Gemini stream normalizer: `streamGenerateContent?alt=sse` chunks → deltas. Pure.
//!
//! Each `data:` event is a whole `GenerateContentResponse`; only the first candidate is read.
//!
//! - A `text` part → text (a run of them is one text block); a `text` part with
//!   `thought: true` → reasoning (thought summaries).
//! - A `functionCall` part arrives whole (`name`, `args` object, sometimes an `id`) → tool input
//!   start, its arguments as one delta, end, and the `tool-call`. Without an `id` the call gets
//!   `{prefix}{n}` (the client's prefix names the run and step). The first call's
//!   `thoughtSignature` is kept as the reasoning signature (sent back with that call).
//! - `usageMetadata` is cumulative: each one replaces the last. `promptTokenCount` → input,
//!   `candidatesTokenCount + thoughtsTokenCount` → output, `thoughtsTokenCount` → reasoning,
//!   `cachedContentTokenCount` → cache read.
//! - `finishReason` is the terminal evidence; the step finishes at the end of the body (a
//!   later chunk may still carry usage). `STOP` (`FUNCTION_CALL`) → stop, or tool calls when
//!   the turn called tools; `MAX_TOKENS` → length; `SAFETY`, `RECITATION`, `BLOCKLIST`,
//!   `PROHIBITED_CONTENT`, `SPII`, `IMAGE_SAFETY` → content filter; anything else → other.
//! - `promptFeedback.blockReason` (the prompt itself was blocked, no candidate) finishes the
//!   step at once as a content filter with the block reason as the raw reason.
//! - An `error` object in the stream is classified like an HTTP error body (its numeric `code`
//!   is the status: 429 rate limited, 500 server error…).
//! - A data event that is not JSON, or whose JSON has the wrong shape (a `functionCall`
//!   without a name, `candidates` that is not a list…), is a `malformed_response`. A body that
//!   ends before any `finishReason` is `incomplete_stream`.

use serde::Deserialize;
use serde_json::Value;

use crate::message::{FinishReason, MessageDelta, Usage};
use crate::provider::classify::classify_stream_error;
use crate::provider::normalize::{complete_tool_call, start_tool_input, Block, Stream};
use crate::provider::sse::{SseEof, SseEvent, SseNormalizer};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk {
    #[serde(default)]
    candidates: Vec<Candidate>,
    usage_metadata: Option<WireUsage>,
    prompt_feedback: Option<PromptFeedback>,
    error: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    content: Option<Content>,
    finish_reason: Option<String>,
    #[serde(default)]
    index: u32,
}

#[derive(Deserialize)]
struct Content {
    #[serde(default)]
    parts: Vec<Part>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part {
    text: Option<String>,
    #[serde(default)]
    thought: bool,
    function_call: Option<FunctionCall>,
    thought_signature: Option<String>,
}

#[derive(Deserialize)]
struct FunctionCall {
    id: Option<String>,
    name: Option<String>,
    args: Option<serde_json::Map<String, Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    prompt_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    cached_content_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Usage {
        let thoughts = u.thoughts_token_count.unwrap_or(0);
        Usage {
            input_tokens: u.prompt_token_count.unwrap_or(0),
            output_tokens: u.candidates_token_count.unwrap_or(0) + thoughts,
            cache_read_input_tokens: u.cached_content_token_count.unwrap_or(0),
            cache_creation_input_tokens: 0,
            reasoning_tokens: thoughts,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    block_reason: Option<String>,
}

wire_pub! {
/// Gemini's finish reason as a [`FinishReason`] (`called_tools`: whether the turn called any).
pub fn map_finish_reason(raw: &str, called_tools: bool) -> FinishReason {
    match raw {
        "STOP" | "FUNCTION_CALL" if called_tools => FinishReason::ToolCalls,
        "STOP" => FinishReason::Stop,
        "FUNCTION_CALL" => FinishReason::ToolCalls,
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII"
        | "IMAGE_SAFETY" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}
}

wire_pub! {
/// The `streamGenerateContent` stream normalizer. Pure; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct GeminiNormalizer {
    stream: Stream,
    /// The run of parts open at the moment.
    run: Block,
    calls: usize,
    id_prefix: String,
    signed: bool,
    raw_finish_reason: Option<String>,
    prompt_blocked: bool,
    usage: Option<Usage>,
}
}

impl GeminiNormalizer {
    wire_pub! {
    /// A fresh normalizer for one response; calls without an id get `call_0`, `call_1`…
    pub fn new() -> Self {
        GeminiNormalizer {
            id_prefix: "call_".into(),
            ..Self::default()
        }
    }
    }

    wire_pub! {
    /// Names the calls without an id `{prefix}{n}`.
    pub fn with_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.id_prefix = prefix.into();
        self
    }
    }

    /// One part of the first candidate; `Err` is why it is malformed.
    fn part(&mut self, part: Part, out: &mut Vec<MessageDelta>) -> Result<(), &'static str> {
        if let Some(call) = part.function_call {
            let name = call
                .name
                .filter(|n| !n.is_empty())
                .ok_or("functionCall without a name")?;
            self.run.close(out);
            let id = match call.id.filter(|id| !id.is_empty()) {
                Some(id) => id,
                None => format!("{}{}", self.id_prefix, self.calls),
            };
            self.calls += 1;
            let arguments = Value::Object(call.args.unwrap_or_default()).to_string();
            start_tool_input(&id, &name, &arguments, out);
            complete_tool_call(id, name, arguments, out);
            if let Some(signature) = part.thought_signature.filter(|_| !self.signed) {
                self.signed = true;
                out.push(MessageDelta::ReasoningSignature { signature });
            }
        } else if let Some(text) = part.text.filter(|t| !t.is_empty()) {
            self.run.push(part.thought, text, out);
        }
        Ok(())
    }

    fn finish_step(&mut self, out: &mut Vec<MessageDelta>) {
        self.run.close(out);
        let raw = self.raw_finish_reason.clone();
        let finish_reason = match &raw {
            Some(_) if self.prompt_blocked => Some(FinishReason::ContentFilter),
            Some(r) => Some(map_finish_reason(r, self.calls > 0)),
            None => None,
        };
        self.stream.finish_step(finish_reason, raw, self.usage, out);
    }
}

impl SseNormalizer for GeminiNormalizer {
    fn feed_into(&mut self, ev: &SseEvent, out: &mut Vec<MessageDelta>) {
        let data = ev.data.trim();
        if !self.stream.next_event() || data.is_empty() {
            return;
        }
        let shape = "a GenerateContentResponse";
        let Some(chunk) = self.stream.parse::<Chunk>(ev, data, shape, out) else {
            return;
        };
        if let Some(error) = chunk.error {
            let error = classify_stream_error(&serde_json::json!({ "error": error }));
            return self.stream.fail(error, out);
        }
        self.stream.start_step(out);
        if let Some(u) = chunk.usage_metadata {
            self.usage = Some(u.into());
        }
        let first = chunk.candidates.into_iter().find(|c| c.index == 0);
        if let Some(candidate) = first {
            let parts = candidate.content.map(|c| c.parts).unwrap_or_default();
            for part in parts {
                if let Err(reason) = self.part(part, out) {
                    return self.stream.malformed(ev, reason, out);
                }
            }
            if let Some(r) = candidate.finish_reason {
                self.raw_finish_reason = Some(r);
            }
        } else if let Some(reason) = chunk.prompt_feedback.and_then(|f| f.block_reason) {
            // The prompt was blocked: no candidate comes, and nothing after this.
            self.raw_finish_reason = Some(reason);
            self.prompt_blocked = true;
            self.finish_step(out);
        }
    }

    fn finish(&mut self, eof: SseEof) -> Vec<MessageDelta> {
        if self.stream.ended || self.raw_finish_reason.is_none() {
            return self.stream.cut_short(eof, "a finishReason");
        }
        let mut out = Vec::new();
        self.finish_step(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::provider::test_support::{calls_of, decode, error_of, finish_of, text_of};

    /// The deltas of a whole SSE body.
    fn deltas(body: &str) -> Vec<MessageDelta> {
        decode(GeminiNormalizer::new().with_id_prefix("c"), body)
    }

    // Recorded from `streamGenerateContent?alt=sse` (gemini-2.5-flash), ids and counts kept.
    const TEXT: &str = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"2 + 3\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 8,\"totalTokenCount\": 8},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"r1\"}\r\n\r\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" = 5\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 8,\"candidatesTokenCount\": 5,\"totalTokenCount\": 40,\"cachedContentTokenCount\": 2,\"thoughtsTokenCount\": 27},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"r1\"}\r\n\r\n";

    #[test]
    fn text_chunks_become_one_text_block_with_the_last_usage() {
        let d = deltas(TEXT);
        assert_eq!(d.first(), Some(&MessageDelta::StartStep));
        assert_eq!(text_of(&d), "2 + 3 = 5");
        let starts = d.iter().filter(|d| **d == MessageDelta::TextStart).count();
        assert_eq!(starts, 1);
        let (reason, raw, usage) = finish_of(&d);
        assert_eq!(reason, Some(FinishReason::Stop));
        assert_eq!(raw.as_deref(), Some("STOP"));
        let usage = usage.expect("usage");
        assert_eq!(usage.input_tokens, 8);
        assert_eq!(usage.output_tokens, 32);
        assert_eq!(usage.reasoning_tokens, 27);
        assert_eq!(usage.cache_read_input_tokens, 2);
        assert_eq!(d.last(), Some(&MessageDelta::Finish));
    }

    const CALL: &str = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"thinking about it\", \"thought\": true}],\"role\": \"model\"},\"index\": 0}]}\n\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"functionCall\": {\"name\": \"calculator\",\"args\": {\"expression\": \"2+3\"}},\"thoughtSignature\": \"c2lnbmVk\"}, {\"functionCall\": {\"id\": \"given\", \"name\": \"read_file\",\"args\": {}}}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 60,\"candidatesTokenCount\": 20,\"totalTokenCount\": 80}}\n\n";

    #[test]
    fn function_calls_arrive_whole_with_derived_or_given_ids() {
        let d = deltas(CALL);
        assert!(d.contains(&MessageDelta::ReasoningDelta {
            text: "thinking about it".into()
        }));
        assert_eq!(
            calls_of(&d),
            [
                ("c0", "calculator", r#"{"expression":"2+3"}"#),
                ("given", "read_file", "{}")
            ]
        );
        assert!(d.contains(&MessageDelta::ReasoningSignature {
            signature: "c2lnbmVk".into()
        }));
        // The reasoning run closes before the first call's input starts.
        let end = d.iter().position(|d| *d == MessageDelta::ReasoningEnd);
        let start = d
            .iter()
            .position(|d| matches!(d, MessageDelta::ToolInputStart { .. }));
        assert!(end < start);
        let (reason, raw, usage) = finish_of(&d);
        assert_eq!(reason, Some(FinishReason::ToolCalls));
        assert_eq!(raw.as_deref(), Some("STOP"));
        assert_eq!(usage.map(|u| u.output_tokens), Some(20));
    }

    #[test]
    fn a_safety_finish_and_a_blocked_prompt_are_content_filters() {
        let safety = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Sure, \"}]}, \"index\": 0}]}\n\n\
data: {\"candidates\": [{\"finishReason\": \"SAFETY\", \"index\": 0, \"safetyRatings\": [{\"category\": \"HARM_CATEGORY_DANGEROUS_CONTENT\", \"probability\": \"HIGH\", \"blocked\": true}]}]}\n\n";
        let d = deltas(safety);
        assert_eq!(text_of(&d), "Sure, ");
        let (reason, raw, _) = finish_of(&d);
        assert_eq!(reason, Some(FinishReason::ContentFilter));
        assert_eq!(raw.as_deref(), Some("SAFETY"));
        assert_eq!(d.last(), Some(&MessageDelta::Finish));

        let blocked = "data: {\"promptFeedback\": {\"blockReason\": \"PROHIBITED_CONTENT\"}, \"usageMetadata\": {\"promptTokenCount\": 7, \"totalTokenCount\": 7}}\n\n";
        let d = deltas(blocked);
        let (reason, raw, usage) = finish_of(&d);
        assert_eq!(reason, Some(FinishReason::ContentFilter));
        assert_eq!(raw.as_deref(), Some("PROHIBITED_CONTENT"));
        assert_eq!(usage.map(|u| u.input_tokens), Some(7));
        assert_eq!(d.last(), Some(&MessageDelta::Finish));

        for (raw, want) in [
            ("RECITATION", FinishReason::ContentFilter),
            ("MAX_TOKENS", FinishReason::Length),
            ("MALFORMED_FUNCTION_CALL", FinishReason::Other),
        ] {
            assert_eq!(map_finish_reason(raw, false), want, "{raw}");
        }
    }

    #[test]
    fn malformed_chunks_errors_and_cut_streams_are_typed() {
        let d = deltas("data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"hi\"}]}}]}\n\ndata: {not json\n\n");
        assert_eq!(text_of(&d), "hi");
        let e = error_of(&d);
        assert_eq!(e.kind, ErrorKind::MalformedResponse);
        assert!(e.message.contains("event #2"), "{}", e.message);

        let d = deltas("data: {\"candidates\": {\"content\": 1}}\n\n");
        assert_eq!(error_of(&d).kind, ErrorKind::MalformedResponse);

        let d = deltas("data: {\"candidates\": [{\"content\": {\"parts\": [{\"functionCall\": {\"args\": {}}}]}}]}\n\n");
        let e = error_of(&d);
        assert_eq!(e.kind, ErrorKind::MalformedResponse);
        assert!(e.message.contains("without a name"), "{}", e.message);

        let d = deltas("data: {\"error\": {\"code\": 429, \"message\": \"Resource has been exhausted\", \"status\": \"RESOURCE_EXHAUSTED\"}}\n\n");
        assert_eq!(error_of(&d).kind, ErrorKind::RateLimited);
        let d = deltas("data: {\"error\": {\"code\": 503, \"message\": \"The model is overloaded.\", \"status\": \"UNAVAILABLE\"}}\n\n");
        assert!(matches!(
            error_of(&d).kind,
            ErrorKind::ServerError | ErrorKind::Overloaded
        ));

        let d = deltas(
            "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"cut\"}]}}]}\n\n",
        );
        assert_eq!(error_of(&d).kind, ErrorKind::IncompleteStream);
    }
}
