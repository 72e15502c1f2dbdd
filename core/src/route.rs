//! The one classification of runtime inputs: which chart event of the outer (ReAct) machine
//! and of the inner (process) machine an [`Event`] stands for. [`route`] is generated from the
//! charts' `input` patterns (`statecharts/react.toml`, `statecharts/process.toml`), the outer
//! chart's first, with no fallback arm: an `Event` variant no chart names does not compile.

use crate::chart::{ProcessEventKind, ReactEventKind};
use crate::event::{ApprovalDecision, Event, GateVerdict};
use crate::react::RUN_DEADLINE_TIMER;

/// The chart events an input stands for, per machine (`None`: that machine has no event for
/// it). Every input has at least one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The outer machine's event: the run takes the input itself.
    pub react: Option<ReactEventKind>,
    /// The inner machine's event: the current step takes it (directly, or handed on by the
    /// outer machine's row).
    pub process: Option<ProcessEventKind>,
}

include!("generated/route.rs");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::KillPolicy;

    /// Written from the SPEC, not from the charts: an abort and a steering message concern
    /// both machines, the run's deadline only the outer one, a step's timer and an approval
    /// only the inner one (an approver's own timeout is a rejection).
    #[test]
    fn inputs_go_to_the_machines_the_spec_names() {
        let abort = Event::Abort {
            reason: "x".into(),
            kill: KillPolicy::default(),
        };
        assert_eq!(
            route(&abort),
            Route {
                react: Some(ReactEventKind::Abort),
                process: Some(ProcessEventKind::Abort)
            }
        );
        let deadline = Event::TimerElapsed {
            timer_id: RUN_DEADLINE_TIMER,
        };
        assert_eq!(
            route(&deadline),
            Route {
                react: Some(ReactEventKind::RunDeadline),
                process: None
            }
        );
        let timer = Event::TimerElapsed { timer_id: 7 };
        assert_eq!(
            route(&timer),
            Route {
                react: None,
                process: Some(ProcessEventKind::TimerElapsed)
            }
        );
        let timed_out = Event::Approval {
            tool_call_id: "c".into(),
            decision: ApprovalDecision::TimedOut { after_ms: 5 },
        };
        assert_eq!(route(&timed_out).process, Some(ProcessEventKind::Rejected));
        assert_eq!(
            route(&Event::RunEndCommitted).react,
            Some(ReactEventKind::RunEndCommitted)
        );
    }
}
