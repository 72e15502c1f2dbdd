//! A model state reached by replay, shared by the run and the session models: the inputs from
//! the initial state, the fingerprint the checker compares states by, the violations seen on
//! the way and the inputs worth trying next.

use std::hash::{Hash, Hasher};

use crate::properties::Violations;

/// A model state: `A` is the model's input, `K` its fingerprint.
#[derive(Clone, Debug)]
pub struct Explored<A, K> {
    /// The inputs from the initial state.
    pub inputs: Vec<A>,
    /// The fingerprint: two states are the same when their fingerprints are.
    pub key: K,
    /// The violations seen on the way: the property, what happened, and how many inputs in.
    pub violations: Vec<(&'static str, String, usize)>,
    /// The inputs worth trying here.
    pub enabled: Vec<A>,
}

impl<A, K: Hash> Hash for Explored<A, K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key.hash(state);
    }
}

impl<A, K: PartialEq> PartialEq for Explored<A, K> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl<A, K> Explored<A, K> {
    /// A state from its inputs, fingerprint, the observer's violations and the enabled
    /// inputs; `parent`: the state it follows (a violation it had keeps its place).
    pub fn new(
        parent: Option<&Self>,
        inputs: Vec<A>,
        key: K,
        violations: &Violations,
        enabled: Vec<A>,
    ) -> Self {
        let violations = violations
            .iter()
            .map(|(k, v)| {
                let at = parent
                    .and_then(|p| p.violations.iter().find(|(q, _, _)| q == k))
                    .map_or(inputs.len(), |(_, _, at)| *at);
                (*k, v.clone(), at)
            })
            .collect();
        Explored {
            inputs,
            key,
            violations,
            enabled,
        }
    }

    /// The inputs up to the one that violated `property` (all of them if none did).
    pub fn inputs_to(&self, property: &str) -> &[A] {
        let at = self
            .violations
            .iter()
            .find(|(p, _, _)| *p == property)
            .map_or(self.inputs.len(), |(_, _, at)| *at);
        &self.inputs[..at.min(self.inputs.len())]
    }

    /// Whether `property` was violated on the way here.
    pub fn violated(&self, property: &str) -> bool {
        self.violations.iter().any(|(p, _, _)| *p == property)
    }

    /// The violation of `property` on the way here, if any.
    pub fn why(&self, property: &str) -> Result<(), String> {
        match self.violations.iter().find(|(p, _, _)| *p == property) {
            Some((_, why, _)) => Err(why.clone()),
            None => Ok(()),
        }
    }
}
