//! Approvals through the session handle (R-CTL-4): the session installs a `SessionApprover`
//! as the agent's approver. A request parks until `approve`/`reject`/`modify` answers it or the
//! run withdraws it. The approval timeout is the machine's (a timer of the step,
//! `StepConfig::approval_timeout_ms`, which the session sets from its
//! `SessionConfig::approval_timeout_ms`): when it fires first the machine denies the call
//! (status timeout, counted as a reject) and withdraws the request, which is then forgotten
//! here. "Approve always" whitelists the
//! call's [`approval_scope`] for the rest of the session: the tool, or for a shell-like tool
//! its command family ([`command_family`]: approving `git status` always covers `git status -s`
//! and `git log`, never `rm -rf x`), the same scope a run's machine whitelists on
//! `ApprovedAlways`. The session's whitelist is the session machine's (row `approved_always`
//! of `statecharts/session.toml`), which seeds every run it starts: the run's own machine
//! then never asks about a whitelisted scope. Here are only the pending answers' channels.

use std::sync::Arc;

use async_trait::async_trait;

use crate::agent_event::AgentEvent;
use crate::event::ApprovalDecision;
use crate::message::ToolCall;
use crate::runtime::Approver;

use super::bus::EventBus;
use super::waiting::Waiting;
use super::SessionError;

pub use agentloop_core::tool_rules::{approval_scope, command_family};

/// Pending approvals (the calls, and the answers' channels), shared by the handle and the
/// approver.
pub(crate) type Approvals = Waiting<ToolCall, ApprovalDecision>;

impl Approvals {
    /// Answers a pending approval. `answered` sees the call first (the session tells its
    /// machine, which whitelists the call's [`approval_scope`] on `always`), before the run
    /// gets the answer: a run the session starts after this one is seeded with it.
    pub(crate) fn answer(
        &self,
        bus: &EventBus,
        tool_call_id: &str,
        decision: ApprovalDecision,
        always: bool,
        answered: impl FnOnce(&ToolCall),
    ) -> Result<(), SessionError> {
        let (call, answer) = self
            .take(tool_call_id)
            .ok_or_else(|| SessionError::Approval(tool_call_id.to_string()))?;
        answered(&call);
        if always {
            bus.publish_current(AgentEvent::ToolApprovedAlways {
                tool: call.name.clone(),
                command_family: command_family(&call),
            });
        }
        // The run may have ended meanwhile (abort): then nobody waits, which is harmless.
        // The machine announces the resume (`agent_resumed`) before the resumed run's
        // events, or stops the run after a rejection (seed 001).
        let _ = answer.send(decision);
        Ok(())
    }
}

/// The approver a session installs into its agent.
pub(crate) struct SessionApprover {
    pub(crate) approvals: Arc<Approvals>,
}

#[async_trait]
impl Approver for SessionApprover {
    async fn decide(&self, call: &ToolCall) -> Option<ApprovalDecision> {
        // A whitelisted scope never gets here: the run's machine, seeded with the session's
        // whitelist, does not ask about it.
        // No deadline here: the machine's approval timer ends the wait (`withdraw`).
        let answer = self.approvals.wait(call.id.clone(), call.clone()).await;
        Some(answer.unwrap_or(ApprovalDecision::Rejected {
            reason: "approval channel closed".into(),
        }))
    }

    fn withdraw(&self, tool_call_id: &str) {
        self.approvals.take(tool_call_id);
    }
}
