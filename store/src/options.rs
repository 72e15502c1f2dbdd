//! What every durable store shares: session ids and durability modes.

use super::StoreError;

/// Longest accepted session id, in bytes (file names are limited to 255 bytes).
pub const MAX_SESSION_ID_LEN: usize = 200;

/// When appended entries reach the disk. Every store has both modes; how each makes an
/// append durable is in its docs (the file store: `fdatasync`; SQLite:
/// `synchronous = FULL` in WAL mode; PostgreSQL: `synchronous_commit = on`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Durable before each append returns (default).
    #[default]
    Sync,
    /// Written at once (a killed process loses nothing), made durable every `every` appends
    /// (and on sync, close and drop). Loss window on OS (or database server) crash: up to
    /// `every - 1` acknowledged entries, always a suffix.
    Batched {
        /// Appends per fsync (0 is treated as 1).
        every: u32,
    },
}

impl std::str::FromStr for Durability {
    type Err = String;

    /// `sync`, `batched` (fsync every 64 appends) or `batched:N`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            None if s == "sync" => Ok(Durability::Sync),
            None if s == "batched" => Ok(Durability::Batched { every: 64 }),
            Some(("batched", n)) => match n.parse::<u32>() {
                Ok(every) if every > 0 => Ok(Durability::Batched { every }),
                _ => Err(format!(
                    "invalid batch size {n:?} (expected a positive integer)"
                )),
            },
            _ => Err(format!(
                "invalid durability {s:?} (expected `sync`, `batched` or `batched:N`)"
            )),
        }
    }
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Durability::Sync => f.write_str("sync"),
            Durability::Batched { every } => write!(f, "batched:{every}"),
        }
    }
}

/// Checks that `session` can name a session file: non-empty, at most
/// [`MAX_SESSION_ID_LEN`] bytes, no path separators, no `..`, no leading `.`, no control
/// characters.
pub fn validate_session_id(session: &str) -> Result<(), StoreError> {
    let reason = if session.is_empty() {
        Some("must not be empty")
    } else if session.len() > MAX_SESSION_ID_LEN {
        Some("longer than 200 bytes")
    } else if session.contains(['/', '\\']) {
        Some("must not contain path separators")
    } else if session.contains("..") {
        Some("must not contain `..`")
    } else if session.starts_with('.') {
        Some("must not start with `.`")
    } else if session.chars().any(char::is_control) {
        Some("must not contain control characters")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(StoreError::InvalidSession {
            session: session.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durability_parses_and_prints() {
        for (text, d) in [
            ("sync", Durability::Sync),
            ("batched", Durability::Batched { every: 64 }),
            ("batched:8", Durability::Batched { every: 8 }),
        ] {
            assert_eq!(text.parse::<Durability>(), Ok(d));
        }
        assert_eq!(
            Durability::Batched { every: 8 }.to_string().parse(),
            Ok(Durability::Batched { every: 8 })
        );
        for bad in ["", "fsync", "batched:0", "batched:x", "sync:1"] {
            assert!(bad.parse::<Durability>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn session_ids_are_validated() {
        for bad in ["", "a/b", "a\\b", "..", "x..y", ".hidden", "a\nb"] {
            assert!(
                matches!(
                    validate_session_id(bad),
                    Err(StoreError::InvalidSession { .. })
                ),
                "{bad:?} accepted"
            );
        }
        assert!(validate_session_id(&"x".repeat(201)).is_err());
        for good in ["s1", "2024-01-01T10:00", "my_session.v2"] {
            assert!(validate_session_id(good).is_ok(), "{good:?} rejected");
        }
    }
}
