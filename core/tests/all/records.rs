//! Traces built record by record, for the tests of what reads traces (the transcript, the
//! comparison of two traces): each record gets the next index.

use agentloop_core::trace::{Trace, TraceHeader, TraceRecord, TRACE_VERSION};
use agentloop_core::{AgentEvent, Effect, Event, Message, RunConfig, Step, ToolSpec, Transition};
use serde_json::Value;

/// The start of run `r1` with one user message and no history.
pub fn start(user: &str) -> Event {
    Event::Start {
        run_id: "r1".into(),
        history: vec![],
        input: vec![Message::user(user)],
        session_turns: 0,
    }
}

/// A trace under construction.
pub struct Records {
    /// The trace so far.
    pub trace: Trace,
}

impl Records {
    /// A trace of a run of `model` offering `tools`, with no records yet.
    pub fn new(model: &str, tools: Vec<ToolSpec>) -> Records {
        let config = RunConfig {
            model: model.into(),
            tools: tools.clone().into(),
            ..RunConfig::default()
        };
        Records {
            trace: Trace::new(TraceHeader {
                version: TRACE_VERSION,
                agentloop: "0.0.0".into(),
                session: "s".into(),
                timeouts: None,
                config,
                tools: tools.into(),
            }),
        }
    }

    fn next(&self) -> u64 {
        self.trace.records.len() as u64
    }

    /// Appends an input.
    pub fn input(mut self, event: Event) -> Records {
        let index = self.next();
        self.trace.records.push(TraceRecord::Input { index, event });
        self
    }

    /// Appends a transition given as its JSON form (`{"machine": "react", "from": ..}`).
    pub fn transition(mut self, json: Value) -> Records {
        let transition: Transition = serde_json::from_value(json).expect("a transition");
        let index = self.next();
        self.trace
            .records
            .push(TraceRecord::Transition { index, transition });
        self
    }

    /// Appends an effect.
    pub fn effect(mut self, effect: Effect) -> Records {
        let index = self.next();
        self.trace
            .records
            .push(TraceRecord::Effect { index, effect });
        self
    }

    /// Appends the emission of an observable event.
    pub fn emit(self, event: AgentEvent) -> Records {
        self.effect(Effect::Emit { event })
    }

    /// Appends an input and the step it caused, as the runtime records them.
    pub fn step(mut self, event: &Event, step: &Step) -> Records {
        self.trace.record(event, step);
        self
    }
}
