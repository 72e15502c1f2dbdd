//! The order in which tool completions reach the machine.
//!
//! Tools of one message run concurrently and finish in whatever order the OS schedules them.
//! Fed to the machine in that order, the same run gives a different trace each time, so a
//! trace could not be compared with (or snapshot against) another recording of the same run.
//! [`ToolOrder::CallOrder`] (the default) holds a completion back until every call issued
//! before it has completed or been killed, so the machine sees completions in the model's
//! call order and identical runs record identical traces. The tools still run in parallel;
//! only the delivery of their results waits (R-IN-4, R-TRACE-2).

use std::collections::{HashMap, HashSet, VecDeque};

use crate::event::Event;

/// Holds completions back until every earlier call has completed or been killed. Each call
/// costs O(1) amortized (a queue, a set of the calls still awaited, a map of held results), so
/// n calls cost O(n).
#[derive(Debug, Default)]
pub(crate) struct CompletionOrder {
    /// Calls in start order; a killed call stays until it reaches the front and is skipped.
    issued: VecDeque<String>,
    /// Calls started, not yet delivered and not killed.
    awaited: HashSet<String>,
    /// Completions that arrived before an earlier call's.
    held: HashMap<String, Event>,
}

impl CompletionOrder {
    /// A call started.
    pub(crate) fn started(&mut self, tool_call_id: &str) {
        self.issued.push_back(tool_call_id.to_string());
        self.awaited.insert(tool_call_id.to_string());
    }

    /// A call was killed: it will never complete, so it no longer holds later ones back. A
    /// completion that was already held for it is dropped (the machine closed the call).
    pub(crate) fn killed(&mut self, tool_call_id: &str) -> Vec<Event> {
        self.awaited.remove(tool_call_id);
        self.held.remove(tool_call_id);
        self.release()
    }

    /// A completion arrived; appends to `out` the completions that may go to the machine now,
    /// in call order. Completions of calls this buffer does not await, and every other input
    /// (a streamed delta), pass straight through.
    pub(crate) fn arrived(&mut self, event: Event, out: &mut VecDeque<Event>) {
        let id = match &event {
            Event::ToolFinished { tool_call_id, .. } if self.awaited.contains(tool_call_id) => {
                tool_call_id.clone()
            }
            _ => return out.push_back(event),
        };
        self.held.insert(id, event);
        out.extend(self.release());
    }

    fn release(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        while let Some(head) = self.issued.front() {
            if !self.awaited.contains(head) {
                // Killed: skip it.
                self.issued.pop_front();
                continue;
            }
            match self.held.remove(head) {
                Some(e) => {
                    self.awaited.remove(head);
                    self.issued.pop_front();
                    out.push(e);
                }
                None => break,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolStatus;

    fn done(id: &str) -> Event {
        Event::ToolFinished {
            tool_call_id: id.into(),
            status: ToolStatus::Completed,
            content: id.into(),
        }
    }

    fn arrive(o: &mut CompletionOrder, event: Event) -> Vec<Event> {
        let mut out = VecDeque::new();
        o.arrived(event, &mut out);
        out.into()
    }

    fn ids(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                Event::ToolFinished { tool_call_id, .. } => tool_call_id.clone(),
                other => other.name().to_string(),
            })
            .collect()
    }

    #[test]
    fn completions_are_released_in_call_order() {
        let mut o = CompletionOrder::default();
        for id in ["a", "b", "c", "d"] {
            o.started(id);
        }
        assert!(arrive(&mut o, done("c")).is_empty());
        assert!(arrive(&mut o, done("b")).is_empty());
        assert_eq!(ids(&arrive(&mut o, done("a"))), ["a", "b", "c"]);
        assert_eq!(ids(&arrive(&mut o, done("d"))), ["d"]);
    }

    #[test]
    fn a_killed_call_no_longer_holds_later_ones_back() {
        let mut o = CompletionOrder::default();
        for id in ["a", "b", "c"] {
            o.started(id);
        }
        assert!(arrive(&mut o, done("b")).is_empty());
        assert_eq!(ids(&o.killed("a")), ["b"]);
        // A late completion of the killed call is dropped by the machine as stale; here it
        // passes through (the buffer forgot the call), it does not block anything.
        assert_eq!(ids(&arrive(&mut o, done("a"))), ["a"]);
        assert_eq!(ids(&arrive(&mut o, done("c"))), ["c"]);
    }

    #[test]
    fn unknown_completions_and_other_events_pass_through() {
        let mut o = CompletionOrder::default();
        o.started("a");
        assert_eq!(ids(&arrive(&mut o, done("zz"))), ["zz"]);
        assert_eq!(
            ids(&arrive(&mut o, Event::TimerElapsed { timer_id: 1 })),
            ["timer_elapsed"]
        );
    }
}
