//! Tool rules through the inner machine (R-TOOL-3): per call, by tool name and
//! an argument pattern, allow (runs), ask (approval rows), deny (row `commit_denied_by_rule`, a
//! denied result naming the rule), the last matching rule deciding, a rule's timeout as the
//! call's deadline timer, the approval map and `tool_timeout_ms` deciding whatever no rule
//! matches (so configurations and traces without rules behave as before), and the rules'
//! place in the serialized configuration.

use std::collections::BTreeSet;
use std::sync::Arc;

use agentloop_core::agent_event::AgentEvent;
use agentloop_core::chart::{ToolCallRow, ToolCallState};
use agentloop_core::entry::Entry;
use agentloop_core::message::FinishReason;
use agentloop_core::process::{
    ApprovalPolicy, DoomLoopPolicy, LoopAction, Process, ProcessStep, StepConfig,
};
use agentloop_core::tool_cache::ToolCache;
use agentloop_core::tool_rules::{RuleAction, RuleError, ToolRule};
use agentloop_core::{
    ApprovalDecision, AssistantMessage, AttemptId, Effect, Event, MessageDelta, ModelRequest,
    RunConfig, ToolCall, ToolResult, ToolSpec, ToolStatus, Transition,
};

fn request() -> ModelRequest {
    ModelRequest {
        run_id: "r1".into(),
        model_call_index: 1,
        attempt: 1,
        session_turn: 0,
        model: "m".into(),
        system: None,
        messages: vec![agentloop_core::Message::user("hi")].into(),
        tools: ["bash", "calc", "read_file"]
            .iter()
            .map(|n| ToolSpec {
                name: (*n).into(),
                description: String::new(),
                parameters: serde_json::json!({}),
            })
            .collect(),
        params: Default::default(),
    }
}

fn attempt() -> AttemptId {
    AttemptId {
        run_id: "r1".into(),
        model_call_index: 1,
        attempt: 1,
    }
}

/// Every transition conforms to its chart and every guard check holds.
fn checked(s: ProcessStep) -> ProcessStep {
    assert!(s.transitions.iter().all(|t| t.conforms()), "{s:?}");
    assert!(s.guard_checks.iter().all(|c| c.holds()), "{s:?}");
    s
}

/// A step with `cfg`, whose model calls `calls` (`(name, arguments)`, ids `c1`, `c2`, ...):
/// returns the step and the `done` step (where the calls are decided).
fn commit(cfg: StepConfig, calls: &[(&str, &str)]) -> (Process, ProcessStep) {
    let mut p = Process::new(cfg, request(), BTreeSet::new());
    let _ = checked(p.begin());
    let _ = checked(p.handle(&Event::StreamOpened { attempt: attempt() }));
    let mut deltas: Vec<MessageDelta> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| MessageDelta::ToolCall {
            id: format!("c{}", i + 1),
            name: (*name).into(),
            arguments: (*args).into(),
        })
        .collect();
    deltas.push(MessageDelta::FinishStep {
        finish_reason: Some(FinishReason::ToolCalls),
        raw_finish_reason: None,
        usage: None,
    });
    deltas.push(MessageDelta::Finish);
    for (seq, delta) in deltas.into_iter().enumerate() {
        let _ = checked(p.handle(&Event::Delta {
            attempt: attempt(),
            seq: seq as u64,
            delta,
        }));
    }
    let done = checked(p.handle(&Event::done(attempt())));
    (p, done)
}

fn bash(command: &str) -> String {
    serde_json::json!({ "command": command }).to_string()
}

/// The tool-call row each call took in `s`, by call id, in order.
fn call_rows(s: &ProcessStep) -> Vec<(String, ToolCallRow)> {
    s.transitions
        .iter()
        .filter_map(|t| match t {
            Transition::ToolCall { call, row, .. } => Some((call.clone(), *row)),
            _ => None,
        })
        .collect()
}

fn row_of(s: &ProcessStep, id: &str) -> Vec<ToolCallRow> {
    call_rows(s)
        .into_iter()
        .filter(|(c, _)| c == id)
        .map(|(_, r)| r)
        .collect()
}

/// `(call, rule, action, timeout)` of each `tool_rule_matched` in `s`.
fn matched(s: &ProcessStep) -> Vec<(String, usize, RuleAction, Option<u64>)> {
    s.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Emit {
                event:
                    AgentEvent::ToolRuleMatched {
                        tool_call_id,
                        rule,
                        action,
                        timeout_ms,
                        ..
                    },
            } => Some((tool_call_id.clone(), *rule, *action, *timeout_ms)),
            _ => None,
        })
        .collect()
}

fn ran(s: &ProcessStep) -> Vec<String> {
    s.effects
        .iter()
        .filter_map(|e| match e {
            Effect::RunTool { call } => Some(call.id.clone()),
            _ => None,
        })
        .collect()
}

fn asked(s: &ProcessStep) -> Vec<String> {
    s.effects
        .iter()
        .filter_map(|e| match e {
            Effect::RequestApproval { call } => Some(call.id.clone()),
            _ => None,
        })
        .collect()
}

/// The results persisted in `s`, by call id.
fn persisted(s: &ProcessStep) -> Vec<ToolResult> {
    s.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Persist {
                entry: Entry::ToolResult { result, .. },
            } => Some(result.clone()),
            _ => None,
        })
        .collect()
}

/// Timers started in `s`: `(timer_id, delay_ms)`.
fn timers(s: &ProcessStep) -> Vec<(u64, u64)> {
    s.effects
        .iter()
        .filter_map(|e| match e {
            Effect::StartTimer { timer_id, delay_ms } => Some((*timer_id, *delay_ms)),
            _ => None,
        })
        .collect()
}

/// OpenCode's example as rules: ask for any bash command, allow git, deny rm.
fn opencode_rules() -> StepConfig {
    StepConfig {
        tool_rules: vec![
            ToolRule::ask("bash"),
            ToolRule::allow("bash").argument("command", "git *"),
            ToolRule::deny("bash")
                .argument("command", "rm *")
                .reason("deleting files is not allowed"),
        ],
        ..StepConfig::default()
    }
}

#[test]
fn r_tool_3_rules_allow_ask_and_deny_by_argument_pattern() {
    let (p, s) = commit(
        opencode_rules(),
        &[
            ("bash", &bash("git status")),
            ("bash", &bash("rm -rf /")),
            ("bash", &bash("ls")),
            ("calc", "{}"),
        ],
    );
    assert_eq!(
        row_of(&s, "c1"),
        [ToolCallRow::CommitQueued, ToolCallRow::StartRun]
    );
    assert_eq!(row_of(&s, "c2"), [ToolCallRow::CommitDeniedByRule]);
    assert_eq!(
        row_of(&s, "c3"),
        [ToolCallRow::CommitApproval, ToolCallRow::Ask]
    );
    // No rule matches calc: the (empty) approval map lets it run.
    assert_eq!(
        row_of(&s, "c4"),
        [ToolCallRow::CommitQueued, ToolCallRow::StartRun]
    );
    assert_eq!(ran(&s), ["c1", "c4"]);
    assert_eq!(asked(&s), ["c3"]);
    assert_eq!(
        matched(&s),
        [
            ("c1".into(), 1, RuleAction::Allow, None),
            ("c2".into(), 2, RuleAction::Deny, None),
            ("c3".into(), 0, RuleAction::Ask, None),
        ]
    );
    let denied = persisted(&s);
    assert_eq!(denied.len(), 1);
    assert_eq!(denied[0].tool_call_id, "c2");
    assert_eq!(denied[0].status, ToolStatus::Denied);
    assert_eq!(
        denied[0].content,
        "denied by rule 2 (deny:bash:command=rm *): deleting files is not allowed"
    );
    // A denied call does not stop the run, unlike a rejected approval.
    assert!(!p.stop_requested());
}

#[test]
fn r_tool_3_the_last_matching_rule_wins() {
    let rm = [("bash", bash("rm x"))];
    let calls: Vec<(&str, &str)> = rm.iter().map(|(n, a)| (*n, a.as_str())).collect();
    let cfg = |rules: Vec<ToolRule>| StepConfig {
        tool_rules: rules,
        ..StepConfig::default()
    };
    // The exception after the general rule decides...
    let (_, s) = commit(
        cfg(vec![
            ToolRule::allow("*"),
            ToolRule::deny("bash").argument("command", "rm *"),
        ]),
        &calls,
    );
    assert_eq!(row_of(&s, "c1"), [ToolCallRow::CommitDeniedByRule]);
    // ...and a general rule after it overrides it (OpenCode's findLast).
    let (_, s) = commit(
        cfg(vec![
            ToolRule::deny("bash").argument("command", "rm *"),
            ToolRule::allow("*"),
        ]),
        &calls,
    );
    assert_eq!(
        row_of(&s, "c1"),
        [ToolCallRow::CommitQueued, ToolCallRow::StartRun]
    );
    assert_eq!(matched(&s), [("c1".into(), 1, RuleAction::Allow, None)]);
    // A rule decides over the approval map.
    let mut c = cfg(vec![ToolRule::allow("bash")]);
    c.approval.insert("bash".into(), ApprovalPolicy::Always);
    let (_, s) = commit(c, &calls);
    assert_eq!(ran(&s), ["c1"]);
    let mut c = cfg(vec![ToolRule::ask("ba?h").argument("command", "rm *")]);
    c.approval.insert("bash".into(), ApprovalPolicy::Never);
    let (_, s) = commit(c, &calls);
    assert_eq!(asked(&s), ["c1"]);
}

#[test]
fn r_tool_3_a_rules_timeout_is_the_calls_deadline_timer() {
    let cfg = StepConfig {
        tool_timeout_ms: Some(120_000),
        tool_rules: vec![
            ToolRule::allow("calc").timeout_ms(50),
            // Matches, but sets no timeout: the step's applies.
            ToolRule::allow("bash").argument("command", "git *"),
        ],
        ..StepConfig::default()
    };
    let (mut p, s) = commit(
        cfg,
        &[
            ("calc", "{}"),
            ("read_file", "{}"),
            ("bash", &bash("git log")),
        ],
    );
    let started = timers(&s);
    assert_eq!(started.len(), 3, "{started:?}");
    assert_eq!(
        started.iter().map(|t| t.1).collect::<Vec<_>>(),
        [50, 120_000, 120_000]
    );
    assert_eq!(
        matched(&s),
        [
            ("c1".into(), 0, RuleAction::Allow, Some(50)),
            ("c3".into(), 1, RuleAction::Allow, Some(120_000)),
        ]
    );
    // The calc deadline fires: the existing deadline row kills it with the rule's value.
    let s = checked(p.handle(&Event::TimerElapsed {
        timer_id: started[0].0,
    }));
    assert_eq!(row_of(&s, "c1"), [ToolCallRow::Deadline]);
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::KillTool { tool_call_id } if tool_call_id == "c1")));
    let r = persisted(&s);
    assert_eq!(r[0].status, ToolStatus::Error);
    assert_eq!(r[0].content, "tool timed out after 50 ms");
    // The others finish before their deadline: their timers are cancelled.
    for id in ["c2", "c3"] {
        let s = checked(p.handle(&Event::ToolFinished {
            tool_call_id: id.into(),
            status: ToolStatus::Completed,
            content: "ok".into(),
        }));
        assert!(s
            .effects
            .iter()
            .any(|e| matches!(e, Effect::CancelTimer { .. })));
    }
    assert_eq!(p.results().len(), 3);
}

#[test]
fn r_tool_3_without_a_matching_rule_the_approval_map_decides_as_before() {
    let old = StepConfig {
        tool_timeout_ms: Some(1_000),
        approval: [("bash".to_string(), ApprovalPolicy::Always)].into(),
        ..StepConfig::default()
    };
    let calls = [("bash", "{}"), ("calc", "{}")];
    let (_, before) = commit(old.clone(), &calls);
    assert_eq!(asked(&before), ["c1"]);
    assert_eq!(ran(&before), ["c2"]);
    assert_eq!(
        timers(&before).iter().map(|t| t.1).collect::<Vec<_>>(),
        [1_000]
    );
    // Rules that match none of the calls change nothing: same rows, same effects.
    let with_rules = StepConfig {
        tool_rules: vec![
            ToolRule::deny("rm"),
            ToolRule::allow("bash").argument("command", "*"),
            ToolRule::deny("calc").argument("/deep/pointer", "*"),
        ],
        ..old
    };
    let (_, after) = commit(with_rules, &calls);
    assert_eq!(call_rows(&before), call_rows(&after));
    assert_eq!(before.effects, after.effects);
    assert!(matched(&after).is_empty());
}

#[test]
fn r_tool_3_a_resumed_call_a_rule_denies_never_runs() {
    let cfg = opencode_rules();
    let calls = vec![
        ToolCall::from_raw("c1", "bash", &bash("rm -rf build")),
        ToolCall::from_raw("c2", "bash", &bash("git diff")),
        ToolCall::from_raw("c3", "calc", "{}"),
    ];
    let message = AssistantMessage {
        tool_calls: calls,
        ..AssistantMessage::default()
    };
    // c3's result was persisted before the crash; c1 and c2 have none.
    let known = vec![ToolResult {
        tool_call_id: "c3".into(),
        name: "calc".into(),
        content: "4".into(),
        status: ToolStatus::Completed,
    }];
    let mut p = Process::new(cfg, request(), BTreeSet::new());
    let s = checked(p.resume(message, known));
    assert_eq!(row_of(&s, "c1"), [ToolCallRow::RestoreDeniedByRule]);
    assert_eq!(
        row_of(&s, "c2"),
        [ToolCallRow::RestoreQueued, ToolCallRow::StartRun]
    );
    assert_eq!(row_of(&s, "c3"), [ToolCallRow::RestoreResult]);
    assert_eq!(ran(&s), ["c2"]);
    assert_eq!(
        matched(&s),
        [
            ("c1".into(), 2, RuleAction::Deny, None),
            ("c2".into(), 1, RuleAction::Allow, None),
        ]
    );
    let r = persisted(&s);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].tool_call_id.as_str(), r[0].status),
        ("c1", ToolStatus::Denied)
    );
    assert!(s.effects.iter().any(|e| matches!(
        e,
        Effect::Emit { event: AgentEvent::ToolEnd { tool_call_id, status: ToolStatus::Denied, .. } }
            if tool_call_id == "c1"
    )));
}

#[test]
fn r_tool_3_approve_always_does_not_cover_a_call_a_rule_singled_out_by_its_arguments() {
    let cfg = StepConfig {
        approval: [("bash".to_string(), ApprovalPolicy::Always)].into(),
        tool_rules: vec![ToolRule::ask("bash").argument("command", "rm *")],
        parallel_tools: true,
        ..StepConfig::default()
    };
    let (mut p, s) = commit(
        cfg,
        &[
            ("bash", &bash("ls")),
            ("bash", &bash("rm x")),
            ("bash", &bash("ls -la y")),
        ],
    );
    assert_eq!(asked(&s), ["c1"]);
    let s = checked(p.handle(&Event::Approval {
        tool_call_id: "c1".into(),
        decision: ApprovalDecision::ApprovedAlways,
    }));
    // c3 (asked by the approval map, of c1's command family `ls`) is covered; c2 (asked by
    // its rule for `rm *`) is not.
    assert_eq!(row_of(&s, "c3")[0], ToolCallRow::Whitelisted);
    assert!(row_of(&s, "c2").contains(&ToolCallRow::Ask));
    assert_eq!(ran(&s), ["c1", "c3"]);
    assert_eq!(asked(&s), ["c2"]);
    // The same holds for a later step of the run, which starts with the whitelist.
    let cfg = StepConfig {
        approval: [("bash".to_string(), ApprovalPolicy::Always)].into(),
        tool_rules: vec![ToolRule::ask("bash").argument("command", "rm *")],
        ..StepConfig::default()
    };
    let whitelist = BTreeSet::from(["bash rm".to_string(), "bash pwd".to_string()]);
    let mut p = Process::new(cfg, request(), whitelist);
    let calls = vec![
        ToolCall::from_raw("d1", "bash", &bash("rm z")),
        ToolCall::from_raw("d2", "bash", &bash("pwd")),
    ];
    let s = checked(p.resume(
        AssistantMessage {
            tool_calls: calls,
            ..AssistantMessage::default()
        },
        Vec::new(),
    ));
    assert_eq!(asked(&s), ["d1"]);
    assert_eq!(ran(&s), ["d2"]);
}

#[test]
fn r_tool_3_deny_comes_before_a_doom_loop_question_and_the_cache() {
    // Three identical denied calls: denied each time, never put to a human.
    let cfg = StepConfig {
        doom_loop: Some(DoomLoopPolicy {
            threshold: 3,
            action: LoopAction::Ask,
        }),
        tool_rules: vec![ToolRule::deny("calc")],
        ..StepConfig::default()
    };
    let (p, s) = commit(cfg, &[("calc", "{}"), ("calc", "{}"), ("calc", "{}")]);
    for id in ["c1", "c2", "c3"] {
        assert_eq!(row_of(&s, id), [ToolCallRow::CommitDeniedByRule]);
    }
    assert!(asked(&s).is_empty());
    assert_eq!(p.state(), agentloop_core::chart::ProcessState::Success);
    // A refused doom loop still refuses (and stops the run) before the rules apply.
    let cfg = StepConfig {
        doom_loop: Some(DoomLoopPolicy {
            threshold: 2,
            action: LoopAction::Stop,
        }),
        tool_rules: vec![ToolRule::deny("calc")],
        ..StepConfig::default()
    };
    let (p, s) = commit(cfg, &[("calc", "{}"), ("calc", "{}")]);
    assert_eq!(row_of(&s, "c2"), [ToolCallRow::CommitLoopRefused]);
    assert!(p.stop_requested());
    // A pure tool's cached result is not served for a call a rule denies.
    let mut cache = ToolCache::default();
    let earlier = ToolCall::from_raw("old", "calc", "{}");
    cache.insert(
        &earlier,
        &ToolResult {
            tool_call_id: "old".into(),
            name: "calc".into(),
            content: "4".into(),
            status: ToolStatus::Completed,
        },
    );
    let mut cfg = StepConfig {
        tool_rules: vec![ToolRule::deny("calc")],
        ..StepConfig::default()
    };
    cfg.set_pure("calc", true);
    let mut p = Process::new(cfg, request(), BTreeSet::new()).with_tool_cache(Arc::new(cache));
    let s = checked(p.resume(
        AssistantMessage {
            tool_calls: vec![ToolCall::from_raw("c1", "calc", "{}")],
            ..AssistantMessage::default()
        },
        Vec::new(),
    ));
    assert_eq!(row_of(&s, "c1"), [ToolCallRow::RestoreDeniedByRule]);
    assert_eq!(p.results()[0].status, ToolStatus::Denied);
}

#[test]
fn r_tool_3_invalid_or_unknown_calls_fail_before_the_rules_apply() {
    let cfg = StepConfig {
        tool_rules: vec![ToolRule::deny("*")],
        ..StepConfig::default()
    };
    let (_, s) = commit(
        cfg,
        &[("calc", "{not json"), ("nope", "{}"), ("calc", "{}")],
    );
    assert_eq!(row_of(&s, "c1"), [ToolCallRow::CommitInvalid]);
    assert_eq!(row_of(&s, "c2"), [ToolCallRow::CommitUnknown]);
    assert_eq!(row_of(&s, "c3"), [ToolCallRow::CommitDeniedByRule]);
    assert_eq!(matched(&s), [("c3".into(), 0, RuleAction::Deny, None)]);
}

#[test]
fn r_tool_3_argument_patterns_name_a_field_a_json_pointer_or_all_the_arguments() {
    let call = |args: &str| ToolCall::from_raw("c", "t", args);
    let args = r#"{"command":"git push","opts":{"force":true,"n":3},"paths":["a.rs","b.md"]}"#;
    let c = call(args);
    assert!(ToolRule::deny("t").argument("command", "git *").matches(&c));
    assert!(ToolRule::deny("t")
        .argument("/opts/force", "true")
        .matches(&c));
    assert!(ToolRule::deny("t").argument("/opts/n", "3").matches(&c));
    assert!(ToolRule::deny("t").argument("/paths/1", "*.md").matches(&c));
    assert!(ToolRule::deny("t")
        .argument("opts", "*\"force\":true*")
        .matches(&c));
    assert!(ToolRule::deny("t").argument("", "*git push*").matches(&c));
    // A missing argument does not match, even `*`.
    assert!(!ToolRule::deny("t").argument("missing", "*").matches(&c));
    assert!(!ToolRule::deny("t").argument("/paths/9", "*").matches(&c));
    // Another tool does not match.
    assert!(!ToolRule::deny("u*").matches(&c));
    assert!(ToolRule::deny("*").matches(&c));
}

#[test]
fn r_tool_3_the_command_line_form_of_a_rule() {
    let cases = [
        ("allow:calc", ToolRule::allow("calc")),
        ("ask:*", ToolRule::ask("*")),
        (
            "deny:bash:command=rm *",
            ToolRule::deny("bash").argument("command", "rm *"),
        ),
        (
            "allow@600s:bash:command=cargo *",
            ToolRule::allow("bash")
                .argument("command", "cargo *")
                .timeout_ms(600_000),
        ),
        (
            "ask@250ms:mcp_*:/path/0=a=b:c",
            ToolRule::ask("mcp_*")
                .argument("/path/0", "a=b:c")
                .timeout_ms(250),
        ),
        (
            "deny:*:=*secret*",
            ToolRule::deny("*").argument("", "*secret*"),
        ),
    ];
    for (spec, rule) in cases {
        let parsed: ToolRule = spec.parse().unwrap_or_else(|e| panic!("{spec}: {e}"));
        assert_eq!(parsed, rule, "{spec}");
        assert_eq!(parsed.to_string(), spec);
    }
    for bad in [
        "calc",
        "permit:calc",
        "allow@10:calc",
        "allow@xs:calc",
        "deny:bash:command",
        "allow:",
    ] {
        let err = bad.parse::<ToolRule>().unwrap_err();
        assert!(
            matches!(err, RuleError::Syntax(_) | RuleError::EmptyTool),
            "{bad}: {err:?}"
        );
    }
    let long = format!("deny:{}", "x".repeat(2_000));
    assert_eq!(long.parse::<ToolRule>(), Err(RuleError::PatternTooLong));
}

#[test]
fn r_tool_3_rules_live_in_the_serialized_configuration() {
    // Without rules the field is not written, and a configuration (a trace header) written
    // before rules existed reads as none.
    let plain = serde_json::to_value(RunConfig::default()).unwrap();
    assert!(plain["step"].get("tool_rules").is_none());
    let back: RunConfig = serde_json::from_value(plain).unwrap();
    assert!(back.step.tool_rules.is_empty());
    let mut cfg = RunConfig::default();
    cfg.step.tool_rules = vec![
        ToolRule::deny("bash")
            .argument("command", "rm *")
            .reason("no"),
        ToolRule::allow("calc").timeout_ms(5),
    ];
    let json = serde_json::to_value(&cfg).unwrap();
    assert_eq!(
        json["step"]["tool_rules"],
        serde_json::json!([
            {"tool": "bash", "argument": {"field": "command", "pattern": "rm *"}, "action": "deny", "reason": "no"},
            {"tool": "calc", "action": "allow", "timeout_ms": 5}
        ])
    );
    let back: RunConfig = serde_json::from_value(json).unwrap();
    assert_eq!(back.step.tool_rules, cfg.step.tool_rules);
}

#[test]
fn r_tool_3_a_denied_call_ends_in_the_denied_state() {
    let (p, _) = commit(opencode_rules(), &[("bash", &bash("rm a"))]);
    let results = p.results();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].status, ToolStatus::Denied);
    assert_eq!(
        ToolCallRow::CommitDeniedByRule.target(),
        Some(ToolCallState::Denied)
    );
}

#[test]
fn r_tool_3_actions_read_as_their_command_line_words() {
    let words: Vec<String> = [RuleAction::Allow, RuleAction::Ask, RuleAction::Deny]
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(words, ["allow", "ask", "deny"]);
}

#[test]
fn r_tool_3_patterns_may_be_exactly_as_long_as_the_bound() {
    use agentloop_core::wildcard::MAX_PATTERN_CHARS;
    // Counted in characters, not bytes.
    let at = "é".repeat(MAX_PATTERN_CHARS);
    let over = "é".repeat(MAX_PATTERN_CHARS + 1);
    assert_eq!(ToolRule::deny(at.clone()).validate(), Ok(()));
    assert_eq!(
        ToolRule::deny(over.clone()).validate(),
        Err(RuleError::PatternTooLong)
    );
    assert_eq!(
        ToolRule::deny("bash").argument("command", at).validate(),
        Ok(())
    );
    assert_eq!(
        ToolRule::deny("bash").argument("command", over).validate(),
        Err(RuleError::PatternTooLong)
    );
}

#[test]
fn r_tool_3_a_zero_timeout_reads_in_milliseconds() {
    assert_eq!(
        ToolRule::allow("calc").timeout_ms(0).to_string(),
        "allow@0ms:calc"
    );
    assert_eq!(
        ToolRule::allow("calc").timeout_ms(2_000).to_string(),
        "allow@2s:calc"
    );
}
