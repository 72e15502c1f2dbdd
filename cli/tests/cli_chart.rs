//! `agentloop chart` (R-ARCH-3): the session chart prints like the run's charts, as Mermaid
//! (the committed `core/statecharts/session.mmd`) and as its TOML source.

use std::process::Output;

mod support;

fn agentloop(args: &[&str]) -> Output {
    support::agentloop(std::path::Path::new("."), args)
}

/// R-ARCH-3, R-CTL: `agentloop chart session` prints the committed diagram; `--format toml`
/// the chart itself.
#[test]
fn r_arch_3_chart_session_prints_the_session_machine() {
    let out = agentloop(&["chart", "session"]);
    assert!(out.status.success());
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../core/statecharts/session.mmd"
    ))
    .expect("session.mmd");
    assert_eq!(String::from_utf8_lossy(&out.stdout), committed);
    assert!(committed.starts_with("---\ntitle: Session machine"));
    let out = agentloop(&["chart", "session", "--format", "toml"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("machine = \"session\""));
}
