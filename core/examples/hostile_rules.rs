//! Tool rules against hostile sizes: the time to decide one call
//! whose argument is large, with many rules that each have to read it.
//!
//! `cargo run --release -p agentloop-core --example hostile_rules -- [RULES] [ARGUMENT_BYTES]`
//! (defaults: 10000 rules, 100000 bytes). Three rule sets, none matching the call so every rule
//! is tried: `git-style` (`deny:bash:command=git push <i> *`, a literal prefix: read up to
//! its own length), `substring` (`*secret-<i>*`: a substring search over the argument) and
//! `automaton` (`*s?cret-<i>*`: a substring search for `cret-<i>`, which rules the automaton
//! out) and `worst` (`*a?b?c*`: the argument has a `c` but no match, so the bit-parallel
//! automaton reads the whole argument for every rule). The argument is `c` then `a`s. Rule sets over
//! [`MAX_TOOL_RULES`] are refused when a trace is read; this measures them anyway.
#![allow(clippy::disallowed_methods)] // a benchmark reads the wall clock

use std::time::Instant;

use agentloop_core::tool_rules::{last_match, validate_rules, ToolRule, MAX_TOOL_RULES};
use agentloop_core::ToolCall;

/// A rule set's name and its `i`th rule's argument pattern.
type RuleSet = (&'static str, fn(usize) -> String);

fn main() {
    let mut args = std::env::args().skip(1);
    let rules: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let bytes: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000)
        .max(1);
    let call = ToolCall {
        id: "c1".into(),
        name: "bash".into(),
        arguments: serde_json::json!({ "command": format!("c{}", "a".repeat(bytes - 1)) }),
        invalid_arguments: None,
    };
    println!(
        "{rules} rules x {bytes}-byte argument (a trace allows at most {MAX_TOOL_RULES} rules: {})",
        if validate_rules(&vec![ToolRule::deny("x"); rules]).is_ok() {
            "within"
        } else {
            "over"
        }
    );
    let sets: [RuleSet; 4] = [
        ("git-style", |i| format!("git push {i} *")),
        ("substring", |i| format!("*secret-{i}*")),
        ("automaton", |i| format!("*s?cret-{i}*")),
        ("worst", |_| "*a?b?c*".into()),
    ];
    for (name, pattern) in sets {
        let set: Vec<ToolRule> = (0..rules)
            .map(|i| ToolRule::deny("bash").argument("command", pattern(i)))
            .collect();
        let t = Instant::now();
        let first = last_match(&set, &call);
        let first_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let again = last_match(&set, &call);
        let again_ms = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!((first, again), (None, None));
        println!(
            "{name:>10}: first call {first_ms:8.1} ms (compiles), next call {again_ms:8.1} ms"
        );
    }
}
