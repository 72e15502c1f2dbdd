//! Helpers shared by the CLI's crash tests.

/// The ids of the tool calls of the script at `path` (every call of these scripts names one).
pub fn script_calls(path: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("script");
    let script: serde_json::Value = serde_json::from_str(&text).expect("script JSON");
    let turns = script["turns"].as_array().cloned().unwrap_or_default();
    turns
        .iter()
        .flat_map(|t| t["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|c| c["id"].as_str().expect("scripted call id").to_string())
        .collect()
}
