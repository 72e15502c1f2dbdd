//! Session store benchmarks: append latency per durability mode, and loading / resuming a
//! 10,000-entry session. Medians come from criterion; for p99 run
//! `cargo run --release --example store_latency`.

use std::hint::black_box;

use agentloop::store::{Durability, FileStore};
use agentloop_core::session_log::{check, history};
use criterion::{criterion_group, criterion_main, Criterion};

#[path = "support/entries.rs"]
mod entries;
use entries::entry;

fn appends(c: &mut Criterion) {
    let mut group = c.benchmark_group("append");
    for (name, durability) in [
        ("sync", Durability::Sync),
        ("batched_64", Durability::Batched { every: 64 }),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::open(dir.path())
            .expect("store")
            .with_durability(durability);
        let mut i = 0u64;
        group.bench_function(name, |b| {
            b.iter(|| {
                store
                    .append_blocking("bench", black_box(&entry(i)))
                    .expect("append");
                i += 1;
            })
        });
    }
    group.finish();
}

fn loads(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = FileStore::open(dir.path())
            .expect("store")
            .with_durability(Durability::Batched { every: 1000 });
        for i in 0..10_000 {
            store.append_blocking("big", &entry(i)).expect("append");
        }
    }
    let mut group = c.benchmark_group("load_10k");
    group.sample_size(20);
    group.bench_function("read_only", |b| {
        b.iter(|| {
            let store = FileStore::open(dir.path()).expect("store");
            let (entries, _) = store.load_blocking("big").expect("load");
            assert_eq!(entries.len(), 10_000);
            black_box(entries)
        })
    });
    // What `resume` does before the first request: lock, load (validating, indexing keys,
    // cutting a torn tail), check the invariants, rebuild the context.
    group.bench_function("resume", |b| {
        b.iter(|| {
            let store = FileStore::open(dir.path()).expect("store");
            let _lock = store.lock("big").expect("lock");
            let (entries, _) = store.load_blocking("big").expect("load");
            assert!(check(&entries).is_empty());
            black_box(history(&entries))
        })
    });
    group.finish();
}

criterion_group!(benches, appends, loads);
criterion_main!(benches);
