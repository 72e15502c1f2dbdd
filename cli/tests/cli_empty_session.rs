//! A run killed before its first write, with the real CLI binary: it leaves
//! no session file behind, and `resume` on a session without entries (an empty file left by
//! an older build, or no file at all) says there is nothing to resume and exits 3, so a
//! "resume until it exits 0" loop can stop.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

mod support;
use support::bin;

/// See tests/durable_crash.rs: `$AGENTLOOP_BIN` overrides the binary under test.
fn agentloop(args: &[&str], store: &Path) -> Output {
    Command::new(bin())
        .args(args)
        .arg("--store")
        .arg(store)
        .stdin(Stdio::null())
        .output()
        .expect("run agentloop")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The documented exit code of `resume` when the session has no entries.
const NOTHING_TO_RESUME: i32 = 3;

/// R-IDEM-5: `resume` of an empty session file, or of a session that does not exist, exits 3
/// with a message saying there is nothing to resume and how to start the session.
#[test]
fn r_idem_5_resume_of_an_empty_or_missing_session_exits_3_and_says_so() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("store");
    std::fs::create_dir_all(&store).expect("store");
    std::fs::write(store.join("empty.jsonl"), "").expect("empty session");
    let out = agentloop(&["sessions", "list"], &store);
    assert!(text(&out).contains("empty"), "{}", text(&out));
    // Its modification time reads as an RFC 3339 UTC time, not epoch seconds.
    let line = text(&out)
        .lines()
        .find(|l| l.starts_with("empty"))
        .map(str::to_string)
        .expect("a line for the session");
    let rfc3339 = |w: &str| {
        w.len() == 20
            && w.char_indices().all(|(i, c)| match i {
                4 | 7 => c == '-',
                10 => c == 'T',
                13 | 16 => c == ':',
                19 => c == 'Z',
                _ => c.is_ascii_digit(),
            })
    };
    assert!(line.split_whitespace().any(rfc3339), "{line}");
    for session in ["empty", "missing"] {
        let out = agentloop(&["resume", session], &store);
        let msg = text(&out);
        assert_eq!(
            out.status.code(),
            Some(NOTHING_TO_RESUME),
            "{session}: {msg}"
        );
        assert!(msg.contains("nothing to resume"), "{session}: {msg}");
        assert!(
            msg.contains(&format!("agentloop run --session {session}")),
            "{session}: {msg}"
        );
    }
    assert!(
        !store.join("missing.jsonl").exists(),
        "resume created a session file"
    );
}

/// R-IDEM-5: `run --session` killed (SIGKILL) at seeded moments around its start never
/// leaves an empty session file: the file either does not exist or holds a complete first
/// record, and `resume` then exits 0 (the run completes) or 3 (nothing was written).
#[cfg(unix)]
#[test]
fn r_idem_5_a_run_killed_before_its_first_write_leaves_no_empty_session() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("store");
    let mut seed = 0x9e37_79b9_u64;
    let mut missing = 0;
    for i in 0..40 {
        let session = format!("k{i}");
        let mut child = Command::new(bin())
            .args(["run", "--session", &session, "--store"])
            .arg(&store)
            .arg("what is 6*7")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        std::thread::sleep(Duration::from_micros((seed >> 33) % 8_000));
        let _ = child.kill();
        let _ = child.wait();
        let path = store.join(format!("{session}.jsonl"));
        match std::fs::read(&path) {
            Ok(bytes) => assert!(
                bytes.contains(&b'\n'),
                "{session}: killed run left a session file without a complete record: {:?}",
                String::from_utf8_lossy(&bytes)
            ),
            Err(e) => {
                assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{session}: {e}");
                missing += 1;
            }
        }
        let out = agentloop(&["resume", &session], &store);
        let code = out.status.code();
        if path.exists() {
            assert_eq!(code, Some(0), "{session}: {}", text(&out));
        } else {
            assert_eq!(code, Some(NOTHING_TO_RESUME), "{session}: {}", text(&out));
        }
    }
    eprintln!("{missing} of 40 killed runs had written nothing");
}
