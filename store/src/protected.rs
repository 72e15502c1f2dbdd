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
//! A store this process never opened is off limits too (a run with `--store sqlite:work.db`
//! must not reach the sessions another run keeps in `.agentloop/sessions`), recognized
//! whatever the run's store by where it lies and by what it holds:
//!
//! - the default store: `$AGENTLOOP_STORE` as it is set when the tool runs, and a
//!   `.agentloop/sessions` directory anywhere;
//! - a session file anywhere (a file whose first line is a session record,
//!   `{"v":1,"seq":1,"entry":...`), its lock `<session>.lock` and its `<session>.jsonl.new`,
//!   and every file of a directory holding a session file beside its lock (a file store's
//!   directory: no session can be forged there by creating a file);
//! - a SQLite database anywhere (a file that starts with SQLite's header; agentloop's are not
//!   told apart from others), its `-wal`, `-shm` and `-journal` files and its `.locks/`
//!   directory, and any file named `sessions.db…` (the name agentloop's examples give one).
//!
//! A PostgreSQL store keeps nothing on disk.
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
/// protected location: registered, or recognized as a store by location or content (see the
/// module docs); `requested` is the path as the model wrote it. The built-in file tools call
/// it; a custom tool that opens files for the model should too.
pub fn check(requested: &str, target: &Path) -> Result<(), String> {
    let mut guards: Vec<Guard> = match PROTECTED.lock() {
        Ok(set) => set.iter().cloned().collect(),
        // A poisoned registry still holds every location registered before the panic.
        Err(poisoned) => poisoned.into_inner().iter().cloned().collect(),
    };
    guards.push(Guard::Dir(absolute(&default_store_dir())));
    let store = match guards.iter().find(|g| covers(g, target)) {
        Some(Guard::Dir(dir)) | Some(Guard::FileFamily(dir)) => Some(dir.clone()),
        None => recognized_store(target),
    };
    match store {
        Some(dir) => Err(format!(
            "`{requested}` is in the session store `{}`: the file tools may not touch it",
            dir.display()
        )),
        None => Ok(()),
    }
}

/// The default store directory as it is now: `$AGENTLOOP_STORE` if set, else
/// `.agentloop/sessions` (only a directory counts here: a store URL in the variable is
/// registered by whoever opens it).
fn default_store_dir() -> PathBuf {
    match std::env::var_os("AGENTLOOP_STORE") {
        Some(dir) if !dir.is_empty() && !dir.as_encoded_bytes().contains(&b':') => {
            PathBuf::from(dir)
        }
        _ => PathBuf::from(".agentloop").join("sessions"),
    }
}

/// The most directory entries [`recognized_store`] looks at to tell a store directory.
const MAX_SCANNED_ENTRIES: usize = 4096;

/// The store `target` (canonical) lies in when it is recognized by location or content,
/// though never registered: the location of that store.
fn recognized_store(target: &Path) -> Option<PathBuf> {
    let names: Vec<&std::ffi::OsStr> = target.iter().collect();
    if let Some(i) = names
        .windows(2)
        .position(|w| w[0] == ".agentloop" && w[1] == "sessions")
    {
        return Some(names[..i + 2].iter().collect());
    }
    let parent = target.parent()?;
    let name = target.file_name()?.to_str().unwrap_or_default();
    if name.starts_with("sessions.db") || is_sqlite(target) {
        return Some(target.to_path_buf());
    }
    for suffix in ["-wal", "-shm", "-journal"] {
        if let Some(db) = name.strip_suffix(suffix) {
            if is_sqlite(&parent.join(db)) {
                return Some(parent.join(db));
            }
        }
    }
    let dir_name = parent
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if let (Some(db), Some(grandparent)) = (dir_name.strip_suffix(".locks"), parent.parent()) {
        if dir_name.starts_with("sessions.db") || is_sqlite(&grandparent.join(db)) {
            return Some(grandparent.join(db));
        }
    }
    let session = name
        .strip_suffix(".jsonl.new")
        .or_else(|| name.strip_suffix(".jsonl"))
        .or_else(|| name.strip_suffix(".lock"));
    let own = session.is_some_and(|s| is_session_file(&parent.join(format!("{s}.jsonl"))));
    if own || is_session_file(target) || is_store_dir(parent) {
        return Some(parent.to_path_buf());
    }
    None
}

/// Whether `dir` holds a session file beside its lock (a file store's directory).
fn is_store_dir(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries
        .take(MAX_SCANNED_ENTRIES)
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name();
            let stem = name.to_str()?.strip_suffix(".lock")?;
            Some(dir.join(format!("{stem}.jsonl")))
        })
        .any(|session| is_session_file(&session))
}

/// The first bytes of the regular file at `path` (none for anything else: never opened in a
/// way that blocks).
fn head(path: &Path, n: usize) -> Vec<u8> {
    use std::io::Read;
    let mut bytes = Vec::new();
    if let Ok(file) =
        crate::regular_file::open_regular(path, std::fs::OpenOptions::new().read(true))
    {
        let _ = file.take(n as u64).read_to_end(&mut bytes);
    }
    bytes
}

/// Whether `path` is a SQLite database (its header).
fn is_sqlite(path: &Path) -> bool {
    head(path, 16) == b"SQLite format 3\0"
}

/// Whether `path` is an agentloop session file: its first line a session record
/// (`{"v":N,"seq":N,"entry":...`).
fn is_session_file(path: &Path) -> bool {
    let bytes = head(path, 64);
    let Some(rest) = bytes.strip_prefix(b"{\"v\":") else {
        return false;
    };
    let digits = |b: &[u8]| b.iter().take_while(|c| c.is_ascii_digit()).count();
    let n = digits(rest);
    let Some(rest) = rest[n..].strip_prefix(b",\"seq\":") else {
        return false;
    };
    let m = digits(rest);
    n > 0 && m > 0 && rest[m..].starts_with(b",\"entry\":\"")
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

    /// Stores this process never registered are recognized by where they lie and what they
    /// hold; files beside them are not.
    #[test]
    fn unregistered_stores_are_recognized_by_location_and_content() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let path = root.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        };
        let session = br#"{"v":1,"seq":1,"entry":"user","content":"hi"}
"#;
        write("store/s.jsonl", session);
        write("store/s.lock", b"");
        write("copied.jsonl", session);
        write("db/work.sqlite", b"SQLite format 3\0rest");
        write("notes.jsonl", br#"{"v":1,"seq":"x"}"#);
        write("plain.txt", b"text");
        for covered in [
            ".agentloop/sessions/new.jsonl",
            "a/.agentloop/sessions/x/y",
            "store/s.jsonl",
            "store/s.lock",
            "store/s.jsonl.new",
            "store/forged.jsonl",
            "copied.jsonl",
            "db/work.sqlite",
            "db/work.sqlite-wal",
            "db/work.sqlite-journal",
            "db/work.sqlite.locks/s.lock",
            "sessions.db",
            "sub/sessions.db-shm",
        ] {
            assert!(recognized_store(&root.join(covered)).is_some(), "{covered}");
        }
        for free in [
            "notes.jsonl",
            "plain.txt",
            "new.txt",
            "db/other.txt",
            ".agentloop/notes",
            "sessions/x.jsonl",
        ] {
            assert!(recognized_store(&root.join(free)).is_none(), "{free}");
        }
        let e = check("store/forged.jsonl", &root.join("store/forged.jsonl")).unwrap_err();
        assert!(e.contains("session store"), "{e}");
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
