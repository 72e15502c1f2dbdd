//! agentloop as a program with its default features links it. Run alone
//! (`cargo test -p agentloop-testkit --test default_features`, as CI does), nothing in this
//! build turns on `json-schema`: a typed answer is then checked by deserializing into its
//! type. (In a workspace-wide `cargo test` the CLI's features are unified in and the JSON
//! Schema validator checks it; the verdicts are the same.)

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use agentloop_testkit::agent::{deterministic, reply, FnModel};

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Point {
    x: i64,
}

/// A typed answer of the wrong shape goes back to the model with its errors, and the run
/// completes with the second answer.
#[tokio::test(start_paused = true)]
async fn a_wrong_typed_answer_is_sent_back() {
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let model = FnModel::new(move |request| {
        seen.fetch_add(1, Ordering::SeqCst);
        match request.model_call_index {
            1 => reply::text(r#"{"x": "one"}"#),
            _ => {
                // The retry carries the verdict on the first answer: the path and the reason.
                let sent = serde_json::to_string(&request.messages).expect("messages");
                assert!(sent.contains("/x"), "{sent}");
                reply::text(r#"{"x": 1}"#)
            }
        }
    });
    let agent = deterministic().model(model).build();
    let (point, _) = agent
        .run_typed::<Point>("s1", "A point")
        .await
        .expect("the second answer is a Point");
    assert_eq!(point.x, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
