//! The charts (R-ARCH-3): the committed Mermaid diagrams and the README's diagrams are exactly
//! what `agentloop chart` generates, and the charts hold every state of SPEC §2 and §3.

use agentloop_core::chart::{mermaid, MachineKind};

fn generated(kind: MachineKind) -> String {
    mermaid(&kind.chart())
}

/// Each chart, its committed diagram and its `agentloop chart` name.
const CHARTS: [(MachineKind, &str, &str); 3] = [
    (MachineKind::React, "statecharts/react.mmd", "react"),
    (MachineKind::Process, "statecharts/process.mmd", "process"),
    (
        MachineKind::ToolCall,
        "statecharts/tool_call.mmd",
        "tool-call",
    ),
];

#[test]
fn committed_diagrams_match_the_charts() {
    for (kind, file, name) in CHARTS {
        let committed = std::fs::read_to_string(file).expect("committed diagram");
        assert_eq!(
            committed,
            generated(kind),
            "{file} is stale: run `cargo run -- chart {name} > {file}`"
        );
    }
}

#[test]
fn readme_shows_the_generated_diagrams() {
    let readme = std::fs::read_to_string("README.md").expect("README.md");
    for (kind, _, _) in CHARTS {
        let block = format!("```mermaid\n{}```", generated(kind));
        assert!(
            readme.contains(&block),
            "README.md does not show the current {kind:?} diagram"
        );
    }
}

/// R-ARCH-3, R-CTL: the session chart's committed diagram is what `agentloop chart session`
/// generates, docs/architecture.md shows it, and it holds the session's states.
#[test]
fn r_ctl_the_session_diagram_is_committed_and_documented() {
    let diagram = generated(MachineKind::Session);
    let committed =
        std::fs::read_to_string("statecharts/session.mmd").expect("committed session diagram");
    assert_eq!(
        committed, diagram,
        "statecharts/session.mmd is stale: run `cargo run -- chart session > statecharts/session.mmd`"
    );
    let docs = std::fs::read_to_string("docs/architecture.md").expect("docs/architecture.md");
    assert!(
        docs.contains(&format!("```mermaid\n{diagram}```")),
        "docs/architecture.md does not show the current session diagram"
    );
    let chart = MachineKind::Session.chart();
    for s in ["Idle", "Running", "Aborting", "Closed"] {
        assert!(
            chart.state.iter().any(|d| d.name == s),
            "session chart lacks {s}"
        );
    }
}

#[test]
fn every_spec_state_is_charted() {
    let react = MachineKind::React.chart();
    for s in [
        "Init",
        "Planning",
        "Executing",
        "Observing",
        "Compacting",
        "Completed",
        "Failed",
        "Aborted",
    ] {
        assert!(
            react.state.iter().any(|d| d.name == s),
            "react chart lacks {s}"
        );
    }
    assert!(react.superstate.iter().any(|d| d.name == "Active"));
    assert!(react.event.iter().any(|e| e.name == "StoreWriteFailed"));
    let process = MachineKind::Process.chart();
    for s in [
        "Idle",
        "Calling",
        "Streaming",
        "Retrying",
        "RunningTools",
        "AwaitingApproval",
        "Success",
        "Error",
    ] {
        assert!(
            process.state.iter().any(|d| d.name == s),
            "process chart lacks {s}"
        );
    }
    for s in ["Live", "Requesting", "ToolExecuting"] {
        assert!(
            process.superstate.iter().any(|d| d.name == s),
            "process chart lacks superstate {s}"
        );
    }
    // Every state appears in the generated diagram.
    for (chart, kind) in [(react, MachineKind::React), (process, MachineKind::Process)] {
        let text = generated(kind);
        for s in &chart.state {
            assert!(text.contains(&s.name), "diagram lacks {}", s.name);
        }
    }
}

#[test]
fn a_chart_edit_is_rejected_when_inconsistent() {
    // The validator catches rows naming unknown states (the build script runs it too).
    let broken =
        agentloop_core::chart::REACT_TOML.replace("to = \"Observing\"", "to = \"Observed\"");
    assert!(agentloop_core::chart::Chart::parse(&broken).is_err());
}

/// One copy of every fact: README's table of chart sizes is what the charts hold (states,
/// superstates, rows by kind), so an added or removed row fails here until README says so.
#[test]
fn readme_chart_sizes_are_the_charts() {
    use agentloop_core::chart::model::RowKindDef;
    let readme = std::fs::read_to_string("README.md").expect("README.md");
    for (kind, name) in [
        (MachineKind::React, "react"),
        (MachineKind::Process, "process"),
        (MachineKind::ToolCall, "tool-call"),
        (MachineKind::Session, "session"),
    ] {
        let chart = kind.chart();
        let of = |k: RowKindDef| chart.row.iter().filter(|r| r.kind == k).count();
        let cells = format!(
            "| `{name}` | {} (+ {}) | {} ({}, {}, {}) |",
            chart.state.len(),
            chart.superstate.len(),
            chart.row.len(),
            of(RowKindDef::Transition),
            of(RowKindDef::Internal),
            of(RowKindDef::Ignored),
        );
        assert!(
            readme.contains(&cells),
            "README.md's chart table does not say {cells}"
        );
    }
}
