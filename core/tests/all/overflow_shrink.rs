//! Context overflows and malformed answers on the pure machines: a provider's context overflow
//! asks for a compaction below what was sent even with no budget configured (R-OUT-6), a
//! known or configured context window is the budget (R-CTX-3), and a malformed answer is
//! retried once per step (R-IN-2).

use crate::steps::{attempt_id, process_rows, react_rows, request_of};
use agentloop_core::chart::{ProcessRow, ReactRow};
use agentloop_core::context::{
    estimate_tokens, known_context_window, overflow_budget, overflow_figures, pinned_tokens,
};
use agentloop_core::error::{ErrorKind, ModelError};
use agentloop_core::model::ModelRequest;
use agentloop_core::process::{RetryDeciderRef, RetryPolicy};
use agentloop_core::{AssistantMessage, Effect, Event, Message, Outcome, Run, RunConfig, Step};

fn said(text: &str) -> Message {
    Message::Assistant(AssistantMessage {
        text: text.into(),
        ..AssistantMessage::default()
    })
}

/// Four earlier turns of ~250 tokens each, then `latest`.
fn history() -> Vec<Message> {
    let mut h = Vec::new();
    for i in 1..=4 {
        h.push(Message::user(format!("question {i}")));
        h.push(said(&"x".repeat(1000)));
    }
    h
}

fn start_with(run: &mut Run, history: Vec<Message>, latest: &str) -> Step {
    run.handle(Event::Start {
        run_id: "r1".into(),
        history,
        input: vec![Message::user(latest)],
        session_turns: 4,
    })
}

/// The `compact` effect of a step: its messages and budget.
fn compact_of(step: &Step) -> Option<(Vec<Message>, Option<u64>, Option<usize>)> {
    step.effects.iter().find_map(|e| match e {
        Effect::Compact {
            messages,
            budget_tokens,
            max_messages,
        } => Some((messages.clone(), *budget_tokens, *max_messages)),
        _ => None,
    })
}

fn overflow(run: &mut Run, r: &ModelRequest, message: &str) -> Step {
    run.handle(Event::ContextOverflow {
        attempt: attempt_id(r),
        error: ModelError::new(ErrorKind::ContextOverflow, message),
    })
}

#[test]
fn r_out_6_an_overflow_compacts_below_what_was_sent_with_the_default_configuration() {
    let mut run = Run::new(RunConfig::default());
    let r = request_of(&start_with(&mut run, history(), "question 5")).expect("request");
    let sent = estimate_tokens(&r.messages);
    let s = overflow(
        &mut run,
        &r,
        "This model's maximum context length is 1000 tokens. However, your messages resulted in 1100 tokens.",
    );
    assert_eq!(react_rows(&s), [ReactRow::ExecutingOverflow]);
    let (messages, budget, cap) = compact_of(&s).expect("a compaction is asked for");
    assert_eq!(estimate_tokens(&messages), sent);
    assert_eq!(cap, None, "no message cap configured");
    let budget = budget.expect("a budget although none is configured");
    assert!(budget < sent, "{budget} < {sent}");
    // The provider's ratio, less a tenth: 1000/1100 * 0.9 of what was sent.
    assert_eq!(budget, sent * 1000 * 9 / (1100 * 10));
    // The truncation that follows keeps the goal and the latest request, and the step goes
    // again with the same index.
    let (kept, removed) =
        agentloop_core::context::truncate(&messages, Some(budget), None).expect("fits");
    assert!(removed > 0);
    let s = run.handle(Event::CompactionDone {
        messages: kept,
        removed,
    });
    assert_eq!(react_rows(&s)[0], ReactRow::CompactingDone);
    let again = request_of(&s).expect("the step is requested again");
    assert_eq!(again.model_call_index, r.model_call_index);
    assert!(estimate_tokens(&again.messages) < sent);
}

#[test]
fn r_out_6_the_overflow_budget_never_asks_for_less_than_the_pinned_messages_while_any_can_go() {
    let mut run = Run::new(RunConfig::default());
    // The latest request alone is most of the context: the provider's ratio would ask for
    // less than the pinned goal and request take.
    let huge = format!("question 5 {}", "y".repeat(4000));
    let r = request_of(&start_with(&mut run, history(), &huge)).expect("request");
    let s = overflow(
        &mut run,
        &r,
        "prompt is too long: 2100 tokens > 1000 maximum",
    );
    let (messages, budget, _) = compact_of(&s).expect("compaction");
    let floor = pinned_tokens(&messages);
    assert_eq!(budget, Some(floor), "as far as possible, not a failure");
    let (kept, removed) = agentloop_core::context::truncate(&messages, budget, None).expect("fits");
    assert_eq!(kept.len(), 2, "only the goal and the latest request");
    // Refused again with only pinned messages left: nothing more can go, the run fails.
    let s = run.handle(Event::CompactionDone {
        messages: kept,
        removed,
    });
    let r = request_of(&s).expect("requested again");
    let s = overflow(
        &mut run,
        &r,
        "prompt is too long: 1050 tokens > 1000 maximum",
    );
    let (messages, budget, _) = compact_of(&s).expect("compaction");
    let error = agentloop_core::context::truncate(&messages, budget, None).expect_err("cannot fit");
    let s = run.handle(Event::CompactionFailed {
        error: error.to_string(),
    });
    assert_eq!(react_rows(&s), [ReactRow::CompactingFailed]);
    let _ = run.handle(Event::RunEndCommitted);
    let result = run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Failed);
    assert_eq!(result.reason, "compaction_failed");
}

#[test]
fn r_out_6_a_configured_budget_smaller_than_the_shrink_wins() {
    let mut run = Run::new(RunConfig {
        context_budget_tokens: Some(700),
        ..RunConfig::default()
    });
    // Over the budget at once: a hook vetoes that compaction, the step goes, the provider
    // refuses it.
    let s = start_with(&mut run, history(), "question 5");
    assert!(react_rows(&s).contains(&ReactRow::PlanningCompact));
    let s = run.handle(Event::CompactionVetoed {
        reason: "not now".into(),
    });
    let r = request_of(&s).expect("request");
    let s = overflow(&mut run, &r, "context_length_exceeded");
    let (messages, budget, _) = compact_of(&s).expect("compaction");
    assert!(overflow_budget(estimate_tokens(&messages), "") > 560);
    assert_eq!(budget, Some(560), "700 * compact_ratio 0.8");
}

#[test]
fn r_ctx_3_a_context_window_is_the_budget_and_known_models_have_one() {
    // The configured window: Planning compacts before the provider refuses (~1040 tokens
    // against 0.8 * 1200).
    let mut run = Run::new(RunConfig {
        context_window: Some(1200),
        ..RunConfig::default()
    });
    let s = start_with(&mut run, history(), "question 5");
    assert!(react_rows(&s).contains(&ReactRow::PlanningCompact));
    assert_eq!(compact_of(&s).and_then(|c| c.1), Some(960));
    // No window: no compaction.
    let mut run = Run::new(RunConfig::default());
    let s = start_with(&mut run, history(), "question 5");
    assert!(compact_of(&s).is_none());
    // The window of a known model is the budget when none is configured.
    let mut run = Run::new(RunConfig {
        model: "openai:gpt-4".into(),
        ..RunConfig::default()
    });
    let big: Vec<Message> = (0..8)
        .flat_map(|i| [Message::user(format!("q{i}")), said(&"z".repeat(4000))])
        .collect();
    let s = start_with(&mut run, big, "next");
    assert_eq!(
        compact_of(&s).and_then(|c| c.1),
        Some((8192.0 * 0.8) as u64)
    );
}

#[test]
fn r_ctx_3_the_built_in_windows_and_the_overflow_figures() {
    assert_eq!(known_context_window("gpt-4o"), Some(128_000));
    assert_eq!(known_context_window("GPT-4.1-mini"), Some(1_047_576));
    assert_eq!(
        known_context_window("openrouter:openai/gpt-4-turbo"),
        Some(128_000)
    );
    assert_eq!(
        known_context_window("claude-3-5-haiku-latest"),
        Some(200_000)
    );
    assert_eq!(known_context_window("o1-mini"), Some(128_000));
    // A more specific name overrides its family's window.
    assert_eq!(known_context_window("gpt-4.5-preview"), Some(128_000));
    assert_eq!(known_context_window("o1-preview-2024-09-12"), Some(128_000));
    assert_eq!(known_context_window("o1"), Some(200_000));
    assert_eq!(known_context_window("gpt-4-1106-preview"), Some(128_000));
    assert_eq!(known_context_window("gpt-4-0613"), Some(8_192));
    assert_eq!(known_context_window("gpt-3.5-turbo-instruct"), Some(4_096));
    assert_eq!(known_context_window("gpt-5-mini"), Some(400_000));
    assert_eq!(known_context_window("claude-2.0"), Some(100_000));
    assert_eq!(known_context_window("scripted"), None);
    assert_eq!(known_context_window("qwen2.5:7b"), None);
    assert_eq!(
        overflow_figures("This model's maximum context length is 8192 tokens. However, your messages resulted in 9,000 tokens."),
        Some((8192, 9000))
    );
    assert_eq!(
        overflow_figures("prompt is too long: 208310 tokens > 200000 maximum"),
        Some((200_000, 208_310))
    );
    assert_eq!(
        overflow_figures("maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion)"),
        Some((4096, 5000))
    );
    assert_eq!(overflow_figures("gpt-4-0613: input is too long"), None);
    assert_eq!(overflow_figures("1000 tokens > 1000 maximum"), None);
    // Always below what was sent.
    for message in [
        "",
        "prompt is too long: 101 tokens > 100 maximum",
        "x 5 tokens > 1 maximum",
    ] {
        for sent in [1, 7, 100, 10_000] {
            assert!(overflow_budget(sent, message) < sent, "{message:?} {sent}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Item 9: a malformed answer is retried once per step.

fn malformed(run: &mut Run, r: &ModelRequest) -> Step {
    run.handle(Event::TransportError {
        attempt: attempt_id(r),
        error: ModelError::new(
            ErrorKind::MalformedResponse,
            "HTTP 200: expected text/event-stream, got application/json: {malformed json",
        )
        .with_status(200),
    })
}

fn backoff_timer(step: &Step) -> u64 {
    step.effects
        .iter()
        .find_map(|e| match e {
            Effect::StartTimer { timer_id, .. } => Some(*timer_id),
            _ => None,
        })
        .expect("a backoff timer")
}

fn config() -> RunConfig {
    let mut c = RunConfig::default();
    c.step.retry.jitter_percent = 0;
    c
}

#[test]
fn r_in_2_a_malformed_answer_is_retried_once_then_fails_fast() {
    let mut run = Run::new(config());
    let r1 = request_of(&start_with(&mut run, vec![], "hi")).expect("request");
    let s = malformed(&mut run, &r1);
    assert_eq!(process_rows(&s), [ProcessRow::RequestingRetry]);
    let r2 = request_of(&run.handle(Event::TimerElapsed {
        timer_id: backoff_timer(&s),
    }))
    .expect("attempt 2");
    assert_eq!((r2.model_call_index, r2.attempt), (1, 2));
    // The same answer again: not retried, though two retries are left.
    let s = malformed(&mut run, &r2);
    assert_eq!(process_rows(&s), [ProcessRow::RequestingFail]);
    let _ = run.handle(Event::RunEndCommitted);
    let result = run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Failed);
    assert_eq!(result.reason, "malformed_response");
    let error = result
        .error
        .as_ref()
        .and_then(|e| e.model_error())
        .expect("a typed model error");
    assert_eq!(error.kind, ErrorKind::MalformedResponse);
    assert!(
        error
            .message
            .contains("the retry got a malformed answer too"),
        "{}",
        error.message
    );
}

#[test]
fn r_in_2_a_malformed_answer_after_another_error_is_still_retried_once() {
    let mut run = Run::new(config());
    let r1 = request_of(&start_with(&mut run, vec![], "hi")).expect("request");
    let s = run.handle(Event::TransportError {
        attempt: attempt_id(&r1),
        error: ModelError::new(ErrorKind::ServerError, "503"),
    });
    let r2 = request_of(&run.handle(Event::TimerElapsed {
        timer_id: backoff_timer(&s),
    }))
    .expect("attempt 2");
    let s = malformed(&mut run, &r2);
    assert_eq!(process_rows(&s), [ProcessRow::RequestingRetry]);
    let r3 = request_of(&run.handle(Event::TimerElapsed {
        timer_id: backoff_timer(&s),
    }))
    .expect("attempt 3");
    let s = malformed(&mut run, &r3);
    assert_eq!(process_rows(&s), [ProcessRow::RequestingFail]);
}

#[test]
fn r_in_2_a_decider_that_retries_everything_still_gets_one_malformed_retry() {
    fn always(_: &ModelError, _: u32) -> bool {
        true
    }
    let mut c = config();
    c.step.retry = RetryPolicy {
        decider: RetryDeciderRef::new("always", always),
        jitter_percent: 0,
        ..RetryPolicy::default()
    };
    let mut run = Run::new(c);
    let r1 = request_of(&start_with(&mut run, vec![], "hi")).expect("request");
    let s = malformed(&mut run, &r1);
    assert_eq!(process_rows(&s), [ProcessRow::RequestingRetry]);
    let r2 = request_of(&run.handle(Event::TimerElapsed {
        timer_id: backoff_timer(&s),
    }))
    .expect("attempt 2");
    let s = malformed(&mut run, &r2);
    assert_eq!(process_rows(&s), [ProcessRow::RequestingFail]);
}
