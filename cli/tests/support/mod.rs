//! Helpers shared by the CLI's integration tests: the binary run as a child process, its
//! output read back, the repository's fixtures, and `trace import`.
//!
//! Each test file that says `mod support;` compiles its own copy and uses only some of these.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// The binary under test: `AGENTLOOP_BIN` when set (a build made elsewhere, e.g. release),
/// else the one Cargo built for these tests.
pub fn bin() -> PathBuf {
    std::env::var_os("AGENTLOOP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_agentloop")))
}

/// `agentloop ARGS` in `dir` with no input, to be adjusted and run.
pub fn command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args).current_dir(dir).stdin(Stdio::null());
    cmd
}

/// Runs `agentloop ARGS` in `dir` with no input, to its end.
pub fn agentloop(dir: &Path, args: &[&str]) -> Output {
    command(dir, args).output().expect("run agentloop")
}

/// `agentloop ARGS` started in `dir`, every stream piped.
pub fn spawn(dir: &Path, args: &[&str]) -> Child {
    command(dir, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agentloop")
}

/// Runs `agentloop ARGS` in `dir` with `stdin` as its whole input, to its end.
pub fn agentloop_fed(dir: &Path, args: &[&str], stdin: impl AsRef<[u8]>) -> Output {
    let mut child = spawn(dir, args);
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin.as_ref()).expect("write stdin");
    drop(input);
    child.wait_with_output().expect("agentloop output")
}

/// What the run wrote to stdout.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What the run wrote to stderr.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The repository's `tests/fixtures/{kind}/{name}`, as an argument.
pub fn fixture(kind: &str, name: &str) -> String {
    let p: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "tests",
        "fixtures",
        kind,
        name,
    ]
    .iter()
    .collect();
    p.display().to_string()
}

/// Runs `agentloop trace import --from FROM FILE --out OUT` in `dir`.
pub fn import(dir: &Path, from: &str, file: &str, out: &str) -> Output {
    agentloop(
        dir,
        &["trace", "import", "--from", from, file, "--out", out],
    )
}

/// Runs `agentloop trace export --format FORMAT ARGS` in `dir` (ARGS: the options, the
/// traces, `-o OUT`).
pub fn export(dir: &Path, format: &str, args: &[&str]) -> Output {
    let mut all = vec!["trace", "export", "--format", format];
    all.extend_from_slice(args);
    agentloop(dir, &all)
}

/// The traces (not the scripts) an import wrote into `dir`.
pub fn imported_traces(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("the import's directory")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect()
}

/// The ids of the tool calls of the script at `path` (every call of these scripts names one).
pub fn script_calls(path: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("script");
    let script: serde_json::Value = serde_json::from_str(&text).expect("script JSON");
    let turns = script["turns"].as_array().cloned().unwrap_or_default();
    turns
        .iter()
        .flat_map(|t| t["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|c| c["id"].as_str().expect("scripted call id").to_string())
        .collect()
}
