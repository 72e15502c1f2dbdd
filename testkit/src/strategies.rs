//! Proptest strategies for [`Action`] sequences: mostly `Smart` (follow the effects, so deep
//! states are reached) mixed with noise (any event, current or stale ids, invalid in the state).

use agentloop_core::react::LimitAction;
use proptest::prelude::*;

use crate::harness::GatePick;
use crate::harness::{
    Action, ArgsPick, AttemptPick, DecisionPick, DeltaPick, ErrPick, IdPick, SeqPick, Setup,
    ToolPick,
};

/// Any setup.
pub fn setup() -> impl Strategy<Value = Setup> {
    (
        any::<bool>(),
        0u32..=3,
        prop_oneof![Just(None), Just(Some(4usize)), Just(Some(7usize))],
        1u32..=5,
        prop::bool::weighted(0.15),
        (
            any::<bool>(),
            any::<bool>(),
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.3),
            prop::bool::weighted(0.15),
            prop::bool::weighted(0.3),
            prop_oneof![
                6 => Just(None),
                1 => Just(Some(LimitAction::FinalAnswer)),
                1 => Just(Some(LimitAction::Stop)),
            ],
            prop_oneof![
                6 => Just(None),
                1 => Just(Some(1u32)),
                1 => Just(Some(2u32)),
            ],
            any::<bool>(),
            prop::bool::weighted(0.3),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.2),
        ),
        (prop::bool::weighted(0.2), prop::bool::weighted(0.2)),
    )
        .prop_map(
            |(
                parallel_tools,
                max_retries,
                compact_threshold,
                max_steps,
                stop_decider,
                (
                    skip_remaining,
                    immune,
                    doom_loop,
                    gate_tools,
                    doom_loop_stop,
                    fallback,
                    tool_call_limit,
                    typed_output,
                    auto_resume,
                    pure_calculator,
                    ask_user,
                    retry_decider,
                ),
                (title, tool_rules),
            )| Setup {
                parallel_tools,
                max_retries,
                compact_threshold,
                max_steps,
                stop_decider,
                skip_remaining,
                immune,
                doom_loop,
                doom_loop_stop,
                gate_tools,
                fallback,
                tool_call_limit,
                typed_output,
                auto_resume,
                pure_calculator,
                ask_user,
                title,
                tool_rules,
                retry_decider,
            },
        )
}

fn attempt() -> impl Strategy<Value = AttemptPick> {
    prop_oneof![
        6 => Just(AttemptPick::Current),
        1 => Just(AttemptPick::PrevAttempt),
        1 => Just(AttemptPick::NextAttempt),
        1 => Just(AttemptPick::OtherStep),
        1 => Just(AttemptPick::OtherRun),
    ]
}

fn seq() -> impl Strategy<Value = SeqPick> {
    prop_oneof![
        6 => Just(SeqPick::Next),
        3 => Just(SeqPick::Repeat),
        1 => any::<u8>().prop_map(SeqPick::Any),
    ]
}

fn delta() -> impl Strategy<Value = DeltaPick> {
    let tool = prop_oneof![
        4 => any::<u8>().prop_map(ToolPick::Known),
        1 => Just(ToolPick::Unknown),
        1 => Just(ToolPick::AskUser),
    ];
    let args = prop_oneof![
        4 => Just(ArgsPick::Valid),
        1 => Just(ArgsPick::Invalid),
        1 => Just(ArgsPick::Empty),
        1 => Just(ArgsPick::SchemaViolating),
    ];
    prop_oneof![
        6 => any::<u8>().prop_map(DeltaPick::Text),
        1 => any::<u8>().prop_map(DeltaPick::Reasoning),
        3 => (tool, args).prop_map(|(t, a)| DeltaPick::ToolCall(t, a)),
        1 => Just(DeltaPick::ToolInputStart),
        1 => Just(DeltaPick::ToolInputDelta),
        1 => any::<bool>().prop_map(|length| DeltaPick::FinishStep { length }),
        1 => Just(DeltaPick::Finish),
    ]
}

fn id() -> impl Strategy<Value = IdPick> {
    prop_oneof![4 => any::<u8>().prop_map(IdPick::Tracked), 1 => Just(IdPick::Unknown)]
}

fn err() -> impl Strategy<Value = ErrPick> {
    prop_oneof![
        Just(ErrPick::RateLimited),
        Just(ErrPick::Server),
        Just(ErrPick::Auth)
    ]
}

fn decision() -> impl Strategy<Value = DecisionPick> {
    prop_oneof![
        Just(DecisionPick::Approved),
        Just(DecisionPick::ApprovedAlways),
        Just(DecisionPick::Rejected),
        Just(DecisionPick::Modified),
        Just(DecisionPick::TimedOut),
    ]
}

/// Any single noise action: every event kind, valid or not in the current state.
pub fn noise() -> impl Strategy<Value = Action> {
    prop_oneof![
        1 => any::<bool>().prop_map(|long_history| Action::Start { long_history }),
        1 => (any::<bool>(), any::<u8>()).prop_map(|(pending, steps)| Action::Resume { pending, steps }),
        1 => attempt().prop_map(Action::StreamOpened),
        3 => (attempt(), seq(), delta()).prop_map(|(a, s, d)| Action::Delta(a, s, d)),
        1 => attempt().prop_map(Action::Done),
        1 => (attempt(), err()).prop_map(|(a, e)| Action::TransportError(a, e)),
        1 => attempt().prop_map(Action::ContextOverflow),
        1 => attempt().prop_map(Action::StreamStalled),
        1 => any::<bool>().prop_map(Action::TimerElapsed),
        2 => (id(), any::<bool>()).prop_map(|(i, ok)| Action::ToolFinished(i, ok)),
        2 => (id(), decision()).prop_map(|(i, d)| Action::Approval(i, d)),
        1 => (id(), any::<u8>()).prop_map(|(i, g)| Action::Gate(i, GatePick::from_byte(g))),
        1 => (id(), any::<bool>()).prop_map(|(i, answered)| Action::UserAnswered(i, answered)),
        1 => Just(Action::CompactionDone),
        1 => Just(Action::CompactionFailed),
        1 => Just(Action::CompactionVetoed),
        1 => Just(Action::Abort),
        1 => any::<u8>().prop_map(Action::AbortKill),
        1 => Just(Action::Steer),
        1 => Just(Action::SwitchModel),
        1 => any::<u8>().prop_map(Action::SetTools),
        1 => any::<bool>().prop_map(Action::TitleReady),
        1 => Just(Action::StoreWriteFailed),
        1 => Just(Action::RunEndCommitted),
    ]
}

/// One action: `smart_weight` in 10 follow the effects, the rest are noise.
pub fn action(smart_weight: u32) -> impl Strategy<Value = Action> {
    prop_oneof![
        smart_weight => any::<u8>().prop_map(Action::Smart),
        10 - smart_weight => noise(),
    ]
}

/// A sequence of up to `len` actions.
pub fn actions(smart_weight: u32, len: usize) -> impl Strategy<Value = Vec<Action>> {
    prop::collection::vec(action(smart_weight), 1..len)
}
