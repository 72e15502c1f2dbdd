//! Bytes → harness actions: the decoding the fuzz targets use, shared with
//! `tests/fuzz_corpus_core.rs` so every corpus file also runs as an ordinary test on stable.
//!
//! The first byte picks the [`Setup`]; every following byte (or pair) is one [`Action`]. Bytes
//! below 160 are `Smart` (follow the effects), the rest decode into noise: any event, with
//! current or stale ids. Every byte string decodes to something, so the fuzzer never wastes
//! inputs.

use crate::harness::GatePick;
use crate::harness::{
    Action, ArgsPick, AttemptPick, DecisionPick, DeltaPick, ErrPick, IdPick, ProcessHarness,
    RunHarness, SeqPick, Setup, ToolPick,
};

/// Reads bytes, yielding 0 once exhausted.
pub struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    /// Over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data, pos: 0 }
    }

    /// Whether bytes are left.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    /// The next byte (0 past the end).
    pub fn next_byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
}

fn attempt(b: u8) -> AttemptPick {
    match b % 8 {
        0..=3 => AttemptPick::Current,
        4 => AttemptPick::PrevAttempt,
        5 => AttemptPick::NextAttempt,
        6 => AttemptPick::OtherStep,
        _ => AttemptPick::OtherRun,
    }
}

fn delta(b: u8) -> DeltaPick {
    let v = b >> 3;
    match b % 8 {
        0..=2 => DeltaPick::Text(v),
        3 => DeltaPick::Reasoning(v),
        4 => DeltaPick::ToolCall(
            if v.is_multiple_of(4) {
                ToolPick::Unknown
            } else if v % 8 == 1 {
                ToolPick::AskUser
            } else {
                ToolPick::Known(v)
            },
            match v % 3 {
                0 => ArgsPick::Valid,
                1 => ArgsPick::Invalid,
                _ => ArgsPick::Empty,
            },
        ),
        5 => DeltaPick::ToolInputStart,
        6 => DeltaPick::FinishStep {
            length: v.is_multiple_of(2),
        },
        _ if v.is_multiple_of(2) => DeltaPick::ToolInputDelta,
        _ => DeltaPick::Finish,
    }
}

fn decision(b: u8) -> DecisionPick {
    match b % 5 {
        0 => DecisionPick::Approved,
        1 => DecisionPick::ApprovedAlways,
        2 => DecisionPick::Rejected,
        3 => DecisionPick::TimedOut,
        _ => DecisionPick::Modified,
    }
}

/// Decodes one action.
pub fn action(bytes: &mut Bytes<'_>) -> Action {
    let b = bytes.next_byte();
    if b < 160 {
        return Action::Smart(b);
    }
    let p = bytes.next_byte();
    match b % 16 {
        0 => Action::Start {
            long_history: p.is_multiple_of(2),
        },
        1 => Action::Resume {
            pending: p.is_multiple_of(2),
            steps: p,
        },
        2 => Action::StreamOpened(attempt(p)),
        3 | 4 => Action::Delta(
            attempt(p),
            match p >> 6 {
                0 | 1 => SeqPick::Next,
                2 => SeqPick::Repeat,
                _ => SeqPick::Any(p),
            },
            delta(bytes.next_byte()),
        ),
        5 => Action::Done(attempt(p)),
        6 => Action::TransportError(
            attempt(p),
            match p >> 6 {
                0 | 1 => ErrPick::RateLimited,
                2 => ErrPick::Server,
                _ => ErrPick::Auth,
            },
        ),
        7 => Action::ContextOverflow(attempt(p)),
        8 => Action::StreamStalled(attempt(p)),
        9 => Action::TimerElapsed(!p.is_multiple_of(4)),
        10 => Action::ToolFinished(
            if p.is_multiple_of(5) {
                IdPick::Unknown
            } else {
                IdPick::Tracked(p)
            },
            !p.is_multiple_of(3),
        ),
        11 => Action::Approval(
            if p.is_multiple_of(5) {
                IdPick::Unknown
            } else {
                IdPick::Tracked(p)
            },
            decision(p >> 3),
        ),
        12 => match p % 6 {
            0 | 1 => Action::CompactionDone,
            2 => Action::Steer,
            3 => Action::SwitchModel,
            4 => Action::Gate(
                if p.is_multiple_of(5) {
                    IdPick::Unknown
                } else {
                    IdPick::Tracked(p)
                },
                GatePick::from_byte(p >> 3),
            ),
            _ => Action::SetTools(p >> 3),
        },
        13 if p % 4 == 3 => Action::UserAnswered(
            if p.is_multiple_of(5) {
                IdPick::Unknown
            } else {
                IdPick::Tracked(p)
            },
            !p.is_multiple_of(3),
        ),
        13 if p % 4 == 1 => Action::CompactionVetoed,
        13 => Action::CompactionFailed,
        14 if p.is_multiple_of(2) => Action::Abort,
        14 => Action::AbortKill(p >> 1),
        _ if p.is_multiple_of(2) => Action::RunEndCommitted,
        _ => Action::StoreWriteFailed,
    }
}

/// Decodes a whole input: the setup and at most `max` actions.
pub fn decode(data: &[u8], max: usize) -> (Setup, Vec<Action>) {
    let mut bytes = Bytes::new(data);
    let setup = Setup::from_byte(bytes.next_byte());
    let mut actions = Vec::new();
    while !bytes.is_empty() && actions.len() < max {
        actions.push(action(&mut bytes));
    }
    (setup, actions)
}

/// The `react_events` target: decodes and drives a `Run`, checking every step.
pub fn react_events(data: &[u8]) -> RunHarness {
    let (setup, actions) = decode(data, 4096);
    let mut h = RunHarness::new(setup);
    h.keep_log = false;
    for a in actions {
        let _ = h.act(a);
    }
    h
}

/// The `process_events` target: decodes and drives a standalone `Process`, checking every step.
pub fn process_events(data: &[u8]) -> ProcessHarness {
    let (setup, actions) = decode(data, 4096);
    let mut h = ProcessHarness::new(setup);
    for a in actions {
        let _ = h.act(a);
    }
    h
}

/// The `trace_reader` target: parses arbitrary text as a trace and replays it when it parses.
/// Returns whether it parsed (and names a known decider) and, if so, whether replay
/// reproduced it.
pub fn trace_reader(data: &[u8]) -> Option<bool> {
    let text = std::str::from_utf8(data).ok()?;
    let trace = agentloop_core::trace::Trace::parse(text, "fuzz").ok()?;
    agentloop_core::trace::replay_with(&trace, &crate::harness::deciders())
        .ok()
        .map(|d| d.is_none())
}

/// The `inspect_log` target: reads arbitrary bytes as an Inspect eval log (a `.eval` zip or its
/// JSON, at most 1 MiB inflated) and imports its samples; every imported trace must replay
/// identically. Returns how many samples were imported (`None`: the bytes were refused, as a
/// typed error).
pub fn inspect_log(data: &[u8]) -> Option<usize> {
    use agentloop_trace_tools::import::ImportOptions;
    use agentloop_trace_tools::import_inspect::{inspect_eval, read_log};
    let log = read_log(data, 1 << 20).ok()?;
    let samples = inspect_eval(&log, &ImportOptions::default()).ok()?;
    for s in &samples {
        assert_eq!(
            agentloop_core::trace::replay(&s.imported.trace),
            None,
            "an imported sample must replay identically"
        );
    }
    Some(samples.len())
}
