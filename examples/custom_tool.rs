//! A custom tool: typed arguments (serde + schemars) through [`TypedTool`], registered on the
//! agent builder and called by a scripted model. No key, no network.
//!
//! Run it: `cargo run --example custom_tool`
//!
//! The tool's JSON Schema comes from its argument type; the runtime checks every call's
//! arguments against it before the tool runs (R-TOOL-1), so the second call of the script
//! (a temperature unit the enum does not have) never reaches `run`: the model gets the
//! schema error as the call's result instead. A `ToolError` from `run` (the third call) is
//! also a result the model sees, never a failed run.

use std::sync::Arc;

use agentloop::provider::scripted::ScriptedModel;
use agentloop::runtime::Agent;
use agentloop::tools::{ToolContext, ToolError, TypedTool};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

/// The tool's arguments: the schema the model sees is derived from this type.
#[derive(Deserialize, JsonSchema)]
struct WeatherArgs {
    /// The city to look up.
    city: String,
    /// The unit of the temperature.
    #[serde(default)]
    unit: Unit,
}

#[derive(Deserialize, JsonSchema, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Unit {
    #[default]
    Celsius,
    Fahrenheit,
}

/// A (canned) weather lookup.
struct Weather;

#[async_trait]
impl TypedTool for Weather {
    type Args = WeatherArgs;
    const NAME: &'static str = "weather";
    const DESCRIPTION: &'static str = "The current temperature in a city";

    async fn run(&self, _ctx: ToolContext, args: WeatherArgs) -> Result<String, ToolError> {
        let celsius = match args.city.as_str() {
            "Paris" => 18.0,
            "Oslo" => 4.0,
            other => return Err(ToolError::Failed(format!("no station in {other}"))),
        };
        Ok(match args.unit {
            Unit::Celsius => format!("{celsius:.0} °C in {}", args.city),
            Unit::Fahrenheit => format!("{:.0} °F in {}", celsius * 9.0 / 5.0 + 32.0, args.city),
        })
    }
}

/// Step 1 calls the tool three times (a good call, arguments the schema refuses, a call the tool
/// itself fails); step 2 calls it once more; step 3 answers with the last result.
const SCRIPT: &str = r#"{"turns": [
  {"text": "Checking the weather.",
   "tool_calls": [
     {"id": "c1", "name": "weather", "arguments": {"city": "Paris", "unit": "fahrenheit"}},
     {"id": "c2", "name": "weather", "arguments": {"city": "Oslo", "unit": "kelvin"}},
     {"id": "c3", "name": "weather", "arguments": {"city": "Atlantis"}}
   ]},
  {"tool_calls": [{"id": "c4", "name": "weather", "arguments": {"city": "Oslo"}}]},
  {"text": "It is {{last_tool_result}}."}
]}"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let agent = Agent::builder()
        .model(ScriptedModel::from_json_str(SCRIPT, "custom_tool")?)
        .tool(Arc::new(Weather))
        .build();

    // The schema offered to the model, derived from `WeatherArgs`.
    let spec = &agent.config().tools[0];
    let unit_enum = &spec.parameters["$defs"]["Unit"]["enum"];
    println!(
        "tool offered to the model: {}, required {}, unit one of {unit_enum}",
        spec.name, spec.parameters["required"]
    );
    assert_eq!(spec.name, "weather");
    assert_eq!(spec.parameters["required"], serde_json::json!(["city"]));
    assert_eq!(*unit_enum, serde_json::json!(["celsius", "fahrenheit"]));

    let out = agent.run("s1", "How warm is it?").await?;
    let mut results = Vec::new();
    for step in out.steps() {
        for r in step.tool_results {
            let status = if r.is_error() { "error" } else { "ok" };
            println!(
                "  {} {status:<5} {}",
                r.tool_call_id,
                r.content.replace('\n', " ")
            );
            results.push((r.tool_call_id.as_str(), r.is_error(), r.content.as_str()));
        }
    }
    let answer = out.result.final_text().unwrap_or_default();
    println!("answer: {answer}");

    assert_eq!(results.len(), 4);
    assert_eq!(results[0], ("c1", false, "64 °F in Paris"));
    assert!(
        results[1].1 && results[1].2.contains("kelvin"),
        "{results:?}"
    );
    assert_eq!(results[2], ("c3", true, "no station in Atlantis"));
    assert_eq!(results[3], ("c4", false, "4 °C in Oslo"));
    assert_eq!(answer, "It is 4 °C in Oslo.");
    Ok(())
}
