//! The session chart's guards (`statecharts/session.toml`): pure predicates over the machine's
//! data and the input, methods of [`Guards`], which implements the generated trait
//! [`SessionGuards`]: the compiler ties their names and signatures to the chart.

use super::data::SessionData;
use super::dispatch::SessionGuards;
use super::SessionInput as Input;

/// What the run's steering queue holds: what its machine holds plus what was forwarded and
/// has not reached it yet (`None` for another input).
fn steering_queue(data: &SessionData, input: &Input<'_>) -> Option<usize> {
    match input {
        Input::Steer {
            run_pending,
            run_received,
            ..
        } => {
            let in_flight = data.steers_sent.saturating_sub(*run_received);
            Some(run_pending.saturating_add(usize::try_from(in_flight).unwrap_or(usize::MAX)))
        }
        _ => None,
    }
}

/// The session chart's guards, one method of [`SessionGuards`] each.
pub(crate) struct Guards;

impl SessionGuards for Guards {
    /// The hook did not reject the prompt or steering message.
    fn hook_allows(_: &SessionData, input: &Input<'_>) -> bool {
        match input {
            Input::Prompt { rejected, .. } | Input::Steer { rejected, .. } => rejected.is_none(),
            _ => false,
        }
    }

    /// The hook allows the steering message and the queue is below the capacity.
    fn steering_room(data: &SessionData, input: &Input<'_>) -> bool {
        Self::hook_allows(data, input)
            && steering_queue(data, input).is_some_and(|n| n < data.steering_capacity)
    }

    /// The hook allows the steering message and the queue is at the capacity.
    fn steering_full(data: &SessionData, input: &Input<'_>) -> bool {
        Self::hook_allows(data, input)
            && steering_queue(data, input).is_some_and(|n| n >= data.steering_capacity)
    }

    /// The registry knows the model and it is not the session's.
    fn model_switchable(data: &SessionData, input: &Input<'_>) -> bool {
        matches!(input, Input::SwitchModel { model, known: true } if *model != data.model)
    }

    /// The registry does not know the model.
    fn unknown_model(_: &SessionData, input: &Input<'_>) -> bool {
        matches!(input, Input::SwitchModel { known: false, .. })
    }

    /// Leftover steering or a queued prompt starts the next run.
    fn has_next(data: &SessionData, input: &Input<'_>) -> bool {
        matches!(input, Input::RunEnded { leftover, .. } if !leftover.is_empty())
            || !data.queued.is_empty()
    }

    /// The answer was "approve always".
    fn always(_: &SessionData, input: &Input<'_>) -> bool {
        matches!(input, Input::ApprovalAnswered { always: true, .. })
    }
}
