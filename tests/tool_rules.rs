//! Tool rules through the runtime (R-TOOL-3): OpenCode's
//! `"shell": {"*": "ask", "git *": "allow", "rm *": "deny"}` as an agent's rules, with a rule's
//! own deadline for a slow tool. The allowed call runs, the asked one goes to the approver,
//! the denied one never runs and the model reads why, the slow one is stopped at its rule's
//! deadline (not the runtime's `tool_ms`); the trace holds the rules and the rows, and replays.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::VecSink;
use agentloop::tools::{Tool, ToolContext, ToolError, ToolSpec};
use agentloop::AgentEvent;
use agentloop::{Message, ToolStatus};
use agentloop_core::process::{RuleAction, ToolRule};
use async_trait::async_trait;
use serde_json::{json, Value};
use support::*;

/// A shell stand-in that records the commands it ran.
struct Shell(Arc<Mutex<Vec<String>>>);

#[async_trait]
impl Tool for Shell {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "shell".into(),
            description: "runs a command".into(),
            parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
        }
    }
    async fn call(&self, _ctx: ToolContext, args: Value) -> Result<String, ToolError> {
        let command = args["command"].as_str().unwrap_or_default().to_string();
        self.0.lock().unwrap().push(command.clone());
        Ok(format!("ran {command}"))
    }
}

const SCRIPT: &str = r#"{"turns": [
    {"tool_calls": [
        {"id": "s1", "name": "shell", "arguments": {"command": "git status"}},
        {"id": "s2", "name": "shell", "arguments": {"command": "rm -rf /"}},
        {"id": "s3", "name": "shell", "arguments": {"command": "ls"}},
        {"id": "z1", "name": "sleepy", "arguments": {}}
    ]},
    {"text": "done"}
]}"#;

fn rules() -> Vec<ToolRule> {
    vec![
        ToolRule::ask("shell"),
        ToolRule::allow("shell").argument("command", "git *"),
        ToolRule::deny("shell")
            .argument("command", "rm *")
            .reason("deleting files is not allowed here"),
        ToolRule::allow("sleep?").timeout_ms(200),
    ]
}

/// The script's agent with `rules` and the runtime's per-tool timeout `tool_ms`; the commands
/// the shell ran and the events.
fn agent_with(
    rules: Vec<ToolRule>,
    tool_ms: u64,
) -> (agentloop::runtime::Agent, Arc<Mutex<Vec<String>>>, VecSink) {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let mut registry = agentloop::tools::ToolRegistry::new();
    registry.insert(Arc::new(Shell(ran.clone())));
    registry.insert(Arc::new(SleepTool::new("sleepy", 60_000)));
    let sink = VecSink::default();
    let agent = builder(ScriptedModel::from_json_str(SCRIPT, "inline").expect("script"))
        .tools(registry)
        .sink(Arc::new(sink.clone()))
        .tool_timeout_ms(tool_ms)
        .tool_rules(rules)
        .build();
    (agent, ran, sink)
}

fn agent() -> (agentloop::runtime::Agent, Arc<Mutex<Vec<String>>>, VecSink) {
    agent_with(rules(), 10_000)
}

fn result_of(messages: &[Message], id: &str) -> (ToolStatus, String) {
    messages
        .iter()
        .find_map(|m| match m {
            Message::Tool(r) if r.tool_call_id == id => Some((r.status, r.content.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {id}"))
}

#[tokio::test(start_paused = true)]
async fn r_tool_3_rules_allow_ask_deny_and_time_out_calls_by_argument_pattern() {
    let (agent, ran, sink) = agent();
    let started = tokio::time::Instant::now();
    let out = agent
        .run_with("s", vec![Message::user("go")], None, true)
        .await
        .expect("run");
    let elapsed = started.elapsed();
    assert_eq!(out.result.final_text(), Some("done"));
    // git ran by rule 1, ls after the (auto-)approval rule 0 asked for; rm never ran.
    assert_eq!(*ran.lock().unwrap(), ["git status", "ls"]);
    let messages = &out.result.messages;
    assert_eq!(
        result_of(messages, "s2"),
        (
            ToolStatus::Denied,
            "denied by rule 2 (deny:shell:command=rm *): deleting files is not allowed here"
                .to_string()
        )
    );
    assert_eq!(result_of(messages, "s3").0, ToolStatus::Completed);
    // The slow tool was stopped at its rule's 200 ms, not the runtime's 10 s.
    assert_eq!(
        result_of(messages, "z1"),
        (ToolStatus::Error, "tool timed out after 200 ms".to_string())
    );
    assert!(
        elapsed >= Duration::from_millis(200) && elapsed < Duration::from_millis(1_000),
        "{elapsed:?}"
    );

    let events = sink.events();
    let decided: Vec<(String, usize, RuleAction, Option<u64>)> = events
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::ToolRuleMatched {
                tool_call_id,
                rule,
                action,
                timeout_ms,
                ..
            } => Some((tool_call_id.clone(), *rule, *action, *timeout_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(
        decided,
        [
            ("s1".to_string(), 1, RuleAction::Allow, Some(10_000)),
            ("s2".to_string(), 2, RuleAction::Deny, None),
            ("s3".to_string(), 0, RuleAction::Ask, Some(10_000)),
            ("z1".to_string(), 3, RuleAction::Allow, Some(200)),
        ]
    );
    let asked: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::ApprovalRequired { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(asked, ["s3"]);

    // The trace's header holds the rules; the decisions are rows; it replays exactly.
    let trace = out.trace.expect("a trace");
    assert_eq!(trace.header.config.step.tool_rules, rules());
    let text = trace.to_jsonl();
    assert!(text.contains("\"row\":\"CommitDeniedByRule\""), "{text}");
    assert!(text.contains("\"type\":\"tool_rule_matched\""));
    assert_eq!(
        agentloop::trace::replay(&trace),
        None,
        "replays without divergence"
    );
}

#[tokio::test(start_paused = true)]
async fn r_tool_3_an_agent_without_rules_decides_as_before() {
    // The same script without rules: every call runs (no approval map), with the runtime's
    // tool_ms; no rule events; the trace header has no rules.
    let (agent, ran, sink) = agent_with(Vec::new(), 300);
    let out = agent
        .run_with("s", vec![Message::user("go")], None, true)
        .await
        .expect("run");
    assert_eq!(*ran.lock().unwrap(), ["git status", "rm -rf /", "ls"]);
    assert_eq!(
        result_of(&out.result.messages, "z1"),
        (ToolStatus::Error, "tool timed out after 300 ms".to_string())
    );
    assert!(!sink
        .events()
        .iter()
        .any(|e| matches!(e.event, AgentEvent::ToolRuleMatched { .. })));
    let trace = out.trace.expect("a trace");
    assert!(!trace
        .to_jsonl()
        .lines()
        .next()
        .unwrap()
        .contains("tool_rules"));
    assert_eq!(agentloop::trace::replay(&trace), None);
}

/// A rule built with the builder methods reads back what it was given (its fields are private).
#[test]
fn a_rule_reads_back_its_parts() {
    let [ask, allow, deny, sleep] = rules().try_into().expect("four rules");
    assert_eq!(ask.argument_pattern(), None);
    assert_eq!(allow.argument_pattern(), Some(("command", "git *")));
    assert_eq!(
        deny.denial_reason(),
        Some("deleting files is not allowed here")
    );
    assert_eq!(allow.denial_reason(), None);
    assert_eq!(sleep.deadline_ms(), Some(200));
    assert_eq!(ask.deadline_ms(), None);
    assert_eq!(sleep.tool(), "sleep?");
}
