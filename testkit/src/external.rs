//! Helpers for suites that drive real external servers and processes: find a server through an
//! environment variable (skipping outside CI, failing in it), and watch a process by pid.

use std::path::Path;
use std::time::{Duration, Instant};

/// The value of the environment variable `var` naming an external server (a program, a URL).
/// Unset or empty: `None` after printing why the test skips, unless `CI` is set, where a
/// missing server is a failure (a panic) rather than a silent skip.
pub fn server_env(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{var} is not set, and CI is: the tests that need it must run")
        }
        _ => {
            eprintln!("skipped: {var} is not set");
            None
        }
    }
}

/// Whether process `pid` runs no more: gone, or a zombie nobody reaped yet (Linux `/proc`).
pub fn process_ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// Waits up to `timeout` for process `pid` to end; panics naming it if it still runs.
#[allow(clippy::disallowed_methods)] // a test helper may read the wall clock
pub fn wait_process_ended(pid: i32, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while !process_ended(pid) {
        assert!(Instant::now() < deadline, "process {pid} still runs");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pid a process wrote to `pid_file`, waiting up to `timeout` for it to appear.
#[allow(clippy::disallowed_methods)] // a test helper may read the wall clock
pub fn read_pid_file(pid_file: &Path, timeout: Duration) -> i32 {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(pid) = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "no pid in {}",
            pid_file.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
