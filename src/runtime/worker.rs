//! Where a run is driven: as a task of its own on the tokio runtime it is awaited on.
//!
//! On a multi-thread runtime, a future awaited by `block_on` (the body of `#[tokio::main]`) is
//! polled on the main thread while the sockets it reads are watched by a worker thread, so
//! every streamed delta would cost a wake-up across threads (two context switches; measured in
//! `peers/rig-delta`). Spawned, the run is polled by the worker that saw its socket become
//! readable. On a current-thread runtime a task woken by the HTTP connection's task runs at
//! once, where the `block_on` future would first make the scheduler poll its I/O driver again
//! (one `epoll_wait` more per streamed delta). The run therefore needs a runtime that is being
//! driven (`Runtime::block_on`, `#[tokio::main]`), as the HTTP providers' connections do.

use std::future::Future;
use std::panic;

use tokio::runtime::Handle;

use super::AgentError;

/// Drives `run` as a task of its own on the current tokio runtime and waits for it; outside a
/// tokio runtime it is awaited in place. Dropping the returned future aborts the task, so
/// cancelling a run works as before; a panic in the run resumes in the caller.
pub(crate) async fn on_worker<T, F>(run: F) -> Result<T, AgentError>
where
    F: Future<Output = Result<T, AgentError>> + Send + 'static,
    T: Send + 'static,
{
    let Ok(handle) = Handle::try_current() else {
        return run.await;
    };
    let task = AbortOnDrop(handle.spawn(tracing::Instrument::in_current_span(run)));
    match task.await {
        Ok(out) => out,
        Err(e) if e.is_panic() => panic::resume_unwind(e.into_panic()),
        Err(_) => Err(AgentError::RuntimeShutDown),
    }
}

/// Aborts the task when dropped: cancelling a run stops its task, and killing a tool's outer
/// task also stops the tool's future (a dropped `JoinHandle` alone would let either run on).
pub(crate) struct AbortOnDrop<T>(pub(crate) tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}
