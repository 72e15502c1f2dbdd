//! Requests parked until the person answers them (approvals, `ask_user` questions), by id.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokio::sync::oneshot;

/// Parked requests (`T`) with their answers' channels (`A`), by id; shared by the session
/// handle, which answers them, and the port that waits for the answer.
pub(crate) struct Waiting<T, A> {
    pending: Mutex<BTreeMap<String, (T, oneshot::Sender<A>)>>,
}

impl<T, A> Default for Waiting<T, A> {
    fn default() -> Self {
        Waiting {
            pending: Mutex::default(),
        }
    }
}

impl<T, A> Waiting<T, A> {
    /// The ids of the requests waiting, in order.
    pub(crate) fn ids(&self) -> Vec<String> {
        self.pending
            .lock()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub(crate) fn has_pending(&self) -> bool {
        self.pending.lock().map(|p| !p.is_empty()).unwrap_or(false)
    }

    /// Takes the request `id` out, with its answer's channel (`None`: not waiting).
    pub(crate) fn take(&self, id: &str) -> Option<(T, oneshot::Sender<A>)> {
        self.pending.lock().ok().and_then(|mut p| p.remove(id))
    }

    /// Parks `request` as `id` until it is answered; it is forgotten when the wait ends for any
    /// reason (answer, withdrawal, the machine's deadline, abort). `None`: the channel closed.
    pub(crate) async fn wait(&self, id: String, request: T) -> Option<A> {
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id.clone(), (request, tx));
        }
        let _forget = Forget(self, id);
        rx.await.ok()
    }
}

/// Removes a parked request when its wait ends.
struct Forget<'a, T, A>(&'a Waiting<T, A>, String);

impl<T, A> Drop for Forget<'_, T, A> {
    fn drop(&mut self) {
        self.0.take(&self.1);
    }
}
