//! Usage limits: Planning checks tokens, cost, model calls and tool calls before
//! each step; a reached limit asks for one final answer without tools
//! (`planning_limit_final`) or ends the run at once (`planning_limit_stop`), and the run-end
//! reason names the limit.

use crate::steps::{attempt_id, request_of, start};
use agentloop_core::agent_event::AgentEvent;
use agentloop_core::chart::ReactRow;
use agentloop_core::message::{FinishReason, Usage};
use agentloop_core::model::ModelRequest;
use agentloop_core::react::limits::Spent;
use agentloop_core::react::{CostLimit, LimitAction, LimitKind, UsageLimits, LIMIT_REMINDER};
use agentloop_core::{
    Effect, Event, Message, MessageDelta, Outcome, Run, RunConfig, Step, ToolSpec, ToolStatus,
};

fn config(limits: UsageLimits) -> RunConfig {
    RunConfig {
        tools: vec![ToolSpec {
            name: "calc".into(),
            description: String::new(),
            parameters: serde_json::json!({}),
        }]
        .into(),
        limits,
        ..RunConfig::default()
    }
}

fn react_rows(steps: &[Step]) -> Vec<ReactRow> {
    steps.iter().flat_map(crate::steps::react_rows).collect()
}

fn limit_events(steps: &[Step]) -> Vec<(LimitKind, f64, f64, LimitAction)> {
    steps
        .iter()
        .flat_map(|s| &s.effects)
        .filter_map(|e| match e {
            Effect::Emit {
                event:
                    AgentEvent::UsageLimitReached {
                        limit,
                        used,
                        max,
                        action,
                    },
            } => Some((*limit, *used, *max, *action)),
            _ => None,
        })
        .collect()
}

/// Streams one step: `calls` tool calls (ids `c<step>_<i>`) or, with none, a text answer;
/// reports `usage`; finishes the calls. Returns every step the run took.
fn step(run: &mut Run, r: &ModelRequest, calls: usize, usage: Usage) -> Vec<Step> {
    let attempt = attempt_id(r);
    let mut out = vec![run.handle(Event::StreamOpened {
        attempt: attempt.clone(),
    })];
    let mut deltas: Vec<MessageDelta> = (0..calls)
        .map(|i| MessageDelta::ToolCall {
            id: format!("c{}_{i}", r.model_call_index),
            name: "calc".into(),
            // Distinct arguments: identical calls in a row would be a doom loop (R-TOOL-4).
            arguments: format!("{{\"step\": {}, \"i\": {i}}}", r.model_call_index),
        })
        .collect();
    if calls == 0 {
        deltas.push(MessageDelta::TextDelta {
            text: "the answer".into(),
        });
    }
    deltas.push(MessageDelta::FinishStep {
        finish_reason: Some(if calls == 0 {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        }),
        raw_finish_reason: None,
        usage: Some(usage),
    });
    deltas.push(MessageDelta::Finish);
    for (seq, delta) in deltas.into_iter().enumerate() {
        out.push(run.handle(Event::Delta {
            attempt: attempt.clone(),
            seq: seq as u64,
            delta,
        }));
    }
    out.push(run.handle(Event::done(attempt)));
    for i in 0..calls {
        out.push(run.handle(Event::ToolFinished {
            tool_call_id: format!("c{}_{i}", r.model_call_index),
            status: ToolStatus::Completed,
            content: "1".into(),
        }));
    }
    out
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

#[test]
fn a_reached_token_limit_asks_for_one_final_answer_without_tools() {
    let mut run = Run::new(config(UsageLimits {
        output_tokens: Some(100),
        ..UsageLimits::default()
    }));
    let r1 = request_of(&start(&mut run, "hi")).expect("first request");
    let steps = step(&mut run, &r1, 1, usage(10, 150));
    assert!(
        react_rows(&steps).contains(&ReactRow::PlanningLimitFinal),
        "{steps:?}"
    );
    assert_eq!(
        limit_events(&steps),
        [(
            LimitKind::OutputTokens,
            150.0,
            100.0,
            LimitAction::FinalAnswer
        )]
    );
    let r2 = steps
        .iter()
        .find_map(request_of)
        .expect("the final-answer request");
    assert!(r2.tools.is_empty(), "the final-answer step offers no tools");
    assert_eq!(
        r2.messages.iter().last(),
        Some(&Message::user(LIMIT_REMINDER))
    );
    let steps = step(&mut run, &r2, 0, usage(10, 5));
    assert!(limit_events(&steps).is_empty(), "announced once");
    let _ = run.handle(Event::RunEndCommitted);
    let result = run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Completed);
    assert_eq!(result.reason, "usage_limit:output_tokens");
    assert_eq!(result.final_text(), Some("the answer"));
}

#[test]
fn with_on_limit_stop_the_run_ends_at_once() {
    let mut run = Run::new(config(UsageLimits {
        tool_calls: Some(2),
        on_limit: LimitAction::Stop,
        ..UsageLimits::default()
    }));
    let r1 = request_of(&start(&mut run, "hi")).expect("first request");
    // One call: under the limit, the run goes on.
    let steps = step(&mut run, &r1, 1, usage(1, 1));
    let r2 = steps.iter().find_map(request_of).expect("second request");
    assert!(!r2.tools.is_empty());
    // Two more: 3 >= 2, the run stops without another request.
    let steps = step(&mut run, &r2, 2, usage(1, 1));
    assert!(react_rows(&steps).contains(&ReactRow::PlanningLimitStop));
    assert!(steps.iter().all(|s| request_of(s).is_none()));
    assert_eq!(
        limit_events(&steps),
        [(LimitKind::ToolCalls, 3.0, 2.0, LimitAction::Stop)]
    );
    let _ = run.handle(Event::RunEndCommitted);
    let result = run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Completed);
    assert_eq!(result.reason, "usage_limit:tool_calls");
}

#[test]
fn a_final_answer_step_that_calls_tools_anyway_ends_the_run() {
    let mut run = Run::new(config(UsageLimits {
        model_calls: Some(1),
        ..UsageLimits::default()
    }));
    let r1 = request_of(&start(&mut run, "hi")).expect("first request");
    let steps = step(&mut run, &r1, 1, usage(1, 1));
    assert_eq!(
        limit_events(&steps),
        [(LimitKind::ModelCalls, 1.0, 1.0, LimitAction::FinalAnswer)]
    );
    let r2 = steps.iter().find_map(request_of).expect("final request");
    // The model calls a tool it was not offered: an unknown tool; then the run stops.
    let steps = step(&mut run, &r2, 1, usage(1, 1));
    let rows = react_rows(&steps);
    assert!(rows.contains(&ReactRow::PlanningLimitStop), "{rows:?}");
    assert!(steps.iter().all(|s| request_of(s).is_none()));
    let _ = run.handle(Event::RunEndCommitted);
    assert_eq!(
        run.result().expect("ended").reason,
        "usage_limit:model_calls"
    );
}

#[test]
fn limits_count_what_they_name() {
    let spent = |input, output, model_calls, tool_calls| Spent {
        usage: usage(input, output),
        model_calls,
        tool_calls,
    };
    assert_eq!(UsageLimits::default().reached(&spent(9, 9, 9, 9)), None);
    assert!(UsageLimits::default().is_none());
    let total = UsageLimits {
        total_tokens: Some(100),
        ..UsageLimits::default()
    };
    assert!(!total.is_none());
    assert_eq!(total.reached(&spent(60, 39, 0, 0)), None);
    assert_eq!(
        total.reached(&spent(60, 40, 0, 0)),
        Some((LimitKind::TotalTokens, 100.0, 100.0))
    );
    let input = UsageLimits {
        input_tokens: Some(50),
        ..UsageLimits::default()
    };
    assert_eq!(input.reached(&spent(49, 1000, 0, 0)), None);
    assert_eq!(
        input.reached(&spent(50, 0, 0, 0)).map(|r| r.0),
        Some(LimitKind::InputTokens)
    );
    // $3 / $15 per million: 100k in + 10k out = $0.30 + $0.15.
    let cost = UsageLimits {
        cost: Some(CostLimit {
            max_usd: 0.45,
            input_usd_per_mtok: 3.0,
            output_usd_per_mtok: 15.0,
        }),
        ..UsageLimits::default()
    };
    assert_eq!(cost.reached(&spent(100_000, 9_000, 0, 0)), None);
    let (kind, used, max) = cost
        .reached(&spent(100_000, 10_000, 0, 0))
        .expect("reached");
    assert_eq!(kind, LimitKind::Cost);
    assert!((used - 0.45).abs() < 1e-9 && max == 0.45);
    assert_eq!(LimitKind::Cost.reason(), "usage_limit:cost");
    let calls = UsageLimits {
        model_calls: Some(3),
        tool_calls: Some(5),
        ..UsageLimits::default()
    };
    assert_eq!(calls.reached(&spent(0, 0, 2, 4)), None);
    assert_eq!(
        calls.reached(&spent(0, 0, 3, 4)).map(|r| r.0),
        Some(LimitKind::ModelCalls)
    );
    assert_eq!(
        calls.reached(&spent(0, 0, 2, 5)).map(|r| r.0),
        Some(LimitKind::ToolCalls)
    );
}
