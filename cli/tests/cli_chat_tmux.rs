//! `agentloop chat` in a real terminal: tmux runs it in a detached session of a fixed size,
//! keys are sent as a person would type them, and the screen is read back with
//! `capture-pane`. Two prompts are answered; a third (a stalled model step) is aborted with
//! Ctrl-C while the chat stays; `/quit` leaves with exit status 0 (`remain-on-exit` keeps the
//! dead pane so its status can be read).
//!
//! Skipped with the reason printed when tmux is missing, except with env `CI` set, where that
//! fails (`.ci/run` installs tmux from apt first).
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const SCRIPT: &str = r#"{"turns": [
  {"text": "Answer one: apples."},
  {"text": "Answer two: bananas."},
  {"errors": [{"stall": true}], "text": "never shown"}
]}"#;

/// Polls the screen this long for each expected change.
const WAIT: Duration = Duration::from_secs(10);

/// A tmux server of the test's own (its own socket), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("run tmux")
    }

    fn screen(&self) -> String {
        // The whole history too: earlier answers may have scrolled off a small pane.
        let out = self.run(&["capture-pane", "-p", "-J", "-S", "-", "-t", "chat"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until `ready` holds for the screen; panics with the screen after [`WAIT`].
    fn wait_for(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        self.poll(what, || {
            let screen = self.screen();
            ready(&screen).then_some(screen)
        })
    }

    /// Calls `probe` every 50 ms until it returns something; panics after [`WAIT`].
    fn poll<T>(&self, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(found) = probe() {
                return found;
            }
            assert!(
                start.elapsed() < WAIT,
                "timed out waiting for {what}; the screen:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn type_line(&self, text: &str) {
        let out = self.run(&["send-keys", "-t", "chat", "-l", text]);
        assert!(out.status.success(), "send-keys: {out:?}");
        self.run(&["send-keys", "-t", "chat", "Enter"]);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

fn tmux_missing() -> Option<String> {
    match Command::new("tmux").arg("-V").output() {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!("`tmux -V` failed: {out:?}")),
        Err(e) => Some(format!("tmux is not installed ({e})")),
    }
}

fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

#[test]
fn chat_in_a_real_terminal_answers_aborts_with_ctrl_c_and_quits_with_status_0() {
    if let Some(reason) = tmux_missing() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set and tmux is required: {reason}"
        );
        eprintln!("skipped: {reason} (install it: apt-get install -y tmux)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("chat.json");
    std::fs::write(&script, SCRIPT).expect("script");
    // The shell records the chat's exit status in a file: tmux's `pane_dead_status` was seen
    // empty for a pane whose process had exited 0.
    let status_file = dir.path().join("status");
    let command = format!(
        "cd {} && {} chat --script {} --stall-timeout 600 --first-chunk-timeout 600; echo $? > {}",
        shell_quote(dir.path()),
        shell_quote(Path::new(env!("CARGO_BIN_EXE_agentloop"))),
        shell_quote(&script),
        shell_quote(&status_file),
    );
    let tmux = Tmux {
        socket: format!("agentloop-chat-test-{}", std::process::id()),
    };
    // One tmux invocation, so the pane stays after the command exits however fast it does.
    let started = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "chat",
        "-x",
        "120",
        "-y",
        "30",
        &command,
        ";",
        "set-option",
        "-t",
        "chat",
        "remain-on-exit",
        "on",
    ]);
    assert!(started.status.success(), "tmux new-session: {started:?}");

    tmux.wait_for("the chat's greeting", |s| s.contains("/help for commands"));
    tmux.type_line("first question");
    tmux.wait_for("the first answer", |s| {
        s.contains("Answer one: apples.") && s.contains("[completed]")
    });
    tmux.type_line("second question");
    tmux.wait_for("the second answer", |s| {
        s.contains("Answer two: bananas.") && s.matches("[completed]").count() == 2
    });

    // The third step stalls: the run is going, and its status line says so in place.
    tmux.type_line("third question");
    tmux.wait_for("the status line of the stalled run", |s| {
        s.lines()
            .any(|l| l.contains("streaming · step") && l.contains(" tok "))
    });
    tmux.run(&["send-keys", "-t", "chat", "C-c"]);
    let screen = tmux.wait_for("the aborted marker", |s| {
        s.contains("[aborted] interrupted (Ctrl-C)")
    });
    assert!(!screen.contains("never shown"), "{screen}");
    assert!(
        !screen.lines().any(|l| l.contains("streaming · step")),
        "the status line is gone after the run: {screen}"
    );

    // The chat is still alive and answers a command.
    tmux.type_line("/help");
    tmux.wait_for("the help", |s| s.contains("/steer TEXT"));

    tmux.type_line("/quit");
    let status = tmux.poll("the chat to exit after /quit", || {
        std::fs::read_to_string(&status_file)
            .ok()
            .filter(|s| s.ends_with('\n'))
    });
    assert_eq!(
        status.trim(),
        "0",
        "the chat's exit status; {}",
        tmux.screen()
    );
}
