//! Paths the built-in file tools never touch: the session stores' files.
//!
//! With the defaults (tool root `.`, store `./.agentloop/sessions`) the store lies under the
//! tool root, and a model's `read_file` could read other sessions and its `append_line` forge
//! or corrupt them, its own live session included. So every store that lives on disk
//! registers its location here when it opens (`FileStore::open` its directory,
//! the SQLite store its database file), agentloop's command line registers the configured
//! store even when it opens none ([`protect_store`]), and a library user can add more
//! ([`protect`]). `read_file` and
//! `append_line` refuse a target inside a protected directory, a protected file, or a sibling
//! whose name extends a protected file's (`sessions.db-wal`, `sessions.db.locks/s.lock`),
//! whatever their root: the check compares real locations, so neither `..` nor a symbolic
//! link reaches around it.
//!
//! The registry is process-wide and only grows (it holds each location once): a store's
//! files stay off limits after the store is dropped, which is what a later run in the same
//! process wants anyway.
//!
//! # Example
//!
//! ```
//! use agentloop_store::protected;
//!
//! let secrets = std::env::temp_dir().join("agentloop-doc-protected");
//! std::fs::create_dir_all(&secrets)?;
//! protected::protect(&secrets);
//! let target = secrets.canonicalize()?.join("key.txt");
//! assert!(protected::check("key.txt", &target).is_err());
//! # Ok::<(), std::io::Error>(())
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What a registered location covers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Guard {
    /// A directory and everything under it.
    Dir(PathBuf),
    /// A file and every sibling whose name starts with the file's name (a database and its
    /// journal, WAL, shared-memory file and lock directory).
    FileFamily(PathBuf),
}

static PROTECTED: Mutex<BTreeSet<Guard>> = Mutex::new(BTreeSet::new());

/// Absolute form of `path` (relative paths against the current directory), without touching
/// the file system beyond reading the current directory.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

fn register(guard: Guard) {
    if let Ok(mut set) = PROTECTED.lock() {
        set.insert(guard);
    }
}

/// Keeps the built-in file tools out of the directory `dir` and everything under it.
pub fn protect(dir: impl AsRef<Path>) {
    register(Guard::Dir(absolute(dir.as_ref())));
}

/// Keeps the built-in file tools off the file `file` and every sibling whose name starts with
/// its name (for a database: `-wal`, `-shm`, `-journal`, `.locks/`).
pub fn protect_file_family(file: impl AsRef<Path>) {
    register(Guard::FileFamily(absolute(file.as_ref())));
}

/// Registers the on-disk locations of the store `url` names (a store URL as
/// [`AnyStore::open`](crate::AnyStore::open) takes it; `None`: the default store, as
/// [`AnyStore::open_default`](crate::AnyStore::open_default) opens it): a file store's
/// directory, a SQLite database with its siblings (a PostgreSQL store has none, nor has a
/// value that names no store).
#[cfg(any(feature = "file", feature = "sqlite", feature = "postgres"))]
pub fn protect_store(url: Option<&str>) {
    use crate::StoreUrl;
    let url = match url {
        Some(url) => StoreUrl::parse(url).ok(),
        None => Some(StoreUrl::default_store()),
    };
    match url {
        Some(StoreUrl::Dir(dir)) => protect(dir),
        Some(StoreUrl::Sqlite(db)) => protect_file_family(db),
        _ => {}
    }
}

/// The real location of `path`: canonical if it exists; else its longest existing ancestor
/// made canonical, with the rest appended (a store directory not created yet).
fn real(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(canonical) = std::fs::canonicalize(at) {
            return rest.iter().rev().fold(canonical, |p, c| p.join(c));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Whether `target` (a resolved, canonical path) lies within `guard`.
fn covers(guard: &Guard, target: &Path) -> bool {
    match guard {
        Guard::Dir(dir) => [dir.clone(), real(dir)]
            .iter()
            .any(|d| target.starts_with(d)),
        Guard::FileFamily(file) => [file.clone(), real(file)].iter().any(|f| {
            let (Some(parent), Some(name)) = (f.parent(), f.file_name()) else {
                return false;
            };
            let Ok(rest) = target.strip_prefix(parent) else {
                return false;
            };
            rest.components().next().is_some_and(|first| {
                first
                    .as_os_str()
                    .as_encoded_bytes()
                    .starts_with(name.as_encoded_bytes())
            })
        }),
    }
}

/// Refuses `target` (a resolved, canonical path the tool is about to open) when it is a
/// protected location; `requested` is the path as the model wrote it. The built-in file tools
/// call it; a custom tool that opens files for the model should too.
pub fn check(requested: &str, target: &Path) -> Result<(), String> {
    let guards: Vec<Guard> = match PROTECTED.lock() {
        Ok(set) => set.iter().cloned().collect(),
        // A poisoned registry still holds every location registered before the panic.
        Err(poisoned) => poisoned.into_inner().iter().cloned().collect(),
    };
    match guards.iter().find(|g| covers(g, target)) {
        Some(Guard::Dir(dir)) | Some(Guard::FileFamily(dir)) => Err(format!(
            "`{requested}` is in the session store `{}`: the file tools may not touch it",
            dir.display()
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_covers_everything_under_it_and_nothing_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        std::fs::create_dir(&store).unwrap();
        let store = std::fs::canonicalize(store).unwrap();
        let guard = Guard::Dir(store.clone());
        assert!(covers(&guard, &store));
        assert!(covers(&guard, &store.join("s.jsonl")));
        assert!(covers(&guard, &store.join("sub/s.lock")));
        assert!(!covers(&guard, &store.with_file_name("store2/s.jsonl")));
        assert!(!covers(&guard, &store.with_file_name("other.txt")));
    }

    #[test]
    fn a_file_family_covers_its_siblings_by_name_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let guard = Guard::FileFamily(root.join("sessions.db"));
        for covered in [
            "sessions.db",
            "sessions.db-wal",
            "sessions.db-shm",
            "sessions.db.locks/s.lock",
        ] {
            assert!(covers(&guard, &root.join(covered)), "{covered}");
        }
        for free in ["sessions.d", "notes.txt", "sub/sessions.db"] {
            assert!(!covers(&guard, &root.join(free)), "{free}");
        }
    }

    #[test]
    fn a_location_not_created_yet_is_covered_once_it_exists() {
        let dir = tempfile::tempdir().unwrap();
        // Registered through a relative-looking, not-yet-existing path under a real one.
        let guard = Guard::Dir(dir.path().join("later/sessions"));
        std::fs::create_dir_all(dir.path().join("later/sessions")).unwrap();
        let real_dir = std::fs::canonicalize(dir.path().join("later/sessions")).unwrap();
        assert!(covers(&guard, &real_dir.join("x.jsonl")));
    }
}
