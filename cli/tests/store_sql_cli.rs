//! The CLI on the SQL stores, as real child processes: `run --session s --store URL` answers,
//! then `sessions list|show|check|export` read the session back, a `resume` of the completed
//! session reports its last outcome, and a corrupt row is an error naming store, session and
//! seq. Once with `sqlite:PATH`, once with a PostgreSQL server this test starts (mandatory in
//! CI, see `store/tests/postgres_support`).

#[path = "../../store/tests/postgres_support/mod.rs"]
mod postgres_support;

use std::path::Path;
use std::process::Output;

mod support;

fn agentloop(dir: &Path, args: &[&str]) -> Output {
    support::command(dir, args)
        .env_remove("AGENTLOOP_STORE")
        .output()
        .expect("run agentloop")
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The same user journey on any store URL.
fn journey(dir: &Path, store: &str) {
    let run = agentloop(
        dir,
        &["run", "--session", "s", "--store", store, "What is 2+3?"],
    );
    assert!(run.status.success(), "{}", text(&run));
    assert!(
        String::from_utf8_lossy(&run.stdout).contains("The answer is 5."),
        "{}",
        text(&run)
    );

    let show = agentloop(dir, &["sessions", "show", "s", "--store", store]);
    assert!(show.status.success(), "{}", text(&show));
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(shown.contains("session s:"), "{shown}");
    assert!(shown.contains("completed"), "{shown}");
    assert!(shown.contains("calculator"), "{shown}");
    assert!(shown.contains("The answer is 5."), "{shown}");

    let list = agentloop(dir, &["sessions", "list", "--store", store]);
    assert!(list.status.success(), "{}", text(&list));
    assert!(
        String::from_utf8_lossy(&list.stdout)
            .lines()
            .any(|l| l.starts_with("s ") && l.contains("completed")),
        "{}",
        text(&list)
    );

    let check = agentloop(dir, &["sessions", "check", "s", "--store", store]);
    assert!(check.status.success(), "{}", text(&check));

    let export = agentloop(dir, &["sessions", "export", "s", "--store", store]);
    assert!(export.status.success(), "{}", text(&export));
    assert!(
        String::from_utf8_lossy(&export.stdout).starts_with(r#"{"v":1,"seq":1,"#),
        "{}",
        text(&export)
    );

    // A completed session has nothing to resume: exit 0 with its last outcome.
    let resume = agentloop(dir, &["resume", "s", "--store", store]);
    assert_eq!(resume.status.code(), Some(0), "{}", text(&resume));

    let missing = agentloop(dir, &["sessions", "show", "nope", "--store", store]);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("no session nope"),
        "{}",
        text(&missing)
    );
}

fn assert_corrupt_row_reported(dir: &Path, store: &str) {
    let check = agentloop(dir, &["sessions", "check", "s", "--store", store]);
    assert_eq!(check.status.code(), Some(2), "{}", text(&check));
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(
        err.contains("corrupt row") && err.contains("session s, seq 2"),
        "{}",
        text(&check)
    );
}

#[test]
fn sqlite_store_from_the_command_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("sessions.db");
    let store = format!("sqlite:{}", db.display());
    // Reading a database that is not there does not create it.
    let list = agentloop(dir.path(), &["sessions", "list", "--store", &store]);
    assert!(list.status.success(), "{}", text(&list));
    let show = agentloop(dir.path(), &["sessions", "show", "s", "--store", &store]);
    assert_eq!(show.status.code(), Some(2), "{}", text(&show));
    assert!(!db.exists(), "a read created the database");
    journey(dir.path(), &store);

    let conn = rusqlite::Connection::open(&db).expect("open database");
    conn.execute(
        "UPDATE entries SET record = '{not json' WHERE session = 's' AND seq = 2",
        [],
    )
    .expect("corrupt a row");
    assert_corrupt_row_reported(dir.path(), &store);
}

#[test]
fn postgres_store_from_the_command_line() {
    let Some(server) = postgres_support::PgServer::start() else {
        return;
    };
    let url = server.database("cli");
    let dir = tempfile::tempdir().expect("tempdir");
    journey(dir.path(), &url);

    // Another worker (psql here) holds session s2's advisory lock: `run` exits 2, "locked".
    let hold = format!(
        "SELECT pg_advisory_lock(hashtextextended('s2', {})); SELECT pg_sleep(30);",
        agentloop::store::POSTGRES_LOCK_SEED
    );
    let mut holder = server.psql_child("cli", &hold);
    let held = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted";
    let mut waited = 0;
    while String::from_utf8_lossy(&server.psql("cli", held).stdout).trim() != "1" {
        waited += 1;
        assert!(waited < 500, "psql never took the lock");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let locked = agentloop(
        dir.path(),
        &["run", "--session", "s2", "--store", &url, "What is 2+3?"],
    );
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(locked.status.code(), Some(2), "{}", text(&locked));
    assert!(
        String::from_utf8_lossy(&locked.stderr).contains("session s2 is locked"),
        "{}",
        text(&locked)
    );

    let out = server.psql(
        "cli",
        "UPDATE agentloop_entries SET record = '{not json' WHERE session = 's' AND seq = 2",
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_corrupt_row_reported(dir.path(), &url);
}
