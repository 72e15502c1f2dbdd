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
