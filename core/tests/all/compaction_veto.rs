//! R-EXT-1: a `before_compact` hook can veto a compaction. The veto is the
//! machine's `compaction_vetoed` input (rows `compacting_vetoed`, `compacting_vetoed_required`):
//! a compaction the run only wanted (threshold) is skipped until the next committed step; one
//! the model's refusal of the context made necessary fails the run with `compaction_vetoed`.

use agentloop_core::agent_event::AgentEvent;
use agentloop_core::chart::ReactRow;
use agentloop_core::error::{ErrorKind, ModelError, RunError};
use agentloop_core::{Effect, Event, Outcome, Run, RunConfig, Step};

use crate::steps::{answer, attempt_id, react_rows, request_of, start};

fn vetoes(step: &Step) -> Vec<String> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Emit {
                event: AgentEvent::CompactVetoed { reason },
            } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

fn compacts(step: &Step) -> bool {
    step.effects
        .iter()
        .any(|e| matches!(e, Effect::Compact { .. }))
}

#[test]
fn issue_13_a_vetoed_threshold_compaction_is_skipped_until_the_next_step() {
    // Over the message threshold before the first step: Planning compacts first.
    let mut run = Run::new(RunConfig {
        compact_threshold: Some(0),
        ..RunConfig::default()
    });
    let s = start(&mut run, "hi");
    assert!(compacts(&s));
    assert_eq!(s.to.to_string(), "Compacting");
    let s = run.handle(Event::CompactionVetoed {
        reason: "keep everything".into(),
    });
    // Back to Planning, and on to the step at once: no second compaction before it.
    assert_eq!(
        react_rows(&s),
        [ReactRow::CompactingVetoed, ReactRow::PlanningExecute]
    );
    assert_eq!(vetoes(&s), ["keep everything"]);
    assert!(!compacts(&s));
    let r = request_of(&s).expect("the step is requested uncompacted");
    assert_eq!(r.messages.len(), 1);
    // After a committed step the run is still over the threshold: it asks again.
    let done = answer(&mut run, &r, "hello", None);
    assert_eq!(done.to.to_string(), "Finishing", "{:?}", react_rows(&done));
    assert_eq!(
        run.handle(Event::RunEndCommitted).to.to_string(),
        "Completed"
    );
    assert_eq!(run.result().map(|r| r.outcome), Some(Outcome::Completed));
}

#[test]
fn issue_13_a_vetoed_overflow_compaction_fails_the_run() {
    let mut run = Run::new(RunConfig::default());
    let r = request_of(&start(&mut run, "hi")).expect("request");
    let s = run.handle(Event::ContextOverflow {
        attempt: attempt_id(&r),
        error: ModelError::new(ErrorKind::ContextOverflow, "too long"),
    });
    assert_eq!(react_rows(&s), [ReactRow::ExecutingOverflow]);
    let s = run.handle(Event::CompactionVetoed {
        reason: "no summaries".into(),
    });
    assert_eq!(react_rows(&s), [ReactRow::CompactingVetoedRequired]);
    assert_eq!(vetoes(&s), ["no summaries"]);
    assert_eq!(s.to.to_string(), "Finishing");
    let _ = run.handle(Event::RunEndCommitted);
    let result = run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Failed);
    assert_eq!(result.reason, "compaction_vetoed");
    assert!(
        matches!(&result.error, Some(RunError::Compaction { message }) if message.contains("no summaries")),
        "{result:?}"
    );
}
