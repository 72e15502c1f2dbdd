//! Typed final answers: the runtime's verdict on the answer arrives with `done`;
//! Observing retries a rejected answer with its errors (`observing_retry_output`) or, with
//! the retries used up, fails the run (`observing_output_invalid`).

use crate::steps::{self, answer, react_rows, request_of};
use agentloop_core::agent_event::AgentEvent;
use agentloop_core::chart::ReactRow;
use agentloop_core::entry::Entry;
use agentloop_core::model::ModelRequest;
use agentloop_core::output::{output_json, OutputRejected, OutputSpec};
use agentloop_core::tool_check::SchemaViolation;
use agentloop_core::{Effect, Event, Message, Outcome, Run, RunConfig, Step};
use serde_json::json;

fn config(retries: u32) -> RunConfig {
    RunConfig {
        output: Some(OutputSpec {
            retries,
            ..OutputSpec::new("Point", json!({"type": "object", "required": ["x"]}))
        }),
        ..RunConfig::default()
    }
}

fn rejected(reason: &str) -> OutputRejected {
    OutputRejected::new([SchemaViolation {
        path: String::new(),
        reason: reason.into(),
    }])
    .expect("a violation")
}

fn output_events(step: &Step) -> Vec<(String, bool)> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Emit {
                event: AgentEvent::OutputInvalid { error, retrying },
            } => Some((error.clone(), *retrying)),
            _ => None,
        })
        .collect()
}

fn start(run: &mut Run) -> ModelRequest {
    request_of(&steps::start(run, "a point")).expect("first request")
}

#[test]
fn a_rejected_answer_goes_back_with_its_errors_and_the_next_one_completes() {
    let mut run = Run::new(config(1));
    let r1 = start(&mut run);
    assert_eq!(
        r1.params.output.as_ref().map(|o| o.name.as_str()),
        Some("Point"),
        "the request carries the output spec"
    );
    let s = answer(
        &mut run,
        &r1,
        "here you go",
        Some(rejected("not JSON: expected value")),
    );
    assert!(
        react_rows(&s).contains(&ReactRow::ObservingRetryOutput),
        "{s:?}"
    );
    let events = output_events(&s);
    assert_eq!(events.len(), 1);
    assert!(events[0].1, "retrying");
    assert!(events[0].0.contains("not JSON: expected value"));
    // The errors are persisted and sent as a user message of the next request.
    assert!(s.effects.iter().any(|e| matches!(e,
        Effect::Persist { entry: Entry::UserInput { message, .. } }
            if message == &Message::user(events[0].0.clone()))));
    let r2 = request_of(&s).expect("the retry's request");
    assert_eq!(r2.model_call_index, 2);
    assert_eq!(
        r2.messages.iter().last(),
        Some(&Message::user(events[0].0.clone()))
    );
    let s = answer(&mut run, &r2, r#"{"x": 1}"#, None);
    assert!(react_rows(&s).contains(&ReactRow::ObservingComplete));
    let _ = run.handle(Event::RunEndCommitted);
    let result = run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Completed);
    assert_eq!(result.reason, "final_answer");
    assert_eq!(result.final_text(), Some(r#"{"x": 1}"#));
}

#[test]
fn with_the_retries_used_up_the_run_fails_with_output_invalid() {
    let mut run = Run::new(config(0));
    let r1 = start(&mut run);
    let s = answer(
        &mut run,
        &r1,
        "{}",
        Some(rejected("\"x\" is a required property")),
    );
    assert_eq!(
        react_rows(&s).last(),
        Some(&ReactRow::ObservingOutputInvalid),
        "{s:?}"
    );
    assert!(request_of(&s).is_none());
    assert_eq!(output_events(&s).len(), 1);
    assert!(!output_events(&s)[0].1);
    let _ = run.handle(Event::RunEndCommitted);
    let result = run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Failed);
    assert_eq!(result.reason, "output_invalid");
    assert!(matches!(
        &result.error,
        Some(agentloop_core::RunError::OutputInvalid { message })
            if message.contains("\"x\" is a required property")
    ));
}

/// Found by the model checker (`agentloop-verify`, property "no completion with a rejected
/// typed answer"): a rejection on the last allowed step, with output retries left, asked
/// again although no step was left, so the run ended at `max_steps` as *completed* with the
/// answer its check had rejected. With no step left the run fails with `output_invalid`.
#[test]
fn a_rejected_answer_on_the_last_step_fails_the_run_even_with_retries_left() {
    let mut run = Run::new(RunConfig {
        max_steps: 1,
        ..config(3)
    });
    let r1 = start(&mut run);
    let s = answer(
        &mut run,
        &r1,
        "{}",
        Some(rejected("\"x\" is a required property")),
    );
    assert!(
        request_of(&s).is_none(),
        "no step is left to ask again: {s:?}"
    );
    assert_eq!(output_events(&s).len(), 1);
    assert!(!output_events(&s)[0].1, "not retrying");
    let _ = run.handle(Event::RunEndCommitted);
    let result = run.result().expect("ended");
    assert_eq!(result.outcome, Outcome::Failed);
    assert_eq!(result.reason, "output_invalid");
}

#[test]
fn without_an_output_spec_a_verdict_changes_nothing() {
    let mut run = Run::new(RunConfig::default());
    let r1 = start(&mut run);
    assert!(r1.params.output.is_none());
    let s = answer(&mut run, &r1, "plain", Some(rejected("ignored")));
    assert!(react_rows(&s).contains(&ReactRow::ObservingComplete));
    assert!(output_events(&s).is_empty());
}

#[test]
fn answers_are_read_as_json_with_or_without_a_code_fence() {
    assert_eq!(output_json(r#" {"x": 1} "#), Ok(json!({"x": 1})));
    assert_eq!(output_json("```json\n{\"x\": 1}\n```"), Ok(json!({"x": 1})));
    assert_eq!(output_json("```\n[1, 2]\n```"), Ok(json!([1, 2])));
    assert_eq!(output_json("```{\"x\": 2}```"), Ok(json!({"x": 2})));
    assert!(output_json("the answer is 5").is_err_and(|e| e.starts_with("not JSON: ")));
    assert!(output_json("").is_err());
    let r = OutputRejected::new((0..7).map(|i| SchemaViolation {
        path: format!("/{i}"),
        reason: "bad".into(),
    }))
    .expect("violations");
    assert_eq!(r.violations.len(), 5);
    assert_eq!(r.omitted, 2);
    let m = r.message();
    assert!(m.starts_with("the answer does not match the required JSON Schema:\n- /0: bad"));
    assert!(m.contains("- … and 2 more"));
    assert!(OutputRejected::new([]).is_none());
}
