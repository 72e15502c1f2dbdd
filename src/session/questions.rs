//! Questions the model asks the person through the built-in `ask_user` tool: the
//! session installs its own `UserAsker` as the agent's asker; a question parks until
//! [`Session::respond`](super::Session::respond) answers it by its ref (the tool call's id).
//! The wait's deadline is the machine's (a timer of the step, `ask_user_timeout_ms`), so a
//! question nobody answers ends as the chart says, not here.

use std::sync::Arc;

use async_trait::async_trait;

use super::waiting::Waiting;
use crate::runtime::{Question, UserAsker};
use crate::session::SessionError;

/// Questions waiting for an answer, by ref.
pub(crate) type Questions = Waiting<Question, String>;

impl Questions {
    /// Answers the question `reference`.
    pub(crate) fn answer(&self, reference: &str, answer: String) -> Result<(), SessionError> {
        let (_, tx) = self
            .take(reference)
            .ok_or_else(|| SessionError::Answer(reference.to_string()))?;
        // The run may have ended meanwhile (abort, deadline): nobody waits, which is harmless.
        let _ = tx.send(answer);
        Ok(())
    }
}

/// The asker a session installs into its agent.
pub(crate) struct SessionAsker {
    pub(crate) questions: Arc<Questions>,
}

#[async_trait]
impl UserAsker for SessionAsker {
    async fn ask(&self, question: &Question) -> Option<String> {
        let id = question.reference.clone();
        self.questions.wait(id, question.clone()).await
    }
}
