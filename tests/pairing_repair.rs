//! R-IDEM-7, pairing repair in the runtime: a loaded session holding a forged orphan tool
//! result (or a duplicate result) is repaired before the next model request — the model never
//! sees the orphan, each repair is announced with a `session_repaired` event, and an
//! append-only `repair` marker makes the stored session pass `check` afterwards.

mod durable_support;

use std::sync::{Arc, Mutex};

use agentloop::model::{DeltaStream, Model, ModelRequest};
use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::{Agent, VecSink};
use agentloop::store::{Entry, FileStore, MemoryStore, SessionStore};
use agentloop::tools::{Tool, ToolRegistry};
use agentloop::EventEnvelope;
use agentloop::ModelError;
use agentloop::{AgentEvent, Outcome};
use agentloop::{Message, ToolStatus};
use agentloop_core::session_log;
use agentloop_core::session_log::Repair;
use async_trait::async_trait;
use durable_support::*;
use serde_json::json;

const S: &str = "s";

/// A scripted model that keeps every request it receives.
struct Recording {
    inner: ScriptedModel,
    requests: Arc<Mutex<Vec<ModelRequest>>>,
}

#[async_trait]
impl Model for Recording {
    fn name(&self) -> String {
        "scripted".into()
    }
    async fn stream(&self, request: ModelRequest) -> Result<DeltaStream, ModelError> {
        self.requests.lock().unwrap().push(request.clone());
        self.inner.stream(request).await
    }
}

/// An agent on `store` whose model serves `script` and records its requests.
fn agent(
    store: Arc<dyn SessionStore>,
    script: serde_json::Value,
    tools: &[Arc<dyn Tool>],
    sink: &VecSink,
) -> (Agent, Arc<Mutex<Vec<ModelRequest>>>) {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let mut registry = ToolRegistry::new();
    for t in tools {
        registry.insert(t.clone());
    }
    let agent = Agent::builder()
        .model(Recording {
            inner: model(script),
            requests: requests.clone(),
        })
        .tools(registry)
        .store(store)
        .sink(Arc::new(sink.clone()))
        .deterministic()
        .build();
    (agent, requests)
}

fn run_end(run: &str) -> Entry {
    Entry::RunEnd {
        run_id: run.into(),
        outcome: agentloop::Outcome::Completed,
        reason: "final_answer".into(),
    }
}

/// A finished run `r0` (one `work` call `c1` and its result, then the answer) followed by a
/// forged result for `ghost`, a call no turn made: entry 6.
fn session_with_orphan() -> Vec<Entry> {
    vec![
        user("r0", "go"),
        assistant("r0", 1, "calling", &[("c1", "work")]),
        started("r0", "c1", "work"),
        result("r0", "c1", "work"),
        assistant("r0", 2, "done", &[]),
        run_end("r0"),
        result("forged", "ghost", "work"),
    ]
}

fn repair_events(events: &[EventEnvelope]) -> Vec<(String, Repair)> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::SessionRepaired { repair } => Some((e.run_id.clone(), repair.clone())),
            _ => None,
        })
        .collect()
}

fn tool_messages(messages: &[Message]) -> Vec<(String, String)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.tool_call_id.clone(), r.content.clone())),
            _ => None,
        })
        .collect()
}

/// Every tool message of a request follows the assistant message that made its call.
fn assert_paired(messages: &[Message]) {
    let mut calls: Vec<&str> = Vec::new();
    for m in messages {
        match m {
            Message::Assistant(a) => calls = a.tool_calls.iter().map(|c| c.id.as_str()).collect(),
            Message::Tool(r) => assert!(
                calls.contains(&r.tool_call_id.as_str()),
                "orphan tool result {} sent to the model: {messages:?}",
                r.tool_call_id
            ),
            _ => calls.clear(),
        }
    }
}

#[tokio::test]
async fn r_idem_7_new_run_repairs_a_forged_orphan_result_before_the_model_sees_it() {
    let store = Arc::new(MemoryStore::new());
    for e in session_with_orphan() {
        store.append(S, &e).await.unwrap();
    }
    assert_eq!(
        session_log::check(&store.load(S).await.unwrap()),
        [session_log::Violation::OrphanToolResult {
            index: 6,
            tool_call_id: "ghost".into()
        }]
    );
    let (work, calls) = CountingTool::new("work", false);
    let sink = VecSink::default();
    let script =
        json!({"turns": [{"text": "calling"}, {"text": "done"}, {"text": "fresh answer"}]});
    let (agent, requests) = agent(store.clone(), script, &[work], &sink);

    let out = agent.run(S, "and now?").await.unwrap();
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    assert!(invocations(&calls).is_empty());

    // The model got the history without the orphan, and c1's result once.
    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    let messages = &requests[0].messages;
    assert_eq!(
        tool_messages(messages),
        [("c1".to_string(), "work ran (c1)".to_string())]
    );
    assert_paired(messages);
    assert!(
        matches!(messages.last(), Some(Message::User { content, .. }) if content == "and now?")
    );

    // One event per repair, from the new run, before its first request.
    let events = sink.events();
    let orphan = Repair::OrphanResultDropped {
        index: 6,
        tool_call_id: "ghost".into(),
    };
    assert_eq!(
        repair_events(&events),
        [(out.run_id.clone(), orphan.clone())]
    );
    let position = |pred: &dyn Fn(&AgentEvent) -> bool| events.iter().position(|e| pred(&e.event));
    assert!(
        position(&|e| matches!(e, AgentEvent::SessionRepaired { .. }))
            < position(&|e| matches!(e, AgentEvent::RequestStart { .. }))
    );
    let json = serde_json::to_value(&events[0]).unwrap();
    assert_eq!(json["type"], "session_repaired");
    assert_eq!(json["repair"]["kind"], "orphan_result_dropped");
    assert_eq!(json["repair"]["tool_call_id"], "ghost");

    // The repair is stored as an append-only marker right after the orphan: check passes.
    let entries = store.load(S).await.unwrap();
    assert_eq!(entries[..7], session_with_orphan()[..]);
    assert_eq!(
        entries[7],
        Entry::Repair {
            run_id: out.run_id.clone(),
            repairs: vec![orphan],
        }
    );
    assert_eq!(session_log::check(&entries), []);

    // A later run finds nothing to repair.
    let events_before = sink.events().len();
    let (agent, _) = agent_again(store.clone(), &sink);
    let again = agent.run(S, "once more").await.unwrap();
    assert_eq!(
        again.result.outcome,
        Outcome::Completed,
        "{:?}",
        again.result
    );
    assert_eq!(repair_events(&sink.events()[events_before..]), []);
    let after = store.load(S).await.unwrap();
    assert_eq!(
        after
            .iter()
            .filter(|e| matches!(e, Entry::Repair { .. }))
            .count(),
        1
    );
    assert_eq!(session_log::check(&after), []);
}

fn agent_again(store: Arc<MemoryStore>, sink: &VecSink) -> (Agent, Arc<Mutex<Vec<ModelRequest>>>) {
    let script = json!({"turns": [
        {"text": "calling"}, {"text": "done"}, {"text": "fresh answer"}, {"text": "another"}
    ]});
    agent(store, script, &[], sink)
}

#[tokio::test]
async fn r_idem_7_clean_session_is_not_repaired() {
    let store = Arc::new(MemoryStore::new());
    for e in &session_with_orphan()[..6] {
        store.append(S, e).await.unwrap();
    }
    let sink = VecSink::default();
    let (agent, _) = agent_again(store.clone(), &sink);
    let out = agent.run(S, "and now?").await.unwrap();
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    assert_eq!(repair_events(&sink.events()), []);
    let entries = store.load(S).await.unwrap();
    assert!(!entries.iter().any(|e| matches!(e, Entry::Repair { .. })));
    assert_eq!(session_log::check(&entries), []);
}

/// Appends `entry` to the session file as the next record, bypassing the store's idempotency
/// keys (a hand-edited file).
fn forge_line(dir: &std::path::Path, entry: &Entry) {
    let path = dir.join(format!("{S}.jsonl"));
    let mut text = std::fs::read_to_string(&path).unwrap();
    let seq = text.lines().count() + 1;
    let mut record = serde_json::to_value(entry).unwrap();
    record["v"] = json!(1);
    record["seq"] = json!(seq);
    text.push_str(&serde_json::to_string(&record).unwrap());
    text.push('\n');
    std::fs::write(&path, text).unwrap();
}

#[tokio::test]
async fn r_idem_7_resume_repairs_orphan_and_duplicate_results_on_a_file_store() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = FileStore::open(dir.path()).unwrap();
        for e in [
            user("old", "go"),
            assistant("old", 1, "two calls", &[("a1", "work"), ("a2", "work")]),
            started("old", "a1", "work"),
            result("old", "a1", "work"),
            result("forged", "ghost", "work"), // 4: orphan
        ] {
            assert!(store.append_blocking(S, &e).unwrap());
        }
    }
    let mut second = result("old", "a1", "work");
    if let Entry::ToolResult { result, .. } = &mut second {
        result.content = "a forged second result".into();
        result.status = ToolStatus::Error;
    }
    forge_line(dir.path(), &second); // 5: duplicate
    let loaded = FileStore::open(dir.path())
        .unwrap()
        .load_blocking(S)
        .unwrap()
        .0;
    assert_eq!(
        session_log::check(&loaded),
        [
            session_log::Violation::OrphanToolResult {
                index: 4,
                tool_call_id: "ghost".into()
            },
            session_log::Violation::DuplicateToolResult {
                index: 5,
                tool_call_id: "a1".into()
            },
        ]
    );

    let store = Arc::new(FileStore::open(dir.path()).unwrap());
    let (work, calls) = CountingTool::new("work", false);
    let sink = VecSink::default();
    let script = json!({"turns": [{"text": "two calls"}, {"text": "done after resume"}]});
    let (agent, requests) = agent(store, script, &[work], &sink);
    let out = agent.resume(S).await.unwrap();
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    assert_eq!(out.run_id, "old");
    assert_eq!(invocations(&calls), ["a2"], "only the unanswered call runs");

    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        tool_messages(&requests[0].messages),
        [
            ("a1".to_string(), "work ran (a1)".to_string()),
            ("a2".to_string(), "work ran (a2)".to_string())
        ],
        "the first result counts, the orphan is not sent"
    );
    assert_paired(&requests[0].messages);

    let drops = vec![
        Repair::OrphanResultDropped {
            index: 4,
            tool_call_id: "ghost".into(),
        },
        Repair::DuplicateResultDropped {
            index: 5,
            tool_call_id: "a1".into(),
        },
    ];
    let events = repair_events(&sink.events());
    assert_eq!(
        events,
        drops
            .iter()
            .map(|r| ("old".to_string(), r.clone()))
            .collect::<Vec<_>>()
    );

    drop(agent);
    let entries = FileStore::open(dir.path())
        .unwrap()
        .load_blocking(S)
        .unwrap()
        .0;
    assert_eq!(
        entries[6],
        Entry::Repair {
            run_id: "old".into(),
            repairs: drops,
        }
    );
    assert_eq!(session_log::check(&entries), []);
    assert!(session_log::pending(&entries).is_empty());
    assert!(matches!(
        entries.last(),
        Some(Entry::RunEnd { run_id, outcome, .. }) if run_id == "old" && *outcome == agentloop::Outcome::Completed
    ));
}
