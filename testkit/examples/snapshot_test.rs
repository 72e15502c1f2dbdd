//! A deterministic two-step calculator run with a function model, printed as the snapshot
//! `assert_trace_snapshot!` would store: `cargo run -p agentloop-testkit --example snapshot_test`.

use agentloop_testkit::agent::{deterministic, reply, run_traced, FnModel};

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = FnModel::new(|request| match request.model_call_index {
        1 => reply::tool_call("calculator", serde_json::json!({"expression": "2+3"})),
        _ => reply::text("The answer is 5."),
    });
    let agent = deterministic().model(model).build();
    let (out, trace) = run_traced(&agent, "What is 2+3?").await?;
    println!("final: {:?}\n", out.result.final_text());
    print!("{}", agentloop_testkit::snapshot::render(&trace));
    Ok(())
}
