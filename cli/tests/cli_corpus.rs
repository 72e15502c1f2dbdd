//! `agentloop replay DIR|FILES…` (a corpus replayed in parallel, its summary and `--json`, the
//! what-if over a corpus) as a real child process, on a temporary directory of freshly
//! recorded traces: one tampered to diverge, one corrupt, one symbolic link (not followed).

use std::path::Path;
use std::process::Command;

mod support;
use support::{agentloop, stderr, stdout};

/// A scripted run: one calculator call, then the answer (two steps).
const SCRIPT: &str = r#"{"turns":[{"text":"calc","tool_calls":[{"name":"calculator","arguments":{"expression":"2+3"}}]},{"text":"The answer is {{last_tool_result}}."}]}"#;

/// Records `n` traces into `dir/corpus` (`t0.jsonl`, `sub/t1.jsonl`, …).
fn record(dir: &Path, n: usize) {
    std::fs::write(dir.join("s.json"), SCRIPT).expect("script");
    std::fs::create_dir_all(dir.join("corpus/sub")).expect("mkdir");
    for i in 0..n {
        let t = if i % 2 == 0 {
            format!("corpus/t{i}.jsonl")
        } else {
            format!("corpus/sub/t{i}.jsonl")
        };
        let run = agentloop(dir, &["run", "--script", "s.json", "--trace", &t, "go"]);
        assert!(run.status.success(), "{}", stderr(&run));
    }
}

/// `from` with the answer changed in its effects only: the replay diverges there.
fn tamper(from: &Path, to: &Path) {
    let text = std::fs::read_to_string(from).expect("read");
    let out: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with(r#"{"kind":"effect""#) {
                l.replace("er is 5.", "er is 6.")
            } else {
                l.to_string()
            }
        })
        .collect();
    std::fs::write(to, out.join("\n") + "\n").expect("write");
}

#[test]
fn a_directory_replays_in_parallel_with_counts_exit_codes_and_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    record(d, 4);
    let all = agentloop(d, &["replay", "corpus"]);
    assert_eq!(all.status.code(), Some(0), "{}", stdout(&all));
    assert_eq!(
        stdout(&all),
        "replayed 4 traces: 4 identical, 0 diverged, 0 unreadable\n"
    );
    // The single-file form is unchanged.
    let one = agentloop(d, &["replay", "corpus/t0.jsonl"]);
    assert_eq!(one.status.code(), Some(0));
    assert!(
        stdout(&one).starts_with("replay identical: "),
        "{}",
        stdout(&one)
    );

    // A link is not followed; a timing sidecar is not a trace.
    #[cfg(unix)]
    std::os::unix::fs::symlink("/nonexistent/elsewhere.jsonl", d.join("corpus/link.jsonl"))
        .expect("symlink");
    std::fs::write(d.join("corpus/t0.times.jsonl"), "not a trace\n").expect("sidecar");
    let still = agentloop(d, &["replay", "corpus"]);
    assert_eq!(still.status.code(), Some(0), "{}", stdout(&still));

    tamper(
        &d.join("corpus/t0.jsonl"),
        &d.join("corpus/sub/tampered.jsonl"),
    );
    let diverged = agentloop(d, &["replay", "corpus"]);
    assert_eq!(diverged.status.code(), Some(1), "{}", stdout(&diverged));
    let s = stdout(&diverged);
    assert!(
        s.starts_with("replayed 5 traces: 4 identical, 1 diverged, 0 unreadable\n"),
        "{s}"
    );
    assert!(
        s.contains("diverged: corpus/sub/tampered.jsonl: at index 95 (in the step of input "),
        "{s}"
    );

    std::fs::write(d.join("corpus/corrupt.jsonl"), "{\"kind\":\"header\"\n").expect("write");
    let bad = agentloop(d, &["replay", "corpus", "--json"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stdout(&bad));
    let v: serde_json::Value = serde_json::from_slice(&bad.stdout).expect("json");
    assert_eq!(v["traces"], 6);
    assert_eq!(v["identical"], 4);
    assert_eq!(v["diverged"], 1);
    assert_eq!(v["unreadable"], 1);
    let files = v["files"].as_array().expect("files");
    assert_eq!(files.len(), 6);
    let corrupt = &files[0];
    assert_eq!(corrupt["path"], "corpus/corrupt.jsonl");
    assert_eq!(corrupt["status"], "unreadable");
    assert!(
        corrupt["error"]
            .as_str()
            .is_some_and(|e| e.contains("invalid trace record")),
        "{corrupt}"
    );
    let tampered = files
        .iter()
        .find(|f| f["status"] == "diverged")
        .expect("diverged entry");
    assert_eq!(tampered["index"], 95);
    assert!(tampered["input"].is_u64(), "{tampered}");
    assert!(files
        .iter()
        .filter(|f| f["status"] == "identical")
        .all(|f| f["records"].as_u64().is_some_and(|n| n > 0)));

    // A mix of files and a directory; a file that is missing is unreadable, not fatal.
    let mix = agentloop(
        d,
        &["replay", "corpus/t0.jsonl", "corpus/sub", "missing.jsonl"],
    );
    assert_eq!(mix.status.code(), Some(2));
    let s = stdout(&mix);
    assert!(
        s.starts_with("replayed 5 traces: 3 identical, 1 diverged, 1 unreadable\n"),
        "{s}"
    );
    assert!(s.contains("unreadable: missing.jsonl: "), "{s}");

    // No traces at all is bad input.
    std::fs::create_dir(d.join("empty")).expect("mkdir");
    let none = agentloop(d, &["replay", "empty"]);
    assert_eq!(none.status.code(), Some(2));
    assert!(stderr(&none).contains("no *.jsonl traces found"));
}

#[cfg(unix)]
#[test]
fn a_fifo_among_the_files_is_refused_not_read_forever() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    record(d, 1);
    let fifo = d.join("corpus/pipe.jsonl");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        return; // no mkfifo here
    }
    // Walked: a FIFO is not a regular file and is skipped.
    let walked = agentloop(d, &["replay", "corpus"]);
    assert_eq!(walked.status.code(), Some(0), "{}", stdout(&walked));
    // Named: refused with a typed error.
    let named = agentloop(d, &["replay", "corpus/t0.jsonl", "corpus/pipe.jsonl"]);
    assert_eq!(named.status.code(), Some(2));
    assert!(
        stdout(&named).contains("unreadable: corpus/pipe.jsonl"),
        "{}",
        stdout(&named)
    );
}

#[test]
fn a_what_if_over_a_directory_counts_the_runs_that_change_and_how() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    record(d, 3);
    let same = agentloop(d, &["replay", "corpus", "--set", "max_steps=20"]);
    assert_eq!(same.status.code(), Some(0), "{}", stdout(&same));
    assert!(
        stdout(&same).starts_with(
            "what-if replay of 3 traces with max_steps=20: 0 changed, 3 unchanged, 0 unreadable\n"
        ),
        "{}",
        stdout(&same)
    );

    let w = agentloop(d, &["replay", "corpus", "--set", "max_steps=1"]);
    assert_eq!(w.status.code(), Some(1), "{}", stderr(&w));
    let s = stdout(&w);
    assert!(
        s.starts_with(
            "what-if replay of 3 traces with max_steps=1: 3 changed, 0 unchanged, 0 unreadable\n"
        ),
        "{s}"
    );
    assert!(s.contains("totals: steps 6 → 3, tool calls 3 → 3"), "{s}");
    assert!(
        s.contains("outcome completed (final_answer) → completed (max_steps): 3 runs"),
        "{s}"
    );
    assert!(
        s.contains("changed: corpus/t0.jsonl: first differs at index 10; outcome completed (final_answer) → completed (max_steps); steps 2 → 1"),
        "{s}"
    );

    let j = agentloop(d, &["replay", "corpus", "--set", "max_steps=1", "--json"]);
    assert_eq!(j.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&j.stdout).expect("json");
    assert_eq!(v["settings"], serde_json::json!(["max_steps=1"]));
    assert_eq!(v["changed"], 3);
    assert_eq!(
        v["totals"]["steps"],
        serde_json::json!({"before": 6, "after": 3})
    );
    assert_eq!(v["outcome_changes"][0]["runs"], 3);
    let f = &v["files"][0];
    assert_eq!(f["status"], "changed");
    assert_eq!(f["before"]["steps"], 2);
    assert_eq!(f["after"]["outcome"], "completed (max_steps)");

    // A bad setting is refused before any trace is read.
    let bad = agentloop(d, &["replay", "corpus", "--set", "max_steps=0"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("bad value `0` for `max_steps`"),
        "{}",
        stderr(&bad)
    );
}

/// Reads CSV as RFC 4180 writes it (quoted fields, doubled quotes, newlines inside quotes).
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let (mut rows, mut row, mut field) = (Vec::new(), Vec::new(), String::new());
    let (mut quoted, mut chars) = (false, text.chars().peekable());
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    rows
}

#[test]
fn export_writes_one_row_per_run_step_tool_call_and_record_and_csv_round_trips() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    record(d, 3);
    // A fourth run whose answer holds a comma, quotes and a newline.
    let awkward = "Done, \"quoted\"\nand a second line";
    let script = serde_json::json!({"turns": [{"text": awkward}]});
    std::fs::write(d.join("awkward.json"), script.to_string()).expect("script");
    let run = agentloop(
        d,
        &[
            "run",
            "--script",
            "awkward.json",
            "--trace",
            "corpus/awkward.jsonl",
            "go",
        ],
    );
    assert!(run.status.success(), "{}", stderr(&run));

    for (table, rows) in [("runs", 4), ("steps", 7), ("tool_calls", 3)] {
        let o = agentloop(
            d,
            &["trace", "export", "corpus", "--table", table, "-o", "t.csv"],
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(
            stdout(&o).contains(&format!("({rows} rows from 4 traces)")),
            "{table}: {}",
            stdout(&o)
        );
        let csv = parse_csv(&std::fs::read_to_string(d.join("t.csv")).expect("csv"));
        assert_eq!(csv.len(), rows + 1, "{table}: {csv:?}");
        assert!(
            csv.iter().all(|r| r.len() == csv[0].len()),
            "{table}: {csv:?}"
        );
    }
    let csv = parse_csv(&std::fs::read_to_string(d.join("t.csv")).expect("csv"));
    assert_eq!(csv[0][5], "tool");
    assert_eq!(csv[1][5], "calculator");
    assert_eq!(csv[1][6], "completed");
    assert_eq!(csv[1][7], r#"{"expression":"2+3"}"#);
    // The tool's duration, from the timing sidecar `run --trace` wrote next to the trace.
    assert_eq!(csv[0][9], "latency_ms");
    assert!(
        csv[1..].iter().all(|r| r[9].parse::<u64>().is_ok()),
        "{csv:?}"
    );
    assert!(d.join("corpus/t0.times.jsonl").is_file());

    let o = agentloop(
        d,
        &[
            "trace", "export", "corpus", "--table", "steps", "-o", "s.csv",
        ],
    );
    assert_eq!(o.status.code(), Some(0));
    let csv = parse_csv(&std::fs::read_to_string(d.join("s.csv")).expect("csv"));
    let text = csv[0]
        .iter()
        .position(|c| c == "text")
        .expect("text column");
    let ttft = csv[0].iter().position(|c| c == "ttft_ms").expect("ttft");
    assert!(
        csv[1..].iter().all(|r| r[ttft].parse::<u64>().is_ok()),
        "{csv:?}"
    );
    assert_eq!(csv[1][0], "corpus/awkward.jsonl");
    assert_eq!(csv[1][text], awkward);

    // JSONL: one object per row; events: one row per record.
    let o = agentloop(
        d,
        &[
            "trace", "export", "corpus", "--table", "events", "--format", "jsonl", "-o", "e.jsonl",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let records: usize = (0..3)
        .map(|i| {
            let t = if i % 2 == 0 {
                format!("corpus/t{i}.jsonl")
            } else {
                format!("corpus/sub/t{i}.jsonl")
            };
            std::fs::read_to_string(d.join(t))
                .expect("trace")
                .lines()
                .count()
                - 1
        })
        .sum::<usize>()
        + std::fs::read_to_string(d.join("corpus/awkward.jsonl"))
            .expect("trace")
            .lines()
            .count()
        - 1;
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(d.join("e.jsonl"))
        .expect("jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    assert_eq!(lines.len(), records);
    assert_eq!(lines[0]["kind"], "input");
    assert_eq!(lines[0]["name"], "start");
    assert!(lines[0]["latency_ms"].is_null() || lines[0].get("latency_ms").is_none());

    // A corrupt trace is reported (exit 2); the others are still written. The table may not
    // overwrite a trace it reads.
    std::fs::write(d.join("corpus/corrupt.jsonl"), "not json\n").expect("write");
    let o = agentloop(
        d,
        &[
            "trace", "export", "corpus", "--table", "runs", "-o", "r.csv",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stdout(&o).contains("(4 rows from 4 traces; 1 unreadable)"),
        "{}",
        stdout(&o)
    );
    assert!(
        stderr(&o).contains("corpus/corrupt.jsonl"),
        "{}",
        stderr(&o)
    );
    let o = agentloop(
        d,
        &[
            "trace",
            "export",
            "corpus/t0.jsonl",
            "--table",
            "runs",
            "-o",
            "corpus/t0.jsonl",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("would overwrite a trace"),
        "{}",
        stderr(&o)
    );
}
