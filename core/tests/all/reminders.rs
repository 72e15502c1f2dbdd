//! Reminders are inserted by one pure function, `insert_reminders`; the
//! max-steps reminder is one of them, configured rules are data in the run configuration (so
//! in the trace header), and a reminder is in that step's request only, never committed.

use agentloop_core::entry::Entry;
use agentloop_core::message::ToolResult;
use agentloop_core::react::reminders::{insert_reminders, Reminder, ReminderContext, ReminderWhen};
use agentloop_core::react::FINAL_REMINDER;
use agentloop_core::{Effect, Message, Run, RunConfig, ToolStatus};

use crate::steps::{answer, request_of, start};

fn rule(when: ReminderWhen, text: &str) -> Reminder {
    Reminder {
        when,
        text: text.into(),
    }
}

fn ctx(step: u32, messages: &[Message]) -> ReminderContext<'_> {
    ReminderContext {
        step,
        last_step: false,
        limit_final: false,
        messages,
        context_tokens: 100,
    }
}

fn tool(status: ToolStatus) -> Message {
    Message::Tool(ToolResult {
        tool_call_id: "c".into(),
        name: "t".into(),
        status,
        content: String::new(),
    })
}

#[test]
fn seed_004_insert_reminders_applies_each_rule_and_the_built_in_ones() {
    let rules = [
        rule(ReminderWhen::Always, "always"),
        rule(ReminderWhen::EveryNSteps(2), "even"),
        rule(ReminderWhen::EveryNSteps(0), "never"),
        rule(ReminderWhen::AfterToolFailure, "a tool failed"),
        rule(ReminderWhen::ContextTokensAtLeast(100), "big"),
        rule(ReminderWhen::ContextTokensAtLeast(101), "bigger"),
    ];
    let ok = [Message::user("hi"), tool(ToolStatus::Completed)];
    assert_eq!(
        insert_reminders(&ctx(1, &ok), "F", &rules),
        ["always", "big"]
    );
    let failed = [
        tool(ToolStatus::Error),
        Message::Assistant(Default::default()),
        tool(ToolStatus::Completed),
        tool(ToolStatus::Denied),
    ];
    assert_eq!(
        insert_reminders(&ctx(2, &failed), "F", &rules),
        ["always", "even", "a tool failed", "big"]
    );
    // A failure before the last assistant message is an older step's.
    let older = [
        tool(ToolStatus::Error),
        Message::Assistant(Default::default()),
    ];
    assert_eq!(
        insert_reminders(&ctx(3, &older), "F", &rules),
        ["always", "big"]
    );
    // Every 0th step is never, even for a step numbered 0 (0 is a multiple of everything).
    assert_eq!(insert_reminders(&ctx(0, &ok), "F", &rules[1..3]), ["even"]);
    // The built-in reminders come first: the limit's on its final-answer step, else the
    // max-steps one on the last step.
    let last = ReminderContext {
        last_step: true,
        ..ctx(3, &ok)
    };
    assert_eq!(insert_reminders(&last, "F", &[]), ["F"]);
    let limit = ReminderContext {
        limit_final: true,
        ..last
    };
    assert_eq!(
        insert_reminders(&limit, "F", &[]),
        [agentloop_core::react::LIMIT_REMINDER]
    );
}

#[test]
fn seed_004_a_reminder_is_in_its_steps_request_only_and_in_the_header() {
    let config = RunConfig {
        max_steps: 2,
        reminders: vec![rule(ReminderWhen::EveryNSteps(1), "Stay on task.")],
        ..RunConfig::default()
    };
    let header = serde_json::to_value(&config).expect("json");
    assert_eq!(
        header["reminders"],
        serde_json::json!([{"when": {"every_n_steps": 1}, "text": "Stay on task."}])
    );
    let back: RunConfig = serde_json::from_value(header).expect("round trip");
    assert_eq!(back.reminders, config.reminders);
    // A configuration written before rules existed has none.
    let mut old = serde_json::to_value(RunConfig::default()).expect("json");
    assert!(old.get("reminders").is_none(), "not serialized when empty");
    old.as_object_mut().expect("object").remove("reminders");
    assert!(serde_json::from_value::<RunConfig>(old)
        .expect("old")
        .reminders
        .is_empty());

    let mut run = Run::new(config);
    let s = start(&mut run, "hi");
    let r = request_of(&s).expect("request");
    let texts: Vec<String> = r.messages.iter().map(text).collect();
    assert_eq!(texts, ["hi", "Stay on task."]);
    let done = answer(&mut run, &r, "hello", None);
    // Not persisted: the step commits the user input and the answer, no reminder.
    let persisted: Vec<String> = done
        .effects
        .iter()
        .chain(s.effects.iter())
        .filter_map(|e| match e {
            Effect::Persist {
                entry: Entry::UserInput { message, .. },
            } => Some(text(message)),
            _ => None,
        })
        .collect();
    assert_eq!(persisted, ["hi"]);
    assert!(run.messages().iter().all(|m| text(m) != "Stay on task."));
}

#[test]
fn seed_004_the_last_step_gets_the_max_steps_reminder_then_the_rules() {
    let mut run = Run::new(RunConfig {
        max_steps: 1,
        reminders: vec![rule(ReminderWhen::Always, "Be brief.")],
        ..RunConfig::default()
    });
    let r = request_of(&start(&mut run, "hi")).expect("request");
    let texts: Vec<String> = r.messages.iter().map(text).collect();
    assert_eq!(texts, ["hi", FINAL_REMINDER, "Be brief."]);
    assert!(r.tools.is_empty(), "the last step offers no tools");
}

fn text(m: &Message) -> String {
    match m {
        Message::User { content, .. } => content.clone(),
        Message::Assistant(a) => a.text.clone(),
        Message::System { content } => content.clone(),
        Message::Tool(t) => t.content.clone(),
    }
}
