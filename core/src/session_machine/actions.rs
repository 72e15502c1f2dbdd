//! The session chart's row actions (`statecharts/session.toml`): one function per row that is
//! not ignored, named after the row (or the `action` rows share): methods of [`Actions`], which implements the generated
//! trait [`SessionActions`], so the compiler ties their names and signatures to the chart.
//! Helpers are free functions.

use crate::agent_event::{AgentEvent, SteeringStatus};

use super::data::SessionData;
use super::dispatch::SessionActions;
use super::{Forward, RunInput, SessionEffect, SessionInput as Input, SessionReply};

fn text<'a>(input: &Input<'a>) -> &'a str {
    match input {
        Input::Prompt { text, .. } | Input::Steer { text, .. } => text,
        _ => "",
    }
}

fn reply(data: &mut SessionData, r: SessionReply) {
    data.push(SessionEffect::Reply(r));
}

/// Starts a run of `input`, seeded with the session's whitelist; the run's counters start over.
fn start(data: &mut SessionData, input: RunInput) {
    data.steers_sent = 0;
    data.abort = None;
    let whitelist = data.whitelist.clone();
    data.push(SessionEffect::StartRun { input, whitelist });
}

/// The next steering reference.
fn next_ref(data: &mut SessionData) -> u64 {
    data.steering_ref += 1;
    data.steering_ref
}

fn steering(data: &mut SessionData, input: &Input<'_>, status: SteeringStatus) -> u64 {
    let steering_ref = next_ref(data);
    data.publish(AgentEvent::SteeringReceived {
        steering_ref,
        text: text(input).to_string(),
        status,
    });
    steering_ref
}

/// Drops the queued prompts when the abort asks to (`prompt_dropped` each).
fn drop_queue(data: &mut SessionData, input: &Input<'_>) {
    if let Input::Abort {
        clear_queue: true, ..
    } = input
    {
        let dropped: Vec<String> = data.queued.drain(..).collect();
        for text in dropped {
            data.publish(AgentEvent::PromptDropped { text });
        }
        data.push(SessionEffect::DropQueued);
    }
}

fn use_model(data: &mut SessionData, input: &Input<'_>) -> Option<(String, String)> {
    let Input::SwitchModel { model, .. } = input else {
        return None;
    };
    let from = std::mem::replace(&mut data.model, model.to_string());
    data.push(SessionEffect::UseModel(model.to_string()));
    Some((from, model.to_string()))
}

/// R-CTL-3: an abort always produces `agent_abort`, even when the run ended on its own just
/// before the abort reached it.
fn announce_abort(data: &mut SessionData, input: &Input<'_>) {
    let announced = matches!(
        input,
        Input::RunEnded {
            announced_abort: true,
            ..
        }
    );
    if let Some(reason) = data.abort.take() {
        if !announced {
            data.publish(AgentEvent::AgentAbort { reason });
        }
    }
}

/// The session chart's actions, one method of [`SessionActions`] each.
pub(crate) struct Actions;

impl SessionActions for Actions {
    /// Idle, a prompt the hook allows: a run starts with it.
    fn idle_prompt(data: &mut SessionData, input: &Input<'_>) {
        data.publish(AgentEvent::PromptReceived {
            text: text(input).to_string(),
        });
        start(data, RunInput::Command);
        reply(data, SessionReply::Started);
    }

    /// Idle, a steering message the hook allows: a run starts with it.
    fn idle_steer(data: &mut SessionData, input: &Input<'_>) {
        steering(data, input, SteeringStatus::StartedRun);
        start(data, RunInput::Command);
        reply(data, SessionReply::Started);
    }

    /// Idle, a subtask: a run starts with it and no new user message.
    fn idle_subtask(data: &mut SessionData, _: &Input<'_>) {
        start(data, RunInput::Command);
        reply(data, SessionReply::Started);
    }

    /// Idle, an abort: nothing to stop, `agent_abort` all the same.
    fn idle_abort(data: &mut SessionData, input: &Input<'_>) {
        drop_queue(data, input);
        if let Input::Abort { reason, .. } = input {
            data.publish(AgentEvent::AgentAbort {
                reason: reason.to_string(),
            });
        }
        reply(data, SessionReply::AbortIdle);
    }

    /// Idle, another known model: switched now.
    fn idle_switch_model(data: &mut SessionData, input: &Input<'_>) {
        if let Some((from, to)) = use_model(data, input) {
            data.publish(AgentEvent::ModelSwitched { from, to });
        }
        reply(data, SessionReply::ModelSwitched(true));
    }

    /// Idle, every handle gone: closed.
    fn idle_close(_: &mut SessionData, _: &Input<'_>) {}

    /// Busy, a prompt the hook allows: queued.
    fn busy_prompt(data: &mut SessionData, input: &Input<'_>) {
        let text = text(input).to_string();
        data.publish(AgentEvent::PromptReceived { text: text.clone() });
        data.queued.push_back(text.clone());
        data.push(SessionEffect::QueuePrompt);
        let queued = data.queued.len();
        data.publish(AgentEvent::PromptQueued { text, queued });
        reply(data, SessionReply::PromptQueued(queued));
    }

    /// Busy, steering with room: forwarded into the run.
    fn busy_steer(data: &mut SessionData, input: &Input<'_>) {
        let steering_ref = steering(data, input, SteeringStatus::Queued);
        data.push(SessionEffect::Forward(Forward::Steer(
            text(input).to_string(),
        )));
        data.steers_sent += 1;
        reply(data, SessionReply::SteerQueued(steering_ref));
    }

    /// Busy, steering at capacity: rejected.
    fn busy_steer_full(data: &mut SessionData, input: &Input<'_>) {
        steering(data, input, SteeringStatus::RejectedFull);
        let capacity = data.steering_capacity;
        reply(data, SessionReply::QueueFull { capacity });
    }

    /// Busy, a subtask: forwarded into the run.
    fn busy_subtask(data: &mut SessionData, _: &Input<'_>) {
        data.push(SessionEffect::Forward(Forward::Subtask));
        reply(data, SessionReply::SubtaskQueued);
    }

    /// Busy, another known model: the run switches at its next step (and publishes
    /// `model_switched` itself); later runs use it.
    fn busy_switch_model(data: &mut SessionData, input: &Input<'_>) {
        if let Some((_, to)) = use_model(data, input) {
            data.push(SessionEffect::Forward(Forward::SwitchModel(to)));
        }
        reply(data, SessionReply::ModelSwitched(true));
    }

    /// Busy, the tool set changed: the run offers it from its next step.
    fn busy_tools_changed(data: &mut SessionData, _: &Input<'_>) {
        data.push(SessionEffect::Forward(Forward::SetTools));
    }

    /// Busy, every handle gone: the run is aborted.
    fn busy_close(data: &mut SessionData, _: &Input<'_>) {
        data.push(SessionEffect::Forward(Forward::Abort {
            reason: "session closed".into(),
            kill: crate::event::KillPolicy::default(),
        }));
    }

    /// Running or Aborting, an abort: forwarded (again), the first reason remembered.
    fn abort_run(data: &mut SessionData, input: &Input<'_>) {
        drop_queue(data, input);
        if let Input::Abort { reason, kill, .. } = input {
            if data.abort.is_none() {
                data.abort = Some(reason.to_string());
            }
            data.push(SessionEffect::Forward(Forward::Abort {
                reason: reason.to_string(),
                kill: *kill,
            }));
        }
        reply(data, SessionReply::Aborting);
    }

    /// Running (or Aborting, once announced), the run ended with something next: the next run
    /// starts, of the leftover steering joined, else of the first queued prompt.
    fn start_next(data: &mut SessionData, input: &Input<'_>) {
        data.push(SessionEffect::CloseRun);
        data.publish(AgentEvent::AgentResumed {
            trigger: "queued_prompt".into(),
        });
        match input {
            Input::RunEnded { leftover, .. } if !leftover.is_empty() => {
                start(data, RunInput::Leftover(leftover.join("\n\n")))
            }
            _ => {
                data.queued.pop_front();
                start(data, RunInput::Queued)
            }
        }
    }

    /// Running, the run ended with nothing next: idle.
    fn running_ended_idle(data: &mut SessionData, _: &Input<'_>) {
        data.push(SessionEffect::CloseRun);
        data.push(SessionEffect::Idle);
    }

    /// Aborting, the run ended with something next: announced, then the next run starts.
    fn aborting_ended_next(data: &mut SessionData, input: &Input<'_>) {
        announce_abort(data, input);
        Self::start_next(data, input);
    }

    /// Aborting, the run ended with nothing next: announced, idle.
    fn aborting_ended_idle(data: &mut SessionData, input: &Input<'_>) {
        announce_abort(data, input);
        data.push(SessionEffect::CloseRun);
        data.push(SessionEffect::Idle);
    }

    /// A prompt the hook rejected.
    fn prompt_rejected(data: &mut SessionData, input: &Input<'_>) {
        if let Input::Prompt {
            text,
            rejected: Some(reason),
        } = input
        {
            data.publish(AgentEvent::PromptRejected {
                text: text.to_string(),
                reason: reason.to_string(),
            });
            reply(data, SessionReply::Rejected(reason.to_string()));
        }
    }

    /// A steering message the hook rejected.
    fn steer_rejected(data: &mut SessionData, input: &Input<'_>) {
        if let Input::Steer {
            rejected: Some(reason),
            ..
        } = input
        {
            steering(data, input, SteeringStatus::RejectedHook);
            reply(data, SessionReply::Rejected(reason.to_string()));
        }
    }

    /// A model the registry does not know.
    fn switch_unknown_model(data: &mut SessionData, input: &Input<'_>) {
        if let Input::SwitchModel { model, .. } = input {
            reply(data, SessionReply::UnknownModel(model.to_string()));
        }
    }

    /// Already the model: nothing changes.
    fn switch_same_model(data: &mut SessionData, _: &Input<'_>) {
        reply(data, SessionReply::ModelSwitched(false));
    }

    /// "Approve always": the scope joins the session's whitelist (R-CTL-4).
    fn approved_always(data: &mut SessionData, input: &Input<'_>) {
        if let Input::ApprovalAnswered { scope, .. } = input {
            data.whitelist.insert(scope.to_string());
        }
    }
}
