//! Agent instructions loaded by agent id: a directory holds one Markdown file per
//! agent, `<dir>/<agent id>.md`; the agent's system prompt is composed from it
//! ([`build_system_prompt`]). The composed prompt is the run configuration's `system`, so the
//! trace header records the text a run was given and a replay needs no file.
//!
//! Bad input is a typed [`InstructionsError`]: an id that is not a plain name (no path may leave
//! the directory), a missing file, a symbolic link, FIFO or other non-regular file (never
//! opened in a way that blocks), a file over [`MAX_INSTRUCTIONS_BYTES`], text that is not UTF-8.
//!
//! Loading from a directory makes its `*.md` files read-only to the model's file tools (see
//! [`crate::tools::protected`]): a model that appended to its own instructions would change
//! every later run.
//!
//! ```
//! use agentloop::instructions::{agents, build_system_prompt, load};
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("reviewer.md"), "You review Rust code.\n").unwrap();
//! let text = load(dir.path(), "reviewer").unwrap();
//! assert_eq!(build_system_prompt(None, &text), "You review Rust code.");
//! assert!(load(dir.path(), "../etc/passwd").is_err());
//! assert_eq!(agents(dir.path()).unwrap(), ["reviewer"]);
//! ```

use std::io::Read;
use std::path::{Path, PathBuf};

use agentloop_store::regular_file::{open_regular, FileKind, OpenError};

/// The largest instructions file read, in bytes.
pub const MAX_INSTRUCTIONS_BYTES: u64 = 256 * 1024;

/// The longest agent id, in characters.
pub const MAX_AGENT_ID_CHARS: usize = 64;

/// Why an agent's instructions could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InstructionsError {
    /// The id is not a plain name: 1 to 64 of `A-Z a-z 0-9 _ -`, and not starting with `-`.
    #[error(
        "agent id {id:?} is not a plain name (1 to {MAX_AGENT_ID_CHARS} of A-Z a-z 0-9 _ -, \
         not starting with -)"
    )]
    BadId {
        /// The id given.
        id: String,
    },
    /// No instructions file for the agent.
    #[error("no instructions for agent {id:?}: {} does not exist", path.display())]
    NotFound {
        /// The agent.
        id: String,
        /// The file looked for.
        path: PathBuf,
    },
    /// The path is a link, a directory, a FIFO, a device...
    #[error("{} is {kind}, not a regular file", path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is.
        kind: FileKind,
    },
    /// The file is over [`MAX_INSTRUCTIONS_BYTES`].
    #[error("{} has more than {MAX_INSTRUCTIONS_BYTES} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The file is not UTF-8 text.
    #[error("{} is not UTF-8 text", path.display())]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// Reading failed.
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// Loads `agent_id`'s instructions from the directory `dir`: the file `<dir>/<agent id>.md`
/// (see the module docs for what is refused). The directory's instructions become read-only
/// to the file tools ([`crate::tools::protected::protect_agents_dir`]).
pub fn load(dir: impl AsRef<Path>, agent_id: &str) -> Result<String, InstructionsError> {
    let dir = dir.as_ref();
    let path = path_of(dir, agent_id)?;
    crate::tools::protected::protect_agents_dir(dir);
    let file = match open_regular(&path, std::fs::OpenOptions::new().read(true)) {
        Ok(f) => f,
        Err(OpenError::NotRegular(kind)) => {
            return Err(InstructionsError::NotRegular { path, kind })
        }
        Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(InstructionsError::NotFound {
                id: agent_id.to_string(),
                path,
            })
        }
        Err(OpenError::Io(source)) => return Err(InstructionsError::Io { path, source }),
    };
    let mut bytes = Vec::new();
    if let Err(source) = file
        .take(MAX_INSTRUCTIONS_BYTES + 1)
        .read_to_end(&mut bytes)
    {
        return Err(InstructionsError::Io { path, source });
    }
    if bytes.len() as u64 > MAX_INSTRUCTIONS_BYTES {
        return Err(InstructionsError::TooLarge { path });
    }
    String::from_utf8(bytes).map_err(|_| InstructionsError::NotText { path })
}

/// The ids of the agents the directory `dir` has instructions for, sorted (files `*.md` whose
/// stem is a plain name).
pub fn agents(dir: impl AsRef<Path>) -> Result<Vec<String>, InstructionsError> {
    let dir = dir.as_ref();
    let entries = std::fs::read_dir(dir).map_err(|source| InstructionsError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut ids: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id = name.strip_suffix(".md")?;
            is_plain_id(id).then(|| id.to_string())
        })
        .collect();
    ids.sort();
    Ok(ids)
}

/// The file in `dir` that holds `agent_id`'s instructions, if the id is a plain name.
fn path_of(dir: &Path, agent_id: &str) -> Result<PathBuf, InstructionsError> {
    if !is_plain_id(agent_id) {
        return Err(InstructionsError::BadId {
            id: agent_id.to_string(),
        });
    }
    Ok(dir.join(format!("{agent_id}.md")))
}

/// Whether `id` is a plain agent name (no path can hide in it).
fn is_plain_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_AGENT_ID_CHARS
        && !id.starts_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The system prompt of an agent: its instructions, trimmed, after `base` (a system prompt the
/// run already has) with a blank line between them.
pub fn build_system_prompt(base: Option<&str>, instructions: &str) -> String {
    let instructions = instructions.trim();
    match base.map(str::trim).filter(|b| !b.is_empty()) {
        Some(base) if instructions.is_empty() => base.to_string(),
        Some(base) => format!("{base}\n\n{instructions}"),
        None => instructions.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &[u8])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, bytes) in files {
            std::fs::write(dir.path().join(name), bytes).expect("write");
        }
        dir
    }

    #[test]
    fn seed_002_loads_by_id_and_composes_after_the_base_prompt() {
        let dir = dir_with(&[("coder.md", b"\n  Write Rust.  \n"), ("notes.txt", b"x")]);
        let d = dir.path();
        let text = load(d, "coder").expect("loaded");
        assert_eq!(build_system_prompt(None, &text), "Write Rust.");
        assert_eq!(
            build_system_prompt(Some("You are careful."), &text),
            "You are careful.\n\nWrite Rust."
        );
        assert_eq!(build_system_prompt(Some("Base"), "  "), "Base");
        assert_eq!(agents(d).expect("listed"), ["coder"]);
        assert!(matches!(
            load(d, "reviewer"),
            Err(InstructionsError::NotFound { id, .. }) if id == "reviewer"
        ));
    }

    #[test]
    fn seed_002_ids_cannot_name_a_path() {
        let d = Path::new("agents");
        for id in [
            "",
            "../secret",
            "a/b",
            "a.b",
            "-rf",
            ".hidden",
            &"x".repeat(65),
        ] {
            assert!(
                matches!(load(d, id), Err(InstructionsError::BadId { .. })),
                "{id:?}"
            );
        }
        assert!(path_of(d, "ok_Name-2").is_ok());
    }

    #[test]
    fn seed_002_refuses_big_binary_and_special_files() {
        let big = vec![b'a'; MAX_INSTRUCTIONS_BYTES as usize + 1];
        let at_limit = vec![b'a'; MAX_INSTRUCTIONS_BYTES as usize];
        let dir = dir_with(&[
            ("big.md", &big),
            ("full.md", &at_limit),
            ("bin.md", b"\xff\xfe"),
        ]);
        let d = dir.path();
        assert!(matches!(
            load(d, "big"),
            Err(InstructionsError::TooLarge { .. })
        ));
        assert_eq!(load(d, "full").expect("at the limit").len(), at_limit.len());
        assert!(matches!(
            load(d, "bin"),
            Err(InstructionsError::NotText { .. })
        ));
        std::fs::create_dir(dir.path().join("dir.md")).expect("dir");
        assert!(matches!(
            load(d, "dir"),
            Err(InstructionsError::NotRegular {
                kind: FileKind::Directory,
                ..
            })
        ));
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(dir.path().join("full.md"), dir.path().join("link.md"))
                .expect("symlink");
            assert!(matches!(
                load(d, "link"),
                Err(InstructionsError::NotRegular {
                    kind: FileKind::SymbolicLink,
                    ..
                })
            ));
            let fifo = dir.path().join("pipe.md");
            let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("path");
            // SAFETY: a valid NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            // Refused without blocking (no writer ever opens the FIFO).
            assert!(matches!(
                load(d, "pipe"),
                Err(InstructionsError::NotRegular {
                    kind: FileKind::Fifo,
                    ..
                })
            ));
        }
    }
}
