//! Helpers the `Run`-level tests share: what a step asked for and which outer rows it took.

use agentloop_core::chart::ReactRow;
use agentloop_core::model::ModelRequest;
use agentloop_core::{Effect, Step, Transition};

/// The model request a step starts, if any.
pub fn request_of(step: &Step) -> Option<ModelRequest> {
    step.effects.iter().find_map(|e| match e {
        Effect::CallModel { request } => Some(request.clone()),
        _ => None,
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
