//! The context manager port (R-CTX-1 / R-CTX-2): a custom manager
//! builds each new run's history, system prompt and tools and keeps entries before and after
//! the run; its outputs are in the trace (`Start`'s history, the header's configuration), so
//! the trace replays without it.

mod support;

use agentloop_testkit::agent::model_requests;
use std::sync::{Arc, Mutex};

use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::{ContextManager, ContextUpdates, RunContext};
use agentloop::store::{Entry, MemoryStore, SessionStore};
use agentloop::trace::{replay, Trace};
use agentloop::Message;
use async_trait::async_trait;
use serde_json::json;
use support::*;

const NOTE: &str = "Pinned: answer in English.";

/// Pins a note before the history, offers only the first tool, sets its own system prompt,
/// and keeps an entry before the run and one (plus, optionally, a new context) after it.
#[derive(Default)]
struct Pinned {
    /// The context the next run starts from, when set (R-CTX-2's `messages`).
    replace_with: Option<Vec<Message>>,
    /// What `compute_context_updates` was given: (new messages, overflow hint).
    seen: Mutex<Vec<(Vec<Message>, bool)>>,
}

#[async_trait]
impl ContextManager for Pinned {
    async fn build_context(&self, context: &mut RunContext<'_>) {
        context.messages.insert(0, Message::user(NOTE));
        context.system_prompt = Some(format!(
            "ctx system (model {})",
            context.runtime_hints["model"].as_str().unwrap_or("?")
        ));
        context.tool_specs = context.tool_specs.iter().take(1).cloned().collect();
        context.entries_to_append.push(Entry::Metadata {
            model: "context".into(),
            config: json!({ "pinned": NOTE, "run": context.run_id }),
        });
    }

    async fn compute_context_updates(
        &self,
        _entries: &[Entry],
        new_messages: &[Message],
        overflow_hint: bool,
    ) -> ContextUpdates {
        self.seen
            .lock()
            .unwrap()
            .push((new_messages.to_vec(), overflow_hint));
        ContextUpdates {
            entries_to_append: vec![Entry::Metadata {
                model: "context".into(),
                config: json!({ "after": new_messages.len(), "overflow": overflow_hint }),
            }],
            messages: self.replace_with.clone(),
        }
    }
}

fn agent(manager: Option<Arc<Pinned>>) -> (agentloop::runtime::Agent, Arc<MemoryStore>) {
    let model =
        ScriptedModel::from_json_str(r#"{"turns": [{"text": "one"}, {"text": "two"}]}"#, "inline")
            .expect("script");
    let store = Arc::new(MemoryStore::new());
    let mut b = builder(model).store(store.clone());
    if let Some(m) = manager {
        b = b.context_manager(m);
    }
    (b.build(), store)
}

async fn run(agent: &agentloop::runtime::Agent, prompt: &str) -> Trace {
    agent
        .run_with("s", vec![Message::user(prompt)], None, true)
        .await
        .expect("run")
        .trace
        .expect("a trace")
}

#[tokio::test]
async fn r_ctx_1_issue_13_a_custom_context_manager_shapes_the_first_request_and_keeps_its_entries()
{
    let (plain, _) = agent(None);
    let all_tools = model_requests(&run(&plain, "hi").await)[0].tools.len();
    assert!(all_tools > 1, "the agent offers several tools");

    let manager = Arc::new(Pinned::default());
    let (agent, store) = agent(Some(manager.clone()));
    let trace = run(&agent, "hi").await;
    let first = &model_requests(&trace)[0];
    assert_eq!(
        first.messages.to_vec(),
        vec![Message::user(NOTE), Message::user("hi")],
        "the pinned note precedes the input"
    );
    assert_eq!(first.tools.len(), 1, "the tools were filtered");
    assert_eq!(first.system.as_deref(), Some("ctx system (model scripted)"));
    // Its outputs are in the trace: the header's configuration and Start's history.
    assert_eq!(trace.header.config.tools.len(), 1);
    assert_eq!(
        trace.header.config.system.as_deref(),
        Some("ctx system (model scripted)")
    );
    // The entry it asked for is in the store, before the run's input.
    let entries = store.load("s").await.expect("load");
    let pinned = entries
        .iter()
        .position(|e| matches!(e, Entry::Metadata { config, .. } if config["pinned"] == NOTE))
        .expect("the entry to append is stored");
    let input = entries
        .iter()
        .position(|e| matches!(e, Entry::UserInput { .. }))
        .expect("the input is stored");
    assert!(pinned < input, "appended before the run");
    // The trace replays without the context manager.
    assert_eq!(replay(&trace), None, "replays without divergence");
    let parsed = Trace::parse(&trace.to_jsonl(), "inline").expect("parses");
    assert_eq!(replay(&parsed), None);
}

#[tokio::test]
async fn r_ctx_2_issue_13_context_updates_after_a_run_are_stored_and_start_the_next_run() {
    let manager = Arc::new(Pinned {
        replace_with: Some(vec![Message::user("summary of the first run")]),
        ..Default::default()
    });
    let (agent, store) = agent(Some(manager.clone()));
    run(&agent, "hi").await;
    {
        let seen = manager.seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "called once, when the run ended");
        let (new_messages, overflow) = &seen[0];
        assert!(!overflow);
        assert_eq!(new_messages.len(), 2, "the input and the answer");
        assert_eq!(new_messages[0], Message::user("hi"));
        assert!(matches!(&new_messages[1], Message::Assistant(a) if a.text == "one"));
    }
    let entries = store.load("s").await.expect("load");
    assert!(entries
        .iter()
        .any(|e| matches!(e, Entry::Metadata { config, .. } if config["after"] == 2)));
    assert!(matches!(entries.last(), Some(Entry::Compaction { .. })));
    // The next run starts from the replacement context (after the pinned note).
    let trace = run(&agent, "again").await;
    assert_eq!(
        model_requests(&trace)[0].messages.to_vec(),
        vec![
            Message::user(NOTE),
            Message::user("summary of the first run"),
            Message::user("again")
        ]
    );
    assert_eq!(replay(&trace), None);
}

#[tokio::test]
async fn r_ctx_1_issue_13_the_default_context_manager_is_the_history_of_the_entries() {
    let (agent, store) = agent(None);
    run(&agent, "hi").await;
    let trace = run(&agent, "again").await;
    let entries = store.load("s").await.expect("load");
    let history = agentloop_core::session_log::history(&entries);
    let request = &model_requests(&trace)[0];
    // The second run's first request: the session's history before it, then its input.
    assert_eq!(
        request.messages.to_vec(),
        history[..history.len() - 2]
            .iter()
            .cloned()
            .chain([Message::user("again")])
            .collect::<Vec<_>>()
    );
    assert_eq!(request.tools.len(), agent.config().tools.len());
    assert!(!entries
        .iter()
        .any(|e| matches!(e, Entry::Metadata { .. } | Entry::Compaction { .. })));
}
