//! R-CTL-4 through `Session`: "approve always" on a shell-like tool's `git status` trusts the
//! `git` command family for the rest of the session — `git status -s`, `/usr/bin/git log`, a
//! later run's `git diff` run unasked — but not the tool: `rm -rf x` still asks, and so does
//! `git status && rm -rf x`, which runs more than `git`.

mod support;

use std::sync::{Arc, Mutex};

use agentloop::session::{Session, SessionConfig};
use agentloop::tools::{Tool, ToolContext, ToolError, ToolSpec};
use agentloop::AgentEvent;
use agentloop_core::process::ApprovalPolicy;
use async_trait::async_trait;
use serde_json::{json, Value};
use support::*;

/// A shell-like tool (arguments `{"command": …}`) that records the commands it was asked to
/// run instead of running them.
struct Shell(Arc<Mutex<Vec<String>>>);

#[async_trait]
impl Tool for Shell {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "shell".into(),
            description: "runs a shell command".into(),
            parameters: json!({
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"]
            }),
        }
    }
    async fn call(&self, _ctx: ToolContext, args: Value) -> Result<String, ToolError> {
        let command = args["command"].as_str().unwrap_or_default().to_string();
        if let Ok(mut ran) = self.0.lock() {
            ran.push(command.clone());
        }
        Ok(format!("ran {command}"))
    }
}

fn shell_turn(id: &str, command: &str) -> Value {
    json!({"tool_calls": [{"id": id, "name": "shell", "arguments": {"command": command}}]})
}

/// The ids `approval_required` named, in order.
fn asked(s: &Session) -> Vec<String> {
    history(s)
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::ApprovalRequired { tool_call_id, .. } => Some(tool_call_id.clone()),
            _ => None,
        })
        .collect()
}

/// The calls waiting for a human once an `approval_required` leads to one (the machine
/// announces it just before the session's approver parks the call, or approves it at once
/// when the session's whitelist covers it).
async fn next_asked(s: &Session, sub: &mut agentloop::session::Subscription) -> Vec<String> {
    loop {
        // Virtual time: an idle session lets the timeout fire at once instead of hanging.
        tokio::time::timeout(
            std::time::Duration::from_secs(600),
            wait_for(sub, "approval_required"),
        )
        .await
        .expect("another call waits for a human");
        for _ in 0..50 {
            let pending = s.pending_approvals();
            if !pending.is_empty() {
                return pending;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn r_ctl_4_approve_always_on_git_status_trusts_git_not_the_shell_tool() {
    let script = json!({"turns": [
        shell_turn("c1", "git status"),
        shell_turn("c2", "git status -s"),
        shell_turn("c3", "/usr/bin/git log"),
        shell_turn("c4", "rm -rf x"),
        shell_turn("c5", "git status && rm -rf x"),
        {"text": "first run done"},
        shell_turn("d1", "git diff"),
        shell_turn("d2", "rm -rf y"),
        {"text": "second run done"}
    ]});
    let ran = Arc::new(Mutex::new(Vec::new()));
    let agent = builder(Slow::new(&script.to_string()))
        .tool(Arc::new(Shell(ran.clone())))
        .configure(|c| {
            c.step
                .approval
                .insert("shell".into(), ApprovalPolicy::Always);
        })
        // A rejection lets the run go on (seed 001 `auto_resume`).
        .auto_resume(true)
        .build();
    let s = Session::spawn(agent, SessionConfig::new("s").event_buffer_size(4096));
    let mut sub = s.subscribe(None, None);

    s.prompt("tidy up").await.expect("started");
    assert_eq!(next_asked(&s, &mut sub).await, ["c1"]);
    s.approve("c1", true).expect("c1 approved always");
    assert_eq!(next_asked(&s, &mut sub).await, ["c4"]);
    s.reject("c4", "no").expect("c4 rejected");
    assert_eq!(next_asked(&s, &mut sub).await, ["c5"]);
    s.reject("c5", "no").expect("c5 rejected");
    s.wait_idle().await;
    assert_eq!(
        s.last_result()
            .and_then(|r| r.final_text().map(String::from)),
        Some("first run done".into())
    );

    // A later run of the session: `git diff` is covered, `rm -rf y` asks.
    s.prompt("more").await.expect("started");
    assert_eq!(next_asked(&s, &mut sub).await, ["d2"]);
    s.reject("d2", "no").expect("d2 rejected");
    s.wait_idle().await;

    // Within a run the machine knows the scope and does not even ask; nor does a later run:
    // the session machine's whitelist (row `approved_always`) seeds every run it starts, so
    // `d1` is not asked about either.
    assert_eq!(asked(&s), ["c1", "c4", "c5", "d2"]);
    assert_eq!(
        *ran.lock().expect("ran"),
        [
            "git status",
            "git status -s",
            "/usr/bin/git log",
            "git diff"
        ]
    );
    let always: Vec<(String, String)> = history(&s)
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::ToolApprovedAlways {
                tool,
                command_family,
            } => Some((tool.clone(), command_family.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(always, [("shell".to_string(), "git".to_string())]);
}

/// A hook that sends every call to a human (`ToolDecision::Ask`).
struct AskEveryCall;

#[async_trait]
impl agentloop::hooks::Hooks for AskEveryCall {
    fn before_tool(&self, _call: &agentloop::ToolCall) -> agentloop::hooks::ToolDecision {
        agentloop::hooks::ToolDecision::Ask
    }
}

/// R-CTL-4: a call a hook puts to a human is covered by an earlier "approve always" of its
/// scope like a rule's question is — later in the same run and in the session's next run —
/// while a call of another scope still asks.
#[tokio::test(start_paused = true)]
async fn r_ctl_4_approve_always_also_answers_a_hooks_question() {
    let script = json!({"turns": [
        shell_turn("c1", "git status"),
        shell_turn("c2", "git log"),
        {"text": "first run done"},
        shell_turn("d1", "git diff"),
        shell_turn("d2", "rm -rf y"),
        {"text": "second run done"}
    ]});
    let ran = Arc::new(Mutex::new(Vec::new()));
    let agent = builder(Slow::new(&script.to_string()))
        .tool(Arc::new(Shell(ran.clone())))
        .hooks(Arc::new(AskEveryCall))
        .auto_resume(true)
        .build();
    let s = Session::spawn(agent, SessionConfig::new("s").event_buffer_size(4096));
    let mut sub = s.subscribe(None, None);

    s.prompt("look").await.expect("started");
    assert_eq!(next_asked(&s, &mut sub).await, ["c1"]);
    s.approve("c1", true).expect("c1 approved always");
    s.wait_idle().await;
    s.prompt("more").await.expect("started");
    assert_eq!(next_asked(&s, &mut sub).await, ["d2"]);
    s.reject("d2", "no").expect("d2 rejected");
    s.wait_idle().await;

    assert_eq!(asked(&s), ["c1", "d2"]);
    assert_eq!(
        *ran.lock().expect("ran"),
        ["git status", "git log", "git diff"]
    );
}
