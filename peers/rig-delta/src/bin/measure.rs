//! Runs one client and reports its rusage: `measure PROGRAM [ARGS...]` runs PROGRAM with the
//! given arguments (stdin, stdout and stderr inherited), waits for it with `wait4`, exits with
//! its status if it failed, else prints one last line on stdout:
//! `RUSAGE <user µs> <system µs> <voluntary context switches> <peak RSS KiB>`.
//!
//! Why a launcher: a process's peak RSS (`ru_maxrss`) is the high-water mark over its whole
//! life, including the image it was forked from before `exec`. A child forked by the Python
//! driver (about 10 MB resident) reports at least the driver's RSS, whatever the client uses; a
//! child spawned from this small process reports its own peak (or this launcher's couple of
//! MB, if the client stays below that).

use std::process::Command;

fn main() {
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        eprintln!("usage: measure PROGRAM [ARGS...]");
        std::process::exit(2);
    };
    let child = match Command::new(&program).args(args).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("measure: {}: {e}", program.to_string_lossy());
            std::process::exit(127);
        }
    };
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: `rusage` is plain data; wait4 fills it for the child just spawned, which `child`
    // never waits for itself (dropping a `Child` does not reap it).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if waited != pid {
        eprintln!("measure: wait4: {}", std::io::Error::last_os_error());
        std::process::exit(127);
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        eprintln!(
            "measure: {} ended with status {status:#x}",
            program.to_string_lossy()
        );
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128
        };
        std::process::exit(code.max(1));
    }
    let micros = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    println!(
        "RUSAGE {} {} {} {}",
        micros(usage.ru_utime),
        micros(usage.ru_stime),
        usage.ru_nvcsw,
        usage.ru_maxrss
    );
}
