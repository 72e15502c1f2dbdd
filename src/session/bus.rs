//! The session's event bus (R-EVT-1): one index per session, live subscribers, and an
//! optional ring buffer for replay.
//!
//! One queue holds every event anybody may still read: the last `ring_size` events (the ring
//! buffer, replayed by `subscribe(since)`) and the events a live subscriber has not read yet,
//! up to `capacity` behind the newest. The queue grows on demand and gives memory back when
//! it empties, so an idle session without subscribers holds no event storage at all (a
//! preallocated broadcast channel of 4,096 slots would cost every session about 650 KiB before
//! its first event).
//!
//! Ordering: an event gets its index and is queued under one lock, so every subscriber sees
//! events in index order, and a `subscribe` taken under the same lock neither misses nor
//! repeats an event between its replay and its live part.
//!
//! Slow subscribers never block the loop: publishing never waits. A subscriber that falls more
//! than `capacity` events behind loses the oldest events it did not read (unless the ring
//! buffer still holds them); its next [`Subscription::recv`] returns
//! [`SubscriptionItem::Lagged`] with the number lost, then it continues with the oldest event
//! still available. The same notice is returned first when `subscribe(since)` asks for events
//! older than the ring buffer keeps.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::agent_event::AgentEvent;
use crate::hooks::Hooks;
use crate::runtime::{Clock, EventSink};
use crate::EventEnvelope;

/// Called for every published event, after it got its index (status, metrics).
pub(crate) type Observer = Box<dyn Fn(&EventEnvelope) -> Vec<AgentEvent> + Send + Sync>;

/// Queues above this many slots shrink when less than a quarter is used.
const SHRINK_ABOVE: usize = 16;

/// The queue and the subscribers' read positions.
#[derive(Default)]
struct Queue {
    /// The index the next event gets.
    next: u64,
    /// Retained events, consecutive indices ending at `next - 1`.
    events: VecDeque<EventEnvelope>,
    /// Live subscriptions: (id, index it reads next).
    cursors: Vec<(u64, u64)>,
    /// The id the next subscription gets.
    next_subscriber: u64,
    /// The bus is gone: subscribers end once they read everything.
    closed: bool,
}

impl Queue {
    /// The index of the oldest retained event (`next` when none is).
    fn front(&self) -> u64 {
        self.events.front().map_or(self.next, |e| e.index)
    }

    fn cursor(&mut self, id: u64) -> Option<&mut u64> {
        self.cursors
            .iter_mut()
            .find(|(i, _)| *i == id)
            .map(|(_, c)| c)
    }

    /// Drops the events neither the ring buffer nor a subscriber within `capacity` needs, and
    /// gives back memory a much shorter queue does not use.
    fn trim(&mut self, ring_size: usize, capacity: usize) {
        let slowest = self.cursors.iter().map(|(_, c)| *c).min();
        while let Some(front) = self.events.front() {
            let age = self.next - front.index;
            let in_ring = age <= ring_size as u64;
            let unread = slowest.is_some_and(|c| c <= front.index) && age <= capacity as u64;
            if in_ring || unread {
                break;
            }
            self.events.pop_front();
        }
        if self.events.capacity() > SHRINK_ABOVE && self.events.len() * 4 < self.events.capacity() {
            self.events.shrink_to(self.events.len() * 2);
        }
    }
}

/// What the bus shares with its subscriptions.
struct Channel {
    queue: Mutex<Queue>,
    /// Wakes subscribers waiting for an event (or for the end).
    notify: Notify,
    ring_size: usize,
    capacity: usize,
}

impl Channel {
    fn lock(&self) -> Option<MutexGuard<'_, Queue>> {
        self.queue.lock().ok()
    }
}

/// The session's event bus (R-EVT-1), cheap to share (`Arc`): one index per session, live
/// subscribers, and an optional ring buffer for replay; the module docs say how.
pub(crate) struct EventBus {
    channel: Arc<Channel>,
    clock: Arc<dyn Clock>,
    hooks: Arc<dyn Hooks>,
    downstream: Arc<dyn EventSink>,
    observers: Mutex<Vec<Observer>>,
    current_run: Mutex<String>,
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBus")
            .field("ring_size", &self.channel.ring_size)
            .field("capacity", &self.channel.capacity)
            .finish()
    }
}

impl Drop for EventBus {
    fn drop(&mut self) {
        if let Some(mut q) = self.channel.lock() {
            q.closed = true;
        }
        self.channel.notify.notify_waiters();
    }
}

impl EventBus {
    /// A bus whose live subscribers may fall `capacity` events behind before they lag, with a
    /// ring buffer of `ring_size` events (0 = off). Nothing is allocated for either until
    /// events arrive. Every event also goes to the `hooks`' `on_event` and to `downstream`
    /// (the agent's own sink).
    pub(crate) fn new(
        capacity: usize,
        ring_size: usize,
        clock: Arc<dyn Clock>,
        hooks: Arc<dyn Hooks>,
        downstream: Arc<dyn EventSink>,
    ) -> Self {
        EventBus {
            channel: Arc::new(Channel {
                queue: Mutex::default(),
                notify: Notify::new(),
                ring_size,
                capacity: capacity.max(1),
            }),
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
    pub(crate) fn publish(&self, run_id: &str, event: AgentEvent) -> u64 {
        let env = EventEnvelope {
            index: 0,
            ts_ms: self.clock.now_ms(),
            run_id: run_id.to_string(),
            event,
        };
        self.publish_envelope(env)
    }

    /// Publishes an envelope, re-indexing it with the bus's index.
    pub(crate) fn publish_envelope(&self, mut env: EventEnvelope) -> u64 {
        if matches!(env.event, AgentEvent::RunStart { .. }) {
            self.set_current_run(&env.run_id);
        }
        let listened = {
            let Some(mut q) = self.channel.lock() else {
                return 0;
            };
            env.index = q.next;
            q.next += 1;
            // Nobody can read an event no ring keeps and no subscriber waits for.
            let listened = !q.cursors.is_empty();
            if listened || self.channel.ring_size > 0 {
                q.events.push_back(env.clone());
                q.trim(self.channel.ring_size, self.channel.capacity);
            }
            listened
        };
        if listened {
            self.channel.notify.notify_waiters();
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
    pub(crate) fn publish_current(&self, event: AgentEvent) -> u64 {
        let run = self.current_run();
        self.publish(&run, event)
    }

    /// The run in progress, empty when idle.
    pub(crate) fn current_run(&self) -> String {
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
    pub(crate) fn buffered(&self) -> Vec<EventEnvelope> {
        let ring_size = self.channel.ring_size;
        self.channel
            .lock()
            .map(|q| {
                let skip = q.events.len().saturating_sub(ring_size);
                q.events.iter().skip(skip).cloned().collect()
            })
            .unwrap_or_default()
    }

    /// The index the next event will get.
    #[cfg(test)]
    fn next_index(&self) -> u64 {
        self.channel.lock().map(|q| q.next).unwrap_or(0)
    }

    /// Subscribes. With `since = Some(i)`, events with an index greater than `i` still in the
    /// ring buffer are replayed first; `types` keeps only events whose type name is listed.
    pub(crate) fn subscribe(&self, since: Option<u64>, types: Option<Vec<String>>) -> Subscription {
        let filter = types.map(|t| t.into_iter().collect::<BTreeSet<_>>());
        let mut missed = 0;
        let id = self.channel.lock().map(|mut q| {
            let cursor = match since {
                None => q.next,
                Some(since) => {
                    // Replay comes from the ring only, not from events another subscriber
                    // happens to hold.
                    let ring_start = q
                        .front()
                        .max(q.next.saturating_sub(self.channel.ring_size as u64));
                    let wanted = since.saturating_add(1);
                    missed = ring_start.saturating_sub(wanted);
                    wanted.clamp(ring_start, q.next)
                }
            };
            let id = q.next_subscriber;
            q.next_subscriber += 1;
            q.cursors.push((id, cursor));
            id
        });
        Subscription {
            channel: self.channel.clone(),
            id,
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

/// What a subscription finds without waiting.
enum Next {
    Item(SubscriptionItem),
    Empty,
    Closed,
}

/// A subscriber's receiver: replayed events first, then live ones.
pub struct Subscription {
    channel: Arc<Channel>,
    /// Its read position in the queue; `None` if the bus's lock was poisoned at subscribe.
    id: Option<u64>,
    /// Events `subscribe(since)` asked for that the ring no longer held.
    missed: u64,
    filter: Option<BTreeSet<String>>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .field("filter", &self.filter)
            .finish()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        if let Some(mut q) = self.channel.lock() {
            q.cursors.retain(|(i, _)| *i != id);
            q.trim(self.channel.ring_size, self.channel.capacity);
        }
    }
}

impl Subscription {
    /// The next item; `None` once the session is gone and everything was read.
    pub async fn recv(&mut self) -> Option<SubscriptionItem> {
        let channel = self.channel.clone();
        loop {
            // Registered before looking, so an event published in between wakes us.
            let notified = channel.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.try_next() {
                Next::Item(item) => return Some(item),
                Next::Closed => return None,
                Next::Empty => notified.await,
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
        while let Next::Item(item) = self.try_next() {
            out.push(item);
        }
        out
    }

    /// The subscription as a `Stream`.
    pub fn into_stream(self) -> impl futures::Stream<Item = SubscriptionItem> + Send {
        futures::stream::unfold(self, |mut s| async move { s.recv().await.map(|i| (i, s)) })
    }

    /// The next item available now: a lag notice when events this subscriber did not read are
    /// gone, else the next event its filter keeps.
    fn try_next(&mut self) -> Next {
        if self.missed > 0 {
            return Next::Item(SubscriptionItem::Lagged(std::mem::take(&mut self.missed)));
        }
        let Some(id) = self.id else {
            return Next::Closed;
        };
        let Some(mut q) = self.channel.lock() else {
            return Next::Closed;
        };
        let (front, next, closed) = (q.front(), q.next, q.closed);
        let Some(&mut start) = q.cursor(id) else {
            return Next::Closed;
        };
        let mut cursor = start;
        let mut found = None;
        if cursor < front {
            found = Some(SubscriptionItem::Lagged(front - cursor));
            cursor = front;
        } else {
            while cursor < next {
                let Some(e) = q.events.get((cursor - front) as usize) else {
                    break;
                };
                cursor += 1;
                if self.keeps(e) {
                    found = Some(SubscriptionItem::Event(e.clone()));
                    break;
                }
            }
        }
        if let Some(c) = q.cursor(id) {
            *c = cursor;
        }
        if cursor != start {
            q.trim(self.channel.ring_size, self.channel.capacity);
        }
        match found {
            Some(item) => Next::Item(item),
            None if closed => Next::Closed,
            None => Next::Empty,
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::NoHooks;
    use crate::runtime::{NullSink, SystemClock};

    fn bus(capacity: usize, ring_size: usize) -> EventBus {
        EventBus::new(
            capacity,
            ring_size,
            Arc::new(SystemClock),
            Arc::new(NoHooks),
            Arc::new(NullSink),
        )
    }

    fn event(i: usize) -> AgentEvent {
        AgentEvent::ModelSwitched {
            from: String::new(),
            to: i.to_string(),
        }
    }

    /// Publishes events `0..n`.
    fn publish(bus: &EventBus, n: usize) {
        for i in 0..n {
            bus.publish("r", event(i));
        }
    }

    fn slots(bus: &EventBus) -> usize {
        bus.channel.lock().map_or(0, |q| q.events.capacity())
    }

    fn indices(items: Vec<SubscriptionItem>) -> Vec<u64> {
        items
            .into_iter()
            .filter_map(|i| match i {
                SubscriptionItem::Event(e) => Some(e.index),
                SubscriptionItem::Lagged(_) => None,
            })
            .collect()
    }

    #[test]
    fn nothing_is_kept_without_ring_or_subscriber() {
        let b = bus(4096, 0);
        assert_eq!(slots(&b), 0, "no preallocation");
        publish(&b, 100);
        assert_eq!(slots(&b), 0, "nobody could read them");
        assert_eq!(b.next_index(), 100);
    }

    #[test]
    fn the_queue_grows_with_a_slow_subscriber_and_shrinks_when_it_reads() {
        let b = bus(4096, 0);
        let mut sub = b.subscribe(None, None);
        publish(&b, 1000);
        assert!(slots(&b) >= 1000);
        assert_eq!(indices(sub.drain()), (0..1000).collect::<Vec<_>>());
        assert!(slots(&b) <= SHRINK_ABOVE, "{} slots left", slots(&b));
        publish(&b, 1000);
        drop(sub);
        assert!(
            slots(&b) <= SHRINK_ABOVE,
            "a dropped subscriber holds nothing"
        );
    }

    #[test]
    fn the_ring_keeps_its_size_and_replays() {
        let b = bus(4096, 8);
        publish(&b, 20);
        let kept: Vec<u64> = b.buffered().iter().map(|e| e.index).collect();
        assert_eq!(kept, (12..20).collect::<Vec<_>>());
        let mut sub = b.subscribe(Some(9), None);
        let items = sub.drain();
        assert_eq!(items[0], SubscriptionItem::Lagged(2), "10 and 11 are gone");
        assert_eq!(indices(items), (12..20).collect::<Vec<_>>());
    }

    #[test]
    fn replay_comes_from_the_ring_only() {
        let b = bus(4096, 2);
        let _slow = b.subscribe(None, None); // holds every event unread
        publish(&b, 10);
        let mut late = b.subscribe(Some(0), None);
        let items = late.drain();
        assert_eq!(items[0], SubscriptionItem::Lagged(7));
        assert_eq!(indices(items), vec![8, 9]);
        assert_eq!(b.buffered().len(), 2);
    }

    #[tokio::test]
    async fn a_waiting_subscriber_wakes_and_ends_when_the_bus_is_gone() {
        let b = Arc::new(bus(16, 0));
        let mut sub = b.subscribe(None, None);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(item) = sub.recv().await {
                got.push(item);
            }
            got
        });
        tokio::task::yield_now().await;
        b.publish("r", event(0));
        b.publish("r", event(1));
        drop(b);
        let got = reader.await.expect("reader");
        assert_eq!(indices(got), vec![0, 1]);
    }
}
