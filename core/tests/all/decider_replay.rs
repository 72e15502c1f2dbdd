//! The decision function by name (R-OUT-3) and what replay does with it (R-TRACE-2), plus the
//! payloads of the commit and end events (R-STR-4, R-OUT-1). Runs are driven through
//! `Run::handle` by hand: a model step that calls the calculator, its result, then (with the
//! default decider) a final answer.

use agentloop_core::agent_event::{AgentEvent, Outcome};
use agentloop_core::message::{FinishReason, MessageDelta, ToolStatus, Usage};
use agentloop_core::react::{DeciderRef, DeciderRegistry, Decision, Observation, DEFAULT_DECIDER};
use agentloop_core::trace::{
    replay, replay_with, Trace, TraceError, TraceHeader, TraceRecord, TRACE_VERSION,
};
use agentloop_core::{AttemptId, Effect, Event, Message, Run, RunConfig, ToolSpec};

const STOP_AFTER_TOOLS: &str = "stop_after_tools";

/// Stops as soon as a step asked for tools: unlike the default decider, which continues.
fn stop_after_tools(o: &Observation) -> Decision {
    if o.has_tool_calls {
        Decision::Stop
    } else {
        Decision::Complete
    }
}

fn config(decider: DeciderRef) -> RunConfig {
    RunConfig {
        tools: vec![ToolSpec {
            name: "calculator".into(),
            description: "evaluates arithmetic".into(),
            parameters: serde_json::json!({"type": "object"}),
        }]
        .into(),
        decider,
        ..RunConfig::default()
    }
}

/// Feeds `event`, records it, and returns the step's effects.
pub(crate) fn feed(run: &mut Run, trace: &mut Trace, event: Event) -> Vec<Effect> {
    let step = run.handle(event.clone());
    assert!(!step.unhandled, "{event:?} was not handled");
    trace.record(&event, &step);
    step.effects
}

/// The attempt of the model call among `effects`, if any.
pub(crate) fn attempt_of(effects: &[Effect]) -> Option<AttemptId> {
    effects.iter().find_map(|e| match e {
        Effect::CallModel { request } => Some(AttemptId {
            run_id: request.run_id.clone(),
            model_call_index: request.model_call_index,
            attempt: request.attempt,
        }),
        _ => None,
    })
}

/// Streams one model reply for `attempt`: `text`, then the tool calls `(id, tool, arguments)`,
/// then the finish.
pub(crate) fn stream(
    run: &mut Run,
    trace: &mut Trace,
    attempt: AttemptId,
    text: &str,
    calls: &[(&str, &str, &str)],
) -> Vec<Effect> {
    feed(
        run,
        trace,
        Event::StreamOpened {
            attempt: attempt.clone(),
        },
    );
    let mut deltas = vec![
        MessageDelta::StartStep,
        MessageDelta::TextDelta {
            text: text[..text.len() / 2].into(),
        },
        MessageDelta::TextDelta {
            text: text[text.len() / 2..].into(),
        },
    ];
    for (id, tool, args) in calls {
        deltas.push(MessageDelta::ToolCall {
            id: (*id).into(),
            name: (*tool).into(),
            arguments: (*args).into(),
        });
    }
    deltas.push(MessageDelta::FinishStep {
        finish_reason: Some(if calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        }),
        raw_finish_reason: None,
        usage: Some(Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Usage::default()
        }),
    });
    deltas.push(MessageDelta::Finish);
    for (seq, delta) in deltas.into_iter().enumerate() {
        feed(
            run,
            trace,
            Event::Delta {
                attempt: attempt.clone(),
                seq: seq as u64,
                delta,
            },
        );
    }
    feed(run, trace, Event::done(attempt))
}

/// Records a whole run with `decider`: step 1 calls the calculator; when the run goes on,
/// step 2 answers. Returns the trace and every emitted event.
fn record(decider: DeciderRef) -> (Trace, Vec<AgentEvent>) {
    let cfg = config(decider);
    let mut trace = Trace::new(TraceHeader {
        timeouts: None,
        version: TRACE_VERSION,
        agentloop: "test".into(),
        session: "s".into(),
        tools: cfg.tools.clone(),
        config: cfg.clone(),
    });
    let mut run = Run::new(cfg);
    let mut effects = feed(
        &mut run,
        &mut trace,
        Event::Start {
            run_id: "r1".into(),
            history: vec![],
            input: vec![Message::user("What is 2+3?")],
            session_turns: 0,
        },
    );
    let attempt = attempt_of(&effects).expect("step 1 calls the model");
    effects.extend(stream(
        &mut run,
        &mut trace,
        attempt,
        "Let me calculate.",
        &[("c1", "calculator", r#"{"expression":"2+3"}"#)],
    ));
    let after_tool = feed(
        &mut run,
        &mut trace,
        Event::ToolFinished {
            tool_call_id: "c1".into(),
            status: ToolStatus::Completed,
            content: "5".into(),
        },
    );
    effects.extend(after_tool.iter().cloned());
    if let Some(attempt) = attempt_of(&after_tool) {
        effects.extend(stream(
            &mut run,
            &mut trace,
            attempt,
            "The answer is 5.",
            &[],
        ));
    }
    // The run-end entry is stored: the run reports its end.
    effects.extend(feed(&mut run, &mut trace, Event::RunEndCommitted));
    assert!(run.is_terminal(), "the run ended: {:?}", run.state());
    let events = effects
        .into_iter()
        .filter_map(|e| match e {
            Effect::Emit { event } => Some(event),
            _ => None,
        })
        .collect();
    (trace, events)
}

fn custom() -> DeciderRef {
    DeciderRef::new(STOP_AFTER_TOOLS, stop_after_tools)
}

fn run_end(events: &[AgentEvent]) -> (String, Option<String>) {
    events
        .iter()
        .find_map(|e| match e {
            AgentEvent::RunEnd {
                outcome: Outcome::Completed,
                reason,
                final_text,
                ..
            } => Some((reason.clone(), final_text.clone())),
            _ => None,
        })
        .expect("a run_end event")
}

#[test]
fn r_out_3_custom_decider_trace_round_trips_jsonl_and_replays_with_the_registry() {
    let (trace, events) = record(custom());
    // The custom decider stopped after the tool step; the default one would have gone on.
    assert_eq!(run_end(&events).0, "stopped");

    let text = trace.to_jsonl();
    let header: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("a header line")).expect("JSON header");
    assert_eq!(header["config"]["decider"], STOP_AFTER_TOOLS);

    let parsed = Trace::parse(&text, "custom.jsonl").expect("parses");
    assert_eq!(parsed, trace);
    assert_eq!(parsed.header.config.decider.name(), STOP_AFTER_TOOLS);
    assert!(
        !parsed.header.config.decider.is_resolved(),
        "a parsed header names the decider but cannot have its function"
    );

    let registry = DeciderRegistry::new().with(STOP_AFTER_TOOLS, stop_after_tools);
    assert_eq!(
        replay_with(&parsed, &registry).expect("the registry has the decider"),
        None,
        "replays identically"
    );
}

#[test]
fn r_out_3_replay_without_the_decider_fails_naming_it() {
    let (trace, _) = record(custom());
    let parsed = Trace::parse(&trace.to_jsonl(), "custom.jsonl").expect("parses");
    let error = match replay_with(&parsed, &DeciderRegistry::new()) {
        Err(e @ TraceError::UnknownDecider { .. }) => e,
        other => panic!("expected UnknownDecider, got {other:?}"),
    };
    if let TraceError::UnknownDecider { name, known } = &error {
        assert_eq!(name, STOP_AFTER_TOOLS);
        assert_eq!(known, &vec![DEFAULT_DECIDER.to_string()]);
    }
    let message = error.to_string();
    assert!(message.contains("`stop_after_tools`"), "{message}");
    assert!(message.contains("not registered"), "{message}");

    // The plain `replay` (built-in deciders only) does not run it with the default decision
    // either: it reports a divergence at the first record, with nothing replayed.
    let d = replay(&parsed).expect("not reported identical");
    assert_eq!(d.index, 0);
    assert_eq!(d.recorded.as_ref(), parsed.records.first());
    assert_eq!(d.replayed, None);

    // Registered under the right name but with another function, replay reports the real
    // divergence (the default decision continues where the recording stopped).
    let wrong =
        DeciderRegistry::new().with(STOP_AFTER_TOOLS, agentloop_core::react::default_decider);
    let d = replay_with(&parsed, &wrong)
        .expect("the name is registered")
        .expect("a different function diverges");
    assert!(matches!(d.recorded, Some(TraceRecord::Transition { .. })));
}

#[test]
fn r_out_3_default_decider_replays_with_plain_replay_and_old_headers_mean_default() {
    let (trace, events) = record(DeciderRef::default());
    assert_eq!(run_end(&events).0, "final_answer");
    let text = trace.to_jsonl();
    assert!(text.contains(r#""decider":"default""#));
    let parsed = Trace::parse(&text, "default.jsonl").expect("parses");
    assert!(parsed.header.config.decider.is_resolved());
    assert_eq!(replay(&parsed), None);
    assert_eq!(
        replay_with(&parsed, &DeciderRegistry::new()).ok(),
        Some(None)
    );

    // A header written before deciders had names has none: it means the default decider.
    let old = text.replacen(r#","decider":"default""#, "", 1);
    assert!(!old.contains("\"decider\""));
    let parsed = Trace::parse(&old, "old.jsonl").expect("parses");
    assert_eq!(parsed.header.config.decider.name(), DEFAULT_DECIDER);
    assert_eq!(replay(&parsed), None);
    assert_eq!(
        replay_with(&parsed, &DeciderRegistry::new()).ok(),
        Some(None)
    );
}

#[test]
fn r_str_4_response_complete_carries_the_committed_message_and_run_end_the_final_text() {
    let (_, events) = record(DeciderRef::default());
    let commits: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ResponseComplete {
                model_call_index,
                tool_calls,
                usage,
                message,
            } => Some((*model_call_index, *tool_calls, *usage, message.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(commits.len(), 2);
    let (index, tool_calls, usage, first) = &commits[0];
    assert_eq!((*index, *tool_calls), (1, 1));
    assert_eq!(first.text, "Let me calculate.");
    assert_eq!(first.tool_calls.len(), 1);
    assert_eq!(first.tool_calls[0].name, "calculator");
    assert_eq!(first.tool_calls[0].arguments["expression"], "2+3");
    assert_eq!(first.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(*usage, first.usage);
    assert_eq!(commits[1].3.text, "The answer is 5.");
    assert_eq!(
        run_end(&events),
        ("final_answer".into(), Some("The answer is 5.".into()))
    );

    // The JSON form: the message is one field, the final text another.
    let end = events
        .iter()
        .find(|e| matches!(e, AgentEvent::RunEnd { .. }))
        .expect("run_end");
    let json = serde_json::to_value(end).expect("serializes");
    assert_eq!(json["final_text"], "The answer is 5.");
}
