//! Reading traces for people (R-TRACE): the transcript (`trace show`), the comparison of two
//! traces (`trace diff`) and what-if replay under a changed configuration, on the fixture
//! traces of each supported version (`tests/fixtures/traces/`).

use agentloop_core::agent_event::Outcome;
use agentloop_core::react::DeciderRegistry;
use agentloop_core::trace::{Trace, TraceRecord};
use agentloop_core::Event;
use agentloop_trace_tools::trace_diff::{diff, DiffOptions};
use agentloop_trace_tools::transcript::{Item, RenderOptions, Transcript};
use agentloop_trace_tools::whatif::{
    apply_setting, parse_assignment, what_if, Missing, SettingError,
};

/// The path of the fixture trace `name`.
fn fixture_path(name: &str) -> String {
    format!(
        "{}/../tests/fixtures/traces/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The fixture trace `name`, parsed for replay.
pub(crate) fn fixture(name: &str) -> Trace {
    let path = fixture_path(name);
    let text = std::fs::read_to_string(&path).expect("fixture");
    Trace::parse(&text, &path).expect("valid trace")
}

#[test]
fn transcript_of_both_versions_joins_text_and_pairs_tool_calls_with_results() {
    for (name, version) in [
        ("v3-calc.jsonl", 3),
        ("v4-calc.jsonl", 4),
        ("v5-calc.jsonl", 5),
        ("v7-calc.jsonl", 7),
    ] {
        let t = Transcript::from_trace(&fixture(name));
        assert_eq!(t.version, version);
        assert_eq!(t.summary.steps, 2, "{name}");
        assert_eq!(t.summary.tool_calls, 1, "{name}");
        assert_eq!(t.summary.outcome, Some(Outcome::Completed), "{name}");
        assert_eq!(t.summary.final_text.as_deref(), Some("The answer is 5."));
        let usage = t.summary.usage.expect("usage reported");
        assert_eq!((usage.input_tokens, usage.output_tokens), (19, 17));
        let texts: Vec<&str> = t
            .items
            .iter()
            .filter_map(|i| match i {
                Item::Assistant { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["Let me calculate that.", "The answer is 5."]);
        let tool = t
            .items
            .iter()
            .find_map(|i| match i {
                Item::Tool {
                    name,
                    arguments,
                    result,
                    ..
                } => Some((name.clone(), arguments.to_string(), result.clone())),
                _ => None,
            })
            .expect("a tool item");
        assert_eq!(
            tool,
            (
                "calculator".into(),
                r#"{"expression":"2+3"}"#.into(),
                Some("5".into())
            )
        );
        let text = t.render(RenderOptions::default());
        assert!(text.contains("react Init→Planning→Executing"), "{text}");
        assert!(!text.contains("\"Let me c\""), "deltas are joined: {text}");
    }
}

#[test]
fn transcript_lists_retries_with_reason_and_delay() {
    let t = Transcript::from_trace(&fixture("v4-retry-tool.jsonl"));
    let retries: Vec<(u32, u64)> = t
        .items
        .iter()
        .filter_map(|i| match i {
            Item::Retry {
                attempt, delay_ms, ..
            } => Some((*attempt, *delay_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(retries, [(2, 1_000), (3, 2_000)]);
    assert_eq!(t.summary.retries, 2);
}

/// `trace` with every run id replaced and the crate version changed.
fn rerecorded(trace: &Trace) -> Trace {
    let text = trace.to_jsonl();
    let run_id = match &trace.records[0] {
        TraceRecord::Input {
            event: Event::Start { run_id, .. },
            ..
        } => run_id.clone(),
        other => panic!("first record {other:?}"),
    };
    let mut t = Trace::parse(&text.replace(&run_id, "run-other"), "re").expect("parse");
    t.header.agentloop = "9.9.9".into();
    t
}

#[test]
fn diff_ignores_run_ids_and_crate_version_unless_strict() {
    let a = fixture("v4-calc.jsonl");
    let b = rerecorded(&a);
    let d = diff(&a, &b, DiffOptions::default());
    assert!(d.is_equivalent(), "{d:?}");
    let strict = diff(&a, &b, DiffOptions { strict: true });
    assert!(!strict.is_equivalent());
    assert_eq!(strict.header[0].path, "agentloop");
    assert_eq!(strict.divergence.expect("divergence").index_a, Some(0));
}

#[test]
fn diff_names_the_first_divergence_and_the_input_before_it() {
    let a = fixture("v4-calc.jsonl");
    let b = Trace::parse(&a.to_jsonl().replace("er is 5.", "er is 6."), "b").expect("parse");
    let d = diff(&a, &b, DiffOptions::default());
    let v = d.divergence.expect("divergence");
    assert_eq!((v.index_a, v.index_b), (Some(88), Some(88)));
    assert_eq!(v.input_a, Some((88, "delta".into())));
    assert!(
        v.diff.contains("-") && v.diff.contains("er is 6."),
        "{}",
        v.diff
    );
    // The summaries show the changed answer.
    assert_eq!(d.b.final_text.as_deref(), Some("The answer is 6."));
}

#[test]
fn diff_of_a_v3_and_a_v4_recording_reports_the_version() {
    let d = diff(
        &fixture("v3-calc.jsonl"),
        &fixture("v4-calc.jsonl"),
        DiffOptions::default(),
    );
    assert!(d.header.iter().any(|c| c.path == "version"));
    assert_eq!(d.a.steps, d.b.steps);
}

#[test]
fn settings_are_parsed_and_bad_ones_are_named() {
    let mut c = fixture("v4-calc.jsonl").header.config;
    for s in [
        "max_steps=2",
        "retry.max_retries=0",
        "retry.initial_backoff_ms=5",
        "parallel_tools=false",
        "compact_threshold=4",
        "steering=skip_remaining",
    ] {
        let (k, v) = parse_assignment(s).expect("k=v");
        apply_setting(&mut c, k, v).expect(s);
    }
    assert_eq!(c.max_steps, 2);
    assert_eq!(c.step.retry.max_retries, 0);
    assert!(!c.step.parallel_tools);
    assert_eq!(c.compact_threshold, Some(4));
    assert!(matches!(
        apply_setting(&mut c, "nope", "1"),
        Err(SettingError::UnknownKey { .. })
    ));
    assert!(matches!(
        apply_setting(&mut c, "max_steps", "0"),
        Err(SettingError::BadValue { .. })
    ));
    assert!(matches!(
        parse_assignment("max_steps"),
        Err(SettingError::Malformed(_))
    ));
}

#[test]
fn what_if_unchanged_config_is_identical() {
    for name in [
        "v3-calc.jsonl",
        "v4-calc.jsonl",
        "v4-retry-tool.jsonl",
        "v5-calc.jsonl",
        "v7-calc.jsonl",
    ] {
        let t = fixture(name);
        let w = what_if(&t, t.header.config.clone(), &DeciderRegistry::new()).expect("replay");
        assert_eq!(w.divergence, None, "{name}");
        assert_eq!(w.missing, None, "{name}");
        assert_eq!(w.recorded, w.replayed);
    }
}

#[test]
fn what_if_fewer_steps_ends_at_max_steps() {
    let t = fixture("v4-calc.jsonl");
    let mut c = t.header.config.clone();
    apply_setting(&mut c, "max_steps", "1").expect("set");
    let w = what_if(&t, c, &DeciderRegistry::new()).expect("replay");
    assert_eq!(w.divergence.expect("differs").index, 10);
    assert_eq!(w.replayed.reason.as_deref(), Some("max_steps"));
    assert_eq!(w.replayed.steps, 1);
    assert!(w.diff.contains("Maximum steps reached"), "{}", w.diff);
}

#[test]
fn what_if_no_retries_fails_the_run() {
    let t = fixture("v4-retry-tool.jsonl");
    let mut c = t.header.config.clone();
    apply_setting(&mut c, "retry.max_retries", "0").expect("set");
    let w = what_if(&t, c, &DeciderRegistry::new()).expect("replay");
    assert_eq!(w.recorded.outcome, Some(Outcome::Completed));
    assert_eq!(w.replayed.outcome, Some(Outcome::Failed));
    assert_eq!(w.missing, None);
}

#[test]
fn what_if_asking_for_an_unrecorded_step_ends_with_a_clear_message() {
    // The recording stops after the tool result: nothing answers step 2.
    let mut t = fixture("v4-calc.jsonl");
    let cut = t
        .records
        .iter()
        .position(|r| {
            matches!(
                r,
                TraceRecord::Input {
                    event: Event::StreamOpened { attempt },
                    ..
                } if attempt.model_call_index == 2
            )
        })
        .expect("step 2");
    t.records.truncate(cut);
    let w = what_if(&t, t.header.config.clone(), &DeciderRegistry::new()).expect("replay");
    let missing = w.missing.expect("missing");
    assert_eq!(
        missing,
        Missing::ModelReply {
            step: 2,
            attempt: 1
        }
    );
    assert_eq!(missing.to_string(), "trace has no answer for step 2");
}

#[test]
fn what_if_more_retries_than_recorded_asks_for_the_next_attempt() {
    let t = fixture("v4-retry-tool.jsonl");
    // Drop everything from the third attempt's answer on, and allow the retries.
    let cut = t
        .records
        .iter()
        .position(|r| {
            matches!(r, TraceRecord::Input { event: Event::StreamOpened { attempt }, .. }
                if attempt.attempt == 3)
        })
        .expect("attempt 3");
    let mut t = t;
    t.records.truncate(cut);
    let w = what_if(&t, t.header.config.clone(), &DeciderRegistry::new()).expect("replay");
    assert_eq!(
        w.missing.expect("missing").to_string(),
        "trace has no answer for step 1 (attempt 3)"
    );
}

fn openai(name: &str) -> serde_json::Value {
    let path = format!(
        "{}/../tests/fixtures/openai/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json")
}

#[test]
fn import_of_a_clean_conversation_replays_and_reads_like_the_recording() {
    use agentloop_trace_tools::import::{openai_chat, ImportOptions};
    let imported = openai_chat(&openai("calc.json"), &ImportOptions::default()).expect("import");
    assert_eq!(imported.findings, []);
    assert_eq!(agentloop_core::trace::replay(&imported.trace), None);
    assert_eq!(
        imported.trace.header.config.system.as_deref(),
        Some("You are a calculator assistant.")
    );
    let t = Transcript::from_trace(&imported.trace);
    assert_eq!(t.summary.steps, 2);
    assert_eq!(t.summary.final_text.as_deref(), Some("The answer is 5."));
    assert!(t.items.iter().any(|i| matches!(i,
        Item::Tool { id, result: Some(r), .. } if id == "call_abc" && r == "5")));
}

#[test]
fn import_reports_a_missing_result_and_a_reply_after_the_end() {
    use agentloop_trace_tools::import::{openai_chat, ImportOptions};
    let imported =
        openai_chat(&openai("missing-result.json"), &ImportOptions::default()).expect("import");
    let findings: Vec<String> = imported.findings.iter().map(|f| f.to_string()).collect();
    assert_eq!(
        findings,
        [
            "step 1: tool call call_2 (calculator) has no result in the recording; imported as \
             an error result",
            "message 4: the machines had ended the run before this assistant message; not \
             imported"
        ]
    );
    assert_eq!(agentloop_core::trace::replay(&imported.trace), None);
}

#[test]
fn import_refuses_what_is_not_a_message_array() {
    use agentloop_trace_tools::import::{openai_chat, ImportOptions};
    let o = ImportOptions::default();
    assert!(openai_chat(&serde_json::json!({"a": 1}), &o).is_err());
    let e = openai_chat(
        &serde_json::json!([{"role": "user", "content": "hi"}, {"content": "x"}]),
        &o,
    )
    .expect_err("no role");
    assert_eq!(e.to_string(), "message 1: no `role`");
    let e = openai_chat(&serde_json::json!([{"role": "robot"}]), &o).expect_err("role");
    assert_eq!(e.to_string(), "message 0: unknown role `robot`");
}

/// R-TRACE-4: every version the crate ever wrote can be read (shown, diffed, viewed); only the
/// replayable ones (3 and later) load for replay.
#[test]
fn versions_1_and_2_are_readable_but_not_replayable() {
    for (name, version) in [("v1-calc.jsonl", 1), ("v2-calc.jsonl", 2)] {
        let path = fixture_path(name);
        let text = std::fs::read_to_string(&path).expect("fixture");
        let refused = Trace::parse(&text, &path);
        assert!(
            matches!(refused, Err(agentloop_core::trace::TraceError::Version { found, .. }) if found == version),
            "{name}: {refused:?}"
        );
        let t = Trace::read_lines(text.lines().map(Ok::<_, std::convert::Infallible>), &path)
            .expect("readable");
        assert_eq!(t.header.version, version as u32);
        let shown = Transcript::from_trace(&t);
        assert_eq!(shown.summary.steps, 2, "{name}");
        assert_eq!(shown.summary.tool_calls, 1, "{name}");
        assert_eq!(shown.summary.outcome, Some(Outcome::Completed), "{name}");
    }
}
