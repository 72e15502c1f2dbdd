//! Replays the seed corpora of the fuzz targets (`fuzz/corpus/<target>/`) on stable Rust, through
//! the same decoding the targets use (`tests/support/fuzz_decode.rs`), so CI exercises them
//! without a nightly toolchain. Any file found there runs, including ones a fuzzing session
//! added; seeds named `seed-*` also carry an expectation in their name.

use agentloop_testkit::fuzz_decode;

use std::path::{Path, PathBuf};

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "{}: expected a seed corpus, found {} files",
        dir.display(),
        files.len()
    );
    files
}

fn name(p: &Path) -> String {
    p.file_name().unwrap_or_default().to_string_lossy().into()
}

#[test]
fn react_events_corpus() {
    for path in corpus("react_events") {
        let data = std::fs::read(&path).expect("read corpus file");
        let h = fuzz_decode::react_events(&data);
        if name(&path).starts_with("seed-smart") {
            assert!(
                h.ledger.model_calls > 0 && h.run.is_terminal(),
                "{}: an effect-following seed should call the model and end",
                path.display()
            );
        }
    }
}

#[test]
fn process_events_corpus() {
    for path in corpus("process_events") {
        let data = std::fs::read(&path).expect("read corpus file");
        let h = fuzz_decode::process_events(&data);
        if name(&path).starts_with("seed-smart") {
            assert!(
                h.process.state().is_terminal(),
                "{}: an effect-following seed should end the step",
                path.display()
            );
        }
    }
}

#[test]
fn trace_reader_corpus() {
    for path in corpus("trace_reader") {
        let data = std::fs::read(&path).expect("read corpus file");
        let outcome = fuzz_decode::trace_reader(&data);
        let n = name(&path);
        let expected = if n.starts_with("seed-ok-") {
            Some(Some(true))
        } else if n.starts_with("seed-diverge-") {
            Some(Some(false))
        } else if n.starts_with("seed-bad-") {
            Some(None)
        } else {
            None
        };
        if let Some(expected) = expected {
            assert_eq!(
                outcome,
                expected,
                "{}: parse/replay outcome (None = rejected, Some(identical))",
                path.display()
            );
        }
    }
}

#[test]
fn inspect_log_corpus() {
    for path in corpus("inspect_log") {
        let data = std::fs::read(&path).expect("read corpus file");
        let outcome = fuzz_decode::inspect_log(&data);
        let n = name(&path);
        if n.starts_with("seed-ok-") {
            assert!(
                outcome.is_some_and(|n| n > 0),
                "{}: imported",
                path.display()
            );
        } else if n.starts_with("seed-bad-") {
            assert_eq!(outcome, None, "{}: refused", path.display());
        }
    }
}
