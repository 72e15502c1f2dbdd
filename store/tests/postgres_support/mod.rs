//! A throwaway PostgreSQL server for tests: `initdb` in a temporary directory, `pg_ctl start`
//! on 127.0.0.1 and a free port (trust authentication), stopped when dropped. Run as the
//! `postgres` user when the tests run as root (`initdb` refuses root).
//!
//! With `CI` set, missing PostgreSQL binaries fail the test; elsewhere the test is skipped
//! with a printed reason. Binaries: `$AGENTLOOP_PG_BIN`, else the newest
//! `/usr/lib/postgresql/<version>/bin` (Debian's `postgresql` package).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A running server.
pub struct PgServer {
    bin: PathBuf,
    dir: tempfile::TempDir,
    /// The TCP port on 127.0.0.1.
    pub port: u16,
}

fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("AGENTLOOP_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `program` (from the PostgreSQL bin dir) as the `postgres` user when we are root.
fn pg(bin: &Path, program: &str, args: &[&str]) -> Output {
    let exe = bin.join(program);
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&exe);
        c
    } else {
        Command::new(&exe)
    };
    cmd.args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()))
}

fn check(out: Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl PgServer {
    /// Starts a server, or returns `None` (after printing why) when PostgreSQL is not
    /// installed and `CI` is not set.
    pub fn start() -> Option<PgServer> {
        let Some(bin) = bin_dir() else {
            let reason = "PostgreSQL binaries not found (install Debian's `postgresql` \
                          package or set AGENTLOOP_PG_BIN)";
            if std::env::var_os("CI").is_some() {
                panic!("{reason}; required in CI");
            }
            eprintln!("skipped: {reason}");
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("agentloop-pg")
            .tempdir()
            .expect("temp dir");
        if is_root() {
            let out = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .output()
                .expect("chown");
            check(out, "chown");
        }
        let data = dir.path().join("data");
        let data_s = data.to_str().expect("utf-8 temp path");
        check(
            pg(
                &bin,
                "initdb",
                &[
                    "-D",
                    data_s,
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ],
            ),
            "initdb",
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let opts = format!(
            "-k {} -h 127.0.0.1 -p {port}",
            dir.path().to_str().expect("utf-8 temp path")
        );
        let log = dir.path().join("log");
        check(
            pg(
                &bin,
                "pg_ctl",
                &[
                    "-D",
                    data_s,
                    "-l",
                    log.to_str().expect("utf-8"),
                    "-o",
                    &opts,
                    "-w",
                    "start",
                ],
            ),
            "pg_ctl start",
        );
        Some(PgServer { bin, dir, port })
    }

    /// A URL of a new, empty database `name` on the server.
    pub fn database(&self, name: &str) -> String {
        let port = self.port.to_string();
        check(
            pg(
                &self.bin,
                "createdb",
                &["-h", "127.0.0.1", "-p", &port, "-U", "postgres", name],
            ),
            "createdb",
        );
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }
}

impl PgServer {
    fn psql_command(&self, db: &str, sql: &str) -> Command {
        let mut cmd = Command::new(self.bin.join("psql"));
        cmd.args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1"])
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .args(["-d", db, "-c", sql]);
        cmd
    }

    /// Runs `sql` in database `db` with `psql` and waits for it.
    pub fn psql(&self, db: &str, sql: &str) -> Output {
        self.psql_command(db, sql).output().expect("run psql")
    }

    /// Starts `psql` running `sql` in database `db` without waiting for it.
    pub fn psql_child(&self, db: &str, sql: &str) -> std::process::Child {
        self.psql_command(db, sql)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start psql")
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let _ = pg(
            &self.bin,
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap_or_default(),
                "-m",
                "immediate",
                "stop",
            ],
        );
    }
}
