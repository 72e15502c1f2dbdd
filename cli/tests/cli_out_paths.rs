//! `-o`/`--out` of `trace export`, `trace view` and `trace import`, met by the real binary:
//! a symbolic link, a FIFO, a directory or a device node at the output path is refused with a
//! clear error and left as it was (the output went through a temporary file renamed over
//! whatever was there); a regular file is still replaced.
#![cfg(unix)]

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod support;

/// `$AGENTLOOP_BIN` overrides the binary under test.
fn agentloop(dir: &Path, args: &[&str]) -> Output {
    support::command(dir, args)
        .env_remove("AGENTLOOP_STORE")
        .output()
        .expect("run agentloop")
}

fn both(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// A directory with a recorded trace `t.jsonl` and a conversation `chat.json`.
fn inputs() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = agentloop(dir.path(), &["run", "--trace", "t.jsonl", "What is 2+3?"]);
    assert!(out.status.success(), "{}", both(&out));
    std::fs::write(
        dir.path().join("chat.json"),
        r#"[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]"#,
    )
    .expect("conversation");
    dir
}

/// The commands that write OUT, each with `--out OUT`.
fn writers(out: &str) -> Vec<Vec<String>> {
    let cmds: [&[&str]; 3] = [
        &["trace", "export", "t.jsonl", "--table", "runs", "--out"],
        &["trace", "view", "t.jsonl", "--out"],
        &[
            "trace",
            "import",
            "--from",
            "openai-chat",
            "chat.json",
            "--out",
        ],
    ];
    cmds.iter()
        .map(|c| {
            let mut v: Vec<String> = c.iter().map(|s| s.to_string()).collect();
            v.push(out.to_string());
            v
        })
        .collect()
}

fn run(dir: &Path, args: &[String]) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    agentloop(dir, &args)
}

/// No `.NAME.PID.tmp` is left behind in `dir`.
fn no_temporary_files(dir: &Path) {
    let left: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_symbolic_link_at_out_is_refused_and_its_target_untouched() {
    let dir = inputs();
    let d = dir.path();
    std::fs::write(d.join("victim.txt"), "victim\n").expect("victim");
    std::os::unix::fs::symlink(d.join("victim.txt"), d.join("link.out")).expect("symlink");
    for args in writers("link.out") {
        let out = run(d, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", both(&out));
        assert!(
            both(&out).contains("a symbolic link is there, not a regular file"),
            "{args:?}: {}",
            both(&out)
        );
        let meta = std::fs::symlink_metadata(d.join("link.out")).expect("link");
        assert!(meta.file_type().is_symlink(), "{args:?}: link replaced");
        assert_eq!(
            std::fs::read_to_string(d.join("victim.txt")).expect("victim"),
            "victim\n"
        );
    }
    no_temporary_files(d);
}

#[test]
fn a_fifo_or_a_directory_at_out_is_refused_and_left_as_it_was() {
    let dir = inputs();
    let d = dir.path();
    mkfifo(&d.join("pipe.out"));
    std::fs::create_dir(d.join("dir.out")).expect("dir");
    for (target, what) in [
        ("pipe.out", "a FIFO (named pipe)"),
        ("dir.out", "a directory"),
    ] {
        for args in writers(target) {
            let out = run(d, &args);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {}", both(&out));
            assert!(
                both(&out).contains(&format!("{what} is there, not a regular file")),
                "{args:?}: {}",
                both(&out)
            );
        }
    }
    let pipe = std::fs::symlink_metadata(d.join("pipe.out")).expect("pipe");
    assert!(pipe.file_type().is_fifo(), "the FIFO was replaced");
    assert!(d.join("dir.out").is_dir());
    no_temporary_files(d);
}

#[test]
fn a_regular_file_at_out_is_still_replaced() {
    let dir = inputs();
    let d = dir.path();
    for (i, args) in writers("out.txt").iter().enumerate() {
        std::fs::write(d.join("out.txt"), "old\n").expect("old");
        let out = run(d, args);
        assert!(out.status.success(), "{i}: {args:?}: {}", both(&out));
        let text = std::fs::read_to_string(d.join("out.txt")).expect("out");
        assert_ne!(text, "old\n", "{args:?}");
    }
    no_temporary_files(d);
}

/// `trace export -o /dev/null` leaves the system's `/dev/null` a character device (only
/// root can rename over it, so the check means something only there; elsewhere the command
/// must still fail cleanly).
#[test]
fn trace_export_to_dev_null_leaves_it_a_character_device() {
    let dir = inputs();
    let before = std::fs::symlink_metadata("/dev/null").expect("/dev/null");
    assert!(before.file_type().is_char_device());
    let out = agentloop(
        dir.path(),
        &[
            "trace",
            "export",
            "t.jsonl",
            "--table",
            "runs",
            "-o",
            "/dev/null",
        ],
    );
    let after = std::fs::symlink_metadata("/dev/null").expect("/dev/null");
    assert!(
        after.file_type().is_char_device(),
        "/dev/null is no longer a character device: {}",
        both(&out)
    );
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    assert!(
        both(&out).contains("a character device is there, not a regular file"),
        "{}",
        both(&out)
    );
}

/// `trace import --from inspect-eval` writes into the directory `--out`: a symbolic link
/// there is refused, not followed (the files would land where it points), and a FIFO inside
/// at a file's name is refused like any output path.
#[test]
fn an_import_directory_that_is_a_link_is_refused_and_not_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let log: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "tests",
        "fixtures",
        "inspect",
        "eval.json",
    ]
    .iter()
    .collect();
    let log = log.display().to_string();
    std::fs::create_dir(d.join("elsewhere")).expect("elsewhere");
    std::os::unix::fs::symlink(d.join("elsewhere"), d.join("evals")).expect("symlink");
    let args = [
        "trace",
        "import",
        "--from",
        "inspect-eval",
        &log,
        "--out",
        "evals",
    ];
    let out = agentloop(d, &args);
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    assert!(
        both(&out).contains("evals: a symbolic link is there, not a directory"),
        "{}",
        both(&out)
    );
    let written = std::fs::read_dir(d.join("elsewhere"))
        .expect("elsewhere")
        .count();
    assert_eq!(written, 0, "nothing written through the link");
    // A real directory is written into.
    std::fs::remove_file(d.join("evals")).expect("unlink");
    let out = agentloop(d, &args);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    assert!(std::fs::read_dir(d.join("evals")).expect("evals").count() > 0);
}
