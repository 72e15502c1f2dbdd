//! Session control (SPEC §5): one test per R-CTL requirement and status, on virtual time with a
//! slowed-down scripted model. Event sequences are snapshotted with `insta` (no timestamps).

mod support;

use std::sync::Arc;

use agentloop::session::{
    command_family, Ack, KillTools, Session, SessionConfig, SessionError, Status,
};
use agentloop::ToolCall;
use agentloop::{AgentEvent, Outcome, SteeringStatus};
use agentloop::{Message, ToolStatus};
use agentloop_core::process::ApprovalPolicy;
use serde_json::json;
use support::*;

const TWO_TEXTS: &str = r#"{"turns": [{"text": "first answer"}, {"text": "second answer"}]}"#;

fn tool_then_text(tool: &str) -> String {
    format!(
        r#"{{"turns": [{{"tool_calls": [{{"name": "{tool}", "arguments": {{}}}}]}}, {{"text": "after tool"}}, {{"text": "third"}}, {{"text": "fourth"}}]}}"#
    )
}

fn tool_result(s: &Session) -> Vec<(ToolStatus, String)> {
    s.last_result()
        .expect("a result")
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.status, r.content.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn r_ctl_1_prompt_idle_starts_busy_is_queued_and_consumed() {
    let s = session(builder(Slow::new(TWO_TEXTS)).build());
    assert_eq!(s.status(), Status::Idle);
    assert_eq!(s.prompt("a").await, Ok(Ack::Started));
    assert_eq!(s.status(), Status::Running);
    assert_eq!(s.prompt("b").await, Ok(Ack::Queued(1)));
    s.wait_idle().await;
    assert_eq!(s.status(), Status::Idle);
    let ev = history(&s);
    assert_eq!(
        count(&ev, "run_end"),
        2,
        "the queued prompt ran after the first"
    );
    assert_eq!(
        s.last_result()
            .and_then(|r| r.final_text().map(String::from)),
        Some("second answer".into())
    );
    insta::assert_snapshot!(transcript(&ev));
}

#[tokio::test(start_paused = true)]
async fn r_ctl_2_steer_when_idle_acts_like_prompt() {
    let s = session(builder(Slow::new(TWO_TEXTS)).build());
    assert_eq!(s.steer("go").await, Ok(Ack::Started));
    s.wait_idle().await;
    let ev = history(&s);
    assert!(ev.iter().any(|e| matches!(
        &e.event,
        AgentEvent::SteeringReceived {
            status: SteeringStatus::StartedRun,
            ..
        }
    )));
    assert_eq!(count(&ev, "run_end"), 1);
}

#[tokio::test(start_paused = true)]
async fn r_ctl_2_steering_queue_full_is_rejected() {
    let agent = builder(Slow::new(&tool_then_text("sleepy")))
        .tools({
            let mut r = agentloop::tools::ToolRegistry::new();
            r.insert(Arc::new(SleepTool::new("sleepy", 1_000)));
            r
        })
        .build();
    let s = session(agent);
    let mut sub = s.subscribe(None, None);
    s.prompt("work").await.expect("started");
    wait_for(&mut sub, "tool_start").await;
    assert_eq!(s.status(), Status::ExecutingTools);
    for i in 1..=3 {
        assert!(matches!(
            s.steer(format!("steer {i}")).await,
            Ok(Ack::SteerQueued(_))
        ));
    }
    assert_eq!(
        s.steer("one too many").await,
        Err(SessionError::QueueFull { capacity: 3 })
    );
    s.wait_idle().await;
    let ev = history(&s);
    let rejected = ev
        .iter()
        .filter(|e| matches!(
            &e.event,
            AgentEvent::SteeringReceived { status: SteeringStatus::RejectedFull, text, .. } if text == "one too many"
        ))
        .count();
    assert_eq!(rejected, 1);
    // The accepted messages reached the model.
    let seen = s
        .last_result()
        .expect("result")
        .messages
        .iter()
        .any(|m| matches!(m, Message::User { content, .. } if content.contains("steer 3")));
    assert!(seen, "steering reached the model");
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_when_idle_is_a_noop_with_event() {
    let s = session(builder(Slow::new(TWO_TEXTS)).build());
    let mut sub = s.subscribe(None, Some(vec!["agent_abort".into()]));
    assert_eq!(
        s.abort("nothing to do", KillTools::Killable, false).await,
        Ok(Ack::Idle)
    );
    let e = wait_for(&mut sub, "agent_abort").await;
    assert!(
        e.run_id.is_empty()
            && matches!(&e.event, AgentEvent::AgentAbort { reason } if reason == "nothing to do")
    );
    assert_eq!(s.status(), Status::Idle);
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_while_running_before_first_chunk() {
    let s = session(builder(Slow::new(TWO_TEXTS)).build());
    let mut sub = s.subscribe(None, None);
    s.prompt("a").await.expect("started");
    wait_for(&mut sub, "request_start").await;
    assert_eq!(s.status(), Status::Running);
    assert_eq!(
        s.abort("stop", KillTools::Killable, false).await,
        Ok(Ack::Aborting)
    );
    wait_for(&mut sub, "agent_abort").await;
    s.wait_idle().await;
    assert_eq!(s.last_result().map(|r| r.outcome), Some(Outcome::Aborted));
    insta::assert_snapshot!(transcript(&history(&s)));
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_while_streaming() {
    let long =
        r#"{"turns": [{"text": "a long story that goes on and on and on", "chunk_chars": 2}]}"#;
    let s = session(builder(Slow::new(long)).build());
    let mut sub = s.subscribe(None, None);
    s.prompt("tell me").await.expect("started");
    wait_for(&mut sub, "text_delta").await;
    assert_eq!(s.status(), Status::Streaming);
    s.abort("enough", KillTools::Killable, false)
        .await
        .expect("abort");
    wait_for(&mut sub, "agent_abort").await;
    s.wait_idle().await;
    let r = s.last_result().expect("result");
    assert_eq!(r.outcome, Outcome::Aborted);
    assert!(
        !r.messages
            .iter()
            .any(|m| matches!(m, Message::Assistant(_))),
        "a partial message is never committed"
    );
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_while_executing_tools_kills_killable_tools() {
    let agent = builder(Slow::new(&tool_then_text("sleepy")))
        .tools({
            let mut r = agentloop::tools::ToolRegistry::new();
            r.insert(Arc::new(SleepTool::new("sleepy", 60_000)));
            r
        })
        .build();
    let s = session(agent);
    let mut sub = s.subscribe(None, None);
    let started = tokio::time::Instant::now();
    s.prompt("work").await.expect("started");
    wait_for(&mut sub, "tool_start").await;
    assert_eq!(s.status(), Status::ExecutingTools);
    s.abort("user abort", KillTools::Killable, false)
        .await
        .expect("abort");
    s.wait_idle().await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "the tool was killed"
    );
    let ev = history(&s);
    assert_eq!(count(&ev, "tool_killed"), 1);
    assert_eq!(count(&ev, "agent_abort"), 1);
    // Every call of the committed message has exactly one result (R-IDEM-7).
    assert_eq!(
        tool_result(&s),
        vec![(ToolStatus::Aborted, "aborted".into())]
    );
    insta::assert_snapshot!(transcript(&ev));
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_with_clear_queue_drops_queued_prompts() {
    let s = session(builder(Slow::new(TWO_TEXTS)).build());
    s.prompt("a").await.expect("started");
    s.prompt("b").await.expect("queued");
    s.prompt("c").await.expect("queued");
    s.abort("start over", KillTools::Killable, true)
        .await
        .expect("abort");
    s.wait_idle().await;
    let ev = history(&s);
    let dropped: Vec<String> = ev
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::PromptDropped { text } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(dropped, vec!["b", "c"]);
    assert_eq!(count(&ev, "run_start"), 1, "dropped prompts never run");
    insta::assert_snapshot!(transcript(&ev));
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_without_clear_queue_keeps_queue() {
    let s = session(builder(Slow::new(TWO_TEXTS)).build());
    s.prompt("a").await.expect("started");
    s.prompt("b").await.expect("queued");
    s.abort("skip this one", KillTools::Killable, false)
        .await
        .expect("abort");
    s.wait_idle().await;
    let ev = history(&s);
    assert_eq!(count(&ev, "run_start"), 2);
    assert_eq!(count(&ev, "prompt_dropped"), 0);
}

fn approval_session(config: SessionConfig) -> Session {
    approval_session_resuming(config, false)
}

/// [`approval_session`] with `auto_resume` set as given.
fn approval_session_resuming(config: SessionConfig, auto_resume: bool) -> Session {
    let agent = builder(Slow::new(
        r#"{"turns": [
            {"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "2+3"}}]},
            {"text": "The answer is {{last_tool_result}}."},
            {"tool_calls": [{"id": "c2", "name": "calculator", "arguments": {"expression": "1+1"}}]},
            {"text": "Again {{last_tool_result}}."}
        ]}"#,
    ))
    .configure(|c| {
        c.step
            .approval
            .insert("calculator".into(), ApprovalPolicy::Always);
    })
    .auto_resume(auto_resume)
    .build();
    Session::spawn(agent, config.event_buffer_size(1024))
}

#[tokio::test(start_paused = true)]
async fn r_ctl_4_approve_and_double_or_unknown_answers_are_harmless() {
    let s = approval_session(SessionConfig::new("s"));
    let mut sub = s.subscribe(None, None);
    s.prompt("2+3?").await.expect("started");
    wait_for(&mut sub, "approval_required").await;
    assert_eq!(s.status(), Status::AwaitingApproval);
    assert_eq!(s.pending_approvals(), vec!["c1".to_string()]);
    assert!(matches!(
        s.approve("nope", false),
        Err(SessionError::Approval(_))
    ));
    s.approve("c1", false).expect("approved");
    assert!(
        matches!(s.approve("c1", false), Err(SessionError::Approval(_))),
        "a second answer is an error for the caller, nothing else"
    );
    s.wait_idle().await;
    assert_eq!(tool_result(&s), vec![(ToolStatus::Completed, "5".into())]);
    assert_eq!(
        s.last_result()
            .and_then(|r| r.final_text().map(String::from)),
        Some("The answer is 5.".into())
    );
    insta::assert_snapshot!(transcript(&history(&s)));
}

/// An approval session (auto_resume as given) whose one call was approved or rejected,
/// after its run ended.
async fn answered(auto_resume: bool, approve: bool) -> Session {
    let s = approval_session_resuming(SessionConfig::new("s"), auto_resume);
    let mut sub = s.subscribe(None, None);
    s.prompt("2+3?").await.expect("started");
    wait_for(&mut sub, "approval_required").await;
    if approve {
        s.approve("c1", false).expect("approved");
    } else {
        s.reject("c1", "not now").expect("rejected");
    }
    s.wait_idle().await;
    s
}

/// R-CTL-4: a rejected call gets a denied result, and by default the run stops
/// there with reason `tool_rejected` (no model call after it, no `agent_resumed`).
#[tokio::test(start_paused = true)]
async fn r_ctl_4_seed_001_reject_gives_a_denied_result_and_stops_the_run() {
    let s = answered(false, false).await;
    let results = tool_result(&s);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].0, ToolStatus::Denied);
    assert!(results[0].1.contains("not now"));
    let result = s.last_result().expect("a result");
    assert_eq!(result.reason, "tool_rejected");
    assert_eq!(result.outcome, Outcome::Completed);
    let answers = result
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Assistant(_)))
        .count();
    assert_eq!(answers, 1, "no model call after the rejection");
    let ev = history(&s);
    assert!(ev.iter().any(|e| matches!(
        &e.event,
        AgentEvent::RunEnd { reason, .. } if reason == "tool_rejected"
    )));
    assert!(!ev
        .iter()
        .any(|e| matches!(&e.event, AgentEvent::AgentResumed { .. })));
}

#[tokio::test(start_paused = true)]
async fn r_ctl_4_modify_runs_with_new_arguments() {
    let s = approval_session(SessionConfig::new("s"));
    let mut sub = s.subscribe(None, None);
    s.prompt("2+3?").await.expect("started");
    wait_for(&mut sub, "approval_required").await;
    s.modify("c1", json!({"expression": "6*7"}))
        .expect("modified");
    s.wait_idle().await;
    assert_eq!(tool_result(&s), vec![(ToolStatus::Completed, "42".into())]);
}

#[tokio::test(start_paused = true)]
async fn r_ctl_4_approval_timeout_counts_as_reject() {
    let s = approval_session(SessionConfig::new("s").approval_timeout_ms(Some(5_000)));
    s.prompt("2+3?").await.expect("started");
    s.wait_idle().await;
    let results = tool_result(&s);
    assert_eq!(results[0].0, ToolStatus::Denied);
    assert!(results[0].1.contains("5000 ms"), "{results:?}");
    assert_eq!(s.last_result().expect("a result").reason, "tool_rejected");
    let ev = history(&s);
    assert!(ev.iter().any(|e| matches!(
        &e.event,
        AgentEvent::ApprovalResolved {
            status: agentloop::ApprovalStatus::Timeout,
            ..
        }
    )));
    assert!(!ev
        .iter()
        .any(|e| matches!(&e.event, AgentEvent::AgentResumed { .. })));
    assert!(s.pending_approvals().is_empty());
    // With auto_resume the run goes on after the timeout, and says so.
    let s = approval_session_resuming(
        SessionConfig::new("s").approval_timeout_ms(Some(5_000)),
        true,
    );
    s.prompt("2+3?").await.expect("started");
    s.wait_idle().await;
    assert_eq!(s.last_result().expect("a result").reason, "final_answer");
    assert!(history(&s).iter().any(|e| matches!(&e.event, AgentEvent::AgentResumed { trigger } if trigger == "tool_approval_timeout")));
}

/// The position in `ev` of the first event matching `f`.
fn position(ev: &[agentloop::EventEnvelope], f: impl Fn(&AgentEvent) -> bool) -> usize {
    ev.iter()
        .position(|e| f(&e.event))
        .unwrap_or_else(|| panic!("missing event in {:?}", ev))
}

#[tokio::test(start_paused = true)]
async fn seed_001_agent_resumed_precedes_the_resumed_runs_events_in_20_of_20_runs() {
    for i in 0..20 {
        let approve = i % 2 == 0;
        let s = answered(true, approve).await;
        let ev = history(&s);
        let trigger = if approve {
            "tool_approved"
        } else {
            "tool_rejected"
        };
        let resolved = position(&ev, |e| matches!(e, AgentEvent::ApprovalResolved { .. }));
        let resumed = position(
            &ev,
            |e| matches!(e, AgentEvent::AgentResumed { trigger: t } if t == trigger),
        );
        let end = position(&ev, |e| matches!(e, AgentEvent::RunEnd { .. }));
        assert_eq!(resumed, resolved + 1, "run {i}: {ev:?}");
        assert!(resumed < end, "run {i}");
        // What the resumed run did comes after the announcement: the call (when approved)
        // and the next model request.
        if approve {
            let started = position(&ev, |e| matches!(e, AgentEvent::ToolStart { .. }));
            assert!(resumed < started, "run {i}");
        }
        let next_request = position(&ev, |e| {
            matches!(
                e,
                AgentEvent::RequestStart {
                    model_call_index: 2,
                    ..
                }
            )
        });
        assert!(resumed < next_request, "run {i}");
        assert_eq!(
            s.last_result().expect("a result").reason,
            "final_answer",
            "run {i}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn r_ctl_4_approve_always_whitelists_tool_for_the_session() {
    let s = approval_session(SessionConfig::new("s"));
    let mut sub = s.subscribe(None, None);
    s.prompt("2+3?").await.expect("started");
    wait_for(&mut sub, "approval_required").await;
    s.approve("c1", true).expect("approved");
    s.wait_idle().await;
    // A later run calls the same tool: approved without asking a human.
    s.prompt("1+1?").await.expect("started");
    s.wait_idle().await;
    assert_eq!(
        tool_result(&s).last(),
        Some(&(ToolStatus::Completed, "2".into()))
    );
    let ev = history(&s);
    assert!(ev.iter().any(|e| matches!(&e.event, AgentEvent::ToolApprovedAlways { tool, command_family } if tool == "calculator" && command_family == "calculator")));
}

#[test]
fn r_ctl_4_command_family_of_shell_calls() {
    let call = |args| ToolCall {
        id: "x".into(),
        name: "shell".into(),
        arguments: args,
        invalid_arguments: None,
    };
    assert_eq!(
        command_family(&call(json!({"command": "git push -f"}))),
        "git"
    );
    assert_eq!(
        command_family(&call(json!({"command": "/usr/bin/ls -la"}))),
        "ls"
    );
    assert_eq!(command_family(&call(json!({"path": "x"}))), "shell");
}

#[tokio::test(start_paused = true)]
async fn r_ctl_5_switch_model() {
    let agent = builder(Slow::new(TWO_TEXTS))
        .extra_model(
            "other",
            Arc::new(
                Slow::new(r#"{"turns": [{"text": "from other"}, {"text": "other again"}]}"#)
                    .named("other"),
            ),
        )
        .build();
    let s = session(agent);
    assert!(matches!(
        s.switch_model("missing").await,
        Err(SessionError::UnknownModel(..))
    ));
    assert_eq!(
        s.switch_model("scripted").await,
        Ok(false),
        "same model: no-op"
    );
    assert_eq!(s.switch_model("other").await, Ok(true));
    assert_eq!(s.switch_model("other").await, Ok(false));
    s.prompt("hi").await.expect("started");
    s.wait_idle().await;
    let ev = history(&s);
    assert_eq!(
        count(&ev, "model_switched"),
        1,
        "same-model switches emit nothing"
    );
    assert!(ev
        .iter()
        .any(|e| matches!(&e.event, AgentEvent::RequestStart { model, .. } if model == "other")));
    assert_eq!(
        s.last_result()
            .and_then(|r| r.final_text().map(String::from)),
        Some("from other".into())
    );
}

#[tokio::test(start_paused = true)]
async fn r_ctl_5_switch_model_while_busy_applies_later() {
    let agent = builder(Slow::new(TWO_TEXTS))
        .extra_model(
            "other",
            Arc::new(
                Slow::new(r#"{"turns": [{"text": "from other"}, {"text": "other again"}]}"#)
                    .named("other"),
            ),
        )
        .build();
    let s = session(agent);
    let mut sub = s.subscribe(None, None);
    s.prompt("hi").await.expect("started");
    wait_for(&mut sub, "request_start").await;
    assert_eq!(s.switch_model("other").await, Ok(true));
    s.prompt("again").await.expect("queued");
    s.wait_idle().await;
    let models: Vec<String> = history(&s)
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::RequestStart { model, .. } => Some(model.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        models,
        vec!["scripted", "other"],
        "the running step keeps its model"
    );
}

#[tokio::test(start_paused = true)]
async fn r_ctl_6_detached_tool_is_unknown_and_attached_tool_is_offered() {
    let s = session(
        builder(Slow::new(
            r#"{"turns": [
                {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]},
                {"text": "ok"},
                {"tool_calls": [{"name": "sleepy"}]},
                {"text": "slept"}
            ]}"#,
        ))
        .build(),
    );
    s.detach_tool("calculator").await.expect("detached");
    assert_eq!(
        s.detach_tool("calculator").await,
        Err(SessionError::UnknownTool("calculator".into()))
    );
    s.prompt("1+1?").await.expect("started");
    s.wait_idle().await;
    let results = tool_result(&s);
    assert_eq!(results[0].0, ToolStatus::Error);
    assert!(results[0].1.contains("unknown tool"));
    assert_eq!(count(&history(&s), "tool_call_unknown"), 1);

    s.attach_tool(Arc::new(SleepTool::new("sleepy", 10)))
        .await
        .expect("attached");
    s.prompt("sleep").await.expect("started");
    s.wait_idle().await;
    assert_eq!(
        tool_result(&s).last(),
        Some(&(ToolStatus::Completed, "done".into()))
    );
    let ev = history(&s);
    assert_eq!(count(&ev, "tool_detached"), 1);
    assert_eq!(count(&ev, "tool_attached"), 1);
}

fn registry(tools: Vec<SleepTool>) -> agentloop::tools::ToolRegistry {
    let mut r = agentloop::tools::ToolRegistry::new();
    for t in tools {
        r.insert(Arc::new(t));
    }
    r
}

#[tokio::test(start_paused = true)]
async fn r_ctl_2_steering_is_merged_at_the_next_step() {
    let agent = builder(Slow::new(&tool_then_text("sleepy")))
        .tools(registry(vec![SleepTool::new("sleepy", 1_000)]))
        .build();
    let s = session(agent);
    let mut sub = s.subscribe(None, None);
    s.prompt("work").await.expect("started");
    wait_for(&mut sub, "tool_start").await;
    s.steer("also check the logs").await.expect("queued");
    s.wait_idle().await;
    let ev = history(&s);
    assert_eq!(count(&ev, "run_start"), 1, "steering joined the same run");
    assert_eq!(count(&ev, "steering_applied"), 1);
    // deliver_at_boundary: the tool batch finished normally.
    assert_eq!(
        tool_result(&s),
        vec![(ToolStatus::Completed, "done".into())]
    );
    let names = names(&ev);
    let applied = names.iter().position(|n| n == "steering_applied");
    let second_request = names.iter().rposition(|n| n == "request_start");
    assert!(
        applied < second_request,
        "merged before the next model call"
    );
    insta::assert_snapshot!(transcript(&ev));
}

#[tokio::test(start_paused = true)]
async fn r_ctl_2_skip_remaining_policy_skips_the_tool_batch() {
    let agent = builder(Slow::new(&tool_then_text("sleepy")))
        .tools(registry(vec![SleepTool::new("sleepy", 60_000)]))
        .configure(|c| c.steering = agentloop_core::react::SteeringPolicy::SkipRemaining)
        .build();
    let s = session(agent);
    let mut sub = s.subscribe(None, None);
    let started = tokio::time::Instant::now();
    s.prompt("work").await.expect("started");
    wait_for(&mut sub, "tool_start").await;
    s.steer("stop that, do this").await.expect("queued");
    s.wait_idle().await;
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    let results = tool_result(&s);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].0, ToolStatus::Skipped);
    assert_eq!(count(&history(&s), "steering_applied"), 1);
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_keeps_results_of_immune_tools() {
    let script = r#"{"turns": [
        {"tool_calls": [{"id": "k", "name": "sleepy"}, {"id": "i", "name": "immune"}]},
        {"text": "unused"}
    ]}"#;
    let agent = builder(Slow::new(script))
        .tools(registry(vec![
            SleepTool::new("sleepy", 60_000),
            SleepTool::new("immune", 500)
                .immune()
                .returning("immune done".into()),
        ]))
        .build();
    let s = session(agent);
    let mut sub = s.subscribe(None, None);
    s.prompt("work").await.expect("started");
    wait_for(&mut sub, "tool_start").await;
    wait_for(&mut sub, "tool_start").await;
    s.abort("stop", KillTools::Killable, false)
        .await
        .expect("abort");
    s.wait_idle().await;
    let ev = history(&s);
    let abort_at = ev.iter().position(|e| e.event.type_name() == "agent_abort");
    let immune_end = ev.iter().position(
        |e| matches!(&e.event, AgentEvent::ToolEnd { tool_call_id, .. } if tool_call_id == "i"),
    );
    assert!(
        abort_at < immune_end,
        "agent_abort is emitted at once, before draining"
    );
    assert_eq!(
        tool_result(&s),
        vec![
            (ToolStatus::Aborted, "aborted".into()),
            (ToolStatus::Completed, "immune done".into())
        ]
    );
    assert_eq!(s.last_result().map(|r| r.outcome), Some(Outcome::Aborted));
    insta::assert_snapshot!(transcript(&ev));
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_with_kill_none_lets_tools_finish() {
    let agent = builder(Slow::new(&tool_then_text("sleepy")))
        .tools(registry(vec![SleepTool::new("sleepy", 1_000)]))
        .build();
    let s = session(agent);
    let mut sub = s.subscribe(None, None);
    s.prompt("work").await.expect("started");
    wait_for(&mut sub, "tool_start").await;
    s.abort("stop", KillTools::None, false)
        .await
        .expect("abort");
    s.wait_idle().await;
    assert_eq!(
        tool_result(&s),
        vec![(ToolStatus::Completed, "done".into())]
    );
    assert_eq!(count(&history(&s), "tool_killed"), 0);
}

#[tokio::test(start_paused = true)]
async fn r_ctl_5_switch_model_while_busy_takes_effect_at_the_next_step() {
    let agent = builder(Slow::new(&tool_then_text("sleepy")))
        .tools(registry(vec![SleepTool::new("sleepy", 1_000)]))
        .extra_model(
            "other",
            Arc::new(
                Slow::new(r#"{"turns": [{"text": "x"}, {"text": "from other"}]}"#).named("other"),
            ),
        )
        .build();
    let s = session(agent);
    let mut sub = s.subscribe(None, None);
    s.prompt("work").await.expect("started");
    wait_for(&mut sub, "tool_start").await;
    assert_eq!(s.switch_model("other").await, Ok(true));
    s.wait_idle().await;
    let ev = history(&s);
    let models: Vec<String> = ev
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::RequestStart { model, .. } => Some(model.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(models, vec!["scripted", "other"]);
    assert_eq!(count(&ev, "model_switched"), 1);
    assert_eq!(
        count(&ev, "run_start"),
        1,
        "history and tools are kept in the same run"
    );
    assert_eq!(
        s.last_result()
            .and_then(|r| r.final_text().map(String::from)),
        Some("from other".into())
    );
}

#[tokio::test(start_paused = true)]
async fn r_ctl_3_abort_while_awaiting_approval() {
    let s = approval_session(SessionConfig::new("s"));
    let mut sub = s.subscribe(None, None);
    s.prompt("2+3?").await.expect("started");
    wait_for(&mut sub, "approval_required").await;
    assert_eq!(s.status(), Status::AwaitingApproval);
    s.abort("no time", KillTools::Killable, false)
        .await
        .expect("abort");
    wait_for(&mut sub, "agent_abort").await;
    s.wait_idle().await;
    assert!(
        s.pending_approvals().is_empty(),
        "the parked approval is gone"
    );
    assert!(matches!(
        s.approve("c1", false),
        Err(SessionError::Approval(_))
    ));
    assert_eq!(
        tool_result(&s),
        vec![(ToolStatus::Aborted, "aborted".into())]
    );
    insta::assert_snapshot!(transcript(&history(&s)));
}

/// R-TRACE-1: runs driven by a `Session` can be recorded; the trace replays.
#[tokio::test(start_paused = true)]
async fn r_trace_1_session_runs_are_recorded_and_replay() {
    let agent = builder(Slow::new(TWO_TEXTS)).build();
    let off = Session::spawn(
        builder(Slow::new(TWO_TEXTS)).build(),
        SessionConfig::new("off"),
    );
    off.prompt("a").await.expect("prompt");
    off.wait_idle().await;
    assert!(off.last_trace().is_none(), "recording is off by default");

    let s = Session::spawn(agent, SessionConfig::new("rec").record_traces(true));
    s.prompt("a").await.expect("prompt");
    s.wait_idle().await;
    let trace = s.last_trace().expect("a trace of the run");
    assert_eq!(trace.header.session, "rec");
    assert!(trace.records.len() > 5);
    assert!(
        agentloop::trace::replay(&trace).is_none(),
        "replays identically"
    );
    let text = trace.to_jsonl();
    let parsed = agentloop::trace::Trace::parse(&text, "session").expect("parses");
    assert!(agentloop::trace::replay(&parsed).is_none());
}

/// R-TRACE-1: queued runs end one after another before a subscriber looks; each run's trace
/// is still found by its id (`trace_of`), not only the last one (`agentloop chat`'s `/trace`).
#[tokio::test(start_paused = true)]
async fn r_trace_1_each_queued_run_has_its_trace_by_run_id() {
    let s = Session::spawn(
        builder(Slow::new(TWO_TEXTS)).build(),
        SessionConfig::new("rec").record_traces(true),
    );
    let mut sub = s.subscribe(None, Some(vec!["run_start".into()]));
    s.prompt("a").await.expect("prompt");
    s.prompt("b").await.expect("queued");
    s.wait_idle().await;
    let mut runs = Vec::new();
    while let Ok(Some(agentloop::session::SubscriptionItem::Event(env))) =
        tokio::time::timeout(std::time::Duration::ZERO, sub.recv()).await
    {
        runs.push(env.run_id);
    }
    assert_eq!(runs.len(), 2, "{runs:?}");
    for run in &runs {
        let trace = s.trace_of(run).expect("the run's trace");
        assert!(agentloop::trace::replay(&trace).is_none(), "{run} replays");
    }
    assert_ne!(s.trace_of(&runs[0]), s.trace_of(&runs[1]));
    assert_eq!(s.last_trace(), s.trace_of(&runs[1]));
    assert_eq!(s.trace_of("no-such-run"), None);
}

/// R-CTL-2: the steering queue is the run's machine's; what it had not applied when the run
/// ended comes back in the run's result and becomes the session's next prompt.
#[tokio::test(start_paused = true)]
async fn r_ctl_2_steering_left_in_an_aborted_run_becomes_the_next_prompt() {
    let agent = builder(Slow::new(&tool_then_text("sleepy")))
        .tools(registry(vec![SleepTool::new("sleepy", 60_000)]))
        .build();
    let s = session(agent);
    let mut sub = s.subscribe(None, None);
    s.prompt("work").await.expect("started");
    wait_for(&mut sub, "tool_start").await;
    s.steer("then look at the logs").await.expect("queued");
    s.abort("enough", KillTools::Killable, false)
        .await
        .expect("aborting");
    s.wait_idle().await;
    let ev = history(&s);
    assert_eq!(
        count(&ev, "steering_applied"),
        0,
        "the step never reached its boundary"
    );
    assert_eq!(
        count(&ev, "run_start"),
        2,
        "the leftover started the next run"
    );
}
