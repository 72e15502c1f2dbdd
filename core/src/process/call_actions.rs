//! The tool-call chart's row actions (`statecharts/tool_call.toml`): one function per row,
//! named after it (or the `action` rows share), that does what the row means for slot `i` after the generated dispatch
//! ([`crate::process::call_dispatch`]) chose the row and moved the call (`from` is the state
//! the call left). An action never names a row or a target; what it produces is checked
//! against the row's declared `effects` in debug builds (and with the `conformance` feature).
//! They are methods of [`Actions`], which implements the generated trait [`ToolCallActions`]:
//! the compiler ties their names and signatures to the chart.

use std::collections::BTreeSet;

use crate::agent_event::AgentEvent;
use crate::effect::Effect;
use crate::event::{ApprovalDecision, GateVerdict};
use crate::message::ToolStatus;
use crate::process::call_dispatch::ToolCallActions;
use crate::process::call_guards::Facts;
use crate::process::calls::Calls;
use crate::process::data::ToolCallState;
use crate::tool_check::unknown_tool_message;

/// Kills a running call and stops its deadline.
fn kill(data: &mut Calls<'_>, i: usize, from: ToolCallState) {
    let tool_call_id = data.tools.slots.get(i).call.id.clone();
    data.outbox.push(Effect::KillTool { tool_call_id });
    data.cancel_deadline(i, from);
}

/// Stops what a call that has not started waits on: a question's deadline, an approval timer.
fn stop_waiting(data: &mut Calls<'_>, i: usize, from: ToolCallState) {
    match from {
        ToolCallState::AwaitingUser => data.cancel_deadline(i, from),
        ToolCallState::Asking => data.cancel_approval_timer(i),
        _ => {}
    }
}

/// `tool_skipped_for_steering` for slot `i`.
fn announce_skip(data: &mut Calls<'_>, i: usize) {
    let tool_call_id = data.tools.slots.get(i).call.id.clone();
    data.outbox
        .emit(AgentEvent::ToolSkippedForSteering { tool_call_id });
}

/// Closes slot `i` with an `aborted` or `skipped` result.
fn close(data: &mut Calls<'_>, i: usize, status: ToolStatus) {
    let content = if status == ToolStatus::Skipped {
        "skipped: the user sent a steering message"
    } else {
        "aborted"
    };
    data.record_result(i, status, content.into());
}

/// The tool-call chart's actions, one method of [`ToolCallActions`] each.
pub(crate) struct Actions;

impl ToolCallActions for Actions {
    /// The arguments were not a JSON object: an error result saying what is wrong.
    fn commit_invalid(data: &mut Calls<'_>, i: usize, _: ToolCallState, _: &Facts<'_>) {
        let why = data.tools.slots.get(i).call.invalid_arguments.clone();
        data.record_result(i, ToolStatus::Error, why.unwrap_or_default());
    }

    /// An unknown tool: `tool_call_unknown`, and an error result naming the nearest offered tool.
    fn commit_unknown(data: &mut Calls<'_>, i: usize, _: ToolCallState, _: &Facts<'_>) {
        let call = data.tools.slots.get(i).call.clone();
        data.outbox.emit(AgentEvent::ToolCallUnknown {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
        });
        let offered: BTreeSet<&str> = data.request.tools.iter().map(|t| t.name.as_str()).collect();
        let why = unknown_tool_message(&call.name, offered.iter().copied());
        data.record_result(i, ToolStatus::Error, why);
    }

    /// Arguments against the tool's schema: an error result listing the violations (R-TOOL-1).
    fn commit_schema_invalid(data: &mut Calls<'_>, i: usize, _: ToolCallState, _: &Facts<'_>) {
        let slot = data.tools.slots.get(i);
        let why = slot
            .rejected
            .as_ref()
            .map(|v| v.message(&slot.call.name))
            .unwrap_or_default();
        data.record_result(i, ToolStatus::Error, why);
    }

    /// A refused doom loop: an error result, and the run stops after the step.
    fn commit_loop_refused(data: &mut Calls<'_>, i: usize, _: ToolCallState, facts: &Facts<'_>) {
        let repeats = match facts {
            Facts::Commit { repeats, .. } => *repeats,
            _ => 0,
        };
        data.ending.stop("stopped");
        let why = format!(
            "refused: `{}` was called {repeats} times in a row with identical arguments (doom loop)",
            data.tools.slots.get(i).call.name
        );
        data.record_result(i, ToolStatus::Error, why);
    }

    /// A tool rule denies the call, committed or resumed (R-TOOL-3): the rule is announced and
    /// the call gets a denied result naming it; it never runs.
    fn deny_by_rule(data: &mut Calls<'_>, i: usize, _: ToolCallState, _: &Facts<'_>) {
        data.announce_rule(i);
        let why = data.denial(i);
        data.record_result(i, ToolStatus::Denied, why);
    }

    /// A committed or resumed call waits (for a human: a doom loop whose policy asks, an
    /// approval; or for its turn to run): the deciding rule, if any, is announced.
    fn announce_rule(data: &mut Calls<'_>, i: usize, _: ToolCallState, _: &Facts<'_>) {
        data.announce_rule(i);
    }

    /// A pure tool's identical call is answered from the session's cache (R-TOOL-6).
    fn commit_cached(data: &mut Calls<'_>, i: usize, _: ToolCallState, _: &Facts<'_>) {
        let call = data.tools.slots.get(i).call.clone();
        let Some(hit) = data.cached(&call).cloned() else {
            return;
        };
        data.outbox.emit(AgentEvent::ToolCacheHit {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            cached_from: hit.tool_call_id.clone(),
        });
        data.record_result(i, ToolStatus::Completed, hit.content);
    }

    /// The session log holds the call's result: it is kept, nothing runs (R-IDEM-5).
    fn restore_result(data: &mut Calls<'_>, i: usize, _: ToolCallState, facts: &Facts<'_>) {
        if let Facts::Restore { stored } = facts {
            data.tools.slots.get_mut(i).result = stored.cloned();
        }
    }

    /// The built-in `ask_user` call puts its question to the person.
    fn start_ask_user(data: &mut Calls<'_>, i: usize, _: ToolCallState, _: &Facts<'_>) {
        data.ask_user(i);
    }

    /// The person answered: the answer is the call's result.
    fn user_answered(data: &mut Calls<'_>, i: usize, from: ToolCallState, facts: &Facts<'_>) {
        data.cancel_deadline(i, from);
        let answer = match facts {
            Facts::Answered(Some(a)) => (*a).to_string(),
            _ => String::new(),
        };
        let call = data.tools.slots.get(i).call.clone();
        data.outbox.emit(AgentEvent::UserResponded {
            reference: call.id.clone(),
            answer: answer.clone(),
        });
        if data.cfg.detailed_events {
            data.outbox.emit(AgentEvent::AgentResumed {
                trigger: "user_respond".into(),
            });
        }
        data.record_result(i, ToolStatus::Completed, answer);
    }

    /// Nobody can answer (no person attached): an error result.
    fn user_unavailable(data: &mut Calls<'_>, i: usize, from: ToolCallState, _: &Facts<'_>) {
        data.cancel_deadline(i, from);
        let why = "nobody can answer: no person is attached to this run (run it in a session or in `agentloop chat`)";
        data.record_result(i, ToolStatus::Error, why.into());
    }

    /// Nobody answered in time: an error result.
    fn user_deadline(data: &mut Calls<'_>, i: usize, _: ToolCallState, _: &Facts<'_>) {
        let ms = data.cfg.ask_user_timeout_ms.unwrap_or_default();
        let why = format!("the person did not answer within {ms} ms");
        data.record_result(i, ToolStatus::Error, why);
    }

    /// The `before_tool` hooks are asked (R-EXT-1).
    fn start_gate(data: &mut Calls<'_>, i: usize, _: ToolCallState, _: &Facts<'_>) {
        data.tools.slots.get_mut(i).gated = true;
        let call = data.tools.slots.get(i).call.clone();
        data.outbox.push(Effect::GateTool { call });
    }

    /// The call runs (its turn came, or the hooks let it run as it is).
    fn run(data: &mut Calls<'_>, i: usize, _: ToolCallState, _: &Facts<'_>) {
        data.run(i);
    }

    /// The hooks replaced the arguments: the call runs with theirs.
    fn gate_modified(data: &mut Calls<'_>, i: usize, _: ToolCallState, facts: &Facts<'_>) {
        if let Facts::Gate(GateVerdict::Modify { arguments }) = facts {
            data.tools.slots.get_mut(i).call.arguments = arguments.clone();
        }
        data.run(i);
    }

    /// The hooks blocked the call: a denied result.
    fn gate_blocked(data: &mut Calls<'_>, i: usize, _: ToolCallState, facts: &Facts<'_>) {
        let reason = match facts {
            Facts::Gate(GateVerdict::Block { reason }) => reason.clone(),
            _ => String::new(),
        };
        let call = data.tools.slots.get(i).call.clone();
        data.outbox.emit(AgentEvent::ToolBlocked {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            reason: reason.clone(),
        });
        data.record_result(i, ToolStatus::Denied, format!("blocked: {reason}"));
    }

    /// Nothing to do: the hooks want a human to decide (the call waits for its turn), another
    /// call of the same scope was approved "always" (no question needed), an abort or steering
    /// spares an immune running call (it runs to its end).
    fn nothing(_: &mut Calls<'_>, _: usize, _: ToolCallState, _: &Facts<'_>) {}

    /// The call is put to a human (R-CTL-4), with the approval timer if one is set.
    fn ask(data: &mut Calls<'_>, i: usize, _: ToolCallState, _: &Facts<'_>) {
        let call = data.tools.slots.get(i).call.clone();
        data.outbox.emit(AgentEvent::ApprovalRequired {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
        data.outbox.push(Effect::RequestApproval { call });
        data.start_approval_timer(i);
    }

    /// A human approved the call (it waits for its turn to run), and the part `modified`
    /// shares: the approval timer stops, the answer and the resume are announced (before any
    /// event of the resumed run).
    fn resolved(data: &mut Calls<'_>, i: usize, _: ToolCallState, facts: &Facts<'_>) {
        data.cancel_approval_timer(i);
        let Facts::Approval(decision) = facts else {
            return;
        };
        let tool_call_id = data.tools.slots.get(i).call.id.clone();
        data.outbox.emit(AgentEvent::ApprovalResolved {
            tool_call_id,
            decision: (*decision).clone(),
            status: decision.status(),
        });
        data.outbox.emit(AgentEvent::AgentResumed {
            trigger: "tool_approved".into(),
        });
    }

    /// A human approved the call with new arguments.
    fn modified(data: &mut Calls<'_>, i: usize, from: ToolCallState, facts: &Facts<'_>) {
        if let Facts::Approval(ApprovalDecision::Modified { arguments }) = facts {
            data.tools.slots.get_mut(i).call.arguments = arguments.clone();
        }
        Self::resolved(data, i, from, facts);
    }

    /// A human rejected the call, or nobody answered in time (the approver's wait is withdrawn):
    /// a denied result; the run stops after the step unless it resumes on its own.
    fn rejected(data: &mut Calls<'_>, i: usize, _: ToolCallState, facts: &Facts<'_>) {
        match facts {
            Facts::ApprovalTimer(decision) => {
                let tool_call_id = data.tools.slots.get(i).call.id.clone();
                data.outbox.push(Effect::WithdrawApproval { tool_call_id });
                data.denied(i, decision);
            }
            Facts::Approval(decision) => {
                data.cancel_approval_timer(i);
                data.denied(i, decision);
            }
            _ => {}
        }
    }

    /// The tool succeeded or failed: the runtime's result ends the call, its deadline stops
    /// and the result is recorded.
    fn finish(data: &mut Calls<'_>, i: usize, from: ToolCallState, facts: &Facts<'_>) {
        let Facts::Finished { status, content } = facts else {
            return;
        };
        data.cancel_deadline(i, from);
        data.record_result(i, *status, (*content).to_string());
    }

    /// The call's deadline passed: the tool is killed and the call fails.
    fn deadline(data: &mut Calls<'_>, i: usize, _: ToolCallState, _: &Facts<'_>) {
        let slot = data.tools.slots.get(i);
        let (tool_call_id, ms) = (slot.call.id.clone(), slot.policy.timeout_ms);
        data.outbox.push(Effect::KillTool { tool_call_id });
        let why = format!("tool timed out after {} ms", ms.unwrap_or_default());
        data.record_result(i, ToolStatus::Error, why);
    }

    /// An abort kills the running call.
    fn abort_killed(data: &mut Calls<'_>, i: usize, from: ToolCallState, _: &Facts<'_>) {
        kill(data, i, from);
        let tool_call_id = data.tools.slots.get(i).call.id.clone();
        data.outbox.emit(AgentEvent::ToolKilled { tool_call_id });
        close(data, i, ToolStatus::Aborted);
    }

    /// An abort closes a call that has not started.
    fn abort_unstarted(data: &mut Calls<'_>, i: usize, from: ToolCallState, _: &Facts<'_>) {
        stop_waiting(data, i, from);
        close(data, i, ToolStatus::Aborted);
    }

    /// Steering with `skip_remaining` kills the running call.
    fn skip_killed(data: &mut Calls<'_>, i: usize, from: ToolCallState, _: &Facts<'_>) {
        kill(data, i, from);
        announce_skip(data, i);
        close(data, i, ToolStatus::Skipped);
    }

    /// Steering with `skip_remaining` skips a call that has not started.
    fn skip_unstarted(data: &mut Calls<'_>, i: usize, from: ToolCallState, _: &Facts<'_>) {
        stop_waiting(data, i, from);
        announce_skip(data, i);
        close(data, i, ToolStatus::Skipped);
    }
}
