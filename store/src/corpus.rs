//! The trace files of a corpus, as `agentloop replay DIR` and the Python package's
//! `replay_dir` find them: each path named as given, each directory walked recursively for
//! `*.jsonl` files without following symbolic links, the files whose name ends with `skip`
//! (the timing sidecars, `*.times.jsonl`) left out; sorted, without duplicates. And
//! [`par_map`], which both use to read them on all cores.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The trace files `paths` name (see the module docs), and the directories that could not be
/// listed, each with why.
pub fn trace_files(paths: &[PathBuf], skip: &str) -> (Vec<PathBuf>, Vec<(PathBuf, String)>) {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk(p, skip, &mut files, &mut errors);
        } else {
            files.push(p.clone());
        }
    }
    files.sort();
    files.dedup();
    (files, errors)
}

/// Adds the `*.jsonl` files under `dir` (recursively, links not followed) to `files`.
fn walk(dir: &Path, skip: &str, files: &mut Vec<PathBuf>, errors: &mut Vec<(PathBuf, String)>) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) => {
                errors.push((d, e.to_string()));
                continue;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    errors.push((d.clone(), e.to_string()));
                    continue;
                }
            };
            // `file_type` of a directory entry does not follow a link.
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.ends_with(".jsonl") && !name.ends_with(skip) {
                    files.push(path);
                }
            }
        }
    }
}

/// Runs `work` on every item of `items` on all cores; the results in the items' order. An
/// item whose work panicked (a bug, not a bad input: those are typed errors) is `None`, and
/// the others still run.
pub fn par_map<T: Sync, R: Send>(items: &[T], work: impl Fn(&T) -> R + Sync) -> Vec<Option<R>> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(items.len().max(1));
    let next = AtomicUsize::new(0);
    let done: Vec<(usize, R)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        let r =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(item)));
                        if let Ok(r) = r {
                            mine.push((i, r));
                        }
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    let mut out: Vec<Option<R>> = std::iter::repeat_with(|| None).take(items.len()).collect();
    for (i, r) in done {
        if let Some(slot) = out.get_mut(i) {
            *slot = Some(r);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_walked_for_traces_without_links_or_sidecars() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        std::fs::create_dir_all(d.join("a/b")).expect("dirs");
        for f in [
            "t1.jsonl",
            "a/t2.jsonl",
            "a/b/t3.jsonl",
            "a/t2.times.jsonl",
            "a/notes.txt",
        ] {
            std::fs::write(d.join(f), "").expect("file");
        }
        std::os::unix::fs::symlink(d.join("a"), d.join("link")).expect("link");
        let named = d.join("named.txt");
        std::fs::write(&named, "").expect("named");
        let (files, errors) = trace_files(
            &[d.to_path_buf(), named.clone(), d.join("t1.jsonl")],
            ".times.jsonl",
        );
        assert!(errors.is_empty(), "{errors:?}");
        let want: Vec<PathBuf> = ["a/b/t3.jsonl", "a/t2.jsonl", "named.txt", "t1.jsonl"]
            .iter()
            .map(|f| d.join(f))
            .collect();
        assert_eq!(files, want);
    }
}
