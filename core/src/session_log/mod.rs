//! Pure functions over a session's entries: the pairing invariant ([`check`](mod@check)), its
//! repair ([`repair`](mod@repair)), and the model context rebuilt from entries
//! ([`history`](mod@history)).

pub mod check;
pub mod history;
pub mod pairing;
pub mod repair;

pub use crate::entry::{ContextSource, Repair};
pub use check::{check, duplicate_keys, pending, PendingCall, Violation};
pub use history::{committed_turns, history, next_model_call_index};
pub use pairing::pair_messages;
pub use repair::{repair, repair_with, Repaired};
