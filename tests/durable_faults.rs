//! Store fault injection (R-IDEM-4): for every write `k` of a clean run, a
//! store that fails the `k`-th append ends the run `Failed` at once with memory and store
//! equal, and a resume on the healthy store then completes the run.

mod durable_support;

use std::collections::HashMap;
use std::sync::Arc;

use agentloop::runtime::{Agent, AgentError};
use agentloop::store::{Entry, FaultPoint, FaultyStore, FileStore, SessionStore};
use agentloop::tools::ToolRegistry;
use agentloop::trace::Trace;
use agentloop::Outcome;
use agentloop::{Message, ToolStatus};
use agentloop_core::effect::Effect;
use agentloop_core::event::Event;
use agentloop_core::session_log;
use agentloop_core::trace::TraceRecord;
use durable_support::*;
use serde_json::json;

const S: &str = "s";
const FINAL: &str = "all done";

fn script() -> serde_json::Value {
    json!({"turns": [
        {"text": "two in parallel", "tool_calls": [
            {"id": "p1", "name": "work"}, {"id": "p2", "name": "work"}]},
        {"text": "one more", "tool_calls": [{"id": "q1", "name": "work"}]},
        {"text": FINAL}
    ]})
}

fn agent(store: Arc<dyn SessionStore>, work: Arc<CountingTool>) -> Agent {
    let mut tools = ToolRegistry::new();
    tools.insert(work);
    Agent::builder()
        .model(model(script()))
        .tools(tools)
        .store(store)
        .deterministic()
        .build()
}

/// The Persist (and CommitRunEnd) effects the trace requested before the `StoreWriteFailed` input, and whether
/// any was requested after it.
fn persists_around_failure(trace: &Trace) -> (Vec<Entry>, bool) {
    let mut before = Vec::new();
    let mut after = false;
    let mut failed = false;
    for r in &trace.records {
        match r {
            TraceRecord::Input {
                event: Event::StoreWriteFailed { .. },
                ..
            } => failed = true,
            TraceRecord::Effect {
                effect: Effect::Persist { entry } | Effect::CommitRunEnd { entry },
                ..
            } => {
                if failed {
                    after = true;
                } else {
                    before.push(entry.clone());
                }
            }
            _ => {}
        }
    }
    assert!(failed, "the trace has no StoreWriteFailed input");
    (before, after)
}

async fn clean_write_count() -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FaultyStore::new(FileStore::open(dir.path()).unwrap(), 0));
    let (work, _) = CountingTool::new("work", false);
    let out = agent(store.clone(), work).run(S, "go").await.unwrap();
    assert_eq!(out.result.outcome, Outcome::Completed);
    store.appends()
}

async fn scenario(k: u64, point: FaultPoint) {
    let dir = tempfile::tempdir().unwrap();
    let (work, calls) = CountingTool::new("work", false);

    // The faulty run.
    let faulty = Arc::new(FaultyStore::new(FileStore::open(dir.path()).unwrap(), k).at(point));
    let a = agent(faulty.clone(), work.clone());
    let out = a
        .run_with(S, vec![Message::user("go")], None, true)
        .await
        .unwrap();
    let ctx = format!("k={k} {point:?}");
    assert_eq!(
        out.result.outcome,
        Outcome::Failed,
        "{ctx}: {:?}",
        out.result
    );
    assert_eq!(out.result.reason, "store_write_failed", "{ctx}");
    assert_eq!(
        faulty.appends(),
        k,
        "{ctx}: nothing is written after the failure"
    );
    let trace = out.trace.unwrap();
    // The failure is a chart row, so the trace replays to the same steps. A failed write of
    // the final step (its assistant message, write n-1, or the run end, write n) arrives
    // when the machine is in Finishing and takes row `finishing_store_failed`.
    assert_eq!(agentloop::trace::replay(&trace), None, "{ctx}");
    let finishing_failed = trace.records.iter().any(|r| {
        matches!(
            r,
            TraceRecord::Transition {
                transition: agentloop_core::step::Transition::React {
                    row: Some(agentloop_core::chart::ReactRow::FinishingStoreFailed),
                    ..
                },
                ..
            }
        )
    });
    assert_eq!(
        finishing_failed,
        k + 1 >= clean_write_count().await,
        "{ctx}"
    );
    let (requested, after) = persists_around_failure(&trace);
    assert!(!after, "{ctx}: a Persist was requested after the failure");
    let k = k as usize;
    assert!(
        requested.len() >= k,
        "{ctx}: the k-th write is in the trace"
    );
    drop(a);
    drop(faulty);

    // Memory and store are equal: the store holds exactly the writes acknowledged before
    // the failure (plus the failed one when it reached the disk before failing).
    let stored = FileStore::open(dir.path())
        .unwrap()
        .load_blocking(S)
        .unwrap()
        .0;
    let expected = match point {
        FaultPoint::BeforeWrite => &requested[..k - 1],
        FaultPoint::AfterWrite => &requested[..k],
    };
    assert_eq!(stored, expected, "{ctx}");
    // R-IDEM-6: every tool that ran had its start marker stored first.
    for id in invocations(&calls) {
        assert!(
            stored.iter().any(
                |e| matches!(e, Entry::ToolStarted { tool_call_id, .. } if *tool_call_id == id)
            ),
            "{ctx}: {id} ran without a stored start marker"
        );
    }

    // A restart on the healthy store: resume (or, when not even the input was stored,
    // nothing to resume and a new run) completes with the final answer.
    let store = Arc::new(FileStore::open(dir.path()).unwrap());
    let a = agent(store.clone(), work.clone());
    match a.resume(S).await {
        Ok(out) => {
            assert_eq!(
                out.result.outcome,
                Outcome::Completed,
                "{ctx}: {:?}",
                out.result
            );
            let last = out.result.messages.last().cloned();
            assert!(
                matches!(&last, Some(Message::Assistant(m)) if m.text == FINAL),
                "{ctx}: {last:?}"
            );
        }
        Err(AgentError::NothingToResume { .. }) if stored.is_empty() => {
            let out = a.run(S, "go").await.unwrap();
            assert_eq!(
                out.result.outcome,
                Outcome::Completed,
                "{ctx}: {:?}",
                out.result
            );
        }
        Err(AgentError::NothingToResume { .. }) => {
            // Only when the failed write was the run end and it reached the disk.
            assert!(
                matches!(stored.last(), Some(Entry::RunEnd { outcome, .. }) if *outcome == agentloop::Outcome::Completed),
                "{ctx}: nothing to resume in {stored:?}"
            );
        }
        Err(e) => panic!("{ctx}: {e}"),
    }
    drop(a);
    let entries = store.load_blocking(S).unwrap().0;
    assert_eq!(session_log::check(&entries), [], "{ctx}");
    assert!(session_log::duplicate_keys(&entries).is_empty(), "{ctx}");
    assert!(session_log::pending(&entries).is_empty(), "{ctx}");
    let answer = entries.iter().rev().find_map(|e| match e {
        Entry::Assistant { message, .. } => Some(message.text.as_str()),
        _ => None,
    });
    assert_eq!(answer, Some(FINAL), "{ctx}");
    assert!(
        matches!(entries.last(), Some(Entry::RunEnd { outcome, .. }) if *outcome == agentloop::Outcome::Completed),
        "{ctx}: {:?}",
        entries.last()
    );

    // No call ran twice; a completed result means it ran exactly once.
    let mut ran: HashMap<String, usize> = HashMap::new();
    for id in invocations(&calls) {
        *ran.entry(id).or_default() += 1;
    }
    for e in &entries {
        if let Entry::ToolResult { result, .. } = e {
            let n = ran.get(&result.tool_call_id).copied().unwrap_or(0);
            assert!(n <= 1, "{ctx}: {} ran {n} times", result.tool_call_id);
            if result.status == ToolStatus::Completed {
                assert_eq!(
                    n, 1,
                    "{ctx}: {} completed without running",
                    result.tool_call_id
                );
            }
        }
    }
}

#[tokio::test]
async fn every_failed_write_fails_the_run_with_memory_and_store_equal_and_resume_completes() {
    let n = clean_write_count().await;
    // user input, assistant, 2 starts, 2 results, assistant, start, result, assistant, run end
    assert_eq!(n, 11);
    for k in 1..=n {
        scenario(k, FaultPoint::BeforeWrite).await;
    }
}

#[tokio::test]
async fn a_write_that_fails_after_reaching_the_disk_also_resumes_cleanly() {
    let n = clean_write_count().await;
    for k in 1..=n {
        scenario(k, FaultPoint::AfterWrite).await;
    }
}
