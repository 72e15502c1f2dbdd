//! Typed final answers (structured output): `Agent::run_typed::<T>` asks for an
//! answer matching `T`'s JSON Schema, the runtime checks it, and an invalid answer goes back to
//! the model once with its errors (`observing_retry_output`) before the value is returned.

use std::sync::{Arc, Mutex};

use agentloop::model::{DeltaStream, Model, ModelRequest};
use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::{Agent, AgentError};
use agentloop::trace::replay;
use agentloop_core::trace::TraceRecord;
use agentloop_core::{Event, Message, ModelError, RunError};
use async_trait::async_trait;
use serde::Deserialize;

#[derive(Debug, PartialEq, Deserialize, schemars::JsonSchema)]
struct Point {
    x: i64,
    y: i64,
}

/// A scripted model that keeps every request it gets.
struct Recording {
    inner: ScriptedModel,
    seen: Arc<Mutex<Vec<ModelRequest>>>,
}

#[async_trait]
impl Model for Recording {
    fn name(&self) -> String {
        self.inner.name()
    }
    async fn stream(&self, request: ModelRequest) -> Result<DeltaStream, ModelError> {
        self.seen.lock().expect("log").push(request.clone());
        self.inner.stream(request).await
    }
}

fn agent(turns: &str) -> (Agent, Arc<Mutex<Vec<ModelRequest>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = Recording {
        inner: ScriptedModel::from_json_str(turns, "inline").expect("script"),
        seen: seen.clone(),
    };
    (Agent::builder().model(model).build(), seen)
}

#[tokio::test]
async fn run_typed_returns_the_value_after_one_output_retry() {
    let (agent, seen) = agent(
        r#"{"turns": [
            {"text": "Sure! The point is (2, 2)."},
            {"text": "```json\n{\"x\": 2, \"y\": 2}\n```"}
        ]}"#,
    );
    let (point, output) = agent
        .run_typed::<Point>("s", "A point on the diagonal")
        .await
        .expect("a point");
    assert_eq!(point, Point { x: 2, y: 2 });
    assert_eq!(output.result.iterations, 2, "one output retry");
    let seen = seen.lock().expect("log").clone();
    assert_eq!(seen.len(), 2);
    for r in &seen {
        let output = r
            .params
            .output
            .as_ref()
            .expect("the request carries the schema");
        assert_eq!(output.name, "Point");
        assert_eq!(output.schema["required"], serde_json::json!(["x", "y"]));
    }
    // The retry's request ends with the errors as a user message.
    let Some(Message::User { content, .. }) = seen[1].messages.iter().last() else {
        panic!("no user message last: {:?}", seen[1].messages);
    };
    assert!(
        content
            .starts_with("the answer does not match the required JSON Schema:\n- (root): not JSON"),
        "{content}"
    );
}

#[tokio::test]
async fn an_answer_still_invalid_after_the_retries_is_a_typed_error() {
    let (agent, _) = agent(
        r#"{"turns": [
            {"text": "{\"x\": 1}"},
            {"text": "{\"x\": 1, \"y\": \"two\"}"}
        ]}"#,
    );
    let err = agent
        .run_typed::<Point>("s", "A point")
        .await
        .expect_err("invalid twice");
    match &err {
        AgentError::Ended { reason, error, .. } => {
            assert_eq!(reason, "output_invalid");
            let Some(RunError::OutputInvalid { message }) = error else {
                panic!("a typed output_invalid error: {error:?}");
            };
            assert!(message.contains("/y"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("output_invalid"), "{err}");
}

#[tokio::test]
async fn the_verdict_is_recorded_so_the_trace_replays_without_a_validator() {
    let (agent, _) = agent(r#"{"turns": [{"text": "nope"}, {"text": "{\"x\": 0, \"y\": 0}"}]}"#);
    let mut config = agent.config().clone();
    config.output = Some(agentloop_core::output::OutputSpec::new(
        "Point",
        serde_json::to_value(schemars::schema_for!(Point)).expect("schema"),
    ));
    let out = agent
        .run_configured("s", vec![Message::user("p")], config, None, true)
        .await
        .expect("run");
    let trace = out.trace.expect("recorded");
    let verdicts = trace
        .records
        .iter()
        .filter(|r| {
            matches!(
                r,
                TraceRecord::Input {
                    event: Event::Done {
                        output_rejected: Some(_),
                        ..
                    },
                    ..
                }
            )
        })
        .count();
    assert_eq!(verdicts, 1, "the first answer's rejection is in the trace");
    assert_eq!(replay(&trace), None, "the trace replays without divergence");
}

#[test]
fn providers_ask_for_the_schema_natively_or_by_instruction() {
    let spec = agentloop_core::output::OutputSpec::new(
        "my::Point<i64>",
        serde_json::json!({"type": "object", "required": ["x"]}),
    );
    let request = ModelRequest {
        run_id: "r".into(),
        model_call_index: 1,
        attempt: 1,
        session_turn: 0,
        model: String::new(),
        system: Some("Be brief.".into()),
        messages: vec![Message::user("p")].into(),
        tools: Default::default(),
        params: agentloop::model::ModelParams {
            output: Some(spec.clone()),
            ..Default::default()
        },
    };
    let openai = agentloop::provider::openai::request_body(&request, "gpt-test");
    assert_eq!(openai["response_format"]["type"], "json_schema");
    assert_eq!(
        openai["response_format"]["json_schema"]["name"], "my__Point_i64_",
        "a name the API accepts"
    );
    assert_eq!(
        openai["response_format"]["json_schema"]["schema"],
        spec.schema
    );
    let anthropic = agentloop::provider::anthropic::request_body(&request, "claude-test", 100);
    let system = anthropic["system"].as_str().unwrap_or_default();
    assert!(system.starts_with("Be brief.\n\n"), "{system}");
    assert!(system.contains(&spec.instruction()), "{system}");
    assert!(anthropic.get("response_format").is_none());
}

/// A typed answer (or typed tool arguments) needs no dependency besides
/// agentloop: serde and schemars are re-exported.
#[derive(Debug, PartialEq, agentloop::serde::Deserialize, agentloop::schemars::JsonSchema)]
#[serde(crate = "agentloop::serde")]
#[schemars(crate = "agentloop::schemars")]
struct Reexported {
    n: u32,
}

#[tokio::test]
async fn derives_through_the_re_exports_work() {
    let (agent, _) = agent(r#"{"turns": [{"text": "{\"n\": 3}"}]}"#);
    let (value, _) = agent
        .run_typed::<Reexported>("s", "n")
        .await
        .expect("typed");
    assert_eq!(value, Reexported { n: 3 });
}
