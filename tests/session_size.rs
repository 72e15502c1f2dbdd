//! Idle session size: an idle [`Session`] with default settings, plus the
//! [`Agent`] it owns, keeps at most 8 KiB of heap.
//!
//! A counting global allocator measures the bytes still allocated after spawning many
//! sessions (allocations minus deallocations), so transient allocations do not count. This
//! binary holds a single test: the counter is process-wide and parallel tests would pollute it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

use agentloop::model::Model;
use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::Agent;
use agentloop::session::{Session, SessionConfig};
use agentloop::store::{MemoryStore, SessionStore};
use agentloop::tools::ToolRegistry;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments; the counter is a
// side effect that never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The budget per idle session, agent included.
const BUDGET: isize = 8 * 1024;
const SESSIONS: usize = 200;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// What every session shares: one model client, one store, one tool registry.
struct Template {
    model: Arc<dyn Model>,
    store: Arc<dyn SessionStore>,
    tools: ToolRegistry,
}

impl Template {
    fn agent(&self) -> Agent {
        Agent::builder()
            .model_arc(self.model.clone())
            .store(self.store.clone())
            .tools(self.tools.clone())
            .build()
    }
}

async fn settle() {
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
}

#[test]
fn an_idle_session_with_its_agent_keeps_at_most_8_kib() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let template = Template {
            model: Arc::new(
                ScriptedModel::from_json_str(r#"{"turns": [{"text": "hi"}]}"#, "inline")
                    .expect("script"),
            ),
            store: Arc::new(MemoryStore::new()),
            tools: ToolRegistry::builtin(),
        };
        // Warm-up: lazily initialised runtime state is not a session's.
        let warm: Vec<Session> = (0..8)
            .map(|i| Session::spawn(template.agent(), SessionConfig::new(format!("w{i}"))))
            .collect();
        settle().await;
        drop(warm);
        settle().await;

        let mut agents = Vec::with_capacity(SESSIONS);
        let mut sessions = Vec::with_capacity(SESSIONS);
        let start = live();
        for _ in 0..SESSIONS {
            agents.push(template.agent());
        }
        let built = live();
        for (i, agent) in agents.drain(..).enumerate() {
            sessions.push(Session::spawn(agent, SessionConfig::new(format!("s{i:05}"))));
        }
        settle().await;
        let end = live();
        let n = SESSIONS as isize;
        let agent = (built - start) / n;
        let total = (end - start) / n;
        eprintln!(
            "idle session: {total} B each ({agent} B agent + {} B session), {SESSIONS} sessions",
            total - agent
        );
        assert!(
            total <= BUDGET,
            "an idle session with its agent keeps {total} B (agent {agent} B), over the {BUDGET} B budget"
        );
        drop(sessions);
    });
}
