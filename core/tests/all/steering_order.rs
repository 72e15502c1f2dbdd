//! R-CTL-2: steering messages join the next request in the order they arrived — in the
//! request, in the `steering_applied` events and in the persisted `user_input` entries. (A
//! hand-seeded bug applying them in reverse survived every suite before these tests.)

use crate::steps::{answer, request_of, start};
use agentloop_core::agent_event::AgentEvent;
use agentloop_core::{Effect, Entry, Event, Message, Run, RunConfig, Step};

const SENT: [&str; 3] = ["first", "second", "third"];

/// The user messages at the end of `messages`, oldest first.
fn trailing_user_texts(messages: &[Message]) -> Vec<String> {
    let mut texts: Vec<String> = messages
        .iter()
        .rev()
        .map_while(Message::user_text)
        .collect();
    texts.reverse();
    texts
}

fn applied(step: &Step) -> Vec<&str> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Emit {
                event: AgentEvent::SteeringApplied { text },
            } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn persisted_inputs(step: &Step) -> Vec<String> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Persist {
                entry: Entry::UserInput { message, .. },
            } => message.user_text(),
            _ => None,
        })
        .collect()
}

#[test]
fn r_ctl_2_steering_messages_are_applied_in_arrival_order() {
    let mut run = Run::new(RunConfig::default());
    let first = request_of(&start(&mut run, "hi")).expect("a first request");
    for text in SENT {
        let s = run.handle(Event::Steer { text: text.into() });
        assert!(!s.unhandled, "{s:?}");
    }
    assert_eq!(run.steering(), SENT, "queued in arrival order");
    // The answer would end the run; the queued steering starts another step instead.
    let s = answer(&mut run, &first, "an answer", None);
    let next = request_of(&s).expect("steering keeps the run going");
    assert_eq!(trailing_user_texts(&next.messages), SENT);
    assert_eq!(applied(&s), SENT);
    assert_eq!(persisted_inputs(&s), SENT);
    assert!(run.steering().is_empty());
}

#[test]
fn seed_001_steering_that_keeps_an_ending_run_going_is_announced_as_agent_resumed() {
    let resumed = |s: &Step| -> Vec<String> {
        s.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Emit {
                    event: AgentEvent::AgentResumed { trigger },
                } => Some(trigger.clone()),
                _ => None,
            })
            .collect()
    };
    let mut run = Run::new(RunConfig::default());
    let first = request_of(&start(&mut run, "hi")).expect("a first request");
    let _ = run.handle(Event::Steer {
        text: "one more thing".into(),
    });
    // The answer would end the run: the steering resumes it, announced before it is applied.
    let s = answer(&mut run, &first, "an answer", None);
    assert!(request_of(&s).is_some());
    assert_eq!(resumed(&s), ["steering"]);
    let at = |f: &dyn Fn(&AgentEvent) -> bool| {
        s.effects
            .iter()
            .position(|e| matches!(e, Effect::Emit { event } if f(event)))
    };
    assert!(
        at(&|e| matches!(e, AgentEvent::AgentResumed { .. }))
            < at(&|e| matches!(e, AgentEvent::SteeringApplied { .. }))
    );
    // Steering merged while the run goes on anyway (tool calls) resumes nothing.
    let mut config = RunConfig {
        tools: vec![agentloop_core::ToolSpec {
            name: "calc".into(),
            description: "adds".into(),
            parameters: serde_json::json!({"type": "object"}),
        }]
        .into(),
        ..RunConfig::default()
    };
    config.step.retry.jitter_percent = 0;
    let mut run = Run::new(config);
    let r = request_of(&start(&mut run, "hi")).expect("a first request");
    let attempt = crate::steps::attempt_id(&r);
    let _ = run.handle(Event::StreamOpened {
        attempt: attempt.clone(),
    });
    for (seq, delta) in [
        agentloop_core::MessageDelta::ToolCall {
            id: "c1".into(),
            name: "calc".into(),
            arguments: "{}".into(),
        },
        agentloop_core::MessageDelta::Finish,
    ]
    .into_iter()
    .enumerate()
    {
        let _ = run.handle(Event::Delta {
            attempt: attempt.clone(),
            seq: seq as u64,
            delta,
        });
    }
    let _ = run.handle(Event::Done {
        attempt,
        rejected_arguments: Vec::new(),
        output_rejected: None,
    });
    let _ = run.handle(Event::Steer {
        text: "also this".into(),
    });
    let s = run.handle(Event::ToolFinished {
        tool_call_id: "c1".into(),
        status: agentloop_core::ToolStatus::Completed,
        content: "2".into(),
    });
    assert_eq!(applied(&s), ["also this"], "{s:?}");
    assert!(resumed(&s).is_empty());
}
