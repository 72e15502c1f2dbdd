//! Importing a chat-completions recording: content parts, where system and user messages may
//! stand, the configuration the import records, and repeated calls the machines would ask about.

use agentloop_core::trace::TraceRecord;
use agentloop_core::{Event, Message};
use agentloop_trace_tools::import::{openai_chat, ImportOptions, Imported};
use serde_json::{json, Value};

fn import(messages: Value) -> Imported {
    openai_chat(&messages, &ImportOptions::default()).expect("import")
}

fn findings(imported: &Imported) -> Vec<String> {
    imported.findings.iter().map(|f| f.to_string()).collect()
}

/// The input of the run the import starts.
fn start_input(imported: &Imported) -> Vec<Message> {
    match imported.trace.records.first() {
        Some(TraceRecord::Input {
            event: Event::Start { input, .. },
            ..
        }) => input.clone(),
        other => panic!("{other:?}"),
    }
}

fn call(id: &str) -> Value {
    json!({"id": id, "type": "function",
           "function": {"name": "calc", "arguments": "{\"x\":1}"}})
}

#[test]
fn content_parts_are_joined_text() {
    let imported = import(json!([
        {"role": "system", "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]},
        {"role": "user", "content": [
            {"type": "text", "text": "Hel"}, {"type": "image_url", "image_url": {"url": "u"}},
            {"type": "text", "text": "lo"}]},
        {"role": "user", "content": null},
        {"role": "assistant", "content": "Hi."}
    ]));
    assert_eq!(
        start_input(&imported),
        [Message::user("Hello"), Message::user("")]
    );
    assert_eq!(
        imported.trace.header.config.system.as_deref(),
        Some("Be brief.")
    );
    assert_eq!(findings(&imported), Vec::<String>::new());
}

#[test]
fn one_system_prompt_before_the_replies_and_users_only_before_the_first_reply() {
    let imported = import(json!([
        {"role": "developer", "content": "first"},
        {"role": "user", "content": "q"},
        {"role": "system", "content": "second"},
        {"role": "assistant", "content": "a"},
        {"role": "system", "content": "third"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2"}
    ]));
    assert_eq!(
        imported.trace.header.config.system.as_deref(),
        Some("first")
    );
    assert_eq!(start_input(&imported), [Message::user("q")]);
    assert_eq!(
        findings(&imported),
        [
            "message 2: a later system message is not imported (one system prompt per run)",
            "message 4: a later system message is not imported (one system prompt per run)",
            "message 5: a user message after the first reply starts another run; messages 5..6 \
             are not imported (one run per trace)",
        ]
    );
    assert_eq!(imported.replies.len(), 1);

    // A system message after a reply is not the prompt, even when none came before.
    let late = import(json!([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "system", "content": "late"}
    ]));
    assert_eq!(late.trace.header.config.system, None);
    assert_eq!(
        findings(&late),
        ["message 2: a later system message is not imported (one system prompt per run)"]
    );
}

#[test]
fn the_header_records_the_model_and_one_step_more_than_the_replies() {
    let options = ImportOptions {
        model: "gpt-test".into(),
        ..ImportOptions::default()
    };
    let imported = openai_chat(
        &json!([
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": null, "tool_calls": [call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "2"},
            {"role": "assistant", "content": "two"}
        ]),
        &options,
    )
    .expect("import");
    let config = &imported.trace.header.config;
    assert_eq!(config.model, "gpt-test");
    assert_eq!(config.max_steps, 3);
    assert_eq!(findings(&imported), Vec::<String>::new());
}

#[test]
fn a_repeated_call_the_machines_would_ask_about_is_imported_as_approved() {
    let mut messages = vec![json!({"role": "user", "content": "loop"})];
    for id in ["c1", "c2", "c3"] {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call(id)]}));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": "2"}));
    }
    messages.push(json!({"role": "assistant", "content": "done"}));
    let imported = import(Value::Array(messages));
    assert_eq!(
        findings(&imported),
        [
            "step 3: the machines would ask a human about call c3 (calc) (a repeated call); \
          imported as approved"
        ]
    );
    assert_eq!(agentloop_core::trace::replay(&imported.trace), None);
    let approved = imported.trace.records.iter().any(|r| {
        matches!(r, TraceRecord::Input { event: Event::Approval { tool_call_id, .. }, .. }
            if tool_call_id == "c3")
    });
    assert!(approved);
}
