//! The outer chart's row actions: one function per row of `statecharts/react.toml` (an ignored
//! row has none), named after the row's id (or the `action` rows share) and called by the generated dispatch
//! ([`crate::react::dispatch`]) once the row is taken. An action does the row's effects on the
//! data; it never chooses a row or a target state: the chart does. A row that enters a state
//! with its own data (the chart's `local`: [`Compaction`], [`Ended`]) returns that data, which
//! the generated dispatch moves into the state (statig state-local storage); a row of such a
//! state gets the state's data. A row that ends the run or compacts only decides; the entry
//! actions the chart names on `Finishing`, `Compacting` and the terminal states (and the exit
//! action of `Active`) do the rest, once.
//!
//! Each is a method of [`Actions`], which implements the generated trait [`ReactActions`] (one method
//! per row that acts and per entry/exit action the chart names, with the signature the dispatch calls): a missing action, one the chart does not
//! name or a wrong signature is a compile error.

use crate::agent_event::Outcome;
use crate::error::RunError;
use crate::event::Event;
use crate::execute_result::StepEnd;
use crate::process::StepOutcome;
use crate::react::context::{Compaction, Drain, Ended};
use crate::react::data::ReactData;
use crate::react::dispatch::ReactActions;
use crate::react::machine::Input;

/// The external event of `input`, if any.
fn ext<'a>(input: &Input<'a>) -> Option<&'a Event> {
    match input {
        Input::Ext(e) => Some(e),
        _ => None,
    }
}

/// The error text of a failure event (`CompactionFailed`, `StoreWriteFailed`), which the
/// row taking it is taken on (empty for any other input).
fn error_text(input: &Input<'_>) -> String {
    match ext(input) {
        Some(Event::CompactionFailed { error } | Event::StoreWriteFailed { error }) => {
            error.clone()
        }
        _ => String::new(),
    }
}

/// The outer chart's actions, one method of [`ReactActions`] each.
pub(crate) struct Actions;

impl ReactActions for Actions {
    /// `init_start`: persist the input, emit run_start, maybe generate a title.
    fn init_start(data: &mut ReactData, input: &Input<'_>) {
        if let Some(Event::Start {
            run_id,
            history,
            input,
            session_turns,
        }) = ext(input)
        {
            data.start(run_id, history, input, *session_turns);
        }
    }

    /// `init_resume_tools`: resume, then run the pending step's calls without results.
    fn init_resume_tools(data: &mut ReactData, input: &Input<'_>) {
        Self::resume(data, input);
        if let Some(Event::Resume {
            pending: Some(p), ..
        }) = ext(input)
        {
            data.resume_step(p);
        }
    }

    /// `init_resume`, and the part `init_resume_tools` shares: the run starts again from the
    /// persisted session (Planning re-requests the uncommitted step).
    fn resume(data: &mut ReactData, input: &Input<'_>) {
        if let Some(Event::Resume {
            run_id,
            history,
            session_turns,
            committed_steps,
            ..
        }) = ext(input)
        {
            data.start(run_id, history, &[], *session_turns);
            data.counters.committed_steps = *committed_steps;
        }
    }

    /// Entry action of `Compacting`: emit compact_start, request the compaction the row decided.
    fn start_compaction(data: &mut ReactData, compaction: &mut Compaction) {
        data.start_compaction(compaction);
    }

    /// Entry action of `Finishing`: the decided end becomes the result; commit its run-end entry.
    fn commit_end(data: &mut ReactData, ended: &mut Ended) {
        data.commit_end(ended);
    }

    /// Entry action of the terminal states: report the decided end (once).
    fn report_end(data: &mut ReactData, ended: &mut Ended) {
        data.report_end(ended);
    }

    /// Exit action of `Active`: the run is over, cancel its deadline timer if armed.
    fn disarm_deadline(data: &mut ReactData) {
        data.disarm_deadline();
    }

    /// `planning_max_steps_rejected` (no step is left to ask again), `observing_output_invalid`:
    /// the run fails (output_invalid).
    fn fail_output(data: &mut ReactData, _input: &Input<'_>) -> Ended {
        data.fail_output()
    }

    /// `planning_max_steps`: the run ends (max_steps).
    fn planning_max_steps(data: &mut ReactData, _input: &Input<'_>) -> Ended {
        data.decide_end(Outcome::Completed, "max_steps".into(), None)
    }

    /// `planning_limit_stop`: announce the limit, the run ends (usage_limit:<limit>).
    fn planning_limit_stop(data: &mut ReactData, _input: &Input<'_>) -> Ended {
        let reason = data.note_limit();
        data.decide_end(Outcome::Completed, reason, None)
    }

    /// `planning_limit_final`: announce the limit, run one final-answer step.
    fn planning_limit_final(data: &mut ReactData, _input: &Input<'_>) {
        data.note_limit();
        data.counters.limit_final_ran = true;
        data.execute();
    }

    /// `planning_subtask`: run the oldest queued subtask.
    fn planning_subtask(data: &mut ReactData, _input: &Input<'_>) {
        data.run_subtask();
    }

    /// `planning_compact`: compact (threshold).
    fn planning_compact(data: &mut ReactData, _input: &Input<'_>) -> Compaction {
        data.compaction("threshold")
    }

    /// `planning_execute`: merge steering, build the context, begin the step.
    fn planning_execute(data: &mut ReactData, _input: &Input<'_>) {
        data.execute();
    }

    /// `executing_success`: take the step's message and results into the context.
    fn executing_success(data: &mut ReactData, _drain: &mut Drain, _input: &Input<'_>) {
        data.absorb_step();
    }

    /// `executing_overflow`: end the step, compact below what was sent.
    fn executing_overflow(
        data: &mut ReactData,
        _drain: &mut Drain,
        _input: &Input<'_>,
    ) -> Compaction {
        let error = match data.current.outcome() {
            Some(StepOutcome::ContextOverflow(e)) => e,
            // The guard-less row is taken on an overflow only (chart_event); never reached.
            _ => crate::error::ModelError::new(crate::error::ErrorKind::ContextOverflow, ""),
        };
        data.current.next_attempt = data.current.step.as_ref().map(|s| s.request().attempt + 1);
        data.end_step(StepEnd::ContextOverflow);
        data.overflow_compaction(&error)
    }

    /// `executing_fallback`: re-request the step from the next fallback model.
    fn executing_fallback(data: &mut ReactData, _drain: &mut Drain, _input: &Input<'_>) {
        data.fall_back();
    }

    /// `executing_error`: end the step, the run fails with the model's error.
    fn executing_error(data: &mut ReactData, _drain: &mut Drain, _input: &Input<'_>) -> Ended {
        let error = match data.current.outcome() {
            Some(StepOutcome::Failed(e)) => Some(e),
            _ => None,
        };
        data.end_step(StepEnd::Failed);
        let reason = error
            .as_ref()
            .map_or_else(|| "model_error".to_string(), |e| e.kind.to_string());
        data.decide_end(
            Outcome::Failed,
            reason,
            error.map(|error| RunError::Model { error }),
        )
    }

    /// `executing_abort_drain`: the abort reached the step (before dispatch), immune tools drain;
    /// announce the abort now.
    fn executing_abort_drain(data: &mut ReactData, drain: &mut Drain, input: &Input<'_>) {
        if let Some(Event::Abort { reason, .. }) = ext(input) {
            drain.abort_reason = Some(reason.clone());
            data.emit_abort(reason);
        }
    }

    /// `executing_aborted`: keep the drained step's results, the run ends aborted.
    fn executing_aborted(data: &mut ReactData, drain: &mut Drain, _input: &Input<'_>) -> Ended {
        data.absorb_aborted_step();
        let reason = drain
            .abort_reason
            .take()
            .unwrap_or_else(|| "aborted".into());
        data.decide_end(Outcome::Aborted, reason, None)
    }

    /// `observing_stop`: the run ends with the step's stop reason.
    fn observing_stop(data: &mut ReactData, _input: &Input<'_>) -> Ended {
        let reason = data.observed.stop_requested.unwrap_or("stopped");
        data.decide_end(Outcome::Completed, reason.into(), None)
    }

    /// `observing_compact`: compact (budget).
    fn observing_compact(data: &mut ReactData, _input: &Input<'_>) -> Compaction {
        data.compaction("budget")
    }

    /// `observing_continue`: nothing to do; Planning plans the next step.
    fn observing_continue(_data: &mut ReactData, _input: &Input<'_>) {}

    /// `observing_retry_output`: the answer's schema errors go back to the model.
    fn observing_retry_output(data: &mut ReactData, _input: &Input<'_>) {
        data.retry_output();
    }

    /// `observing_complete`: the run ends with the final answer (or the limit that asked for it).
    fn observing_complete(data: &mut ReactData, _input: &Input<'_>) -> Ended {
        let reason = match data.counters.limit_hit {
            Some(kind) => kind.reason(),
            None => "final_answer".into(),
        };
        data.decide_end(Outcome::Completed, reason, None)
    }

    /// `compacting_done`: keep the smaller context.
    fn compacting_done(data: &mut ReactData, _compaction: &mut Compaction, input: &Input<'_>) {
        if let Some(Event::CompactionDone { messages, removed }) = ext(input) {
            data.compacted(messages, *removed);
        }
    }

    /// `compacting_failed_fits`: nothing could go, but the context fits: report the compaction
    /// as removing nothing and plan the step as it is.
    fn compacting_failed_fits(
        data: &mut ReactData,
        _compaction: &mut Compaction,
        _input: &Input<'_>,
    ) {
        data.compaction_skipped();
    }

    /// `compacting_failed`: the run fails (compaction_failed).
    fn compacting_failed(
        data: &mut ReactData,
        _compaction: &mut Compaction,
        input: &Input<'_>,
    ) -> Ended {
        let message = error_text(input);
        data.fail("compaction_failed", RunError::Compaction { message })
    }

    /// `compacting_vetoed_required`: the overflow cannot be answered, the run fails.
    fn compacting_vetoed_required(
        data: &mut ReactData,
        _compaction: &mut Compaction,
        input: &Input<'_>,
    ) -> Ended {
        let reason = match ext(input) {
            Some(Event::CompactionVetoed { reason }) => reason.as_str(),
            _ => "",
        };
        data.compaction_vetoed(reason);
        let message = format!(
            "the model refused the context and a before_compact hook vetoed the compaction: {reason}"
        );
        data.fail("compaction_vetoed", RunError::Compaction { message })
    }

    /// `compacting_vetoed`: report the veto; no compaction before the next committed step.
    fn compacting_vetoed(data: &mut ReactData, _compaction: &mut Compaction, input: &Input<'_>) {
        if let Some(Event::CompactionVetoed { reason }) = ext(input) {
            data.compaction_vetoed(reason);
        }
    }

    /// `active_steer`: queue the steering message (skip_remaining: cut the batch short).
    fn active_steer(data: &mut ReactData, input: &Input<'_>) {
        if let Some(e @ Event::Steer { text }) = ext(input) {
            data.steer(e, text);
        }
    }

    /// `active_subtask`: queue the subtask.
    fn active_subtask(data: &mut ReactData, input: &Input<'_>) {
        if let Some(Event::Subtask { tool, arguments }) = ext(input) {
            data.queues
                .subtasks
                .push_back((tool.clone(), arguments.clone()));
        }
    }

    /// `active_title`: keep and report the title.
    fn active_title(data: &mut ReactData, input: &Input<'_>) {
        if let Some(Event::TitleReady { title }) = ext(input) {
            data.titled(title.as_deref());
        }
    }

    /// `active_switch_model`: use the model from the next step on.
    fn active_switch_model(data: &mut ReactData, input: &Input<'_>) {
        if let Some(Event::SwitchModel { model }) = ext(input) {
            data.switch_model(model);
        }
    }

    /// `active_set_tools`: offer these tools from the next step on.
    fn active_set_tools(data: &mut ReactData, input: &Input<'_>) {
        if let Some(Event::SetTools { tools, immune }) = ext(input) {
            data.cfg.tools = tools.clone();
            data.cfg.step.immune = immune.clone();
        }
    }

    /// `active_run_deadline`: the timer is spent; the facade feeds the abort it stands for.
    fn active_run_deadline(data: &mut ReactData, _input: &Input<'_>) {
        data.end.deadline_armed = false;
        data.end.deadline_abort = true;
    }

    /// `active_abort`: the abort reached the step (before dispatch); keep what it committed, the
    /// run ends aborted.
    fn active_abort(data: &mut ReactData, input: &Input<'_>) -> Ended {
        let reason = match ext(input) {
            Some(Event::Abort { reason, .. }) => reason.clone(),
            _ => "aborted".into(),
        };
        data.absorb_aborted_step();
        data.decide_end(Outcome::Aborted, reason, None)
    }

    /// `active_store_failed`: stop the stream and the tools, the run fails.
    fn active_store_failed(data: &mut ReactData, input: &Input<'_>) -> Ended {
        let message = error_text(input);
        data.halt_io();
        data.fail("store_write_failed", RunError::StoreWrite { message })
    }

    /// `finishing_completed`, `finishing_failed`, `finishing_aborted`: the end moves on to
    /// the terminal state, whose entry reports it.
    fn pass_end(_data: &mut ReactData, ended: &mut Ended, _: &Input<'_>) -> Ended {
        ended.take()
    }

    /// `finishing_store_failed`: the final commit failed, the run fails naming its reached end.
    fn finishing_store_failed(data: &mut ReactData, ended: &mut Ended, input: &Input<'_>) -> Ended {
        data.commit_failed(ended, &error_text(input))
    }
}
