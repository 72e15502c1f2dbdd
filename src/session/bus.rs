//! The session's event bus (R-EVT-1): one index per session, a tokio broadcast channel for
//! live subscribers, and an optional ring buffer for replay.
//!
//! Ordering: an event gets its index and is sent to the broadcast channel under one lock, so
//! every subscriber sees events in index order, and a `subscribe` taken under the same lock
//! neither misses nor repeats an event between its replay and its live part.
//!
//! Slow subscribers never block the loop: publishing never waits. A subscriber that falls more
//! than the channel capacity behind loses the oldest events it did not read; its next
//! [`Subscription::recv`] returns [`SubscriptionItem::Lagged`] with the number lost, then it
//! continues with the oldest event still available. The same notice is returned first when
//! `subscribe(since)` asks for events older than the ring buffer keeps.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use crate::agent_event::AgentEvent;
use crate::hooks::Hooks;
use crate::runtime::{Clock, EventEnvelope, EventSink};

/// Called for every published event, after it got its index (status, metrics).
pub(crate) type Observer = Box<dyn Fn(&EventEnvelope) -> Vec<AgentEvent> + Send + Sync>;

struct BusState {
    next: u64,
    ring: VecDeque<EventEnvelope>,
}

/// The bus. Cheap to share (`Arc`).
pub struct EventBus {
    state: Mutex<BusState>,
    tx: broadcast::Sender<EventEnvelope>,
    ring_size: usize,
    clock: Arc<dyn Clock>,
    hooks: Arc<dyn Hooks>,
    downstream: Arc<dyn EventSink>,
    observers: Mutex<Vec<Observer>>,
    current_run: Mutex<String>,
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBus")
            .field("ring_size", &self.ring_size)
            .finish()
    }
}

impl EventBus {
    /// A bus with `capacity` slots per live subscriber and a ring buffer of `ring_size` (0 = off).
    /// Every event also goes to the `hooks`' `on_event` and to `downstream` (the agent's own sink).
    pub fn new(
        capacity: usize,
        ring_size: usize,
        clock: Arc<dyn Clock>,
        hooks: Arc<dyn Hooks>,
        downstream: Arc<dyn EventSink>,
    ) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        EventBus {
            state: Mutex::new(BusState {
                next: 0,
                ring: VecDeque::with_capacity(ring_size.min(4096)),
            }),
            tx,
            ring_size,
            clock,
            hooks,
            downstream,
            observers: Mutex::new(Vec::new()),
            current_run: Mutex::new(String::new()),
        }
    }

    pub(crate) fn observe(&self, observer: Observer) {
        if let Ok(mut o) = self.observers.lock() {
            o.push(observer);
        }
    }

    /// Publishes an event (index and timestamp assigned here) and returns its index.
    pub fn publish(&self, run_id: &str, event: AgentEvent) -> u64 {
        let env = EventEnvelope {
            index: 0,
            ts_ms: self.clock.now_ms(),
            run_id: run_id.to_string(),
            event,
        };
        self.publish_envelope(env)
    }

    /// Publishes an envelope, re-indexing it with the bus's index.
    pub fn publish_envelope(&self, mut env: EventEnvelope) -> u64 {
        if let AgentEvent::RunStart { run_id } = &env.event {
            self.set_current_run(run_id);
        }
        {
            let Ok(mut st) = self.state.lock() else {
                return 0;
            };
            env.index = st.next;
            st.next += 1;
            if self.ring_size > 0 {
                if st.ring.len() == self.ring_size {
                    st.ring.pop_front();
                }
                st.ring.push_back(env.clone());
            }
            // No receivers is fine: nobody listens yet.
            let _ = self.tx.send(env.clone());
        }
        let mut derived = Vec::new();
        if let Ok(obs) = self.observers.lock() {
            for o in obs.iter() {
                derived.extend(o(&env));
            }
        }
        self.hooks.on_event(&env);
        self.downstream.emit(&env);
        let index = env.index;
        for d in derived {
            self.publish(&env.run_id, d);
        }
        index
    }

    /// Publishes an event of the current run (empty when idle).
    pub fn publish_current(&self, event: AgentEvent) -> u64 {
        let run = self.current_run();
        self.publish(&run, event)
    }

    /// The run in progress, empty when idle.
    pub fn current_run(&self) -> String {
        self.current_run
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    pub(crate) fn set_current_run(&self, run_id: &str) {
        if let Ok(mut r) = self.current_run.lock() {
            *r = run_id.to_string();
        }
    }

    /// The events the ring buffer holds now, oldest first.
    pub fn buffered(&self) -> Vec<EventEnvelope> {
        self.state
            .lock()
            .map(|s| s.ring.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The index the next event will get.
    pub fn next_index(&self) -> u64 {
        self.state.lock().map(|s| s.next).unwrap_or(0)
    }

    /// Subscribes. With `since = Some(i)`, events with an index greater than `i` still in the
    /// ring buffer are replayed first; `types` keeps only events whose type name is listed.
    pub fn subscribe(&self, since: Option<u64>, types: Option<Vec<String>>) -> Subscription {
        let filter = types.map(|t| t.into_iter().collect::<std::collections::BTreeSet<_>>());
        let keep = |e: &EventEnvelope| {
            filter
                .as_ref()
                .is_none_or(|f| f.contains(&e.event.type_name()))
        };
        let (rx, replay, missed) = match self.state.lock() {
            Ok(st) => {
                let rx = self.tx.subscribe();
                let mut replay = VecDeque::new();
                let mut missed = 0;
                if let Some(since) = since {
                    let available_from = st.ring.front().map(|e| e.index).unwrap_or(st.next);
                    missed = available_from.saturating_sub(since.saturating_add(1));
                    replay.extend(
                        st.ring
                            .iter()
                            .filter(|e| e.index > since && keep(e))
                            .cloned(),
                    );
                }
                (rx, replay, missed)
            }
            Err(_) => (self.tx.subscribe(), VecDeque::new(), 0),
        };
        Subscription {
            rx,
            replay,
            missed,
            filter,
        }
    }
}

/// What a subscription yields.
#[derive(Clone, Debug, PartialEq)]
pub enum SubscriptionItem {
    /// An event.
    Event(EventEnvelope),
    /// This many events were lost (the subscriber lagged, or asked for events older than the
    /// ring buffer keeps). The subscription continues.
    Lagged(u64),
}

/// A subscriber's receiver: replayed events first, then live ones.
#[derive(Debug)]
pub struct Subscription {
    rx: broadcast::Receiver<EventEnvelope>,
    replay: VecDeque<EventEnvelope>,
    missed: u64,
    filter: Option<std::collections::BTreeSet<String>>,
}

impl Subscription {
    /// The next item; `None` once the session is gone and everything was read.
    pub async fn recv(&mut self) -> Option<SubscriptionItem> {
        if self.missed > 0 {
            let n = std::mem::take(&mut self.missed);
            return Some(SubscriptionItem::Lagged(n));
        }
        if let Some(e) = self.replay.pop_front() {
            return Some(SubscriptionItem::Event(e));
        }
        loop {
            match self.rx.recv().await {
                Ok(e) => {
                    if self.keeps(&e) {
                        return Some(SubscriptionItem::Event(e));
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    return Some(SubscriptionItem::Lagged(n))
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// The next event, skipping lag notices.
    pub async fn next_event(&mut self) -> Option<EventEnvelope> {
        loop {
            match self.recv().await? {
                SubscriptionItem::Event(e) => return Some(e),
                SubscriptionItem::Lagged(_) => continue,
            }
        }
    }

    /// Everything available right now without waiting (replay plus buffered live events).
    pub fn drain(&mut self) -> Vec<SubscriptionItem> {
        let mut out = Vec::new();
        if self.missed > 0 {
            out.push(SubscriptionItem::Lagged(std::mem::take(&mut self.missed)));
        }
        out.extend(self.replay.drain(..).map(SubscriptionItem::Event));
        loop {
            match self.rx.try_recv() {
                Ok(e) => {
                    if self.keeps(&e) {
                        out.push(SubscriptionItem::Event(e));
                    }
                }
                Err(broadcast::error::TryRecvError::Lagged(n)) => {
                    out.push(SubscriptionItem::Lagged(n))
                }
                Err(_) => break,
            }
        }
        out
    }

    /// The subscription as a `Stream`.
    pub fn into_stream(self) -> impl futures::Stream<Item = SubscriptionItem> + Send {
        futures::stream::unfold(self, |mut s| async move { s.recv().await.map(|i| (i, s)) })
    }

    fn keeps(&self, e: &EventEnvelope) -> bool {
        self.filter
            .as_ref()
            .is_none_or(|f| f.contains(&e.event.type_name()))
    }
}

/// The sink installed into a session's agent: forwards the runtime's events to the bus.
pub(crate) struct BusSink(pub(crate) Arc<EventBus>);

impl EventSink for BusSink {
    fn emit(&self, event: &EventEnvelope) {
        self.0.publish_envelope(event.clone());
    }
}
