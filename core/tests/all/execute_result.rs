//! Each step's `ExecuteResult` (R-IN-5): the outer machine records
//! every step that ends — committed, failed, overflowed, aborted — in the run's result and as
//! a `step_finished` event, naming the committed message and its tool results by position in
//! the run's messages (never copying them), and keeps those positions right through compaction.

use crate::steps::{attempt_id, request_of, start};
use agentloop_core::agent_event::AgentEvent;
use agentloop_core::error::{ErrorKind, ModelError};
use agentloop_core::event::KillPolicy;
use agentloop_core::model::ModelRequest;
use agentloop_core::{
    Effect, Event, Message, MessageDelta, Outcome, Run, RunConfig, Step, StepEnd, StepRecord,
    ToolSpec, ToolStatus, Usage,
};

fn config() -> RunConfig {
    let mut c = RunConfig {
        tools: vec![ToolSpec {
            name: "calc".into(),
            description: "adds".into(),
            parameters: serde_json::json!({"type": "object"}),
        }]
        .into(),
        ..RunConfig::default()
    };
    c.step.retry.jitter_percent = 0;
    c
}

/// Streams an answer to `r`: `text`, then one `calc` call per id in `calls`, with usage.
fn answer(run: &mut Run, r: &ModelRequest, text: &str, calls: &[&str]) -> Step {
    let attempt = attempt_id(r);
    let _ = run.handle(Event::StreamOpened {
        attempt: attempt.clone(),
    });
    let mut deltas = vec![MessageDelta::TextDelta { text: text.into() }];
    for id in calls {
        deltas.push(MessageDelta::ToolCall {
            id: (*id).into(),
            name: "calc".into(),
            // Distinct arguments: identical calls in a row would be a doom loop (R-TOOL-4).
            arguments: format!(r#"{{"call":"{id}"}}"#),
        });
    }
    deltas.push(MessageDelta::FinishStep {
        finish_reason: None,
        raw_finish_reason: None,
        usage: Some(Usage {
            input_tokens: 10,
            output_tokens: r.model_call_index.into(),
            ..Usage::default()
        }),
    });
    deltas.push(MessageDelta::Finish);
    for (seq, delta) in deltas.into_iter().enumerate() {
        let _ = run.handle(Event::Delta {
            attempt: attempt.clone(),
            seq: seq as u64,
            delta,
        });
    }
    run.handle(Event::Done {
        attempt,
        rejected_arguments: Vec::new(),
        output_rejected: None,
    })
}

fn finish_tool(run: &mut Run, id: &str, status: ToolStatus) -> Step {
    run.handle(Event::ToolFinished {
        tool_call_id: id.into(),
        status,
        content: format!("{id} {}", status.as_str()),
    })
}

/// The records the `step_finished` events of `steps` carry.
fn reported<'a>(steps: impl IntoIterator<Item = &'a Step>) -> Vec<StepRecord> {
    steps
        .into_iter()
        .flat_map(|s| &s.effects)
        .filter_map(|e| match e {
            Effect::Emit {
                event: AgentEvent::StepFinished { step },
            } => Some((**step).clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn r_in_5_each_step_names_its_message_and_results_in_the_run_messages() {
    let mut run = Run::new(config());
    let mut steps = vec![start(&mut run, "add")];
    let r1 = request_of(&steps[0]).expect("step 1");
    steps.push(answer(&mut run, &r1, "calling", &["c1", "c2"]));
    steps.push(finish_tool(&mut run, "c1", ToolStatus::Completed));
    steps.push(finish_tool(&mut run, "c2", ToolStatus::Error));
    let r2 = request_of(steps.last().expect("step")).expect("step 2");
    steps.push(answer(&mut run, &r2, "done", &[]));
    steps.push(run.handle(Event::RunEndCommitted));
    let result = run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Completed);
    assert_eq!(
        reported(&steps),
        result.steps,
        "each record is reported once"
    );
    assert_eq!(result.steps.len(), 2);

    let first = &result.steps[0];
    assert_eq!(
        (first.model_call_index, first.attempts, first.end),
        (1, 1, StepEnd::Success)
    );
    assert_eq!(
        (first.message, first.tool_calls, first.tool_results),
        (Some(1), 2, 2)
    );
    let results = result.execute_results();
    let x = &results[0];
    assert!(x.success());
    assert_eq!(x.message.map(|m| m.text.as_str()), Some("calling"));
    let ids: Vec<&str> = x.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["c1", "c2"]);
    let statuses: Vec<ToolStatus> = x.tool_results.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [ToolStatus::Completed, ToolStatus::Error],
        "a failed tool is a result of a successful step (R-IN-3)"
    );
    assert_eq!(x.usage.map(|u| u.output_tokens), Some(1));
    assert_eq!(x.error, None);
    // The result points into the messages: the message there is the same one, not a copy.
    match &result.messages[1] {
        Message::Assistant(m) => assert!(std::ptr::eq(m, x.message.expect("message"))),
        other => panic!("not the assistant message: {other:?}"),
    }
    let y = &results[1];
    assert_eq!(y.message.map(|m| m.text.as_str()), Some("done"));
    assert!(y.tool_calls.is_empty() && y.tool_results.is_empty());
    assert_eq!(result.steps[1].message, Some(4));
}

#[test]
fn r_in_5_a_record_costs_the_same_whatever_the_message_size() {
    let size = |text: &str| {
        let mut run = Run::new(config());
        let r = request_of(&start(&mut run, "q")).expect("request");
        let _ = answer(&mut run, &r, text, &[]);
        let record = run.steps().first().cloned().expect("recorded");
        serde_json::to_string(&record).expect("serializes").len()
    };
    assert_eq!(size("short"), size(&"long ".repeat(10_000)));
}

#[test]
fn r_in_5_retried_failed_and_overflowed_steps_are_recorded_with_their_error() {
    let mut run = Run::new(config());
    let r1 = request_of(&start(&mut run, "q")).expect("request");
    // A retried step: 503, then the answer.
    let s = run.handle(Event::TransportError {
        attempt: attempt_id(&r1),
        error: ModelError::new(ErrorKind::ServerError, "503"),
    });
    let timer_id = s
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::StartTimer { timer_id, .. } => Some(*timer_id),
            _ => None,
        })
        .expect("backoff");
    let r1b = request_of(&run.handle(Event::TimerElapsed { timer_id })).expect("attempt 2");
    let _ = answer(&mut run, &r1b, "calling", &["c1"]);
    let s = finish_tool(&mut run, "c1", ToolStatus::Completed);
    // An overflowed step: compaction, then the same step again.
    let r2 = request_of(&s).expect("step 2");
    let s = run.handle(Event::ContextOverflow {
        attempt: attempt_id(&r2),
        error: ModelError::new(ErrorKind::ContextOverflow, "too long"),
    });
    assert_eq!(
        reported([&s])
            .into_iter()
            .map(|r| r.end)
            .collect::<Vec<_>>(),
        [StepEnd::ContextOverflow]
    );
    let kept = run.messages().to_vec();
    let s = run.handle(Event::CompactionDone {
        messages: kept,
        removed: 0,
    });
    let r2b = request_of(&s).expect("step 2 again");
    assert_eq!(r2b.model_call_index, 2);
    // A failed step: not retried (401), the run fails.
    let _ = run.handle(Event::TransportError {
        attempt: attempt_id(&r2b),
        error: ModelError::new(ErrorKind::Authentication, "401"),
    });
    let _ = run.handle(Event::RunEndCommitted);
    let result = run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Failed);
    let summary: Vec<(u32, u32, StepEnd, Option<ErrorKind>)> = result
        .steps
        .iter()
        .map(|s| {
            (
                s.model_call_index,
                s.attempts,
                s.end,
                s.error.as_ref().map(|e| e.kind),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (1, 2, StepEnd::Success, None),
            (
                2,
                1,
                StepEnd::ContextOverflow,
                Some(ErrorKind::ContextOverflow)
            ),
            (2, 1, StepEnd::Failed, Some(ErrorKind::Authentication)),
        ]
    );
    let results = result.execute_results();
    assert_eq!(results[0].tool_results.len(), 1);
    assert!(results[2].message.is_none() && !results[2].success());
}

#[test]
fn r_in_5_an_aborted_step_is_recorded_with_what_it_committed() {
    let mut run = Run::new(config());
    let r = request_of(&start(&mut run, "q")).expect("request");
    let _ = answer(&mut run, &r, "calling", &["c1"]);
    let s = run.handle(Event::Abort {
        reason: "user".into(),
        kill: KillPolicy::All,
    });
    let records = reported([&s]);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].end, StepEnd::Aborted);
    assert_eq!((records[0].tool_calls, records[0].tool_results), (1, 1));
    let _ = run.handle(Event::RunEndCommitted);
    let result = run.result().expect("ended");
    let x = &result.execute_results()[0];
    assert_eq!(x.tool_results[0].status, ToolStatus::Aborted);
    // Aborted before anything was committed: no message.
    let mut run = Run::new(config());
    let _ = start(&mut run, "q");
    let s = run.handle(Event::Abort {
        reason: "user".into(),
        kill: KillPolicy::All,
    });
    let records = reported([&s]);
    assert_eq!(
        (records[0].end, records[0].message),
        (StepEnd::Aborted, None)
    );
}

#[test]
fn r_in_5_compaction_moves_the_positions_of_the_messages_it_keeps() {
    // A summary in one message, or in two (the kept messages then start one later).
    for prefix in [1, 2] {
        compaction_moves_positions(prefix);
    }
}

fn compaction_moves_positions(prefix: usize) {
    let mut c = config();
    c.compact_threshold = Some(6);
    let mut run = Run::new(c);
    let mut last = start(&mut run, "q");
    for i in 1..=2 {
        let r = request_of(&last).expect("request");
        let id = format!("c{i}");
        let _ = answer(&mut run, &r, &format!("step {i}"), &[id.as_str()]);
        last = finish_tool(&mut run, &id, ToolStatus::Completed);
    }
    // 1 user + 2 × (assistant + tool) = 5 messages; the third step makes 7: over the threshold.
    let r = request_of(&last).expect("request");
    let _ = answer(&mut run, &r, "step 3", &["c3"]);
    let s = finish_tool(&mut run, "c3", ToolStatus::Completed);
    let to_compact = s
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::Compact { messages, .. } => Some(messages.clone()),
            _ => None,
        })
        .expect("compaction requested");
    assert_eq!(to_compact.len(), 7);
    // The compactor keeps a summary and the last four messages (steps 2 and 3).
    let mut compacted = vec![Message::user("summary of step 1")];
    if prefix == 2 {
        compacted.push(Message::user("and a note"));
    }
    compacted.extend(to_compact[3..].iter().cloned());
    let s = run.handle(Event::CompactionDone {
        messages: compacted,
        removed: 3,
    });
    let r = request_of(&s).expect("step 4");
    let _ = answer(&mut run, &r, "done", &[]);
    let _ = run.handle(Event::RunEndCommitted);
    let result = run.result().expect("ended");
    let positions: Vec<(Option<usize>, bool)> = result
        .steps
        .iter()
        .map(|s| (s.message, s.compacted))
        .collect();
    assert_eq!(
        positions,
        [
            (None, true),
            (Some(prefix), false),
            (Some(prefix + 2), false),
            (Some(prefix + 4), false)
        ],
        "prefix {prefix}"
    );
    let texts: Vec<Option<&str>> = result
        .execute_results()
        .iter()
        .map(|x| x.message.map(|m| m.text.as_str()))
        .collect();
    assert_eq!(texts, [None, Some("step 2"), Some("step 3"), Some("done")]);
    let results = result.execute_results();
    assert_eq!(
        results[0].tool_calls.len(),
        0,
        "compacted away: nothing to borrow"
    );
    assert_eq!(
        result.steps[0].tool_calls, 1,
        "the record still counts them"
    );
    assert_eq!(results[2].tool_results[0].tool_call_id, "c3");
}

#[test]
fn r_in_5_a_config_without_report_steps_reads_off_and_emits_no_step_finished() {
    let mut v = serde_json::to_value(config()).expect("serializes");
    assert_eq!(v["report_steps"], true, "on by default, and written");
    v.as_object_mut().expect("object").remove("report_steps");
    let old: RunConfig = serde_json::from_value(v).expect("reads");
    assert!(!old.report_steps, "a trace recorded before it existed");
    let mut run = Run::new(old);
    let r = request_of(&start(&mut run, "q")).expect("request");
    let done = answer(&mut run, &r, "hi", &[]);
    assert!(reported([&done]).is_empty());
    assert_eq!(
        run.steps().len(),
        1,
        "the result keeps the records either way"
    );
}

/// A record's wire form: `end` by its snake_case name (what `StepEnd::as_str` gives), zero
/// counts left out, others kept.
#[test]
fn r_in_5_step_records_serialize_by_name_without_zero_counts() {
    use agentloop_core::execute_result::{StepEnd, StepRecord};
    for end in [
        StepEnd::Success,
        StepEnd::Failed,
        StepEnd::ContextOverflow,
        StepEnd::Aborted,
    ] {
        let json = serde_json::to_value(end).expect("json");
        assert_eq!(json.as_str(), Some(end.as_str()));
    }
    let record = |tool_calls, tool_results| StepRecord {
        model_call_index: 1,
        model: "m".into(),
        attempts: 1,
        end: StepEnd::Success,
        message: Some(1),
        compacted: false,
        tool_calls,
        tool_results,
        usage: None,
        error: None,
    };
    let none = serde_json::to_value(record(0, 0)).expect("json");
    assert!(
        none.get("tool_calls").is_none() && none.get("tool_results").is_none(),
        "{none}"
    );
    let some = serde_json::to_value(record(2, 1)).expect("json");
    assert_eq!(
        (some["tool_calls"].as_u64(), some["tool_results"].as_u64()),
        (Some(2), Some(1))
    );
    let back: StepRecord = serde_json::from_value(none).expect("round trip");
    assert_eq!(back, record(0, 0));
}
