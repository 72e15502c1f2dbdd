//! The built-in demo model holds a conversation (real child processes, no key, no network):
//! three prompts in a row on one session, with `run --session` and with `chat` on piped stdin,
//! all complete; arithmetic goes through the calculator, anything else gets a short reply.

use std::path::Path;
use std::process::Output;

mod support;

fn agentloop(dir: &Path, args: &[&str], stdin: &str) -> Output {
    support::agentloop_fed(dir, args, stdin)
}

fn show(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn three_prompts_on_one_session_with_run_all_complete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let prompts = [
        ("What is 2+3?", "The answer is 5."),
        ("And what is 6*7?", "The answer is 42."),
        ("Thank you!", "offline demo model"),
    ];
    for (prompt, expected) in prompts {
        let out = agentloop(dir.path(), &["run", "--session", "demo", prompt], "");
        assert!(out.status.success(), "{prompt}: {}", show(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(expected), "{prompt}: {}", show(&out));
    }
    // The session holds all three prompts, and passes its own check.
    let out = agentloop(dir.path(), &["sessions", "check", "demo"], "");
    assert!(out.status.success(), "{}", show(&out));
}

#[test]
fn three_prompts_in_chat_on_piped_stdin_all_complete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = agentloop(
        dir.path(),
        &["chat"],
        "What is 2+3?\nAnd what is 6*7?\nThank you!\n",
    );
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let five = stdout.find("The answer is 5.");
    let forty_two = stdout.find("The answer is 42.");
    let reply = stdout.find("offline demo model");
    assert!(
        five.is_some() && forty_two.is_some() && reply.is_some(),
        "{}",
        show(&out)
    );
    assert!(
        five < forty_two && forty_two < reply,
        "in order: {}",
        show(&out)
    );
    assert!(!show(&out).contains("script exhausted"), "{}", show(&out));
}

/// `--seed N` fixes the retry jitter's seed: the trace header records it, and two runs with
/// the same seed write the same header; without it each run draws its own.
#[test]
fn seed_fixes_the_jitter_seed_in_the_trace_header() {
    let dir = tempfile::tempdir().expect("tempdir");
    let header = |name: &str, extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["run", "What is 2+3?", "--trace", name];
        args.extend_from_slice(extra);
        let out = agentloop(dir.path(), &args, "");
        assert!(out.status.success(), "{}", show(&out));
        let text = std::fs::read_to_string(dir.path().join(name)).expect("trace");
        serde_json::from_str(text.lines().next().expect("header")).expect("JSON header")
    };
    let seed_of = |h: &serde_json::Value| h["config"]["step"]["retry"]["jitter_seed"].clone();
    let a = header("a.jsonl", &["--seed", "42"]);
    let b = header("b.jsonl", &["--seed", "42"]);
    assert_eq!(seed_of(&a), serde_json::json!(42), "{a}");
    assert_eq!(a, b, "same seed, same header");
    let c = header("c.jsonl", &[]);
    let d = header("d.jsonl", &[]);
    assert!(seed_of(&c).is_u64(), "{c}");
    assert_ne!(seed_of(&c), seed_of(&d), "a fresh seed per run");
}

/// The step limit's reminder is not the prompt: with one step (no tools offered) the demo says
/// it cannot use the calculator; with two, the second step (no tools, the tool's result in the
/// context) answers with the result. Neither answers with the demo's introduction.
#[test]
fn max_steps_one_and_two_answer_the_prompt_not_the_reminder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        ("1", "This step offers no tools, so I cannot work out 2+3"),
        ("2", "The answer is 5."),
    ];
    for (steps, expected) in cases {
        let out = agentloop(
            dir.path(),
            &["run", "--max-steps", steps, "What is 2+3?"],
            "",
        );
        assert!(out.status.success(), "{steps}: {}", show(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(expected), "{steps}: {}", show(&out));
        assert!(
            !stdout.contains("offline demo model"),
            "{steps}: {}",
            show(&out)
        );
    }
}
