//! Run-level properties of the two machines, driven step by step through `Run::handle`:
//! usage accumulation (R-CTX-3), tool results in call order (R-IN-4), budget- and
//! count-driven compaction (R-OUT-4, R-CTX), the approve-always whitelist across steps
//! (R-TOOL-3), doom loops (R-TOOL-4), steering at the step boundary (R-CTL-2), the last-step
//! reminder (R-OUT-5), and the run's accessors.

use std::collections::VecDeque;

use agentloop_core::agent_event::AgentEvent;
use agentloop_core::error::RunError;
use agentloop_core::message::FinishReason;
use agentloop_core::process::{ApprovalPolicy, DoomLoopPolicy, LoopAction};
use agentloop_core::react::config::FINAL_REMINDER;
use agentloop_core::{
    ApprovalDecision, AttemptId, Effect, Entry, Event, Message, MessageDelta, ModelRequest,
    Outcome, Run, RunConfig, ToolCall, ToolSpec, ToolStatus, Usage,
};

fn spec(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("the {name} tool"),
        parameters: serde_json::json!({"type": "object"}),
    }
}

fn config() -> RunConfig {
    RunConfig {
        tools: vec![spec("calc"), spec("ls")].into(),
        ..RunConfig::default()
    }
}

fn usage(input: u64, output: u64) -> Option<Usage> {
    Some(Usage {
        input_tokens: input,
        output_tokens: output,
        ..Default::default()
    })
}

/// A model turn answering with text.
fn text_turn(text: &str, usage: Option<Usage>) -> Vec<MessageDelta> {
    vec![
        MessageDelta::TextDelta { text: text.into() },
        MessageDelta::FinishStep {
            finish_reason: Some(FinishReason::Stop),
            raw_finish_reason: None,
            usage,
        },
        MessageDelta::Finish,
    ]
}

/// A model turn calling tools: `(id, name, arguments)`.
fn tool_turn(calls: &[(&str, &str, &str)], usage: Option<Usage>) -> Vec<MessageDelta> {
    let mut d: Vec<MessageDelta> = calls
        .iter()
        .map(|(id, name, args)| MessageDelta::ToolCall {
            id: (*id).into(),
            name: (*name).into(),
            arguments: (*args).into(),
        })
        .collect();
    d.push(MessageDelta::FinishStep {
        finish_reason: Some(FinishReason::ToolCalls),
        raw_finish_reason: None,
        usage,
    });
    d.push(MessageDelta::Finish);
    d
}

type Approver = fn(&ToolCall) -> ApprovalDecision;
type Compactor = fn(&[Message]) -> Vec<Message>;

/// Answers every effect of a run: scripted model turns, tools finishing in reverse call order
/// (so call order must be restored by the machine), approvals and compactions.
struct Driver {
    run: Run,
    turns: VecDeque<Vec<MessageDelta>>,
    approve: Approver,
    compactor: Compactor,
    requests: Vec<ModelRequest>,
    effects: Vec<Effect>,
    /// The approver returned `TimedOut`: nobody answers, and the approval timer that follows
    /// the request fires at once.
    unanswered: bool,
}

impl Driver {
    fn new(cfg: RunConfig, turns: Vec<Vec<MessageDelta>>) -> Self {
        Driver {
            run: Run::new(cfg),
            turns: turns.into(),
            approve: |_| ApprovalDecision::Approved,
            compactor: |_| vec![Message::user("summary")],
            requests: Vec::new(),
            effects: Vec::new(),
            unanswered: false,
        }
    }

    fn start(&mut self, prompt: &str) -> Vec<Effect> {
        self.run
            .handle(Event::Start {
                run_id: "r1".into(),
                history: vec![],
                input: vec![Message::user(prompt)],
                session_turns: 0,
            })
            .effects
    }

    fn feed(&mut self, queue: &mut VecDeque<Effect>, event: Event) {
        let step = self.run.handle(event);
        assert!(
            step.transitions.iter().all(|t| t.conforms()),
            "{:?}",
            step.transitions
        );
        assert!(step.guard_violations().is_empty());
        queue.extend(step.effects);
    }

    /// Answers effects until the run needs nothing more.
    fn pump(&mut self, effects: Vec<Effect>) {
        let mut queue: VecDeque<Effect> = effects.into();
        let mut tools: Vec<ToolCall> = Vec::new();
        loop {
            while let Some(e) = queue.pop_front() {
                self.effects.push(e.clone());
                match e {
                    Effect::CallModel { request } => {
                        self.requests.push(request.clone());
                        let attempt = AttemptId {
                            run_id: request.run_id.clone(),
                            model_call_index: request.model_call_index,
                            attempt: request.attempt,
                        };
                        let turn = self.turns.pop_front().expect("a scripted model turn");
                        self.feed(
                            &mut queue,
                            Event::StreamOpened {
                                attempt: attempt.clone(),
                            },
                        );
                        for (seq, delta) in turn.into_iter().enumerate() {
                            self.feed(
                                &mut queue,
                                Event::Delta {
                                    attempt: attempt.clone(),
                                    seq: seq as u64,
                                    delta,
                                },
                            );
                        }
                        self.feed(&mut queue, Event::done(attempt));
                    }
                    Effect::RunTool { call } => tools.push(call),
                    Effect::CommitRunEnd { .. } => self.feed(&mut queue, Event::RunEndCommitted),
                    Effect::RequestApproval { call } => {
                        let decision = (self.approve)(&call);
                        if matches!(decision, ApprovalDecision::TimedOut { .. }) {
                            self.unanswered = true;
                            continue;
                        }
                        self.feed(
                            &mut queue,
                            Event::Approval {
                                tool_call_id: call.id,
                                decision,
                            },
                        );
                    }
                    Effect::StartTimer { timer_id, .. } if self.unanswered => {
                        self.unanswered = false;
                        self.feed(&mut queue, Event::TimerElapsed { timer_id });
                    }
                    Effect::Compact { messages, .. } => {
                        let replacement = (self.compactor)(&messages);
                        let removed = messages.len().saturating_sub(replacement.len());
                        self.feed(
                            &mut queue,
                            Event::CompactionDone {
                                messages: replacement,
                                removed,
                            },
                        );
                    }
                    _ => {}
                }
            }
            if tools.is_empty() {
                break;
            }
            for call in tools.drain(..).rev() {
                self.feed(
                    &mut queue,
                    Event::ToolFinished {
                        content: format!("out:{}", call.id),
                        tool_call_id: call.id,
                        status: ToolStatus::Completed,
                    },
                );
            }
        }
    }

    fn go(&mut self, prompt: &str) {
        let e = self.start(prompt);
        self.pump(e);
    }

    fn result(&self) -> &agentloop_core::LoopResult {
        self.run.result().expect("the run ended")
    }

    fn emitted(&self) -> Vec<&AgentEvent> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Emit { event } => Some(event),
                _ => None,
            })
            .collect()
    }

    fn count(&self, f: impl Fn(&Effect) -> bool) -> usize {
        self.effects.iter().filter(|e| f(e)).count()
    }

    fn compactions(&self) -> Vec<(Option<u64>, Option<usize>)> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Compact {
                    budget_tokens,
                    max_messages,
                    ..
                } => Some((*budget_tokens, *max_messages)),
                _ => None,
            })
            .collect()
    }
}

fn shape(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .map(|m| match m {
            Message::System { content } => format!("s:{content}"),
            Message::User { content, .. } => format!("u:{content}"),
            Message::Assistant(a) => {
                let ids: Vec<_> = a.tool_calls.iter().map(|c| c.id.as_str()).collect();
                format!("a:{}[{}]", a.text, ids.join(","))
            }
            Message::Tool(r) => format!("t:{}={}", r.tool_call_id, r.content),
        })
        .collect()
}

#[test]
fn r_ctx_3_usage_is_summed_over_the_steps_of_a_run() {
    let u1 = Usage {
        input_tokens: 100,
        output_tokens: 20,
        cache_read_input_tokens: 3,
        cache_creation_input_tokens: 4,
        reasoning_tokens: 5,
    };
    let u2 = Usage {
        input_tokens: 200,
        output_tokens: 30,
        cache_read_input_tokens: 7,
        cache_creation_input_tokens: 11,
        reasoning_tokens: 13,
    };
    let mut d = Driver::new(
        config(),
        vec![
            tool_turn(&[("c1", "calc", "{}")], Some(u1)),
            text_turn("done", None),
            // (never requested)
        ],
    );
    d.turns
        .insert(1, tool_turn(&[("c2", "ls", "{}")], Some(u2)));
    d.go("hi");
    let r = d.result();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(r.reason, "final_answer");
    assert_eq!(r.iterations, 3);
    let total = Usage {
        input_tokens: 300,
        output_tokens: 50,
        cache_read_input_tokens: 10,
        cache_creation_input_tokens: 15,
        reasoning_tokens: 18,
    };
    assert_eq!(r.usage, Some(total));
    assert_eq!(r.final_text(), Some("done"));
    let end = d
        .emitted()
        .into_iter()
        .find_map(|e| match e {
            AgentEvent::RunEnd { usage, .. } => Some(*usage),
            _ => None,
        })
        .expect("run_end");
    assert_eq!(end, Some(total));
}

#[test]
fn r_ctx_3_a_run_whose_steps_reported_no_usage_has_unknown_usage_not_zeros() {
    let mut d = Driver::new(config(), vec![text_turn("done", None)]);
    d.go("hi");
    let r = d.result();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(r.usage, None);
    let end = d
        .emitted()
        .into_iter()
        .find_map(|e| match e {
            AgentEvent::RunEnd { usage, .. } => Some(*usage),
            _ => None,
        })
        .expect("run_end");
    assert_eq!(end, None);
    let json = serde_json::to_value(AgentEvent::RunEnd {
        outcome: Outcome::Completed,
        reason: "final_answer".into(),
        usage: None,
        final_text: None,
    })
    .expect("json");
    assert!(json["usage"].is_null(), "{json}");
}

#[test]
fn r_in_4_results_enter_the_context_in_call_order() {
    let mut d = Driver::new(
        config(),
        vec![
            tool_turn(
                &[
                    ("c1", "calc", "{}"),
                    ("c2", "ls", "{}"),
                    ("c3", "calc", r#"{"x":1}"#),
                ],
                None,
            ),
            text_turn("done", None),
        ],
    );
    d.go("hi");
    let expected = [
        "u:hi",
        "a:[c1,c2,c3]",
        "t:c1=out:c1",
        "t:c2=out:c2",
        "t:c3=out:c3",
        "a:done[]",
    ];
    assert_eq!(shape(&d.result().messages), expected);
    assert_eq!(shape(d.run.messages()), expected);
    // The second request carries the results in call order too.
    assert_eq!(shape(&d.requests[1].messages), expected[..5]);
    // They were persisted in completion order (reverse), each once.
    let persisted: Vec<_> = d
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Persist {
                entry: Entry::ToolResult { result, .. },
            } => Some(result.tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(persisted, ["c3", "c2", "c1"]);
}

#[test]
fn r_out_4_reported_usage_at_the_budget_ratio_compacts_before_the_next_step() {
    let cfg = RunConfig {
        context_budget_tokens: Some(1000),
        compact_ratio: 0.5,
        ..config()
    };
    let mut d = Driver::new(
        cfg.clone(),
        vec![
            tool_turn(&[("c1", "calc", "{}")], usage(400, 100)),
            text_turn("done", None),
        ],
    );
    d.go("hi");
    assert_eq!(d.compactions(), [(Some(500), None)]);
    // The next request is built from the compacted context.
    assert_eq!(shape(&d.requests[1].messages), ["u:summary"]);
    assert_eq!(shape(&d.result().messages), ["u:summary", "a:done[]"]);
    assert!(d.effects.iter().any(|e| matches!(
        e,
        Effect::Persist {
            entry: Entry::Compaction { removed: 2, .. }
        }
    )));
    assert!(d
        .emitted()
        .iter()
        .any(|e| matches!(e, AgentEvent::CompactEnd { removed: 2 })));
    // One token below the ratio: no compaction.
    let mut d = Driver::new(
        cfg,
        vec![
            tool_turn(&[("c1", "calc", "{}")], usage(400, 99)),
            text_turn("done", None),
        ],
    );
    d.go("hi");
    assert!(d.compactions().is_empty());
    assert_eq!(d.requests[1].messages.len(), 3);
}

#[test]
fn r_out_4_without_reported_usage_the_estimate_drives_compaction() {
    // "hi" (5) + assistant call `calc` `{}` (6) + result `out:c1` + `calc` (7) = 18 tokens.
    let turns = || {
        vec![
            tool_turn(&[("c1", "calc", "{}")], None),
            text_turn("done", None),
        ]
    };
    let budget = |b| RunConfig {
        context_budget_tokens: Some(b),
        compact_ratio: 1.0,
        ..config()
    };
    let mut d = Driver::new(budget(18), turns());
    d.go("hi");
    assert_eq!(d.compactions(), [(Some(18), None)]);
    let mut d = Driver::new(budget(19), turns());
    d.go("hi");
    assert!(d.compactions().is_empty());
}

#[test]
fn r_out_4_more_messages_than_the_threshold_compacts() {
    let turns = || {
        vec![
            tool_turn(&[("c1", "calc", "{}")], None),
            text_turn("done", None),
        ]
    };
    // After the first step the context holds 3 messages.
    let mut d = Driver::new(
        RunConfig {
            compact_threshold: Some(2),
            ..config()
        },
        turns(),
    );
    d.go("hi");
    assert_eq!(d.compactions(), [(None, Some(2))]);
    let mut d = Driver::new(
        RunConfig {
            compact_threshold: Some(3),
            ..config()
        },
        turns(),
    );
    d.go("hi");
    assert!(d.compactions().is_empty());
}

#[test]
fn r_out_3_a_final_answer_over_budget_completes_without_compacting() {
    let mut d = Driver::new(
        RunConfig {
            context_budget_tokens: Some(10),
            ..config()
        },
        vec![text_turn("done", usage(50, 50))],
    );
    d.go("hi");
    assert!(d.compactions().is_empty());
    assert_eq!(d.result().reason, "final_answer");
}

fn approvals(d: &Driver) -> usize {
    d.count(|e| matches!(e, Effect::RequestApproval { .. }))
}

fn tool_runs(d: &Driver) -> usize {
    d.count(|e| matches!(e, Effect::RunTool { .. }))
}

fn calc_each_step() -> Vec<Vec<MessageDelta>> {
    vec![
        tool_turn(&[("c1", "calc", r#"{"x":1}"#)], None),
        tool_turn(&[("c2", "calc", r#"{"x":2}"#)], None),
        tool_turn(&[("c3", "ls", "{}")], None),
        text_turn("done", None),
    ]
}

#[test]
fn r_tool_3_approve_always_whitelists_the_tool_for_later_steps() {
    let mut cfg = config();
    cfg.step
        .approval
        .insert("calc".into(), ApprovalPolicy::Always);
    let mut d = Driver::new(cfg.clone(), calc_each_step());
    d.approve = |_| ApprovalDecision::ApprovedAlways;
    d.go("hi");
    assert_eq!(approvals(&d), 1, "asked once, then whitelisted");
    assert_eq!(tool_runs(&d), 3);
    assert_eq!(d.result().reason, "final_answer");
    // A plain approval whitelists nothing: asked in both steps; `ls` never needs approval.
    let mut d = Driver::new(cfg, calc_each_step());
    d.go("hi");
    assert_eq!(approvals(&d), 2);
    assert_eq!(tool_runs(&d), 3);
}

#[test]
fn r_tool_3_a_rejected_call_is_not_run_and_gets_a_denied_result() {
    let mut cfg = config();
    cfg.step
        .approval
        .insert("calc".into(), ApprovalPolicy::Always);
    let mut d = Driver::new(
        cfg,
        vec![
            tool_turn(&[("c1", "calc", "{}")], None),
            text_turn("ok", None),
        ],
    );
    d.approve = |_| ApprovalDecision::Rejected {
        reason: "no".into(),
    };
    d.go("hi");
    assert_eq!(tool_runs(&d), 0);
    let Message::Tool(r) = &d.result().messages[2] else {
        panic!("{:?}", d.result().messages)
    };
    assert_eq!(r.status, ToolStatus::Denied);
}

/// A run whose one `calc` call needs approval, then a text answer.
fn asked_calc(auto_resume: bool, approve: Approver) -> Driver {
    asked_calc_within(auto_resume, approve, None)
}

/// [`asked_calc`] under approval timeout `timeout_ms` (R-CTL-4).
fn asked_calc_within(auto_resume: bool, approve: Approver, timeout_ms: Option<u64>) -> Driver {
    let mut cfg = config();
    cfg.step.approval_timeout_ms = timeout_ms;
    cfg.step
        .approval
        .insert("calc".into(), ApprovalPolicy::Always);
    cfg.step.auto_resume = auto_resume;
    let mut d = Driver::new(
        cfg,
        vec![
            tool_turn(&[("c1", "calc", "{}")], None),
            text_turn("ok", None),
        ],
    );
    d.approve = approve;
    d.go("hi");
    d
}

/// The kinds of the emitted events, in order (`agent_resumed:<trigger>`,
/// `approval_resolved:<status>`).
fn kinds(d: &Driver) -> Vec<String> {
    d.emitted()
        .into_iter()
        .map(|e| match e {
            AgentEvent::AgentResumed { trigger } => format!("agent_resumed:{trigger}"),
            AgentEvent::ApprovalResolved { status, .. } => format!(
                "approval_resolved:{}",
                serde_json::to_value(status).unwrap()
            )
            .replace('"', ""),
            other => serde_json::to_value(other).unwrap()["type"]
                .as_str()
                .unwrap_or("?")
                .to_string(),
        })
        .collect()
}

#[test]
fn seed_001_a_rejection_stops_the_run_with_reason_tool_rejected() {
    let d = asked_calc(false, |_| ApprovalDecision::Rejected {
        reason: "no".into(),
    });
    assert_eq!(d.result().reason, "tool_rejected");
    assert_eq!(d.result().outcome, agentloop_core::Outcome::Completed);
    assert_eq!(d.requests.len(), 1, "no model call after the rejection");
    let k = kinds(&d);
    assert!(
        k.contains(&"approval_resolved:rejected".to_string()),
        "{k:?}"
    );
    assert!(!k.iter().any(|e| e.starts_with("agent_resumed")), "{k:?}");
}

#[test]
fn seed_001_auto_resume_continues_after_a_rejection_and_announces_it_first() {
    let d = asked_calc(true, |_| ApprovalDecision::Rejected {
        reason: "no".into(),
    });
    assert_eq!(d.result().reason, "final_answer");
    assert_eq!(d.requests.len(), 2, "the model saw the denied result");
    let k = kinds(&d);
    let resolved = k.iter().position(|e| e == "approval_resolved:rejected");
    let resumed = k.iter().position(|e| e == "agent_resumed:tool_rejected");
    assert_eq!(resumed, resolved.map(|i| i + 1), "{k:?}");
}

#[test]
fn seed_001_an_approval_resumes_before_the_call_starts() {
    let d = asked_calc(false, |_| ApprovalDecision::Approved);
    assert_eq!(d.result().reason, "final_answer");
    let k = kinds(&d);
    let resumed = k
        .iter()
        .position(|e| e == "agent_resumed:tool_approved")
        .expect("agent_resumed");
    let started = k
        .iter()
        .position(|e| e == "tool_start")
        .expect("tool_start");
    assert!(resumed < started, "{k:?}");
    assert_eq!(k[resumed - 1], "approval_resolved:approved");
}

#[test]
fn seed_001_an_approval_timeout_is_a_rejection_with_status_timeout() {
    // Nobody answers: the step's approval timer (250 ms) fires.
    let nobody: Approver = |_| ApprovalDecision::TimedOut { after_ms: 0 };
    let d = asked_calc_within(false, nobody, Some(250));
    assert_eq!(d.result().reason, "tool_rejected");
    assert!(kinds(&d).contains(&"approval_resolved:timeout".to_string()));
    let Message::Tool(r) = &d.result().messages[2] else {
        panic!("{:?}", d.result().messages)
    };
    assert_eq!(r.status, ToolStatus::Denied);
    assert!(r.content.contains("250 ms"), "{}", r.content);
    let d = asked_calc_within(true, nobody, Some(250));
    assert_eq!(d.result().reason, "final_answer");
    assert!(kinds(&d).contains(&"agent_resumed:tool_approval_timeout".to_string()));
}

/// `calc` declared pure (R-TOOL-6).
fn pure_calc() -> RunConfig {
    let mut cfg = config();
    cfg.step.set_pure("calc", true);
    cfg
}

fn cache_hits(d: &Driver) -> Vec<(String, String)> {
    d.emitted()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCacheHit {
                tool_call_id,
                cached_from,
                ..
            } => Some((tool_call_id.clone(), cached_from.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn r_tool_6_an_identical_pure_call_in_a_later_step_is_served_from_the_cache() {
    let turns = vec![
        tool_turn(&[("c1", "calc", r#"{"x":1}"#)], None),
        tool_turn(
            &[("c2", "calc", r#"{"x":2}"#), ("c3", "calc", r#"{"x":1}"#)],
            None,
        ),
        tool_turn(&[("c4", "ls", "{}"), ("c5", "ls", "{}")], None),
        text_turn("done", None),
    ];
    let mut d = Driver::new(pure_calc(), turns.clone());
    d.go("hi");
    assert_eq!(d.result().reason, "final_answer");
    assert_eq!(
        tool_runs(&d),
        4,
        "c1, c2 and both ls calls run; c3 does not"
    );
    assert_eq!(cache_hits(&d), vec![("c3".to_string(), "c1".to_string())]);
    let cached = d
        .result()
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Tool(r) if r.tool_call_id == "c3" => Some(r.clone()),
            _ => None,
        })
        .expect("c3's result");
    assert_eq!(cached.content, "out:c1");
    assert_eq!(cached.status, ToolStatus::Completed);
    // The result is persisted like any other (the session log answers a resume).
    assert!(d.effects.iter().any(|e| matches!(
        e,
        Effect::Persist { entry: Entry::ToolResult { result, .. } } if result.tool_call_id == "c3"
    )));
    // Without the declaration every call runs.
    let mut d = Driver::new(config(), turns);
    d.go("hi");
    assert_eq!(tool_runs(&d), 5);
    assert!(cache_hits(&d).is_empty());
}

#[test]
fn r_tool_6_the_cache_is_rebuilt_from_the_session_history() {
    let mut first = Driver::new(
        pure_calc(),
        vec![
            tool_turn(&[("c1", "calc", r#"{"x":1}"#)], None),
            text_turn("one", None),
        ],
    );
    first.go("hi");
    let history = first.result().messages.clone();
    let mut d = Driver::new(
        pure_calc(),
        vec![
            tool_turn(&[("c9", "calc", r#"{"x":1}"#)], None),
            text_turn("two", None),
        ],
    );
    let effects = d
        .run
        .handle(Event::Start {
            run_id: "r2".into(),
            history,
            input: vec![Message::user("again")],
            session_turns: 2,
        })
        .effects;
    d.pump(effects);
    assert_eq!(tool_runs(&d), 0);
    assert_eq!(cache_hits(&d), vec![("c9".to_string(), "c1".to_string())]);
}

#[test]
fn r_tool_6_a_failed_pure_call_is_not_cached() {
    let mut d = Driver::new(
        pure_calc(),
        vec![
            tool_turn(&[("c1", "calc", "not json")], None),
            tool_turn(&[("c2", "calc", "not json")], None),
            text_turn("done", None),
        ],
    );
    d.go("hi");
    assert!(cache_hits(&d).is_empty());
}

fn same_call_each_step(n: usize) -> Vec<Vec<MessageDelta>> {
    let mut t: Vec<_> = (0..n)
        .map(|i| tool_turn(&[(&format!("c{i}"), "calc", r#"{"x":1}"#)], None))
        .collect();
    t.push(text_turn("done", None));
    t
}

fn loops(d: &Driver) -> Vec<(Option<String>, u32, String)> {
    d.emitted()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::LoopDetected {
                tool_call_id,
                repeats,
                action,
                ..
            } => Some((tool_call_id.clone(), *repeats, action.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn r_tool_4_the_third_identical_call_in_a_row_asks_for_approval() {
    let mut d = Driver::new(config(), same_call_each_step(3));
    d.go("hi");
    assert_eq!(loops(&d), [(Some("c2".to_string()), 3, "ask".to_string())]);
    assert_eq!(approvals(&d), 1);
    assert_eq!(tool_runs(&d), 3, "approved, so it ran");
    // Two identical calls are no loop.
    let mut d = Driver::new(config(), same_call_each_step(2));
    d.go("hi");
    assert!(loops(&d).is_empty());
    assert_eq!(approvals(&d), 0);
    // Different arguments in between break the streak.
    let mut turns = same_call_each_step(3);
    turns.insert(1, tool_turn(&[("cx", "calc", r#"{"x":2}"#)], None));
    let mut d = Driver::new(config(), turns);
    d.go("hi");
    assert!(loops(&d).is_empty());
}

#[test]
fn r_tool_4_a_stop_policy_refuses_the_call_and_stops_the_run() {
    let mut cfg = config();
    cfg.step.doom_loop = Some(DoomLoopPolicy {
        threshold: 2,
        action: LoopAction::Stop,
    });
    let mut d = Driver::new(cfg, same_call_each_step(2));
    d.go("hi");
    assert_eq!(loops(&d), [(Some("c1".to_string()), 2, "stop".to_string())]);
    assert_eq!(tool_runs(&d), 1);
    let r = d.result();
    assert_eq!(
        (r.outcome, r.reason.as_str()),
        (Outcome::Completed, "stopped")
    );
    let Some(Message::Tool(last)) = r.messages.last() else {
        panic!("{:?}", r.messages)
    };
    assert_eq!(last.status, ToolStatus::Error);
    assert!(
        last.content.contains("2 times in a row"),
        "{}",
        last.content
    );
    // Detection disabled: no loop, no stop.
    let mut cfg = config();
    cfg.step.doom_loop = None;
    let mut d = Driver::new(cfg, same_call_each_step(4));
    d.go("hi");
    assert!(loops(&d).is_empty());
    assert_eq!(d.result().reason, "final_answer");
}

#[test]
fn r_tool_4_a_repeated_cycle_across_steps_is_reported_once() {
    let mut turns: Vec<_> = (0..6)
        .map(|i| {
            let name = if i % 2 == 0 { "calc" } else { "ls" };
            tool_turn(&[(&format!("c{i}"), name, "{}")], None)
        })
        .collect();
    turns.push(text_turn("done", None));
    let mut d = Driver::new(config(), turns);
    d.go("hi");
    let patterns: Vec<_> = d
        .emitted()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::LoopDetected {
                tool_call_id: None,
                pattern,
                repeats,
                action,
                ..
            } => Some((pattern.clone(), *repeats, action.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        patterns,
        [(
            vec!["calc".to_string(), "ls".to_string()],
            3,
            "warn".to_string()
        )]
    );
}

#[test]
fn r_ctl_2_steering_joins_the_next_request_and_keeps_the_run_going() {
    let mut d = Driver::new(
        config(),
        vec![text_turn("first", None), text_turn("second", None)],
    );
    let effects = d.start("hi");
    let steer = d.run.handle(Event::Steer {
        text: "also this".into(),
    });
    assert!(!steer.unhandled);
    let mut all = effects;
    all.extend(steer.effects);
    d.pump(all);
    // Without steering, "first" would have been the final answer.
    assert_eq!(d.requests.len(), 2);
    assert_eq!(
        shape(&d.requests[1].messages),
        ["u:hi", "a:first[]", "u:also this"]
    );
    assert!(d
        .emitted()
        .iter()
        .any(|e| matches!(e, AgentEvent::SteeringApplied { text } if text == "also this")));
    assert!(d.effects.iter().any(|e| matches!(
        e,
        Effect::Persist { entry: Entry::UserInput { message, .. } } if *message == Message::user("also this")
    )));
    assert_eq!(d.result().final_text(), Some("second"));
    assert_eq!(d.result().iterations, 2);
}

#[test]
fn r_out_5_the_last_allowed_step_gets_the_reminder_and_no_tools() {
    let mut d = Driver::new(
        RunConfig {
            max_steps: 2,
            ..config()
        },
        vec![
            tool_turn(&[("c1", "calc", "{}")], None),
            text_turn("final", None),
        ],
    );
    d.go("hi");
    assert_eq!(d.requests[0].tools.len(), 2);
    assert_eq!(d.requests[0].model_call_index, 1);
    assert_eq!(d.requests[1].model_call_index, 2);
    assert!(d.requests[1].tools.is_empty());
    assert_eq!(
        d.requests[1].messages.last(),
        Some(&Message::user(FINAL_REMINDER))
    );
    // The reminder is not part of the context.
    assert!(!d.result().messages.contains(&Message::user(FINAL_REMINDER)));
    // A step that still calls tools at the limit ends the run with `max_steps`.
    let mut d = Driver::new(
        RunConfig {
            max_steps: 1,
            ..config()
        },
        vec![tool_turn(&[("c1", "calc", "{}")], None)],
    );
    d.go("hi");
    assert_eq!(d.result().reason, "max_steps");
}

#[test]
fn run_accessors_report_the_run() {
    let cfg = RunConfig {
        model: "m-1".into(),
        ..config()
    };
    let mut run = Run::new(cfg.clone());
    assert_eq!(run.run_id(), "");
    assert_eq!(
        format!("{run:?}"),
        "Run { state: AgentState { react: Init, process: None } }"
    );
    assert!(run.partial().is_none());
    assert!(run.process_state().is_none());
    let step = run.handle(Event::Start {
        run_id: "run-7".into(),
        history: vec![Message::user("old")],
        input: vec![Message::user("new")],
        session_turns: 4,
    });
    assert_eq!(run.run_id(), "run-7");
    assert_eq!(run.config(), &cfg);
    assert_eq!(run.config().model, "m-1");
    assert_eq!(run.messages(), [Message::user("old"), Message::user("new")]);
    assert_eq!(
        run.process_state(),
        Some(agentloop_core::chart::ProcessState::Calling)
    );
    assert!(format!("{run:?}").contains("process: Some(Calling)"));
    let request = step
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::CallModel { request } => Some(request.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(request.session_turn, 4);
    assert_eq!(request.model, "m-1");
    let attempt = AttemptId {
        run_id: "run-7".into(),
        model_call_index: 1,
        attempt: 1,
    };
    assert_eq!(
        (request.model_call_index, request.attempt),
        (attempt.model_call_index, attempt.attempt)
    );
    let _ = run.handle(Event::StreamOpened {
        attempt: attempt.clone(),
    });
    let _ = run.handle(Event::Delta {
        attempt,
        seq: 0,
        delta: MessageDelta::TextDelta {
            text: "partial".into(),
        },
    });
    assert_eq!(run.partial().map(|m| m.text), Some("partial".to_string()));
    assert!(!run.is_terminal());
    assert!(run.result().is_none());
}

fn first_request(effects: &[Effect]) -> ModelRequest {
    effects
        .iter()
        .find_map(|e| match e {
            Effect::CallModel { request } => Some(request.clone()),
            _ => None,
        })
        .expect("a model request")
}

#[test]
fn r_ctl_5_r_ctl_6_model_and_tools_switch_from_the_next_step_on() {
    let mut d = Driver::new(
        config(),
        vec![
            tool_turn(&[("c1", "calc", "{}")], None),
            text_turn("done", None),
        ],
    );
    let mut effects = d.start("hi");
    for e in [
        Event::SwitchModel {
            model: "scripted".into(), // the same model: nothing to announce
        },
        Event::SwitchModel {
            model: "bigger".into(),
        },
        Event::SetTools {
            tools: vec![spec("calc")].into(),
            immune: Default::default(),
        },
    ] {
        let s = d.run.handle(e);
        assert!(!s.unhandled);
        effects.extend(s.effects);
    }
    assert_eq!(d.run.config().model, "bigger");
    d.pump(effects);
    assert_eq!(d.requests[0].model, "scripted");
    assert_eq!(d.requests[0].tools.len(), 2);
    assert_eq!(d.requests[1].model, "bigger");
    assert_eq!(*d.requests[1].tools, [spec("calc")]);
    let switched: Vec<_> = d
        .emitted()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ModelSwitched { from, to } => Some((from.clone(), to.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(switched, [("scripted".to_string(), "bigger".to_string())]);
}

/// A run with a message cap of 0 and a context window of `window` tokens, started with one
/// short prompt (5 estimated tokens): it compacts before its first step.
fn compacting_before_the_first_step(window: u64) -> (Run, agentloop_core::Step) {
    let mut run = Run::new(RunConfig {
        compact_threshold: Some(0),
        context_window: Some(window),
        ..config()
    });
    let start = run.handle(Event::Start {
        run_id: "r1".into(),
        history: vec![],
        input: vec![Message::user("hi")],
        session_turns: 0,
    });
    assert_eq!(start.to.to_string(), "Compacting");
    (run, start)
}

#[test]
fn r_out_6_a_failed_compaction_fails_the_run() {
    // Over the message threshold already before the first step: Planning compacts first. The
    // prompt (5 estimated tokens) is over the 4-token window too, so it cannot be sent.
    let (mut run, start) = compacting_before_the_first_step(4);
    assert!(start.effects.iter().any(|e| matches!(
        e,
        Effect::Compact { messages, budget_tokens: Some(3), max_messages: Some(0) } if messages.len() == 1
    )));
    assert!(!start
        .effects
        .iter()
        .any(|e| matches!(e, Effect::CallModel { .. })));
    let s = run.handle(Event::CompactionFailed {
        error: "no room".into(),
    });
    // The run's end is decided; the run-end entry is committed before the end is reported.
    assert_eq!(s.to.to_string(), "Finishing");
    assert!(run.result().is_none());
    assert!(s.effects.iter().any(|e| matches!(
        e,
        Effect::CommitRunEnd { entry: Entry::RunEnd { outcome, .. } } if *outcome == agentloop_core::Outcome::Failed
    )));
    let end = run.handle(Event::RunEndCommitted);
    assert_eq!(end.to.to_string(), "Failed");
    let r = run.result().expect("ended");
    assert_eq!(r.outcome, Outcome::Failed);
    assert_eq!(r.reason, "compaction_failed");
    assert_eq!(
        r.error,
        Some(RunError::Compaction {
            message: "no room".into()
        })
    );
    assert_eq!(
        r.error.as_ref().map(ToString::to_string).as_deref(),
        Some("compaction failed: no room")
    );
    assert!(end.effects.iter().any(|e| matches!(
        e,
        Effect::Emit { event: AgentEvent::RunError { error, .. } } if error == "compaction failed: no room"
    )));
    assert!(run.is_terminal());
}

#[test]
fn r_out_6_a_failed_compaction_of_a_context_that_fits_sends_the_step() {
    // Over the compaction point (a message cap of 0; 80 % of a 6-token window) but inside the
    // window (5 tokens): the compaction point is where compacting starts, not a limit.
    let (mut run, _) = compacting_before_the_first_step(6);
    let s = run.handle(Event::CompactionFailed {
        error: "only pinned messages".into(),
    });
    assert!(
        s.effects
            .iter()
            .any(|e| matches!(e, Effect::CallModel { request } if request.messages.len() == 1)),
        "{:?}",
        s.effects
    );
    assert!(s.effects.iter().any(|e| matches!(
        e,
        Effect::Emit {
            event: AgentEvent::CompactEnd { removed: 0 }
        }
    )));
    assert!(run.result().is_none());
}

#[test]
fn r_idem_4_a_store_failure_stops_the_stream_and_persists_nothing_more() {
    let mut run = Run::new(config());
    let start = run.handle(Event::Start {
        run_id: "r1".into(),
        history: vec![],
        input: vec![Message::user("hi")],
        session_turns: 0,
    });
    let req = first_request(&start.effects);
    let s = run.handle(Event::StoreWriteFailed {
        error: "disk full".into(),
    });
    assert!(s.effects.iter().any(|e| matches!(
        e,
        Effect::CancelModel { attempt } if attempt.attempt == req.attempt && attempt.model_call_index == req.model_call_index
    )));
    assert!(!s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Persist { .. })));
    let r = run.result().expect("ended");
    assert_eq!(r.outcome, Outcome::Failed);
    assert_eq!(r.reason, "store_write_failed");
    assert_eq!(
        r.error,
        Some(RunError::StoreWrite {
            message: "disk full".into()
        })
    );
    assert_eq!(
        r.error.as_ref().map(ToString::to_string).as_deref(),
        Some("session store write failed: disk full")
    );
    assert!(run.process_state().is_none(), "the step ended with the run");
}

#[test]
fn r_idem_4_a_store_failure_kills_running_tools() {
    let mut run = Run::new(config());
    let start = run.handle(Event::Start {
        run_id: "r1".into(),
        history: vec![],
        input: vec![Message::user("hi")],
        session_turns: 0,
    });
    let req = first_request(&start.effects);
    let attempt = AttemptId {
        run_id: req.run_id.clone(),
        model_call_index: req.model_call_index,
        attempt: req.attempt,
    };
    let _ = run.handle(Event::StreamOpened {
        attempt: attempt.clone(),
    });
    for (seq, delta) in tool_turn(&[("c1", "calc", "{}"), ("c2", "ls", "{}")], None)
        .into_iter()
        .enumerate()
    {
        let _ = run.handle(Event::Delta {
            attempt: attempt.clone(),
            seq: seq as u64,
            delta,
        });
    }
    let _ = run.handle(Event::done(attempt));
    let _ = run.handle(Event::ToolFinished {
        tool_call_id: "c1".into(),
        status: ToolStatus::Completed,
        content: "ok".into(),
    });
    let s = run.handle(Event::StoreWriteFailed {
        error: "disk full".into(),
    });
    let kills: Vec<_> = s
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::KillTool { tool_call_id } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(kills, ["c2"]);
    assert!(!s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::CancelModel { .. })));
}

#[test]
fn r_out_1_a_one_step_run_emits_and_persists_in_order() {
    let mut d = Driver::new(config(), vec![text_turn("hello", usage(3, 4))]);
    d.go("hi");
    let got: Vec<String> = d
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Emit { event } => {
                let v = serde_json::to_value(event).unwrap();
                let t = v["type"].as_str().unwrap().to_string();
                (t != "text_delta" && t != "request_start" && t != "message_start").then(|| {
                    match event {
                        AgentEvent::StateChanged {
                            machine,
                            from,
                            to,
                            event,
                        } => {
                            format!("{machine:?} {from} -{event}-> {to}")
                        }
                        AgentEvent::RunEnd {
                            outcome,
                            reason,
                            usage,
                            ..
                        } => format!(
                            "run_end {} {reason} {}+{}",
                            outcome.as_str(),
                            usage.unwrap_or_default().input_tokens,
                            usage.unwrap_or_default().output_tokens
                        ),
                        _ => t,
                    }
                })
            }
            Effect::Persist { entry } => Some(format!(
                "persist {}",
                serde_json::to_value(entry).unwrap()["entry"]
                    .as_str()
                    .unwrap()
            )),
            Effect::CommitRunEnd { entry } => Some(format!(
                "commit {}",
                serde_json::to_value(entry).unwrap()["entry"]
                    .as_str()
                    .unwrap()
            )),
            Effect::CallModel { .. } => Some("call_model".into()),
            _ => None,
        })
        .collect();
    // A state change is announced before what its handler did.
    let expected = [
        "React Init -Start-> Planning",
        "persist user_input",
        "run_start",
        "React Planning -Plan-> Executing",
        "Process Idle -Begin-> Calling",
        "call_model",
        "Process Calling -StreamOpened-> Streaming",
        "Process Streaming -Done-> Success",
        "persist assistant",
        "response_complete",
        "React Executing -InnerSucceeded-> Observing",
        "step_finished",
        "React Observing -Decide-> Finishing",
        "commit run_end",
        "React Finishing -RunEndCommitted-> Completed",
        "run_end completed final_answer 3+4",
    ];
    assert_eq!(got, expected, "{got:#?}");
}

#[test]
fn seed_001_the_same_file_touched_in_a_tight_cycle_is_a_file_loop() {
    let file_loop = |d: &Driver| -> Vec<(Option<String>, u32, String)> {
        d.emitted()
            .into_iter()
            .filter_map(|e| match e {
                AgentEvent::LoopDetected {
                    kind: agentloop_core::agent_event::LoopKind::File,
                    path,
                    repeats,
                    action,
                    ..
                } => Some((path.clone(), *repeats, action.clone())),
                _ => None,
            })
            .collect()
    };
    let cfg = || RunConfig {
        tools: vec![spec("read_file"), spec("append_line")].into(),
        ..RunConfig::default()
    };
    // Read then append to the same file, with different lines: no call repeats, the file does.
    let turn = |i: u32, path: &str| {
        tool_turn(
            &[
                (
                    &format!("r{i}"),
                    "read_file",
                    &format!(r#"{{"path":"{path}"}}"#),
                ),
                (
                    &format!("a{i}"),
                    "append_line",
                    &format!(r#"{{"path":"{path}","line":"{i}"}}"#),
                ),
            ],
            None,
        )
    };
    let mut turns: Vec<_> = (0..3).map(|i| turn(i, "notes.txt")).collect();
    turns.push(text_turn("done", None));
    let mut d = Driver::new(cfg(), turns);
    d.go("hi");
    assert_eq!(
        file_loop(&d),
        [(Some("notes.txt".to_string()), 4, "warn".to_string())],
        "reported once, when the fourth touch lands"
    );
    let json = serde_json::to_value(
        d.emitted()
            .into_iter()
            .find(|e| matches!(e, AgentEvent::LoopDetected { .. }))
            .expect("a loop event"),
    )
    .unwrap();
    assert_eq!(json["kind"], "file");
    assert_eq!(json["path"], "notes.txt");
    assert_eq!(
        json["pattern"],
        serde_json::json!(["read_file", "append_line"])
    );
    // Different files in turn are no loop.
    let mut turns: Vec<_> = (0..3).map(|i| turn(i, &format!("f{i}.txt"))).collect();
    turns.push(text_turn("done", None));
    let mut d = Driver::new(cfg(), turns);
    d.go("hi");
    assert!(file_loop(&d).is_empty());
}
