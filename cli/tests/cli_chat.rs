//! `agentloop run` and `agentloop chat` with stdout piped (real child processes): stdout holds
//! nothing but the answer, the rest is plain lines on stderr, the state transitions only with
//! `-v`; the chat reads prompts and slash commands from stdin (`/trace`, `/approve`), and the
//! end of input waits for the runs, then exits 0.

use std::io::{BufRead, Write};
use std::path::Path;

mod support;
use support::{agentloop_fed as agentloop, spawn};

/// A script of two text answers, `One.` and `Two.`, as `dir/s.json`.
fn two_answers(dir: &Path) {
    std::fs::write(
        dir.join("s.json"),
        r#"{"turns": [{"text": "One."}, {"text": "Two."}]}"#,
    )
    .expect("script");
}

/// Reads stderr lines into `seen` until one starts with `prefix` (`None`: to the end).
fn read_until(
    lines: &mut std::io::Lines<std::io::BufReader<std::process::ChildStderr>>,
    prefix: Option<&str>,
    seen: &mut String,
) {
    for line in lines.by_ref() {
        let line = line.expect("stderr line");
        seen.push_str(&line);
        seen.push('\n');
        if prefix.is_some_and(|p| line.starts_with(p)) {
            return;
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const ANSWER: &str = "Let me calculate that.\nThe answer is 5.\n";

#[test]
fn piped_run_prints_only_the_answer_on_stdout_and_transitions_only_with_v() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = agentloop(dir.path(), &["run", "What is 2+3?"], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), ANSWER);
    let stderr = text(&out.stderr);
    assert!(
        !stderr.contains("-->"),
        "no transitions without -v: {stderr}"
    );
    assert!(
        !stderr.contains('\x1b'),
        "no escape codes when piped: {stderr}"
    );
    assert!(stderr.contains("[tool] calculator"), "{stderr}");
    assert!(
        stderr.contains("[completed] final_answer after 2 step(s); usage in=19 out=17"),
        "{stderr}"
    );

    let verbose = agentloop(
        dir.path(),
        &["run", "-v", "--price", "2.5,10", "What is 2+3?"],
        "",
    );
    assert_eq!(text(&verbose.stdout), ANSWER);
    let stderr = text(&verbose.stderr);
    assert!(
        stderr.contains("[React] Init --Start--> Planning"),
        "{stderr}"
    );
    // 19 × 2.5 + 17 × 10 per million tokens.
    assert!(stderr.contains("; cost $0.000218"), "{stderr}");

    let bad = agentloop(dir.path(), &["run", "--price", "cheap", "x"], "");
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("IN,OUT"),
        "{}",
        text(&bad.stderr)
    );
}

#[test]
fn piped_chat_answers_each_line_records_traces_and_exits_0_at_the_end_of_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    two_answers(dir.path());
    let out = agentloop(
        dir.path(),
        &["chat", "--script", "s.json"],
        "/trace t.jsonl\nfirst\n/nonsense\nsecond\n",
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(text(&out.stdout), "One.\nTwo.\n", "{stderr}");
    assert!(
        stderr.contains("unknown command /nonsense (/help lists them)"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("[completed] final_answer").count(),
        2,
        "{stderr}"
    );
    assert!(stderr.contains("[trace] wrote t.jsonl"), "{stderr}");
    assert!(stderr.contains("[trace] wrote t.2.jsonl"), "{stderr}");
    for trace in ["t.jsonl", "t.2.jsonl"] {
        let replay = agentloop(dir.path(), &["replay", trace], "");
        assert!(replay.status.success(), "{trace}: {}", text(&replay.stderr));
    }
}

#[test]
fn chat_shows_a_call_waiting_for_approval_and_approve_runs_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = spawn(dir.path(), &["chat", "--ask", "calculator"]);
    let mut input = child.stdin.take().expect("stdin");
    let stderr = child.stderr.take().expect("stderr");
    writeln!(input, "What is 2+3?").expect("prompt");
    let mut seen = String::new();
    let mut lines = std::io::BufReader::new(stderr).lines();
    read_until(&mut lines, Some("[approval] calculator"), &mut seen);
    assert!(
        seen.contains(r#"needs approval: {"expression":"2+3"}"#),
        "the pending call is shown: {seen}"
    );
    writeln!(input, "/approve").expect("approve");
    drop(input);
    read_until(&mut lines, None, &mut seen);
    let out = child.wait_with_output().expect("output");
    assert!(out.status.success(), "{seen}");
    assert_eq!(text(&out.stdout), ANSWER, "{seen}");
    assert!(seen.contains("[approved] "), "{seen}");
    assert!(seen.contains("[completed] final_answer"), "{seen}");
}

#[test]
fn chat_survives_input_that_is_not_utf8_and_a_trace_it_cannot_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    two_answers(dir.path());
    let mut input = b"\xff\xfe not text\n".to_vec();
    input.extend_from_slice(b"/trace no/such/dir/t.jsonl\nsecond\n/approve\n/model nope\n");
    let out = agentloop(dir.path(), &["chat", "--script", "s.json"], input);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("[error] writing trace no/such/dir/t.jsonl"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing waits for approval"), "{stderr}");
    assert!(stderr.contains(r#"[error] no model "nope""#), "{stderr}");
    // The first line went to the model as a prompt; the second was queued and answered too.
    assert_eq!(text(&out.stdout), "One.\nTwo.\n", "{stderr}");
}

#[test]
fn chat_refuses_an_unknown_tool_to_ask_for() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = agentloop(dir.path(), &["chat", "--ask", "nope"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--ask nope: no such tool"));
}

/// A model that calls `ask_user` pauses the chat's run; the person's next
/// line is the answer (a number picks an option) and the run continues with it.
#[test]
fn seed_001_chat_asks_the_person_and_continues_with_the_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("s.json"),
        r#"{"turns": [
            {"tool_calls": [{"id": "q1", "name": "ask_user",
                             "arguments": {"question": "Which colour?", "options": ["red", "blue"]}}]},
            {"text": "You chose {{last_tool_result}}."}
        ]}"#,
    )
    .expect("script");
    let mut child = spawn(dir.path(), &["chat", "--script", "s.json"]);
    let mut input = child.stdin.take().expect("stdin");
    let stderr = child.stderr.take().expect("stderr");
    writeln!(input, "pick a colour").expect("prompt");
    let mut seen = String::new();
    let mut lines = std::io::BufReader::new(stderr).lines();
    read_until(&mut lines, Some("[ask] type your answer"), &mut seen);
    assert!(
        seen.contains("[ask] Which colour?  1) red  2) blue"),
        "the question and its options are shown: {seen}"
    );
    writeln!(input, "2").expect("answer");
    drop(input);
    read_until(&mut lines, None, &mut seen);
    let out = child.wait_with_output().expect("output");
    assert!(out.status.success(), "{seen}");
    assert!(seen.contains("[answered] blue"), "{seen}");
    assert_eq!(text(&out.stdout), "You chose blue.\n", "{seen}");
}
