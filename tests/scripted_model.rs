//! The offline scripted model: example scripts, the demo, error serving by attempt, chunking,
//! templates and load errors.

use std::path::PathBuf;

use agentloop::model::{Model, ModelParams, ModelRequest};
use agentloop::provider::scripted::{ScriptLoadError, ScriptedModel};
use agentloop::tools::{ToolContext, ToolRegistry};
use agentloop::ErrorKind;
use agentloop::{FinishReason, Message, MessageDelta, ToolResult, ToolStatus};
use futures::StreamExt;
use serde_json::json;

fn scripts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/scripts")
}

fn request(session_turn: u32, attempt: u32, messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        run_id: "run-1".into(),
        model_call_index: session_turn + 1,
        attempt,
        session_turn,
        model: "scripted".into(),
        system: None,
        messages: messages.into(),
        tools: ToolRegistry::builtin().specs(),
        params: ModelParams::default(),
    }
}

/// Collects a finite stream: the deltas, then the error that ended it (if any).
async fn collect(
    model: &ScriptedModel,
    req: ModelRequest,
) -> (Vec<MessageDelta>, Option<agentloop::ModelError>) {
    let mut stream = match model.stream(req).await {
        Ok(s) => s,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut deltas = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(d) => deltas.push(d),
            Err(e) => return (deltas, Some(e)),
        }
    }
    (deltas, None)
}

fn text_of(deltas: &[MessageDelta]) -> String {
    deltas
        .iter()
        .filter_map(|d| match d {
            MessageDelta::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn tool_calls_of(deltas: &[MessageDelta]) -> Vec<(String, String, String)> {
    deltas
        .iter()
        .filter_map(|d| match d {
            MessageDelta::ToolCall {
                id,
                name,
                arguments,
            } => Some((id.clone(), name.clone(), arguments.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn every_example_script_parses() {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(scripts_dir()).expect("examples/scripts exists") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_some_and(|e| e == "json") {
            let script = ScriptedModel::from_file(&path)
                .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
            assert!(script.turns() > 0, "{} has no turns", path.display());
            names.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    names.sort();
    assert_eq!(
        names,
        [
            "append_many.json",
            "compact_append.json",
            "crash_many.json",
            "demo.json",
            "disconnect_then_ok.json",
            "four_parallel.json",
            "reasoning.json",
            "retry.json",
            "stall_then_ok.json",
            "tools_parallel.json",
        ]
    );
}

#[test]
fn demo_json_is_the_builtin_demo() {
    let file = ScriptedModel::from_file(scripts_dir().join("demo.json")).unwrap();
    assert_eq!(file, ScriptedModel::demo());
}

#[test]
fn append_many_has_unique_call_ids_in_its_lines() {
    let script = ScriptedModel::from_file(scripts_dir().join("append_many.json"))
        .unwrap()
        .to_json();
    let turns = script["turns"].as_array().unwrap();
    let calls_of = |t: &serde_json::Value| t["tool_calls"].as_array().cloned().unwrap_or_default();
    let mut ids = Vec::new();
    for turn in turns {
        for call in &calls_of(turn) {
            assert_eq!(call["name"], "append_line");
            let id = call["id"].as_str().expect("explicit id").to_string();
            let line = call["arguments"]["line"].as_str().unwrap();
            assert!(line.contains(&format!("call={id} ")), "{line}");
            ids.push(id);
        }
    }
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n);
    assert!(n >= 20);
    assert!(
        turns.iter().any(|t| calls_of(t).len() > 1),
        "has parallel calls"
    );
    assert!(
        calls_of(turns.last().unwrap()).is_empty(),
        "ends with an answer"
    );
}

#[tokio::test]
async fn demo_calls_the_calculator_then_answers_with_its_result() {
    let model = ScriptedModel::demo();
    assert_eq!(model.name(), "scripted");
    let user = Message::user("What is 2+3?");
    let (deltas, err) = collect(&model, request(0, 1, vec![user.clone()])).await;
    assert!(err.is_none());
    assert_eq!(text_of(&deltas), "Let me calculate that.");
    let calls = tool_calls_of(&deltas);
    assert_eq!(calls.len(), 1);
    let (id, name, arguments) = &calls[0];
    assert_eq!((id.as_str(), name.as_str()), ("call_0_0", "calculator"));
    let args: serde_json::Value = serde_json::from_str(arguments).unwrap();
    assert_eq!(args, json!({"expression": "2+3"}));

    // The arguments stream in pieces that concatenate to the full JSON.
    let streamed: String = deltas
        .iter()
        .filter_map(|d| match d {
            MessageDelta::ToolInputDelta { id, delta } if id == "call_0_0" => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(&streamed, arguments);
    assert!(matches!(
        deltas[deltas.len() - 2],
        MessageDelta::FinishStep {
            finish_reason: Some(FinishReason::ToolCalls),
            usage: Some(_),
            ..
        }
    ));
    assert_eq!(deltas.last(), Some(&MessageDelta::Finish));

    // Run the real tool, then ask for turn 1.
    let tools = ToolRegistry::builtin();
    let result = tools
        .get("calculator")
        .unwrap()
        .call(
            ToolContext {
                call_id: id.clone(),
                root: std::env::temp_dir(),
                idempotency_key: None,
                allow_instruction_writes: false,
            },
            args,
        )
        .await
        .unwrap();
    assert_eq!(result, "5");
    let history = vec![
        user,
        assistant_with_call(id, arguments),
        Message::Tool(ToolResult {
            tool_call_id: id.clone(),
            name: "calculator".into(),
            content: result,
            status: ToolStatus::Completed,
        }),
    ];
    let (deltas, err) = collect(&model, request(1, 1, history)).await;
    assert!(err.is_none());
    assert_eq!(text_of(&deltas), "The answer is 5.");
    assert!(tool_calls_of(&deltas).is_empty());
    assert!(deltas.iter().any(|d| matches!(
        d,
        MessageDelta::FinishStep {
            finish_reason: Some(FinishReason::Stop),
            ..
        }
    )));
}

#[tokio::test]
async fn reply_has_the_documented_delta_order_and_deterministic_usage() {
    let model = ScriptedModel::from_json_str(
        r#"{"turns": [{"reasoning": "think", "text": "hi", "tool_calls": [{"id": "x", "name": "calculator", "arguments": {"expression": "1"}}]}]}"#,
        "inline",
    )
    .unwrap();
    let messages = vec![Message::user("a".repeat(40))];
    let (deltas, err) = collect(&model, request(0, 1, messages.clone())).await;
    assert!(err.is_none());
    let args = r#"{"expression":"1"}"#;
    let expected_output = ("think".len() + "hi".len() + "calculator".len() + args.len()) / 4;
    assert_eq!(
        deltas,
        vec![
            MessageDelta::StartStep,
            MessageDelta::ReasoningStart,
            MessageDelta::ReasoningDelta {
                text: "think".into()
            },
            MessageDelta::ReasoningEnd,
            MessageDelta::TextStart,
            MessageDelta::TextDelta { text: "hi".into() },
            MessageDelta::TextEnd,
            MessageDelta::ToolInputStart {
                id: "x".into(),
                name: "calculator".into()
            },
            MessageDelta::ToolInputDelta {
                id: "x".into(),
                delta: args[..8].into()
            },
            MessageDelta::ToolInputDelta {
                id: "x".into(),
                delta: args[8..16].into()
            },
            MessageDelta::ToolInputDelta {
                id: "x".into(),
                delta: args[16..].into()
            },
            MessageDelta::ToolInputEnd { id: "x".into() },
            MessageDelta::ToolCall {
                id: "x".into(),
                name: "calculator".into(),
                arguments: args.into()
            },
            MessageDelta::FinishStep {
                finish_reason: Some(FinishReason::ToolCalls),
                raw_finish_reason: None,
                usage: Some(agentloop::Usage {
                    input_tokens: 10,
                    output_tokens: expected_output as u64,
                    ..Default::default()
                }),
            },
            MessageDelta::Finish,
        ]
    );
    // A pure function of the request: the same request gives the same deltas.
    let (again, _) = collect(&model, request(0, 1, messages)).await;
    assert_eq!(again, deltas);
}

#[tokio::test]
async fn errors_are_served_by_attempt() {
    let model = ScriptedModel::from_json_str(
        r#"{"turns": [{"text": "ok", "errors": [
            {"status": 429, "retry_after_ms": 20},
            {"status": 503},
            {"status": 400, "kind": "context_overflow", "message": "too long"},
            {"status": 401}
        ]}]}"#,
        "inline",
    )
    .unwrap();
    let (_, e1) = collect(&model, request(0, 1, vec![])).await;
    let e1 = e1.unwrap();
    assert_eq!(e1.kind, ErrorKind::RateLimited);
    assert_eq!(e1.retry_after_ms, Some(20));
    assert_eq!(e1.http_status, Some(429));
    assert!(e1.retryable());

    let e2 = collect(&model, request(0, 2, vec![])).await.1.unwrap();
    assert_eq!(
        (e2.kind, e2.http_status, e2.retry_after_ms),
        (ErrorKind::ServerError, Some(503), None)
    );

    let e3 = collect(&model, request(0, 3, vec![])).await.1.unwrap();
    assert!(e3.context_overflow());
    assert_eq!(e3.message, "too long");

    let e4 = collect(&model, request(0, 4, vec![])).await.1.unwrap();
    assert_eq!(e4.kind, ErrorKind::Authentication);
    assert!(!e4.retryable());

    let (deltas, e5) = collect(&model, request(0, 5, vec![])).await;
    assert!(e5.is_none());
    assert_eq!(text_of(&deltas), "ok");

    // The example retry script: one 429, then "ok".
    let retry = ScriptedModel::from_file(scripts_dir().join("retry.json")).unwrap();
    assert_eq!(
        collect(&retry, request(0, 1, vec![])).await.1.unwrap().kind,
        ErrorKind::RateLimited
    );
    assert_eq!(
        text_of(&collect(&retry, request(0, 2, vec![])).await.0),
        "ok"
    );
}

#[tokio::test]
async fn status_codes_map_to_kinds() {
    for (status, kind) in [
        (429, ErrorKind::RateLimited),
        (500, ErrorKind::ServerError),
        (502, ErrorKind::ServerError),
        (503, ErrorKind::ServerError),
        (504, ErrorKind::ServerError),
        (529, ErrorKind::Overloaded),
        (401, ErrorKind::Authentication),
        (403, ErrorKind::Permission),
        (404, ErrorKind::NotFound),
        (400, ErrorKind::BadRequest),
        (413, ErrorKind::RequestTooLarge),
    ] {
        let json = format!(r#"{{"turns": [{{"errors": [{{"status": {status}}}], "text": "x"}}]}}"#);
        let model = ScriptedModel::from_json_str(&json, "inline").unwrap();
        let err = collect(&model, request(0, 1, vec![])).await.1.unwrap();
        assert_eq!(err.kind, kind, "status {status}");
        assert_eq!(err.http_status, Some(status));
    }
}

#[tokio::test]
async fn stall_yields_start_step_then_pends_forever() {
    let model = ScriptedModel::from_file(scripts_dir().join("stall_then_ok.json")).unwrap();
    let mut stream = model.stream(request(0, 1, vec![])).await.unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        MessageDelta::StartStep
    );
    let next = tokio::time::timeout(std::time::Duration::from_millis(50), stream.next()).await;
    assert!(next.is_err(), "the stalled stream yielded {next:?}");
    let (deltas, err) = collect(&model, request(0, 2, vec![])).await;
    assert!(err.is_none());
    assert_eq!(text_of(&deltas), "Recovered after a stalled stream.");
}

#[tokio::test]
async fn disconnect_streams_partial_text_then_a_connection_error() {
    let model = ScriptedModel::from_file(scripts_dir().join("disconnect_then_ok.json")).unwrap();
    let (deltas, err) = collect(&model, request(0, 1, vec![])).await;
    let err = err.expect("disconnect");
    assert_eq!(err.kind, ErrorKind::Connection);
    assert!(err.retryable());
    assert_eq!(text_of(&deltas), "This reply");
    assert!(!deltas
        .iter()
        .any(|d| matches!(d, MessageDelta::TextEnd | MessageDelta::Finish)));

    let err = collect(&model, request(0, 2, vec![])).await.1.unwrap();
    assert_eq!(err.kind, ErrorKind::ServerError);
    let (deltas, err) = collect(&model, request(0, 3, vec![])).await;
    assert!(err.is_none());
    assert_eq!(
        text_of(&deltas),
        "This reply arrives complete on the third attempt."
    );

    // Disconnect counts characters, not bytes.
    let model = ScriptedModel::from_json_str(
        r#"{"turns": [{"errors": [{"disconnect_after_chars": 3}], "text": "é🦀ü-rest"}]}"#,
        "inline",
    )
    .unwrap();
    let (deltas, err) = collect(&model, request(0, 1, vec![])).await;
    assert_eq!(err.unwrap().kind, ErrorKind::Connection);
    assert_eq!(text_of(&deltas), "é🦀ü");
}

#[tokio::test]
async fn text_is_chunked_by_chars_including_multibyte() {
    let model = ScriptedModel::from_json_str(
        r#"{"turns": [{"text": "héllo 🦀 wörld!", "chunk_chars": 3}, {"text": "0123456789abcdefghij"}]}"#,
        "inline",
    )
    .unwrap();
    let (deltas, _) = collect(&model, request(0, 1, vec![])).await;
    let pieces: Vec<&str> = deltas
        .iter()
        .filter_map(|d| match d {
            MessageDelta::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(pieces, ["hél", "lo ", "🦀 w", "örl", "d!"]);

    // Default chunk size: 8 characters.
    let (deltas, _) = collect(&model, request(1, 1, vec![])).await;
    let sizes: Vec<usize> = deltas
        .iter()
        .filter_map(|d| match d {
            MessageDelta::TextDelta { text } => Some(text.chars().count()),
            _ => None,
        })
        .collect();
    assert_eq!(sizes, [8, 8, 4]);
}

#[tokio::test]
async fn turn_follows_session_turn_and_ids_default_per_turn() {
    let model = ScriptedModel::from_file(scripts_dir().join("tools_parallel.json")).unwrap();
    let (deltas, _) = collect(&model, request(0, 1, vec![Message::user("and 1+1?")])).await;
    let calls = tool_calls_of(&deltas);
    let ids: Vec<&str> = calls.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(ids, ["call_0_0", "call_0_1", "call_0_2"]);
    assert_eq!(calls[0].2, r#"{"expression":"1+1"}"#);
    // Attempt number does not change a successful reply.
    let (retried, _) = collect(&model, request(0, 3, vec![Message::user("and 1+1?")])).await;
    assert_eq!(retried, deltas);
    // A resumed session at turn 1 gets the final answer.
    let tool = Message::Tool(ToolResult {
        tool_call_id: "call_0_2".into(),
        name: "calculator".into(),
        content: "1024".into(),
        status: ToolStatus::Completed,
    });
    let (deltas, _) = collect(&model, request(1, 1, vec![tool])).await;
    assert_eq!(text_of(&deltas), "Done: the last result was 1024.");
}

#[tokio::test]
async fn raw_string_arguments_are_sent_verbatim() {
    let model = ScriptedModel::from_json_str(
        r#"{"turns": [{"tool_calls": [{"name": "calculator", "arguments": "{\"expression\": \"1+"}]}]}"#,
        "inline",
    )
    .unwrap();
    let (deltas, _) = collect(&model, request(0, 1, vec![])).await;
    assert_eq!(tool_calls_of(&deltas)[0].2, r#"{"expression": "1+"#);
}

#[tokio::test]
async fn script_exhausted_is_a_non_retryable_bad_request() {
    let model = ScriptedModel::from_json_str(r#"{"turns": [{"text": "a"}, {"text": "b"}]}"#, "two")
        .unwrap();
    let err = collect(&model, request(2, 1, vec![])).await.1.unwrap();
    assert_eq!(err.kind, ErrorKind::BadRequest);
    assert!(!err.retryable());
    assert!(
        err.message.contains("script exhausted at turn 2"),
        "{}",
        err.message
    );
}

fn parse_err(json: &str) -> ScriptLoadError {
    match ScriptedModel::from_json_str(json, "bad.json") {
        Ok(s) => panic!("parsed {s:?}"),
        Err(e) => e,
    }
}

#[test]
fn malformed_scripts_name_the_file_line_and_column() {
    let e = parse_err("{\"turns\": [\n  {\"text\": \"a\",\n   \"txet\": \"b\"}\n]}");
    let msg = e.to_string();
    assert!(msg.starts_with("invalid script bad.json:3:"), "{msg}");
    assert!(msg.contains("unknown field `txet`"), "{msg}");
    assert!(matches!(e, ScriptLoadError::Parse { line: 3, .. }));

    let msg = parse_err("{\"turns\": [\n  {\"text\": \"a\"\n]}").to_string();
    assert!(msg.starts_with("invalid script bad.json:3:"), "{msg}");

    let msg =
        parse_err("{\"turns\": [{\"errors\": [{\"stall\": true, \"status\": 500}]}]}").to_string();
    assert!(msg.contains("bad.json:1:"), "{msg}");
    assert!(msg.contains("exactly one of"), "{msg}");

    let msg = parse_err("{\"turns\": [{\"errors\": [{\"status\": 200}]}]}").to_string();
    assert!(msg.contains("not an HTTP error status"), "{msg}");

    let msg = parse_err("{\"turns\": [{\"errors\": [{}]}]}").to_string();
    assert!(msg.contains("needs one of"), "{msg}");

    let msg = parse_err("{\"turns\": [{\"text\": \"a\", \"chunk_chars\": 0}]}").to_string();
    assert!(msg.contains("bad.json:1:"), "{msg}");

    let msg = parse_err("{\"turns\": [{\"tool_calls\": [{\"arguments\": {}}]}]}").to_string();
    assert!(msg.contains("missing field `name`"), "{msg}");

    let msg = parse_err("").to_string();
    assert!(msg.starts_with("invalid script bad.json:1:0"), "{msg}");
}

#[test]
fn missing_file_is_an_io_error_naming_it() {
    let e = ScriptedModel::from_file("/nonexistent/script.json").unwrap_err();
    assert!(matches!(e, ScriptLoadError::Io { .. }));
    assert!(e.to_string().contains("/nonexistent/script.json"), "{e}");
}

/// The built-in demo holds a conversation: it starts again at every prompt (`per_prompt`), so
/// the second and third prompts of a session are answered like the first, and a prompt with no
/// arithmetic gets a short reply instead of a calculator call.
#[tokio::test]
async fn demo_answers_every_prompt_of_a_session() {
    let model = ScriptedModel::demo();
    let calc_round = |session_turn: u32, prompt: &str, history: Vec<Message>| {
        let mut messages = history;
        messages.push(Message::user(prompt));
        request(session_turn, 1, messages)
    };
    // Prompt 1 and its two steps, as a session would have committed them.
    let first = calc_round(0, "What is 2+3?", vec![]);
    let (deltas, _) = collect(&model, first.clone()).await;
    let (id, _, arguments) = tool_calls_of(&deltas).remove(0);
    let mut history: Vec<Message> = first.messages.iter().cloned().collect();
    history.push(assistant_with_call(&id, &arguments));
    history.push(tool_result(&id, "5"));
    let (deltas, err) = collect(&model, request(1, 1, history.clone())).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(text_of(&deltas), "The answer is 5.");
    history.push(answer("The answer is 5."));

    // Prompt 2, at session turn 2 (the old demo's "script exhausted at turn 2").
    let second = calc_round(2, "And 6*7?", history.clone());
    let (deltas, err) = collect(&model, second.clone()).await;
    assert!(err.is_none(), "{err:?}");
    let calls = tool_calls_of(&deltas);
    assert_eq!(calls.len(), 1, "one calculator round per prompt");
    let args: serde_json::Value = serde_json::from_str(&calls[0].2).unwrap();
    assert_eq!(args, json!({"expression": "6*7"}));
    let mut history: Vec<Message> = second.messages.iter().cloned().collect();
    history.push(assistant_with_call(&calls[0].0, &calls[0].2));
    history.push(tool_result(&calls[0].0, "42"));
    let (deltas, err) = collect(&model, request(3, 1, history.clone())).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(text_of(&deltas), "The answer is 42.");
    history.push(answer("The answer is 42."));

    // Prompt 3 has no arithmetic: a short reply, no tool call.
    let (deltas, err) = collect(&model, calc_round(4, "Thanks, bye!", history)).await;
    assert!(err.is_none(), "{err:?}");
    assert!(tool_calls_of(&deltas).is_empty());
    assert!(text_of(&deltas).contains("offline demo model"));
}

/// A script without `per_prompt` still runs once through the session and says so when it ends.
#[tokio::test]
async fn a_session_script_is_still_exhausted_after_its_turns() {
    let model = ScriptedModel::from_json_str(r#"{"turns": [{"text": "only"}]}"#, "inline").unwrap();
    let (_, err) = collect(&model, request(1, 1, vec![Message::user("again")])).await;
    let err = err.expect("exhausted");
    assert!(err.message.contains("script exhausted at turn 1"), "{err}");
}

fn assistant_with_call(id: &str, arguments: &str) -> Message {
    Message::Assistant(agentloop::AssistantMessage {
        text: "Let me calculate that.".into(),
        tool_calls: vec![agentloop::ToolCall {
            id: id.into(),
            name: "calculator".into(),
            arguments: serde_json::from_str(arguments).unwrap(),
            invalid_arguments: None,
        }],
        ..Default::default()
    })
}

fn tool_result(id: &str, content: &str) -> Message {
    Message::Tool(ToolResult {
        tool_call_id: id.into(),
        name: "calculator".into(),
        content: content.into(),
        status: ToolStatus::Completed,
    })
}

fn answer(text: &str) -> Message {
    Message::Assistant(agentloop::AssistantMessage {
        text: text.into(),
        ..Default::default()
    })
}
