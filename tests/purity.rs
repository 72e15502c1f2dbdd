//! The machines are pure (R-ARCH-2): no IO, clock, randomness, async or tokio in the modules
//! that hold them. This test reads those modules' sources and fails on any forbidden use, so a
//! change that sneaks IO into a transition handler breaks the build's tests.

use std::path::{Path, PathBuf};

/// Modules that must stay pure: the machines, their data, the charts and the types they use.
const PURE: &[&str] = &[
    "src/react",
    "src/process",
    "src/chart",
    "src/step.rs",
    "src/event.rs",
    "src/effect.rs",
    "src/agent_event.rs",
    "src/context.rs",
    "src/message.rs",
    "src/error.rs",
];

/// Forbidden substrings, with the reason.
const FORBIDDEN: &[(&str, &str)] = &[
    ("tokio", "tokio belongs to the runtime"),
    ("async ", "handlers never await"),
    (".await", "handlers never await"),
    ("std::time", "time arrives as event data"),
    ("Instant", "time arrives as event data"),
    ("SystemTime", "time arrives as event data"),
    ("rand::", "randomness comes from the ids port"),
    ("std::fs", "IO is an effect"),
    ("std::net", "IO is an effect"),
    ("std::io", "IO is an effect"),
    ("std::env", "configuration is passed in"),
    ("std::process", "IO is an effect"),
    ("std::thread", "no threads in the core"),
    ("reqwest", "HTTP belongs to providers"),
    ("println!", "output is an effect"),
    ("eprintln!", "output is an effect"),
];

fn files(root: &Path) -> Vec<PathBuf> {
    if root.is_file() {
        return vec![root.to_path_buf()];
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root).expect("readable source dir") {
        let p = entry.expect("dir entry").path();
        if p.is_dir() {
            out.extend(files(&p));
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
    out
}

#[test]
fn machine_modules_are_pure() {
    let mut violations = Vec::new();
    let mut checked = 0;
    for root in PURE {
        for file in files(Path::new(root)) {
            checked += 1;
            let text = std::fs::read_to_string(&file).expect("readable source");
            for (lineno, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for (bad, why) in FORBIDDEN {
                    if code.contains(bad) {
                        violations.push(format!(
                            "{}:{}: `{bad}` ({why}): {}",
                            file.display(),
                            lineno + 1,
                            line.trim()
                        ));
                    }
                }
            }
        }
    }
    assert!(
        checked >= 10,
        "expected to check the machine modules, checked {checked} files"
    );
    assert!(
        violations.is_empty(),
        "impure code in the core:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_check_catches_a_violation() {
    // The scanner itself must be able to fail.
    let line = "    let now = std::time::Instant::now();";
    assert!(FORBIDDEN.iter().any(|(bad, _)| line.contains(bad)));
}
