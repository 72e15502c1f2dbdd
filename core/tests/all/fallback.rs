//! Model fallback: a step that fails on its model is requested again from the next
//! model of the run's fallback chain — row `executing_fallback` — and never on a context
//! overflow or an abort.

use crate::steps::{self, attempt_id, react_rows, start};
use agentloop_core::agent_event::AgentEvent;
use agentloop_core::chart::ReactRow;
use agentloop_core::error::{ErrorKind, ModelError};
use agentloop_core::event::KillPolicy;
use agentloop_core::model::ModelRequest;
use agentloop_core::{Effect, Event, Outcome, Run, RunConfig, Step};

fn config(fallbacks: &[&str]) -> RunConfig {
    let mut cfg = RunConfig {
        model: "primary".into(),
        fallbacks: fallbacks.iter().map(|m| m.to_string()).collect(),
        ..RunConfig::default()
    };
    cfg.step.retry.max_retries = 0;
    cfg
}

fn request_of(step: &Step) -> ModelRequest {
    crate::steps::request_of(step).expect("a model request")
}

fn fail(run: &mut Run, r: &ModelRequest, kind: ErrorKind) -> Step {
    run.handle(Event::TransportError {
        attempt: attempt_id(r),
        error: ModelError::new(kind, format!("{kind} from {}", r.model)),
    })
}

fn fallbacks(step: &Step) -> Vec<(String, String, u32, ErrorKind)> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Emit {
                event:
                    AgentEvent::ModelFallback {
                        from,
                        to,
                        model_call_index,
                        error,
                    },
            } => Some((from.clone(), to.clone(), *model_call_index, error.kind)),
            _ => None,
        })
        .collect()
}

fn answer(run: &mut Run, r: &ModelRequest, text: &str) -> Step {
    let done = steps::answer(run, r, text, None);
    let _ = run.handle(Event::RunEndCommitted);
    done
}

#[test]
fn a_failed_step_is_requested_again_from_each_fallback_in_order() {
    let mut run = Run::new(config(&["second", "third"]));
    let first = request_of(&start(&mut run, "hi"));
    assert_eq!((first.model.as_str(), first.attempt), ("primary", 1));

    // 401 is not retried: the step fails and the chain's first fallback takes it.
    let s = fail(&mut run, &first, ErrorKind::Authentication);
    assert!(
        react_rows(&s).contains(&ReactRow::ExecutingFallback),
        "{s:?}"
    );
    assert_eq!(
        fallbacks(&s),
        [(
            "primary".to_string(),
            "second".to_string(),
            1,
            ErrorKind::Authentication
        )]
    );
    let second = request_of(&s);
    assert_eq!(second.model, "second");
    assert_eq!(second.model_call_index, 1, "the same step");
    assert_eq!(
        second.attempt, 2,
        "attempts continue: late events of attempt 1 stay stale"
    );
    assert_eq!(second.messages, first.messages, "the same context");

    // A late event of the failed attempt changes nothing.
    let late = run.handle(Event::StreamOpened {
        attempt: attempt_id(&first),
    });
    assert!(late
        .effects
        .iter()
        .all(|e| !matches!(e, Effect::CallModel { .. })));
    assert_eq!(run.state().to_string(), "Executing.Calling");

    // Retries exhausted (max_retries 0) on a retryable error: the next fallback.
    let s = fail(&mut run, &second, ErrorKind::ServerError);
    assert_eq!(
        fallbacks(&s),
        [(
            "second".to_string(),
            "third".to_string(),
            1,
            ErrorKind::ServerError
        )]
    );
    let third = request_of(&s);
    assert_eq!((third.model.as_str(), third.attempt), ("third", 3));

    let _ = answer(&mut run, &third, "done");
    let result = run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Completed);
    assert_eq!(result.final_text(), Some("done"));
    assert_eq!(
        run.config().model,
        "third",
        "later steps stay on the fallback"
    );
}

#[test]
fn with_the_chain_used_up_the_step_failure_ends_the_run() {
    let mut run = Run::new(config(&["second"]));
    let first = request_of(&start(&mut run, "hi"));
    let s = fail(&mut run, &first, ErrorKind::Authentication);
    let second = request_of(&s);
    let s = fail(&mut run, &second, ErrorKind::Authentication);
    assert_eq!(react_rows(&s), [ReactRow::ExecutingError]);
    assert!(fallbacks(&s).is_empty());
    let _ = run.handle(Event::RunEndCommitted);
    let result = run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Failed);
    assert!(
        matches!(
            &result.error,
            Some(agentloop_core::RunError::Model { error }) if error.message.contains("from second")
        ),
        "{result:?}"
    );
}

#[test]
fn no_fallback_without_a_chain_on_overflow_or_on_abort() {
    // Without a chain: the failure ends the run.
    let mut run = Run::new(config(&[]));
    let r = request_of(&start(&mut run, "hi"));
    let s = fail(&mut run, &r, ErrorKind::Authentication);
    assert_eq!(react_rows(&s), [ReactRow::ExecutingError]);

    // A context overflow compacts; the model stays.
    let mut run = Run::new(config(&["second"]));
    let r = request_of(&start(&mut run, "hi"));
    let s = run.handle(Event::ContextOverflow {
        attempt: attempt_id(&r),
        error: ModelError::new(ErrorKind::ContextOverflow, "too long"),
    });
    assert_eq!(react_rows(&s), [ReactRow::ExecutingOverflow]);
    assert!(fallbacks(&s).is_empty());
    assert_eq!(run.config().model, "primary");

    // An abort ends the run; the model stays.
    let mut run = Run::new(config(&["second"]));
    let _ = request_of(&start(&mut run, "hi"));
    let s = run.handle(Event::Abort {
        reason: "user".into(),
        kill: KillPolicy::default(),
    });
    assert!(fallbacks(&s).is_empty());
    assert!(!react_rows(&s).contains(&ReactRow::ExecutingFallback));
    assert_eq!(run.config().model, "primary");
}
