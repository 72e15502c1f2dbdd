//! A session file with a huge line, met by the real CLI binary: loading it
//! fails with an error naming the line, after reading at most the entry size limit of it
//! (16 MiB by default) — measured as the child's peak resident memory.
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// See tests/durable_crash.rs: `$AGENTLOOP_BIN` overrides the binary under test.
fn bin() -> PathBuf {
    std::env::var_os("AGENTLOOP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_agentloop")))
}

/// Runs the CLI to completion; returns (exit code, stdout + stderr, peak RSS in KiB).
#[allow(clippy::zombie_processes)] // the child is reaped by `wait4`, which also gives its rusage
fn run_measured(args: &[&str], store: &Path) -> (Option<i32>, String, i64) {
    let mut child = Command::new(bin())
        .args(args)
        .arg("--store")
        .arg(store)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agentloop");
    let mut pipes = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ];
    let readers: Vec<_> = pipes
        .iter_mut()
        .filter_map(Option::take)
        .map(|mut pipe| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        })
        .collect();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value; `wait4` reaps our own child `pid` (the
    // `Child` handle is not waited on afterwards) and writes only into the two locals.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4");
    let output: String = readers
        .into_iter()
        .map(|r| r.join().expect("pipe reader"))
        .collect();
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    (code, output, usage.ru_maxrss)
}

/// R-IDEM-4 (a store failure is reported, typed): a 64 MiB line is refused with an error
/// naming its line, and loading it never holds it: the process stays under 48 MiB of peak RSS
/// (the whole line would take 64 MiB to read, several times that to parse).
#[test]
fn r_idem_4_a_huge_line_is_refused_by_line_number_with_bounded_memory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("store");
    let (code, output, _) = run_measured(&["run", "--session", "big", "PLACEHOLDER"], &store);
    assert_eq!(code, Some(0), "{output}");
    let path = store.join("big.jsonl");
    let text = std::fs::read_to_string(&path).expect("session");
    let lines: Vec<&str> = text.lines().collect();
    let input = lines
        .iter()
        .position(|l| l.contains("PLACEHOLDER"))
        .expect("the user input line");
    // Written in chunks: a child's peak RSS on Linux includes its parent's at fork, so this
    // process must never hold the huge line either.
    let (before, after) = lines[input].split_once("PLACEHOLDER").expect("placeholder");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).expect("rewrite"));
    for line in &lines[..input] {
        writeln!(file, "{line}").expect("write");
    }
    write!(file, "{before}").expect("write");
    let chunk = "x".repeat(1024 * 1024);
    for _ in 0..64 {
        file.write_all(chunk.as_bytes()).expect("write");
    }
    writeln!(file, "{after}").expect("write");
    for line in &lines[input + 1..] {
        writeln!(file, "{line}").expect("write");
    }
    file.flush().expect("flush");
    drop(file);

    for args in [&["sessions", "show", "big"][..], &["resume", "big"][..]] {
        let (code, output, peak_kib) = run_measured(args, &store);
        assert_eq!(code, Some(2), "{args:?}: {output}");
        assert!(
            output.contains(&format!("line {}", input + 1))
                && output.contains("longer than the limit"),
            "{args:?}: {output}"
        );
        assert!(
            peak_kib < 48 * 1024,
            "{args:?}: peak RSS {peak_kib} KiB while refusing a 64 MiB line"
        );
    }
    let (code, output, _) = run_measured(&["sessions", "list"], &store);
    assert_eq!(code, Some(0), "{output}");
    assert!(output.contains("over the entry size limit"), "{output}");
}
