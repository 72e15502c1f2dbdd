//! The marginal CPU cost of a long streamed answer: one scripted turn of 2,000 text deltas
//! through the whole runtime (machines, driver, in-memory store, partial-message snapshot via a
//! [`Controller`](agentloop::runtime::Controller)), on a multi-thread and on a current-thread
//! tokio runtime.
//!
//! Deltas arrive the way a network delivers them, one at a time: a producer thread (standing
//! in for the socket) hands the scripted deltas to the stream `GAP` µs apart, so the consumer
//! is parked and woken for every delta (a scripted stream whose items are all ready would be
//! drained in one burst and hide the per-delta handoff).
//!
//! The figure is process CPU time (`getrusage(RUSAGE_SELF)`, user + system, every thread) of
//! one run minus the producer thread's own CPU (`RUSAGE_THREAD`), minus the same for a
//! baseline run whose answer is the same text in one delta; median of R runs each.
//!
//! `cargo run --release --example delta_cost -- [DELTAS] [--runs R] [--gap µs] [--trace]`
//! (defaults: 2000 deltas, 21 runs, 50 µs).
#![allow(clippy::disallowed_methods)] // a benchmark reads the wall clock

#[cfg(unix)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    bench::main()
}

#[cfg(not(unix))]
fn main() {
    eprintln!("delta_cost measures CPU time with getrusage (unix only)");
}

#[cfg(unix)]
mod bench {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use agentloop::model::{DeltaStream, Model, ModelRequest};
    use agentloop::ModelError;

    use agentloop::provider::scripted::ScriptedModel;
    use agentloop::runtime::{Agent, Controller};
    use agentloop::Message;
    use agentloop::Outcome;

    const CHUNK: usize = 8;

    /// One turn answering `text` in deltas of `chunk` characters.
    fn script(text: &str, chunk: usize) -> ScriptedModel {
        ScriptedModel::from_json(serde_json::json!({"turns": [
            {"text": text, "chunk_chars": chunk}
        ]}))
        .expect("a valid script")
    }

    /// The scripted deltas, handed over one at a time by a producer thread `gap_us` apart.
    struct Paced {
        inner: ScriptedModel,
        gap_us: u64,
        /// CPU microseconds the producer threads used (subtracted from the figure).
        producer_us: Arc<AtomicU64>,
    }

    #[async_trait::async_trait]
    impl Model for Paced {
        fn name(&self) -> String {
            "scripted".into()
        }

        async fn stream(&self, request: ModelRequest) -> Result<DeltaStream, ModelError> {
            let items = self.inner.plan(&request)?.items;
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let gap = std::time::Duration::from_micros(self.gap_us);
            let producer_us = self.producer_us.clone();
            std::thread::spawn(move || {
                for item in items {
                    std::thread::sleep(gap);
                    if tx.send(item).is_err() {
                        break;
                    }
                }
                if let Ok(us) = cpu_us(libc::RUSAGE_THREAD) {
                    producer_us.fetch_add(us, Ordering::Relaxed);
                }
            });
            Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|item| (item, rx))
            })))
        }
    }

    /// CPU time of the process (`RUSAGE_SELF`) or thread so far, in microseconds.
    fn cpu_us(who: libc::c_int) -> Result<u64, &'static str> {
        // SAFETY: `getrusage` only writes the zeroed struct it is given.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid `who` with a valid pointer to a rusage struct.
        if unsafe { libc::getrusage(who, &mut usage) } != 0 {
            return Err("getrusage failed");
        }
        let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        Ok(us(usage.ru_utime) + us(usage.ru_stime))
    }

    /// CPU microseconds of one run of `model` on `rt`.
    fn one_run(
        rt: &tokio::runtime::Runtime,
        model: &Arc<Paced>,
        record: bool,
        expect: usize,
    ) -> Result<u64, Box<dyn std::error::Error>> {
        let agent = Agent::builder().model_arc(model.clone()).build();
        let controller = Controller::new();
        let producer_before = model.producer_us.load(Ordering::Relaxed);
        let before = cpu_us(libc::RUSAGE_SELF)?;
        let out = rt.block_on(agent.run_with(
            "s",
            vec![Message::user("talk")],
            Some(&controller),
            record,
        ))?;
        let after = cpu_us(libc::RUSAGE_SELF)?;
        // The producer thread records its CPU as it ends, just after its last send.
        std::thread::sleep(std::time::Duration::from_millis(2));
        let producer = model.producer_us.load(Ordering::Relaxed) - producer_before;
        if out.result.outcome != Outcome::Completed {
            return Err(format!("run did not complete: {:?}", out.result.reason).into());
        }
        let len = match out.result.messages.last() {
            Some(Message::Assistant(m)) => m.text.len(),
            _ => 0,
        };
        if len != expect {
            return Err(format!("answer of {len} bytes, expected {expect}").into());
        }
        Ok(after.saturating_sub(before).saturating_sub(producer))
    }

    fn median(mut v: Vec<u64>) -> u64 {
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    }

    /// Median marginal CPU (µs) of the long answer over the baseline on `rt`.
    fn measure(
        rt: &tokio::runtime::Runtime,
        deltas: usize,
        runs: usize,
        gap_us: u64,
        record: bool,
    ) -> Result<(u64, u64), Box<dyn std::error::Error>> {
        let text: String = "abcdefg ".repeat(deltas * CHUNK / 8);
        let paced = |chunk| {
            Arc::new(Paced {
                inner: script(&text, chunk),
                gap_us,
                producer_us: Arc::default(),
            })
        };
        let long = paced(CHUNK);
        let short = paced(text.len());
        // Warm up (allocator, lazy statics, thread start).
        for _ in 0..3 {
            one_run(rt, &long, record, text.len())?;
            one_run(rt, &short, record, text.len())?;
        }
        let mut long_us = Vec::with_capacity(runs);
        let mut short_us = Vec::with_capacity(runs);
        for _ in 0..runs {
            long_us.push(one_run(rt, &long, record, text.len())?);
            short_us.push(one_run(rt, &short, record, text.len())?);
        }
        let (l, s) = (median(long_us), median(short_us));
        Ok((l.saturating_sub(s), s))
    }

    pub(super) fn main() -> Result<(), Box<dyn std::error::Error>> {
        let mut deltas = 2_000usize;
        let mut runs = 21usize;
        let mut record = false;
        let mut gap_us = 50u64;
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            match a.as_str() {
                "--runs" => runs = args.next().ok_or("--runs needs a value")?.parse()?,
                "--trace" => record = true,
                "--gap" => gap_us = args.next().ok_or("--gap needs a value")?.parse()?,
                n => deltas = n.parse()?,
            }
        }
        let multi = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        let current = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        println!(
            "one answer of {deltas} text deltas ({CHUNK} chars each) minus the same answer in one delta; \
             {gap_us} µs apart; process CPU (user + sys), median of {runs} runs{}",
            if record { ", trace recorded" } else { "" }
        );
        let (m, mb) = measure(&multi, deltas, runs, gap_us, record)?;
        let (c, cb) = measure(&current, deltas, runs, gap_us, record)?;
        let ms = |us: u64| us as f64 / 1000.0;
        println!(
            "multi-thread:   {:>7.2} ms marginal ({:.2} µs/delta; baseline run {:.2} ms)",
            ms(m),
            m as f64 / deltas as f64,
            ms(mb)
        );
        println!(
            "current-thread: {:>7.2} ms marginal ({:.2} µs/delta; baseline run {:.2} ms)",
            ms(c),
            c as f64 / deltas as f64,
            ms(cb)
        );
        println!("ratio multi/current: {:.2}", m as f64 / (c.max(1)) as f64);
        Ok(())
    }
}
