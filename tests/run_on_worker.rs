//! Where a run is driven: on a tokio runtime `Agent::run` drives the run as a task of its own,
//! so on a multi-thread runtime a streamed delta is handled by the worker that read it instead
//! of being handed to the thread blocked in `block_on`, and on a current-thread runtime the
//! run stays on that one thread. The task behaves like the future it replaces: dropping the run
//! cancels it, and a panic in it reaches the caller.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use agentloop::model::{DeltaStream, Model, ModelRequest};
use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::{Agent, EventSink};
use agentloop::EventEnvelope;
use agentloop::{AgentEvent, ModelError, Outcome};

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

type Threads = Arc<Mutex<Vec<ThreadId>>>;

/// A sink noting the threads it was called on.
fn thread_recorder() -> (Threads, Arc<dyn EventSink>) {
    let threads: Threads = Arc::default();
    let seen = threads.clone();
    let sink = Arc::new(move |_: &EventEnvelope| {
        if let Ok(mut t) = seen.lock() {
            t.push(std::thread::current().id());
        }
    });
    (threads, sink)
}

#[test]
fn issue9_on_a_multi_thread_runtime_the_run_is_driven_by_a_worker() {
    let (threads, sink) = thread_recorder();
    let agent = Agent::builder()
        .model(ScriptedModel::demo())
        .sink(sink)
        .build();
    let out = multi_thread()
        .block_on(agent.run("s1", "hello"))
        .expect("ran");
    assert_eq!(out.result.outcome, Outcome::Completed);
    let threads = threads.lock().expect("threads").clone();
    assert!(!threads.is_empty(), "events were emitted");
    let here = std::thread::current().id();
    assert!(
        threads.iter().all(|t| *t != here),
        "no event is handled on the thread blocked in block_on"
    );
}

#[test]
fn issue9_on_a_current_thread_runtime_the_run_stays_on_its_thread() {
    let (threads, sink) = thread_recorder();
    let agent = Agent::builder()
        .model(ScriptedModel::demo())
        .sink(sink)
        .build();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let out = rt.block_on(agent.run("s1", "hello")).expect("ran");
    assert_eq!(out.result.outcome, Outcome::Completed);
    let here = std::thread::current().id();
    let threads = threads.lock().expect("threads").clone();
    assert!(!threads.is_empty());
    assert!(threads.iter().all(|t| *t == here));
}

/// A model whose stream never ends; it notes when the stream is dropped.
struct Stalls {
    dropped: Arc<AtomicBool>,
    opened: Arc<tokio::sync::Notify>,
}

struct NoteDrop(Arc<AtomicBool>);

impl Drop for NoteDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl Model for Stalls {
    fn name(&self) -> String {
        "stalls".into()
    }

    async fn stream(&self, _request: ModelRequest) -> Result<DeltaStream, ModelError> {
        let guard = NoteDrop(self.dropped.clone());
        self.opened.notify_one();
        Ok(Box::pin(futures::stream::unfold(guard, |g| async move {
            std::future::pending::<()>().await;
            Some((
                Err(ModelError::new(agentloop::ErrorKind::ServerError, "never")),
                g,
            ))
        })))
    }
}

#[test]
fn issue9_dropping_the_run_cancels_its_task() {
    let dropped = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(tokio::sync::Notify::new());
    let agent = Agent::builder()
        .model(Stalls {
            dropped: dropped.clone(),
            opened: opened.clone(),
        })
        .build();
    let rt = multi_thread();
    rt.block_on(async {
        let run = agent.run("s1", "hello");
        tokio::select! {
            _ = run => panic!("the stalled run cannot end"),
            _ = opened.notified() => {}
        }
        // `run` is dropped here, with its stream open in the task.
        for _ in 0..200 {
            if dropped.load(Ordering::SeqCst) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    });
    assert!(
        dropped.load(Ordering::SeqCst),
        "the task was aborted and dropped the model's stream"
    );
}

#[test]
fn issue9_a_panic_in_the_run_reaches_the_caller() {
    let sink = Arc::new(|e: &EventEnvelope| {
        if matches!(e.event, AgentEvent::TextDelta { .. }) {
            panic!("sink refuses deltas");
        }
    });
    let agent = Agent::builder()
        .model(ScriptedModel::demo())
        .sink(sink)
        .build();
    let rt = multi_thread();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(agent.run("s1", "hello"))
    }));
    let payload = caught.expect_err("the panic is resumed in the caller");
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    assert_eq!(message, "sink refuses deltas");
}

/// The future `Agent::run` returns is small: the run's own state (tens of kilobytes: the
/// machines, the driver, the store's and the model's futures) lives in one heap allocation,
/// so awaiting it, spawning it or moving it into a task does not copy it through the stack,
/// whose pages would stay resident for the whole process.
#[test]
fn the_run_future_is_small() {
    let agent = Agent::builder().model(ScriptedModel::demo()).build();
    let run = agent.run("s1", "hello");
    let size = std::mem::size_of_val(&run);
    assert!(size <= 4096, "Agent::run's future is {size} bytes");
    let out = multi_thread().block_on(run).expect("ran");
    assert_eq!(out.result.outcome, Outcome::Completed);
}
