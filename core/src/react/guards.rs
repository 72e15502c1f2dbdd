//! The outer chart's guards: one pure predicate per guard a row of `statecharts/react.toml`
//! names (`otherwise` needs none), called by the generated dispatch
//! ([`crate::react::dispatch`]) and by the oracle. Each reads the data and the input and
//! changes nothing; work a guard needs done first (forwarding an abort to the inner step,
//! running the decision function) is done before dispatch, in [`ReactData::prepare`].
//!
//! Each is a method of [`Guards`], which implements the generated trait [`ReactGuards`] (one method
//! per guard the chart's rows name, with the signature the dispatch calls): a missing
//! predicate, one no row names or a wrong signature is a compile error.

use crate::agent_event::Outcome;
use crate::chart::ProcessState;
use crate::event::Event;
use crate::react::config::Decision;
use crate::react::context::{Compaction, Drain, Ended};
use crate::react::data::ReactData;
use crate::react::dispatch::ReactGuards;
use crate::react::limits::LimitAction;
use crate::react::machine::Input;

/// Whether the inner step drains tools (after the abort was forwarded to it).
fn draining(data: &ReactData) -> bool {
    data.current
        .step
        .as_ref()
        .is_some_and(|s| s.state() == ProcessState::Draining)
}

/// The decision function's answer for the step being observed (carried by `Decide`).
fn decided(input: &Input<'_>, d: Decision) -> bool {
    matches!(input, Input::Decide(x) if *x == d)
}

/// The outer chart's guards, one method of [`ReactGuards`] each.
pub(crate) struct Guards;

impl ReactGuards for Guards {
    /// `tools_draining`: after the abort's kill policy, some immune tools still run. (Its rows are
    /// all in `Executing`, so it is handed that state's `Drain`, which it does not need.)
    fn tools_draining(data: &ReactData, _drain: &Drain, _input: &Input<'_>) -> bool {
        draining(data)
    }

    /// `nothing_to_drain`: no tool of the step is left running after the abort.
    fn nothing_to_drain(data: &ReactData, _input: &Input<'_>) -> bool {
        !draining(data)
    }

    /// `max_steps_reached`: the final step ran.
    fn max_steps_reached(data: &ReactData, _input: &Input<'_>) -> bool {
        data.max_steps_reached()
    }

    /// `max_steps_answer_rejected`: the final step ran and its typed answer was rejected.
    fn max_steps_answer_rejected(data: &ReactData, _input: &Input<'_>) -> bool {
        data.max_steps_reached() && data.answer_rejected()
    }

    /// `over_threshold`: the context is over its compaction threshold.
    fn over_threshold(data: &ReactData, _input: &Input<'_>) -> bool {
        data.over_threshold()
    }

    /// `compaction_required` (Compacting): the compaction under way answers the model's refusal
    /// of the context (overflow); the step cannot be re-requested without it.
    fn compaction_required(_data: &ReactData, compaction: &Compaction, _input: &Input<'_>) -> bool {
        compaction.reason == "overflow"
    }

    /// `context_fits` (Compacting): the compaction started at the compaction point (not on a
    /// provider's overflow) and the context still fits the whole budget (not only the
    /// compaction point below it; or no budget is known), so the step may go out uncompacted.
    fn context_fits(data: &ReactData, compaction: &Compaction, _input: &Input<'_>) -> bool {
        compaction.reason != "overflow"
            && data
                .budget_tokens()
                .is_none_or(|b| data.transcript.tokens() < b)
    }

    /// `pending_tools`: the resumed run's last committed message has calls without results.
    fn pending_tools(_data: &ReactData, input: &Input<'_>) -> bool {
        matches!(
            input,
            Input::Ext(Event::Resume {
                pending: Some(_),
                ..
            })
        )
    }

    /// `subtask_queued`: a subtask waits to run before the next model step.
    fn subtask_queued(data: &ReactData, _input: &Input<'_>) -> bool {
        data.queues.subtask_queued()
    }

    /// `stop_requested`: the decision function asked to stop.
    fn stop_requested(_data: &ReactData, input: &Input<'_>) -> bool {
        decided(input, Decision::Stop)
    }

    /// `continue_over_budget`: the decision function asked to compact first.
    fn continue_over_budget(_data: &ReactData, input: &Input<'_>) -> bool {
        decided(input, Decision::Compact)
    }

    /// `has_tool_calls`: the decision function asked to go on.
    fn has_tool_calls(_data: &ReactData, input: &Input<'_>) -> bool {
        decided(input, Decision::Continue)
    }

    /// `output_retry`: the typed final answer was rejected and retries and a step are left.
    fn output_retry(data: &ReactData, input: &Input<'_>) -> bool {
        data.output_retry(decided(input, Decision::Complete))
    }

    /// `output_invalid`: the typed final answer was rejected and the retries or steps are
    /// used up.
    fn output_invalid(data: &ReactData, input: &Input<'_>) -> bool {
        data.output_invalid(decided(input, Decision::Complete))
    }

    /// `no_tool_calls`: the message is the final answer (and, if typed, accepted).
    fn no_tool_calls(data: &ReactData, input: &Input<'_>) -> bool {
        let complete = decided(input, Decision::Complete);
        complete && !data.output_retry(complete) && !data.output_invalid(complete)
    }

    /// `ended_completed`: the end being committed is a completion.
    fn ended_completed(_data: &ReactData, ended: &Ended, _input: &Input<'_>) -> bool {
        ended.outcome() == Some(Outcome::Completed)
    }

    /// `ended_failed`: the end being committed is a failure.
    fn ended_failed(_data: &ReactData, ended: &Ended, _input: &Input<'_>) -> bool {
        ended.outcome() == Some(Outcome::Failed)
    }

    /// `ended_aborted`: the end being committed is an abort.
    fn ended_aborted(_data: &ReactData, ended: &Ended, _input: &Input<'_>) -> bool {
        ended.outcome() == Some(Outcome::Aborted)
    }

    /// `fallback_available`: the step failed and the fallback chain has a model left.
    fn fallback_available(data: &ReactData, _drain: &Drain, _input: &Input<'_>) -> bool {
        data.fallback_available()
    }

    /// `limit_stop`: a usage limit is reached and the run stops now.
    fn limit_stop(data: &ReactData, _input: &Input<'_>) -> bool {
        data.limit_reached().is_some()
            && (data.cfg.limits.on_limit == LimitAction::Stop || data.counters.limit_final_ran)
    }

    /// `limit_final_answer`: a usage limit is reached and asks for one final-answer step.
    fn limit_final_answer(data: &ReactData, _input: &Input<'_>) -> bool {
        data.limit_reached().is_some()
            && data.cfg.limits.on_limit == LimitAction::FinalAnswer
            && !data.counters.limit_final_ran
    }
}
