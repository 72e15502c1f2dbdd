//! Tool failures and ordering in a parallel batch, on the real runtime
//! with the offline scripted model and paused (virtual) time:
//!
//! - R-IN-3: a tool that panics or exceeds `Timeouts::tool_ms` gets an error result naming
//!   the cause; the other calls of its batch complete as usual and the run goes on to its
//!   final answer. A timed-out tool is stopped, and a tool stuck on a blocking thread does not
//!   hold the run.
//! - R-IN-4: the results of parallel calls are stored and sent to the model in call order,
//!   also when the calls finish in the reverse order.

mod durable_support;
mod support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use agentloop::runtime::{Agent, AgentBuilder, RunOutput, VecSink};
use agentloop::store::{MemoryStore, SessionStore};
use agentloop::tools::Tool;
use agentloop::{AgentEvent, Outcome};
use agentloop::{Message, ToolResult, ToolStatus};
use agentloop_core::session_log;
use durable_support::{model, model_requests};
use serde_json::{json, Value};
use support::{BlockingTool, EchoSleep, PanicTool};

const FINAL: &str = "all results seen";

struct Fixture {
    agent: Agent,
    store: Arc<MemoryStore>,
    sink: VecSink,
}

fn fixture(
    script: Value,
    tools: Vec<Arc<dyn Tool>>,
    configure: impl FnOnce(AgentBuilder) -> AgentBuilder,
) -> Fixture {
    let (agent, store, sink) = support::agent_with_tools(model(script), tools, configure);
    Fixture { agent, store, sink }
}

async fn run(f: &Fixture) -> RunOutput {
    support::run_go(&f.agent).await
}

/// The tool results the `n`-th model request (from 0) sends, in message order.
fn sent_results(out: &RunOutput, n: usize) -> Vec<ToolResult> {
    let requests = model_requests(out.trace.as_ref().expect("trace"));
    requests[n]
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

fn ids(results: &[ToolResult]) -> Vec<&str> {
    results.iter().map(|r| r.tool_call_id.as_str()).collect()
}

fn by_id<'a>(results: &'a [ToolResult], id: &str) -> &'a ToolResult {
    results
        .iter()
        .find(|r| r.tool_call_id == id)
        .unwrap_or_else(|| panic!("no result for {id} in {results:?}"))
}

fn tool_end_status(sink: &VecSink, id: &str) -> Vec<ToolStatus> {
    sink.events()
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::ToolEnd {
                tool_call_id,
                status,
                ..
            } if tool_call_id == id => Some(*status),
            _ => None,
        })
        .collect()
}

/// Checks what every scenario ends with: the final answer, a clean session log, a trace
/// that replays.
async fn assert_completed(f: &Fixture, out: &RunOutput) {
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    assert_eq!(out.result.final_text(), Some(FINAL));
    let entries = f.store.load("s").await.expect("load");
    assert_eq!(session_log::check(&entries), [], "the session log pairs up");
    assert!(session_log::pending(&entries).is_empty());
    assert_eq!(
        agentloop::trace::replay(out.trace.as_ref().expect("trace")),
        None,
        "the trace replays"
    );
}

/// R-IN-3: three calls of one parallel batch panic — with a formatted
/// `String` payload, a `&str` payload and a non-string payload — between two calls that
/// sleep. Each panicking call gets an error result naming its panic, the sleeping calls
/// complete unaffected, all five results reach the model in call order, and the run ends
/// with the final answer.
#[tokio::test(start_paused = true)]
async fn r_in_3_a_panicking_tool_is_an_error_result_and_its_batch_runs_on() {
    let (sleepy, finished) = EchoSleep::new();
    let f = fixture(
        json!({"turns": [
            {"text": "five at once", "tool_calls": [
                {"id": "a", "name": "sleepy", "arguments": {"ms": 30}},
                {"id": "p1", "name": "boom", "arguments": {"kind": "formatted"}},
                {"id": "p2", "name": "boom", "arguments": {"kind": "static"}},
                {"id": "p3", "name": "boom", "arguments": {"kind": "opaque"}},
                {"id": "b", "name": "sleepy", "arguments": {"ms": 10}}
            ]},
            {"text": FINAL}
        ]}),
        vec![sleepy, Arc::new(PanicTool)],
        |b| b,
    );
    let out = run(&f).await;
    assert_completed(&f, &out).await;

    // The sleeping calls ran to their end (the panics did not cancel them).
    let mut ran = finished.lock().unwrap().clone();
    ran.sort();
    assert_eq!(ran, ["a", "b"]);

    let stored = support::stored_results(&f.store).await;
    assert_eq!(ids(&stored), ["a", "p1", "p2", "p3", "b"]);
    for (id, ms) in [("a", 30), ("b", 10)] {
        let r = by_id(&stored, id);
        assert_eq!(r.status, ToolStatus::Completed, "{r:?}");
        assert_eq!(r.content, format!("slept {ms} ({id})"));
    }
    for (id, message) in [
        ("p1", "tool panicked: formatted boom in p1"),
        ("p2", "tool panicked: static boom"),
        ("p3", "tool panicked: non-string panic"),
    ] {
        let r = by_id(&stored, id);
        assert_eq!(r.status, ToolStatus::Error, "{r:?}");
        assert_eq!(r.content, message);
        assert_eq!(tool_end_status(&f.sink, id), [ToolStatus::Error]);
    }
    // The model sees exactly what was stored, in call order.
    assert_eq!(sent_results(&out, 1), stored);
}

/// R-IN-3 / R-IN-7 / R-TOOL-3: a call that would sleep 60 s under a
/// 1 s `tool_ms` gets the error result `tool timed out after 1000 ms` after 1 s of (virtual)
/// time; the other call of its batch completes; the run goes on to the final answer without
/// waiting for the slow tool, and the slow tool is stopped: it never finishes, even when the
/// clock moves far past its sleep.
#[tokio::test(start_paused = true)]
async fn r_in_7_a_tool_over_its_timeout_is_an_error_result_and_is_stopped() {
    let (sleepy, finished) = EchoSleep::new();
    let f = fixture(
        json!({"turns": [
            {"text": "one slow, one fast", "tool_calls": [
                {"id": "slow", "name": "sleepy", "arguments": {"ms": 60_000}},
                {"id": "fast", "name": "sleepy", "arguments": {"ms": 10}}
            ]},
            {"text": FINAL}
        ]}),
        vec![sleepy],
        |b| b.tool_timeout_ms(1_000),
    );
    let started = tokio::time::Instant::now();
    let out = run(&f).await;
    let elapsed = started.elapsed();
    assert_completed(&f, &out).await;
    assert!(
        elapsed >= Duration::from_millis(1_000) && elapsed < Duration::from_millis(2_000),
        "the run waited for the deadline, not for the tool: {elapsed:?}"
    );

    let stored = support::stored_results(&f.store).await;
    assert_eq!(ids(&stored), ["slow", "fast"]);
    let slow = by_id(&stored, "slow");
    assert_eq!(slow.status, ToolStatus::Error);
    assert_eq!(slow.content, "tool timed out after 1000 ms");
    assert_eq!(tool_end_status(&f.sink, "slow"), [ToolStatus::Error]);
    let fast = by_id(&stored, "fast");
    assert_eq!(fast.status, ToolStatus::Completed);
    assert_eq!(sent_results(&out, 1), stored);

    // The timed-out call was cancelled, not left running in the background.
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(*finished.lock().unwrap(), ["fast"]);
}

/// R-IN-7 / R-TOOL-3: a tool stuck on a blocking thread — which no abort
/// can interrupt — cannot hold the run: at its timeout it gets an error result and the run
/// returns its final answer while the thread is still blocked. Real time (the blocking pool
/// does not follow tokio's paused clock); the test releases the thread only after the run
/// returned, and fails instead of hanging when the run waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_7_a_tool_blocked_on_a_thread_does_not_hold_the_run() {
    let (stuck, release, finished) = BlockingTool::new();
    let f = fixture(
        json!({"turns": [
            {"text": "calling the stuck tool", "tool_calls": [{"id": "s1", "name": "stuck"}]},
            {"text": FINAL}
        ]}),
        vec![stuck],
        |b| b.tool_timeout_ms(50),
    );
    let out = tokio::time::timeout(Duration::from_secs(60), run(&f)).await;
    let blocked_at_return = !finished.load(Ordering::SeqCst);
    let _ = release.send(()); // let the thread go, pass or fail
    let out = out.expect("the run returned while the tool's thread was blocked");
    assert!(
        blocked_at_return,
        "the tool was released before the run returned"
    );
    assert_completed(&f, &out).await;
    let stored = support::stored_results(&f.store).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].status, ToolStatus::Error);
    assert_eq!(stored[0].content, "tool timed out after 50 ms");
}

/// The script of the ordering tests: four parallel calls, each sleeping less than the one
/// before, so they finish in the reverse of their call order.
fn reverse_finish_script() -> Value {
    json!({"turns": [
        {"text": "four at once", "tool_calls": [
            {"id": "c1", "name": "sleepy", "arguments": {"ms": 80}},
            {"id": "c2", "name": "sleepy", "arguments": {"ms": 55}},
            {"id": "c3", "name": "sleepy", "arguments": {"ms": 30}},
            {"id": "c4", "name": "sleepy", "arguments": {"ms": 5}}
        ]},
        {"text": FINAL}
    ]})
}

/// R-IN-4: four calls finishing in reverse order (c4 first). With the
/// default `ToolOrder::CallOrder` the session store holds their results in call order, and the
/// next model request sends them in call order, right after the assistant message that made
/// the calls.
#[tokio::test(start_paused = true)]
async fn r_in_4_parallel_results_are_stored_and_sent_in_call_order() {
    let (sleepy, finished) = EchoSleep::new();
    let f = fixture(reverse_finish_script(), vec![sleepy], |b| b);
    let out = run(&f).await;
    assert_completed(&f, &out).await;
    assert_eq!(
        *finished.lock().unwrap(),
        ["c4", "c3", "c2", "c1"],
        "the tools did finish in reverse order"
    );

    let stored = support::stored_results(&f.store).await;
    assert_eq!(ids(&stored), ["c1", "c2", "c3", "c4"]);
    let sent = sent_results(&out, 1);
    assert_eq!(sent, stored);
    assert_eq!(sent[0].content, "slept 80 (c1)");

    // The results follow their assistant message directly.
    let requests = model_requests(out.trace.as_ref().expect("trace"));
    let messages = &requests[1].messages;
    let owner = messages
        .iter()
        .position(|m| matches!(m, Message::Assistant(a) if a.tool_calls.len() == 4))
        .expect("the assistant message with the calls");
    let after: Vec<&str> = messages[owner + 1..]
        .iter()
        .map_while(|m| match m {
            Message::Tool(r) => Some(r.tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(after, ["c1", "c2", "c3", "c4"]);
}

/// R-IN-4: with `ToolOrder::Completion` each result is stored as soon as its
/// call finishes (store order is finish order, c4 first), but the model still gets them in
/// call order — in the same run and in the next run, which rebuilds its context from the
/// store.
#[tokio::test(start_paused = true)]
async fn r_in_4_completion_order_stores_on_finish_but_sends_in_call_order() {
    let (sleepy, _) = EchoSleep::new();
    let mut script = reverse_finish_script();
    script["turns"]
        .as_array_mut()
        .expect("turns")
        .push(json!({"text": "second run"}));
    let f = fixture(script, vec![sleepy], |b| b.tool_results_as_completed());
    let out = run(&f).await;
    assert_completed(&f, &out).await;
    let stored = support::stored_results(&f.store).await;
    assert_eq!(ids(&stored), ["c4", "c3", "c2", "c1"]);
    assert_eq!(ids(&sent_results(&out, 1)), ["c1", "c2", "c3", "c4"]);

    let second = f
        .agent
        .run_with("s", vec![Message::user("again")], None, true)
        .await
        .expect("second run");
    assert_eq!(second.result.final_text(), Some("second run"));
    assert_eq!(ids(&sent_results(&second, 0)), ["c1", "c2", "c3", "c4"]);
}

/// R-CTL-3 / R-IDEM-6: a run whose future is dropped mid-way (a caller's `select!` or
/// timeout, a cancelled task — or, seen from the store, a crash) leaves nothing running in the
/// background: its killable tool is stopped with it, and never finishes later (before the
/// fix, the tool's task ran on detached and completed its side effect after the run was gone).
#[tokio::test(start_paused = true)]
async fn r_ctl_3_dropping_a_run_stops_its_tools() {
    let (sleepy, finished) = EchoSleep::new();
    let f = fixture(
        json!({"turns": [
            {"text": "slow", "tool_calls": [{"id": "slow", "name": "sleepy", "arguments": {"ms": 60_000}}]},
            {"text": FINAL}
        ]}),
        vec![sleepy],
        |b| b,
    );
    let cut = tokio::time::timeout(Duration::from_secs(5), run(&f)).await;
    assert!(cut.is_err(), "the run was still waiting for its tool");
    assert_eq!(tool_end_status(&f.sink, "slow"), []);
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(
        finished.lock().unwrap().is_empty(),
        "the dropped run's tool ran on: {:?}",
        finished.lock().unwrap()
    );
    // The store holds the call's start marker and no result: a resume reports it
    // `outcome_unknown` rather than running it again (R-IDEM-6).
    let entries = f.store.load("s").await.expect("load");
    assert_eq!(session_log::pending(&entries).len(), 1);
}
