//! R-VER-2: chart-row coverage. Drives both machines through hand-written scenarios and a seeded
//! random walk (the effect-following generator of `tests/support/harness.rs`, with some noise),
//! counts the chart row of every transition, prints a coverage table and fails below 100%,
//! naming the rows never taken.

use agentloop_testkit::harness;

use std::collections::BTreeMap;

use agentloop_core::chart::{ProcessRow, ReactRow, SessionRow, ToolCallRow};
use harness::{
    Action, ArgsPick, AttemptPick, DecisionPick, DeltaPick, ErrPick, GatePick, IdPick,
    ProcessHarness, RunHarness, SeqPick, Setup, SplitMix, ToolPick,
};

#[derive(Default)]
struct Tally {
    react: BTreeMap<ReactRow, usize>,
    process: BTreeMap<ProcessRow, usize>,
    tool_call: BTreeMap<ToolCallRow, usize>,
}

impl Tally {
    fn add_run(&mut self, h: &RunHarness) {
        for (r, n) in &h.react_rows {
            *self.react.entry(*r).or_default() += n;
        }
        for (r, n) in &h.process_rows {
            *self.process.entry(*r).or_default() += n;
        }
        self.add_calls(&h.calls.rows);
    }

    fn add_calls(&mut self, rows: &BTreeMap<ToolCallRow, usize>) {
        for (r, n) in rows {
            *self.tool_call.entry(*r).or_default() += n;
        }
    }

    fn add_process(&mut self, h: &ProcessHarness) {
        for (r, n) in &h.rows {
            *self.process.entry(*r).or_default() += n;
        }
        self.add_calls(&h.calls.rows);
    }
}

fn tool_call(tool: ToolPick) -> Action {
    Action::Delta(
        AttemptPick::Current,
        SeqPick::Next,
        DeltaPick::ToolCall(tool, ArgsPick::Valid),
    )
}

fn text(i: u8) -> Action {
    Action::Delta(AttemptPick::Current, SeqPick::Next, DeltaPick::Text(i))
}

const OPEN: Action = Action::StreamOpened(AttemptPick::Current);
const DONE: Action = Action::Done(AttemptPick::Current);
const START: Action = Action::Start {
    long_history: false,
};

/// Hand-written scenarios: each names the rows it is there for.
fn scenarios() -> Vec<(&'static str, Setup, Vec<Action>)> {
    let calc = ToolPick::Known(0);
    let shell = ToolPick::Known(2);
    let stop = Setup {
        stop_decider: true,
        ..Setup::default()
    };
    let compact = Setup {
        compact_threshold: Some(4),
        ..Setup::default()
    };
    // Without doom-loop detection: the scenario repeats one identical ask_user call.
    let ask = Setup {
        ask_user: true,
        doom_loop: false,
        ..Setup::default()
    };
    let rules = Setup {
        tool_rules: true,
        ..Setup::default()
    };
    vec![
        (
            "tool rules (R-TOOL-3): commit_denied_by_rule, a rule's deadline firing (deadline)",
            rules,
            vec![
                START,
                OPEN,
                tool_call(ToolPick::Known(1)),
                tool_call(calc),
                DONE,
                Action::TimerElapsed(true),
            ],
        ),
        (
            "a resumed call a rule denies: restore_denied_by_rule",
            rules,
            vec![Action::Resume {
                pending: true,
                steps: 1,
            }],
        ),
        (
            "ask_user: start_ask_user, tools_user_answered(+stale), user_answered, user_unavailable, user_deadline",
            ask,
            vec![
                START,
                OPEN,
                tool_call(ToolPick::AskUser),
                tool_call(ToolPick::AskUser),
                DONE,
                Action::UserAnswered(IdPick::Unknown, true),
                Action::UserAnswered(IdPick::Tracked(0), false),
                Action::TimerElapsed(true),
                OPEN,
                tool_call(ToolPick::AskUser),
                DONE,
                Action::UserAnswered(IdPick::Tracked(0), true),
                OPEN,
                text(1),
                DONE,
                Action::RunEndCommitted,
            ],
        ),
        (
            "a pure tool's identical call in a later step is answered from the cache (R-TOOL-6): commit_cached",
            Setup {
                pure_calculator: true,
                ..Setup::default()
            },
            vec![
                START,
                OPEN,
                tool_call(calc),
                DONE,
                Action::ToolFinished(IdPick::Tracked(0), true),
                OPEN,
                tool_call(calc),
                DONE,
                OPEN,
                text(1),
                DONE,
                Action::RunEndCommitted,
            ],
        ),
        (
            "happy path with a tool: init_start, planning_execute, streaming_*, tools_finished, observing_continue, observing_complete",
            Setup::default(),
            vec![
                START,
                OPEN,
                text(0),
                text(0),
                Action::Delta(AttemptPick::Current, SeqPick::Repeat, DeltaPick::Text(1)),
                tool_call(calc),
                DONE,
                Action::ToolFinished(IdPick::Tracked(0), true),
                OPEN,
                text(1),
                DONE,
                Action::RunEndCommitted,
            ],
        ),
        (
            "hooks gate each call (R-EXT-1): tools_gate_* and their stale rows",
            Setup {
                gate_tools: true,
                ..Setup::default()
            },
            vec![
                START,
                OPEN,
                tool_call(calc),
                tool_call(calc),
                tool_call(calc),
                tool_call(calc),
                DONE,
                Action::Gate(IdPick::Tracked(0), GatePick::Allow),
                Action::Gate(IdPick::Tracked(0), GatePick::Modify),
                Action::Gate(IdPick::Tracked(0), GatePick::Block),
                Action::Gate(IdPick::Tracked(0), GatePick::Ask),
                Action::Gate(IdPick::Unknown, GatePick::Allow),
                Action::Gate(IdPick::Unknown, GatePick::Modify),
                Action::Gate(IdPick::Unknown, GatePick::Block),
                Action::Gate(IdPick::Unknown, GatePick::Ask),
            ],
        ),
        (
            "a call whose arguments break the tool's schema fails at commit, its neighbour runs (R-TOOL-1): commit_schema_invalid",
            Setup::default(),
            vec![
                START,
                OPEN,
                Action::Delta(
                    AttemptPick::Current,
                    SeqPick::Next,
                    DeltaPick::ToolCall(calc, ArgsPick::SchemaViolating),
                ),
                tool_call(calc),
                DONE,
                Action::ToolFinished(IdPick::Tracked(0), true),
            ],
        ),
        (
            "the end is committed before it is reported: active_abort, finishing_abort, finishing_aborted",
            Setup::default(),
            vec![START, OPEN, Action::Abort, Action::Abort, Action::RunEndCommitted],
        ),
        (
            "a custom retry decider (R-EXT-3): requesting_retry on a 401 it retries once, requesting_fail on the second",
            Setup {
                retry_decider: true,
                ..Setup::default()
            },
            vec![
                START,
                Action::TransportError(AttemptPick::Current, ErrPick::Auth),
                Action::TimerElapsed(true),
                Action::TransportError(AttemptPick::Current, ErrPick::Auth),
                Action::RunEndCommitted,
            ],
        ),
        (
            "the run-end entry cannot be stored: executing_error, finishing_store_failed",
            Setup::default(),
            vec![
                START,
                Action::TransportError(AttemptPick::Current, ErrPick::Auth),
                Action::StoreWriteFailed,
            ],
        ),
        (
            "stale events: live_stale_*, retrying_timer_stale, tools_finished_stale",
            Setup::default(),
            vec![
                START,
                Action::StreamOpened(AttemptPick::OtherRun),
                Action::RequestRewritten(AttemptPick::OtherStep),
                OPEN,
                Action::Delta(AttemptPick::PrevAttempt, SeqPick::Next, DeltaPick::Text(0)),
                Action::Done(AttemptPick::OtherStep),
                Action::TransportError(AttemptPick::OtherStep, ErrPick::Server),
                Action::ContextOverflow(AttemptPick::OtherRun),
                Action::StreamStalled(AttemptPick::PrevAttempt),
                Action::TransportError(AttemptPick::Current, ErrPick::RateLimited),
                Action::TimerElapsed(false),
                Action::TimerElapsed(true),
                OPEN,
                tool_call(calc),
                DONE,
                Action::ToolFinished(IdPick::Unknown, true),
                Action::ToolFinished(IdPick::Tracked(0), false),
                Action::Abort,
            ],
        ),
        (
            "retries exhausted and stalls: requesting_retry, requesting_fail, requesting_stall_*, executing_error",
            Setup {
                max_retries: 1,
                ..Setup::default()
            },
            vec![
                START,
                Action::StreamStalled(AttemptPick::Current),
                Action::TimerElapsed(true),
                OPEN,
                Action::StreamStalled(AttemptPick::Current),
            ],
        ),
        (
            "a failed step on the fallback model, then on nothing left: executing_fallback, executing_error",
            Setup {
                fallback: true,
                ..Setup::default()
            },
            vec![
                START,
                Action::TransportError(AttemptPick::Current, ErrPick::Auth),
                OPEN,
                Action::TransportError(AttemptPick::Current, ErrPick::Auth),
            ],
        ),
        (
            "a tool-call limit asks for a final answer: planning_limit_final",
            Setup {
                tool_call_limit: Some(agentloop_core::react::LimitAction::FinalAnswer),
                doom_loop: false,
                ..Setup::default()
            },
            vec![
                START,
                OPEN,
                tool_call(calc),
                tool_call(calc),
                DONE,
                Action::ToolFinished(IdPick::Tracked(0), true),
                Action::ToolFinished(IdPick::Tracked(1), true),
                OPEN,
                text(0),
                DONE,
                Action::RunEndCommitted,
            ],
        ),
        (
            "a tool-call limit stops the run: planning_limit_stop",
            Setup {
                tool_call_limit: Some(agentloop_core::react::LimitAction::Stop),
                doom_loop: false,
                ..Setup::default()
            },
            vec![
                START,
                OPEN,
                tool_call(calc),
                tool_call(calc),
                DONE,
                Action::ToolFinished(IdPick::Tracked(0), true),
                Action::ToolFinished(IdPick::Tracked(1), true),
                Action::RunEndCommitted,
            ],
        ),
        (
            "a typed answer rejected once, then accepted: observing_retry_output",
            Setup {
                typed_output: Some(1),
                ..Setup::default()
            },
            vec![START, OPEN, text(0), DONE, OPEN, text(1), DONE, Action::RunEndCommitted],
        ),
        (
            "a typed answer rejected past its retries: observing_output_invalid",
            Setup {
                typed_output: Some(2),
                ..Setup::default()
            },
            vec![START, OPEN, text(0), DONE, OPEN, text(1), DONE, Action::RunEndCommitted],
        ),
        (
            "fatal error: requesting_fail",
            Setup::default(),
            vec![
                START,
                Action::TransportError(AttemptPick::Current, ErrPick::Auth),
            ],
        ),
        (
            "overflow: requesting_overflow, executing_overflow, compacting_done, compacting_failed",
            Setup::default(),
            vec![
                START,
                Action::ContextOverflow(AttemptPick::Current),
                Action::CompactionDone,
                Action::ContextOverflow(AttemptPick::Current),
                Action::CompactionFailed,
            ],
        ),
        (
            "title: active_title (a title, none), finishing_title",
            Setup {
                title: true,
                ..Setup::default()
            },
            vec![
                START,
                Action::TitleReady(true),
                Action::TitleReady(false),
                OPEN,
                text(0),
                DONE,
                Action::TitleReady(true),
                Action::RunEndCommitted,
            ],
        ),
        (
            "a compaction that removes nothing while the context fits: compacting_failed_fits",
            Setup {
                compact_threshold: Some(0),
                ..Setup::default()
            },
            vec![START, Action::CompactionFailed, OPEN, text(0), DONE],
        ),
        (
            "compaction vetoed: compacting_vetoed (threshold), compacting_vetoed_required (overflow)",
            Setup {
                compact_threshold: Some(0),
                ..Setup::default()
            },
            vec![
                START,
                Action::CompactionVetoed,
                Action::ContextOverflow(AttemptPick::Current),
                Action::CompactionVetoed,
            ],
        ),
        (
            "approvals: running_settle_approval, awaiting_*, running_settle_wait, running_settle_done",
            Setup {
                parallel_tools: false,
                ..Setup::default()
            },
            vec![
                START,
                OPEN,
                tool_call(shell),
                tool_call(shell),
                tool_call(shell),
                tool_call(shell),
                tool_call(shell),
                tool_call(calc),
                DONE,
                Action::Approval(IdPick::Unknown, DecisionPick::Approved),
                Action::Approval(IdPick::Unknown, DecisionPick::ApprovedAlways),
                Action::Approval(IdPick::Unknown, DecisionPick::Rejected),
                Action::Approval(IdPick::Unknown, DecisionPick::Modified),
                Action::Approval(IdPick::Unknown, DecisionPick::TimedOut),
                // A wrong timer id next to the approval timer's: awaiting_timed_out_stale;
                // then the live timers fire (the running calculator's deadline, the approval
                // timer): tools_deadline, awaiting_timed_out_stop (R-CTL-4).
                Action::TimerElapsed(false),
                Action::TimerElapsed(true),
                Action::TimerElapsed(true),
                Action::Approval(IdPick::Tracked(0), DecisionPick::Approved),
                Action::ToolFinished(IdPick::Tracked(0), true),
                Action::ToolFinished(IdPick::Tracked(0), true),
                Action::Approval(IdPick::Tracked(0), DecisionPick::Rejected),
                Action::Approval(IdPick::Tracked(0), DecisionPick::Modified),
                Action::ToolFinished(IdPick::Tracked(0), true),
                Action::Approval(IdPick::Tracked(0), DecisionPick::ApprovedAlways),
                Action::ToolFinished(IdPick::Tracked(0), true),
                Action::ToolFinished(IdPick::Tracked(0), true),
            ],
        ),
        (
            "approval timeout with auto_resume: awaiting_timed_out (R-CTL-4)",
            Setup {
                auto_resume: true,
                ..Setup::default()
            },
            vec![
                START,
                OPEN,
                tool_call(shell),
                DONE,
                Action::TimerElapsed(true),
            ],
        ),
        (
            "compaction at the first plan and after observing: planning_compact, observing_compact",
            compact,
            vec![
                Action::Start { long_history: true },
                Action::CompactionDone,
                OPEN,
                tool_call(calc),
                DONE,
                Action::ToolFinished(IdPick::Tracked(0), true),
                Action::CompactionDone,
                OPEN,
                text(0),
                DONE,
            ],
        ),
        (
            "max steps: planning_max_steps",
            Setup {
                max_steps: 1,
                ..Setup::default()
            },
            vec![START, OPEN, tool_call(calc), DONE],
        ),
        (
            "stop decision: observing_stop",
            stop,
            vec![
                START,
                OPEN,
                tool_call(calc),
                DONE,
                Action::ToolFinished(IdPick::Tracked(0), true),
                OPEN,
                tool_call(calc),
                DONE,
                Action::ToolFinished(IdPick::Tracked(0), true),
            ],
        ),
        (
            "abort draining immune tools: tools_abort_drain, executing_abort_drain, draining_settle_*, executing_aborted",
            Setup {
                immune: true,
                ..Setup::default()
            },
            vec![
                START,
                OPEN,
                tool_call(ToolPick::Known(1)),
                tool_call(ToolPick::Known(1)),
                DONE,
                Action::AbortKill(0),
                Action::ToolFinished(IdPick::Tracked(0), true),
                Action::ToolFinished(IdPick::Tracked(0), true),
            ],
        ),
        (
            "steering and live changes: active_steer, tools_steer_skip, active_switch_model, active_set_tools",
            Setup {
                skip_remaining: true,
                ..Setup::default()
            },
            vec![
                START,
                Action::SwitchModel,
                Action::SetTools(0b011),
                OPEN,
                tool_call(calc),
                tool_call(calc),
                DONE,
                Action::Steer,
            ],
        ),
        (
            "a subtask runs before the next model step: active_subtask, planning_subtask",
            Setup::default(),
            vec![
                Action::Subtask,
                START,
                Action::ToolFinished(IdPick::Tracked(0), true),
            ],
        ),
        (
            "a call's lifecycle ends before it starts: tool_call abort_unstarted",
            Setup {
                parallel_tools: false,
                ..Setup::default()
            },
            vec![
                START,
                OPEN,
                tool_call(calc),
                tool_call(shell),
                DONE,
                Action::Abort,
            ],
        ),
        (
            "steering skips what it may: tool_call skip_immune, skip_unstarted",
            Setup {
                parallel_tools: false,
                skip_remaining: true,
                immune: true,
                ..Setup::default()
            },
            vec![
                START,
                OPEN,
                tool_call(ToolPick::Known(1)),
                tool_call(calc),
                DONE,
                Action::Steer,
            ],
        ),
        (
            "approved always: tool_call whitelisted",
            Setup::default(),
            vec![
                START,
                OPEN,
                tool_call(shell),
                tool_call(shell),
                DONE,
                Action::Approval(IdPick::Tracked(0), DecisionPick::ApprovedAlways),
            ],
        ),
        (
            "a doom loop refused: tool_call commit_loop_refused",
            Setup {
                doom_loop_stop: true,
                ..Setup::default()
            },
            vec![
                START,
                OPEN,
                tool_call(calc),
                tool_call(calc),
                tool_call(calc),
                DONE,
            ],
        ),
        (
            "the run's deadline: active_run_deadline (then active_abort), finishing_run_deadline",
            Setup::default(),
            vec![
                START,
                OPEN,
                Action::RunDeadline,
                Action::RunDeadline,
                Action::RunEndCommitted,
            ],
        ),
        (
            "a typed answer rejected on the last step while steering waits: planning_max_steps_rejected",
            Setup {
                max_steps: 2,
                typed_output: Some(2),
                ..Setup::default()
            },
            vec![
                Action::Start {
                    long_history: false,
                },
                Action::StreamOpened(AttemptPick::Current),
                Action::Delta(
                    AttemptPick::Current,
                    SeqPick::Next,
                    DeltaPick::ToolCall(ToolPick::Known(0), ArgsPick::Invalid),
                ),
                Action::Done(AttemptPick::Current),
                Action::StreamOpened(AttemptPick::Current),
                Action::Steer,
                Action::Done(AttemptPick::Current),
                Action::RunEndCommitted,
            ],
        ),
        (
            "resume with a call already answered: tool_call restore_result",
            Setup::default(),
            vec![Action::Resume {
                pending: true,
                steps: 2,
            }],
        ),
        (
            "resume with pending tools: init_resume_tools, idle_resume",
            Setup::default(),
            vec![Action::Resume {
                pending: true,
                steps: 1,
            }],
        ),
        (
            "resume without pending tools: init_resume; store failure: active_store_failed",
            Setup::default(),
            vec![
                Action::Resume {
                    pending: false,
                    steps: 1,
                },
                Action::StoreWriteFailed,
            ],
        ),
    ]
}

fn table<R: std::fmt::Debug + Ord + Copy>(
    name: &str,
    all: &[R],
    id: impl Fn(R) -> &'static str,
    counts: &BTreeMap<R, usize>,
) -> Vec<&'static str> {
    let covered = all.iter().filter(|r| counts.contains_key(r)).count();
    println!(
        "\n{name}: {covered}/{} rows covered ({:.1}%)",
        all.len(),
        100.0 * covered as f64 / all.len() as f64
    );
    println!("  {:<34} {:>8}", "row", "count");
    for r in all {
        println!(
            "  {:<34} {:>8}",
            id(*r),
            counts
                .get(r)
                .map_or("MISSING".to_string(), |n| n.to_string())
        );
    }
    all.iter()
        .filter(|r| !counts.contains_key(r))
        .map(|r| id(*r))
        .collect()
}

#[test]
fn every_chart_row_is_taken() {
    let mut tally = Tally::default();
    for (name, setup, actions) in scenarios() {
        let mut h = RunHarness::new(setup);
        for a in actions {
            let _ = h.act(a);
        }
        assert!(
            h.events > 0 && !h.react_rows.is_empty(),
            "scenario {name} did nothing"
        );
        tally.add_run(&h);
    }
    // A seeded walk: mostly effect-following, some noise, across setups.
    let mut rng = SplitMix(0x5eed);
    for _ in 0..150 {
        let mut h = RunHarness::new(Setup::from_byte(rng.byte()));
        h.keep_log = false;
        for _ in 0..200 {
            if h.run.is_terminal() {
                break;
            }
            let _ = h.act(Action::Smart(rng.byte()));
        }
        tally.add_run(&h);
    }
    // The standalone inner machine (its rows count too).
    for _ in 0..50 {
        let mut h = ProcessHarness::new(Setup::from_byte(rng.byte()));
        h.resume_only_idle = true;
        for _ in 0..100 {
            if h.process.state().is_terminal() {
                break;
            }
            let _ = h.act(Action::Smart(rng.byte()));
        }
        tally.add_process(&h);
    }
    let missing_react = table("react chart", ReactRow::ALL, |r| r.spec().id, &tally.react);
    let missing_process = table(
        "process chart",
        ProcessRow::ALL,
        |r| r.spec().id,
        &tally.process,
    );
    let missing_calls = table(
        "tool-call chart",
        ToolCallRow::ALL,
        |r| r.spec().id,
        &tally.tool_call,
    );
    // The session machine's rows, from its scenarios (session_machine.rs).
    let session = crate::session_machine::rows_taken();
    let missing_session = table("session chart", SessionRow::ALL, |r| r.spec().id, &session);
    assert!(
        missing_react.is_empty()
            && missing_process.is_empty()
            && missing_calls.is_empty()
            && missing_session.is_empty(),
        "chart rows never taken: react {missing_react:?}, process {missing_process:?}, \
         tool_call {missing_calls:?}, session {missing_session:?}"
    );
}
