//! The outer ReAct machine as a blocking `statig` machine (crate-private; see
//! [`crate::react::Run`] for the facade). Handlers are pure: they read the event and the
//! data, record the chart row they take, and push effects to the data's outbox.

use statig::blocking::*;

use crate::agent_event::Outcome as RunOutcome;
use crate::chart::ReactRow as Row;
use crate::error::RunError;
use crate::event::Event;
use crate::execute_result::StepEnd;
use crate::process::StepOutcome;
use crate::react::config::Decision;
use crate::react::data::ReactData;

/// What the facade feeds the machine: an external event or one of its internal events.
#[derive(Debug)]
pub(crate) enum Input<'a> {
    /// An event from outside.
    Ext(&'a Event),
    /// Fed on entering Planning.
    Plan,
    /// Fed on entering Observing.
    Decide,
    /// The inner machine reached a terminal state.
    InnerEnded,
}

/// The statig machine; all data lives in the context ([`ReactData`]).
#[derive(Debug, Default)]
pub(crate) struct ReactMachine;

#[state_machine(
    initial = "State::init()",
    state(derive(Debug, Clone, PartialEq, Eq)),
    superstate(derive(Debug))
)]
impl ReactMachine {
    /// Root: every event no state accepted ends here and is reported as unhandled.
    #[superstate]
    fn root(context: &mut ReactData, event: &Input<'_>) -> Outcome<State> {
        let _ = event;
        context.unhandled = true;
        Handled
    }

    /// Active: Abort → Finishing (aborted), StoreWriteFailed → Failed.
    #[superstate(superstate = "root")]
    fn active(context: &mut ReactData, event: &Input<'_>) -> Outcome<State> {
        match event {
            Input::Ext(Event::TimerElapsed {
                timer_id: crate::react::RUN_DEADLINE_TIMER,
            }) => {
                context.take(Row::ActiveRunDeadline);
                context.deadline_armed = false;
                context.deadline_abort = true;
                Handled
            }
            Input::Ext(e @ Event::Abort { reason, .. }) => {
                context.forward_abort(e);
                context.take(Row::ActiveAbort);
                context.absorb_aborted_step();
                context.finish(RunOutcome::Aborted, reason.clone(), None);
                Transition(State::finishing())
            }
            Input::Ext(e @ Event::Steer { text }) => {
                context.take(Row::ActiveSteer);
                context.steer(e, text);
                Handled
            }
            Input::Ext(Event::Subtask { tool, arguments }) => {
                context.take(Row::ActiveSubtask);
                context
                    .subtasks
                    .push_back((tool.clone(), arguments.clone()));
                Handled
            }
            Input::Ext(Event::TitleReady { title }) => {
                context.take(Row::ActiveTitle);
                context.titled(title.as_deref());
                Handled
            }
            Input::Ext(Event::SwitchModel { model }) => {
                context.take(Row::ActiveSwitchModel);
                context.switch_model(model);
                Handled
            }
            Input::Ext(Event::SetTools { tools, immune }) => {
                context.take(Row::ActiveSetTools);
                context.cfg.tools = tools.clone();
                context.cfg.step.immune = immune.clone();
                Handled
            }
            Input::Ext(Event::StoreWriteFailed { error }) => {
                context.take(Row::ActiveStoreFailed);
                context.halt_io();
                context.finish(
                    RunOutcome::Failed,
                    "store_write_failed".into(),
                    Some(RunError::StoreWrite {
                        message: error.clone(),
                    }),
                );
                Transition(State::failed())
            }
            _ => Super,
        }
    }

    /// Init: Start → Planning, Resume → Executing (pending tools) | Planning.
    #[state(superstate = "active")]
    fn init(context: &mut ReactData, event: &Input<'_>) -> Outcome<State> {
        match event {
            Input::Ext(Event::Start {
                run_id,
                history,
                input,
                session_turns,
            }) => {
                context.take(Row::InitStart);
                context.start(run_id, history, input, *session_turns);
                Transition(State::planning())
            }
            Input::Ext(Event::Resume {
                run_id,
                history,
                session_turns,
                committed_steps,
                pending,
            }) => {
                context.start(run_id, history, &[], *session_turns);
                context.committed_steps = *committed_steps;
                match pending {
                    Some(p) => {
                        context.take(Row::InitResumeTools);
                        context.resume_step(p);
                        Transition(State::executing())
                    }
                    None => {
                        context.take(Row::InitResume);
                        Transition(State::planning())
                    }
                }
            }
            _ => Super,
        }
    }

    /// Planning: Plan → Finishing (max steps) | Compacting | Executing.
    #[state(superstate = "active")]
    fn planning(context: &mut ReactData, event: &Input<'_>) -> Outcome<State> {
        match event {
            Input::Plan if context.max_steps_reached() => {
                context.take(Row::PlanningMaxSteps);
                context.finish(RunOutcome::Completed, "max_steps".into(), None);
                Transition(State::finishing())
            }
            Input::Plan if context.limit_stops() => {
                context.take(Row::PlanningLimitStop);
                let reason = context.note_limit();
                context.finish(RunOutcome::Completed, reason, None);
                Transition(State::finishing())
            }
            Input::Plan if context.limit_asks_final_answer() => {
                context.take(Row::PlanningLimitFinal);
                context.note_limit();
                context.limit_final_ran = true;
                context.execute();
                Transition(State::executing())
            }
            Input::Plan if context.subtask_queued() => {
                context.take(Row::PlanningSubtask);
                context.run_subtask();
                Transition(State::executing())
            }
            Input::Plan if context.over_threshold() => {
                context.take(Row::PlanningCompact);
                context.compact("threshold");
                Transition(State::compacting())
            }
            Input::Plan => {
                context.take(Row::PlanningExecute);
                context.execute();
                Transition(State::executing())
            }
            _ => Super,
        }
    }

    /// Executing: InnerEnded → Observing | Compacting | Finishing (failed, or aborted after draining);
    /// Abort → Executing while immune tools drain (inner events are forwarded
    /// by the facade before this handler sees `InnerEnded`).
    #[state(superstate = "active")]
    fn executing(context: &mut ReactData, event: &Input<'_>) -> Outcome<State> {
        match event {
            Input::Ext(e @ Event::Abort { reason, .. }) => {
                if context.forward_abort(e) {
                    context.take(Row::ExecutingAbortDrain);
                    context.abort_reason = Some(reason.clone());
                    context.emit_abort(reason);
                    Handled
                } else {
                    Super
                }
            }
            Input::InnerEnded => match context.step_outcome() {
                Some(StepOutcome::Success) => {
                    context.take(Row::ExecutingSuccess);
                    context.absorb_step();
                    Transition(State::observing())
                }
                Some(StepOutcome::ContextOverflow(e)) => {
                    context.take(Row::ExecutingOverflow);
                    context.next_attempt = context.step.as_ref().map(|s| s.request().attempt + 1);
                    context.end_step(StepEnd::ContextOverflow);
                    context.compact_overflow(&e);
                    Transition(State::compacting())
                }
                Some(StepOutcome::Failed(_)) if context.fallback_available() => {
                    context.take(Row::ExecutingFallback);
                    context.fall_back();
                    Transition(State::executing())
                }
                Some(StepOutcome::Failed(e)) => {
                    context.take(Row::ExecutingError);
                    context.end_step(StepEnd::Failed);
                    context.finish(
                        RunOutcome::Failed,
                        e.kind.to_string(),
                        Some(RunError::Model { error: e.clone() }),
                    );
                    Transition(State::finishing())
                }
                // `InnerEnded` is fed only once the step has ended (after draining, if
                // immune tools ran): row `executing_aborted` needs no guard.
                Some(StepOutcome::Aborted) => {
                    context.take(Row::ExecutingAborted);
                    context.absorb_aborted_step();
                    let reason = context
                        .abort_reason
                        .clone()
                        .unwrap_or_else(|| "aborted".into());
                    context.finish(RunOutcome::Aborted, reason, None);
                    Transition(State::finishing())
                }
                None => Super,
            },
            _ => Super,
        }
    }

    /// Observing: Decide → Finishing (stop, final answer) | Compacting | Planning.
    #[state(superstate = "active")]
    fn observing(context: &mut ReactData, event: &Input<'_>) -> Outcome<State> {
        match event {
            Input::Decide => match context.observe() {
                Decision::Stop => {
                    context.take(Row::ObservingStop);
                    let reason = context.stop_requested.unwrap_or("stopped");
                    context.finish(RunOutcome::Completed, reason.into(), None);
                    Transition(State::finishing())
                }
                Decision::Compact => {
                    context.take(Row::ObservingCompact);
                    context.compact("budget");
                    Transition(State::compacting())
                }
                Decision::Continue => {
                    context.take(Row::ObservingContinue);
                    Transition(State::planning())
                }
                Decision::Complete if context.output_retry() => {
                    context.take(Row::ObservingRetryOutput);
                    context.retry_output();
                    Transition(State::planning())
                }
                Decision::Complete if context.output_invalid() => {
                    context.take(Row::ObservingOutputInvalid);
                    context.fail_output();
                    Transition(State::finishing())
                }
                Decision::Complete => {
                    context.take(Row::ObservingComplete);
                    let reason = match context.limit_hit {
                        Some(kind) => kind.reason(),
                        None => "final_answer".into(),
                    };
                    context.finish(RunOutcome::Completed, reason, None);
                    Transition(State::finishing())
                }
            },
            _ => Super,
        }
    }

    /// Compacting: CompactionDone → Planning, CompactionFailed → Finishing, CompactionVetoed →
    /// Finishing when the model refused the context, else Planning.
    #[state(superstate = "active")]
    fn compacting(context: &mut ReactData, event: &Input<'_>) -> Outcome<State> {
        match event {
            Input::Ext(Event::CompactionDone { messages, removed }) => {
                context.take(Row::CompactingDone);
                context.compacted(messages, *removed);
                Transition(State::planning())
            }
            Input::Ext(Event::CompactionFailed { error }) => {
                context.take(Row::CompactingFailed);
                context.finish(
                    RunOutcome::Failed,
                    "compaction_failed".into(),
                    Some(RunError::Compaction {
                        message: error.clone(),
                    }),
                );
                Transition(State::finishing())
            }
            Input::Ext(Event::CompactionVetoed { reason }) if context.compaction_required() => {
                context.take(Row::CompactingVetoedRequired);
                context.compaction_vetoed(reason);
                context.finish(
                    RunOutcome::Failed,
                    "compaction_vetoed".into(),
                    Some(RunError::Compaction {
                        message: format!(
                            "the model refused the context and a before_compact hook vetoed \
                             the compaction: {reason}"
                        ),
                    }),
                );
                Transition(State::finishing())
            }
            Input::Ext(Event::CompactionVetoed { reason }) => {
                context.take(Row::CompactingVetoed);
                context.compaction_vetoed(reason);
                Transition(State::planning())
            }
            _ => Super,
        }
    }

    /// Finishing: the run-end entry is being committed. RunEndCommitted → the decided end,
    /// StoreWriteFailed → Failed, Abort ignored (the end is already decided).
    #[state(superstate = "root", entry_action = "enter_finishing")]
    fn finishing(context: &mut ReactData, event: &Input<'_>) -> Outcome<State> {
        match event {
            Input::Ext(Event::RunEndCommitted) => {
                let next = match context.ending_outcome() {
                    Some(RunOutcome::Completed) => {
                        context.take(Row::FinishingCompleted);
                        State::completed()
                    }
                    Some(RunOutcome::Failed) => {
                        context.take(Row::FinishingFailed);
                        State::failed()
                    }
                    Some(RunOutcome::Aborted) => {
                        context.take(Row::FinishingAborted);
                        State::aborted()
                    }
                    // Finishing is entered only through `finish` with a commit, which
                    // holds the ending; without one the event is reported unhandled.
                    None => return Super,
                };
                Transition(next)
            }
            Input::Ext(Event::StoreWriteFailed { error }) => {
                context.take(Row::FinishingStoreFailed);
                context.commit_failed(error);
                Transition(State::failed())
            }
            Input::Ext(Event::Abort { .. }) => {
                context.take(Row::FinishingAbort);
                Handled
            }
            Input::Ext(Event::TitleReady { .. }) => {
                context.take(Row::FinishingTitle);
                Handled
            }
            Input::Ext(Event::TimerElapsed {
                timer_id: crate::react::RUN_DEADLINE_TIMER,
            }) => {
                context.take(Row::FinishingRunDeadline);
                Handled
            }
            _ => Super,
        }
    }

    /// Entering `Finishing` commits the decided end's run-end entry (the one place).
    #[action]
    fn enter_finishing(context: &mut ReactData) {
        context.commit_end();
    }

    /// Entering a terminal state reports the decided end (the one place).
    #[action]
    fn enter_end(context: &mut ReactData) {
        context.report_end();
    }

    /// Completed: terminal, absorbs every event (reported unhandled).
    #[state(superstate = "root", entry_action = "enter_end")]
    fn completed(event: &Input<'_>) -> Outcome<State> {
        let _ = event;
        Super
    }

    /// Failed: terminal, absorbs every event (reported unhandled).
    #[state(superstate = "root", entry_action = "enter_end")]
    fn failed(event: &Input<'_>) -> Outcome<State> {
        let _ = event;
        Super
    }

    /// Aborted: terminal, absorbs every event (reported unhandled).
    #[state(superstate = "root", entry_action = "enter_end")]
    fn aborted(event: &Input<'_>) -> Outcome<State> {
        let _ = event;
        Super
    }
}
