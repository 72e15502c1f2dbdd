//! Events/s through the machines' `handle` on realistic streams, and replay of a 100k-event
//! trace.
//!
//! `cargo bench --bench machines -- --warm-up-time 1 --measurement-time 3`
//!
//! - `run_handle/tool_run`: a whole tool-calling run through the `Run` facade (5 steps, 4 of
//!   them calling two tools, ~200 text deltas per step);
//! - `process_handle/step`: one inner step on its own (1,000 deltas, three tool calls);
//! - `trace_replay/100k`: `trace::replay` of a recorded run with 100,000 input events.

use std::collections::BTreeSet;
use std::hint::black_box;

use agentloop::model::{ModelParams, ModelRequest};
use agentloop::tools::ToolSpec;
use agentloop::trace::{replay, Trace};
use agentloop::{FinishReason, MessageDelta, ToolStatus, Usage};
use agentloop_core::process::{Process, StepConfig};
use agentloop_core::trace::{TraceHeader, TRACE_VERSION};
use agentloop_core::{AttemptId, Effect, Event, Message, Run, RunConfig};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "calculator".into(),
        description: "arithmetic".into(),
        parameters: serde_json::json!({"type": "object"}),
    }]
}

fn config(max_steps: u32) -> RunConfig {
    RunConfig {
        tools: tools().into(),
        max_steps,
        ..RunConfig::default()
    }
}

/// Drives a run the way the runtime would: reads `CallModel`/`RunTool` effects and answers them
/// with a stream of `deltas` text deltas (plus two tool calls on every step but the last).
/// Returns every input event, and the trace when `trace` is set.
fn drive(steps: u32, deltas: usize, trace: Option<&mut Trace>) -> Vec<Event> {
    let mut run = Run::new(config(steps + 1));
    let mut events = Vec::new();
    let mut trace = trace;
    let mut feed = |run: &mut Run, e: Event, events: &mut Vec<Event>| -> Vec<Effect> {
        let step = run.handle(e.clone());
        if let Some(t) = trace.as_deref_mut() {
            t.record(&e, &step);
        }
        events.push(e);
        step.effects
    };
    let mut effects = feed(
        &mut run,
        Event::Start {
            run_id: "bench".into(),
            history: Vec::new(),
            input: vec![Message::user("What is 2+3?")],
            session_turns: 0,
        },
        &mut events,
    );
    let mut call_id = 0;
    while !run.is_terminal() {
        // The store's acknowledgement of the run-end entry ends the run (Finishing → Completed).
        if effects
            .iter()
            .any(|e| matches!(e, Effect::CommitRunEnd { .. }))
        {
            effects = feed(&mut run, Event::RunEndCommitted, &mut events);
            continue;
        }
        let request = effects.iter().find_map(|e| match e {
            Effect::CallModel { request } => Some(request.clone()),
            _ => None,
        });
        let Some(request) = request else {
            panic!("the run waits for something other than the model: {effects:?}");
        };
        let attempt = AttemptId {
            run_id: request.run_id.clone(),
            model_call_index: request.model_call_index,
            attempt: request.attempt,
        };
        let last = request.model_call_index > steps;
        let mut stream = vec![MessageDelta::TextStart];
        stream.extend((0..deltas).map(|i| MessageDelta::TextDelta {
            text: format!("tok{i} "),
        }));
        stream.push(MessageDelta::TextEnd);
        if !last {
            for _ in 0..2 {
                call_id += 1;
                // Distinct arguments: identical repeated calls would trip doom-loop detection.
                stream.push(MessageDelta::ToolCall {
                    id: format!("call-{call_id}"),
                    name: "calculator".into(),
                    arguments: format!(r#"{{"expression":"2+{call_id}"}}"#),
                });
            }
        }
        stream.push(MessageDelta::FinishStep {
            finish_reason: Some(if last {
                FinishReason::Stop
            } else {
                FinishReason::ToolCalls
            }),
            raw_finish_reason: None,
            usage: Some(Usage {
                input_tokens: 100,
                output_tokens: deltas as u64,
                ..Usage::default()
            }),
        });
        stream.push(MessageDelta::Finish);
        feed(
            &mut run,
            Event::StreamOpened {
                attempt: attempt.clone(),
            },
            &mut events,
        );
        for (seq, delta) in stream.into_iter().enumerate() {
            feed(
                &mut run,
                Event::Delta {
                    attempt: attempt.clone(),
                    seq: seq as u64,
                    delta,
                },
                &mut events,
            );
        }
        effects = feed(&mut run, Event::done(attempt), &mut events);
        let calls: Vec<String> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::RunTool { call } => Some(call.id.clone()),
                _ => None,
            })
            .collect();
        for id in calls {
            effects = feed(
                &mut run,
                Event::ToolFinished {
                    tool_call_id: id,
                    status: ToolStatus::Completed,
                    content: "5".into(),
                },
                &mut events,
            );
        }
    }
    assert_eq!(
        run.result().map(|r| r.reason.as_str()),
        Some("final_answer"),
        "the benchmark run must complete normally"
    );
    events
}

fn run_handle(c: &mut Criterion) {
    let events = drive(4, 200, None);
    let mut g = c.benchmark_group("run_handle");
    g.throughput(Throughput::Elements(events.len() as u64));
    g.bench_function("tool_run", |b| {
        b.iter_batched(
            || events.clone(),
            |events| {
                let mut run = Run::new(config(5));
                for e in events {
                    let _ = black_box(run.handle(e));
                }
                assert!(run.is_terminal());
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn process_events() -> (ModelRequest, Vec<Event>) {
    let request = ModelRequest {
        run_id: "bench".into(),
        model_call_index: 1,
        attempt: 1,
        session_turn: 0,
        model: "scripted".into(),
        system: None,
        messages: vec![Message::user("What is 2+3?")].into(),
        tools: tools().into(),
        params: ModelParams::default(),
    };
    let attempt = AttemptId {
        run_id: "bench".into(),
        model_call_index: 1,
        attempt: 1,
    };
    let mut events = vec![Event::StreamOpened {
        attempt: attempt.clone(),
    }];
    let mut seq = 0;
    let mut delta = |d: MessageDelta| {
        seq += 1;
        Event::Delta {
            attempt: attempt.clone(),
            seq,
            delta: d,
        }
    };
    for i in 0..1_000 {
        events.push(delta(MessageDelta::TextDelta {
            text: format!("tok{i} "),
        }));
    }
    for i in 0..3 {
        events.push(delta(MessageDelta::ToolCall {
            id: format!("call-{i}"),
            name: "calculator".into(),
            arguments: format!(r#"{{"expression":"2+{i}"}}"#),
        }));
    }
    events.push(Event::done(attempt.clone()));
    for i in 0..3 {
        events.push(Event::ToolFinished {
            tool_call_id: format!("call-{i}"),
            status: ToolStatus::Completed,
            content: "5".into(),
        });
    }
    (request, events)
}

fn process_handle(c: &mut Criterion) {
    let (request, events) = process_events();
    let mut g = c.benchmark_group("process_handle");
    g.throughput(Throughput::Elements(events.len() as u64 + 1));
    g.bench_function("step", |b| {
        b.iter(|| {
            let mut p = Process::new(StepConfig::default(), request.clone(), BTreeSet::new());
            let _ = black_box(p.begin());
            for e in &events {
                let _ = black_box(p.handle(e));
            }
            assert!(p.state().is_terminal());
        })
    });
    g.finish();
}

fn trace_replay(c: &mut Criterion) {
    let cfg = config(51);
    let mut trace = Trace::new(TraceHeader {
        timeouts: None,
        version: TRACE_VERSION,
        agentloop: env!("CARGO_PKG_VERSION").into(),
        session: "bench".into(),
        config: cfg,
        tools: tools().into(),
    });
    // 51 streams of 1,951 text deltas (50 with two tool calls) + framing = 100,008 input events.
    let events = drive(50, 1_951, Some(&mut trace));
    assert!(
        (99_000..=101_000).contains(&events.len()),
        "{} input events",
        events.len()
    );
    assert!(replay(&trace).is_none(), "the recorded trace must replay");
    let mut g = c.benchmark_group("trace_replay");
    g.sample_size(10);
    g.throughput(Throughput::Elements(events.len() as u64));
    g.bench_function("100k", |b| b.iter(|| black_box(replay(&trace))));
    g.finish();
}

criterion_group!(benches, run_handle, process_handle, trace_replay);
criterion_main!(benches);
