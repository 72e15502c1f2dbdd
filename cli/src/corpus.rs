//! `agentloop replay DIR|FILES…`: replay (or what-if replay) a corpus of traces in parallel
//! on all cores, then one summary — counts, one line per diverged or unreadable trace, or one
//! JSON document with `--json`. Each trace is read and replayed by one worker thread
//! (`std::thread::scope` over a shared work queue); results are reported in path order, so
//! the output does not depend on the scheduling.
//!
//! Directories are walked recursively for `*.jsonl` files; symbolic links inside them are not
//! followed (a path named on the command line is opened as given). A timing sidecar
//! (`*.times.jsonl`) is not a trace and is skipped.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{json, Value};

use agentloop_core::react::{DeciderRegistry, RunConfig};
use agentloop_core::trace::replay_reader;
use agentloop_trace_tools::whatif::{apply_setting, parse_assignment, what_if, Figures};

use crate::out::errln;
use crate::trace_cmd::{read_trace, trace_records, WhatIfArgs};

pub(crate) use agentloop_trace_tools::export::TIMES_SUFFIX;

/// The trace files of a command line, and the paths that could not be listed (with why).
type Found = (Vec<PathBuf>, Vec<(PathBuf, String)>);

/// Whether a command-line path list asks for the corpus mode: more than one path, or a
/// directory.
pub(crate) fn is_corpus(paths: &[PathBuf]) -> bool {
    paths.len() != 1 || paths.iter().any(|p| p.is_dir())
}

/// The trace files `paths` name, sorted and without duplicates: each file as given, each
/// directory walked for `*.jsonl` (links not followed). A path that cannot be listed is
/// returned with its error.
pub(crate) fn collect(paths: &[PathBuf]) -> Found {
    agentloop::store::corpus::trace_files(paths, TIMES_SUFFIX)
}

/// What replaying one trace found.
enum Replayed {
    Identical { records: usize },
    Diverged { index: u64, input: Option<u64> },
    Unreadable { error: String },
}

/// Replays the trace at `path` a record at a time ([`replay_reader`]): a trace of any length
/// within the file and line limits replays holding one step of it, and a trace over them is
/// this file's error, not the corpus's.
fn replay_one(path: &Path) -> Replayed {
    let unreadable = |e: agentloop_core::trace::TraceError| Replayed::Unreadable {
        error: e.to_string(),
    };
    let records = match trace_records(path, false) {
        Ok(r) => r,
        Err(e) => return unreadable(e),
    };
    match replay_reader(records, &DeciderRegistry::new()) {
        Ok(r) => match r.divergence {
            None => Replayed::Identical {
                records: r.records as usize,
            },
            Some(d) => Replayed::Diverged {
                index: d.index,
                input: r.input,
            },
        },
        Err(e @ agentloop_core::trace::TraceError::UnknownDecider { .. })
        | Err(e @ agentloop_core::trace::TraceError::UnknownRetryDecider { .. }) => {
            Replayed::Unreadable {
                error: format!("{}: {e}", path.display()),
            }
        }
        Err(e) => unreadable(e),
    }
}

/// The exit code of a corpus: 2 when a trace could not be read (or the corpus is empty), 1
/// when one differs, 0 when all are identical.
fn exit_code(unreadable: usize, different: usize) -> ExitCode {
    if unreadable > 0 {
        ExitCode::from(2)
    } else if different > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Prints one JSON document (machine output: through [`crate::out::json`]).
fn print_json(v: &Value) {
    let s = serde_json::to_string_pretty(v).unwrap_or_default();
    crate::out::stdout_raw(&format!("{}\n", crate::out::json(&s)));
}

/// The trace files of `paths`, or the exit code when there are none.
fn files_of(paths: &[PathBuf]) -> Result<Found, ExitCode> {
    let (files, errors) = collect(paths);
    if files.is_empty() && errors.is_empty() {
        errln!("error: no *.jsonl traces found");
        return Err(ExitCode::from(2));
    }
    Ok((files, errors))
}

/// Every trace of `paths` through `work` in parallel, named by path, in path order: files that
/// could not be listed and traces whose `work` panicked come back as `unreadable(error)`.
/// `what` names the work in the panic message. Err: the exit code when no trace was found.
fn over_corpus<R: Send>(
    paths: &[PathBuf],
    what: &str,
    work: impl Fn(&Path) -> R + Sync,
    unreadable: impl Fn(String) -> R,
) -> Result<Vec<(String, R)>, ExitCode> {
    let (files, errors) = files_of(paths)?;
    let results = agentloop::store::corpus::par_map(&files, |p| work(p));
    let mut entries: Vec<(String, R)> = errors
        .into_iter()
        .map(|(p, e)| {
            (
                p.display().to_string(),
                unreadable(format!("{}: {e}", p.display())),
            )
        })
        .collect();
    entries.extend(files.iter().zip(results).map(|(p, r)| {
        let r = r.unwrap_or_else(|| {
            unreadable(format!(
                "{}: the {what} panicked (a bug: please report it)",
                p.display()
            ))
        });
        (p.display().to_string(), r)
    }));
    Ok(entries)
}

/// `agentloop replay DIR|FILES…`: 0 when every trace replays identically, 1 when one
/// diverges, 2 when one cannot be read (or none was found).
pub(crate) fn replay_main(paths: &[PathBuf], as_json: bool) -> ExitCode {
    let entries = match over_corpus(paths, "replay", replay_one, |error| Replayed::Unreadable {
        error,
    }) {
        Ok(e) => e,
        Err(code) => return code,
    };
    let count = |f: fn(&Replayed) -> bool| entries.iter().filter(|(_, r)| f(r)).count();
    let identical = count(|r| matches!(r, Replayed::Identical { .. }));
    let diverged = count(|r| matches!(r, Replayed::Diverged { .. }));
    let unreadable = count(|r| matches!(r, Replayed::Unreadable { .. }));
    if as_json {
        let files: Vec<Value> = entries
            .iter()
            .map(|(path, r)| match r {
                Replayed::Identical { records } => {
                    json!({"path": path, "status": "identical", "records": records})
                }
                Replayed::Diverged { index, input } => {
                    json!({"path": path, "status": "diverged", "index": index, "input": input})
                }
                Replayed::Unreadable { error } => {
                    json!({"path": path, "status": "unreadable", "error": error})
                }
            })
            .collect();
        print_json(&json!({
            "traces": entries.len(),
            "identical": identical,
            "diverged": diverged,
            "unreadable": unreadable,
            "files": files,
        }));
    } else {
        let mut o = format!(
            "replayed {} trace{}: {identical} identical, {diverged} diverged, {unreadable} unreadable\n",
            entries.len(),
            if entries.len() == 1 { "" } else { "s" }
        );
        for (path, r) in &entries {
            match r {
                Replayed::Identical { .. } => {}
                Replayed::Diverged { index, input } => {
                    let cause = input
                        .map(|c| format!(" (in the step of input {c})"))
                        .unwrap_or_default();
                    let _ = writeln!(
                        o,
                        "diverged: {}: at index {index}{cause}",
                        crate::out::line(path)
                    );
                }
                Replayed::Unreadable { error } => {
                    let _ = writeln!(o, "unreadable: {}", crate::out::line(error));
                }
            }
        }
        crate::out::stdout_raw(&o);
    }
    exit_code(unreadable, diverged)
}

/// What a what-if replay of one trace found.
enum Changed {
    Run {
        /// Where behaviour first differs (`None`: unchanged).
        index: Option<u64>,
        /// What the changed run still waited for when the recorded inputs ran out.
        missing: Option<String>,
        before: Figures,
        after: Figures,
    },
    Unreadable {
        error: String,
    },
}

/// The configuration `config` changed by `args` (settings are checked up front against a
/// default configuration, so an error here is one the trace's own configuration causes).
fn changed_config(
    mut config: RunConfig,
    args: &WhatIfArgs,
    registry: &DeciderRegistry,
) -> Result<RunConfig, String> {
    for s in &args.set {
        parse_assignment(s)
            .and_then(|(k, v)| apply_setting(&mut config, k, v))
            .map_err(|e| format!("--set {s}: {e}"))?;
    }
    if let Some(name) = &args.decider {
        let f = registry
            .get(name)
            .ok_or_else(|| format!("--decider {name}: unknown decider"))?;
        config.decider = agentloop_core::react::DeciderRef::new(name.clone(), f);
    }
    Ok(config)
}

fn what_if_one(path: &Path, args: &WhatIfArgs) -> Changed {
    let registry = DeciderRegistry::new();
    let unreadable = |error: String| Changed::Unreadable { error };
    let trace = match read_trace(path, true) {
        Ok(t) => t,
        Err(e) => return unreadable(e.to_string()),
    };
    let config = match changed_config(trace.header.config.clone(), args, &registry) {
        Ok(c) => c,
        Err(e) => return unreadable(format!("{}: {e}", path.display())),
    };
    match what_if(&trace, config, &registry) {
        Ok(w) => Changed::Run {
            index: w.divergence.as_ref().map(|d| d.index),
            missing: w.missing.as_ref().map(|m| m.to_string()),
            before: Figures::of(&w.recorded),
            after: Figures::of(&w.replayed),
        },
        Err(e) => unreadable(format!("{}: {e}", path.display())),
    }
}

/// `agentloop replay DIR|FILES… --set K=V [--decider NAME]`: a what-if over the corpus. 0
/// when no run changes, 1 when one does, 2 on bad input (a bad setting, an unreadable trace).
pub(crate) fn what_if_main(paths: &[PathBuf], args: &WhatIfArgs, as_json: bool) -> ExitCode {
    let registry = DeciderRegistry::new();
    if let Err(e) = changed_config(RunConfig::default(), args, &registry) {
        errln!("error: {e}");
        if args.decider.is_some() {
            errln!("hint: this program has: {}", registry.names().join(", "));
        }
        return ExitCode::from(2);
    }
    let mut settings = args.set.clone();
    if let Some(d) = &args.decider {
        settings.push(format!("decider={d}"));
    }
    let entries = match over_corpus(
        paths,
        "what-if replay",
        |p| what_if_one(p, args),
        |error| Changed::Unreadable { error },
    ) {
        Ok(e) => e,
        Err(code) => return code,
    };
    let is_changed =
        |index: &Option<u64>, missing: &Option<String>| index.is_some() || missing.is_some();
    let (mut changed, mut unchanged, mut unreadable) = (0usize, 0usize, 0usize);
    let mut totals = [[0u64; 2]; 4];
    let mut outcomes: std::collections::BTreeMap<(String, String), usize> = Default::default();
    for (_, r) in &entries {
        match r {
            Changed::Run {
                index,
                missing,
                before,
                after,
            } => {
                if is_changed(index, missing) {
                    changed += 1;
                } else {
                    unchanged += 1;
                }
                for (i, f) in [before, after].into_iter().enumerate() {
                    totals[0][i] += f.steps;
                    totals[1][i] += f.tool_calls;
                    totals[2][i] += f.tokens_in;
                    totals[3][i] += f.tokens_out;
                }
                if before.outcome != after.outcome {
                    *outcomes
                        .entry((before.outcome.clone(), after.outcome.clone()))
                        .or_default() += 1;
                }
            }
            Changed::Unreadable { .. } => unreadable += 1,
        }
    }
    const NAMES: [&str; 4] = ["steps", "tool_calls", "tokens_in", "tokens_out"];
    if as_json {
        let files: Vec<Value> = entries
            .iter()
            .map(|(path, r)| match r {
                Changed::Run {
                    index,
                    missing,
                    before,
                    after,
                } => json!({
                    "path": path,
                    "status": if is_changed(index, missing) { "changed" } else { "unchanged" },
                    "index": index,
                    "missing": missing,
                    "before": before.json(),
                    "after": after.json(),
                }),
                Changed::Unreadable { error } => {
                    json!({"path": path, "status": "unreadable", "error": error})
                }
            })
            .collect();
        let total: serde_json::Map<String, Value> = NAMES
            .iter()
            .zip(totals)
            .map(|(n, [b, a])| (n.to_string(), json!({"before": b, "after": a})))
            .collect();
        let outcome_changes: Vec<Value> = outcomes
            .iter()
            .map(|((b, a), n)| json!({"before": b, "after": a, "runs": n}))
            .collect();
        print_json(&json!({
            "settings": settings,
            "traces": entries.len(),
            "changed": changed,
            "unchanged": unchanged,
            "unreadable": unreadable,
            "totals": total,
            "outcome_changes": outcome_changes,
            "files": files,
        }));
    } else {
        let mut o = format!(
            "what-if replay of {} trace{} with {}: {changed} changed, {unchanged} unchanged, {unreadable} unreadable\n",
            entries.len(),
            if entries.len() == 1 { "" } else { "s" },
            settings.join(", ")
        );
        let _ = writeln!(
            o,
            "totals: {}",
            NAMES
                .iter()
                .zip(totals)
                .map(|(n, [b, a])| format!("{} {b} → {a}", n.replace('_', " ")))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for ((b, a), n) in &outcomes {
            let _ = writeln!(
                o,
                "outcome {} → {}: {n} run{}",
                crate::out::line(b),
                crate::out::line(a),
                if *n == 1 { "" } else { "s" }
            );
        }
        for (path, r) in &entries {
            match r {
                Changed::Run {
                    index,
                    missing,
                    before,
                    after,
                } if is_changed(index, missing) => {
                    let mut what = before.changes(after);
                    if let Some(i) = index {
                        what.insert(0, format!("first differs at index {i}"));
                    }
                    if let Some(m) = missing {
                        what.push(format!("replay ended: {m}"));
                    }
                    let _ = writeln!(
                        o,
                        "changed: {}: {}",
                        crate::out::line(path),
                        crate::out::line(&what.join("; "))
                    );
                }
                Changed::Run { .. } => {}
                Changed::Unreadable { error } => {
                    let _ = writeln!(o, "unreadable: {}", crate::out::line(error));
                }
            }
        }
        crate::out::stdout_raw(&o);
    }
    exit_code(unreadable, changed)
}
