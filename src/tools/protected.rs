//! Paths the built-in file tools never touch (the session stores' files), and those they
//! only read (instruction, agent and rule files).
//!
//! The stores' registry is the store crate's ([`agentloop_store::protected`], where it is
//! described): every store that lives on disk registers its location there when it opens,
//! a store never opened is recognized by location and content, and `read_file` and
//! `append_line` refuse a target inside one (see [`check`]). Its functions are re-exported
//! here, beside the tools that call them.
//!
//! A model that could write its own instructions or rules would change every later run: so
//! `append_line` (and any built-in tool that writes) refuses, by default,
//!
//! - a file named like the instructions coding agents read (`AGENTS.md`, `AGENT.md`,
//!   `CLAUDE.md`, `GEMINI.md`, `.cursorrules`, `.windsurfrules`, `copilot-instructions.md`;
//!   case ignored),
//! - a Markdown file in a directory named `agents` (where `--agent ID` finds `ID.md`),
//! - what is registered with [`protect_from_writes`]: a file, or a directory whose `*.md`
//!   files are agent instructions ([`protect_agents_dir`]). Loading an agent's
//!   instructions ([`crate::instructions::load`]) registers its directory; the command line
//!   registers `--agents-dir` and the `--tool-rules` file.
//!
//! `read_file` refuses the last two as well ([`check_read`]): an agent's instructions and the
//! rules are the run's configuration, which the model has in its prompt already or must not
//! read to evade (a `--tool-rules` policy); instruction files found by name stay readable.
//!
//! A program opts out with [`AgentBuilder::allow_instruction_writes`]
//! (`--allow-instruction-writes` on the command line); [`check_write`] and [`check_read`] are
//! the checks.
//!
//! [`AgentBuilder::allow_instruction_writes`]: crate::runtime::AgentBuilder::allow_instruction_writes
//!
//! # Example
//!
//! ```
//! use agentloop::tools::protected;
//!
//! let secrets = std::env::temp_dir().join("agentloop-doc-protected");
//! std::fs::create_dir_all(&secrets)?;
//! protected::protect(&secrets);
//! let target = secrets.canonicalize()?.join("key.txt");
//! assert!(protected::check("key.txt", &target).is_err());
//! # Ok::<(), std::io::Error>(())
//! ```

#[cfg(any(
    feature = "file-store",
    feature = "sqlite-store",
    feature = "postgres-store"
))]
pub use agentloop_store::protected::protect_store;
pub use agentloop_store::protected::{check, protect, protect_file_family};

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A location the file tools may read but not write.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum ReadOnly {
    /// A file (or a directory and everything under it).
    Path(PathBuf),
    /// A directory of agent instructions: its `*.md` files.
    AgentsDir(PathBuf),
}

static READ_ONLY: Mutex<BTreeSet<ReadOnly>> = Mutex::new(BTreeSet::new());

/// The names of the instruction files coding agents read, lower case.
const INSTRUCTION_FILE_NAMES: [&str; 7] = [
    "agents.md",
    "agent.md",
    "claude.md",
    "gemini.md",
    ".cursorrules",
    ".windsurfrules",
    "copilot-instructions.md",
];

fn register(entry: ReadOnly) {
    if let Ok(mut set) = READ_ONLY.lock() {
        set.insert(entry);
    }
}

/// Makes `path` (a file, or a directory and everything under it) read-only to the built-in
/// file tools, unless the agent allows instruction writes.
pub fn protect_from_writes(path: impl AsRef<Path>) {
    register(ReadOnly::Path(absolute(path.as_ref())));
}

/// Makes the `*.md` files of the directory `dir` (agent instructions, `<dir>/<id>.md`)
/// read-only to the built-in file tools, unless the agent allows instruction writes.
pub fn protect_agents_dir(dir: impl AsRef<Path>) {
    register(ReadOnly::AgentsDir(absolute(dir.as_ref())));
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// `path` and its real location when it exists (the target a tool compares is canonical).
fn spellings(path: &Path) -> Vec<PathBuf> {
    let mut all = vec![path.to_path_buf()];
    if let Ok(real) = std::fs::canonicalize(path) {
        all.push(real);
    }
    all
}

/// Whether `target` is a Markdown file directly in `dir`.
fn markdown_in(target: &Path, dir: &Path) -> bool {
    target.parent() == Some(dir) && target.extension().is_some_and(|e| e == "md")
}

/// Refuses a write to `target` (a resolved, canonical path a tool is about to write) when it
/// is an instruction, agent or rule file (see the module docs); `requested` is the path as
/// the model wrote it, `allowed` the agent's
/// [`allow_instruction_writes`](crate::runtime::AgentBuilder::allow_instruction_writes)
/// ([`ToolContext::allow_instruction_writes`](super::ToolContext::allow_instruction_writes)).
pub fn check_write(requested: &str, target: &Path, allowed: bool) -> Result<(), String> {
    refuse_if(requested, target, allowed, true, "read-only")
}

/// Refuses a read of `target` (canonical) when it is an agent's instructions or a registered
/// rule or instructions file (the run's own configuration, which the model already has in its
/// prompt or must not learn to evade: a `--tool-rules` policy). Instruction files found by
/// name (`AGENTS.md`, ...) stay readable: coding agents are meant to read them. `allowed` as
/// for [`check_write`] lifts it.
pub fn check_read(requested: &str, target: &Path, allowed: bool) -> Result<(), String> {
    refuse_if(requested, target, allowed, false, "off-limits")
}

fn refuse_if(
    requested: &str,
    target: &Path,
    allowed: bool,
    by_name: bool,
    verdict: &str,
) -> Result<(), String> {
    if allowed {
        return Ok(());
    }
    match protected_kind(target, by_name) {
        Some(what) => Err(format!(
            "`{requested}` is {what}: {verdict} to the file tools (the agent does not allow \
             instruction writes)"
        )),
        None => Ok(()),
    }
}

/// What `target` is among the protected instruction, agent and rule files, if one;
/// instruction files recognized by name only when `by_name`.
fn protected_kind(target: &Path, by_name: bool) -> Option<&'static str> {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if by_name && INSTRUCTION_FILE_NAMES.contains(&name.as_str()) {
        return Some("an instruction file");
    }
    if target.parent().is_some_and(|dir| {
        dir.file_name().is_some_and(|n| n == "agents") && markdown_in(target, dir)
    }) {
        return Some("an agent's instructions");
    }
    let entries: Vec<ReadOnly> = match READ_ONLY.lock() {
        Ok(set) => set.iter().cloned().collect(),
        Err(poisoned) => poisoned.into_inner().iter().cloned().collect(),
    };
    entries.into_iter().find_map(|entry| match entry {
        ReadOnly::Path(path) if spellings(&path).iter().any(|p| target.starts_with(p)) => {
            Some("a rule or instructions file")
        }
        ReadOnly::AgentsDir(dir) if spellings(&dir).iter().any(|d| markdown_in(target, d)) => {
            Some("an agent's instructions")
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::{check_read, check_write, protect_agents_dir, protect_from_writes};

    /// Instruction files are refused by name, agent instructions and rule files by where they
    /// are registered; the opt-in lifts it; other files are writable.
    #[test]
    fn instructions_and_rules_are_read_only_unless_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("prompts")).unwrap();
        std::fs::write(root.join("rules.json"), "[]").unwrap();
        protect_agents_dir(root.join("prompts"));
        protect_from_writes(root.join("rules.json"));
        for refused in [
            "AGENTS.md",
            "sub/claude.md",
            ".cursorrules",
            "agents/a.md",
            "prompts/new.md",
            "rules.json",
        ] {
            let e = check_write(refused, &root.join(refused), false).unwrap_err();
            assert!(e.contains("read-only to the file tools"), "{refused}: {e}");
            assert!(check_write(refused, &root.join(refused), true).is_ok());
        }
        for free in [
            "notes.md",
            "agents/a.txt",
            "prompts/sub/x.md",
            "rules.json.bak",
        ] {
            assert!(check_write(free, &root.join(free), false).is_ok(), "{free}");
            assert!(check_read(free, &root.join(free), false).is_ok(), "{free}");
        }
        // Reads: the agents' instructions and the registered rules are refused, instruction
        // files found by name are not (coding agents read them).
        for refused in ["agents/a.md", "prompts/new.md", "rules.json"] {
            let e = check_read(refused, &root.join(refused), false).unwrap_err();
            assert!(e.contains("off-limits to the file tools"), "{refused}: {e}");
            assert!(check_read(refused, &root.join(refused), true).is_ok());
        }
        for readable in ["AGENTS.md", "sub/claude.md", ".cursorrules"] {
            assert!(check_read(readable, &root.join(readable), false).is_ok());
        }
    }

    /// A library user's `FileStore` is off limits to the built-in tools as soon as it opens,
    /// even when the tool root is the store directory itself.
    #[cfg(all(feature = "file-store", feature = "builtin-tools"))]
    #[tokio::test]
    async fn an_opened_file_store_is_refused_to_read_file_and_append_line() {
        use crate::tools::{append_line::AppendLine, read_file::ReadFile, Tool, ToolContext};
        use serde_json::json;
        let dir = tempfile::tempdir().unwrap();
        let _store = crate::store::FileStore::open(dir.path().join("store")).unwrap();
        std::fs::write(dir.path().join("store/s.jsonl"), "x\n").unwrap();
        std::fs::write(dir.path().join("free.txt"), "free").unwrap();
        for root in [dir.path().to_path_buf(), dir.path().join("store")] {
            let ctx = ToolContext::for_test(root.clone(), "c");
            let e = ReadFile
                .call(
                    ctx.clone(),
                    json!({"path": dir.path().join("store/s.jsonl")}),
                )
                .await
                .unwrap_err()
                .to_string();
            assert!(e.contains("session store"), "{e}");
            let e = AppendLine
                .call(
                    ctx.clone(),
                    json!({"path": dir.path().join("store/t.jsonl"), "line": "y"}),
                )
                .await
                .unwrap_err()
                .to_string();
            assert!(e.contains("session store"), "{e}");
        }
        assert_eq!(
            std::fs::read_to_string(dir.path().join("store/s.jsonl")).unwrap(),
            "x\n"
        );
        assert!(!dir.path().join("store/t.jsonl").exists());
        let ctx = ToolContext::for_test(dir.path(), "c");
        let free = ReadFile.call(ctx, json!({"path": "free.txt"})).await;
        assert_eq!(free.unwrap(), "free");
    }
}
