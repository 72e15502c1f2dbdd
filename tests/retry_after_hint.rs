//! R-IN-1 through the runtime and a real HTTP client: a provider's 503 with
//! `retry-after-ms: 150` (or `retry-after: 0.15`) is retried after 150 ms, not after the 1 s
//! backoff, and the `retry` event records that the delay came from the server's hint; a 503
//! without a hint waits the (jittered) backoff and its event carries no hint.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

#[path = "provider_support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::provider::http::ProviderKind;
use agentloop::runtime::{Agent, VecSink};
use agentloop::{AgentEvent, Outcome};
use support::server::*;
use support::*;

const PROVIDERS: [ProviderKind; 3] = [
    ProviderKind::OpenAi,
    ProviderKind::Anthropic,
    ProviderKind::Gemini,
];

fn text_fixture(p: ProviderKind) -> &'static str {
    match p {
        ProviderKind::OpenAi => "openai_text.sse",
        ProviderKind::Anthropic => "anthropic_text.sse",
        ProviderKind::OpenAiResponses => "responses_text.sse",
        ProviderKind::Gemini => "gemini_text.sse",
    }
}

/// A 503 with `headers`, then a good answer; runs one agent turn with the default retry
/// policy (1 s initial backoff) and returns the `retry` events' `(delay_ms, retry_after_ms)`,
/// the requests the server read and the wall time of the run.
async fn run_after_503(
    p: ProviderKind,
    headers: Vec<(&'static str, String)>,
) -> (Vec<(u64, Option<u64>)>, usize, Duration) {
    let server = Server::start(vec![
        Reply::Status {
            status: 503,
            headers,
            body: r#"{"error":{"message":"busy","type":"server_error"}}"#.into(),
        },
        Reply::Sse {
            pieces: vec![fixture(text_fixture(p))],
            gap: Duration::ZERO,
        },
    ])
    .await;
    let sink = VecSink::default();
    let agent = Agent::builder()
        .model_arc(Arc::from(model(p, config(p, &server))))
        .sink(Arc::new(sink.clone()))
        .build();
    let started = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(20), agent.run("s", "hi"))
        .await
        .expect("the run ends")
        .expect("run starts");
    let took = started.elapsed();
    assert_eq!(
        out.result.outcome,
        Outcome::Completed,
        "{p:?}: {:?}",
        out.result
    );
    let retries = sink
        .events()
        .iter()
        .filter_map(|e| match e.event {
            AgentEvent::Retry {
                delay_ms,
                retry_after_ms,
                ..
            } => Some((delay_ms, retry_after_ms)),
            _ => None,
        })
        .collect();
    (retries, server.requests().len(), took)
}

#[tokio::test]
async fn r_in_1_a_503_with_retry_after_ms_150_retries_after_150_ms_not_the_1_s_backoff() {
    for p in PROVIDERS {
        let (retries, requests, took) =
            run_after_503(p, vec![("retry-after-ms", "150".into())]).await;
        assert_eq!(
            retries,
            [(150, Some(150))],
            "{p:?}: the hint overrides the backoff"
        );
        assert_eq!(requests, 2, "{p:?}");
        // Loose, against a loaded machine: the point is the recorded decision above; the
        // backoff alone would take at least 750 ms (1 s less at most 25 % jitter).
        assert!(took >= Duration::from_millis(150), "{p:?}: {took:?}");
        assert!(took < Duration::from_millis(740), "{p:?}: {took:?}");
    }
}

#[tokio::test]
async fn r_in_1_a_retry_after_in_seconds_also_overrides_the_backoff() {
    let (retries, requests, _) =
        run_after_503(ProviderKind::OpenAi, vec![("retry-after", "0.15".into())]).await;
    assert_eq!(retries, [(150, Some(150))]);
    assert_eq!(requests, 2);
}

#[tokio::test]
async fn r_in_1_without_a_hint_the_jittered_backoff_applies_and_the_event_has_no_hint() {
    let (retries, requests, took) = run_after_503(ProviderKind::OpenAi, vec![]).await;
    assert_eq!(retries.len(), 1, "{retries:?}");
    let (delay, hint) = retries[0];
    assert!(
        (750..=1_000).contains(&delay),
        "the 1 s backoff, jittered: {delay}"
    );
    assert_eq!(hint, None);
    assert_eq!(requests, 2);
    assert!(took >= Duration::from_millis(delay), "{took:?}");
}
