//! Every agent event round-trips through JSON inside its envelope (R-EVT): an
//! [`EventEnvelope`] with any event, any contents, serializes to one JSON object with each key
//! once (checked with a parser that refuses duplicates) and deserializes back equal. The
//! strategies cover every variant: a test checks their type names against the event schema's.
//!
//! Floats are finite (JSON has no NaN or infinity): the events' floats are costs and limits.

use std::collections::BTreeSet;

use agentloop_core::agent_event::{SteeringStatus, TOOL_END_RESULT_MAX_BYTES};
use agentloop_core::chart::MachineKind;
use agentloop_core::entry::Repair;
use agentloop_core::execute_result::StepEnd;
use agentloop_core::message::FinishReason;
use agentloop_core::react::limits::{LimitAction, LimitKind};
use agentloop_core::todo::{Todo, TodoStatus};
use agentloop_core::tool_rules::RuleAction;
use agentloop_core::{
    AgentEvent, ApprovalDecision, ApprovalStatus, AssistantMessage, ErrorKind, EventEnvelope,
    ModelError, Outcome, StepRecord, ToolCall, ToolResult, ToolStatus, Usage,
};
use agentloop_testkit::strict_json::parse_strict;
use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Union};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Any text, newlines, quotes, control characters and non-ASCII included.
fn text() -> impl Strategy<Value = String> {
    proptest::string::string_regex("(?s).{0,12}").expect("regex")
}

fn texts() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(text(), 0..3)
}

/// Any finite float.
fn finite() -> impl Strategy<Value = f64> {
    any::<f64>().prop_filter("finite", |f| f.is_finite())
}

/// Any JSON value (tool arguments): nested arrays and objects of every scalar.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        finite().prop_map(Value::from),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(text(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Every unit value of a string-named enum, read from its JSON Schema (so a variant added
/// later is drawn too) and deserialized from its name.
fn named<T: DeserializeOwned + schemars::JsonSchema + Clone + std::fmt::Debug + 'static>(
) -> BoxedStrategy<T> {
    fn names(schema: &Value, out: &mut Vec<String>) {
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            out.extend(values.iter().filter_map(Value::as_str).map(str::to_string));
        }
        if let Some(c) = schema.get("const").and_then(Value::as_str) {
            out.push(c.to_string());
        }
        for key in ["oneOf", "anyOf"] {
            for s in schema
                .get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                names(s, out);
            }
        }
    }
    let schema = serde_json::to_value(schemars::schema_for!(T)).expect("schema");
    let mut all = Vec::new();
    names(&schema, &mut all);
    let values: Vec<T> = all
        .iter()
        .map(|n| serde_json::from_value(Value::from(n.as_str())).expect("a schema name"))
        .collect();
    assert!(!values.is_empty(), "no names in {schema}");
    proptest::sample::select(values).boxed()
}

fn usage() -> impl Strategy<Value = Usage> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(|(i, o, r, c, t)| Usage {
            input_tokens: i,
            output_tokens: o,
            cache_read_input_tokens: r,
            cache_creation_input_tokens: c,
            reasoning_tokens: t,
        })
}

fn model_error() -> impl Strategy<Value = ModelError> {
    (
        named::<ErrorKind>(),
        text(),
        any::<Option<u64>>(),
        any::<Option<u16>>(),
    )
        .prop_map(|(kind, message, retry_after_ms, http_status)| ModelError {
            http_status,
            ..ModelError::new(kind, message).with_retry_after_ms(retry_after_ms)
        })
}

fn tool_call() -> impl Strategy<Value = ToolCall> {
    (text(), text(), json(), proptest::option::of(text())).prop_map(
        |(id, name, arguments, invalid_arguments)| ToolCall {
            id,
            name,
            arguments,
            invalid_arguments,
        },
    )
}

fn assistant_message() -> impl Strategy<Value = AssistantMessage> {
    (
        (text(), text(), proptest::option::of(text()), texts()),
        (
            proptest::option::of(text()),
            proptest::collection::vec(tool_call(), 0..3),
            proptest::option::of(named::<FinishReason>()),
            proptest::option::of(usage()),
        ),
    )
        .prop_map(
            |(
                (text, reasoning, reasoning_signature, redacted_reasoning),
                (refusal, tool_calls, finish_reason, usage),
            )| AssistantMessage {
                text,
                reasoning,
                reasoning_signature,
                redacted_reasoning,
                refusal,
                tool_calls,
                finish_reason,
                usage,
            },
        )
}

fn step_record() -> impl Strategy<Value = StepRecord> {
    (
        (any::<u32>(), text(), any::<u32>(), named::<StepEnd>()),
        (
            any::<Option<usize>>(),
            any::<bool>(),
            any::<usize>(),
            any::<usize>(),
        ),
        (
            proptest::option::of(usage()),
            proptest::option::of(model_error()),
        ),
    )
        .prop_map(
            |(
                (model_call_index, model, attempts, end),
                (message, compacted, tool_calls, tool_results),
                (usage, error),
            )| StepRecord {
                model_call_index,
                model,
                attempts,
                end,
                message,
                compacted,
                tool_calls,
                tool_results,
                usage,
                error,
            },
        )
}

fn repair() -> impl Strategy<Value = Repair> {
    prop_oneof![
        (
            any::<usize>(),
            text(),
            any::<u32>(),
            text(),
            text(),
            named::<ToolStatus>()
        )
            .prop_map(
                |(index, run_id, model_call_index, tool_call_id, name, status)| {
                    Repair::MissingResultFilled {
                        index,
                        run_id,
                        model_call_index,
                        tool_call_id,
                        name,
                        status,
                    }
                }
            ),
        (any::<usize>(), text()).prop_map(|(index, tool_call_id)| Repair::OrphanResultDropped {
            index,
            tool_call_id
        }),
        (any::<usize>(), text()).prop_map(|(index, tool_call_id)| {
            Repair::DuplicateResultDropped {
                index,
                tool_call_id,
            }
        }),
        (any::<usize>(), text(), any::<u32>()).prop_map(|(index, run_id, model_call_index)| {
            Repair::DuplicateTurnDropped {
                index,
                run_id,
                model_call_index,
            }
        }),
        (any::<usize>(), text()).prop_map(|(index, tool_call_id)| {
            Repair::DuplicateToolCallDropped {
                index,
                tool_call_id,
            }
        }),
        (any::<usize>(), text()).prop_map(|(index, tool_call_id)| Repair::StrayStartIgnored {
            index,
            tool_call_id
        }),
        (text(), named::<Outcome>())
            .prop_map(|(run_id, outcome)| Repair::InterruptedRunEnded { run_id, outcome }),
    ]
}

fn approval_decision() -> impl Strategy<Value = ApprovalDecision> {
    prop_oneof![
        Just(ApprovalDecision::Approved),
        Just(ApprovalDecision::ApprovedAlways),
        text().prop_map(|reason| ApprovalDecision::Rejected { reason }),
        json().prop_map(|arguments| ApprovalDecision::Modified { arguments }),
        any::<u64>().prop_map(|after_ms| ApprovalDecision::TimedOut { after_ms }),
    ]
}

fn todos() -> impl Strategy<Value = Vec<Todo>> {
    proptest::collection::vec(
        (text(), named::<TodoStatus>()).prop_map(|(content, status)| Todo { content, status }),
        0..3,
    )
}

/// A tool's result text: short, or over the `tool_end` bound so the cut shows.
fn tool_result_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => text(),
        1 => (text(), 0..3usize).prop_map(|(t, pad)| {
            // Multi-byte characters around the bound: the cut must fall on a boundary.
            format!("{}{}é€{t}", "x".repeat(TOOL_END_RESULT_MAX_BYTES - 2), "y".repeat(pad))
        }),
    ]
}

type S = BoxedStrategy<AgentEvent>;

/// One strategy per event variant, each with arbitrary contents.
fn variants() -> Vec<S> {
    let call = text;
    vec![
        Just(AgentEvent::RunStart {}).boxed(),
        (
            named::<Outcome>(),
            text(),
            proptest::option::of(usage()),
            proptest::option::of(text()),
        )
            .prop_map(|(outcome, reason, usage, final_text)| AgentEvent::RunEnd {
                outcome,
                reason,
                usage,
                final_text,
            })
            .boxed(),
        text()
            .prop_map(|error| AgentEvent::RunError { error })
            .boxed(),
        text()
            .prop_map(|reason| AgentEvent::AgentAbort { reason })
            .boxed(),
        repair()
            .prop_map(|repair| AgentEvent::SessionRepaired { repair })
            .boxed(),
        (named::<MachineKind>(), text(), text(), text())
            .prop_map(|(machine, from, to, event)| AgentEvent::StateChanged {
                machine,
                from,
                to,
                event,
            })
            .boxed(),
        (any::<u32>(), any::<u32>(), text())
            .prop_map(
                |(model_call_index, attempt, model)| AgentEvent::RequestStart {
                    model_call_index,
                    attempt,
                    model,
                    messages: None,
                },
            )
            .boxed(),
        (any::<u32>(), any::<u32>())
            .prop_map(|(model_call_index, attempt)| AgentEvent::MessageStart {
                model_call_index,
                attempt,
            })
            .boxed(),
        (any::<u32>(), any::<u32>(), text())
            .prop_map(|(model_call_index, attempt, text)| AgentEvent::TextDelta {
                model_call_index,
                attempt,
                text,
            })
            .boxed(),
        (any::<u32>(), any::<u32>(), text())
            .prop_map(
                |(model_call_index, attempt, text)| AgentEvent::StatusUpdate {
                    model_call_index,
                    attempt,
                    text,
                },
            )
            .boxed(),
        (any::<u32>(), any::<u32>(), text())
            .prop_map(
                |(model_call_index, attempt, title)| AgentEvent::TitleGenerated {
                    model_call_index,
                    attempt,
                    title,
                },
            )
            .boxed(),
        (any::<u32>(), any::<u32>(), texts())
            .prop_map(
                |(model_call_index, attempt, steps)| AgentEvent::PlanGenerated {
                    model_call_index,
                    attempt,
                    steps,
                },
            )
            .boxed(),
        (any::<u32>(), any::<u32>(), text())
            .prop_map(
                |(model_call_index, attempt, text)| AgentEvent::ReasoningDelta {
                    model_call_index,
                    attempt,
                    text,
                },
            )
            .boxed(),
        (call(), text())
            .prop_map(|(tool_call_id, name)| AgentEvent::ToolInputStart { tool_call_id, name })
            .boxed(),
        (call(), text())
            .prop_map(|(tool_call_id, delta)| AgentEvent::ToolInputDelta {
                tool_call_id,
                delta,
            })
            .boxed(),
        call()
            .prop_map(|tool_call_id| AgentEvent::ToolInputEnd { tool_call_id })
            .boxed(),
        (any::<u32>(), any::<u32>())
            .prop_map(|(model_call_index, attempt)| AgentEvent::ReasoningStart {
                model_call_index,
                attempt,
            })
            .boxed(),
        (any::<u32>(), any::<u32>())
            .prop_map(|(model_call_index, attempt)| AgentEvent::ReasoningEnd {
                model_call_index,
                attempt,
            })
            .boxed(),
        (text(), text())
            .prop_map(|(name, payload)| AgentEvent::Custom {
                name,
                payload: serde_json::json!({ "note": payload }),
            })
            .boxed(),
        (
            any::<u32>(),
            proptest::option::of(usage()),
            any::<usize>(),
            assistant_message(),
        )
            .prop_map(|(model_call_index, usage, tool_calls, message)| {
                AgentEvent::ResponseComplete {
                    model_call_index,
                    usage,
                    tool_calls,
                    message: Box::new(message),
                }
            })
            .boxed(),
        step_record()
            .prop_map(|step| AgentEvent::StepFinished {
                step: Box::new(step),
            })
            .boxed(),
        (
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            text(),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(
                |(model_call_index, attempt, delay_ms, reason, retry_after_ms)| AgentEvent::Retry {
                    model_call_index,
                    attempt,
                    delay_ms,
                    reason,
                    retry_after_ms,
                },
            )
            .boxed(),
        (any::<u32>(), any::<u32>())
            .prop_map(|(model_call_index, attempt)| AgentEvent::ModelTurnRetried {
                model_call_index,
                attempt,
            })
            .boxed(),
        model_error()
            .prop_map(|error| AgentEvent::StreamError { error })
            .boxed(),
        (any::<u32>(), any::<u32>(), any::<u64>())
            .prop_map(
                |(model_call_index, attempt, after_ms)| AgentEvent::StreamStalled {
                    model_call_index,
                    attempt,
                    after_ms,
                },
            )
            .boxed(),
        text()
            .prop_map(|message| AgentEvent::ContextOverflow { message })
            .boxed(),
        any::<usize>()
            .prop_map(|count| AgentEvent::ToolCalls { count })
            .boxed(),
        (call(), call())
            .prop_map(|(provided, tool_call_id)| AgentEvent::ToolCallIdDerived {
                provided,
                tool_call_id,
            })
            .boxed(),
        (call(), text(), json())
            .prop_map(|(tool_call_id, name, arguments)| AgentEvent::ToolStart {
                tool_call_id,
                name,
                arguments,
            })
            .boxed(),
        (call(), text(), named::<ToolStatus>(), tool_result_text())
            .prop_map(|(tool_call_id, name, status, content)| {
                AgentEvent::tool_end(&ToolResult {
                    tool_call_id,
                    name,
                    content,
                    status,
                })
            })
            .boxed(),
        call()
            .prop_map(|tool_call_id| AgentEvent::ToolKilled { tool_call_id })
            .boxed(),
        (call(), text())
            .prop_map(|(tool_call_id, name)| AgentEvent::ToolCallUnknown { tool_call_id, name })
            .boxed(),
        (call(), text(), call())
            .prop_map(
                |(tool_call_id, name, cached_from)| AgentEvent::ToolCacheHit {
                    tool_call_id,
                    name,
                    cached_from,
                },
            )
            .boxed(),
        (
            call(),
            text(),
            any::<usize>(),
            named::<RuleAction>(),
            any::<Option<u64>>(),
        )
            .prop_map(|(tool_call_id, name, rule, action, timeout_ms)| {
                AgentEvent::ToolRuleMatched {
                    tool_call_id,
                    name,
                    rule,
                    action,
                    timeout_ms,
                }
            })
            .boxed(),
        (call(), text(), texts())
            .prop_map(|(reference, question, options)| AgentEvent::AskUser {
                reference,
                question,
                options,
            })
            .boxed(),
        (call(), text())
            .prop_map(|(reference, answer)| AgentEvent::UserResponded { reference, answer })
            .boxed(),
        (call(), text(), json())
            .prop_map(
                |(tool_call_id, name, arguments)| AgentEvent::ApprovalRequired {
                    tool_call_id,
                    name,
                    arguments,
                },
            )
            .boxed(),
        (call(), approval_decision(), named::<ApprovalStatus>())
            .prop_map(
                |(tool_call_id, decision, status)| AgentEvent::ApprovalResolved {
                    tool_call_id,
                    decision,
                    status,
                },
            )
            .boxed(),
        text()
            .prop_map(|text| AgentEvent::SteeringApplied { text })
            .boxed(),
        call()
            .prop_map(|tool_call_id| AgentEvent::ToolSkippedForSteering { tool_call_id })
            .boxed(),
        (text(), text())
            .prop_map(|(from, to)| AgentEvent::ModelSwitched { from, to })
            .boxed(),
        (text(), any::<bool>())
            .prop_map(|(error, retrying)| AgentEvent::OutputInvalid { error, retrying })
            .boxed(),
        (text(), text(), any::<u32>(), model_error())
            .prop_map(
                |(from, to, model_call_index, error)| AgentEvent::ModelFallback {
                    from,
                    to,
                    model_call_index,
                    error,
                },
            )
            .boxed(),
        (
            named::<LimitKind>(),
            finite(),
            finite(),
            named::<LimitAction>(),
        )
            .prop_map(|(limit, used, max, action)| AgentEvent::UsageLimitReached {
                limit,
                used,
                max,
                action,
            })
            .boxed(),
        (proptest::option::of(call()), texts(), any::<u32>(), text())
            .prop_map(
                |(tool_call_id, pattern, repeats, action)| AgentEvent::LoopDetected {
                    tool_call_id,
                    pattern,
                    repeats,
                    action,
                    kind: Default::default(),
                    path: None,
                },
            )
            .boxed(),
        (text(), any::<usize>())
            .prop_map(|(reason, messages)| AgentEvent::CompactStart { reason, messages })
            .boxed(),
        any::<usize>()
            .prop_map(|removed| AgentEvent::CompactEnd { removed })
            .boxed(),
        text()
            .prop_map(|text| AgentEvent::PromptReceived { text })
            .boxed(),
        (text(), any::<usize>())
            .prop_map(|(text, queued)| AgentEvent::PromptQueued { text, queued })
            .boxed(),
        text()
            .prop_map(|text| AgentEvent::PromptDropped { text })
            .boxed(),
        (text(), text())
            .prop_map(|(text, reason)| AgentEvent::PromptRejected { text, reason })
            .boxed(),
        (any::<u64>(), text(), named::<SteeringStatus>())
            .prop_map(
                |(steering_ref, text, status)| AgentEvent::SteeringReceived {
                    steering_ref,
                    text,
                    status,
                },
            )
            .boxed(),
        text()
            .prop_map(|trigger| AgentEvent::AgentResumed { trigger })
            .boxed(),
        (text(), text())
            .prop_map(|(tool, command_family)| AgentEvent::ToolApprovedAlways {
                tool,
                command_family,
            })
            .boxed(),
        text()
            .prop_map(|reason| AgentEvent::CompactVetoed { reason })
            .boxed(),
        (call(), todos())
            .prop_map(|(tool_call_id, todos)| AgentEvent::TodoChange {
                tool_call_id,
                todos,
            })
            .boxed(),
        (texts(), texts())
            .prop_map(|(attached, detached)| AgentEvent::ToolsUpdated { attached, detached })
            .boxed(),
        text()
            .prop_map(|name| AgentEvent::ToolAttached { name })
            .boxed(),
        text()
            .prop_map(|name| AgentEvent::ToolDetached { name })
            .boxed(),
        (call(), text(), text())
            .prop_map(|(tool_call_id, name, reason)| AgentEvent::ToolBlocked {
                tool_call_id,
                name,
                reason,
            })
            .boxed(),
        (call(), text(), any::<u64>(), any::<u64>(), any::<u64>())
            .prop_map(
                |(tool_call_id, name, started_at_ms, ended_at_ms, duration_ms)| {
                    AgentEvent::ToolMetrics {
                        tool_call_id,
                        name,
                        started_at_ms,
                        ended_at_ms,
                        duration_ms,
                    }
                },
            )
            .boxed(),
        (call(), text(), text(), any::<usize>())
            .prop_map(
                |(tool_call_id, name, path, bytes)| AgentEvent::LargeResultOffloaded {
                    tool_call_id,
                    name,
                    path,
                    bytes,
                },
            )
            .boxed(),
        (
            any::<Option<u32>>(),
            text(),
            usage(),
            proptest::option::of(finite()),
        )
            .prop_map(
                |(model_call_index, model, usage, cost_usd)| AgentEvent::UsageReport {
                    model_call_index,
                    model,
                    usage,
                    cost_usd,
                },
            )
            .boxed(),
        (call(), text(), text())
            .prop_map(
                |(tool_call_id, child_session, description)| AgentEvent::SubagentStart {
                    tool_call_id,
                    child_session,
                    description,
                },
            )
            .boxed(),
        (call(), text(), named::<Outcome>(), text())
            .prop_map(
                |(tool_call_id, child_session, outcome, result)| AgentEvent::SubagentEnd {
                    tool_call_id,
                    child_session,
                    outcome,
                    result,
                },
            )
            .boxed(),
    ]
}

fn envelope_of(event: impl Strategy<Value = AgentEvent>) -> impl Strategy<Value = EventEnvelope> {
    (any::<u64>(), any::<u64>(), text(), event).prop_map(|(index, ts_ms, run_id, event)| {
        EventEnvelope {
            index,
            ts_ms,
            run_id,
            event,
        }
    })
}

/// Any event of any variant, and a child session's event forwarded inside
/// `subagent_event` (whose own event may be forwarded again).
fn event() -> impl Strategy<Value = AgentEvent> {
    Union::new(variants()).prop_recursive(2, 4, 1, |inner| {
        (text(), text(), envelope_of(inner)).prop_map(|(tool_call_id, child_session, env)| {
            AgentEvent::SubagentEvent {
                tool_call_id,
                child_session,
                event: Box::new(env),
            }
        })
    })
}

/// `env` written as JSON, read back with no key twice, and deserialized.
fn round_trip(env: &EventEnvelope) -> Result<EventEnvelope, String> {
    let line = serde_json::to_string(env).map_err(|e| format!("write: {e}"))?;
    parse_strict(&line).map_err(|e| format!("{e}: {line}"))?;
    serde_json::from_str(&line).map_err(|e| format!("read: {e}: {line}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// R-EVT: every event, inside its envelope, is one JSON object with each key once and
    /// reads back equal.
    #[test]
    fn r_evt_every_event_round_trips_through_its_envelope(env in envelope_of(event())) {
        let back = round_trip(&env);
        prop_assert_eq!(back.as_ref(), Ok(&env));
    }
}

/// The strategies draw every variant the event schema lists (a variant added without a
/// strategy fails here).
#[test]
fn r_evt_the_round_trip_covers_every_event_type() {
    let schema = serde_json::to_value(schemars::schema_for!(AgentEvent)).expect("schema");
    let mut listed = BTreeSet::new();
    for variant in schema["oneOf"].as_array().into_iter().flatten() {
        let ty = &variant["properties"]["type"];
        if let Some(name) = ty["const"].as_str().or(ty["enum"][0].as_str()) {
            listed.insert(name.to_string());
        }
    }
    assert!(listed.len() > 50, "{schema}");
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut drawn: BTreeSet<String> = variants()
        .into_iter()
        .map(|s| {
            s.new_tree(&mut runner)
                .expect("a value")
                .current()
                .type_name()
        })
        .collect();
    drawn.insert("subagent_event".into());
    assert_eq!(drawn, listed);
}

/// The run's own events carry no `run_id` besides the envelope's (they wrote it twice, and
/// the envelope could not be read back: "duplicate field `run_id`").
#[test]
fn r_evt_run_events_have_one_run_id() {
    for event in [
        AgentEvent::RunStart {},
        AgentEvent::RunEnd {
            outcome: Outcome::Completed,
            reason: "final_answer".into(),
            usage: None,
            final_text: Some("4".into()),
        },
        AgentEvent::RunError {
            error: "boom".into(),
        },
        AgentEvent::AgentAbort {
            reason: "user".into(),
        },
    ] {
        let env = EventEnvelope {
            index: 3,
            ts_ms: 7,
            run_id: "run-1".into(),
            event,
        };
        let line = serde_json::to_string(&env).expect("json");
        let value = parse_strict(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(value["run_id"], "run-1", "{line}");
        assert_eq!(round_trip(&env), Ok(env));
    }
}

/// `tool_end` carries the result's text, the error's text for a failed call, and at most
/// [`TOOL_END_RESULT_MAX_BYTES`] of it, cut on a character boundary and flagged.
#[test]
fn r_evt_tool_end_carries_the_bounded_result() {
    let result = |status, content: &str| ToolResult {
        tool_call_id: "c1".into(),
        name: "read_file".into(),
        content: content.into(),
        status,
    };
    let json = |e: &AgentEvent| serde_json::to_value(e).expect("json");
    let ok = json(&AgentEvent::tool_end(&result(ToolStatus::Completed, "4")));
    assert_eq!(
        ok,
        serde_json::json!({"type": "tool_end", "tool_call_id": "c1", "name": "read_file",
            "status": "completed", "result": "4", "result_truncated": false, "result_bytes": 1})
    );
    let failed = json(&AgentEvent::tool_end(&result(
        ToolStatus::Error,
        "no such file: a.txt",
    )));
    assert_eq!(failed["status"], "error");
    assert_eq!(failed["result"], "no such file: a.txt");

    // Exactly at the bound: whole. One byte over: cut, flagged, the whole size given.
    let at = "a".repeat(TOOL_END_RESULT_MAX_BYTES);
    let whole = json(&AgentEvent::tool_end(&result(ToolStatus::Completed, &at)));
    assert_eq!(whole["result"].as_str().map(str::len), Some(at.len()));
    assert_eq!(whole["result_truncated"], false);
    let over = format!("{at}b");
    let cut = json(&AgentEvent::tool_end(&result(ToolStatus::Completed, &over)));
    assert_eq!(cut["result"].as_str(), Some(at.as_str()));
    assert_eq!(cut["result_truncated"], true);
    assert_eq!(cut["result_bytes"], TOOL_END_RESULT_MAX_BYTES + 1);

    // A two-byte character across the bound is left out whole.
    let across = format!("{}é", "a".repeat(TOOL_END_RESULT_MAX_BYTES - 1));
    let cut = json(&AgentEvent::tool_end(&result(
        ToolStatus::Completed,
        &across,
    )));
    assert_eq!(
        cut["result"].as_str().map(str::len),
        Some(TOOL_END_RESULT_MAX_BYTES - 1)
    );
    assert_eq!(cut["result_truncated"], true);

    // An event written before results were carried reads as an empty result.
    let old: AgentEvent = serde_json::from_str(
        r#"{"type":"tool_end","tool_call_id":"c1","name":"n","status":"completed"}"#,
    )
    .expect("old tool_end");
    assert!(matches!(
        old,
        AgentEvent::ToolEnd { result, result_truncated: false, result_bytes: 0, .. } if result.is_empty()
    ));
}

/// Traces written before `tool_end` carried results (versions 3 and 4) still replay without a
/// divergence: the replayed `tool_end` is compared without its result. A version-5 trace
/// records the result and replays as recorded.
#[test]
fn r_trace_2_traces_before_and_after_tool_end_results_replay() {
    for name in [
        "v3-calc.jsonl",
        "v4-calc.jsonl",
        "v4-retry-tool.jsonl",
        "v5-calc.jsonl",
    ] {
        let trace = crate::trace_tools::fixture(name);
        assert_eq!(agentloop_core::trace::replay(&trace), None, "{name}");
    }
    let v5 = crate::trace_tools::fixture("v5-calc.jsonl");
    let recorded = v5.records.iter().find_map(|r| match r {
        agentloop_core::trace::TraceRecord::Effect {
            effect:
                agentloop_core::Effect::Emit {
                    event: AgentEvent::ToolEnd { result, .. },
                },
            ..
        } => Some(result.as_str()),
        _ => None,
    });
    assert_eq!(recorded, Some("5"));
}
