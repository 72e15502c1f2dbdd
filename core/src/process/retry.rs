//! The retry decision (R-EXT-3): a plain function of the typed
//! error, recorded by name, resolved by name on replay — the design of Observing's decider
//! ([`DeciderRef`](crate::react::DeciderRef)) applied to the inner machine's retry rows.

use std::borrow::Cow;

use crate::error::{ErrorKind, ModelError};
use crate::named_fn::named_fn;

/// Whether a failed attempt is worth retrying (R-EXT-3): a plain function, so it stays pure
/// and replaceable. It sees the typed error and `attempt`, the failed attempt's number among
/// the step's attempts on its current model, from 1 (1 + the retries already made).
///
/// It is asked about a provider error (`transport_error`), a stalled stream and a passed
/// attempt deadline (both `timeout` errors). The policy's `max_retries` still bounds the
/// retries of a step whatever it answers (R-IN-6), and a context overflow is never retried
/// as it is (it is compacted, R-IN-2), so it is never asked about one.
pub type RetryDecider = fn(&ModelError, u32) -> bool;

/// The name [`default_retry_decider`] is recorded under.
pub const DEFAULT_RETRY_DECIDER: &str = "default";

/// The default retry decision (R-IN-2): the error's kind is retryable
/// ([`ErrorKind::retryable`](crate::error::ErrorKind::retryable): rate limits, overload,
/// server errors, connection failures, timeouts, incomplete streams), whatever the attempt;
/// and a `malformed_response` (a garbled chunk, a proxy's page in place of the stream) is
/// retried too — the step itself retries one at most once: a second malformed answer in the
/// same step fails it at once, since a dialect the client cannot read comes back the same.
pub fn default_retry_decider(error: &ModelError, attempt: u32) -> bool {
    let _ = attempt;
    error.retryable() || error.kind == ErrorKind::MalformedResponse
}

/// A retry decision function together with the name it is recorded under (R-EXT-3).
///
/// As with [`DeciderRef`](crate::react::DeciderRef), a configuration (and the header of a
/// trace) records the function by name only: it serializes as that string. Deserializing
/// resolves the name against the built-in functions ([`DEFAULT_RETRY_DECIDER`] only); any
/// other name comes back *unresolved* — it keeps its name but has no function — until a
/// [`RetryDeciderRegistry`] resolves it ([`RetryPolicy::resolve_decider`]; trace replay does
/// this and fails with a typed error when the name is not registered, never falling back to
/// another function).
///
/// [`RetryPolicy::resolve_decider`]: crate::process::RetryPolicy::resolve_decider
///
/// ```
/// use agentloop_core::process::{RetryDeciderRef, RetryDeciderRegistry};
/// use agentloop_core::{ErrorKind, ModelError};
/// fn never(_: &ModelError, _: u32) -> bool { false }
/// let d = RetryDeciderRef::new("never", never);
/// assert_eq!(serde_json::to_string(&d).unwrap(), r#""never""#);
/// assert!(!d.decide(&ModelError::new(ErrorKind::RateLimited, "429"), 1));
/// let back: RetryDeciderRef = serde_json::from_str(r#""never""#).unwrap();
/// assert!(!back.is_resolved());
/// let registry = RetryDeciderRegistry::new().with("never", never);
/// assert!(registry.resolve(&back).unwrap().is_resolved());
/// assert!(RetryDeciderRegistry::new().resolve(&back).is_err());
/// ```
#[derive(Clone)]
pub struct RetryDeciderRef {
    // A `Cow`: the default (and any `&'static str` name) costs no allocation in the
    // configuration every idle session keeps (R-PERF memory budget).
    name: Cow<'static, str>,
    f: Option<RetryDecider>,
}

impl RetryDeciderRef {
    /// `f`, recorded as `name`. Register the same pair in the registry used for replay
    /// ([`DeciderRegistry::with_retry`](crate::react::DeciderRegistry::with_retry)). Name
    /// your own function anything but [`DEFAULT_RETRY_DECIDER`]: that name is not written
    /// into configurations, and replay resolves it to the built-in rule.
    pub fn new(name: impl Into<Cow<'static, str>>, f: RetryDecider) -> Self {
        RetryDeciderRef {
            name: name.into(),
            f: Some(f),
        }
    }

    /// Whether this is the built-in default (by name).
    pub fn is_default(&self) -> bool {
        self.name == DEFAULT_RETRY_DECIDER
    }

    /// Decides. An unresolved reference (a configuration deserialized with a name nothing
    /// resolved) decides like [`default_retry_decider`]; resolve it first wherever that
    /// difference matters, as replay does.
    pub fn decide(&self, error: &ModelError, attempt: u32) -> bool {
        self.f.unwrap_or(default_retry_decider)(error, attempt)
    }
}

impl Default for RetryDeciderRef {
    fn default() -> Self {
        RetryDeciderRef::new(DEFAULT_RETRY_DECIDER, default_retry_decider)
    }
}

/// A retry decider name no registry entry matches.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown retry decider `{name}`: no retry decision function is registered under that name \
     (registered: {}); register it in the registry used for replay",
    .known.join(", ")
)]
pub struct UnknownRetryDecider {
    /// The missing name.
    pub name: String,
    /// The names the registry has.
    pub known: Vec<String>,
}

/// Retry decision functions by name (R-EXT-3), for rebuilding a recorded configuration: replay
/// looks the trace header's `step.retry.decider` up here (it is part of the
/// [`DeciderRegistry`](crate::react::DeciderRegistry) replay takes). Always holds
/// [`DEFAULT_RETRY_DECIDER`].
#[derive(Clone, Debug)]
pub struct RetryDeciderRegistry {
    deciders: std::collections::BTreeMap<String, RetryDecider>,
}

named_fn!(
    RetryDeciderRef(impl Into<Cow<'static, str>>),
    RetryDeciderRegistry(RetryDecider),
    UnknownRetryDecider,
    RetryDecider
);

impl RetryDeciderRegistry {
    /// A registry with the built-in [`DEFAULT_RETRY_DECIDER`].
    pub fn new() -> Self {
        let mut deciders = std::collections::BTreeMap::new();
        deciders.insert(
            DEFAULT_RETRY_DECIDER.to_string(),
            default_retry_decider as RetryDecider,
        );
        RetryDeciderRegistry { deciders }
    }

    /// Registers `f` under `name`; returns the function it replaces, if any.
    pub fn register(&mut self, name: impl Into<String>, f: RetryDecider) -> Option<RetryDecider> {
        self.deciders.insert(name.into(), f)
    }
}
