//! The built-in `ask_user` tool: the model asks the person a question
//! (with options); the call waits in the tool-call chart's `AwaitingUser` state, the session
//! reports `awaiting_user` and emits `ask_user{question, options, ref}`, and
//! `Session::respond(ref, answer)` resumes the run (`user_responded`). A deadline is the
//! step's timer; without a session nobody can answer and the call fails at once.

mod support;

use std::sync::Arc;

use agentloop::provider::scripted::ScriptedModel;
use agentloop::session::{Session, SessionConfig, SessionError, Status};
use agentloop::AgentEvent;
use agentloop::{Message, ToolStatus};
use support::*;

const ASKS: &str = r#"{"turns": [
    {"tool_calls": [{"id": "q1", "name": "ask_user",
                     "arguments": {"question": "Which colour?", "options": ["red", "blue"]}}]},
    {"text": "You chose {{last_tool_result}}."}
]}"#;

fn asking_session(timeout_ms: Option<u64>) -> Session {
    let agent = builder(Slow::new(ASKS)).ask_user(timeout_ms).build();
    Session::spawn(agent, SessionConfig::new("s").event_buffer_size(1024))
}

fn result_of(s: &Session, id: &str) -> (ToolStatus, String) {
    s.last_result()
        .expect("a result")
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Tool(r) if r.tool_call_id == id => Some((r.status, r.content.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {id}"))
}

#[tokio::test(start_paused = true)]
async fn seed_001_ask_user_pauses_the_session_until_respond() {
    let s = asking_session(None);
    let mut sub = s.subscribe(None, None);
    s.prompt("pick one").await.expect("started");
    let asked = wait_for(&mut sub, "ask_user").await;
    let AgentEvent::AskUser {
        reference,
        question,
        options,
    } = asked.event
    else {
        panic!("{asked:?}")
    };
    assert_eq!(reference, "q1");
    assert_eq!(question, "Which colour?");
    assert_eq!(options, vec!["red".to_string(), "blue".to_string()]);
    // Nothing moves while nobody answers, however long it takes.
    tokio::time::sleep(std::time::Duration::from_secs(3_600)).await;
    assert_eq!(s.status(), Status::AwaitingUser);
    assert_eq!(s.pending_questions(), ["q1"]);
    assert!(matches!(
        s.respond("nope", "x"),
        Err(SessionError::Answer(_))
    ));
    s.respond("q1", "blue").expect("answered");
    s.wait_idle().await;
    assert_eq!(result_of(&s, "q1"), (ToolStatus::Completed, "blue".into()));
    assert_eq!(
        s.last_result()
            .and_then(|r| r.final_text().map(String::from)),
        Some("You chose blue.".into())
    );
    let ev = history(&s);
    let asked = ev.iter().position(|e| e.event.type_name() == "ask_user");
    let responded = ev.iter().position(|e| {
        matches!(&e.event, AgentEvent::UserResponded { reference, answer } if reference == "q1" && answer == "blue")
    });
    assert!(asked < responded && responded.is_some(), "{ev:?}");
    // The answer resumed the run, as an approval does.
    let resumed = ev.iter().position(
        |e| matches!(&e.event, AgentEvent::AgentResumed { trigger } if trigger == "user_respond"),
    );
    assert!(responded < resumed && resumed.is_some(), "{ev:?}");
    assert!(s.pending_questions().is_empty());
    assert!(matches!(
        s.respond("q1", "again"),
        Err(SessionError::Answer(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn seed_001_an_unanswered_question_fails_at_its_deadline() {
    let s = asking_session(Some(5_000));
    s.prompt("pick one").await.expect("started");
    s.wait_idle().await;
    let (status, content) = result_of(&s, "q1");
    assert_eq!(status, ToolStatus::Error);
    assert!(content.contains("5000 ms"), "{content}");
    assert_eq!(s.last_result().expect("result").reason, "final_answer");
    assert!(s.pending_questions().is_empty());
}

#[tokio::test]
async fn seed_001_without_a_session_nobody_can_answer() {
    let model = ScriptedModel::from_json_str(ASKS, "inline").expect("script");
    let agent = agentloop::runtime::Agent::builder()
        .model(model)
        .store(Arc::new(agentloop::store::MemoryStore::new()))
        .ask_user(None)
        .build();
    let out = agent.run("s", "pick one").await.expect("run");
    let r = out
        .result
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Tool(r) => Some(r.clone()),
            _ => None,
        })
        .expect("a result");
    assert_eq!(r.status, ToolStatus::Error);
    assert!(r.content.contains("nobody"), "{}", r.content);
}

#[tokio::test]
async fn seed_001_ask_user_is_offered_only_when_asked_for() {
    let agent = builder(Slow::new(ASKS)).build();
    assert!(!agent.config().tools.iter().any(|t| t.name == "ask_user"));
    let agent = builder(Slow::new(ASKS)).ask_user(None).build();
    assert!(agent.config().tools.iter().any(|t| t.name == "ask_user"));
    assert!(agent.config().step.ask_user);
}
