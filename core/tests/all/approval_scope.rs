//! R-CTL-4 in the run's machine: `ApprovedAlways` whitelists the call's command family, not
//! the whole tool. With a shell-like tool, approving `git status` always runs the step's other
//! `git` call without asking, but `rm -rf x` (and `git status; rm -rf x`, which runs more than
//! `git`) still asks — in this step and the next.

use crate::steps::{attempt_of, request_of, start};
use agentloop_core::event::ApprovalDecision;
use agentloop_core::message::FinishReason;
use agentloop_core::process::ApprovalPolicy;
use agentloop_core::tool_rules::{approval_scope, command_family};
use agentloop_core::{Effect, Event, MessageDelta, Run, RunConfig, Step, ToolCall, ToolSpec};
use serde_json::json;

fn config(parallel_tools: bool) -> RunConfig {
    let mut cfg = RunConfig {
        tools: [ToolSpec {
            name: "shell".into(),
            description: String::new(),
            parameters: json!({}),
        }]
        .into_iter()
        .collect(),
        ..RunConfig::default()
    };
    cfg.step
        .approval
        .insert("shell".into(), ApprovalPolicy::Always);
    cfg.step.parallel_tools = parallel_tools;
    cfg
}

/// Streams a step of `shell` calls (`(id, command)`) in answer to `step`'s request; returns
/// the `done` step.
fn shell_step(run: &mut Run, step: &Step, calls: &[(&str, &str)]) -> Step {
    let attempt = attempt_of(step);
    let _ = run.handle(Event::StreamOpened {
        attempt: attempt.clone(),
    });
    let mut deltas: Vec<MessageDelta> = calls
        .iter()
        .map(|(id, command)| MessageDelta::ToolCall {
            id: (*id).into(),
            name: "shell".into(),
            arguments: json!({ "command": command }).to_string(),
        })
        .collect();
    deltas.push(MessageDelta::FinishStep {
        finish_reason: Some(FinishReason::ToolCalls),
        raw_finish_reason: None,
        usage: None,
    });
    deltas.push(MessageDelta::Finish);
    for (seq, delta) in deltas.into_iter().enumerate() {
        let _ = run.handle(Event::Delta {
            attempt: attempt.clone(),
            seq: seq as u64,
            delta,
        });
    }
    run.handle(Event::done(attempt))
}

fn asked(step: &Step) -> Vec<String> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::RequestApproval { call } => Some(call.id.clone()),
            _ => None,
        })
        .collect()
}

fn ran(step: &Step) -> Vec<String> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::RunTool { call } => Some(call.id.clone()),
            _ => None,
        })
        .collect()
}

fn finished(run: &mut Run, id: &str) -> Step {
    run.handle(Event::ToolFinished {
        tool_call_id: id.into(),
        status: agentloop_core::ToolStatus::Completed,
        content: "ok".into(),
    })
}

fn approve(run: &mut Run, id: &str, decision: ApprovalDecision) -> Step {
    let s = run.handle(Event::Approval {
        tool_call_id: id.into(),
        decision,
    });
    assert!(!s.unhandled, "{s:?}");
    assert!(s.guard_violations().is_empty(), "{s:?}");
    s
}

/// What a human and the tools do until the step ends: the first call asked is approved
/// "always", later ones once; every call that runs finishes. Returns the ids asked, the ids
/// run, and the step that requested the next model call.
fn settle(run: &mut Run, step: Step) -> (Vec<String>, Vec<String>, Step) {
    let (mut asked_ids, mut ran_ids) = (Vec::new(), Vec::new());
    let mut queue = std::collections::VecDeque::from([step]);
    while let Some(s) = queue.pop_front() {
        if request_of(&s).is_some() {
            return (asked_ids, ran_ids, s);
        }
        for id in asked(&s) {
            let decision = if asked_ids.is_empty() {
                ApprovalDecision::ApprovedAlways
            } else {
                ApprovalDecision::Approved
            };
            asked_ids.push(id.clone());
            queue.push_back(approve(run, &id, decision));
        }
        for id in ran(&s) {
            ran_ids.push(id.clone());
            queue.push_back(finished(run, &id));
        }
    }
    panic!("the step never ended: asked {asked_ids:?}, ran {ran_ids:?}");
}

#[test]
fn r_ctl_4_approved_always_covers_the_command_family_not_the_tool() {
    for parallel in [false, true] {
        let mut run = Run::new(config(parallel));
        let first = start(&mut run, "tidy up");
        let s = shell_step(
            &mut run,
            &first,
            &[
                ("c1", "git status"),
                ("c2", "git status -s"),
                ("c3", "rm -rf x"),
                ("c4", "git status; rm -rf x"),
            ],
        );
        // c1 is approved always: c2 (a `git` call) runs unasked; c3 is not `git`, and c4
        // runs more than `git`: both ask.
        let (asked_ids, mut ran_ids, s) = settle(&mut run, s);
        assert_eq!(asked_ids, ["c1", "c3", "c4"], "parallel {parallel}");
        ran_ids.sort();
        assert_eq!(ran_ids, ["c1", "c2", "c3", "c4"], "parallel {parallel}");
        // The next step: the whitelist holds for the run; `git log` runs, `rm` asks again.
        let s = shell_step(
            &mut run,
            &s,
            &[("c5", "/usr/bin/git log"), ("c6", "rm -rf y")],
        );
        let (asked_ids, mut ran_ids, _) = settle(&mut run, s);
        assert_eq!(asked_ids, ["c6"], "parallel {parallel}");
        ran_ids.sort();
        assert_eq!(ran_ids, ["c5", "c6"], "parallel {parallel}");
    }
}

#[test]
fn r_ctl_4_approved_always_whitelists_waiting_calls_of_the_same_family_only() {
    let mut run = Run::new(config(true));
    let first = start(&mut run, "tidy up");
    let s = shell_step(
        &mut run,
        &first,
        &[("c1", "git status"), ("c2", "rm -rf x"), ("c3", "git diff")],
    );
    assert_eq!(asked(&s), ["c1"]);
    let s = approve(&mut run, "c1", ApprovalDecision::ApprovedAlways);
    let mut runs = ran(&s);
    runs.sort();
    assert_eq!(runs, ["c1", "c3"], "{s:?}");
    assert_eq!(asked(&s), ["c2"], "{s:?}");
}

#[test]
fn r_ctl_4_the_scope_of_always() {
    let call = |name: &str, args| ToolCall {
        id: "x".into(),
        name: name.into(),
        arguments: args,
        invalid_arguments: None,
    };
    let shell = |command: &str| call("shell", json!({ "command": command }));
    for (command, family) in [
        ("git status", "git"),
        ("  git   status -s ", "git"),
        ("/usr/bin/git log", "git"),
        ("rm -rf x", "rm"),
        ("git status; rm -rf x", "git status; rm -rf x"),
        ("git status && rm -rf x", "git status && rm -rf x"),
        ("git status | sh", "git status | sh"),
        ("git log > ~/.bashrc", "git log > ~/.bashrc"),
        ("git $(rm -rf x)", "git $(rm -rf x)"),
        ("git `rm -rf x`", "git `rm -rf x`"),
        ("FOO=1 rm -rf x", "FOO=1 rm -rf x"),
        ("sudo rm -rf x", "sudo rm -rf x"),
        ("sh -c 'rm -rf x'", "sh -c 'rm -rf x'"),
        ("git status\nrm -rf x", "git status\nrm -rf x"),
    ] {
        assert_eq!(command_family(&shell(command)), family, "{command:?}");
        assert_eq!(
            approval_scope(&shell(command)),
            format!("shell {family}"),
            "{command:?}"
        );
    }
    let cmd = call("exec", json!({ "cmd": "ls -la" }));
    assert_eq!(approval_scope(&cmd), "exec ls");
    let calc = call("calculator", json!({ "expression": "1+1" }));
    assert_eq!(command_family(&calc), "calculator");
    assert_eq!(approval_scope(&calc), "calculator");
    let blank = call("shell", json!({ "command": "   " }));
    assert_eq!(approval_scope(&blank), "shell");
}
