//! `agentloop chat` with piped input, a real child process each time: `/quit` after piped
//! prompts prints every answer before the chat exits (it left with the runs still going and
//! their answers unprinted), a run left waiting for an answer after the input has ended is
//! aborted rather than waited for, and a line longer than the chat takes is refused with an
//! error while the session goes on (it was read into memory whole, however long).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `agentloop ARGS` in `dir` with `stdin` as its whole input; killed if it has not exited
/// within a minute (a chat waiting for ever is a failure, not a hung test).
fn agentloop(dir: &Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentloop"))
        .args(args)
        .current_dir(dir)
        .env_remove("AGENTLOOP_STORE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agentloop");
    let mut input = child.stdin.take().expect("stdin");
    // The chat may stop reading (after `/quit`) before all of it is written.
    let _ = input.write_all(stdin);
    drop(input);
    let pid = child.id();
    let (done, waited) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if waited
            .recv_timeout(std::time::Duration::from_secs(60))
            .is_err()
        {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    });
    let out = child.wait_with_output().expect("agentloop output");
    let _ = done.send(());
    let _ = watchdog.join();
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A script of two text answers, `One.` and `Two.`, as `dir/s.json`.
fn two_answers(dir: &Path) {
    std::fs::write(
        dir.join("s.json"),
        r#"{"turns": [{"text": "One."}, {"text": "Two."}]}"#,
    )
    .expect("script");
}

#[test]
fn piped_prompts_then_quit_print_both_answers_every_time() {
    // The answers were lost in most tries: run it several times to meet the race.
    for attempt in 0..8 {
        let dir = tempfile::tempdir().expect("tempdir");
        two_answers(dir.path());
        let out = agentloop(
            dir.path(),
            &["chat", "--script", "s.json", "--session", "s"],
            b"a\nb\n/quit\n",
        );
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "try {attempt}: {stderr}");
        assert_eq!(text(&out.stdout), "One.\nTwo.\n", "try {attempt}: {stderr}");
        assert_eq!(
            stderr.matches("[completed] final_answer").count(),
            2,
            "try {attempt}: {stderr}"
        );
        // Both runs are in the session, which is whole.
        let check = agentloop(dir.path(), &["sessions", "check", "s"], b"");
        assert!(check.status.success(), "{}", text(&check.stderr));
    }
}

#[test]
fn quit_stops_reading_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    two_answers(dir.path());
    let out = agentloop(
        dir.path(),
        &["chat", "--script", "s.json"],
        b"a\n/quit\nb\n",
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(text(&out.stdout), "One.\n", "{stderr}");
}

#[test]
fn a_line_over_the_limit_is_refused_and_the_chat_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    two_answers(dir.path());
    // 3 MiB without a line break, then a prompt, then the end of input without one.
    let mut input = vec![b'x'; 3 << 20];
    input.extend_from_slice(b"\nfirst\n");
    input.extend(std::iter::repeat_n(b'y', 2 << 20));
    let out = agentloop(dir.path(), &["chat", "--script", "s.json"], &input);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(text(&out.stdout), "One.\n", "{stderr}");
    assert!(
        stderr.contains("[error] input line too long (3145728 bytes; the limit is 1048576)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("[error] input line too long (2097152 bytes; the limit is 1048576)"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("[completed] final_answer").count(),
        1,
        "{stderr}"
    );
}

#[test]
fn a_question_or_an_approval_left_after_the_input_ends_aborts_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("ask.json"),
        r#"{"turns": [
            {"tool_calls": [{"id": "q1", "name": "ask_user",
                             "arguments": {"question": "Which colour?", "options": ["red"]}}]},
            {"text": "never"}
        ]}"#,
    )
    .expect("script");
    std::fs::write(
        dir.path().join("calc.json"),
        r#"{"turns": [
            {"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "1+1"}}]},
            {"text": "never"}
        ]}"#,
    )
    .expect("script");
    let cases: [(&[&str], &[u8]); 3] = [
        (&["chat", "--script", "ask.json"], b"pick a colour\n/quit\n"),
        (&["chat", "--script", "ask.json"], b"pick a colour\n"),
        (
            &["chat", "--script", "calc.json", "--ask", "calculator"],
            b"add\n/quit\n",
        ),
    ];
    for (args, input) in cases {
        let out = agentloop(dir.path(), args, input);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.contains("[quit] the run waits for an answer and the input has ended"),
            "{args:?}: {stderr}"
        );
        assert!(!text(&out.stdout).contains("never"), "{args:?}: {stderr}");
    }
}
