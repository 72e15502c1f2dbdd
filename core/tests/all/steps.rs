//! Helpers the `Run`-level tests share: starting a run, what a step asked for, streaming an
//! answer, and which chart rows a step took.

use agentloop_core::chart::{ProcessRow, ReactRow};
use agentloop_core::model::ModelRequest;
use agentloop_core::output::OutputRejected;
use agentloop_core::{AttemptId, Effect, Event, Message, MessageDelta, Run, Step, Transition};

/// Starts `run` (run id `r1`, no history) with the user message `text`.
pub fn start(run: &mut Run, text: &str) -> Step {
    run.handle(Event::Start {
        run_id: "r1".into(),
        history: vec![],
        input: vec![Message::user(text)],
        session_turns: 0,
    })
}

/// The model request a step starts, if any.
pub fn request_of(step: &Step) -> Option<ModelRequest> {
    step.effects.iter().find_map(|e| match e {
        Effect::CallModel { request } => Some(request.clone()),
        _ => None,
    })
}

/// The attempt a request is.
pub fn attempt_id(r: &ModelRequest) -> AttemptId {
    AttemptId {
        run_id: r.run_id.clone(),
        model_call_index: r.model_call_index,
        attempt: r.attempt,
    }
}

/// The attempt of the model request a step starts; fails without one.
pub fn attempt_of(step: &Step) -> AttemptId {
    attempt_id(&request_of(step).expect("a model request"))
}

/// Streams `text` as the answer to `r` and ends the attempt with a `done` carrying
/// `output_rejected`; returns the `done` step.
pub fn answer(
    run: &mut Run,
    r: &ModelRequest,
    text: &str,
    output_rejected: Option<OutputRejected>,
) -> Step {
    let attempt = attempt_id(r);
    let _ = run.handle(Event::StreamOpened {
        attempt: attempt.clone(),
    });
    for (seq, delta) in [
        MessageDelta::TextDelta { text: text.into() },
        MessageDelta::Finish,
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
    run.handle(Event::Done {
        attempt,
        rejected_arguments: Vec::new(),
        output_rejected,
    })
}

/// The outer chart rows a step took, in order; fails unless every guard check held and every
/// transition conforms.
pub fn react_rows(step: &Step) -> Vec<ReactRow> {
    assert!(step.guard_violations().is_empty(), "{step:?}");
    step.transitions
        .iter()
        .filter_map(|t| match t {
            Transition::React { row, .. } => {
                assert!(t.conforms(), "{t:?}");
                *row
            }
            _ => None,
        })
        .collect()
}

/// The inner chart rows among `transitions`, in order.
pub fn process_rows_in(transitions: &[Transition]) -> Vec<ProcessRow> {
    transitions
        .iter()
        .filter_map(|t| match t {
            Transition::Process { row, .. } => *row,
            _ => None,
        })
        .collect()
}

/// The inner chart rows a step took, in order; fails unless every guard check held.
pub fn process_rows(step: &Step) -> Vec<ProcessRow> {
    assert!(step.guard_violations().is_empty(), "{step:?}");
    process_rows_in(&step.transitions)
}
