//! The chart file format and its renderer (R-ARCH-3): Mermaid output of a small chart with
//! nested superstates, superstate ancestry, every consistency check of `Chart::validate`, and
//! the generated rows' `allows`/`candidates`.

use agentloop_core::chart::{
    mermaid, Chart, MachineKind, ProcessEventKind, ProcessRow, ProcessState,
};

const TOY: &str = r#"
machine = "toy"
title = "Toy"
initial = "A"

[[superstate]]
name = "Outer"
doc = "o"

[[superstate]]
name = "Inner"
parent = "Outer"
doc = "i"

[[state]]
name = "A"
doc = "a"

[[state]]
name = "B"
parent = "Inner"
doc = "b"

[[state]]
name = "C"
parent = "Outer"
doc = "c"

[[state]]
name = "Done"
terminal = true
doc = "d"

[[event]]
name = "Go"
doc = "g"

[[event]]
name = "Tick"
doc = "t"

[[guard]]
name = "ready"
doc = "r"

[[row]]
id = "a_go"
from = "A"
event = "Go"
to = "B"

[[row]]
id = "inner_go"
from = "Inner"
event = "Go"
guard = "ready"
to = "C"

[[row]]
id = "outer_tick"
from = "Outer"
event = "Tick"
to = "Outer"
kind = "ignored"

[[row]]
id = "c_go"
from = "C"
event = "Go"
to = "Done"

[[row]]
id = "a_tick"
from = "A"
event = "Tick"
guard = "ready"
to = "A"
kind = "ignored"
"#;

fn toy() -> Chart {
    Chart::parse(TOY).expect("the toy chart is valid")
}

#[test]
fn r_arch_3_mermaid_nests_superstates_draws_rows_and_notes_ignored_ones() {
    let expected = "\
---
title: Toy
---
stateDiagram-v2
    [*] --> A
    state Outer {
        state Inner {
            B
        }
        C
    }
    A
    Done
    A --> B : Go
    Inner --> C : Go [ready]
    C --> Done : Go
    Done --> [*]
    note right of A
        Outer ignores Tick<br/>
        A ignores Tick [ready]
    end note
";
    assert_eq!(mermaid(&toy()), expected);
}

#[test]
fn r_arch_3_mermaid_has_no_note_without_ignored_rows() {
    let text = TOY.replace("kind = \"ignored\"", "kind = \"internal\"");
    let out = mermaid(&Chart::parse(&text).unwrap());
    assert!(!out.contains("note right of"), "{out}");
    // Internal rows are drawn like transitions.
    assert!(out.contains("    Outer --> Outer : Tick\n"), "{out}");
    assert!(out.contains("    A --> A : Tick [ready]\n"), "{out}");
}

#[test]
fn r_arch_3_the_embedded_charts_render() {
    for kind in [MachineKind::React, MachineKind::Process] {
        let chart = kind.chart();
        let out = mermaid(&chart);
        assert!(out.starts_with(&format!("---\ntitle: {}\n---\n", chart.title)));
        assert!(out.contains(&format!("    [*] --> {}\n", chart.initial)));
    }
    assert_eq!(MachineKind::Process.chart().machine, "process");
    assert_eq!(MachineKind::React.chart().machine, "react");
}

#[test]
fn ancestors_are_listed_innermost_first() {
    let c = toy();
    assert_eq!(c.ancestors("B"), ["Inner", "Outer"]);
    assert_eq!(c.ancestors("C"), ["Outer"]);
    assert_eq!(c.ancestors("Inner"), ["Outer"]);
    assert!(c.ancestors("A").is_empty());
    assert!(c.ancestors("Outer").is_empty());
    assert!(c.ancestors("Nowhere").is_empty());
    // A cyclic parent chain (which validation does not reject) still terminates.
    let mut cyclic = c.clone();
    cyclic.superstate[0].parent = Some("Inner".into());
    assert_eq!(cyclic.ancestors("B"), ["Inner", "Outer"]);
    assert_eq!(cyclic.ancestors("Outer"), ["Inner", "Outer"]);
}

/// Parses `TOY` with `from` replaced by `to` (which must occur) and returns the error.
fn broken(from: &str, to: &str) -> String {
    assert!(TOY.contains(from), "{from}");
    match Chart::parse(&TOY.replacen(from, to, 1)) {
        Ok(_) => panic!("{from:?} -> {to:?} was accepted"),
        Err(e) => e,
    }
}

#[test]
fn r_arch_3_validation_rejects_each_inconsistency() {
    let cases = [
        (
            "name = \"C\"\nparent",
            "name = \"B\"\nparent",
            "toy: state name B declared twice",
        ),
        (
            "name = \"Inner\"\nparent",
            "name = \"A\"\nparent",
            "toy: state name A declared twice",
        ),
        (
            "initial = \"A\"",
            "initial = \"Outer\"",
            "toy: initial state Outer is not a leaf state",
        ),
        (
            "initial = \"A\"",
            "initial = \"Zed\"",
            "toy: initial state Zed is not a leaf state",
        ),
        (
            "parent = \"Inner\"\ndoc = \"b\"",
            "parent = \"Nope\"\ndoc = \"b\"",
            "toy: state B has unknown parent Nope",
        ),
        (
            "parent = \"Inner\"\ndoc = \"b\"",
            "parent = \"C\"\ndoc = \"b\"",
            "toy: state B has unknown parent C",
        ),
        (
            "parent = \"Outer\"\ndoc = \"i\"",
            "parent = \"A\"\ndoc = \"i\"",
            "toy: superstate Inner has unknown parent A",
        ),
        (
            "id = \"c_go\"",
            "id = \"a_go\"",
            "toy: row id a_go used twice",
        ),
        (
            "from = \"C\"",
            "from = \"Q\"",
            "toy: row c_go from unknown state Q",
        ),
        (
            "to = \"Done\"",
            "to = \"Q\"",
            "toy: row c_go to unknown state Q",
        ),
        (
            "to = \"Done\"",
            "to = \"Inner\"",
            "toy: row c_go transitions to superstate Inner",
        ),
        (
            "to = \"Outer\"",
            "to = \"A\"",
            "toy: internal/ignored row outer_tick must have to == from",
        ),
        (
            "event = \"Go\"\nguard",
            "event = \"Jump\"\nguard",
            "toy: row inner_go uses unknown event Jump",
        ),
        (
            "guard = \"ready\"\nto = \"C\"",
            "guard = \"steady\"\nto = \"C\"",
            "toy: row inner_go uses unknown guard steady",
        ),
        (
            "from = \"C\"",
            "from = \"Done\"",
            "toy: row c_go leaves a terminal state",
        ),
        (
            "terminal = true",
            "terminal = true\nparent = \"Outer\"",
            "toy: row outer_tick leaves a terminal state",
        ),
        (
            "[[guard]]\nname = \"ready\"\ndoc = \"r\"",
            "[[guard]]\nname = \"ready\"\ndoc = \"r\"\n\n[[guard]]\nname = \"idle\"\ndoc = \"x\"",
            "toy: guard idle is used by no row",
        ),
        (
            "[[event]]\nname = \"Go\"",
            "[[event]]\nname = \"Stop\"\ndoc = \"s\"\n\n[[event]]\nname = \"Go\"",
            "toy: event Stop is used by no row",
        ),
    ];
    for (from, to, err) in cases {
        assert_eq!(broken(from, to), err, "{from:?} -> {to:?}");
    }
    // An internal row may stay in its state, and a transition may target a leaf elsewhere.
    toy();
}

#[test]
fn r_arch_3_unknown_fields_and_bad_toml_are_rejected() {
    assert!(broken("doc = \"a\"", "doc = \"a\"\ncolour = \"red\"").contains("colour"));
    assert!(Chart::parse("machine = ").is_err());
}

#[test]
fn process_rows_allow_only_their_own_transition() {
    // A transition row: its source (or a state inside it), its event, its target.
    let r = ProcessRow::CallingOpened;
    assert!(r.allows(
        ProcessState::Calling,
        ProcessEventKind::StreamOpened,
        ProcessState::Streaming
    ));
    assert!(!r.allows(
        ProcessState::Streaming,
        ProcessEventKind::StreamOpened,
        ProcessState::Streaming
    ));
    assert!(!r.allows(
        ProcessState::Calling,
        ProcessEventKind::Done,
        ProcessState::Streaming
    ));
    assert!(!r.allows(
        ProcessState::Calling,
        ProcessEventKind::StreamOpened,
        ProcessState::Calling
    ));
    // An internal row keeps the state.
    let r = ProcessRow::StreamingDelta;
    assert!(r.allows(
        ProcessState::Streaming,
        ProcessEventKind::Delta,
        ProcessState::Streaming
    ));
    assert!(!r.allows(
        ProcessState::Streaming,
        ProcessEventKind::Delta,
        ProcessState::Calling
    ));
    // A superstate row applies to the states inside it and keeps the state when ignored.
    let r = ProcessRow::LiveStaleDelta;
    assert!(r.allows(
        ProcessState::Calling,
        ProcessEventKind::Delta,
        ProcessState::Calling
    ));
    assert!(r.allows(
        ProcessState::RunningTools,
        ProcessEventKind::Delta,
        ProcessState::RunningTools
    ));
    assert!(!r.allows(
        ProcessState::Idle,
        ProcessEventKind::Delta,
        ProcessState::Idle
    ));
    assert!(!r.allows(
        ProcessState::Calling,
        ProcessEventKind::Done,
        ProcessState::Calling
    ));
}

#[test]
fn candidates_list_only_rows_for_the_event_from_the_state_or_its_superstates() {
    for s in ProcessState::ALL {
        for e in ProcessEventKind::ALL {
            let c = s.candidates(*e);
            for r in c {
                let spec = r.spec();
                assert_eq!(spec.event, *e, "{r:?}");
                assert!(s.is_in(spec.from), "{s:?} is not in {}", spec.from);
            }
            // Every row that applies is listed.
            let applicable = ProcessRow::ALL
                .iter()
                .filter(|r| r.spec().event == *e && s.is_in(r.spec().from))
                .count();
            assert_eq!(c.len(), applicable, "{s:?} {e:?}");
        }
    }
    let c = ProcessState::Streaming.candidates(ProcessEventKind::Delta);
    assert_eq!(c[0], ProcessRow::StreamingDelta);
    assert!(c.contains(&ProcessRow::LiveStaleDelta));
}
