//! Questions the model asks the person through the built-in `ask_user` tool: the
//! session installs its own `UserAsker` as the agent's asker; a question parks until
//! [`Session::respond`](super::Session::respond) answers it by its ref (the tool call's id).
//! The wait's deadline is the machine's (a timer of the step, `ask_user_timeout_ms`), so a
//! question nobody answers ends as the chart says, not here.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::oneshot;

use crate::runtime::{Question, UserAsker};
use crate::session::SessionError;

/// Questions waiting for an answer, by ref.
#[derive(Default)]
pub(crate) struct Questions {
    pending: Mutex<BTreeMap<String, (Question, oneshot::Sender<String>)>>,
}

impl Questions {
    /// The refs of the questions waiting, in order.
    pub(crate) fn pending(&self) -> Vec<String> {
        self.pending
            .lock()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub(crate) fn has_pending(&self) -> bool {
        self.pending.lock().map(|p| !p.is_empty()).unwrap_or(false)
    }

    /// Answers the question `reference`.
    pub(crate) fn answer(&self, reference: &str, answer: String) -> Result<(), SessionError> {
        let (_, tx) = self
            .pending
            .lock()
            .ok()
            .and_then(|mut p| p.remove(reference))
            .ok_or_else(|| SessionError::Answer(reference.to_string()))?;
        // The run may have ended meanwhile (abort, deadline): nobody waits, which is harmless.
        let _ = tx.send(answer);
        Ok(())
    }

    fn park(&self, q: &Question) -> oneshot::Receiver<String> {
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(q.reference.clone(), (q.clone(), tx));
        }
        rx
    }

    fn forget(&self, reference: &str) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(reference);
        }
    }
}

/// The asker a session installs into its agent.
pub(crate) struct SessionAsker {
    pub(crate) questions: Arc<Questions>,
}

/// Removes a parked question when its wait ends for any reason (answer, deadline, abort).
struct Parked<'a>(&'a Questions, String);

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.forget(&self.1);
    }
}

#[async_trait]
impl UserAsker for SessionAsker {
    async fn ask(&self, question: &Question) -> Option<String> {
        let rx = self.questions.park(question);
        let _guard = Parked(&self.questions, question.reference.clone());
        rx.await.ok()
    }
}
