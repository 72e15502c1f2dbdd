//! A transport wrapper that bounds what an MCP server may ask of the client: requests it sent
//! (`sampling/createMessage`, `roots/list`, `elicitation/create`, `ping`...) and whose answers
//! are not yet written.
//!
//! rmcp answers every server request on a task of its own and keeps each answer until the
//! transport has written it; a server that floods requests and never reads its stdin makes
//! the client keep every one (about 2 KB each). Past [`McpOptions::max_pending_requests`]
//! (super::McpOptions::max_pending_requests) unanswered requests the wrapper ends the stream
//! (the SDK sees the server close), records why, and wakes the call in flight, which fails
//! with a [`ToolError::Failed`](crate::tools::ToolError::Failed) naming the bound; the next
//! call starts the server again.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::model::{JsonRpcMessage, RequestId, ServerNotification};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleClient;

/// What the wrapper shares with the connection: the requests in flight and, once the bound
/// was crossed, why the stream was ended.
#[derive(Debug, Default)]
pub(crate) struct RequestGuard {
    /// Ids of the server's requests whose answers are not written yet.
    pending: Mutex<HashSet<RequestId>>,
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

    fn answered(&self, id: &RequestId) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(id);
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
        let send = self.inner.send(item);
        let guard = self.guard.clone();
        async move {
            let result = send.await;
            if let Some(id) = answers {
                guard.answered(&id);
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
            JsonRpcMessage::Request(request) => {
                let count = match self.guard.pending.lock() {
                    Ok(mut pending) => {
                        pending.insert(request.id.clone());
                        pending.len()
                    }
                    Err(_) => 0,
                };
                if count > self.max_pending {
                    self.guard.trip(format!(
                        "MCP server {} sent more than {} requests to the client without \
                         reading the answers (McpOptions::max_pending_requests = {}); the \
                         connection was dropped",
                        self.server, self.max_pending, self.max_pending
                    ));
                    return None;
                }
            }
            JsonRpcMessage::Notification(n) => {
                // The server cancelled a request of its own: rmcp drops its answer unsent.
                if let ServerNotification::CancelledNotification(c) = &n.notification {
                    if let Some(id) = &c.params.request_id {
                        self.guard.answered(id);
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
