//! Append latency (median, p99, max) of the file store per durability mode, and the time to
//! load / resume a 10,000-entry session.
//!
//! `cargo run --release --example store_latency -- [APPENDS] [DIR]` (defaults: 2000, a
//! temporary directory; pass a DIR on the disk you care about).

#![allow(clippy::disallowed_methods)] // a benchmark reads the wall clock

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agentloop::store::{Durability, FileStore, StoreError};
use agentloop_core::session_log::{check, history};

#[path = "../benches/support/entries.rs"]
mod entries;
use entries::entry;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() -> Result<(), StoreError> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let tmp = tempfile::tempdir().map_err(|source| StoreError::Io {
        path: "tempdir".into(),
        source,
    })?;
    let base: PathBuf = args
        .next()
        .map_or_else(|| tmp.path().to_path_buf(), PathBuf::from);
    println!("store dir: {} ({n} appends per mode)", base.display());

    for (name, durability) in [
        ("sync", Durability::Sync),
        ("batched(64)", Durability::Batched { every: 64 }),
    ] {
        let dir = base.join(format!("latency-{}", name.replace(['(', ')'], "")));
        let _ = std::fs::remove_dir_all(&dir);
        let store = FileStore::open(&dir)?.with_durability(durability);
        let mut times = Vec::with_capacity(n as usize);
        for i in 0..n {
            let e = entry(i);
            let t = Instant::now();
            store.append_blocking("latency", &e)?;
            times.push(t.elapsed());
        }
        times.sort();
        let mean = times.iter().sum::<Duration>() / n as u32;
        println!(
            "append {name:>12}: median {:>9.1?}  p99 {:>9.1?}  max {:>9.1?}  mean {:>9.1?}",
            percentile(&times, 0.5),
            percentile(&times, 0.99),
            times[times.len() - 1],
            mean
        );
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    let dir = base.join("latency-load");
    let _ = std::fs::remove_dir_all(&dir);
    {
        let store = FileStore::open(&dir)?.with_durability(Durability::Batched { every: 1000 });
        for i in 0..10_000 {
            store.append_blocking("big", &entry(i))?;
        }
    }
    let bytes = std::fs::metadata(dir.join("big.jsonl"))
        .map(|m| m.len())
        .unwrap_or(0);
    let (mut loads, mut resumes) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        let t = Instant::now();
        let store = FileStore::open(&dir)?;
        let (entries, _) = store.load_blocking("big")?;
        loads.push(t.elapsed());
        assert_eq!(entries.len(), 10_000);

        let t = Instant::now();
        let store = FileStore::open(&dir)?;
        let _lock = store.lock("big")?;
        let (entries, _) = store.load_blocking("big")?;
        let violations = check(&entries);
        let context = history(&entries);
        resumes.push(t.elapsed());
        assert!(violations.is_empty() && !context.is_empty());
    }
    loads.sort();
    resumes.sort();
    println!(
        "10,000 entries ({} KiB): load median {:.1?} (max {:.1?}); resume (lock+load+check+history) median {:.1?} (max {:.1?})",
        bytes / 1024,
        percentile(&loads, 0.5),
        loads[loads.len() - 1],
        percentile(&resumes, 0.5),
        resumes[resumes.len() - 1]
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
