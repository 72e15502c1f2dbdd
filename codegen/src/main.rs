//! `cargo run -p agentloop-codegen` writes `core/src/generated/*.rs` from `statecharts/*.toml`;
//! `cargo run -p agentloop-codegen -- --check` writes nothing and fails when a committed file
//! differs from what the charts generate (CI's freshness check).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let check = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--check") => true,
        Some(other) => {
            eprintln!("usage: agentloop-codegen [--check] (unknown argument {other:?})");
            return ExitCode::from(2);
        }
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let files = match agentloop_codegen::generate(&root.join("core/statecharts")) {
        Ok(files) => files,
        Err(e) => {
            eprintln!("agentloop-codegen: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dir = root.join(agentloop_codegen::OUT_DIR);
    let mut stale = Vec::new();
    for f in &files {
        let path = dir.join(&f.name);
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current == f.text {
            continue;
        }
        if check {
            stale.push(f.name.clone());
        } else if let Err(e) = std::fs::write(&path, &f.text) {
            eprintln!("agentloop-codegen: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        } else {
            println!("wrote {}/{}", agentloop_codegen::OUT_DIR, f.name);
        }
    }
    if !stale.is_empty() {
        eprintln!(
            "agentloop-codegen: {} differ from statecharts/*.toml: {}; run `cargo run -p agentloop-codegen` and commit the result",
            agentloop_codegen::OUT_DIR,
            stale.join(", ")
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
