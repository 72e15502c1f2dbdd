//! The generator of agentloop-core's chart code: reads `statecharts/*.toml` and writes, with
//! `quote` and `prettyplease`, the files of `core/src/generated/`, which are committed so that a
//! chart edit shows its Rust diff in review.
//!
//! Per chart `<x>`: `<x>_chart.rs` (the state, event, guard and row enums with their tables)
//! and, for the statig machines, `<x>_dispatch.rs` (one function per state and superstate that
//! tries the scope's rows in chart order, and the oracle's `holds`/`expected`) and
//! `<x>_machine.rs` (the `#[state_machine]` impl whose handlers call them); the tool-call
//! lifecycle's `tool_call_dispatch.rs` (`select`/`act`); `effect_name.rs` (the effect names the
//! rows declare); `route.rs` (the one classification of runtime inputs, from the outer and
//! inner charts' `input` patterns). Nothing here reads Rust source: what the generated code calls is checked by
//! the compiler when the core builds.

#[path = "../../core/src/chart/model.rs"]
#[allow(dead_code)]
mod model;

mod dispatch;
mod effects;
mod enums;
mod machine;
mod names;
mod route;
mod tool_call;

use std::path::Path;

pub use model::Chart;

/// Where the generated files go, from the workspace root.
pub const OUT_DIR: &str = "core/src/generated";

/// The command that regenerates them (named in each file's first line).
pub const COMMAND: &str = "cargo run -p agentloop-codegen";

/// A chart and what its generated names start with.
#[derive(Clone, Copy, Debug)]
pub struct ChartFile {
    /// The file stem (`statecharts/<file>.toml`).
    pub file: &'static str,
    /// The generated enums' prefix (`<prefix>State`, `<prefix>Row`, ...).
    pub prefix: &'static str,
}

/// The charts, in the order their enums are generated.
pub const CHARTS: &[ChartFile] = &[
    ChartFile {
        file: "react",
        prefix: "React",
    },
    ChartFile {
        file: "process",
        prefix: "Process",
    },
    ChartFile {
        file: "tool_call",
        prefix: "ToolCall",
    },
    ChartFile {
        file: "session",
        prefix: "Session",
    },
];

/// One generated file: its name under [`OUT_DIR`] and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generated {
    /// File name (`react_chart.rs`).
    pub name: String,
    /// The whole file, `@generated` line first.
    pub text: String,
}

/// Why the charts could not be turned into code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// The chart (`statecharts/<file>.toml`), or the file that failed.
    pub chart: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.chart, self.message)
    }
}

impl std::error::Error for Error {}

/// `Err` for chart `file` with `message`.
pub(crate) fn fail<T>(file: &str, message: impl Into<String>) -> Result<T, Error> {
    Err(Error {
        chart: format!("statecharts/{file}.toml"),
        message: message.into(),
    })
}

/// Generates every file from the charts in `dir` (`core/statecharts`).
pub fn generate(dir: &Path) -> Result<Vec<Generated>, Error> {
    let mut charts = Vec::new();
    for c in CHARTS {
        let path = dir.join(format!("{}.toml", c.file));
        let text = std::fs::read_to_string(&path).map_err(|e| Error {
            chart: path.display().to_string(),
            message: format!("reading: {e}"),
        })?;
        charts.push((*c, text));
    }
    generate_from(&charts)
}

/// Generates every file from the charts' texts (`(chart, TOML)` in [`CHARTS`] order).
pub fn generate_from(charts: &[(ChartFile, String)]) -> Result<Vec<Generated>, Error> {
    let mut out = Vec::new();
    let mut effect_names = effects::Names::default();
    let mut parsed: Vec<(Chart, ChartFile)> = Vec::new();
    for (c, text) in charts {
        let chart = Chart::parse(text).or_else(|e| fail(c.file, format!("invalid chart: {e}")))?;
        out.push(file(
            c.file,
            &format!("{}_chart.rs", c.file),
            enums::chart_enums(&chart, c)?,
        )?);
        effect_names.add(&chart, c)?;
        if c.file == "tool_call" {
            out.push(file(
                c.file,
                "tool_call_dispatch.rs",
                tool_call::call_dispatch(&chart)?,
            )?);
        } else if let Some(m) = dispatch::DISPATCHED.iter().find(|m| m.file == c.file) {
            out.push(file(
                c.file,
                &format!("{}_dispatch.rs", c.file),
                dispatch::dispatch(&chart, m)?,
            )?);
            out.push(file(
                c.file,
                &format!("{}_machine.rs", c.file),
                machine::machine(&chart, m)?,
            )?);
        }
        parsed.push((chart, *c));
    }
    out.push(file("*", "effect_name.rs", effect_names.tokens())?);
    let of = |name: &str| parsed.iter().find(|(_, c)| c.file == name);
    if let (Some((react, rc)), Some((process, pc))) = (of("react"), of("process")) {
        out.push(file(
            "{react,process}",
            "route.rs",
            route::route((react, rc), (process, pc))?,
        )?);
    }
    Ok(out)
}

/// `text` with a blank line between top-level items (prettyplease puts none).
fn spaced(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    let mut prev = "";
    for line in text.lines() {
        if prev == "}" && !line.is_empty() && !line.starts_with([' ', '}']) {
            out.push('\n');
        }
        out.push_str(line);
        out.push('\n');
        prev = line;
    }
    out
}

/// Pretty-prints `tokens` as a file generated from `statecharts/<chart>.toml`.
fn file(chart: &str, name: &str, tokens: proc_macro2::TokenStream) -> Result<Generated, Error> {
    let parsed: syn::File = syn::parse2(tokens).or_else(|e| {
        fail(
            chart,
            format!("{name}: the generated tokens do not parse: {e}"),
        )
    })?;
    let text = format!(
        "// @generated by `{COMMAND}` from statecharts/{chart}.toml — do not edit\n\n{}",
        spaced(&prettyplease::unparse(&parsed))
    );
    Ok(Generated {
        name: name.to_string(),
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The project's charts, with `edit` applied to the text of chart `file`.
    fn charts_with(file: &str, edit: impl Fn(&str) -> String) -> Vec<(ChartFile, String)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/statecharts");
        CHARTS
            .iter()
            .map(|c| {
                let text =
                    std::fs::read_to_string(dir.join(format!("{}.toml", c.file))).expect("chart");
                let text = if c.file == file { edit(&text) } else { text };
                (*c, text)
            })
            .collect()
    }

    /// The text of generated file `name`.
    fn text(files: &[Generated], name: &str) -> String {
        files
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.text.clone())
            .expect("generated file")
    }

    #[test]
    fn every_file_opens_with_its_generated_line() {
        let files = generate_from(&charts_with("", str::to_string)).expect("charts");
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "react_chart.rs",
                "react_dispatch.rs",
                "react_machine.rs",
                "process_chart.rs",
                "process_dispatch.rs",
                "process_machine.rs",
                "tool_call_chart.rs",
                "tool_call_dispatch.rs",
                "session_chart.rs",
                "session_dispatch.rs",
                "session_machine.rs",
                "effect_name.rs",
                "route.rs"
            ]
        );
        assert!(text(&files, "react_dispatch.rs").starts_with(
            "// @generated by `cargo run -p agentloop-codegen` from statecharts/react.toml — do not edit\n"
        ));
    }

    /// Swapping two rows' guards in the TOML swaps the calls in the generated dispatch.
    #[test]
    fn a_swapped_guard_shows_in_the_generated_dispatch() {
        let swap = |t: &str| {
            t.replace("guard = \"limit_stop\"", "guard = \"@\"")
                .replace("guard = \"limit_final_answer\"", "guard = \"limit_stop\"")
                .replace("guard = \"@\"", "guard = \"limit_final_answer\"")
        };
        let before = text(
            &generate_from(&charts_with("", str::to_string)).expect("charts"),
            "react_dispatch.rs",
        );
        let after = text(
            &generate_from(&charts_with("react", swap)).expect("charts"),
            "react_dispatch.rs",
        );
        let order = |t: &str| {
            (
                t.find("if Guards::limit_stop(data, input)")
                    .expect("limit_stop"),
                t.find("if Guards::limit_final_answer(data, input)")
                    .expect("final"),
            )
        };
        let (stop, fin) = order(&before);
        assert!(stop < fin, "as committed, limit_stop is tried first");
        let (stop, fin) = order(&after);
        assert!(fin < stop, "swapped, limit_final_answer is tried first");
        assert!(after.contains(
            "if Guards::limit_final_answer(data, input) {\n                data.outbox.take(ReactRow::PlanningLimitStop);"
        ));
    }

    /// A guard whose rows are all in one state holding data is handed that data, in the
    /// dispatch and in the oracle; a guard of a superstate's row is not.
    #[test]
    fn guards_of_a_state_with_data_are_handed_it() {
        let files = generate_from(&charts_with("", str::to_string)).expect("charts");
        let react = text(&files, "react_dispatch.rs");
        assert!(react.contains("if Guards::compaction_required(data, local, input) {"));
        assert!(react
            .contains("State::Finishing { local } => Guards::ended_completed(data, local, input)"));
        assert!(react.contains("if Guards::nothing_to_drain(data, input) {"));
        // The traits the hand-written code implements say the same.
        assert!(react.contains(
            "fn ended_completed(data: &ReactData, local: &Ended, input: &Input<'_>) -> bool;"
        ));
        assert!(react.contains(
            "fn planning_compact(data: &mut ReactData, input: &Input<'_>) -> Compaction;"
        ));
        assert!(
            react.contains("fn start_compaction(data: &mut ReactData, local: &mut Compaction);")
        );
    }

    /// The oracle's `holds` takes the statig state only when a guard reads a state's data:
    /// the process chart's `Retrying` holds data its guards do not read, so the state is not
    /// passed (an unused parameter would be); its rows and entry/exit actions get the data.
    #[test]
    fn the_oracle_takes_the_state_only_for_guards_that_read_its_data() {
        let files = generate_from(&charts_with("", str::to_string)).expect("charts");
        let react = text(&files, "react_dispatch.rs");
        assert!(react.contains("sm: &State"));
        let process = text(&files, "process_dispatch.rs");
        assert!(
            !process.contains("sm: &State"),
            "no process guard reads a state's data"
        );
        assert!(process.contains(
            "fn retrying_timer(data: &mut ProcessData, local: &mut Backoff, input: &Input<'_>);"
        ));
        assert!(process.contains("fn start_backoff(data: &mut ProcessData, local: &mut Backoff);"));
        assert!(process.contains("fn send_request(data: &mut ProcessData);"));
    }

    #[test]
    fn a_row_after_an_unconditional_one_is_an_error() {
        // The live call's answer taken unconditionally: the stale row after it is unreachable.
        let charts = charts_with("process", |t| {
            t.replace(
                "id = \"tools_user_answered\"\nfrom = \"ToolExecuting\"\nevent = \"UserAnswered\"\nguard = \"current\"",
                "id = \"tools_user_answered\"\nfrom = \"ToolExecuting\"\nevent = \"UserAnswered\"\nguard = \"otherwise\"",
            )
        });
        let err = generate_from(&charts).expect_err("unreachable row");
        assert_eq!(err.chart, "statecharts/process.toml");
        assert!(
            err.message
                .contains("tools_user_answered_stale is unreachable"),
            "{err}"
        );
    }

    #[test]
    fn a_guard_no_row_names_is_an_error() {
        let charts = charts_with("session", |t| {
            format!("{t}\n[[guard]]\nname = \"never_used\"\ndoc = \"x\"\n")
        });
        let err = generate_from(&charts).expect_err("unused guard");
        assert!(err.message.contains("never_used"), "{err}");
    }

    #[test]
    fn a_malformed_effect_name_is_an_error() {
        let charts = charts_with("react", |t| {
            t.replace("\"commit_run_end\"", "\"Commit run end\"")
        });
        let err = generate_from(&charts).expect_err("bad effect");
        assert!(err.message.contains("Commit run end"), "{err}");
    }
}
