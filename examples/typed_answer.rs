//! A typed final answer: `agent.run_typed::<T>(..)` asks for an answer matching `T`'s JSON
//! Schema and returns a `T`. No key, no network.
//!
//! Run it: `cargo run --example typed_answer`
//!
//! The scripted model first answers in prose; the runtime checks the answer against the schema,
//! sends the errors back to the model (one output retry by default), and the second answer,
//! JSON in a code fence, parses into the struct. A model that stays wrong is a typed error.

use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::{Agent, AgentError};
use schemars::JsonSchema;
use serde::Deserialize;

/// What the caller wants back.
#[derive(Debug, PartialEq, Deserialize, JsonSchema)]
struct Invoice {
    /// Who pays.
    customer: String,
    /// Line items.
    items: Vec<Item>,
    /// The total in cents.
    total_cents: u64,
}

#[derive(Debug, PartialEq, Deserialize, JsonSchema)]
struct Item {
    name: String,
    cents: u64,
}

fn scripted_agent(script: &str) -> Result<Agent, Box<dyn std::error::Error>> {
    Ok(Agent::builder()
        .model(ScriptedModel::from_json_str(script, "typed_answer")?)
        .build())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prompt = "Make an invoice for ACME: two widgets at 2.50 each";

    // 1. Prose first (not JSON): sent back with the schema errors, then a valid answer.
    let agent = scripted_agent(
        r#"{"turns": [
            {"text": "Sure! ACME owes five dollars for two widgets."},
            {"text": "```json\n{\"customer\": \"ACME\", \"items\": [{\"name\": \"widget\", \"cents\": 250}, {\"name\": \"widget\", \"cents\": 250}], \"total_cents\": 500}\n```"}
        ]}"#,
    )?;
    let (invoice, output) = agent.run_typed::<Invoice>("s1", prompt).await?;
    println!(
        "after {} model steps (one output retry): {:?}",
        output.result.iterations, invoice
    );
    assert_eq!(output.result.iterations, 2);
    assert_eq!(invoice.customer, "ACME");
    assert_eq!(invoice.items.len(), 2);
    assert_eq!(
        invoice.total_cents,
        invoice.items.iter().map(|i| i.cents).sum::<u64>()
    );

    // 2. Wrong twice (a missing field, then a string for a number): a typed error, no value.
    let agent = scripted_agent(
        r#"{"turns": [
            {"text": "{\"customer\": \"ACME\", \"items\": []}"},
            {"text": "{\"customer\": \"ACME\", \"items\": [], \"total_cents\": \"five\"}"}
        ]}"#,
    )?;
    match agent.run_typed::<Invoice>("s2", prompt).await {
        Err(e @ AgentError::Ended { .. }) => {
            println!("still invalid after the retry: {e}");
            assert!(e.to_string().contains("output_invalid"), "{e}");
        }
        other => return Err(format!("expected output_invalid, got {other:?}").into()),
    }
    Ok(())
}
