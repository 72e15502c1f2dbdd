//! The runtime's check of a typed final answer (structured output): the run's
//! [`OutputSpec`] schema is compiled once per process (shared by schema with the tools'
//! argument schemas, [`crate::tools::ArgumentSchemas`]); when a model stream ends, the message as the
//! machine assembled it is read as JSON ([`output_json`]) and validated, and the verdict rides
//! on the `done` event into the machine (and the trace), where Observing decides on it.

// Public only with the feature `driver-kit` (the module is private without it).
#![cfg_attr(not(feature = "driver-kit"), allow(unreachable_pub))]

use agentloop_core::output::{output_json, OutputRejected, OutputSpec};
use agentloop_core::tool_check::SchemaViolation;

use crate::event::Event;
use crate::react::Run;

/// A run's compiled output schema: the check of a typed final answer.
pub struct OutputCheck {
    validator: Option<std::sync::Arc<crate::tools::Validator>>,
}

impl OutputCheck {
    /// The check for `spec` (`None`: the run asks for no typed answer). A schema the validator
    /// cannot compile only checks that the answer is JSON (logged).
    pub fn new(spec: Option<&OutputSpec>) -> Option<Self> {
        let spec = spec?;
        let validator = crate::tools::compile_shared(&spec.name, &spec.schema);
        Some(OutputCheck { validator })
    }

    /// The verdict on answer `text`: `None` when it is JSON that matches the schema.
    pub fn verdict(&self, text: &str) -> Option<OutputRejected> {
        let value = match output_json(text) {
            Ok(v) => v,
            Err(e) => {
                return OutputRejected::new([SchemaViolation {
                    path: String::new(),
                    reason: e,
                }])
            }
        };
        let validator = self.validator.as_ref()?;
        OutputRejected::new(crate::tools::violations(validator, &value))
    }

    /// `event` with the verdict on the run's current message when it is the `done` of a
    /// message without tool calls (a final answer); any other event unchanged.
    pub fn annotate(&self, event: Event, run: &Run) -> Event {
        match event {
            Event::Done {
                attempt,
                rejected_arguments,
                output_rejected: None,
            } => {
                let output_rejected = run
                    .partial()
                    .filter(|m| m.tool_calls.is_empty())
                    .and_then(|m| self.verdict(&m.text));
                Event::Done {
                    attempt,
                    rejected_arguments,
                    output_rejected,
                }
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check() -> OutputCheck {
        OutputCheck::new(Some(&OutputSpec::new(
            "Point",
            json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}),
        )))
        .expect("a spec")
    }

    #[cfg(feature = "json-schema")]
    #[test]
    fn answers_are_checked_to_be_json_matching_the_schema() {
        let c = check();
        assert_eq!(c.verdict(r#"{"x": 1}"#), None);
        assert_eq!(c.verdict("```json\n{\"x\": 2}\n```"), None);
        let not_json = c.verdict("five").expect("rejected");
        assert!(not_json.violations[0].reason.starts_with("not JSON"));
        let wrong = c.verdict(r#"{"x": "one"}"#).expect("rejected");
        assert_eq!(wrong.violations[0].path, "/x");
        let missing = c.verdict("{}").expect("rejected");
        assert!(
            missing.violations[0].reason.contains("\"x\""),
            "{missing:?}"
        );
        assert!(OutputCheck::new(None).is_none());
    }
}
