//! Pure functions over a session's entries: the pairing invariant and its repair
//! ([`check`](mod@check)), and the model context rebuilt from entries ([`history`](mod@history)).

pub mod check;
pub mod history;

pub use check::{check, duplicate_keys, pending, repair, repair_with, PendingCall, Violation};
pub use history::{committed_turns, history, next_model_call_index};
