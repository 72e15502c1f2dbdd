//! Compaction interrupted, on the real runtime with the scripted
//! model and a compactor that parks inside its first compaction:
//!
//! - R-CTL-3 / R-OUT-6: an abort while compacting ends the run `Aborted`; the compaction's
//!   result, arriving late, is never applied nor stored; the session passes `session_log::check`
//!   (R-IDEM-7) and the next run on it compacts and completes.
//! - R-IDEM-4 / R-IDEM-5 / R-IDEM-3: a crash while compacting (the run's future dropped with
//!   the compaction in flight, as a killed process leaves it), and a store that fails the
//!   compaction entry's write (before and after it reached the disk), are followed by a resume
//!   that compacts again and completes, with no tool run twice and a clean session log.

mod durable_support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentloop::compaction::truncation;
use agentloop::runtime::{Agent, Compactor, Controller};
use agentloop::store::{Entry, FaultPoint, FaultyStore, FileStore, MemoryStore, SessionStore};
use agentloop::tools::ToolRegistry;
use agentloop::trace::Trace;
use agentloop::Outcome;
use agentloop::{AssistantMessage, Message};
use agentloop_core::effect::Effect;
use agentloop_core::event::Event;
use agentloop_core::react::{Run, RunConfig};
use agentloop_core::session_log;
use agentloop_core::trace::TraceRecord;
use async_trait::async_trait;
use durable_support::{invocations, model, CountingTool};
use serde_json::json;
use tokio::sync::Notify;

const S: &str = "s";
const FINAL: &str = "both written";

/// Two steps with one tool call each, then the answer. With `compact_threshold = 4` the
/// context (goal, two calls, two results: five messages) is compacted after step 2, before
/// step 3; truncation drops the first call and its result.
fn script() -> serde_json::Value {
    json!({"turns": [
        {"text": "first", "tool_calls": [{"id": "w1", "name": "work"}]},
        {"text": "second", "tool_calls": [{"id": "w2", "name": "work"}]},
        {"text": FINAL}
    ]})
}

/// A compactor whose first call signals `entered` and waits for `release` before it
/// truncates (setting `returned`); later calls truncate at once.
#[derive(Default)]
struct Parked {
    calls: AtomicUsize,
    entered: Notify,
    release: Notify,
    returned: AtomicBool,
}

#[async_trait]
impl Compactor for Parked {
    async fn compact(
        &self,
        messages: &[Message],
        budget_tokens: Option<u64>,
        max_messages: Option<usize>,
    ) -> Result<(Vec<Message>, usize), String> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            self.entered.notify_one();
            self.release.notified().await;
            self.returned.store(true, Ordering::SeqCst);
        }
        truncation()
            .compact(messages, budget_tokens, max_messages)
            .await
    }
}

fn agent(
    store: Arc<dyn SessionStore>,
    work: Arc<CountingTool>,
    compactor: Arc<dyn Compactor>,
) -> Agent {
    let mut tools = ToolRegistry::new();
    tools.insert(work);
    Agent::builder()
        .model(model(script()))
        .tools(tools)
        .store(store)
        .compactor(compactor)
        .deterministic()
        .compact_after_messages(4)
        .build()
}

fn compactions(entries: &[Entry]) -> usize {
    entries
        .iter()
        .filter(|e| matches!(e, Entry::Compaction { .. }))
        .count()
}

fn compaction_inputs(trace: &Trace) -> usize {
    trace
        .records
        .iter()
        .filter(|r| {
            matches!(
                r,
                TraceRecord::Input {
                    event: Event::CompactionDone { .. } | Event::CompactionFailed { .. },
                    ..
                }
            )
        })
        .count()
}

/// The session log is whole: pairs match, nothing pending, no key stored twice.
fn assert_clean(entries: &[Entry], ctx: &str) {
    assert_eq!(session_log::check(entries), [], "{ctx}: {entries:#?}");
    assert!(session_log::pending(entries).is_empty(), "{ctx}");
    assert!(session_log::duplicate_keys(entries).is_empty(), "{ctx}");
}

fn last_run_end(entries: &[Entry]) -> Option<Outcome> {
    match entries.last() {
        Some(Entry::RunEnd { outcome, .. }) => Some(*outcome),
        _ => None,
    }
}

fn final_answer(entries: &[Entry]) -> Option<&str> {
    entries.iter().rev().find_map(|e| match e {
        Entry::Assistant { message, .. } => Some(message.text.as_str()),
        _ => None,
    })
}

/// R-CTL-3 / R-OUT-6 / R-IDEM-7: abort while the compactor is working. The
/// run ends `Aborted` without a compaction entry; releasing the compactor afterwards changes
/// nothing (its task was cancelled with the run); the log passes `session_log::check`; a second run
/// on the session compacts and completes, and no tool ran twice.
#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_during_compaction_then_the_session_goes_on() {
    let memory = Arc::new(MemoryStore::new());
    let (work, calls) = CountingTool::new("work", false);
    let parked = Arc::new(Parked::default());
    let a = agent(memory.clone(), work, parked.clone());

    let ctl = Controller::new();
    let rx = ctl.clone();
    let (out, ()) = tokio::join!(
        a.run_with(S, vec![Message::user("go")], Some(&rx), true),
        async {
            parked.entered.notified().await;
            assert!(ctl.abort("stop while compacting"));
        }
    );
    let out = out.expect("run");
    assert_eq!(out.result.outcome, Outcome::Aborted, "{:?}", out.result);
    let trace = out.trace.expect("trace");
    assert_eq!(agentloop::trace::replay(&trace), None);
    assert_eq!(compaction_inputs(&trace), 0);
    // The result's messages are the uncompacted context (the goal, two calls, two results).
    assert_eq!(out.result.messages.len(), 5, "{:?}", out.result.messages);

    // The compaction's result comes too late: the compactor is released, and nothing of it
    // reaches the session.
    parked.release.notify_one();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !parked.returned.load(Ordering::SeqCst),
        "the compaction was cancelled with the run"
    );
    let entries = memory.load(S).await.expect("load");
    assert_eq!(compactions(&entries), 0);
    assert_eq!(last_run_end(&entries), Some(Outcome::Aborted));
    assert_clean(&entries, "after the abort");
    assert_eq!(invocations(&calls), ["w1", "w2"]);

    // A later run on the same session: compacts (the compactor's second call) and answers.
    let out = a
        .run_with(S, vec![Message::user("and now?")], None, true)
        .await
        .expect("second run");
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    assert_eq!(out.result.final_text(), Some(FINAL));
    let entries = memory.load(S).await.expect("load");
    assert_eq!(compactions(&entries), 1);
    assert_eq!(last_run_end(&entries), Some(Outcome::Completed));
    assert_clean(&entries, "after the second run");
    assert_eq!(invocations(&calls), ["w1", "w2"], "no tool ran again");
}

fn said(text: &str) -> Message {
    Message::Assistant(AssistantMessage {
        text: text.into(),
        ..Default::default()
    })
}

/// R-OUT-6 / R-VER-1, on the pure machine where the order of inputs is
/// exact: a `CompactionDone` that arrives after the abort — while the run-end entry is being
/// committed, and after the run ended — is reported unhandled, requests no effect (no
/// compaction entry is persisted), and leaves the run `Aborted` with its uncompacted messages.
#[test]
fn r_out_6_a_compaction_result_after_abort_is_ignored() {
    let mut run = Run::new(RunConfig {
        compact_threshold: Some(2),
        ..RunConfig::default()
    });
    let history = vec![
        Message::user("first"),
        said("one"),
        Message::user("second"),
        said("two"),
    ];
    let step = run.handle(Event::Start {
        run_id: "r1".into(),
        history,
        input: vec![Message::user("third")],
        session_turns: 2,
    });
    assert_eq!(step.to.to_string(), "Compacting");
    let Some(Effect::Compact { messages, .. }) = step
        .effects
        .iter()
        .find(|e| matches!(e, Effect::Compact { .. }))
        .cloned()
    else {
        panic!("no Compact effect: {:?}", step.effects)
    };
    let done = Event::CompactionDone {
        messages: vec![messages[0].clone(), messages[4].clone()],
        removed: 3,
    };

    let step = run.handle(Event::Abort {
        reason: "stop".into(),
        kill: Default::default(),
    });
    assert_eq!(step.to.to_string(), "Finishing");
    assert!(step
        .effects
        .iter()
        .any(|e| matches!(e, Effect::CommitRunEnd { .. })));

    for (when, expected) in [
        ("while finishing", "Finishing"),
        ("after the end", "Aborted"),
    ] {
        let step = run.handle(done.clone());
        assert!(step.unhandled, "{when}: {step:?}");
        assert!(step.effects.is_empty(), "{when}: {:?}", step.effects);
        assert_eq!(step.to.to_string(), expected, "{when}");
        if when == "while finishing" {
            let _ = run.handle(Event::RunEndCommitted);
        }
    }
    let result = run.result().expect("terminal");
    assert_eq!(result.outcome, Outcome::Aborted);
    assert_eq!(result.messages, messages, "the compaction was not applied");
}

/// R-IDEM-5 / R-IDEM-3: a crash while compacting. The run's future is
/// dropped with the compactor parked — as a killed process, nothing more is written and
/// nothing of the run goes on (releasing the compactor afterwards does not complete it). A new
/// agent on the same file store (the restarted process) resumes: it compacts again and
/// completes, every tool ran once, and the log is clean. On the current-thread runtime: when
/// the test sees `entered`, the compactor's task is parked, not in the middle of a poll (on a
/// multi-thread runtime the release could reach a poll still under way, which no abort
/// interrupts, and the compactor would finish in that very poll).
#[tokio::test]
async fn r_idem_5_crash_during_compaction_then_resume_completes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (work, calls) = CountingTool::new("work", false);
    let parked = Arc::new(Parked::default());
    let crashed = Arc::new(agent(
        Arc::new(FileStore::open(dir.path()).expect("store")),
        work.clone(),
        parked.clone(),
    ));
    let runner = crashed.clone();
    let handle = tokio::spawn(async move { runner.run(S, "go").await });
    tokio::time::timeout(Duration::from_secs(30), parked.entered.notified())
        .await
        .expect("the run reached compaction");
    handle.abort();
    assert!(handle.await.expect_err("cancelled").is_cancelled());
    drop(crashed);
    parked.release.notify_one();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !parked.returned.load(Ordering::SeqCst),
        "the dropped run's compaction went on in the background"
    );

    let store = Arc::new(FileStore::open(dir.path()).expect("store"));
    let entries = store.load_blocking(S).expect("load").0;
    assert_eq!(compactions(&entries), 0, "the crash came before the entry");
    assert_eq!(last_run_end(&entries), None, "the run is interrupted");
    assert_eq!(invocations(&calls), ["w1", "w2"]);

    let restarted = agent(store.clone(), work, truncation());
    let out = restarted.resume_with(S, None, true).await.expect("resume");
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    assert_eq!(out.result.final_text(), Some(FINAL));
    let trace = out.trace.expect("trace");
    assert_eq!(compaction_inputs(&trace), 1, "the resumed run compacts");
    assert_eq!(agentloop::trace::replay(&trace), None);
    let entries = store.load_blocking(S).expect("load").0;
    assert_eq!(compactions(&entries), 1);
    assert_eq!(final_answer(&entries), Some(FINAL));
    assert_eq!(last_run_end(&entries), Some(Outcome::Completed));
    assert_clean(&entries, "after the resume");
    assert_eq!(invocations(&calls), ["w1", "w2"], "no tool ran twice");
}

/// The writes of a clean run, and the 1-based position of the compaction entry among them.
async fn compaction_write() -> (usize, usize) {
    let memory = Arc::new(MemoryStore::new());
    let (work, _) = CountingTool::new("work", false);
    let out = agent(memory.clone(), work, truncation())
        .run(S, "go")
        .await
        .expect("run");
    assert_eq!(out.result.outcome, Outcome::Completed);
    let entries = memory.load(S).await.expect("load");
    assert_eq!(compactions(&entries), 1);
    let k = entries
        .iter()
        .position(|e| matches!(e, Entry::Compaction { .. }))
        .expect("compaction entry")
        + 1;
    (entries.len(), k)
}

/// R-IDEM-4 / R-IDEM-5: the store fails the write of the compaction entry,
/// before it reached the disk and after. The run fails at once (`store_write_failed`, nothing
/// written after), and a resume on the healthy store completes: it compacts again when the
/// entry was lost, takes the stored one when it was not, and no tool runs twice.
#[tokio::test(start_paused = true)]
async fn r_idem_4_failed_compaction_write_then_resume_completes() {
    let (writes, k) = compaction_write().await;
    assert_eq!(
        (writes, k),
        (10, 8),
        "input, 2 × (turn, start, result), compaction, turn, end"
    );
    for point in [FaultPoint::BeforeWrite, FaultPoint::AfterWrite] {
        let ctx = format!("{point:?}");
        let dir = tempfile::tempdir().expect("tempdir");
        let (work, calls) = CountingTool::new("work", false);
        let faulty = Arc::new(
            FaultyStore::new(FileStore::open(dir.path()).expect("store"), k as u64).at(point),
        );
        let out = agent(faulty.clone(), work.clone(), truncation())
            .run_with(S, vec![Message::user("go")], None, true)
            .await
            .expect("run");
        assert_eq!(
            out.result.outcome,
            Outcome::Failed,
            "{ctx}: {:?}",
            out.result
        );
        assert_eq!(out.result.reason, "store_write_failed", "{ctx}");
        assert_eq!(faulty.appends(), k as u64, "{ctx}: nothing written after");
        assert_eq!(
            agentloop::trace::replay(out.trace.as_ref().expect("trace")),
            None
        );
        drop(faulty); // the restarted process: the failed one's store handle is gone

        let store = Arc::new(FileStore::open(dir.path()).expect("store"));
        let stored = store.load_blocking(S).expect("load").0;
        let expected = usize::from(point == FaultPoint::AfterWrite);
        assert_eq!(compactions(&stored), expected, "{ctx}");
        assert_eq!(last_run_end(&stored), None, "{ctx}");

        let out = agent(store.clone(), work, truncation())
            .resume_with(S, None, true)
            .await
            .expect("resume");
        assert_eq!(
            out.result.outcome,
            Outcome::Completed,
            "{ctx}: {:?}",
            out.result
        );
        assert_eq!(out.result.final_text(), Some(FINAL), "{ctx}");
        let entries = store.load_blocking(S).expect("load").0;
        assert_eq!(compactions(&entries), 1, "{ctx}");
        assert_eq!(final_answer(&entries), Some(FINAL), "{ctx}");
        assert_eq!(last_run_end(&entries), Some(Outcome::Completed), "{ctx}");
        assert_clean(&entries, &ctx);
        assert_eq!(
            invocations(&calls),
            ["w1", "w2"],
            "{ctx}: no tool ran twice"
        );
    }
}

/// A compactor that never answers (an LLM summary whose model hangs).
struct Hangs;

#[agentloop::async_trait]
impl agentloop::runtime::Compactor for Hangs {
    async fn compact(
        &self,
        _messages: &[agentloop::Message],
        _budget_tokens: Option<u64>,
        _max_messages: Option<usize>,
    ) -> Result<(Vec<agentloop::Message>, usize), String> {
        std::future::pending().await
    }
}

/// The compaction call has a deadline of its own: a compactor that hangs fails at
/// `compaction_timeout_ms` (on the agent's clock), and a context that still fits goes out as
/// it is; the run does not wait for its own deadline.
#[tokio::test(start_paused = true)]
async fn a_hanging_compaction_fails_at_its_deadline_and_the_run_goes_on() {
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = events.clone();
    let agent = agentloop::runtime::Agent::builder()
        .model(agentloop::provider::scripted::ScriptedModel::demo())
        .compactor(std::sync::Arc::new(Hangs))
        .compaction_timeout_ms(Some(5_000))
        .compact_after_messages(0)
        .sink(std::sync::Arc::new(move |e: &agentloop::EventEnvelope| {
            seen.lock().unwrap().push(e.event.clone())
        }))
        .build();
    let started = tokio::time::Instant::now();
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(3_600),
        agent.run("s", "hello"),
    )
    .await
    .expect("the run ends before an hour")
    .expect("ran");
    assert_eq!(
        out.result.outcome,
        agentloop::Outcome::Completed,
        "{:?}",
        out.result
    );
    let waited = started.elapsed();
    assert!(
        waited >= std::time::Duration::from_secs(5) && waited < std::time::Duration::from_secs(60),
        "{waited:?}"
    );
    assert!(events
        .lock()
        .unwrap()
        .iter()
        .any(|e| matches!(e, agentloop::AgentEvent::CompactEnd { removed: 0 })));
}
