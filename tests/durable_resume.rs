//! Resume of interrupted sessions on real files (R-IDEM-5..7): missing calls only, started
//! calls become `outcome_unknown` (unless retry-safe), an uncommitted step is re-requested
//! with the same `model_call_index`, a pending approval is asked again, and a new prompt on
//! an interrupted session repairs it first.

mod durable_support;

use std::sync::Arc;
use std::time::Duration;

use agentloop::runtime::{Agent, Controller, VecSink};
use agentloop::store::{Entry, FileStore, SessionStore};
use agentloop::tools::{Tool, ToolRegistry};
use agentloop::{AgentEvent, Outcome};
use agentloop::{Message, ToolStatus};
use agentloop_core::effect::Effect;
use agentloop_core::event::ApprovalDecision;
use agentloop_core::process::ApprovalPolicy;
use agentloop_core::session_log;
use durable_support::*;
use serde_json::json;

const S: &str = "s";

fn agent(
    store: Arc<dyn SessionStore>,
    script: serde_json::Value,
    tools: &[Arc<dyn Tool>],
    sink: &VecSink,
) -> agentloop::runtime::AgentBuilder {
    let mut registry = ToolRegistry::new();
    for t in tools {
        registry.insert(t.clone());
    }
    Agent::builder()
        .model(model(script))
        .tools(registry)
        .store(store)
        .sink(Arc::new(sink.clone()))
        .deterministic()
}

fn file_store(dir: &std::path::Path, entries: &[Entry]) -> Arc<FileStore> {
    let store = Arc::new(FileStore::open(dir).unwrap());
    for e in entries {
        assert!(store.append_blocking(S, e).unwrap());
    }
    store
}

fn reload(dir: &std::path::Path) -> Vec<Entry> {
    FileStore::open(dir).unwrap().load_blocking(S).unwrap().0
}

fn results_in(messages: &[Message]) -> Vec<(String, ToolStatus)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.tool_call_id.clone(), r.status)),
            _ => None,
        })
        .collect()
}

fn stored_results(entries: &[Entry]) -> Vec<(String, ToolStatus)> {
    entries
        .iter()
        .filter_map(|e| match e {
            Entry::ToolResult { result, .. } => Some((result.tool_call_id.clone(), result.status)),
            _ => None,
        })
        .collect()
}

fn final_script() -> serde_json::Value {
    json!({"turns": [
        {"text": "step one (already committed)"},
        {"text": "done after resume"},
        {"text": "third turn"}
    ]})
}

/// (a) The assistant message with two calls is committed, one call has its result: resume
/// runs only the other one and goes on to the next step.
#[tokio::test]
async fn committed_turn_resumes_at_tool_execution_running_only_missing_calls() {
    let dir = tempfile::tempdir().unwrap();
    let store = file_store(
        dir.path(),
        &[
            user("old", "go"),
            assistant("old", 1, "two calls", &[("a1", "work"), ("a2", "work")]),
            started("old", "a1", "work"),
            result("old", "a1", "work"),
        ],
    );
    let (work, calls) = CountingTool::new("work", false);
    let sink = VecSink::default();
    let agent = agent(store, final_script(), &[work], &sink).build();

    let out = agent.resume_with(S, None, true).await.unwrap();
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    assert_eq!(out.run_id, "old", "resume continues the interrupted run");
    assert_eq!(
        invocations(&calls),
        ["a2"],
        "only the call without a result runs"
    );

    let trace = out.trace.unwrap();
    let requests = model_requests(&trace);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].model_call_index, 2);
    assert_eq!(requests[0].session_turn, 1);
    assert_eq!(
        results_in(&requests[0].messages),
        [
            ("a1".to_string(), ToolStatus::Completed),
            ("a2".to_string(), ToolStatus::Completed)
        ]
    );

    drop(agent);
    let entries = reload(dir.path());
    assert_eq!(session_log::check(&entries), []);
    assert!(session_log::duplicate_keys(&entries).is_empty());
    assert_eq!(
        stored_results(&entries),
        [
            ("a1".to_string(), ToolStatus::Completed),
            ("a2".to_string(), ToolStatus::Completed)
        ]
    );
    assert!(matches!(
        entries.last(),
        Some(Entry::RunEnd { run_id, outcome, .. }) if run_id == "old" && *outcome == agentloop::Outcome::Completed
    ));
}

/// (b) A call started without a result is not re-run: the model sees `outcome_unknown`. A
/// started retry-safe call runs again; a call that never started runs.
#[tokio::test]
async fn started_call_without_result_becomes_outcome_unknown_unless_retry_safe() {
    let dir = tempfile::tempdir().unwrap();
    let store = file_store(
        dir.path(),
        &[
            user("old", "go"),
            assistant(
                "old",
                1,
                "three calls",
                &[("u1", "once"), ("s1", "safe"), ("n1", "once")],
            ),
            started("old", "u1", "once"),
            started("old", "s1", "safe"),
        ],
    );
    let (once, once_calls) = CountingTool::new("once", false);
    let (safe, safe_calls) = CountingTool::new("safe", true);
    let sink = VecSink::default();
    let agent = agent(store, final_script(), &[once, safe], &sink).build();

    let out = agent.resume_with(S, None, true).await.unwrap();
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    assert_eq!(
        invocations(&once_calls),
        ["n1"],
        "the started, not retry-safe call u1 must not run again"
    );
    assert_eq!(
        invocations(&safe_calls),
        ["s1"],
        "a retry-safe call runs again"
    );

    // The model sees the unknown outcome in its next request.
    let requests = model_requests(&out.trace.unwrap());
    assert_eq!(requests[0].model_call_index, 2);
    assert_eq!(
        results_in(&requests[0].messages),
        [
            ("u1".to_string(), ToolStatus::OutcomeUnknown),
            ("s1".to_string(), ToolStatus::Completed),
            ("n1".to_string(), ToolStatus::Completed)
        ]
    );
    let unknown = requests[0]
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Tool(r) if r.tool_call_id == "u1" => Some(r.content.clone()),
            _ => None,
        })
        .unwrap();
    assert!(unknown.contains("outcome unknown"), "{unknown}");

    // The repair was announced.
    let repaired: Vec<String> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e.event {
            AgentEvent::SessionRepaired { repair } => Some(repair.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(repaired.len(), 1, "{repaired:?}");
    assert!(
        repaired[0].contains("u1") && repaired[0].contains("outcome_unknown"),
        "{repaired:?}"
    );

    drop(agent);
    let entries = reload(dir.path());
    assert_eq!(session_log::check(&entries), []);
    assert!(session_log::duplicate_keys(&entries).is_empty());
    let started: Vec<&str> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::ToolStarted { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    // s1 keeps its one start marker (idempotent), n1 gets one now.
    assert_eq!(started, ["u1", "s1", "n1"]);
}

/// (c) An uncommitted step is requested again with the same `model_call_index`.
#[tokio::test]
async fn uncommitted_step_is_rerequested_with_the_same_model_call_index() {
    // Step 2 was in flight: step 1 and its results are stored, nothing of step 2.
    let dir = tempfile::tempdir().unwrap();
    let store = file_store(
        dir.path(),
        &[
            user("old", "go"),
            assistant("old", 1, "step one", &[("a1", "work")]),
            started("old", "a1", "work"),
            result("old", "a1", "work"),
        ],
    );
    let (work, calls) = CountingTool::new("work", false);
    let sink = VecSink::default();
    let agent = agent(store, final_script(), &[work], &sink).build();
    let out = agent.resume_with(S, None, true).await.unwrap();
    assert_eq!(out.result.outcome, Outcome::Completed);
    assert!(invocations(&calls).is_empty(), "step 1's call has a result");
    let requests = model_requests(&out.trace.unwrap());
    assert_eq!(requests.len(), 1);
    assert_eq!(
        (
            requests[0].run_id.as_str(),
            requests[0].model_call_index,
            requests[0].attempt
        ),
        ("old", 2, 1)
    );
    drop(agent);
    let entries = reload(dir.path());
    let turns: Vec<(String, u32)> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::Assistant {
                run_id,
                model_call_index,
                ..
            } => Some((run_id.clone(), *model_call_index)),
            _ => None,
        })
        .collect();
    assert_eq!(turns, [("old".to_string(), 1), ("old".to_string(), 2)]);
    assert_eq!(session_log::check(&entries), []);

    // Only the user input was stored: step 1 is requested.
    let dir = tempfile::tempdir().unwrap();
    let store = file_store(dir.path(), &[user("old", "go")]);
    let agent2 = agent_for_first_step(store);
    let out = agent2.resume_with(S, None, true).await.unwrap();
    assert_eq!(out.result.outcome, Outcome::Completed);
    let requests = model_requests(&out.trace.unwrap());
    assert_eq!(
        (requests[0].model_call_index, requests[0].session_turn),
        (1, 0)
    );
    assert_eq!(
        *requests[0].messages,
        [Message::user("go")],
        "the stored input is the context"
    );
}

fn agent_for_first_step(store: Arc<FileStore>) -> Agent {
    let sink = VecSink::default();
    agent(store, json!({"turns": [{"text": "hello"}]}), &[], &sink).build()
}

async fn wait_for_approval(sink: &VecSink) -> (String, u64) {
    for _ in 0..500 {
        if let Some(found) = sink.events().into_iter().find_map(|e| match e.event {
            AgentEvent::ApprovalRequired { tool_call_id, .. } => Some((tool_call_id, e.index)),
            _ => None,
        }) {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no approval_required event within 5 s");
}

/// (d) A session that crashed while waiting for approval asks for the same approval again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_waiting_for_approval_reemits_the_same_request() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({"turns": [
        {"text": "needs approval", "tool_calls": [{"id": "w1", "name": "work"}]},
        {"text": "approved and done"}
    ]});
    let (work, calls) = CountingTool::new("work", false);
    let build = |sink: &VecSink| {
        let store = Arc::new(FileStore::open(dir.path()).unwrap());
        let tool: Arc<dyn Tool> = work.clone();
        agent(store, script.clone(), &[tool], sink)
            .approver(Arc::new(|_: &agentloop::ToolCall| None))
            .configure(|c| {
                c.step
                    .approval
                    .insert("work".into(), ApprovalPolicy::Always);
            })
            .build()
    };

    // First process: runs until the approval request, then "crashes" (the task is dropped
    // with the agent and its store; nothing else runs).
    let sink1 = VecSink::default();
    let agent1 = build(&sink1);
    let task = tokio::spawn(async move { agent1.run(S, "go").await });
    let (first_id, _) = wait_for_approval(&sink1).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    // The run itself went on a worker task, which the abort cancels on its own schedule: the
    // first "process" is gone once its store has let go of the session's lock.
    wait_until_unlocked(dir.path(), S).await;
    assert_eq!(first_id, "w1");
    let entries = reload(dir.path());
    assert!(
        !entries
            .iter()
            .any(|e| matches!(e, Entry::ToolStarted { .. } | Entry::ToolResult { .. })),
        "nothing ran before the approval: {entries:?}"
    );
    assert_eq!(session_log::pending(&entries).len(), 1);

    // Second process: resume asks again for the same call; approving it completes the run.
    let sink2 = VecSink::default();
    let agent2 = build(&sink2);
    let controller = Controller::new();
    let rx = controller.clone();
    let task = tokio::spawn(async move { agent2.resume_with(S, Some(&rx), true).await });
    let (again, _) = wait_for_approval(&sink2).await;
    assert_eq!(again, first_id, "the same approval request is re-emitted");
    assert!(invocations(&calls).is_empty(), "not run before approval");
    assert!(controller.decide("w1", ApprovalDecision::Approved));
    let out = task.await.unwrap().unwrap();
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    assert_eq!(invocations(&calls), ["w1"]);
    let asked: Vec<String> = effects(&out.trace.unwrap())
        .into_iter()
        .filter_map(|e| match e {
            Effect::RequestApproval { call } => Some(call.id),
            _ => None,
        })
        .collect();
    assert_eq!(asked, ["w1"]);
    let entries = reload(dir.path());
    assert_eq!(session_log::check(&entries), []);
}

/// (e) A new prompt on an interrupted session repairs it first (`session_repaired`), so the
/// pairing invariant holds before the model is called.
#[tokio::test]
async fn new_run_on_interrupted_session_repairs_it_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = file_store(
        dir.path(),
        &[
            user("old", "go"),
            assistant(
                "old",
                1,
                "three calls",
                &[("u1", "once"), ("s1", "safe"), ("n1", "once")],
            ),
            started("old", "u1", "once"),
            started("old", "s1", "safe"),
        ],
    );
    let (once, once_calls) = CountingTool::new("once", false);
    let (safe, safe_calls) = CountingTool::new("safe", true);
    let sink = VecSink::default();
    let agent = agent(store, final_script(), &[once, safe], &sink).build();

    let out = agent
        .run_with(S, vec![Message::user("something else")], None, true)
        .await
        .unwrap();
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    assert_ne!(out.run_id, "old");
    assert!(invocations(&once_calls).is_empty());
    assert!(
        invocations(&safe_calls).is_empty(),
        "a new run re-runs nothing"
    );

    let notes: Vec<String> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e.event {
            AgentEvent::SessionRepaired { repair } => Some(repair.to_string()),
            _ => None,
        })
        .collect();
    for needle in ["u1", "s1", "n1", "run old"] {
        assert!(
            notes.iter().any(|n| n.contains(needle)),
            "{needle} not in {notes:?}"
        );
    }

    // Before the first model call every old call has exactly one terminal result.
    let requests = model_requests(&out.trace.unwrap());
    assert_eq!(
        results_in(&requests[0].messages),
        [
            ("u1".to_string(), ToolStatus::OutcomeUnknown),
            ("s1".to_string(), ToolStatus::OutcomeUnknown),
            ("n1".to_string(), ToolStatus::Aborted)
        ]
    );

    drop(agent);
    let entries = reload(dir.path());
    assert_eq!(session_log::check(&entries), []);
    assert!(session_log::pending(&entries).is_empty());
    assert!(entries.iter().any(|e| matches!(
        e,
        Entry::RunEnd { run_id, outcome, .. } if run_id == "old" && *outcome == agentloop::Outcome::Aborted
    )));
    assert!(matches!(
        entries.last(),
        Some(Entry::RunEnd { run_id, outcome, .. }) if *run_id == out.run_id && *outcome == agentloop::Outcome::Completed
    ));
}

/// The final answer was committed but the crash came before the run end: resume ends the
/// run without asking the model again; a new prompt records the old run completed.
#[tokio::test]
async fn final_answer_without_run_end_is_completed_not_requested_again() {
    let entries = [
        user("old", "go"),
        assistant("old", 1, "step one", &[("a1", "work")]),
        started("old", "a1", "work"),
        result("old", "a1", "work"),
        assistant("old", 2, "the answer", &[]),
    ];
    let dir = tempfile::tempdir().unwrap();
    let store = file_store(dir.path(), &entries);
    let (work, calls) = CountingTool::new("work", false);
    let sink = VecSink::default();
    let tool: Arc<dyn Tool> = work.clone();
    let a = agent(store, final_script(), &[tool], &sink).build();
    let out = a.resume_with(S, None, true).await.unwrap();
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    assert_eq!(out.result.reason, "final_answer");
    assert!(model_requests(&out.trace.unwrap()).is_empty());
    assert!(invocations(&calls).is_empty());
    drop(a);
    let stored = reload(dir.path());
    assert_eq!(stored.len(), entries.len() + 1);
    assert!(matches!(
        stored.last(),
        Some(Entry::RunEnd { run_id, outcome, .. }) if run_id == "old" && *outcome == agentloop::Outcome::Completed
    ));
    assert_eq!(session_log::check(&stored), []);

    let dir = tempfile::tempdir().unwrap();
    let store = file_store(dir.path(), &entries);
    let a = agent(store, final_script(), &[work], &sink).build();
    let out = a.run(S, "next").await.unwrap();
    assert_eq!(out.result.outcome, Outcome::Completed);
    drop(a);
    let stored = reload(dir.path());
    assert!(matches!(
        &stored[entries.len()],
        Entry::RunEnd { run_id, outcome, .. } if run_id == "old" && *outcome == agentloop::Outcome::Completed
    ));
    assert_eq!(session_log::check(&stored), []);
}

/// Waits (up to 5 s) until no store holds `session`'s lock in `dir`.
async fn wait_until_unlocked(dir: &std::path::Path, session: &str) {
    let store = FileStore::open(dir).expect("store");
    for _ in 0..500 {
        match store.lock(session) {
            Ok(lock) => return drop(lock),
            Err(agentloop::store::StoreError::Locked { .. }) => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await
            }
            Err(e) => panic!("locking {session}: {e}"),
        }
    }
    panic!("{session} is still locked 5 s after its run was dropped");
}
