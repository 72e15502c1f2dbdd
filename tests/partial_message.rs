//! R-STR-2 through the public runtime API: the partial message the machines assemble is
//! readable while a run streams, from the run's `Controller` and from a `Session` handle. On
//! virtual time with a slowed-down scripted model.

mod support;

use std::sync::Arc;
use std::time::Duration;

use agentloop::runtime::Controller;
use agentloop::session::SubscriptionItem;
use agentloop::AgentEvent;
use agentloop::Message;
use support::*;

const STORY: &str = "a long story that goes on and on";

fn script() -> String {
    format!(r#"{{"turns": [{{"text": "{STORY}", "chunk_chars": 3}}]}}"#)
}

/// Every snapshot is a prefix of the final text, and they only grow.
fn assert_growing_prefixes(texts: &[String]) {
    for t in texts {
        assert!(STORY.starts_with(t.as_str()), "{t:?} is not a prefix");
    }
    for w in texts.windows(2) {
        assert!(w[1].starts_with(w[0].as_str()), "{w:?} shrank");
    }
}

#[tokio::test(start_paused = true)]
async fn r_str_2_controller_reads_the_partial_message_while_the_run_streams() {
    let agent = Arc::new(builder(Slow::new(&script())).build());
    let controller = Controller::new();
    let rx = controller.clone();
    assert!(controller.partial().is_none(), "no run yet");
    let a = agent.clone();
    let run = tokio::spawn(async move {
        a.run_with("s", vec![Message::user("tell me")], Some(&rx), false)
            .await
    });
    let mut texts = Vec::new();
    while !run.is_finished() {
        tokio::time::sleep(Duration::from_millis(25)).await;
        if let Some(p) = controller.partial() {
            texts.push(p.text.clone());
        }
    }
    let out = run.await.expect("joined").expect("ran");
    assert_eq!(out.result.final_text(), Some(STORY));
    assert_growing_prefixes(&texts);
    assert!(
        texts.iter().any(|t| !t.is_empty() && t.len() < STORY.len()),
        "a snapshot was taken mid-stream: {texts:?}"
    );
    assert!(controller.partial().is_none(), "cleared when the run ended");
}

#[tokio::test(start_paused = true)]
async fn r_str_2_session_partial_message_includes_every_delta_already_published() {
    let s = session(builder(Slow::new(&script())).build());
    assert!(s.partial().is_none(), "idle");
    let mut sub = s.subscribe(None, None);
    s.prompt("tell me").await.expect("started");
    let mut seen = String::new();
    let mut texts = Vec::new();
    loop {
        let Some(SubscriptionItem::Event(e)) = sub.recv().await else {
            panic!("session closed before run_end");
        };
        match &e.event {
            AgentEvent::TextDelta { text, .. } => {
                seen.push_str(text);
                // The snapshot is refreshed before the delta's event is published.
                let p = s.partial().expect("a step is streaming");
                assert!(p.text.starts_with(&seen), "{:?} lacks {seen:?}", p.text);
                texts.push(p.text.clone());
            }
            AgentEvent::ResponseComplete { message, .. } => {
                assert_eq!(message.text, STORY, "the committed message, whole");
            }
            AgentEvent::RunEnd { final_text, .. } => {
                assert_eq!(final_text.as_deref(), Some(STORY));
                break;
            }
            _ => {}
        }
    }
    assert_eq!(seen, STORY);
    assert_growing_prefixes(&texts);
    assert!(texts.len() > 2, "{texts:?}");
    s.wait_idle().await;
    assert!(s.partial().is_none(), "idle again");
}
