//! The outer ReAct machine as a blocking `statig` machine (crate-private; see
//! [`crate::react::Run`] for the facade). statig keeps the hierarchy, the entry actions and
//! the state enum; the `#[state_machine]` impl, generated from `statecharts/react.toml`
//! (`generated/react_machine.rs`), has each state's handler call its dispatch function
//! ([`crate::react::dispatch`]), which picks the row, records it and runs its action. The
//! facade forwards inner events, and an abort, to the step before `Executing`'s handler runs.

use statig::blocking::*;

use crate::event::Event;
use crate::react::config::Decision;
use crate::react::context::{Compaction, Drain, Ended};
use crate::react::data::ReactData;
use crate::react::dispatch;

/// What the facade feeds the machine: an external event or one of its internal events.
#[derive(Debug)]
pub(crate) enum Input<'a> {
    /// An event from outside.
    Ext(&'a Event),
    /// Fed on entering Planning.
    Plan,
    /// Fed on entering Observing, with the decision function's answer for the step observed
    /// (computed once, before dispatch: the Observing guards read it).
    Decide(Decision),
    /// The inner machine reached a terminal state.
    InnerEnded,
}

/// The statig machine. What spans states lives in the context ([`ReactData`]); a state's own
/// data lives in the state (statig state-local storage, the chart's `local`): `Executing`'s
/// [`Drain`], `Compacting`'s [`Compaction`], the decided end ([`Ended`]) of `Finishing` and the
/// terminal states.
#[derive(Debug, Default)]
pub(crate) struct ReactMachine;

include!("../generated/react_machine.rs");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::ReactState;

    crate::chart::superstates_are_the_charts_parents!(
        ReactMachine,
        ReactState,
        kind,
        [
            State::init(),
            State::planning(),
            State::executing(Drain::default()),
            State::observing(),
            State::compacting(Compaction {
                reason: "threshold",
                budget_tokens: None,
            }),
            State::finishing(Ended { result: None }),
            State::completed(Ended { result: None }),
            State::failed(Ended { result: None }),
            State::aborted(Ended { result: None })
        ]
    );
}
