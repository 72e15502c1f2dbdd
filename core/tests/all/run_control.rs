//! Controlling a run while its tools run: abort (R-CTL-3), steering with `skip_remaining`
//! (R-CTL-2), and resuming a step whose calls lack results (R-IDEM-5), at the `Run` level.

use crate::steps::{attempt_of, request_of};
use agentloop_core::agent_event::AgentEvent;
use agentloop_core::chart::ToolCallRow;
use agentloop_core::error::RunError;
use agentloop_core::event::{KillPolicy, PendingStep};
use agentloop_core::message::FinishReason;
use agentloop_core::react::config::SteeringPolicy;
use agentloop_core::{
    AssistantMessage, Effect, Entry, Event, Message, MessageDelta, Outcome, Run, RunConfig, Step,
    ToolCall, ToolResult, ToolSpec, ToolStatus, Transition,
};

fn config() -> RunConfig {
    let mut cfg = RunConfig {
        tools: ["calc", "ls", "sleep"]
            .iter()
            .map(|n| ToolSpec {
                name: (*n).into(),
                description: String::new(),
                parameters: serde_json::json!({}),
            })
            .collect(),
        ..RunConfig::default()
    };
    cfg.step.immune.insert("sleep".into());
    cfg
}

/// Starts a run whose first step calls `names` (ids c1, c2, ...); returns it with its tools
/// running.
fn running(cfg: RunConfig, names: &[&str]) -> Run {
    running_after(cfg, names).0
}

/// [`running`], with the step that committed the message.
fn running_after(cfg: RunConfig, names: &[&str]) -> (Run, Step) {
    let mut run = Run::new(cfg);
    let s = run.handle(Event::Start {
        run_id: "r1".into(),
        history: vec![],
        input: vec![Message::user("hi")],
        session_turns: 0,
    });
    let attempt = attempt_of(&s);
    let _ = run.handle(Event::StreamOpened {
        attempt: attempt.clone(),
    });
    let mut deltas: Vec<MessageDelta> = names
        .iter()
        .enumerate()
        .map(|(i, n)| MessageDelta::ToolCall {
            id: format!("c{}", i + 1),
            name: (*n).into(),
            arguments: "{}".into(),
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
    let done = run.handle(Event::done(attempt));
    assert_eq!(run.state().to_string(), "Executing.RunningTools");
    (run, done)
}

/// The tool-call chart rows a step moved calls along, as (call id, row).
fn call_moves(step: &Step) -> Vec<(&str, ToolCallRow)> {
    assert!(step.guard_violations().is_empty(), "{step:?}");
    step.transitions
        .iter()
        .filter_map(|t| match t {
            Transition::ToolCall { call, row, .. } => {
                assert!(t.conforms(), "{t:?}");
                Some((call.as_str(), *row))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn r_in_3_each_call_moves_along_the_tool_call_chart() {
    use ToolCallRow::*;
    let (mut run, done) = running_after(config(), &["calc", "nope", "sleep"]);
    assert_eq!(
        call_moves(&done),
        [
            ("c1", CommitQueued),
            ("c2", CommitUnknown),
            ("c3", CommitQueued),
            ("c1", StartRun),
            ("c3", StartRun)
        ]
    );
    // An abort kills the killable call; the immune one runs on (the step drains).
    let s = run.handle(Event::Abort {
        reason: "stop".into(),
        kill: KillPolicy::Killable,
    });
    assert_eq!(call_moves(&s), [("c1", AbortKilled), ("c3", AbortImmune)]);
    let s = run.handle(Event::ToolFinished {
        tool_call_id: "c3".into(),
        status: ToolStatus::Error,
        content: "late".into(),
    });
    assert_eq!(call_moves(&s), [("c3", FinishedError)]);
    let _ = run.handle(Event::RunEndCommitted);
    assert_eq!(
        statuses(&run),
        [
            ("c1".to_string(), ToolStatus::Aborted),
            ("c2".to_string(), ToolStatus::Error),
            ("c3".to_string(), ToolStatus::Error)
        ]
    );
}

/// The deadline timers a step started, by the order of their `RunTool`s.
fn deadline_timers(step: &Step) -> Vec<(u64, u64)> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::StartTimer { timer_id, delay_ms } => Some((*timer_id, *delay_ms)),
            _ => None,
        })
        .collect()
}

#[test]
fn r_in_7_a_tool_deadline_is_a_machine_timer_that_fails_the_call() {
    use ToolCallRow::*;
    let mut cfg = config();
    cfg.step.tool_timeout_ms = Some(50);
    let (mut run, done) = running_after(cfg, &["calc", "sleep"]);
    let timers = deadline_timers(&done);
    assert_eq!(timers.len(), 2, "one deadline per started call");
    assert!(timers.iter().all(|&(_, ms)| ms == 50));
    assert_ne!(timers[0].0, timers[1].0);
    // c1's deadline passes: the machine kills it and closes it with an error result.
    let s = run.handle(Event::TimerElapsed {
        timer_id: timers[0].0,
    });
    assert_eq!(call_moves(&s), [("c1", Deadline)]);
    assert_eq!(kills(&s), ["c1"]);
    let stored: Vec<&ToolResult> = s
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Persist {
                entry: Entry::ToolResult { result, .. },
            } => Some(result),
            _ => None,
        })
        .collect();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].content, "tool timed out after 50 ms");
    assert_eq!(stored[0].status, ToolStatus::Error);
    // Its late completion is stale; the same timer again is not a deadline any more.
    let late = run.handle(Event::ToolFinished {
        tool_call_id: "c1".into(),
        status: ToolStatus::Completed,
        content: "5".into(),
    });
    assert!(call_moves(&late).is_empty());
    let again = run.handle(Event::TimerElapsed {
        timer_id: timers[0].0,
    });
    assert!(again.unhandled && again.effects.is_empty());
    // c2 finishes in time: its timer is cancelled.
    let s = run.handle(Event::ToolFinished {
        tool_call_id: "c2".into(),
        status: ToolStatus::Completed,
        content: "ok".into(),
    });
    assert!(s.effects.contains(&Effect::CancelTimer {
        timer_id: timers[1].0
    }));
    assert_eq!(call_moves(&s), [("c2", FinishedOk)]);
}

/// R-TRACE-1: a tool call's deadline timer id is recorded in the trace, so its layout is part
/// of the trace format: bit 63 set, the model-call index from bit 24, the call's position
/// below. An elapsed timer is a call's deadline only when all three match a running call.
#[test]
fn r_trace_1_tool_timer_ids_have_the_documented_layout() {
    use ToolCallRow::*;
    let mut cfg = config();
    cfg.step.tool_timeout_ms = Some(50);
    let (mut run, done) = running_after(cfg, &["calc", "ls", "sleep"]);
    let tool = |index: u64, slot: u64| 1 << 63 | index << 24 | slot;
    assert_eq!(
        deadline_timers(&done),
        [(tool(1, 0), 50), (tool(1, 1), 50), (tool(1, 2), 50)]
    );
    // Neither another step's id, nor one without bit 63, nor a position with no call is one.
    for id in [tool(2, 1), tool(1, 1) & !(1 << 63), tool(0, 1), tool(1, 3)] {
        let s = run.handle(Event::TimerElapsed { timer_id: id });
        assert!(call_moves(&s).is_empty(), "{id:#x}");
        assert!(kills(&s).is_empty(), "{id:#x}");
    }
    let s = run.handle(Event::TimerElapsed {
        timer_id: tool(1, 1),
    });
    assert_eq!(call_moves(&s), [("c2", Deadline)]);
    let s = run.handle(Event::TimerElapsed {
        timer_id: tool(1, 2),
    });
    assert_eq!(call_moves(&s), [("c3", Deadline)]);
}

#[test]
fn r_ctl_2_the_steering_queue_is_the_machines_and_its_leftovers_are_in_the_result() {
    let mut run = running(config(), &["calc"]);
    assert!(run.steering().is_empty());
    let _ = run.handle(Event::Steer {
        text: "also check the logs".into(),
    });
    assert_eq!(run.steering(), ["also check the logs"]);
    // The run is aborted before the step boundary: the message was never applied.
    let _ = run.handle(Event::Abort {
        reason: "stop".into(),
        kill: KillPolicy::Killable,
    });
    let _ = run.handle(Event::RunEndCommitted);
    let result = run.result().expect("ended");
    assert_eq!(result.steering_left, ["also check the logs"]);
}

#[test]
fn r_ctl_2_a_steering_skip_moves_unstarted_and_killable_calls_to_skipped() {
    use ToolCallRow::*;
    let mut cfg = config();
    cfg.steering = SteeringPolicy::SkipRemaining;
    cfg.step.parallel_tools = false;
    let (mut run, done) = running_after(cfg, &["sleep", "calc"]);
    assert_eq!(
        call_moves(&done),
        [("c1", CommitQueued), ("c2", CommitQueued), ("c1", StartRun)]
    );
    let s = run.handle(Event::Steer {
        text: "change of plan".into(),
    });
    assert_eq!(call_moves(&s), [("c1", SkipImmune), ("c2", SkipUnstarted)]);
}

fn kills(step: &Step) -> Vec<&str> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::KillTool { tool_call_id } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect()
}

fn ends(step: &Step) -> usize {
    step.effects
        .iter()
        .filter(|e| {
            matches!(
                e,
                Effect::Emit {
                    event: AgentEvent::AgentAbort { .. }
                        | AgentEvent::RunEnd { .. }
                        | AgentEvent::RunError { .. }
                }
            )
        })
        .count()
}

fn statuses(run: &Run) -> Vec<(String, ToolStatus)> {
    run.result()
        .expect("ended")
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.tool_call_id.clone(), r.status)),
            _ => None,
        })
        .collect()
}

#[test]
fn r_ctl_3_abort_kills_running_tools_and_keeps_the_pairing() {
    let mut run = running(config(), &["calc", "ls"]);
    let _ = run.handle(Event::ToolFinished {
        tool_call_id: "c1".into(),
        status: ToolStatus::Completed,
        content: "2".into(),
    });
    let s = run.handle(Event::Abort {
        reason: "user abort".into(),
        kill: KillPolicy::Killable,
    });
    assert_eq!(s.to.to_string(), "Finishing");
    assert_eq!(kills(&s), ["c2"]);
    assert_eq!(ends(&s), 0, "the end is reported once its entry is stored");
    assert!(s.effects.iter().any(|e| matches!(
        e,
        Effect::CommitRunEnd { entry: Entry::RunEnd { outcome, .. } } if *outcome == agentloop_core::Outcome::Aborted
    )));
    let end = run.handle(Event::RunEndCommitted);
    assert_eq!(end.to.to_string(), "Aborted");
    assert_eq!(ends(&end), 1, "exactly one end event");
    let r = run.result().unwrap();
    assert_eq!(
        (r.outcome, r.reason.as_str()),
        (Outcome::Aborted, "user abort")
    );
    // The committed message stays, with a result for every call.
    assert!(matches!(&r.messages[1], Message::Assistant(a) if a.tool_calls.len() == 2));
    assert_eq!(
        statuses(&run),
        [
            ("c1".to_string(), ToolStatus::Completed),
            ("c2".to_string(), ToolStatus::Aborted)
        ]
    );
}

#[test]
fn r_ctl_3_abort_waits_for_immune_tools_and_announces_the_abort_once() {
    let mut run = running(config(), &["sleep", "calc"]);
    let s = run.handle(Event::Abort {
        reason: "stop".into(),
        kill: KillPolicy::Killable,
    });
    assert_eq!(s.to.to_string(), "Executing.Draining");
    assert_eq!(kills(&s), ["c2"]);
    assert_eq!(ends(&s), 1, "agent_abort is announced at once");
    assert!(!run.is_terminal());
    let s = run.handle(Event::ToolFinished {
        tool_call_id: "c1".into(),
        status: ToolStatus::Completed,
        content: "slept".into(),
    });
    assert_eq!(s.to.to_string(), "Finishing");
    let end = run.handle(Event::RunEndCommitted);
    assert_eq!(end.to.to_string(), "Aborted");
    assert_eq!(ends(&s) + ends(&end), 0, "not announced twice");
    assert_eq!(run.result().unwrap().outcome, Outcome::Aborted);
    assert_eq!(
        statuses(&run),
        [
            ("c1".to_string(), ToolStatus::Completed),
            ("c2".to_string(), ToolStatus::Aborted)
        ]
    );
}

#[test]
fn r_ctl_3_abort_before_any_commit_leaves_no_assistant_message() {
    let mut run = Run::new(config());
    let s = run.handle(Event::Start {
        run_id: "r1".into(),
        history: vec![],
        input: vec![Message::user("hi")],
        session_turns: 0,
    });
    let attempt = attempt_of(&s);
    let s = run.handle(Event::Abort {
        reason: "nope".into(),
        kill: KillPolicy::All,
    });
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::CancelModel { attempt: a } if *a == attempt)));
    let _ = run.handle(Event::RunEndCommitted);
    let r = run.result().unwrap();
    assert_eq!(r.messages, [Message::user("hi")]);
    assert_eq!(r.iterations, 0);
}

#[test]
fn r_ctl_2_skip_remaining_steering_cuts_the_batch_short() {
    let cfg = RunConfig {
        steering: SteeringPolicy::SkipRemaining,
        ..config()
    };
    let mut run = running(cfg, &["calc", "sleep"]);
    let s = run.handle(Event::Steer {
        text: "change of plan".into(),
    });
    // The killable call is killed and skipped; the immune one finishes.
    assert_eq!(kills(&s), ["c1"]);
    let skipped: Vec<_> = s
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Emit {
                event: AgentEvent::ToolSkippedForSteering { tool_call_id },
            } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(skipped, ["c1"]);
    let s = run.handle(Event::ToolFinished {
        tool_call_id: "c2".into(),
        status: ToolStatus::Completed,
        content: "slept".into(),
    });
    // The next request carries both results and the steering message.
    let next = request_of(&s).expect("the next step starts");
    let tail: Vec<_> = next.messages[2..].to_vec();
    assert!(
        matches!(&tail[0], Message::Tool(r) if r.tool_call_id == "c1" && r.status == ToolStatus::Skipped)
    );
    assert!(
        matches!(&tail[1], Message::Tool(r) if r.tool_call_id == "c2" && r.status == ToolStatus::Completed)
    );
    assert_eq!(tail[2], Message::user("change of plan"));
}

#[test]
fn r_ctl_2_steering_at_the_boundary_lets_the_batch_finish() {
    let mut run = running(config(), &["calc", "ls"]);
    let s = run.handle(Event::Steer {
        text: "later".into(),
    });
    assert!(kills(&s).is_empty());
    assert!(!s.effects.iter().any(|e| matches!(
        e,
        Effect::Emit {
            event: AgentEvent::ToolSkippedForSteering { .. }
        }
    )));
    assert_eq!(run.state().to_string(), "Executing.RunningTools");
}

#[test]
fn r_idem_5_resume_runs_only_the_unanswered_calls() {
    let calls: Vec<ToolCall> = ["c1", "c2"]
        .iter()
        .map(|id| ToolCall::from_raw(*id, "calc", "{}"))
        .collect();
    let message = AssistantMessage {
        tool_calls: calls.clone(),
        ..Default::default()
    };
    let done = ToolResult {
        tool_call_id: "c1".into(),
        name: "calc".into(),
        content: "1".into(),
        status: ToolStatus::Completed,
    };
    // The pending step's message and results come back through the step, not the history.
    let history = vec![Message::user("hi")];
    let mut run = Run::new(config());
    let s = run.handle(Event::Resume {
        run_id: "r1".into(),
        history: history.clone(),
        session_turns: 3,
        committed_steps: 1,
        pending: Some(PendingStep {
            model_call_index: 1,
            message: message.clone(),
            results: vec![done.clone()],
        }),
    });
    let runs: Vec<_> = s
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::RunTool { call } => Some(call.id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(runs, ["c2"]);
    assert_eq!(run.state().to_string(), "Executing.RunningTools");
    let s = run.handle(Event::ToolFinished {
        tool_call_id: "c2".into(),
        status: ToolStatus::Completed,
        content: "2".into(),
    });
    // The next step is step 2 and sees both results after the message, once.
    let next = request_of(&s).expect("the run continues");
    assert_eq!(next.model_call_index, 2);
    assert_eq!(next.session_turn, 3);
    let tools: Vec<_> = next
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r.tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(tools, ["c1", "c2"]);
    let assistants = next
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Assistant(_)))
        .count();
    assert_eq!(assistants, 1);
}

#[test]
fn r_idem_5_resume_without_pending_plans_the_next_step() {
    let mut run = Run::new(config());
    let s = run.handle(Event::Resume {
        run_id: "r1".into(),
        history: vec![Message::user("hi")],
        session_turns: 2,
        committed_steps: 2,
        pending: None,
    });
    let req = request_of(&s).expect("a request");
    assert_eq!(req.model_call_index, 3);
    assert_eq!(req.session_turn, 2);
}

/// R-IDEM-4, row `finishing_store_failed`: the run-end entry cannot be stored. The run fails,
/// its error names the end it had reached, and exactly one end event (`run_error`) goes out.
#[test]
fn r_idem_4_a_failed_run_end_commit_fails_the_run_naming_the_end_it_reached() {
    let mut run = running(config(), &["calc"]);
    let s = run.handle(Event::Abort {
        reason: "user abort".into(),
        kill: KillPolicy::All,
    });
    assert_eq!(s.to.to_string(), "Finishing");
    // An abort while the end is being committed changes nothing (row `finishing_abort`).
    let again = run.handle(Event::Abort {
        reason: "twice".into(),
        kill: KillPolicy::All,
    });
    assert!(!again.unhandled);
    assert_eq!(again.to.to_string(), "Finishing");
    assert!(again.effects.is_empty());
    let end = run.handle(Event::StoreWriteFailed {
        error: "disk full".into(),
    });
    assert_eq!(end.to.to_string(), "Failed");
    assert!(end.transitions.iter().all(|t| t.conforms()));
    assert!(end.guard_violations().is_empty());
    assert_eq!(ends(&end), 1);
    let r = run.result().unwrap();
    assert_eq!(r.outcome, Outcome::Failed);
    assert_eq!(r.reason, "store_write_failed");
    assert!(
        matches!(
            r.error,
            Some(RunError::EndWrite {
                reached: Some(Outcome::Aborted),
                ..
            })
        ),
        "{r:?}"
    );
    let error = r
        .error
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        error.contains("disk full") && error.contains("after the run reached aborted"),
        "{error}"
    );
    assert!(end.effects.iter().any(|e| matches!(
        e,
        Effect::Emit { event: AgentEvent::RunError { error: e, .. } } if *e == error
    )));
}

/// An abort announced while immune tools drained stays the run's one end event when the
/// run-end commit then fails (R-VER-1: exactly one terminal outcome); the failure is in the
/// result.
#[test]
fn r_idem_4_a_failed_commit_after_a_drained_abort_adds_no_second_end_event() {
    let mut run = running(config(), &["sleep"]);
    let s = run.handle(Event::Abort {
        reason: "stop".into(),
        kill: KillPolicy::Killable,
    });
    assert_eq!(ends(&s), 1);
    let s = run.handle(Event::ToolFinished {
        tool_call_id: "c1".into(),
        status: ToolStatus::Completed,
        content: "slept".into(),
    });
    assert_eq!(s.to.to_string(), "Finishing");
    let end = run.handle(Event::StoreWriteFailed {
        error: "disk full".into(),
    });
    assert_eq!(end.to.to_string(), "Failed");
    assert_eq!(ends(&s) + ends(&end), 0);
    assert_eq!(run.result().unwrap().reason, "store_write_failed");
}
