//! [`Agent::run_stream`]: a run as a `Stream` of its events, ending with its output.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc;

use super::worker::on_worker;
use super::{Agent, AgentError, EventEnvelope, EventSink, RunOutput};
use crate::message::Message;

/// The run being streamed.
type RunFuture = Pin<Box<dyn Future<Output = Result<RunOutput, AgentError>> + Send>>;

/// One item of [`Agent::run_stream`]'s stream.
#[derive(Debug)]
pub enum RunStreamItem {
    /// An event of the run, in the order the agent's sink sees it.
    Event(EventEnvelope),
    /// The run's end: its output (a failed run is an output with a typed
    /// [`RunError`](crate::RunError)), or why it could not start. Always the last item.
    End(Result<Box<RunOutput>, AgentError>),
}

/// The events of one run as a [`Stream`], besides the agent's own sink, which
/// sees them too. The run goes on only while the stream is polled; dropping the stream drops
/// the run as dropping [`Agent::run`]'s future would (its session stays resumable).
pub(crate) struct RunStream {
    run: Option<RunFuture>,
    /// The run's events, a batch per poll of the run (see [`Batch`]).
    events: mpsc::UnboundedReceiver<Vec<EventEnvelope>>,
    /// Events of a received batch not handed out yet.
    pending: VecDeque<EventEnvelope>,
    end: Option<Result<Box<RunOutput>, AgentError>>,
}

impl std::fmt::Debug for RunStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunStream")
            .field("running", &self.run.is_some())
            .finish_non_exhaustive()
    }
}

/// Delivers each event to the agent's sink and to the stream.
struct Tee {
    sink: Arc<dyn EventSink>,
    batch: Arc<Batch>,
}

impl EventSink for Tee {
    fn emit(&self, event: &EventEnvelope) {
        self.sink.emit(event);
        self.batch.push(event.clone());
    }
}

/// The events a run emits while it is polled, sent to the stream as one batch when the poll
/// ends: on a multi-thread runtime the run is a task on a worker thread ([`on_worker`]) and
/// the stream is read on another, so an event sent on its own wakes the reader for every
/// delta (a futex call each, and a context switch when it has parked); a batch wakes it once
/// per poll, however many deltas the poll handled. Events emitted between polls (a tool's
/// task on another worker) are sent at once, in order with the batches.
struct Batch {
    state: Mutex<BatchState>,
    tx: mpsc::UnboundedSender<Vec<EventEnvelope>>,
}

#[derive(Default)]
struct BatchState {
    /// Whether the run is being polled.
    polling: bool,
    /// The events of the current poll.
    events: Vec<EventEnvelope>,
}

impl Batch {
    fn push(&self, event: EventEnvelope) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        if state.polling {
            state.events.push(event);
        } else {
            // The receiver is gone only when the stream was dropped, and with it the run.
            let _ = self.tx.send(vec![event]);
        }
    }

    fn set_polling(&self, polling: bool) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        state.polling = polling;
        if !polling && !state.events.is_empty() {
            let _ = self.tx.send(std::mem::take(&mut state.events));
        }
    }
}

/// A run whose events are batched per poll ([`Batch`]).
struct Batched<F> {
    run: Pin<Box<F>>,
    batch: Arc<Batch>,
}

impl<F: Future> Future for Batched<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        this.batch.set_polling(true);
        let out = this.run.as_mut().poll(cx);
        this.batch.set_polling(false);
        out
    }
}

impl Agent {
    /// Runs one prompt in `session` and returns its events as a [`Stream`]: every event the
    /// sink gets (the agent's own sink sees them too), then [`RunStreamItem::End`] with the
    /// output. The run goes on only while the stream is polled; dropping the stream drops the
    /// run as dropping [`Agent::run`]'s future would (its session stays resumable).
    ///
    /// ```
    /// use agentloop::runtime::{Agent, RunStreamItem};
    /// use agentloop::provider::scripted::ScriptedModel;
    /// use agentloop::AgentEvent;
    /// use futures::StreamExt;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let agent = Agent::builder().model(ScriptedModel::demo()).build();
    /// let mut stream = agent.run_stream("s1", "hello");
    /// let mut text = String::new();
    /// while let Some(item) = stream.next().await {
    ///     match item {
    ///         RunStreamItem::Event(e) => {
    ///             if let AgentEvent::TextDelta { text: t, .. } = e.event {
    ///                 text.push_str(&t);
    ///             }
    ///         }
    ///         RunStreamItem::End(output) => assert!(output.is_ok()),
    ///     }
    /// }
    /// assert!(!text.is_empty());
    /// # }
    /// ```
    pub fn run_stream(
        &self,
        session: &str,
        prompt: &str,
    ) -> impl Stream<Item = RunStreamItem> + Send + Unpin + std::fmt::Debug + 'static {
        let (tx, events) = mpsc::unbounded_channel();
        let batch = Arc::new(Batch {
            state: Mutex::default(),
            tx,
        });
        let agent = self.with_sink(Arc::new(Tee {
            sink: self.sink.clone(),
            batch: batch.clone(),
        }));
        let session = session.to_string();
        let input = vec![Message::user(prompt)];
        let config = (*self.config).clone();
        let run = Batched {
            run: Box::pin(async move {
                agent
                    .run_queued_here(&session, input, Vec::new(), config, None, false)
                    .await
            }),
            batch,
        };
        RunStream {
            run: Some(Box::pin(on_worker(run))),
            events,
            pending: VecDeque::new(),
            end: None,
        }
    }

    /// The same agent (same ports, tools, models and event numbering) with another sink.
    fn with_sink(&self, sink: Arc<dyn EventSink>) -> Agent {
        Agent {
            sink,
            ..self.clone()
        }
    }
}

impl RunStream {
    /// The next event already received, taking in what the channel holds when none is.
    fn next_event(&mut self) -> Option<EventEnvelope> {
        if self.pending.is_empty() {
            while let Ok(batch) = self.events.try_recv() {
                self.pending.extend(batch);
            }
        }
        self.pending.pop_front()
    }
}

impl Stream for RunStream {
    type Item = RunStreamItem;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<RunStreamItem>> {
        let this = &mut *self;
        // Events first: the run's future is polled only when none is waiting.
        if let Some(e) = this.pending.pop_front() {
            return Poll::Ready(Some(RunStreamItem::Event(e)));
        }
        if let Poll::Ready(Some(batch)) = this.events.poll_recv(cx) {
            this.pending.extend(batch);
            if let Some(e) = this.pending.pop_front() {
                return Poll::Ready(Some(RunStreamItem::Event(e)));
            }
        }
        if let Some(run) = this.run.as_mut() {
            match run.as_mut().poll(cx) {
                Poll::Ready(output) => {
                    this.run = None;
                    this.end = Some(output.map(Box::new));
                }
                // What the run emitted while it was polled is handed out now, not after a
                // wake-up and another poll.
                Poll::Pending => {
                    return match this.next_event() {
                        Some(e) => Poll::Ready(Some(RunStreamItem::Event(e))),
                        None => Poll::Pending,
                    };
                }
            }
        }
        // Events the run emitted on its way out come before the end.
        if let Some(e) = this.next_event() {
            return Poll::Ready(Some(RunStreamItem::Event(e)));
        }
        Poll::Ready(this.end.take().map(RunStreamItem::End))
    }
}
