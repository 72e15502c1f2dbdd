//! Content parts against the loopback server (R-STR-5): what each provider's request body
//! carries for a user message with images and files (content parts), and how an assistant
//! turn's reasoning goes back — Anthropic's thinking blocks with their signature before the
//! tool calls, OpenAI-compatible `reasoning_content` as [`ReasoningReplay`] says. The bodies
//! are the ones the real clients sent, as the server read them.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

#[path = "provider_support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use agentloop::attachment::Prompt;
use agentloop::model::{Model, ModelRequest};
use agentloop::provider::http::{build_model, HttpConfig, ProviderKind};
use agentloop::provider::openai::ReasoningReplay;
use agentloop::runtime::Agent;
use agentloop::session::{Session, SessionConfig};
use agentloop::store::{Entry, MemoryStore, SessionStore};
use agentloop::ErrorKind;
use agentloop::Outcome;
use agentloop::{AssistantMessage, ContentPart, Message, ToolCall, ToolResult, ToolStatus};
use serde_json::{json, Value};
use support::server::*;

/// A user message with text, an image as data, an image by URL and a PDF.
fn message_with_parts() -> Message {
    Message::user_with_parts(
        "Compare these.",
        vec![
            ContentPart::image_base64("image/png", "iVBORw=="),
            ContentPart::image_url("https://example.com/cat.jpg"),
            ContentPart::file_base64("application/pdf", "JVBERi0xLjQ=", Some("report.pdf".into())),
            ContentPart::text("Be brief."),
        ],
    )
}

/// Sends `messages` through the real client of `p` (the server answers 400: only the body
/// matters) and returns the body the server read.
async fn body_sent(
    p: ProviderKind,
    cfg: impl FnOnce(&mut HttpConfig),
    messages: Vec<Message>,
) -> Value {
    let server = Server::start(vec![Reply::Status {
        status: 400,
        headers: vec![],
        body: "{}".into(),
    }])
    .await;
    let mut config = config(p, &server);
    cfg(&mut config);
    let model = model(p, config);
    let mut req: ModelRequest = request("");
    req.system = None;
    req.tools = Default::default();
    req.messages = messages.into();
    let _ = model.stream(req).await;
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    reqs[0].body.clone()
}

#[tokio::test]
async fn r_str_5_issue12_item6_openai_sends_text_image_url_and_file_parts() {
    let body = body_sent(ProviderKind::OpenAi, |_| {}, vec![message_with_parts()]).await;
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "Compare these."},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
            {"type": "file", "file": {"filename": "report.pdf", "file_data": "data:application/pdf;base64,JVBERi0xLjQ="}},
            {"type": "text", "text": "Be brief."},
        ]}])
    );
}

#[tokio::test]
async fn r_str_5_issue12_item6_anthropic_sends_text_image_and_document_blocks() {
    let body = body_sent(ProviderKind::Anthropic, |_| {}, vec![message_with_parts()]).await;
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "Compare these."},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw=="}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
            {"type": "document", "title": "report.pdf", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQ="}},
            {"type": "text", "text": "Be brief."},
        ]}])
    );
}

/// Parts are additive: a plain-text user message keeps its wire format (a string for
/// OpenAI-compatible servers, one text block for Anthropic) and its stored JSON (no `parts`);
/// parts without text send no empty text (Anthropic refuses empty text blocks).
#[tokio::test]
async fn r_str_5_issue12_item6_plain_text_messages_keep_their_wire_and_stored_format() {
    let plain = Message::user("hi");
    assert_eq!(
        serde_json::to_value(&plain).unwrap(),
        json!({"role": "user", "content": "hi"})
    );
    let read: Message = serde_json::from_value(json!({"role": "user", "content": "hi"})).unwrap();
    assert_eq!(
        read, plain,
        "a message stored before parts existed reads the same"
    );
    let openai = body_sent(ProviderKind::OpenAi, |_| {}, vec![plain.clone()]).await;
    assert_eq!(
        openai["messages"],
        json!([{"role": "user", "content": "hi"}])
    );
    let anthropic = body_sent(ProviderKind::Anthropic, |_| {}, vec![plain]).await;
    assert_eq!(
        anthropic["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    );

    let image_only = Message::user_with_parts("", vec![ContentPart::image_url("https://x/y.png")]);
    let openai = body_sent(ProviderKind::OpenAi, |_| {}, vec![image_only.clone()]).await;
    assert_eq!(
        openai["messages"][0]["content"],
        json!([{"type": "image_url", "image_url": {"url": "https://x/y.png"}}])
    );
    let anthropic = body_sent(ProviderKind::Anthropic, |_| {}, vec![image_only]).await;
    assert_eq!(
        anthropic["messages"][0]["content"],
        json!([{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}])
    );
}

/// Chat Completions takes a file as data, not by URL: the client refuses such a request with
/// a `bad_request` before anything is sent (Anthropic takes it as a URL document).
#[tokio::test]
async fn r_str_5_issue12_item6_openai_refuses_a_file_by_url_without_sending() {
    let server = Server::start(vec![]).await;
    let m = build_model("gpt-test", config(ProviderKind::OpenAi, &server)).unwrap();
    let mut req = request("");
    req.messages = vec![Message::user_with_parts(
        "read",
        vec![ContentPart::file_url("https://x/a.pdf")],
    )]
    .into();
    let err = m.stream(req).await.err().expect("refused");
    assert_eq!(err.kind, ErrorKind::BadRequest, "{err}");
    assert!(err.message.contains("https://x/a.pdf"), "{err}");
    assert!(server.requests().is_empty());

    let body = body_sent(
        ProviderKind::Anthropic,
        |_| {},
        vec![Message::user_with_parts(
            "read",
            vec![ContentPart::file_url("https://x/a.pdf")],
        )],
    )
    .await;
    assert_eq!(
        body["messages"][0]["content"][1],
        json!({"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}})
    );
}

fn anthropic_event(data: Value) -> String {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap_or("")
    )
}

/// A Messages stream: a thinking block with its signature, a redacted thinking block, then a
/// calculator call.
fn anthropic_thinking_then_tool() -> Vec<u8> {
    [
        json!({"type": "message_start", "message": {"id": "m1", "usage": {"input_tokens": 10}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Add "}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "them."}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig-XYZ"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "opaque=="}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "calculator", "input": {}}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"expression\": \"2+2\"}"}}),
        json!({"type": "content_block_stop", "index": 2}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 20}}),
        json!({"type": "message_stop"}),
    ]
    .into_iter()
    .map(anthropic_event)
    .collect::<String>()
    .into_bytes()
}

fn anthropic_answer() -> Vec<u8> {
    [
        json!({"type": "message_start", "message": {"id": "m2", "usage": {"input_tokens": 30}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "4"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}),
        json!({"type": "message_stop"}),
    ]
    .into_iter()
    .map(anthropic_event)
    .collect::<String>()
    .into_bytes()
}

fn sse(body: Vec<u8>) -> Reply {
    Reply::Sse {
        pieces: vec![body],
        gap: Duration::ZERO,
    }
}

/// With extended thinking on, the request after a tool call carries the assistant turn as
/// the API requires: its thinking block (reasoning and signature, unmodified) and redacted
/// thinking first, then the `tool_use`; the prompt's image travels with its text.
#[tokio::test]
async fn r_str_5_issue12_item6_anthropic_sends_thinking_with_signature_before_tool_use() {
    let server = Server::start(vec![
        sse(anthropic_thinking_then_tool()),
        sse(anthropic_answer()),
    ])
    .await;
    let mut cfg = config(ProviderKind::Anthropic, &server);
    cfg.thinking_budget = Some(2048);
    let agent = Agent::builder()
        .builtin_tools()
        .model(build_model("claude-test", cfg).unwrap())
        .build();
    let prompt =
        Prompt::new("What is 2+2?").part(ContentPart::image_base64("image/png", "iVBORw=="));
    let out = agent.run_prompt("s", prompt).await.expect("run");
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        assert_eq!(
            r.body["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
    }
    assert_eq!(
        reqs[1].body["messages"],
        json!([
            {"role": "user", "content": [
                {"type": "text", "text": "What is 2+2?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw=="}},
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Add them.", "signature": "sig-XYZ"},
                {"type": "redacted_thinking", "data": "opaque=="},
                {"type": "tool_use", "id": "toolu_1", "name": "calculator", "input": {"expression": "2+2"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "4", "is_error": false},
            ]},
        ])
    );
}

/// Reasoning the API could not verify (no signature: another provider's, or a stream cut
/// before it) is not sent as a thinking block.
#[tokio::test]
async fn r_str_5_issue12_item6_anthropic_leaves_out_reasoning_without_a_signature() {
    let assistant = Message::Assistant(AssistantMessage {
        text: "Hello".into(),
        reasoning: "unsigned thoughts".into(),
        ..AssistantMessage::default()
    });
    let body = body_sent(
        ProviderKind::Anthropic,
        |_| {},
        vec![Message::user("hi"), assistant, Message::user("again")],
    )
    .await;
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "content": [{"type": "text", "text": "Hello"}]})
    );
}

fn openai_chunk(delta: Value, finish: Option<&str>) -> String {
    let c = json!({"id": "c", "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {c}\n\n")
}

/// A DeepSeek-style stream: `reasoning_content`, then a calculator call.
fn openai_reasoning_then_tool() -> Vec<u8> {
    let mut s = openai_chunk(
        json!({"role": "assistant", "reasoning_content": "Add "}),
        None,
    );
    s += &openai_chunk(json!({"reasoning_content": "them."}), None);
    s += &openai_chunk(
        json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "calculator", "arguments": "{\"expression\": \"2+2\"}"}}]}),
        None,
    );
    s += &openai_chunk(json!({}), Some("tool_calls"));
    (s + "data: [DONE]\n\n").into_bytes()
}

fn openai_answer() -> Vec<u8> {
    let mut s = openai_chunk(json!({"reasoning_content": "Done."}), None);
    s += &openai_chunk(json!({"content": "4"}), None);
    s += &openai_chunk(json!({}), Some("stop"));
    (s + "data: [DONE]\n\n").into_bytes()
}

/// By default an OpenAI-compatible request sends each assistant message's reasoning back as
/// `reasoning_content`: DeepSeek's thinking mode answers a tool loop without it with HTTP 400.
#[tokio::test]
async fn r_str_5_issue12_item6_openai_sends_reasoning_content_back_in_the_tool_loop() {
    let server = Server::start(vec![
        sse(openai_reasoning_then_tool()),
        sse(openai_answer()),
    ])
    .await;
    let agent = Agent::builder()
        .builtin_tools()
        .model_arc(Arc::new(
            build_model("deepseek-test", config(ProviderKind::OpenAi, &server)).unwrap(),
        ))
        .build();
    let out = agent.run("s", "What is 2+2?").await.expect("run");
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[1].body["messages"],
        json!([
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "", "reasoning_content": "Add them.",
             "tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "calculator", "arguments": "{\"expression\":\"2+2\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "4"},
        ])
    );
}

/// The three settings over a history of two user turns, each answered with reasoning: `all`
/// sends both, `current-turn` only the one after the last user message, `off` none.
#[tokio::test]
async fn r_str_5_issue12_item6_openai_reasoning_replay_settings() {
    let reasoned = |reasoning: &str, calls: Vec<ToolCall>| {
        Message::Assistant(AssistantMessage {
            text: String::new(),
            reasoning: reasoning.into(),
            tool_calls: calls,
            ..AssistantMessage::default()
        })
    };
    let history = vec![
        Message::user("first"),
        reasoned("r1", vec![ToolCall::from_raw("c1", "calculator", "{}")]),
        Message::Tool(ToolResult {
            tool_call_id: "c1".into(),
            name: "calculator".into(),
            content: "0".into(),
            status: ToolStatus::Completed,
        }),
        reasoned("r2", vec![]),
        Message::user("second"),
        reasoned("r3", vec![ToolCall::from_raw("c2", "calculator", "{}")]),
        Message::Tool(ToolResult {
            tool_call_id: "c2".into(),
            name: "calculator".into(),
            content: "0".into(),
            status: ToolStatus::Completed,
        }),
    ];
    for (replay, want) in [
        (
            ReasoningReplay::All,
            vec![json!("r1"), json!("r2"), json!("r3")],
        ),
        (
            ReasoningReplay::CurrentTurn,
            vec![Value::Null, Value::Null, json!("r3")],
        ),
        (
            ReasoningReplay::Off,
            vec![Value::Null, Value::Null, Value::Null],
        ),
    ] {
        let body = body_sent(
            ProviderKind::OpenAi,
            |c| c.reasoning_replay = replay,
            history.clone(),
        )
        .await;
        let sent: Vec<Value> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .map(|m| m.get("reasoning_content").cloned().unwrap_or(Value::Null))
            .collect();
        assert_eq!(sent, want, "{replay:?}");
    }
    for (text, replay) in [
        ("off", ReasoningReplay::Off),
        ("current-turn", ReasoningReplay::CurrentTurn),
        ("all", ReasoningReplay::All),
    ] {
        assert_eq!(text.parse::<ReasoningReplay>(), Ok(replay));
    }
    assert!("yes".parse::<ReasoningReplay>().is_err());
}

/// A session takes a prompt with parts too: the request carries them, the stored entry keeps
/// them, and a plain prompt's stored entry has no `parts` (sessions written before are read
/// and written the same).
#[tokio::test]
async fn r_str_5_issue12_item6_session_prompt_with_parts_is_sent_and_stored() {
    let answer = |text: &str| {
        let mut s = openai_chunk(json!({"content": text}), None);
        s += &openai_chunk(json!({}), Some("stop"));
        sse((s + "data: [DONE]\n\n").into_bytes())
    };
    let server = Server::start(vec![answer("a cat"), answer("ok")]).await;
    let store = Arc::new(MemoryStore::new());
    let agent = Agent::builder()
        .model_arc(Arc::new(
            build_model("gpt-test", config(ProviderKind::OpenAi, &server)).unwrap(),
        ))
        .store(store.clone())
        .build();
    let session = Session::spawn(agent, SessionConfig::new("s1"));
    let prompt = Prompt::new("What is this?").part(ContentPart::image_url("https://x/cat.png"));
    session.prompt_with(prompt).await.expect("prompt");
    session.wait_idle().await;
    session.prompt("thanks").await.expect("prompt");
    session.wait_idle().await;
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[1].body["messages"][0],
        json!({"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "https://x/cat.png"}},
        ]})
    );
    let inputs: Vec<Value> = store
        .load("s1")
        .await
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Entry::UserInput { message, .. } => serde_json::to_value(message).ok(),
            _ => None,
        })
        .collect();
    assert_eq!(
        inputs,
        [
            json!({"role": "user", "content": "What is this?",
                   "parts": [{"type": "image", "source": {"type": "url", "url": "https://x/cat.png"}}]}),
            json!({"role": "user", "content": "thanks"}),
        ]
    );
}
