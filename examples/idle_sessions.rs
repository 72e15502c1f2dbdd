//! Memory of many sessions in one process.
//!
//! 1. Idle: spawns `IDLE` sessions (default 10,000), each with its own [`Agent`] built from one
//!    shared model, store and tool registry, lets every actor park, and reports the heap they
//!    keep (a counting global allocator: bytes allocated minus bytes freed) and the resident
//!    set growth (`/proc/self/statm`), per session.
//! 2. Busy: `RUNS` sessions (default 1,000) each get a prompt at once; every run is a short
//!    scripted run (one `calculator` call, then the answer). Reports the wall time until all
//!    are idle again and the peak heap (sessions, runs and stored histories).
//!
//! Each part runs `REPEATS` times (default 5); the medians are printed.
//!
//! `cargo run --release --example idle_sessions -- [IDLE] [RUNS] [REPEATS]`
#![allow(clippy::disallowed_methods)] // a benchmark reads the wall clock

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::model::Model;
use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::Agent;
use agentloop::session::{Session, SessionConfig};
use agentloop::store::{MemoryStore, SessionStore};
use agentloop::tools::ToolRegistry;
use agentloop::Outcome;

/// Counts live heap bytes and their peak.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn grew(by: isize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments; the counters are
// side effects that never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grew(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            grew(layout.size() as isize);
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
            grew(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Resident set size in bytes (Linux; 0 elsewhere).
fn rss() -> isize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<isize>().ok())
        .map_or(0, |pages| pages * 4096)
}

const SCRIPT: &str = r#"{"turns": [
    {"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "6*7"}}]},
    {"text": "42"}
]}"#;

/// What every session shares: one model client, one store, one tool registry.
struct Template {
    model: Arc<dyn Model>,
    store: Arc<dyn SessionStore>,
    tools: ToolRegistry,
}

impl Template {
    fn new() -> Result<Self, Box<dyn std::error::Error>> {
        Ok(Template {
            model: Arc::new(ScriptedModel::from_json_str(SCRIPT, "inline")?),
            store: Arc::new(MemoryStore::new()),
            tools: ToolRegistry::builtin(),
        })
    }

    fn session(&self, id: String) -> Session {
        let agent = Agent::builder()
            .model_arc(self.model.clone())
            .store(self.store.clone())
            .tools(self.tools.clone())
            .build();
        Session::spawn(agent, SessionConfig::new(id))
    }
}

/// Waits until the heap stops changing: actors started or ended, dropped sessions freed.
async fn settle() {
    let mut last = live();
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = live();
        if now == last {
            return;
        }
        last = now;
    }
}

fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v[v.len() / 2]
}

/// Heap and RSS growth per idle session.
async fn idle(n: usize) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let template = Template::new()?;
    let mut sessions = Vec::with_capacity(n);
    settle().await;
    let (heap0, rss0) = (live(), rss());
    for i in 0..n {
        sessions.push(template.session(format!("idle-{i:06}")));
    }
    settle().await;
    let (heap1, rss1) = (live(), rss());
    drop(sessions);
    settle().await;
    let n = n as f64;
    Ok(((heap1 - heap0) as f64 / n, (rss1 - rss0) as f64 / n))
}

/// Wall time of `n` concurrent short runs, and the peak heap growth from before the sessions
/// were spawned until the runs ended (sessions, runs and the histories they stored).
async fn busy(n: usize) -> Result<(Duration, isize), Box<dyn std::error::Error>> {
    let template = Template::new()?;
    settle().await;
    let base = live();
    PEAK.store(base, Ordering::Relaxed);
    let sessions: Vec<Session> = (0..n)
        .map(|i| template.session(format!("busy-{i:06}")))
        .collect();
    let start = Instant::now();
    let prompts = sessions.iter().map(|s| s.prompt("what is 6*7?"));
    for ack in futures::future::join_all(prompts).await {
        ack?;
    }
    futures::future::join_all(sessions.iter().map(|s| s.wait_idle())).await;
    let elapsed = start.elapsed();
    let peak = PEAK.load(Ordering::Relaxed) - base;
    for s in &sessions {
        let r = s.last_result().ok_or("a run left no result")?;
        if r.outcome != Outcome::Completed || r.final_text() != Some("42") {
            return Err(format!("unexpected result: {} {:?}", r.reason, r.final_text()).into());
        }
    }
    drop(sessions);
    settle().await;
    Ok((elapsed, peak))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (n_idle, n_busy, repeats) = (arg(1, 10_000), arg(2, 1_000), arg(3, 5).max(1));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let (mut heap, mut rss_growth) = (Vec::new(), Vec::new());
        for _ in 0..repeats {
            let (h, r) = idle(n_idle).await?;
            heap.push(h);
            rss_growth.push(r);
        }
        // Later runs reuse the pages the first one freed: only the first RSS growth counts.
        println!(
            "{n_idle} idle sessions (agent included), {repeats} runs: median heap {:.0} B \
             ({:.2} KiB) per session; RSS growth in the first run {:.0} B per session",
            median(heap.clone()),
            median(heap.clone()) / 1024.0,
            rss_growth[0]
        );
        let (mut wall, mut peak) = (Vec::new(), Vec::new());
        for _ in 0..repeats {
            let (w, p) = busy(n_busy).await?;
            wall.push(w);
            peak.push(p);
        }
        let peak = median(peak);
        println!(
            "{n_busy} concurrent short runs (one tool call each), {repeats} runs: median wall \
             {:.1} ms, median peak heap {:.1} MiB ({:.1} KiB per session, sessions included)",
            median(wall).as_secs_f64() * 1000.0,
            peak as f64 / (1024.0 * 1024.0),
            peak as f64 / 1024.0 / n_busy as f64
        );
        println!(
            "command: cargo run --release --example idle_sessions -- {n_idle} {n_busy} {repeats}"
        );
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}
