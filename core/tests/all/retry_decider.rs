//! The retry decision as a replaceable pure function (R-EXT-3): the
//! retry rows' guards ask `step.retry.decider` about the typed error,
//! `max_retries` still bounds the retries, a context overflow is never retried, and the
//! decider is recorded by name — replay resolves it in the registry or fails, typed.

use crate::steps::{attempt_id, process_rows, request_of, start};
use agentloop_core::agent_event::AgentEvent;
use agentloop_core::chart::ProcessRow;
use agentloop_core::error::{ErrorKind, ModelError};
use agentloop_core::model::ModelRequest;
use agentloop_core::process::{
    default_retry_decider, RetryDeciderRef, RetryDeciderRegistry, RetryPolicy, StreamDeadlines,
    DEFAULT_RETRY_DECIDER,
};
use agentloop_core::react::DeciderRegistry;
use agentloop_core::trace::{replay, replay_with, Trace, TraceError, TraceHeader, TRACE_VERSION};
use agentloop_core::{Effect, Event, Outcome, Run, RunConfig, Step};

const ONCE: &str = "retry_bad_request_once";

/// Retries a `bad_request` on its first failure only; otherwise the default rule.
fn retry_bad_request_once(error: &ModelError, attempt: u32) -> bool {
    (error.kind == ErrorKind::BadRequest && attempt == 1) || default_retry_decider(error, attempt)
}

fn never(_: &ModelError, _: u32) -> bool {
    false
}

fn always(_: &ModelError, _: u32) -> bool {
    true
}

fn config(decider: RetryDeciderRef) -> RunConfig {
    let mut c = RunConfig::default();
    c.step.retry.decider = decider;
    c.step.retry.jitter_percent = 0;
    c
}

fn fail(run: &mut Run, r: &ModelRequest, kind: ErrorKind) -> Step {
    run.handle(Event::TransportError {
        attempt: attempt_id(r),
        error: ModelError::new(kind, format!("{kind} at attempt {}", r.attempt)),
    })
}

/// The `timer_id` of the backoff timer a step started, if any.
fn timer_of(step: &Step) -> Option<u64> {
    step.effects.iter().find_map(|e| match e {
        Effect::StartTimer { timer_id, .. } => Some(*timer_id),
        _ => None,
    })
}

fn stream_errors(step: &Step) -> Vec<String> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Emit {
                event: AgentEvent::StreamError { error },
            } => Some(error.message.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn r_ext_3_the_default_decider_fails_a_bad_request_at_once() {
    let mut run = Run::new(config(RetryDeciderRef::default()));
    let first = request_of(&start(&mut run, "hi")).expect("request");
    let s = fail(&mut run, &first, ErrorKind::BadRequest);
    assert_eq!(process_rows(&s), [ProcessRow::RequestingFail]);
    let _ = run.handle(Event::RunEndCommitted);
    let result = run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Failed);
    assert_eq!(result.reason, "bad_request");
}

#[test]
fn r_ext_3_a_custom_decider_retries_what_it_names_and_the_guards_agree() {
    let mut run = Run::new(config(RetryDeciderRef::new(ONCE, retry_bad_request_once)));
    let first = request_of(&start(&mut run, "hi")).expect("request");
    // Attempt 1: the decider retries the bad request (row requesting_retry).
    let s = fail(&mut run, &first, ErrorKind::BadRequest);
    assert_eq!(process_rows(&s), [ProcessRow::RequestingRetry]);
    let retry = run.handle(Event::TimerElapsed {
        timer_id: timer_of(&s).expect("backoff timer"),
    });
    let second = request_of(&retry).expect("attempt 2");
    assert_eq!((second.model_call_index, second.attempt), (1, 2));
    // Attempt 2: not again (the decider sees attempt 2), though retries are left.
    let s = fail(&mut run, &second, ErrorKind::BadRequest);
    assert_eq!(process_rows(&s), [ProcessRow::RequestingFail]);
    assert_eq!(
        stream_errors(&s),
        ["bad_request at attempt 2"],
        "the step fails with the error the decider declined"
    );
}

#[test]
fn r_ext_3_max_retries_bounds_any_decider() {
    let mut c = config(RetryDeciderRef::new("always", always));
    c.step.retry.max_retries = 2;
    let mut run = Run::new(c);
    let mut r = request_of(&start(&mut run, "hi")).expect("request");
    for _ in 0..2 {
        let s = fail(&mut run, &r, ErrorKind::Authentication);
        assert_eq!(process_rows(&s), [ProcessRow::RequestingRetry]);
        let t = run.handle(Event::TimerElapsed {
            timer_id: timer_of(&s).expect("timer"),
        });
        r = request_of(&t).expect("next attempt");
    }
    let s = fail(&mut run, &r, ErrorKind::Authentication);
    assert_eq!(process_rows(&s), [ProcessRow::RequestingFail]);
}

#[test]
fn r_ext_3_a_context_overflow_is_never_retried_as_it_is() {
    let policy = RetryPolicy {
        decider: RetryDeciderRef::new("always", always),
        ..RetryPolicy::default()
    };
    let overflow = ModelError::new(ErrorKind::ContextOverflow, "too long");
    assert!(!policy.retries_after(&overflow, 0));
    assert!(policy.retries_after(&ModelError::new(ErrorKind::BadRequest, "400"), 0));
    assert!(!policy.retries_after(&ModelError::new(ErrorKind::BadRequest, "400"), 3));
}

#[test]
fn r_ext_3_a_decider_that_declines_timeouts_fails_stalls_and_deadlines_at_once() {
    let mut c = config(RetryDeciderRef::new("never", never));
    c.step.stream = Some(StreamDeadlines {
        first_chunk_ms: 500,
        stall_ms: 300,
        request_ms: None,
    });
    // A stall reported by the runtime.
    let mut run = Run::new(c.clone());
    let first = request_of(&start(&mut run, "hi")).expect("request");
    let s = run.handle(Event::StreamStalled {
        attempt: attempt_id(&first),
        after_ms: 300,
    });
    assert_eq!(process_rows(&s), [ProcessRow::RequestingStallFail]);
    assert_eq!(
        stream_errors(&s),
        ["stream stalled for 300 ms; not retried (retry decider `never`)"]
    );
    // The first-chunk deadline passing.
    let mut run = Run::new(c);
    let begun = start(&mut run, "hi");
    let deadline = timer_of(&begun).expect("first-chunk deadline");
    let s = run.handle(Event::TimerElapsed { timer_id: deadline });
    assert_eq!(process_rows(&s), [ProcessRow::RequestingDeadlineFail]);
    assert_eq!(
        stream_errors(&s),
        ["stream stalled for 500 ms; not retried (retry decider `never`)"]
    );
}

#[test]
fn r_ext_3_the_default_decider_keeps_retrying_timeouts_until_the_budget_is_spent() {
    let mut c = config(RetryDeciderRef::default());
    c.step.retry.max_retries = 0;
    let mut run = Run::new(c);
    let first = request_of(&start(&mut run, "hi")).expect("request");
    let s = run.handle(Event::StreamStalled {
        attempt: attempt_id(&first),
        after_ms: 300,
    });
    assert_eq!(
        stream_errors(&s),
        ["stream stalled for 300 ms; retries exhausted"],
        "the message the default always gave"
    );
}

#[test]
fn r_ext_3_the_decider_is_recorded_by_name_and_a_config_without_it_reads_default() {
    // The default is not written: headers recorded before the field existed look the same.
    let v = serde_json::to_value(RunConfig::default()).expect("serializes");
    assert!(v["step"]["retry"].get("decider").is_none(), "{v}");
    let back: RunConfig = serde_json::from_value(v).expect("reads");
    assert_eq!(back.step.retry.decider.name(), DEFAULT_RETRY_DECIDER);
    assert!(back.step.retry.decider.is_resolved());
    // A custom one is written by name and comes back unresolved until a registry has it.
    let v = serde_json::to_value(config(RetryDeciderRef::new(ONCE, retry_bad_request_once)))
        .expect("serializes");
    assert_eq!(v["step"]["retry"]["decider"], ONCE);
    let mut back: RunConfig = serde_json::from_value(v).expect("reads");
    assert!(!back.step.retry.decider.is_resolved());
    let error = back
        .step
        .retry
        .resolve_decider(&RetryDeciderRegistry::new())
        .expect_err("not registered");
    assert_eq!(error.name, ONCE);
    assert_eq!(error.known, [DEFAULT_RETRY_DECIDER]);
    assert!(error.to_string().contains("`retry_bad_request_once`"));
    let registry = RetryDeciderRegistry::new().with(ONCE, retry_bad_request_once);
    back.step
        .retry
        .resolve_decider(&registry)
        .expect("registered");
    assert!(back.step.retry.decider.is_resolved());
}

/// A run with the custom decider, recorded: the bad request is retried, the retry answered.
fn recorded() -> Trace {
    let c = config(RetryDeciderRef::new(ONCE, retry_bad_request_once));
    let mut trace = Trace::new(TraceHeader {
        version: TRACE_VERSION,
        agentloop: "test".into(),
        session: "s".into(),
        timeouts: None,
        tools: Default::default(),
        config: c.clone(),
    });
    let mut run = Run::new(c);
    let mut feed = |run: &mut Run, e: Event| {
        let s = run.handle(e.clone());
        trace.record(&e, &s);
        s
    };
    let begun = feed(
        &mut run,
        Event::Start {
            run_id: "r1".into(),
            history: vec![],
            input: vec![agentloop_core::Message::user("hi")],
            session_turns: 0,
        },
    );
    let first = request_of(&begun).expect("request");
    let failed = feed(
        &mut run,
        Event::TransportError {
            attempt: attempt_id(&first),
            error: ModelError::new(ErrorKind::BadRequest, "400").with_status(400),
        },
    );
    let timer_id = timer_of(&failed).expect("retried");
    let retried = feed(&mut run, Event::TimerElapsed { timer_id });
    let second = request_of(&retried).expect("attempt 2");
    let attempt = attempt_id(&second);
    let _ = feed(
        &mut run,
        Event::StreamOpened {
            attempt: attempt.clone(),
        },
    );
    let _ = feed(
        &mut run,
        Event::Delta {
            attempt: attempt.clone(),
            seq: 0,
            delta: agentloop_core::MessageDelta::TextDelta { text: "ok".into() },
        },
    );
    let _ = feed(
        &mut run,
        Event::Done {
            attempt,
            rejected_arguments: vec![],
            output_rejected: None,
        },
    );
    let _ = feed(&mut run, Event::RunEndCommitted);
    assert_eq!(run.result().map(|r| r.outcome), Some(Outcome::Completed));
    trace
}

#[test]
fn r_ext_3_replay_resolves_the_retry_decider_or_fails_typed() {
    let trace = recorded();
    let parsed = Trace::parse(&trace.to_jsonl(), "retry.jsonl").expect("parses");
    assert_eq!(parsed.header.config.step.retry.decider.name(), ONCE);
    let registry = DeciderRegistry::new().with_retry(ONCE, retry_bad_request_once);
    assert_eq!(replay_with(&parsed, &registry).expect("registered"), None);
    // Without the function: a typed error naming it, not a false divergence.
    match replay_with(&parsed, &DeciderRegistry::new()) {
        Err(TraceError::UnknownRetryDecider { name, known }) => {
            assert_eq!(name, ONCE);
            assert_eq!(known, [DEFAULT_RETRY_DECIDER]);
        }
        other => panic!("expected UnknownRetryDecider, got {other:?}"),
    }
    // The plain replay has only the defaults: the trace diverges at its first record, with
    // nothing replayed (never replayed with the default decision).
    let d = replay(&parsed).expect("not identical");
    assert_eq!((d.index, d.replayed), (0, None));
    // A registry with another function under the name replays it — and shows the difference.
    let wrong = DeciderRegistry::new().with_retry(ONCE, default_retry_decider);
    let d = replay_with(&parsed, &wrong)
        .expect("registered")
        .expect("diverges");
    assert!(d.diff().contains("RequestingFail"), "{}", d.diff());
}
