//! The typed run error: `kind` is the serialized `type` tag of every variant,
//! and only a model failure has a model error.

use agentloop_core::agent_event::Outcome;
use agentloop_core::error::{ErrorKind, ModelError, RunError};

fn every_variant() -> Vec<RunError> {
    vec![
        RunError::Model {
            error: ModelError::new(ErrorKind::Authentication, "bad key"),
        },
        RunError::StoreWrite {
            message: "disk full".into(),
        },
        RunError::EndWrite {
            message: "disk full".into(),
            reached: Some(Outcome::Completed),
        },
        RunError::Compaction {
            message: "summary failed".into(),
        },
        RunError::OutputInvalid {
            message: "missing field x".into(),
        },
        RunError::NoResult,
    ]
}

#[test]
fn issue12_kind_is_the_serialized_type_of_each_variant() {
    let kinds: Vec<&str> = every_variant().iter().map(RunError::kind).collect();
    assert_eq!(
        kinds,
        [
            "model",
            "store_write",
            "end_write",
            "compaction",
            "output_invalid",
            "no_result"
        ]
    );
    for e in every_variant() {
        let json = serde_json::to_value(&e).expect("serializes");
        assert_eq!(json["type"], e.kind(), "{e:?}");
        let back: RunError = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, e);
    }
}

#[test]
fn issue12_only_a_model_failure_has_a_model_error() {
    let errors = every_variant();
    assert_eq!(
        errors[0].model_error(),
        Some(&ModelError::new(ErrorKind::Authentication, "bad key"))
    );
    for e in &errors[1..] {
        assert_eq!(e.model_error(), None, "{e:?}");
    }
}
