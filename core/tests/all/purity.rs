//! The core is pure (R-ARCH-2). The first line of defence is `core/Cargo.toml`: the crate's
//! dependencies cannot do IO, so a handler that tries does not compile. This test checks that
//! list (only the allowed crates, none of the runtime's), and, as a second line, scans every
//! source file of the crate for forbidden uses of the standard library (clock, files, threads,
//! environment, printing).

use std::path::{Path, PathBuf};

/// The whole core crate must stay pure.
const PURE: &[&str] = &[concat!(env!("CARGO_MANIFEST_DIR"), "/src")];

/// The only normal dependencies the core may have: data, serialization, the statig macros.
const ALLOWED_DEPS: &[&str] = &[
    "statig",
    "serde",
    "serde_json",
    "schemars",
    "thiserror",
    "similar",
    "toml",
];

/// Crates that must never appear among the core's dependencies (the done-when list of the
/// core redesign: async runtimes, HTTP, CLI, file locks).
const FORBIDDEN_DEPS: &[&str] = &[
    "tokio",
    "reqwest",
    "hyper",
    "futures",
    "async-trait",
    "clap",
    "mio",
    "fs4",
];

/// The `[dependencies]` table's crate names from a Cargo.toml text.
fn normal_dependencies(manifest: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut deps = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps {
            if let Some((name, _)) = line.split_once('=') {
                let name = name.trim();
                if !name.is_empty() && !name.starts_with('#') {
                    deps.push(name.to_string());
                }
            }
        }
    }
    deps
}

#[test]
fn core_dependencies_cannot_do_io() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .expect("core/Cargo.toml");
    let deps = normal_dependencies(&manifest);
    assert!(deps.contains(&"statig".to_string()), "parsed {deps:?}");
    for d in &deps {
        assert!(
            ALLOWED_DEPS.contains(&d.as_str()),
            "agentloop-core depends on `{d}`, which is not on the list of pure dependencies"
        );
        assert!(!FORBIDDEN_DEPS.contains(&d.as_str()));
    }
}

#[test]
fn the_dependency_check_catches_a_runtime_crate() {
    let bad = "[package]\nname = \"x\"\n[dependencies]\nserde = \"1\"\ntokio = { version = \"1\" }\n[dev-dependencies]\nproptest = \"1\"\n";
    let deps = normal_dependencies(bad);
    assert_eq!(deps, vec!["serde".to_string(), "tokio".to_string()]);
    assert!(deps.iter().any(|d| !ALLOWED_DEPS.contains(&d.as_str())));
}

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
