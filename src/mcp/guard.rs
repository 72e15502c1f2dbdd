//! A transport wrapper that bounds what an MCP server may ask of the client: requests it sent
//! (`sampling/createMessage`, `roots/list`, `elicitation/create`, `ping`...) and whose answers
//! are not yet written.
//!
//! rmcp answers every server request on a task of its own and keeps each answer until the
//! transport has written it; a server that floods requests and never reads its stdin makes
//! the client keep every one (about 2 KB each). The bound counts requests, not ids: a request
//! is pending from its arrival until its answer is handed to the transport, and its answer is
//! in flight until written; the same id sent twice counts twice, and a server's cancel frees
//! only answers not yet handed over (rmcp then drops them, or writes them later and they count
//! again), never an answer being written. Past [`McpOptions::max_pending_requests`]
//! (super::McpOptions::max_pending_requests) pending and in-flight answers the wrapper ends the stream
//! (the SDK sees the server close), records why, and wakes the call in flight, which fails
//! with a [`ToolError::Failed`](crate::tools::ToolError::Failed) naming the bound; the next
//! call starts the server again.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::model::{JsonRpcMessage, RequestId, ServerNotification};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleClient;

/// The server's requests the client still holds something for.
#[derive(Debug, Default)]
struct Held {
    /// Requests whose answer is not handed to the transport yet, by id (an id the server
    /// reused counts once per request).
    pending: HashMap<RequestId, usize>,
    /// The sum of `pending`.
    pending_total: usize,
    /// Answers handed to the transport and not written yet.
    writing: usize,
}

impl Held {
    fn total(&self) -> usize {
        self.pending_total + self.writing
    }
}

/// What the wrapper shares with the connection: the requests held and, once the bound was
/// crossed, why the stream was ended.
#[derive(Debug, Default)]
pub(crate) struct RequestGuard {
    /// The server's requests whose answers are not written yet.
    held: Mutex<Held>,
    /// Set once, when the bound is crossed.
    tripped: OnceLock<String>,
    /// Woken when `tripped` is set.
    notify: tokio::sync::Notify,
}

impl RequestGuard {
    /// Why the stream was ended, if it was.
    pub(crate) fn tripped(&self) -> Option<&str> {
        self.tripped.get().map(String::as_str)
    }

    /// Resolves when the bound is crossed (at once if it was).
    pub(crate) async fn wait_tripped(&self) -> &str {
        loop {
            let notified = self.notify.notified();
            if let Some(why) = self.tripped() {
                return why;
            }
            notified.await;
        }
    }

    fn trip(&self, why: String) {
        tracing::warn!(reason = %why, "MCP connection ended");
        let _ = self.tripped.set(why);
        self.notify.notify_waiters();
    }

    /// A request arrived: how many the client holds now.
    fn received(&self, id: &RequestId) -> usize {
        match self.held.lock() {
            Ok(mut held) => {
                *held.pending.entry(id.clone()).or_default() += 1;
                held.pending_total += 1;
                held.total()
            }
            Err(_) => 0,
        }
    }

    /// The answer to one request `id` was handed to the transport.
    fn sending(&self, id: &RequestId) {
        if let Ok(mut held) = self.held.lock() {
            held.writing += 1;
            if let Some(n) = held.pending.get_mut(id) {
                *n -= 1;
                if *n == 0 {
                    held.pending.remove(id);
                }
                held.pending_total -= 1;
            }
        }
    }

    /// An answer handed to the transport was written (or failed to be).
    fn written(&self) {
        if let Ok(mut held) = self.held.lock() {
            held.writing = held.writing.saturating_sub(1);
        }
    }

    /// The server cancelled its requests `id`: answers not handed over yet are dropped by rmcp
    /// (one it hands over later counts as written then).
    fn cancelled(&self, id: &RequestId) {
        if let Ok(mut held) = self.held.lock() {
            if let Some(n) = held.pending.remove(id) {
                held.pending_total -= n;
            }
        }
    }
}

/// A transport whose server may have at most `max_pending` requests unanswered.
pub(crate) struct Guarded<T> {
    inner: T,
    guard: Arc<RequestGuard>,
    max_pending: usize,
    server: String,
}

impl<T> Guarded<T> {
    pub(crate) fn new(inner: T, max_pending: usize, server: String) -> (Self, Arc<RequestGuard>) {
        let guard = Arc::new(RequestGuard::default());
        let wrapped = Guarded {
            inner,
            guard: guard.clone(),
            max_pending,
            server,
        };
        (wrapped, guard)
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Guarded<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let answers = match &item {
            JsonRpcMessage::Response(r) => Some(r.id.clone()),
            JsonRpcMessage::Error(e) => e.id.clone(),
            _ => None,
        };
        if let Some(id) = &answers {
            self.guard.sending(id);
        }
        let send = self.inner.send(item);
        let guard = self.guard.clone();
        async move {
            let result = send.await;
            if answers.is_some() {
                guard.written();
            }
            result
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        if self.guard.tripped().is_some() {
            return None;
        }
        let message = self.inner.receive().await?;
        match &message {
            // `received` counts the request (every request, once): the guard is its only call.
            JsonRpcMessage::Request(request)
                if self.guard.received(&request.id) > self.max_pending =>
            {
                self.guard.trip(format!(
                    "MCP server {} sent more than {} requests to the client without \
                     reading the answers (McpOptions::max_pending_requests = {}); the \
                     connection was dropped",
                    self.server, self.max_pending, self.max_pending
                ));
                return None;
            }
            JsonRpcMessage::Notification(n) => {
                // The server cancelled a request of its own: an answer not handed over yet is
                // dropped unsent; one being written still holds its bytes.
                if let ServerNotification::CancelledNotification(c) = &n.notification {
                    if let Some(id) = &c.params.request_id {
                        self.guard.cancelled(id);
                    }
                }
            }
            _ => {}
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
