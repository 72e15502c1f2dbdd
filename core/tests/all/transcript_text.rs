//! The transcript read off hand-built traces: each input, effect and observable event becomes
//! its exact item, the summary and usage read as fixed text, long text is cut on one line.

use agentloop_core::agent_event::Outcome;
use agentloop_core::entry::Repair;
use agentloop_core::error::ErrorKind;
use agentloop_core::event::KillPolicy;
use agentloop_core::react::limits::{LimitAction, LimitKind};
use agentloop_core::{
    AgentEvent, AssistantMessage, Effect, Event, Message, ModelError, Run, RunConfig, ToolCall,
    ToolSpec, ToolStatus, Usage,
};
use agentloop_trace_tools::transcript::{
    usage_or_unknown, usage_text, Item, RenderOptions, StateChange, Style, Summary, ToolSummary,
    Transcript,
};
use serde_json::json;

use crate::records::{start, Records};

fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64, reasoning: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_input_tokens: cache_read,
        cache_creation_input_tokens: cache_write,
        reasoning_tokens: reasoning,
    }
}

fn items(r: Records) -> Vec<Item> {
    Transcript::from_trace(&r.trace).items
}

fn note(index: u64, text: &str) -> Item {
    Item::Note {
        index,
        text: text.into(),
    }
}

/// The transcript's items, each of which must be a note, as (index, text).
fn notes_of(t: &Transcript) -> Vec<(u64, &str)> {
    t.items
        .iter()
        .map(|i| match i {
            Item::Note { index, text } => (*index, text.as_str()),
            other => panic!("{other:?}"),
        })
        .collect()
}

fn text_delta(step: u32, attempt: u32, text: &str) -> AgentEvent {
    AgentEvent::TextDelta {
        model_call_index: step,
        attempt,
        text: text.into(),
    }
}

#[test]
fn usage_text_names_only_the_counts_that_are_not_zero() {
    assert_eq!(usage_text(&usage(0, 0, 0, 0, 0)), "in=0 out=0");
    assert_eq!(
        usage_text(&usage(3, 4, 1, 1, 1)),
        "in=3 out=4 cache_read=1 cache_write=1 reasoning=1"
    );
    assert_eq!(
        usage_text(&usage(3, 4, 0, 6, 0)),
        "in=3 out=4 cache_write=6"
    );
    assert_eq!(usage_or_unknown(None), "unknown");
    assert_eq!(
        usage_or_unknown(Some(&usage(1, 2, 5, 0, 7))),
        "in=1 out=2 cache_read=5 reasoning=7"
    );
}

#[test]
fn summary_reads_as_one_line_with_singulars_and_plurals() {
    assert_eq!(
        Summary::default().to_string(),
        "not finished, 0 steps, 0 tool calls, 0 retries, usage unknown"
    );
    let one = Summary {
        steps: 1,
        tool_calls: 1,
        retries: 1,
        outcome: Some(Outcome::Completed),
        reason: Some("final_answer".into()),
        usage: Some(usage(10, 20, 0, 0, 0)),
        final_text: None,
    };
    assert_eq!(
        one.to_string(),
        "completed (final_answer), 1 step, 1 tool call, 1 retry, usage in=10 out=20"
    );
    let two = Summary {
        steps: 2,
        tool_calls: 2,
        retries: 2,
        outcome: Some(Outcome::Failed),
        reason: None,
        ..Summary::default()
    };
    assert_eq!(
        two.to_string(),
        "failed, 2 steps, 2 tool calls, 2 retries, usage unknown"
    );
    // A reason without an outcome is not an ending.
    let reason_only = Summary {
        reason: Some("x".into()),
        ..Summary::default()
    };
    assert!(reason_only.to_string().starts_with("not finished, "));
}

#[test]
fn header_lists_required_arguments_first_and_optional_ones_marked() {
    let tool = |name: &str, parameters| ToolSpec {
        name: name.into(),
        description: String::new(),
        parameters,
    };
    let r = Records::new(
        "m",
        vec![
            tool(
                "search",
                json!({"type": "object", "required": ["query"],
                       "properties": {"limit": {}, "query": {}, "after": {}}}),
            ),
            tool("bare", json!({"type": "object"})),
        ],
    );
    let t = Transcript::from_trace(&r.trace);
    assert_eq!(
        t.tools,
        [
            ToolSummary {
                name: "search".into(),
                arguments: vec!["query".into(), "after?".into(), "limit?".into()],
                description: String::new(),
                parameters: json!({"type": "object", "required": ["query"],
                       "properties": {"limit": {}, "query": {}, "after": {}}}),
            },
            ToolSummary {
                name: "bare".into(),
                arguments: vec![],
                description: String::new(),
                parameters: json!({"type": "object"}),
            },
        ]
    );
    assert_eq!(t.model, "m");
    assert_eq!(t.items, []);
}

#[test]
fn inputs_become_run_starts_resumes_results_and_notes() {
    let assistant = Message::Assistant(AssistantMessage {
        text: "earlier".into(),
        ..AssistantMessage::default()
    });
    let r = Records::new("m", vec![])
        .input(Event::Start {
            run_id: "r1".into(),
            history: vec![Message::user("before"), assistant.clone()],
            input: vec![
                Message::system("be brief"),
                Message::user("hi"),
                assistant.clone(),
            ],
            session_turns: 0,
        })
        .effect(Effect::RunTool {
            call: ToolCall::from_raw("c1", "calc", r#"{"x":1}"#),
        })
        .input(Event::ToolFinished {
            tool_call_id: "c1".into(),
            status: ToolStatus::Completed,
            content: "2".into(),
        })
        .input(Event::Steer {
            text: "faster".into(),
        })
        .input(Event::StoreWriteFailed {
            error: "disk full".into(),
        })
        .input(Event::CompactionFailed {
            error: "too short".into(),
        })
        .input(Event::Resume {
            run_id: "r1".into(),
            history: vec![],
            session_turns: 3,
            committed_steps: 2,
            pending: None,
        })
        .input(Event::Abort {
            reason: "user".into(),
            kill: KillPolicy::default(),
        });
    assert_eq!(
        items(r),
        [
            Item::RunStart {
                index: 0,
                run_id: "r1".into(),
                input: vec![
                    "be brief".into(),
                    "hi".into(),
                    serde_json::to_string(&assistant).expect("json"),
                ],
                history: 2,
            },
            Item::Tool {
                index: 1,
                id: "c1".into(),
                name: "calc".into(),
                arguments: json!({"x": 1}),
                status: Some(ToolStatus::Completed),
                result: Some("2".into()),
            },
            note(3, "steering received: faster"),
            note(4, "store write failed: disk full"),
            note(5, "compaction failed: too short"),
            Item::Resume {
                index: 6,
                run_id: "r1".into(),
                committed_steps: 2,
            },
            note(7, "abort requested: user"),
        ]
    );
}

#[test]
fn an_abort_drops_the_text_being_streamed() {
    let r = Records::new("m", vec![])
        .emit(text_delta(1, 1, "half an ans"))
        .input(Event::Abort {
            reason: "stop".into(),
            kill: KillPolicy::All,
        })
        .emit(text_delta(2, 1, ""));
    assert_eq!(
        items(r),
        [
            Item::Discarded {
                step: 1,
                attempt: 1,
                text: "half an ans".into(),
            },
            note(1, "abort requested: stop"),
        ]
    );
}

#[test]
fn streamed_text_is_joined_per_attempt_and_discarded_when_not_committed() {
    let r = Records::new("m", vec![])
        .emit(text_delta(1, 1, "Hel"))
        .emit(text_delta(1, 1, "lo"))
        .emit(text_delta(1, 2, "Bye"))
        .emit(text_delta(2, 2, "Again"))
        .emit(AgentEvent::ResponseComplete {
            model_call_index: 2,
            usage: None,
            tool_calls: 0,
            message: Box::new(AssistantMessage {
                text: "Again".into(),
                ..AssistantMessage::default()
            }),
        })
        .emit(text_delta(3, 1, "cut off"));
    let discarded = |step, attempt, text: &str| Item::Discarded {
        step,
        attempt,
        text: text.into(),
    };
    assert_eq!(
        items(r),
        [
            discarded(1, 1, "Hello"),
            discarded(1, 2, "Bye"),
            Item::Assistant {
                index: 4,
                step: 2,
                text: "Again".into(),
                reasoning: String::new(),
                tool_calls: 0,
                finish_reason: None,
                usage: None,
            },
            discarded(3, 1, "cut off"),
        ]
    );
}

#[test]
fn a_model_call_becomes_a_request_after_the_state_changes() {
    let config = RunConfig {
        model: "gpt-x".into(),
        tools: vec![ToolSpec {
            name: "calc".into(),
            description: String::new(),
            parameters: json!({"type": "object"}),
        }]
        .into(),
        ..RunConfig::default()
    };
    let mut run = Run::new(config);
    let start = start("hi");
    let step = run.handle(start.clone());
    let t = Transcript::from_trace(&Records::new("gpt-x", vec![]).step(&start, &step).trace);
    let request = t
        .items
        .iter()
        .find(|i| matches!(i, Item::Request { .. }))
        .expect("a request");
    assert!(
        matches!(request, Item::Request { step: 1, attempt: 1, model, messages: 1, tools: 1, .. }
            if model == "gpt-x"),
        "{request:?}"
    );
    let Some(Item::States {
        index: 0,
        event,
        changes,
    }) = t.items.get(1)
    else {
        panic!("{:?}", t.items);
    };
    assert_eq!(event, "start");
    assert_eq!(changes[0].machine, "react");
    assert_eq!(changes[0].states[..2], ["Init", "Planning"]);
}

fn react(from: &str, to: &str, unhandled: bool) -> serde_json::Value {
    json!({"machine": "react", "from": from, "event": "Start", "to": to,
           "row": if unhandled { serde_json::Value::Null } else { json!("InitStart") },
           "unhandled": unhandled})
}

fn process(from: &str, to: &str, unhandled: bool) -> serde_json::Value {
    json!({"machine": "process", "from": from, "event": "Begin", "to": to,
           "row": if unhandled { serde_json::Value::Null } else { json!("IdleBegin") },
           "unhandled": unhandled})
}

fn tool_call(call: &str, from: &str, to: &str) -> serde_json::Value {
    json!({"machine": "tool_call", "index": 0, "call": call, "from": from, "event": "Start",
           "to": to, "row": "StartRun"})
}

#[test]
fn state_changes_are_joined_per_machine_and_unhandled_inputs_named() {
    let steer = Event::Steer { text: "s".into() };
    let r = Records::new("m", vec![])
        // Before any input: not shown.
        .transition(react("Init", "Planning", false))
        .input(steer.clone())
        .transition(react("Init", "Planning", false))
        .transition(react("Planning", "Executing", false))
        .transition(process("Idle", "Calling", false))
        .transition(process("Idle", "Idle", false))
        .transition(tool_call("c1", "Queued", "Running"))
        .transition(tool_call("c2", "Running", "Completed"))
        .transition(react("Observing", "Planning", false))
        .input(Event::CompactionFailed { error: "e".into() })
        .transition(react("Planning", "Planning", true))
        .transition(process("Calling", "Calling", true))
        .input(Event::StoreWriteFailed { error: "e".into() })
        .transition(process("Idle", "Idle", false))
        .input(steer)
        .transition(react("Planning", "Executing", false));
    let change = |machine: &str, call: Option<&str>, states: &[&str]| StateChange {
        machine: machine.into(),
        call: call.map(str::to_string),
        states: states.iter().map(|s| s.to_string()).collect(),
    };
    assert_eq!(
        items(r),
        [
            note(1, "steering received: s"),
            Item::States {
                index: 1,
                event: "steer".into(),
                changes: vec![
                    change("react", None, &["Init", "Planning", "Executing"]),
                    change("process", None, &["Idle", "Calling"]),
                    change("tool_call", Some("c1"), &["Queued", "Running"]),
                    change("tool_call", Some("c2"), &["Running", "Completed"]),
                    change("react", None, &["Observing", "Planning"]),
                ],
            },
            note(9, "compaction failed: e"),
            Item::Unhandled {
                index: 9,
                event: "compaction_failed".into(),
            },
            Item::Unhandled {
                index: 9,
                event: "compaction_failed".into(),
            },
            note(12, "store write failed: e"),
            note(14, "steering received: s"),
            Item::States {
                index: 14,
                event: "steer".into(),
                changes: vec![change("react", None, &["Planning", "Executing"])],
            },
        ]
    );
}

#[test]
fn observable_events_without_an_item_of_their_own_become_notes() {
    let error = ModelError::new(ErrorKind::RateLimited, "slow down");
    let repair = Repair::OrphanResultDropped {
        index: 4,
        tool_call_id: "c9".into(),
    };
    let events = vec![
        AgentEvent::StreamError {
            error: error.clone(),
        },
        AgentEvent::ContextOverflow {
            message: "too long".into(),
        },
        AgentEvent::ToolKilled {
            tool_call_id: "c1".into(),
        },
        AgentEvent::ToolCallUnknown {
            tool_call_id: "c2".into(),
            name: "nope".into(),
        },
        AgentEvent::SteeringApplied {
            text: "left".into(),
        },
        AgentEvent::ToolSkippedForSteering {
            tool_call_id: "c3".into(),
        },
        AgentEvent::ModelSwitched {
            from: "a".into(),
            to: "b".into(),
        },
        AgentEvent::UsageLimitReached {
            limit: LimitKind::ToolCalls,
            used: 3.0,
            max: 2.5,
            action: LimitAction::Stop,
        },
        AgentEvent::OutputInvalid {
            error: "not json".into(),
            retrying: true,
        },
        AgentEvent::OutputInvalid {
            error: "still not".into(),
            retrying: false,
        },
        AgentEvent::ModelFallback {
            from: "a".into(),
            to: "c".into(),
            model_call_index: 1,
            error,
        },
        AgentEvent::LoopDetected {
            tool_call_id: None,
            pattern: vec!["ls".into(), "cat".into()],
            repeats: 4,
            action: "stop".into(),
            kind: Default::default(),
            path: None,
        },
        AgentEvent::SessionRepaired {
            repair: repair.clone(),
        },
        AgentEvent::CompactEnd { removed: 1 },
        AgentEvent::RunStart {},
        AgentEvent::RunError {
            error: "boom".into(),
        },
    ];
    let r = events
        .into_iter()
        .fold(Records::new("m", vec![]), Records::emit);
    let t = Transcript::from_trace(&r.trace);
    let notes = notes_of(&t);
    let repaired = format!("session repaired: {repair}");
    assert_eq!(
        notes,
        [
            (0, "stream error: rate_limited: slow down"),
            (1, "context overflow: too long"),
            (2, "tool c1 killed"),
            (3, "tool c2: unknown tool `nope`"),
            (4, "steering applied: left"),
            (5, "tool c3 skipped for steering"),
            (6, "model switched: a -> b"),
            (7, "usage limit reached: tool_calls 3 >= 2.5"),
            (8, "output invalid (retrying): not json"),
            (9, "output invalid: still not"),
            (10, "model fallback: a -> c (rate_limited: slow down)"),
            (11, "loop detected: ls, cat x4 (action stop)"),
            (12, repaired.as_str()),
            (15, "run failed: boom"),
        ]
    );
    assert_eq!(t.summary.outcome, Some(Outcome::Failed));
    assert_eq!(t.summary.reason.as_deref(), Some("boom"));
}

#[test]
fn an_aborted_run_ends_the_summary() {
    let r = Records::new("m", vec![]).emit(AgentEvent::AgentAbort {
        reason: "user".into(),
    });
    let t = Transcript::from_trace(&r.trace);
    assert_eq!(t.items, [note(0, "run aborted: user")]);
    assert_eq!(
        t.summary.to_string(),
        "aborted (user), 0 steps, 0 tool calls, 0 retries, usage unknown"
    );
}

#[test]
fn long_text_is_shown_on_one_line_and_cut_at_its_limit() {
    let render = |input: &str| {
        let r = Records::new("m", vec![]).input(start(input));
        let text = Transcript::from_trace(&r.trace).render(RenderOptions {
            style: Style::Text,
            states: false,
            indexes: false,
            schemas: false,
        });
        text.lines().nth(1).expect("the run line").to_string()
    };
    assert_eq!(render("two\nlines"), "run r1 started: user \"two⏎lines\"");
    let exactly = "x".repeat(200);
    assert_eq!(
        render(&exactly),
        format!("run r1 started: user \"{exactly}\"")
    );
    let longer = "y".repeat(201);
    assert_eq!(
        render(&longer),
        format!("run r1 started: user \"{}…\"", &longer[..200])
    );
}

/// These events and inputs read as notes too: cache hits, rule matches (each action,
/// with and without a deadline), status, title, plan, todos, tool-set changes, a vetoed
/// compaction.
#[test]
fn issue13_events_become_notes() {
    use agentloop_core::todo::{Todo, TodoStatus};
    use agentloop_core::tool_rules::RuleAction;
    let rule = |id: &str, action, timeout_ms| AgentEvent::ToolRuleMatched {
        tool_call_id: id.into(),
        name: "bash".into(),
        rule: 2,
        action,
        timeout_ms,
    };
    let events = vec![
        AgentEvent::ToolCacheHit {
            tool_call_id: "c2".into(),
            name: "calc".into(),
            cached_from: "c1".into(),
        },
        rule("c3", RuleAction::Allow, Some(600)),
        rule("c4", RuleAction::Ask, None),
        rule("c5", RuleAction::Deny, None),
        AgentEvent::StatusUpdate {
            model_call_index: 1,
            attempt: 1,
            text: "reading".into(),
        },
        AgentEvent::TitleGenerated {
            model_call_index: 1,
            attempt: 1,
            title: "Fix the parser".into(),
        },
        AgentEvent::PlanGenerated {
            model_call_index: 1,
            attempt: 1,
            steps: vec!["read".into(), "fix".into()],
        },
        AgentEvent::TodoChange {
            tool_call_id: "c6".into(),
            todos: vec![
                Todo {
                    content: "read".into(),
                    status: TodoStatus::Completed,
                },
                Todo {
                    content: "fix".into(),
                    status: TodoStatus::Pending,
                },
            ],
        },
        AgentEvent::ToolsUpdated {
            attached: vec!["ls".into(), "cat".into()],
            detached: vec!["rm".into()],
        },
    ];
    let r = events
        .into_iter()
        .fold(Records::new("m", vec![]), Records::emit)
        .input(Event::CompactionVetoed {
            reason: "keep it".into(),
        });
    let t = Transcript::from_trace(&r.trace);
    let notes = notes_of(&t);
    assert_eq!(
        notes,
        [
            (0, "tool c2: `calc` answered from the cache (c1)"),
            (1, "tool c3: `bash` allowed by rule 2, deadline 600 ms"),
            (2, "tool c4: `bash` put to a human by rule 2"),
            (3, "tool c5: `bash` denied by rule 2"),
            (4, "status: reading"),
            (5, "title: Fix the parser"),
            (6, "plan: read | fix"),
            (7, "todos: [x] read | [ ] fix"),
            (8, "tools updated: +[ls, cat] -[rm]"),
            (9, "compaction vetoed: keep it"),
        ]
    );
}

/// `trace show` in both layouts (R-TRACE-2): a run start names its history, the first attempt
/// of a step is its heading (Markdown) or its line (text), and reasoning is shown.
#[test]
fn r_trace_2_render_names_history_steps_and_reasoning() {
    use agentloop_trace_tools::transcript::{RenderOptions, Style, Summary};
    let t = Transcript {
        version: 4,
        session: "s".into(),
        model: "m".into(),
        tools: vec![],
        items: vec![
            Item::RunStart {
                index: 0,
                run_id: "r1".into(),
                input: vec!["hi".into()],
                history: 2,
            },
            Item::Request {
                index: 1,
                step: 1,
                attempt: 1,
                model: "m".into(),
                messages: 3,
                tools: 1,
            },
            Item::Assistant {
                index: 2,
                step: 1,
                text: "hello".into(),
                reasoning: "think first".into(),
                tool_calls: 0,
                finish_reason: Some("stop".into()),
                usage: None,
            },
        ],
        summary: Summary::default(),
    };
    let text = t.render(RenderOptions {
        style: Style::Text,
        states: false,
        indexes: false,
        schemas: false,
    });
    assert!(text.contains(" after 2 history messages"), "{text}");
    assert!(
        text.contains("step 1: request (m, 3 messages, 1 tool)"),
        "{text}"
    );
    assert!(text.contains("reasoning: \"think first\""), "{text}");
    let md = t.render(RenderOptions {
        style: Style::Markdown,
        states: false,
        indexes: false,
        schemas: false,
    });
    assert!(
        md.contains("\n### Step 1\n\n- request: m, 3 messages, 1 tool"),
        "{md}"
    );
    assert!(md.contains("reasoning: \"think first\""), "{md}");
    let mut fresh = t.clone();
    if let Item::RunStart { history, .. } = &mut fresh.items[0] {
        *history = 0;
    }
    let fresh = fresh.render(RenderOptions::default());
    assert!(!fresh.contains("history"), "{fresh}");
}

#[test]
fn schemas_are_rendered_a_line_per_tool_when_asked() {
    let t = Transcript {
        version: 7,
        session: "s".into(),
        model: "m".into(),
        tools: vec![ToolSummary {
            name: "add".into(),
            arguments: vec!["a".into()],
            description: "Adds.".into(),
            parameters: json!({"type": "object", "properties": {"a": {"type": "integer"}}}),
        }],
        items: vec![],
        summary: Summary::default(),
    };
    let options = |schemas| RenderOptions {
        schemas,
        ..RenderOptions::default()
    };
    let with = t.render(options(true));
    assert!(with.contains("tools: add(a)\n"), "{with}");
    assert!(
        with.contains(
            r#"  add: Adds. schema {"properties":{"a":{"type":"integer"}},"type":"object"}"#
        ),
        "{with}"
    );
    assert!(!t.render(options(false)).contains("schema"));
}
