//! R-IN-7: a model attempt's deadlines are timers of the inner machine. It starts them with
//! `CallModel`, trades the first-chunk deadline for a stall watchdog at the first delta, and
//! decides what an elapsed one means (rows `requesting_deadline_*`, `streaming_watch`).

use agentloop_core::agent_event::AgentEvent;
use agentloop_core::chart::ProcessRow;
use agentloop_core::process::StreamDeadlines;
use agentloop_core::{AttemptId, Effect, Event, Message, MessageDelta, Run, RunConfig, Step};

use crate::steps::{process_rows, react_rows};

fn run_with(request_ms: Option<u64>, max_retries: u32) -> (Run, Step) {
    let mut cfg = RunConfig::default();
    cfg.step.retry.max_retries = max_retries;
    cfg.step.stream = Some(StreamDeadlines {
        first_chunk_ms: 100,
        stall_ms: 40,
        request_ms,
    });
    let mut run = Run::new(cfg);
    let s = run.handle(Event::Start {
        run_id: "r".into(),
        history: vec![],
        input: vec![Message::user("hi")],
        session_turns: 0,
    });
    (run, s)
}

/// Timers a step started, as (id, delay).
fn started(step: &Step) -> Vec<(u64, u64)> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::StartTimer { timer_id, delay_ms } => Some((*timer_id, *delay_ms)),
            _ => None,
        })
        .collect()
}

fn cancelled(step: &Step) -> Vec<u64> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::CancelTimer { timer_id } => Some(*timer_id),
            _ => None,
        })
        .collect()
}

fn attempt(n: u32) -> AttemptId {
    AttemptId {
        run_id: "r".into(),
        model_call_index: 1,
        attempt: n,
    }
}

fn text(run: &mut Run, seq: u64) -> Step {
    run.handle(Event::Delta {
        attempt: attempt(1),
        seq,
        delta: MessageDelta::TextDelta { text: "a".into() },
    })
}

#[test]
fn r_in_7_a_silent_start_is_a_stall_that_retries() {
    let (mut run, s) = run_with(None, 1);
    let timers = started(&s);
    assert_eq!(timers.len(), 1, "only the first-chunk deadline: {timers:?}");
    assert_eq!(timers[0].1, 100);
    let s = run.handle(Event::TimerElapsed {
        timer_id: timers[0].0,
    });
    assert_eq!(process_rows(&s), [ProcessRow::RequestingDeadlineRetry]);
    assert!(s.effects.contains(&Effect::CancelModel {
        attempt: attempt(1)
    }));
    assert!(s.effects.iter().any(|e| matches!(
        e,
        Effect::Emit {
            event: AgentEvent::StreamStalled { after_ms: 100, .. }
        }
    )));
    assert_eq!(run.state().to_string(), "Executing.Retrying");
}

#[test]
fn r_in_7_deltas_keep_the_watchdog_looking_and_silence_ends_the_attempt() {
    let (mut run, s) = run_with(Some(1_000), 0);
    let first = started(&s);
    assert_eq!(first.len(), 2, "first chunk and whole request: {first:?}");
    let _ = run.handle(Event::StreamOpened {
        attempt: attempt(1),
    });
    let s = text(&mut run, 0);
    // The first delta trades the first-chunk deadline for the stall watchdog.
    assert_eq!(cancelled(&s), [first[0].0]);
    let watch = started(&s);
    assert_eq!(watch.len(), 1);
    assert_eq!(watch[0].1, 40);
    let _ = text(&mut run, 1);
    // The watchdog looks: a delta came since it was armed, so it looks again.
    let s = run.handle(Event::TimerElapsed {
        timer_id: watch[0].0,
    });
    assert_eq!(process_rows(&s), [ProcessRow::StreamingWatch]);
    assert_eq!(started(&s), watch);
    // Nothing since: the stream stalled; no retry is left, so the step fails and every
    // deadline of the attempt (the whole-request one) is cancelled.
    let s = run.handle(Event::TimerElapsed {
        timer_id: watch[0].0,
    });
    assert_eq!(process_rows(&s)[0], ProcessRow::RequestingDeadlineFail);
    assert!(cancelled(&s).contains(&first[1].0));
    assert!(s.effects.iter().any(|e| matches!(
        e,
        Effect::Emit {
            event: AgentEvent::StreamError { error }
        } if error.message.contains("stalled for 40 ms")
    )));
}

/// R-TRACE-1: timer ids are recorded in traces (`StartTimer`, `TimerElapsed`), so their layout
/// is part of the trace format, pinned here as the module `process::deadlines` documents it: a
/// backoff timer is `model_call_index * 1_000_000 + attempt`, an attempt deadline adds its kind
/// in bits 60–61 (first chunk 1, stall 2, whole request 3).
#[test]
fn r_trace_1_attempt_timer_ids_have_the_documented_layout() {
    let base = 1_000_001;
    let (mut run, s) = run_with(Some(1_000), 1);
    assert_eq!(
        started(&s),
        [(1 << 60 | base, 100), (3 << 60 | base, 1_000)],
        "first chunk and whole request of call 1, attempt 1"
    );
    let _ = run.handle(Event::StreamOpened {
        attempt: attempt(1),
    });
    let s = text(&mut run, 0);
    assert_eq!(started(&s), [(2 << 60 | base, 40)], "the stall watchdog");
    assert_eq!(cancelled(&s), [1 << 60 | base]);
    // The watchdog fires with no delta since: the attempt is retried after its backoff
    // (timer `base + 1`, attempt 2), whose deadlines carry attempt 2's base.
    let s = run.handle(Event::TimerElapsed {
        timer_id: 2 << 60 | base,
    });
    assert_eq!(process_rows(&s), [ProcessRow::RequestingDeadlineRetry]);
    // The attempt's other deadline is cancelled; the one that fired is not armed any more.
    assert_eq!(cancelled(&s), [3 << 60 | base]);
    assert_eq!(started(&s), [(1_000_002, 1_000)]);
    let s = run.handle(Event::TimerElapsed {
        timer_id: 1_000_002,
    });
    assert_eq!(
        started(&s),
        [(1 << 60 | 1_000_002, 100), (3 << 60 | 1_000_002, 1_000)]
    );
}

#[test]
fn r_in_7_the_whole_request_deadline_is_a_retryable_timeout() {
    let (mut run, s) = run_with(Some(1_000), 2);
    let request = started(&s)[1];
    assert_eq!(request.1, 1_000);
    let _ = run.handle(Event::StreamOpened {
        attempt: attempt(1),
    });
    let _ = text(&mut run, 0);
    // A delta since the watchdog was armed keeps the stream alive, not the whole request.
    let _ = text(&mut run, 1);
    let s = run.handle(Event::TimerElapsed {
        timer_id: request.0,
    });
    assert_eq!(process_rows(&s), [ProcessRow::RequestingDeadlineRetry]);
    assert!(s.effects.iter().any(|e| matches!(
        e,
        Effect::Emit {
            event: AgentEvent::Retry { reason, .. }
        } if reason == "request exceeded 1000 ms"
    )));
    // A deadline of the attempt that was retried is not one any more: while the backoff
    // runs it is a stale timer.
    let late = run.handle(Event::TimerElapsed {
        timer_id: request.0,
    });
    assert_eq!(process_rows(&late), [ProcessRow::RetryingTimerStale]);
    assert!(late.effects.is_empty());
}

#[test]
fn r_in_7_a_committed_message_cancels_its_deadlines() {
    let (mut run, s) = run_with(Some(1_000), 0);
    let request = started(&s)[1];
    let _ = run.handle(Event::StreamOpened {
        attempt: attempt(1),
    });
    let s = text(&mut run, 0);
    let watch = started(&s)[0];
    let s = run.handle(Event::done(attempt(1)));
    let mut ids = cancelled(&s);
    ids.sort_unstable();
    let mut want = vec![request.0, watch.0];
    want.sort_unstable();
    assert_eq!(ids, want);
}

#[test]
fn r_in_7_the_run_deadline_is_a_timer_of_the_run_that_aborts_it() {
    use agentloop_core::chart::ReactRow;
    use agentloop_core::react::RUN_DEADLINE_TIMER;
    let cfg = RunConfig {
        run_deadline_ms: Some(5_000),
        ..RunConfig::default()
    };
    let mut run = Run::new(cfg);
    let s = run.handle(Event::Start {
        run_id: "r".into(),
        history: vec![],
        input: vec![Message::user("hi")],
        session_turns: 0,
    });
    assert!(started(&s).contains(&(RUN_DEADLINE_TIMER, 5_000)));
    // The outer chart names the input: a timer_elapsed of the run's deadline timer is
    // RunDeadline, any other timer is the inner machine's.
    let deadline = Event::TimerElapsed {
        timer_id: RUN_DEADLINE_TIMER,
    };
    assert_eq!(
        agentloop_core::route::route(&deadline).react,
        Some(agentloop_core::chart::ReactEventKind::RunDeadline)
    );
    assert_eq!(
        agentloop_core::route::route(&Event::TimerElapsed { timer_id: 7 }).react,
        None
    );
    let s = run.handle(Event::TimerElapsed {
        timer_id: RUN_DEADLINE_TIMER,
    });
    assert_eq!(
        react_rows(&s),
        [ReactRow::ActiveRunDeadline, ReactRow::ActiveAbort]
    );
    assert!(s.effects.contains(&Effect::CancelModel {
        attempt: attempt(1)
    }));
    // The timer fired: nothing is left to cancel.
    assert!(!cancelled(&s).contains(&RUN_DEADLINE_TIMER));
    // While the end is committed, the deadline is ignored.
    let again = run.handle(Event::TimerElapsed {
        timer_id: RUN_DEADLINE_TIMER,
    });
    assert_eq!(react_rows(&again), [ReactRow::FinishingRunDeadline]);
    let _ = run.handle(Event::RunEndCommitted);
    let result = run.result().expect("ended");
    assert_eq!(result.reason, "run deadline exceeded");
}

#[test]
fn r_in_7_a_run_that_ends_first_cancels_its_deadline() {
    use agentloop_core::react::RUN_DEADLINE_TIMER;
    let cfg = RunConfig {
        run_deadline_ms: Some(5_000),
        ..RunConfig::default()
    };
    let mut run = Run::new(cfg);
    let _ = run.handle(Event::Start {
        run_id: "r".into(),
        history: vec![],
        input: vec![Message::user("hi")],
        session_turns: 0,
    });
    let s = run.handle(Event::Abort {
        reason: "user".into(),
        kill: Default::default(),
    });
    assert_eq!(cancelled(&s), [RUN_DEADLINE_TIMER]);
}
