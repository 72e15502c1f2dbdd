//! Runs the models breadth-first to a depth and reports, per model, every property's verdict,
//! the states explored, the depth reached and the time taken.

use std::fmt::Write as _;
use std::hash::Hash;
use std::time::{Duration, Instant};

use agentloop_testkit::harness::Setup;
use stateright::{Checker, Expectation, Model};

use crate::explored::Explored;
use crate::run_model::RunModel;
use crate::session_model::SessionModel;

/// A property's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Held in every state explored (`always`), on every maximal path (`eventually`), or an
    /// example was found (`sometimes`).
    Holds,
    /// A counterexample: the inputs from the initial state, and what went wrong.
    Violated {
        /// The input sequence, as the model's actions print.
        inputs: Vec<String>,
        /// What the property saw.
        detail: String,
    },
    /// A `sometimes` property found no example within the bound (the model does not reach
    /// what it should).
    Unreached,
}

/// The result of checking one model.
#[derive(Clone, Debug)]
pub struct Report {
    /// The model's name.
    pub name: String,
    /// Each property with its kind and verdict, in the model's order.
    pub properties: Vec<(&'static str, Expectation, Verdict)>,
    /// Distinct states explored.
    pub unique_states: usize,
    /// States generated (with repeats).
    pub generated: usize,
    /// The deepest state checked, in inputs from the initial state.
    pub depth: usize,
    /// Wall time.
    pub elapsed: Duration,
}

impl Report {
    /// Whether every property holds.
    pub fn ok(&self) -> bool {
        self.properties.iter().all(|(_, _, v)| *v == Verdict::Holds)
    }

    /// The report as text: a header line, then one line per property, with counterexamples.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{}: {} properties, {} states ({} generated), depth {} inputs, {:.1} s: {}",
            self.name,
            self.properties.len(),
            self.unique_states,
            self.generated,
            self.depth,
            self.elapsed.as_secs_f64(),
            if self.ok() { "ok" } else { "FAILED" }
        );
        for (name, kind, verdict) in &self.properties {
            let kind = match kind {
                Expectation::Always => "always",
                Expectation::Eventually => "eventually",
                Expectation::Sometimes => "sometimes",
            };
            match verdict {
                Verdict::Holds => {
                    let _ = writeln!(s, "  ok        {kind:<10} {name}");
                }
                Verdict::Unreached => {
                    let _ = writeln!(
                        s,
                        "  UNREACHED {kind:<10} {name} (no example within the bound)"
                    );
                }
                Verdict::Violated { inputs, detail } => {
                    let _ = writeln!(
                        s,
                        "  VIOLATED  {kind:<10} {name}\n    inputs: {}\n    {detail}",
                        inputs.join(", ")
                    );
                }
            }
        }
        s
    }
}

/// How far to check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// Well under a minute (the chart-mutation script's check, `cargo test`).
    Quick,
    /// CI's bound: about three minutes on two cores.
    Ci,
    /// Further (`--deep`).
    Deep,
}

/// A run configuration checked, with its name and depth for each bound.
#[derive(Clone, Copy, Debug)]
pub struct RunConfigCase {
    /// Its name in the report.
    pub name: &'static str,
    /// The knobs.
    pub setup: Setup,
    /// The `sometimes` examples it cannot reach by design.
    pub unreachable: &'static [&'static str],
}

/// The run configurations every bound checks: sequential and parallel tools, retries,
/// compaction, steering that skips the rest of a batch, immune tools, typed answers,
/// questions to the person and `before_tool` gates.
pub fn run_cases() -> Vec<RunConfigCase> {
    let base = Setup {
        max_steps: 2,
        max_retries: 1,
        doom_loop: false,
        ..Setup::default()
    };
    vec![
        RunConfigCase {
            name: "run (parallel tools, immune read_file, 2 steps, 1 retry)",
            setup: base,
            unreachable: &[],
        },
        RunConfigCase {
            name: "run (sequential tools, compaction above 3 messages, skip on steer)",
            setup: Setup {
                parallel_tools: false,
                compact_threshold: Some(3),
                skip_remaining: true,
                immune: false,
                ..base
            },
            unreachable: &[],
        },
        RunConfigCase {
            name: "run (3 steps, no retries, auto-resume after a rejection)",
            setup: Setup {
                max_steps: 3,
                max_retries: 0,
                auto_resume: true,
                ..base
            },
            unreachable: &[],
        },
        RunConfigCase {
            name: "run (typed answer rejected twice, ask_user, before_tool gates, no retries)",
            setup: Setup {
                max_retries: 0,
                typed_output: Some(2),
                ask_user: true,
                gate_tools: true,
                ..base
            },
            // Every final answer of two steps is rejected: a run that ran a tool in its first
            // step has only its last step to answer in, and that answer is rejected.
            unreachable: &[crate::run_model::SOMETIMES[1]],
        },
    ]
}

/// The depths, in inputs from the initial state, of (the run models, the session model).
pub fn depths(bound: Bound) -> (usize, usize) {
    match bound {
        Bound::Quick => (8, 10),
        Bound::Ci => (10, 14),
        Bound::Deep => (12, 18),
    }
}

/// stateright's depth counts the initial state as 1 and does not check the states it
/// generates at the target: states up to `inputs` inputs deep are checked with this target.
fn target(inputs: usize) -> usize {
    inputs + 2
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A model whose states are [`Explored`] input sequences and that can say why a property
/// fails in a state.
pub trait Explains: Model<State = Explored<Self::Input, Self::Key>, Action = Self::Input> {
    /// The input.
    type Input: Clone + PartialEq + std::fmt::Debug;
    /// The fingerprint.
    type Key: Clone + PartialEq + Hash + std::fmt::Debug;
    /// Why `property` fails in `state` (`Ok` if it holds there).
    fn explain(&self, property: &'static str, state: &Self::State) -> Result<(), String>;
}

impl Explains for RunModel {
    type Input = crate::run_model::Input;
    type Key = crate::run_model::Key;
    fn explain(&self, property: &'static str, state: &Self::State) -> Result<(), String> {
        self.probe(property, state)
    }
}

impl Explains for SessionModel {
    type Input = crate::session_model::Command;
    type Key = crate::session_model::Key;
    fn explain(&self, property: &'static str, state: &Self::State) -> Result<(), String> {
        self.probe(property, state)
    }
}

/// Checks `model` breadth-first to `depth` inputs.
pub fn check<M>(name: &str, model: M, depth: usize) -> Report
where
    M: Explains + Clone + Send + Sync + 'static,
    M::Input: Send + Sync + 'static,
    M::Key: Send + Sync + 'static,
{
    // The checker reports its own wall time; no machine sees a clock.
    #[allow(clippy::disallowed_methods)]
    let started = Instant::now();
    let checker = model
        .clone()
        .checker()
        .threads(threads())
        .target_max_depth(target(depth))
        .spawn_bfs()
        .join();
    let discoveries = checker.discoveries();
    let properties = model
        .properties()
        .into_iter()
        .map(|p| {
            let verdict = match (&p.expectation, discoveries.get(p.name)) {
                (Expectation::Sometimes, Some(_)) => Verdict::Holds,
                (Expectation::Sometimes, None) => Verdict::Unreached,
                (_, None) => Verdict::Holds,
                (_, Some(path)) => {
                    let last = path.last_state();
                    Verdict::Violated {
                        inputs: last
                            .inputs_to(p.name)
                            .iter()
                            .map(|i| format!("{i:?}"))
                            .collect(),
                        detail: match model.explain(p.name, last) {
                            Err(why) => why,
                            Ok(()) => "the path ends here without the property".to_string(),
                        },
                    }
                }
            };
            (p.name, p.expectation.clone(), verdict)
        })
        .collect();
    Report {
        name: name.to_string(),
        properties,
        unique_states: checker.unique_state_count(),
        generated: checker.state_count(),
        depth: checker.max_depth().saturating_sub(1).min(depth),
        elapsed: started.elapsed(),
    }
}

/// Checks one run configuration to `depth` inputs.
pub fn check_run(name: &str, setup: Setup, depth: usize) -> Report {
    check(name, RunModel::new(setup), depth)
}

/// Checks one of [`run_cases`] to `depth` inputs.
pub fn check_case(case: &RunConfigCase, depth: usize) -> Report {
    let model = RunModel {
        unreachable: case.unreachable,
        ..RunModel::new(case.setup)
    };
    check(case.name, model, depth)
}

/// Checks the session machine to `depth` commands.
pub fn check_session(depth: usize) -> Report {
    check(
        "session (steering capacity 2, up to 3 queued prompts)",
        SessionModel { max_queue: 3 },
        depth,
    )
}

/// Checks every model at `bound`; `each` sees each report as it is made.
pub fn check_all(bound: Bound, mut each: impl FnMut(&Report)) -> Vec<Report> {
    let (run_depth, session_depth) = depths(bound);
    let mut reports = Vec::new();
    for case in run_cases() {
        let r = check_case(&case, run_depth);
        each(&r);
        reports.push(r);
    }
    let r = check_session(session_depth);
    each(&r);
    reports.push(r);
    reports
}
