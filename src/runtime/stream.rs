//! [`Agent::run_stream`]: a run as a `Stream` of its events, ending with its output.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc;

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
    events: mpsc::UnboundedReceiver<EventEnvelope>,
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
    tx: mpsc::UnboundedSender<EventEnvelope>,
}

impl EventSink for Tee {
    fn emit(&self, event: &EventEnvelope) {
        self.sink.emit(event);
        // The receiver is gone only when the stream was dropped, and with it the run.
        let _ = self.tx.send(event.clone());
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
        // The same agent (ports, tools, models and event numbering) with the tee as its sink.
        let agent = Agent {
            sink: Arc::new(Tee {
                sink: self.sink.clone(),
                tx,
            }),
            ..self.clone()
        };
        let session = session.to_string();
        let input = vec![Message::user(prompt)];
        RunStream {
            run: Some(Box::pin(async move {
                agent.run_with(&session, input, None, false).await
            })),
            events,
            end: None,
        }
    }
}

impl Stream for RunStream {
    type Item = RunStreamItem;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<RunStreamItem>> {
        let this = &mut *self;
        // Events first: the run's future is polled only when none is waiting.
        if let Poll::Ready(Some(e)) = this.events.poll_recv(cx) {
            return Poll::Ready(Some(RunStreamItem::Event(e)));
        }
        if let Some(run) = this.run.as_mut() {
            match run.as_mut().poll(cx) {
                Poll::Ready(output) => {
                    this.run = None;
                    this.end = Some(output.map(Box::new));
                    // Events the run emitted on its way out come before the end.
                    if let Ok(e) = this.events.try_recv() {
                        return Poll::Ready(Some(RunStreamItem::Event(e)));
                    }
                }
                Poll::Pending => {
                    // What the run emitted while it was polled is handed out now, not after a
                    // wake-up and another poll.
                    return match this.events.try_recv() {
                        Ok(e) => Poll::Ready(Some(RunStreamItem::Event(e))),
                        Err(_) => Poll::Pending,
                    };
                }
            }
        }
        if let Ok(e) = this.events.try_recv() {
            return Poll::Ready(Some(RunStreamItem::Event(e)));
        }
        Poll::Ready(this.end.take().map(RunStreamItem::End))
    }
}
