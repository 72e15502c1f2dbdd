//! Named decision functions (R-OUT-3) and retry deciders (R-EXT-3): references compare by
//! name, registries take a reference's function, and resolving keeps the name.

use agentloop_core::process::{RetryDeciderRef, RetryDeciderRegistry};
use agentloop_core::react::{default_decider, DeciderRef, DeciderRegistry, Decision, Observation};
use agentloop_core::ModelError;

fn stop(_: &Observation) -> Decision {
    Decision::Stop
}

fn never(_: &ModelError, _: u32) -> bool {
    false
}

fn always(_: &ModelError, _: u32) -> bool {
    true
}

#[test]
fn r_out_3_decider_refs_compare_by_name_and_registries_take_their_function() {
    assert_eq!(
        DeciderRef::new("a", stop),
        DeciderRef::new("a", default_decider)
    );
    assert_ne!(DeciderRef::new("a", stop), DeciderRef::new("b", stop));
    let mine = DeciderRef::new("mine", stop);
    assert!(mine.function().is_some());
    let registry = DeciderRegistry::new().with_ref(&mine);
    assert!(registry.names().contains(&"mine".to_string()));
    let resolved = registry.resolve(&mine).expect("registered by with_ref");
    assert_eq!(resolved.name(), "mine");
    assert!(resolved.is_resolved());
    // The registry's retry deciders: registering reports what it replaces.
    let mut registry = DeciderRegistry::new();
    assert!(registry.register_retry("patient", never).is_none());
    assert!(registry.register_retry("patient", always).is_some());
    assert!(registry.retry().get("patient").is_some());
}

#[test]
fn r_ext_3_retry_decider_refs_compare_by_name_and_resolve_under_their_own_name() {
    assert_eq!(
        RetryDeciderRef::new("a", never),
        RetryDeciderRef::new("a", always)
    );
    assert_ne!(
        RetryDeciderRef::new("a", never),
        RetryDeciderRef::new("b", never)
    );
    let mine = RetryDeciderRef::new("mine", never);
    assert!(mine.function().is_some());
    let registry = RetryDeciderRegistry::new().with_ref(&mine);
    assert!(registry.names().contains(&"mine".to_string()));
    let resolved = registry.resolve(&mine).expect("registered by with_ref");
    assert_eq!(resolved.name(), "mine");
    assert!(resolved.is_resolved());
}
