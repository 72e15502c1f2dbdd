//! The session machine (`statecharts/session.toml`, R-CTL-1..6): scenarios through its
//! public API, each checking the row taken against the chart oracle, the effects and the
//! replies; together they take every row ([`rows_taken`], counted by `coverage.rs`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use agentloop_core::agent_event::{AgentEvent, SteeringStatus};
use agentloop_core::chart::{SessionRow as R, SessionState as S};
use agentloop_core::event::KillPolicy;
use agentloop_core::session_machine::{
    Forward, RunInput, Session, SessionEffect, SessionInput, SessionReply, SessionStep,
};

/// Every row a scenario of this file took (any test thread).
static TAKEN: Mutex<BTreeMap<R, usize>> = Mutex::new(BTreeMap::new());

fn prompt(text: &str) -> SessionInput<'_> {
    SessionInput::Prompt {
        text,
        rejected: None,
    }
}

fn steer(text: &str, run_pending: usize, run_received: u64) -> SessionInput<'_> {
    SessionInput::Steer {
        text,
        rejected: None,
        run_pending,
        run_received,
    }
}

fn abort(clear_queue: bool) -> SessionInput<'static> {
    SessionInput::Abort {
        reason: "stop",
        kill: KillPolicy::Killable,
        clear_queue,
    }
}

fn ended(leftover: &[String], announced_abort: bool) -> SessionInput<'_> {
    SessionInput::RunEnded {
        leftover,
        announced_abort,
    }
}

/// Feeds `input`, checks the row against the oracle and returns the step.
fn feed(m: &mut Session, input: SessionInput<'_>, row: R) -> SessionStep {
    let step = m.handle(input);
    assert!(step.check.holds(), "{}", step.check);
    assert_eq!(step.row, Some(row), "{step:?}");
    if cfg!(debug_assertions) {
        let effects = step
            .effect_check
            .as_ref()
            .expect("a typed row's effect check");
        assert!(effects.holds(), "{effects}");
    }
    assert!(
        row.allows(step.from, input.kind(), step.to),
        "{row:?} does not allow {step:?}"
    );
    if let Ok(mut t) = TAKEN.lock() {
        *t.entry(row).or_default() += 1;
    }
    step
}

fn publishes(step: &SessionStep) -> Vec<&AgentEvent> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            SessionEffect::Publish(ev) => Some(ev),
            _ => None,
        })
        .collect()
}

fn reply(step: &SessionStep) -> Option<&SessionReply> {
    step.effects.iter().find_map(|e| match e {
        SessionEffect::Reply(r) => Some(r),
        _ => None,
    })
}

fn started(step: &SessionStep) -> Option<&RunInput> {
    step.effects.iter().find_map(|e| match e {
        SessionEffect::StartRun { input, .. } => Some(input),
        _ => None,
    })
}

/// R-CTL-1: idle → a prompt starts a run; busy → queued and started when the run ends
/// (agent_resumed{queued_prompt}); a hook's rejection is answered in either state.
#[test]
fn r_ctl_1_prompt_starts_queues_and_resumes() {
    let mut m = Session::new("a", 3);
    assert_eq!(m.state(), S::Idle);
    let s = feed(&mut m, prompt("one"), R::IdlePrompt);
    assert_eq!(s.to, S::Running);
    assert_eq!(started(&s), Some(&RunInput::Command));
    assert_eq!(reply(&s), Some(&SessionReply::Started));
    let s = feed(&mut m, prompt("two"), R::BusyPrompt);
    assert_eq!(reply(&s), Some(&SessionReply::PromptQueued(1)));
    assert!(s.effects.contains(&SessionEffect::QueuePrompt));
    assert!(publishes(&s).contains(&&AgentEvent::PromptQueued {
        text: "two".into(),
        queued: 1
    }));
    let rejected = SessionInput::Prompt {
        text: "bad",
        rejected: Some("no"),
    };
    let s = feed(&mut m, rejected, R::PromptRejected);
    assert_eq!(reply(&s), Some(&SessionReply::Rejected("no".into())));
    assert_eq!(s.to, S::Running);
    let s = feed(&mut m, ended(&[], false), R::RunningEndedNext);
    assert_eq!(s.to, S::Running);
    assert_eq!(started(&s), Some(&RunInput::Queued));
    assert_eq!(
        publishes(&s),
        [&AgentEvent::AgentResumed {
            trigger: "queued_prompt".into()
        }]
    );
    assert_eq!(m.data().queued().count(), 0);
    let s = feed(&mut m, ended(&[], false), R::RunningEndedIdle);
    assert_eq!(s.to, S::Idle);
    assert_eq!(
        s.effects,
        [SessionEffect::CloseRun, SessionEffect::Idle],
        "nothing next: idle"
    );
    let s = feed(&mut m, rejected, R::PromptRejected);
    assert_eq!(s.to, S::Idle);
    assert!(started(&s).is_none());
}

/// R-CTL-2: idle steering starts a run; busy steering is forwarded while the run's queue
/// (held + in flight) is below the capacity, else QueueFull; leftover steering starts the
/// next run before a queued prompt.
#[test]
fn r_ctl_2_steering_forwards_until_the_queue_is_full() {
    let mut m = Session::new("a", 2);
    let s = feed(&mut m, steer("go", 0, 0), R::IdleSteer);
    assert_eq!(started(&s), Some(&RunInput::Command));
    assert_eq!(
        publishes(&s),
        [&AgentEvent::SteeringReceived {
            steering_ref: 1,
            text: "go".into(),
            status: SteeringStatus::StartedRun
        }]
    );
    let s = feed(&mut m, steer("x", 0, 0), R::BusySteer);
    assert_eq!(reply(&s), Some(&SessionReply::SteerQueued(2)));
    assert!(s
        .effects
        .contains(&SessionEffect::Forward(Forward::Steer("x".into()))));
    // One in flight plus one the run holds: full.
    let s = feed(&mut m, steer("y", 1, 0), R::BusySteerFull);
    assert_eq!(reply(&s), Some(&SessionReply::QueueFull { capacity: 2 }));
    // The run received the first and merged it: room again.
    feed(&mut m, steer("z", 0, 1), R::BusySteer);
    let hooked = SessionInput::Steer {
        text: "w",
        rejected: Some("hook"),
        run_pending: 5,
        run_received: 0,
    };
    let s = feed(&mut m, hooked, R::SteerRejected);
    assert_eq!(reply(&s), Some(&SessionReply::Rejected("hook".into())));
    feed(&mut m, prompt("queued"), R::BusyPrompt);
    let left = vec!["a".to_string(), "b".to_string()];
    let s = feed(&mut m, ended(&left, false), R::RunningEndedNext);
    assert_eq!(started(&s), Some(&RunInput::Leftover("a\n\nb".into())));
    assert_eq!(m.data().queued().collect::<Vec<_>>(), ["queued"]);
    feed(&mut m, hooked, R::SteerRejected);
}

/// R-CTL-3: an idle abort announces agent_abort; a busy abort is forwarded and remembered,
/// announced by the session when the run ended before it reached it; clear_queue drops the
/// queued prompts.
#[test]
fn r_ctl_3_abort_in_every_state() {
    let mut m = Session::new("a", 3);
    let s = feed(&mut m, abort(true), R::IdleAbort);
    assert_eq!(reply(&s), Some(&SessionReply::AbortIdle));
    assert_eq!(
        publishes(&s),
        [&AgentEvent::AgentAbort {
            reason: "stop".into()
        }]
    );
    feed(&mut m, prompt("one"), R::IdlePrompt);
    feed(&mut m, prompt("two"), R::BusyPrompt);
    let s = feed(&mut m, abort(false), R::RunningAbort);
    assert_eq!(s.to, S::Aborting);
    assert_eq!(m.data().abort_reason(), Some("stop"));
    assert!(s.effects.contains(&SessionEffect::Forward(Forward::Abort {
        reason: "stop".into(),
        kill: KillPolicy::Killable
    })));
    // The run ended on its own before the abort reached it: the session announces it, and
    // the queued prompt still runs.
    let s = feed(&mut m, ended(&[], false), R::AbortingEndedNext);
    assert_eq!(
        publishes(&s)[0],
        &AgentEvent::AgentAbort {
            reason: "stop".into()
        }
    );
    assert_eq!(started(&s), Some(&RunInput::Queued));
    assert_eq!(m.data().abort_reason(), None);
    feed(&mut m, prompt("three"), R::BusyPrompt);
    feed(&mut m, abort(false), R::RunningAbort);
    let s = feed(&mut m, abort(true), R::AbortingAbort);
    assert!(publishes(&s).contains(&&AgentEvent::PromptDropped {
        text: "three".into()
    }));
    assert!(s.effects.contains(&SessionEffect::DropQueued));
    // The run announced the abort itself: not twice.
    let s = feed(&mut m, ended(&[], true), R::AbortingEndedIdle);
    assert!(publishes(&s).is_empty());
    assert_eq!(s.to, S::Idle);
}

/// R-CTL-5: unknown model → error; the same → no-op; idle → model_switched now; busy →
/// forwarded (the run publishes model_switched at its next step).
#[test]
fn r_ctl_5_switch_model() {
    let mut m = Session::new("a", 3);
    let unknown = SessionInput::SwitchModel {
        model: "zz",
        known: false,
    };
    let s = feed(&mut m, unknown, R::SwitchUnknownModel);
    assert_eq!(reply(&s), Some(&SessionReply::UnknownModel("zz".into())));
    let same = SessionInput::SwitchModel {
        model: "a",
        known: true,
    };
    let s = feed(&mut m, same, R::SwitchSameModel);
    assert_eq!(
        s.effects,
        [SessionEffect::Reply(SessionReply::ModelSwitched(false))]
    );
    let b = SessionInput::SwitchModel {
        model: "b",
        known: true,
    };
    let s = feed(&mut m, b, R::IdleSwitchModel);
    assert_eq!(
        publishes(&s),
        [&AgentEvent::ModelSwitched {
            from: "a".into(),
            to: "b".into()
        }]
    );
    assert_eq!(m.data().model(), "b");
    feed(&mut m, SessionInput::Subtask, R::IdleSubtask);
    let a = SessionInput::SwitchModel {
        model: "a",
        known: true,
    };
    let s = feed(&mut m, a, R::BusySwitchModel);
    assert_eq!(
        s.effects,
        [
            SessionEffect::UseModel("a".into()),
            SessionEffect::Forward(Forward::SwitchModel("a".into())),
            SessionEffect::Reply(SessionReply::ModelSwitched(true))
        ]
    );
    feed(&mut m, unknown, R::SwitchUnknownModel);
}

/// R-CTL-6 and subtasks: tool changes go into a running run (ignored when idle: the next run
/// takes the configuration); a subtask starts a run or is forwarded.
#[test]
fn r_ctl_6_tools_changed_and_subtasks() {
    let mut m = Session::new("a", 3);
    let s = feed(&mut m, SessionInput::ToolsChanged, R::IdleToolsChanged);
    assert!(s.effects.is_empty());
    let s = feed(&mut m, SessionInput::Subtask, R::IdleSubtask);
    assert_eq!(started(&s), Some(&RunInput::Command));
    let s = feed(&mut m, SessionInput::Subtask, R::BusySubtask);
    assert_eq!(reply(&s), Some(&SessionReply::SubtaskQueued));
    let s = feed(&mut m, SessionInput::ToolsChanged, R::BusyToolsChanged);
    assert_eq!(s.effects, [SessionEffect::Forward(Forward::SetTools)]);
}

/// R-CTL-4: "approve always" puts the call's scope in the session's whitelist, and every run
/// the session starts afterwards is seeded with it; other answers change nothing.
#[test]
fn r_ctl_4_approve_always_seeds_later_runs() {
    let mut m = Session::new("a", 3);
    feed(&mut m, prompt("one"), R::IdlePrompt);
    let once = SessionInput::ApprovalAnswered {
        scope: "shell:git",
        always: false,
    };
    let s = feed(&mut m, once, R::ApprovalAnswered);
    assert!(s.effects.is_empty());
    let always = SessionInput::ApprovalAnswered {
        scope: "shell:git",
        always: true,
    };
    feed(&mut m, always, R::ApprovedAlways);
    feed(&mut m, ended(&[], false), R::RunningEndedIdle);
    let s = feed(&mut m, prompt("two"), R::IdlePrompt);
    let seeded = s.effects.iter().find_map(|e| match e {
        SessionEffect::StartRun { whitelist, .. } => Some(whitelist.clone()),
        _ => None,
    });
    assert_eq!(
        seeded.map(|w| w.into_iter().collect::<Vec<_>>()),
        Some(vec!["shell:git".to_string()])
    );
}

/// R-CTL-3: closing aborts the run in progress; closing idle just closes. Closed takes
/// nothing.
#[test]
fn r_ctl_3_close_aborts_the_run() {
    let mut m = Session::new("a", 3);
    feed(&mut m, prompt("one"), R::IdlePrompt);
    let s = feed(&mut m, SessionInput::Close, R::BusyClose);
    assert_eq!(s.to, S::Closed);
    assert!(matches!(
        s.effects[..],
        [SessionEffect::Forward(Forward::Abort { .. })]
    ));
    let s = m.handle(prompt("late"));
    assert_eq!((s.row, s.to), (None, S::Closed));
    assert!(s.check.holds());
    let mut m = Session::new("a", 3);
    let s = feed(&mut m, SessionInput::Close, R::IdleClose);
    assert!(s.effects.is_empty());
}

/// Runs every scenario of this file; the rows they took, with counts (R-VER-2).
pub fn rows_taken() -> BTreeMap<R, usize> {
    r_ctl_1_prompt_starts_queues_and_resumes();
    r_ctl_2_steering_forwards_until_the_queue_is_full();
    r_ctl_3_abort_in_every_state();
    r_ctl_5_switch_model();
    r_ctl_6_tools_changed_and_subtasks();
    r_ctl_4_approve_always_seeds_later_runs();
    r_ctl_3_close_aborts_the_run();
    TAKEN.lock().map(|t| t.clone()).unwrap_or_default()
}

/// R-VER-2: the scenarios take every row of the session chart.
#[test]
fn r_ver_2_session_scenarios_take_every_row() {
    let taken = rows_taken();
    let missing: Vec<&R> = R::ALL.iter().filter(|r| !taken.contains_key(r)).collect();
    assert!(
        missing.is_empty(),
        "session rows no scenario takes: {missing:?}"
    );
}
