//! Session events: `tool_metrics` (with start and end times), `tools_updated` for an atomic batch attach/detach, `todo_change` from the
//! built-in `write_todos` tool, and `plan_generated` from a `<plan>` tag; and a session's title
//! from a small model.

mod support;

use std::sync::Arc;

use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::{Agent, VecSink};
use agentloop::session::SessionError;
use agentloop::trace::replay;
use agentloop::{AgentEvent, Message, Outcome};
use agentloop_core::todo::{Todo, TodoStatus};
use support::{builder, count, history, session, SleepTool};

fn scripted(json: &str) -> ScriptedModel {
    ScriptedModel::from_json_str(json, "inline").expect("script")
}

#[tokio::test]
async fn seed_001_tool_execution_metrics_has_start_end_and_duration() {
    let sink = Arc::new(VecSink::default());
    // The default clock (the system's): epoch milliseconds.
    let agent = Agent::builder()
        .model(scripted(
            r#"{"turns": [
            {"tool_calls": [{"id": "c1", "name": "sleepy"}]},
            {"text": "slept"}
        ]}"#,
        ))
        .tool(Arc::new(SleepTool::new("sleepy", 40)))
        .sink(sink.clone())
        .build();
    let out = agent.run("s", "sleep").await.expect("ran");
    assert_eq!(out.result.outcome, Outcome::Completed);
    let metrics: Vec<_> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e.event {
            AgentEvent::ToolMetrics {
                tool_call_id,
                name,
                started_at_ms,
                ended_at_ms,
                duration_ms,
            } => Some((tool_call_id, name, started_at_ms, ended_at_ms, duration_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(metrics.len(), 1, "{metrics:?}");
    let (id, name, started, ended, duration) = metrics[0].clone();
    assert_eq!((id.as_str(), name.as_str()), ("c1", "sleepy"));
    // Epoch milliseconds from the clock port (after 2020), in order, the difference the
    // duration, and at least the tool's 40 ms sleep.
    assert!(started > 1_577_836_800_000, "{started}");
    assert_eq!(ended - started, duration);
    assert!(duration >= 40, "{duration}");
}

#[tokio::test]
async fn seed_001_tools_updated_attaches_and_detaches_a_batch_at_once() {
    let s = session(
        builder(scripted(
            r#"{"turns": [
                {"tool_calls": [{"id": "c1", "name": "sleepy"}, {"id": "c2", "name": "calculator", "arguments": {"expression": "1+1"}}]},
                {"text": "done"}
            ]}"#,
        ))
        .build(),
    );
    // A batch naming a tool that is not attached changes nothing.
    let refused = s
        .update_tools(
            vec![Arc::new(SleepTool::new("sleepy", 5))],
            vec!["calculator".into(), "no_such_tool".into()],
        )
        .await;
    assert_eq!(
        refused,
        Err(SessionError::UnknownTool("no_such_tool".into()))
    );
    assert_eq!(count(&history(&s), "tools_updated"), 0);

    s.update_tools(
        vec![Arc::new(SleepTool::new("sleepy", 5))],
        vec!["calculator".into(), "read_file".into()],
    )
    .await
    .expect("updated");
    let ev = history(&s);
    let updates: Vec<_> = ev
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::ToolsUpdated { attached, detached } => {
                Some((attached.clone(), detached.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        updates,
        [(
            vec!["sleepy".to_string()],
            vec!["calculator".to_string(), "read_file".to_string()]
        )]
    );
    // One event for the batch, not one per tool.
    assert_eq!(count(&ev, "tool_attached") + count(&ev, "tool_detached"), 0);

    // The next run offers the new set: sleepy runs, calculator is unknown.
    s.prompt("go").await.expect("started");
    s.wait_idle().await;
    let ev = history(&s);
    let mut ends: Vec<_> = ev
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::ToolEnd { name, status, .. } => Some((name.clone(), *status)),
            _ => None,
        })
        .collect();
    ends.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        ends,
        [
            ("calculator".to_string(), agentloop::ToolStatus::Error),
            ("sleepy".to_string(), agentloop::ToolStatus::Completed),
        ]
    );
    assert_eq!(count(&ev, "tool_call_unknown"), 1);
}

const TODO_SCRIPT: &str = r#"{"turns": [
  {"text": "<plan>\n1. List the work\n2. Do it\n</plan>On it.",
   "tool_calls": [{"id": "t1", "name": "write_todos", "arguments": {"todos": [
     {"content": "List the work", "status": "in_progress"},
     {"content": "Do it", "status": "pending"}]}}]},
  {"tool_calls": [{"id": "t2", "name": "write_todos", "arguments": {"todos": [
     {"content": "List the work", "status": "completed"},
     {"content": "Do it", "status": "in_progress"}]}}]},
  {"tool_calls": [{"id": "t3", "name": "write_todos", "arguments": {"todos": [{"content": "x", "status": "started"}]}}]},
  {"text": "All done."}
]}"#;

#[tokio::test]
async fn seed_001_write_todos_reports_each_list_as_todo_change_and_replays() {
    let sink = Arc::new(VecSink::default());
    let agent = builder(scripted(TODO_SCRIPT))
        .write_todos()
        .sink(sink.clone())
        .build();
    let out = agent
        .run_with("s", vec![Message::user("work")], None, true)
        .await
        .expect("ran");
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    let events = sink.events();
    let changes: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::TodoChange {
                tool_call_id,
                todos,
            } => Some((tool_call_id.clone(), todos.clone())),
            _ => None,
        })
        .collect();
    let todo = |content: &str, status| Todo {
        content: content.into(),
        status,
    };
    assert_eq!(
        changes,
        [
            (
                "t1".to_string(),
                vec![
                    todo("List the work", TodoStatus::InProgress),
                    todo("Do it", TodoStatus::Pending)
                ]
            ),
            (
                "t2".to_string(),
                vec![
                    todo("List the work", TodoStatus::Completed),
                    todo("Do it", TodoStatus::InProgress)
                ]
            ),
        ],
        "the third call's status is not a todo status: an error result, no change"
    );
    // The model sees the list as the tool renders it.
    let results: Vec<_> = out
        .result
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.tool_call_id.clone(), r.content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(results[0].1, "[~] List the work\n[ ] Do it");
    assert_eq!(results[1].1, "[x] List the work\n[~] Do it");
    assert!(results[2].1.contains("started"), "{:?}", results[2]);
    // The plan tag became plan_generated and left the text.
    let plans: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::PlanGenerated { steps, .. } => Some(steps.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(plans, [vec!["List the work".to_string(), "Do it".into()]]);
    // The changes come from the machine: in the trace, and the trace replays.
    let trace = out.trace.expect("trace");
    let recorded = serde_json::to_string(&trace.records).expect("json");
    assert_eq!(recorded.matches("\"todo_change\"").count(), 2);
    assert_eq!(replay(&trace), None);
}

/// A small title model titles a new session on its first
/// run, in parallel with the first step: a `title_generated` event and a `title` entry; a later
/// run of the session asks no title.
#[tokio::test]
async fn seed_004_a_title_model_titles_a_new_session_once() {
    let sink = Arc::new(VecSink::default());
    let store = Arc::new(agentloop::store::MemoryStore::new());
    let titler = Arc::new(scripted(
        r#"{"turns": [{"text": "\"Adding two numbers.\"\nignored"}]}"#,
    ));
    let agent = builder(scripted(
        r#"{"turns": [
            {"tool_calls": [{"id": "c1", "name": "sleepy"}]},
            {"text": "done"},
            {"text": "again"}
        ]}"#,
    ))
    .tool(Arc::new(SleepTool::new("sleepy", 200)))
    .title_model("small", titler)
    .store(store.clone())
    .sink(sink.clone())
    .build();
    let out = agent
        .run_with("s", vec![Message::user("What is 2+3?")], None, true)
        .await
        .expect("ran");
    assert_eq!(out.result.outcome, Outcome::Completed);
    let titles = |events: &[agentloop::EventEnvelope]| -> Vec<String> {
        events
            .iter()
            .filter_map(|e| match &e.event {
                AgentEvent::TitleGenerated { title, .. } => Some(title.clone()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(titles(&sink.events()), ["Adding two numbers"]);
    // The request went to the title model, in the trace as the machine's effect and input.
    let trace = out.trace.expect("trace");
    let records = serde_json::to_string(&trace.records).expect("json");
    assert!(
        records.contains(r#""effect":"generate_title","model":"small","text":"What is 2+3?""#),
        "{records}"
    );
    assert!(records.contains(r#""type":"title_ready","title":"Adding two numbers""#));
    assert_eq!(replay(&trace), None);
    use agentloop::store::SessionStore;
    let entries = store.load("s").await.expect("entries");
    let stored: Vec<_> = entries
        .iter()
        .filter_map(|e| match e {
            agentloop::store::Entry::Title { title, .. } => Some(title.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(stored, ["Adding two numbers"]);
    // The session's second run asks for no title.
    let before = sink.events().len();
    let again = agent.run("s", "and now?").await.expect("ran");
    assert_eq!(again.result.final_text(), Some("again"));
    assert!(titles(&sink.events()[before..]).is_empty());
}

/// A tool that reports its progress as a custom event.
struct Progress;

#[agentloop::async_trait]
impl agentloop::tools::Tool for Progress {
    fn spec(&self) -> agentloop::tools::ToolSpec {
        agentloop::tools::ToolSpec {
            name: "progress".into(),
            description: "reports progress".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }
    async fn call(
        &self,
        ctx: agentloop::tools::ToolContext,
        _args: serde_json::Value,
    ) -> Result<String, agentloop::tools::ToolError> {
        let sent = agentloop::runtime::emit_custom(
            "progress",
            serde_json::json!({"call": ctx.call_id, "percent": 50}),
        );
        Ok(format!("emitted: {sent}"))
    }
}

/// A hook that counts the tool results it sees as a custom event.
struct Audit;

impl agentloop::hooks::Hooks for Audit {
    fn after_tool(
        &self,
        call_id: &str,
        name: &str,
        _status: agentloop::ToolStatus,
        _content: &mut String,
    ) {
        agentloop::runtime::emit_custom(
            "audit",
            serde_json::json!({"call": call_id, "tool": name}),
        );
    }
}

#[tokio::test]
async fn seed_001_tools_and_hooks_emit_custom_events_with_a_name_and_payload() {
    let sink = Arc::new(VecSink::default());
    let agent = Agent::builder()
        .model(scripted(
            r#"{"turns": [
            {"tool_calls": [{"id": "c1", "name": "progress"}]},
            {"text": "done"}
        ]}"#,
        ))
        .tool(Arc::new(Progress))
        .hooks(Arc::new(Audit))
        .deterministic()
        .sink(sink.clone())
        .build();
    let out = agent
        .run_with("s", vec![Message::user("go")], None, true)
        .await
        .expect("ran");
    assert_eq!(out.result.outcome, Outcome::Completed);
    let events = sink.events();
    let custom: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::Custom { name, payload } => {
                Some((e.run_id.clone(), name.clone(), payload.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        custom,
        vec![
            (
                "run-1".to_string(),
                "progress".to_string(),
                serde_json::json!({"call": "c1", "percent": 50})
            ),
            (
                "run-1".to_string(),
                "audit".to_string(),
                serde_json::json!({"call": "c1", "tool": "progress"})
            ),
        ]
    );
    // The tool saw its event delivered.
    assert!(out
        .result
        .messages
        .iter()
        .any(|m| matches!(m, Message::Tool(r) if r.content == "emitted: true")));
    // No decision of the machines: not in the trace, which still replays.
    let trace = out.trace.expect("trace");
    assert!(!serde_json::to_string(&trace.records)
        .expect("json")
        .contains("\"custom\""));
    assert!(replay(&trace).is_none());
    // Outside a run nothing is emitted.
    assert!(!agentloop::runtime::emit_custom(
        "late",
        serde_json::Value::Null
    ));
}
