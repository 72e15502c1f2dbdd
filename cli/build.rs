//! Lays out the release binary's code so that what a short command runs sits together.
//!
//! `startup.order` lists the functions a few representative commands execute (`run` one-shot
//! and on a session, `chat` from a pipe, `--help`, `sessions list`), recorded with callgrind by
//! `scripts/code_order.py`. The linker places them first, in that order. A short run then
//! touches a few hundred kilobytes of contiguous code instead of pages spread over the whole
//! 18 MB text section; since the kernel maps 64 KB around each code page fault, the spread
//! cost a short run about 6 MiB of resident memory (`python3 scripts/startup_cost.py
//! target/release/agentloop`: 12.2 -> 5.6 MiB peak RSS, 2.1 -> 1.8 ms CPU).
//!
//! Applied to release builds on x86_64 Linux (GNU), which Rust (1.90 and later) links with its
//! own lld; names the file does not find (another toolchain, changed code) are skipped, so a
//! stale file only costs memory, never correctness. Set `AGENTLOOP_NO_CODE_ORDER=1` to leave
//! it out (for a linker without `--symbol-ordering-file`).

use std::env;
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=startup.order");
    println!("cargo:rerun-if-env-changed=AGENTLOOP_NO_CODE_ORDER");
    if skipped().is_some() {
        return;
    }
    let order =
        Path::new(&env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join("startup.order");
    println!(
        "cargo:rustc-link-arg-bin=agentloop=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    println!("cargo:rustc-link-arg-bin=agentloop=-Wl,--no-warn-symbol-ordering");
}

/// Why the order is not applied, or `None` when it is (the reason documents the case; a build
/// that skips the order stays silent).
fn skipped() -> Option<&'static str> {
    let var = |k: &str| env::var(k).unwrap_or_default();
    if env::var_os("AGENTLOOP_NO_CODE_ORDER").is_some() {
        return Some("AGENTLOOP_NO_CODE_ORDER is set");
    }
    if var("PROFILE") != "release" {
        return Some("not a release build");
    }
    if var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ARCH") != "x86_64"
        || var("CARGO_CFG_TARGET_ENV") != "gnu"
    {
        return Some("not x86_64 Linux (GNU)");
    }
    // A linker chosen by the user may not know the option.
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    if flags.contains("linker")
        || flags.contains("fuse-ld")
        || env::var_os("RUSTC_LINKER").is_some()
    {
        return Some("a linker chosen by the user");
    }
    if env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some() {
        return Some("a linker chosen by the user");
    }
    if !Path::new(&var("CARGO_MANIFEST_DIR"))
        .join("startup.order")
        .is_file()
    {
        return Some("no startup.order");
    }
    if rustc_minor().is_none_or(|minor| minor < 90) {
        return Some("a Rust older than 1.90 links with the system linker");
    }
    None
}

/// The minor version of the compiler cargo builds with (`rustc 1.95.0 (...)` -> 95).
fn rustc_minor() -> Option<u32> {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let out = Command::new(rustc).arg("--version").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let version = text.split_whitespace().nth(1)?;
    let mut parts = version.split('.');
    if parts.next()? != "1" {
        return None;
    }
    parts.next()?.parse().ok()
}
