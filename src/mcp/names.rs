//! Tool names the providers accept: OpenAI and Anthropic both require `^[a-zA-Z0-9_-]{1,64}$`
//! and refuse the whole request when one tool breaks it. An MCP server's tool whose name
//! (with the prefix) breaks the rule is skipped at connect, with a warning
//! ([`McpServer::skipped`](super::McpServer::skipped)), so one bad tool does not make every
//! model request fail.

/// The longest tool name the providers accept, in bytes.
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// Why a tool name is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InvalidToolName {
    /// The name is empty.
    #[error("the name is empty")]
    Empty,
    /// The name has a character outside `a-z A-Z 0-9 _ -`.
    #[error("the name has {found:?} at byte {at} (allowed: a-z A-Z 0-9 _ -)")]
    Character {
        /// The first such character.
        found: char,
        /// Its byte offset.
        at: usize,
    },
    /// The name is longer than [`MAX_TOOL_NAME_LEN`] bytes.
    #[error("the name is {len} bytes long (at most {MAX_TOOL_NAME_LEN})")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// An earlier tool of the same server has the same name.
    #[error("an earlier tool of the server has the same name")]
    Duplicate,
}

/// Checks `name` against the providers' rule `^[a-zA-Z0-9_-]{1,64}$`; the error says why it
/// is refused (e.g. `the name has '.' at byte 4 (allowed: a-z A-Z 0-9 _ -)`).
pub fn check_tool_name(name: &str) -> Result<(), String> {
    check(name).map_err(|e| e.to_string())
}

/// [`check_tool_name`], with the reason as a value.
pub(crate) fn check(name: &str) -> Result<(), InvalidToolName> {
    if name.is_empty() {
        return Err(InvalidToolName::Empty);
    }
    if let Some((at, found)) = name
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(InvalidToolName::Character { found, at });
    }
    if name.len() > MAX_TOOL_NAME_LEN {
        return Err(InvalidToolName::TooLong { len: name.len() });
    }
    Ok(())
}

/// `name` fit for a message: control characters escaped, cut after 64 characters (with its
/// length in bytes when cut).
pub(crate) fn shown(name: &str) -> String {
    let head: String = name.chars().take(MAX_TOOL_NAME_LEN).collect();
    let mut out = format!("{:?}", head);
    if head.len() < name.len() {
        out.push_str(&format!("… ({} bytes)", name.len()));
    }
    out
}

/// A tool of an MCP server that was not offered to the model.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkippedTool {
    /// The tool's name as the model would have seen it (with the prefix), quoted with control
    /// characters escaped, and cut after 64 characters.
    pub name: String,
    /// Why it was skipped (e.g. `the name is empty`, `an earlier tool of the server has the
    /// same name`).
    pub reason: String,
}

impl std::fmt::Display for SkippedTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tool {} skipped: {}", self.name, self.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_providers_rule() {
        assert_eq!(check_tool_name("get_time-2"), Ok(()));
        assert_eq!(check(&"a".repeat(64)), Ok(()));
        assert_eq!(
            check(&"a".repeat(65)),
            Err(InvalidToolName::TooLong { len: 65 })
        );
        assert_eq!(check(""), Err(InvalidToolName::Empty));
        assert_eq!(
            check_tool_name("tool.x"),
            Err("the name has '.' at byte 4 (allowed: a-z A-Z 0-9 _ -)".to_string())
        );
        for (name, found, at) in [
            ("a\0b", '\0', 1),
            ("\x1b[31m", '\x1b', 0),
            ("a\nb", '\n', 1),
            ("../x", '.', 0),
            ("a b", ' ', 1),
            ("tool.x", '.', 4),
            ("é", 'é', 0),
        ] {
            assert_eq!(
                check(name),
                Err(InvalidToolName::Character { found, at }),
                "{name:?}"
            );
        }
    }

    #[test]
    fn shown_names_are_escaped_and_cut() {
        assert_eq!(shown("a\nb"), "\"a\\nb\"");
        let long = "x".repeat(1_000_000);
        let s = shown(&long);
        assert!(s.len() < 100, "{s}");
        assert!(s.ends_with("(1000000 bytes)"), "{s}");
    }
}
