//! Library ergonomics: `Agent::run_stream`, a typed error on every failed run,
//! backoff jitter drawn from the injected ids port (recorded, so replay is exact), and the
//! OpenTelemetry GenAI attributes on the run, step and tool spans.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::{Agent, RunStreamItem, VecSink};
use agentloop::trace::replay;
use agentloop::{AgentEvent, ErrorKind, Message, Outcome, RunError};
use agentloop_core::trace::TraceRecord;
use futures::StreamExt;

fn scripted(json: &str) -> ScriptedModel {
    ScriptedModel::from_json_str(json, "inline").expect("script")
}

const TOOL_SCRIPT: &str = r#"{"turns": [
  {"text": "Let me add.", "tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "2+3"}}]},
  {"text": "The answer is {{last_tool_result}}.", "chunk_chars": 3}
]}"#;

#[tokio::test]
async fn issue12_run_stream_yields_the_sinks_events_in_order_then_the_output() {
    let sink = Arc::new(VecSink::default());
    let agent = Agent::builder()
        .model(scripted(TOOL_SCRIPT))
        .builtin_tools()
        .deterministic()
        .sink(sink.clone())
        .build();
    let items: Vec<RunStreamItem> = agent.run_stream("s", "What is 2+3?").collect().await;
    let (last, events) = items.split_last().expect("items");
    let RunStreamItem::End(Ok(output)) = last else {
        panic!("the last item is the output: {last:?}");
    };
    assert_eq!(output.result.outcome, Outcome::Completed);
    assert_eq!(output.result.final_text(), Some("The answer is 5."));
    let streamed: Vec<_> = events
        .iter()
        .map(|i| match i {
            RunStreamItem::Event(e) => e.clone(),
            RunStreamItem::End(_) => panic!("one end, last"),
        })
        .collect();
    // The same events as the agent's own sink, in the same order.
    let seen = sink.events();
    assert_eq!(streamed.len(), seen.len());
    assert!(streamed
        .iter()
        .zip(&seen)
        .all(|(a, b)| a.index == b.index && a.event == b.event));
    assert!(streamed.windows(2).all(|w| w[0].index < w[1].index));
    let text: String = streamed
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::TextDelta {
                model_call_index: 2,
                text,
                ..
            } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "The answer is 5.");
    assert!(matches!(
        streamed.last().map(|e| &e.event),
        Some(AgentEvent::RunEnd { .. })
    ));
}

#[tokio::test]
async fn issue12_a_failed_run_carries_a_typed_error() {
    let agent = Agent::builder()
        .model(scripted(
            r#"{"turns": [{"errors": [{"status": 401, "message": "bad key"}], "text": "never"}]}"#,
        ))
        .build();
    let mut stream = agent.run_stream("s", "hi");
    let mut end = None;
    while let Some(item) = stream.next().await {
        if let RunStreamItem::End(out) = item {
            end = Some(out);
        }
    }
    let output = end.expect("an end").expect("the run started");
    let result = &output.result;
    assert_eq!(result.outcome, Outcome::Failed);
    let error = result.error.as_ref().expect("a failed run has its error");
    assert_eq!(error.kind(), "model");
    let model = error.model_error().expect("a model error");
    assert_eq!(model.kind, ErrorKind::Authentication);
    assert!(error.to_string().contains("bad key"), "{error}");
    // Serialized with its type, so a caller reading JSON can branch on it too.
    let json = serde_json::to_value(error).expect("json");
    assert_eq!(json["type"], "model");
    assert_eq!(json["error"]["kind"], "authentication");
    let back: RunError = serde_json::from_value(json).expect("round trip");
    assert_eq!(&back, error);
}

/// The ids port's default jitter seed of a run id: its FNV-1a hash (64 bits).
fn fnv1a(run_id: &str) -> u64 {
    run_id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

const RETRY_SCRIPT: &str = r#"{"turns": [
  {"errors": [{"status": 503}, {"status": 503}], "text": "ok"}
]}"#;

/// Runs the retry script (with deterministic ids or not) and returns the retry delays, the
/// recorded seed and whether the recorded trace replays.
async fn retried_run(deterministic: bool) -> (Vec<u64>, Option<u64>, bool) {
    let builder = Agent::builder().model(scripted(RETRY_SCRIPT));
    // Not deterministic: the default ids (from the clock, a fresh seed per run).
    let builder = if deterministic {
        builder.deterministic()
    } else {
        builder
    };
    let agent = builder
        .configure(|c| {
            c.step.retry.initial_backoff_ms = 40;
            c.step.retry.max_backoff_ms = 1_000;
            c.step.retry.jitter_percent = 50;
        })
        .build();
    let out = agent
        .run_with("s", vec![Message::user("hi")], None, true)
        .await
        .expect("ran");
    assert_eq!(out.result.outcome, Outcome::Completed, "{:?}", out.result);
    let trace = out.trace.expect("trace");
    let delays = trace
        .records
        .iter()
        .filter_map(|r| match r {
            TraceRecord::Effect {
                effect:
                    agentloop_core::Effect::Emit {
                        event: AgentEvent::Retry { delay_ms, .. },
                    },
                ..
            } => Some(*delay_ms),
            _ => None,
        })
        .collect();
    let replays = replay(&trace).is_none();
    (delays, trace.header.config.step.retry.jitter_seed, replays)
}

#[tokio::test]
async fn issue12_r_in_1_jitter_comes_from_the_ids_port_and_replays() {
    let (a, seed_a, replays_a) = retried_run(true).await;
    let (b, seed_b, replays_b) = retried_run(true).await;
    assert_eq!(a.len(), 2, "two retries: {a:?}");
    assert_eq!(
        seed_a,
        Some(fnv1a("run-1")),
        "the seed is the ids port's, recorded in the header"
    );
    // The backoffs are 40 and 80 ms, each cut by up to 50 %, by the draw of the recorded seed
    // for (model call 1, attempt 1) and (1, 2).
    let policy = agentloop_core::process::RetryPolicy {
        initial_backoff_ms: 40,
        max_backoff_ms: 1_000,
        jitter_percent: 50,
        jitter_seed: seed_a,
        ..Default::default()
    };
    let expected = [
        policy.jittered_delay_ms(1, None, 1 << 32 | 1),
        policy.jittered_delay_ms(2, None, 1 << 32 | 2),
    ];
    assert_eq!(a, expected);
    assert!(
        (20..=40).contains(&a[0]) && (40..=80).contains(&a[1]),
        "{a:?}"
    );
    assert_ne!(a, [40, 80], "cut by the jitter");
    // Deterministic ids: the same seed, the same delays, and the traces replay exactly.
    assert_eq!((&a, seed_a), (&b, seed_b));
    assert!(replays_a && replays_b);
    // Random ids: a fresh seed per run.
    let (_, t1, replays_t) = retried_run(false).await;
    let (_, t2, _) = retried_run(false).await;
    assert!(t1.is_some() && t1 != t2, "{t1:?} {t2:?}");
    assert!(replays_t);
}

/// Every span's fields, by span name, as the subscriber saw them (new and recorded).
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<(String, SpanFields)>>>);

/// A span's fields by name (`#id` holds its id).
type SpanFields = BTreeMap<String, String>;

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_string(),
            format!("{value:?}").replace('"', ""),
        );
    }
}

impl<S> tracing_subscriber::Layer<S> for Spans
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        fields.insert("#id".into(), id.into_u64().to_string());
        let mut spans = self.0.lock().expect("spans");
        spans.push((attrs.metadata().name().to_string(), fields));
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut spans = self.0.lock().expect("spans");
        let key = id.into_u64().to_string();
        if let Some((_, fields)) = spans.iter_mut().find(|(_, f)| f.get("#id") == Some(&key)) {
            values.record(&mut Fields(fields));
        }
    }
}

#[test]
fn issue12_spans_carry_the_opentelemetry_gen_ai_attributes() {
    use tracing_subscriber::layer::SubscriberExt;
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let agent = Agent::builder()
                .model(scripted(TOOL_SCRIPT))
                .builtin_tools()
                .max_tokens(64)
                .build();
            let out = agent.run("conv-7", "What is 2+3?").await.expect("ran");
            assert_eq!(out.result.outcome, Outcome::Completed);
        });
    });
    let spans = spans.0.lock().expect("spans").clone();
    let named = |name: &str| -> Vec<SpanFields> {
        spans
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, f)| f.clone())
            .collect()
    };
    let run = named("run");
    assert_eq!(run.len(), 1, "{spans:?}");
    assert_eq!(run[0]["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(run[0]["gen_ai.conversation.id"], "conv-7");
    let steps = named("step");
    assert_eq!(steps.len(), 2, "{spans:?}");
    for s in &steps {
        assert_eq!(s["gen_ai.operation.name"], "chat");
        assert_eq!(s["gen_ai.provider.name"], "scripted");
        assert_eq!(s["gen_ai.request.model"], "scripted");
        assert_eq!(s["gen_ai.request.max_tokens"], "64");
        assert_eq!(s["otel.name"], "chat scripted");
        assert!(s.contains_key("gen_ai.usage.output_tokens"), "{s:?}");
    }
    assert_eq!(steps[0]["gen_ai.response.finish_reasons"], "[tool_calls]");
    assert_eq!(steps[1]["gen_ai.response.finish_reasons"], "[stop]");
    let tools = named("tool");
    assert_eq!(tools.len(), 1, "{spans:?}");
    assert_eq!(tools[0]["gen_ai.operation.name"], "execute_tool");
    assert_eq!(tools[0]["gen_ai.tool.name"], "calculator");
    assert_eq!(tools[0]["gen_ai.tool.call.id"], "c1");
    assert!(!tools[0].contains_key("error.type"), "{:?}", tools[0]);
}

/// A tool that runs until the test lets it finish.
struct Gate(Arc<tokio::sync::Notify>);

#[agentloop::async_trait]
impl agentloop::tools::Tool for Gate {
    fn spec(&self) -> agentloop::tools::ToolSpec {
        agentloop::tools::ToolSpec {
            name: "gate".into(),
            description: "Waits for the test.".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }
    async fn call(
        &self,
        _ctx: agentloop::tools::ToolContext,
        _arguments: serde_json::Value,
    ) -> Result<String, agentloop::tools::ToolError> {
        self.0.notified().await;
        Ok("open".into())
    }
}

/// `run_stream` hands out the events of a running tool's step while the tool still runs
/// (the stream batches events per poll of the run; a batch must not wait for the tool): the
/// test lets the tool finish only once the stream has shown its `tool_start`.
async fn tool_start_arrives_while_the_tool_runs() {
    const GATE_SCRIPT: &str = r#"{"turns": [
      {"text": "Opening.", "tool_calls": [{"id": "g1", "name": "gate", "arguments": {}}]},
      {"text": "Done."}
    ]}"#;
    let gate = Arc::new(tokio::sync::Notify::new());
    let agent = Agent::builder()
        .model(scripted(GATE_SCRIPT))
        .tool(Arc::new(Gate(gate.clone())))
        .build();
    let mut stream = agent.run_stream("s", "open it");
    let mut started = false;
    let run = async {
        while let Some(item) = stream.next().await {
            match item {
                RunStreamItem::Event(e) => {
                    if matches!(e.event, AgentEvent::ToolStart { .. }) {
                        started = true;
                        gate.notify_one();
                    }
                }
                RunStreamItem::End(out) => return out.map(|o| o.result.outcome),
            }
        }
        panic!("the stream ended without its output");
    };
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(20), run)
        .await
        .expect("the tool's start never reached the stream while the tool ran");
    assert!(started);
    assert_eq!(outcome.expect("run"), Outcome::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_stream_delivers_a_tool_start_while_the_tool_runs_multi_thread() {
    tool_start_arrives_while_the_tool_runs().await;
}

#[tokio::test]
async fn run_stream_delivers_a_tool_start_while_the_tool_runs_current_thread() {
    tool_start_arrives_while_the_tool_runs().await;
}

/// A reminder rule reaches the model before the steps it holds for, and only those: `Always`
/// before both steps, `AfterToolFailure` only before the step after a failed call.
#[tokio::test]
async fn reminders_reach_the_model_before_the_steps_they_hold_for() {
    use agentloop::runtime::ReminderWhen;
    const FAILING: &str = r#"{"turns": [
      {"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "1/"}}]},
      {"text": "Sorry."}
    ]}"#;
    let agent = Agent::builder()
        .model(scripted(FAILING))
        .builtin_tools()
        .reminder(ReminderWhen::Always, "Be brief.")
        .reminder(ReminderWhen::AfterToolFailure, "Read the error first.")
        .build();
    let out = agent
        .run_with("s", vec![Message::user("Compute 1/")], None, true)
        .await
        .expect("run");
    let requests = agentloop_testkit::agent::model_requests(out.trace.as_ref().expect("trace"));
    assert_eq!(requests.len(), 2);
    let users = |i: usize| -> Vec<String> {
        requests[i]
            .messages
            .iter()
            .filter_map(|m| m.user_text())
            .collect()
    };
    let (first, second) = (users(0), users(1));
    assert!(first.iter().any(|t| t.contains("Be brief.")), "{first:?}");
    assert!(
        !first.iter().any(|t| t.contains("Read the error")),
        "{first:?}"
    );
    assert!(second.iter().any(|t| t.contains("Be brief.")), "{second:?}");
    assert!(
        second.iter().any(|t| t.contains("Read the error first.")),
        "{second:?}"
    );
}
