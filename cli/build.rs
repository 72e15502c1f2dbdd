//! Lays out the release binary's code so that what a short command runs sits together.
//!
//! `startup.order` lists the functions a few representative commands execute (`run` one-shot
//! and on a session, `chat` from a pipe, `--help`, `sessions list`), recorded with callgrind by
//! `scripts/code_order.py`. The linker places them first, in that order. A short run then
//! touches a few hundred kilobytes of contiguous code instead of pages spread over the whole
//! 18 MB text section; since the kernel maps 64 KB around each code page a process first runs,
//! the spread cost a short run about 6 MiB of resident memory (`python3
//! scripts/startup_cost.py target/release/agentloop`: 12.1 -> 5.8 MiB peak RSS).
//!
//! Applied to release builds for x86_64 Linux (GNU) when the linker takes
//! `--symbol-ordering-file` (lld does; GNU ld does not): the script links an empty program
//! with the option, the compiler and the flags of this build, and leaves the order out if
//! that fails. Names the file does not find (another toolchain, changed code) are skipped, so
//! a stale file only costs memory, never correctness. Set `AGENTLOOP_NO_CODE_ORDER` (to any
//! value) to leave it out.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=startup.order");
    for var in [
        "AGENTLOOP_NO_CODE_ORDER",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS",
        "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER",
        "RUSTC_LINKER",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let var = |k: &str| env::var(k).unwrap_or_default();
    if env::var_os("AGENTLOOP_NO_CODE_ORDER").is_some()
        || var("PROFILE") != "release"
        || var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ARCH") != "x86_64"
        || var("CARGO_CFG_TARGET_ENV") != "gnu"
    {
        return;
    }
    let order = Path::new(&var("CARGO_MANIFEST_DIR")).join("startup.order");
    let Some(order) = order.to_str().filter(|_| order.is_file()) else {
        return; // no file, or a path the linker's arguments cannot carry
    };
    if links_with_order() {
        for arg in order_args(order) {
            println!("cargo:rustc-link-arg-bin=agentloop={arg}");
        }
    }
}

/// The linker arguments that apply `order` (each passed through the compiler driver with
/// `-Xlinker`, so a comma in the path stays one argument).
fn order_args(order: &str) -> Vec<String> {
    vec![
        "-Xlinker".to_string(),
        format!("--symbol-ordering-file={order}"),
        "-Xlinker".to_string(),
        "--no-warn-symbol-ordering".to_string(),
    ]
}

/// Whether an empty program links with an (empty) order, built as this crate is (same
/// compiler, target, flags and linker).
fn links_with_order() -> bool {
    let Some(out) = env::var_os("OUT_DIR").map(PathBuf::from) else {
        return false;
    };
    let source = out.join("order_probe.rs");
    let empty_order = out.join("order_probe.order");
    if fs::write(&source, "fn main() {}\n").is_err() || fs::write(&empty_order, "").is_err() {
        return false;
    }
    let Some(empty_order) = empty_order.to_str() else {
        return false;
    };
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let mut probe = Command::new(rustc);
    probe
        .arg("--crate-type=bin")
        .arg("--target")
        .arg(env::var("TARGET").unwrap_or_default())
        .arg("-o")
        .arg(out.join("order_probe"))
        .arg(&source);
    // The build's own flags: a linker chosen there is the one to ask.
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    probe.args(flags.split('\x1f').filter(|f| !f.is_empty()));
    if let Ok(linker) = env::var("RUSTC_LINKER") {
        probe.arg(format!("-Clinker={linker}"));
    }
    for arg in order_args(empty_order) {
        probe.arg(format!("-Clink-arg={arg}"));
    }
    probe
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
