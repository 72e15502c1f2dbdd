//! `agentloop trace view` in a real browser: a fresh recording rendered to HTML, loaded in
//! headless Chromium, and the DOM checked after the page's script ran (the lanes, bars and
//! spans exist only once it has); a screenshot; and a trace whose tool result and file name
//! carry markup, which must show as text and never run.
//!
//! Chromium is Debian's `chromium` (`apt-get install chromium`; `AGENTLOOP_CHROMIUM` names
//! another binary). With `CI` set a missing browser fails the test; otherwise it is skipped
//! with the reason printed.
#![allow(clippy::disallowed_methods)] // the browser gets a wall-clock deadline

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{agentloop, stderr};

/// Records `t.jsonl` in `dir`: the default scripted model answers with one calculator call.
fn record(dir: &Path) {
    let run = agentloop(dir, &["run", "--trace", "t.jsonl", "What is 2+3?"]);
    assert!(run.status.success(), "{}", stderr(&run));
}

/// The browser, or `None` (after saying why) when it is missing outside CI.
fn chromium() -> Option<PathBuf> {
    let named = std::env::var_os("AGENTLOOP_CHROMIUM");
    let candidates: Vec<PathBuf> = match &named {
        Some(p) => vec![PathBuf::from(p)],
        None => std::env::var_os("PATH")
            .map(|path| {
                std::env::split_paths(&path)
                    .flat_map(|d| [d.join("chromium"), d.join("chromium-browser")])
                    .collect()
            })
            .unwrap_or_default(),
    };
    if let Some(found) = candidates.into_iter().find(|p| p.is_file()) {
        return Some(found);
    }
    let reason = match named {
        Some(p) => format!("AGENTLOOP_CHROMIUM={} is not a file", p.to_string_lossy()),
        None => "no chromium on PATH (apt-get install chromium, or set AGENTLOOP_CHROMIUM)".into(),
    };
    if std::env::var_os("CI").is_some() {
        panic!("CI is set and the browser test cannot run: {reason}");
    }
    eprintln!("skipped: {reason}");
    None
}

/// Runs headless Chromium with `args` then `url` in a fresh profile under `dir`, killed after
/// two minutes; returns what it printed. Output goes to files, so a large DOM dump cannot
/// fill a pipe nobody reads.
fn browse(chromium: &Path, dir: &Path, args: &[&str], url: &str) -> String {
    let run = tempfile::tempdir_in(dir).expect("browser dir");
    let out = run.path().join("stdout");
    let err = run.path().join("stderr");
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!(
            "--user-data-dir={}",
            run.path().join("profile").display()
        ))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait for chromium").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish in 120 s: {}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::read_to_string(&out).expect("chromium output")
}

fn url(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// Every (lane id, state) the trace's transitions name, and every tool call id.
fn states_and_calls(trace: &str) -> (BTreeSet<(String, String)>, BTreeSet<String>) {
    let mut states = BTreeSet::new();
    let mut calls = BTreeSet::new();
    for line in trace.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("trace line");
        if v["kind"] != "transition" {
            continue;
        }
        let t = &v["transition"];
        let machine = t["machine"].as_str().expect("machine");
        let lane = match t["call"].as_str() {
            Some(call) => {
                calls.insert(call.to_string());
                format!("tool_call:{call}")
            }
            None => machine.to_string(),
        };
        for key in ["from", "to"] {
            states.insert((lane.clone(), t[key].as_str().expect("state").to_string()));
        }
    }
    (states, calls)
}

#[test]
fn view_renders_every_lane_state_and_call_in_chromium() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    record(dir.path());
    let view = agentloop(dir.path(), &["trace", "view", "t.jsonl", "-o", "t.html"]);
    assert!(view.status.success(), "{}", stderr(&view));
    let html = dir.path().join("t.html");
    let page = std::fs::read_to_string(&html).expect("page");
    // Outside the data (whose tool schemas name json-schema.org), nothing is fetched.
    let (before, rest) = page.split_once(r#"id="trace-data">"#).expect("data");
    let (_, after) = rest.split_once("</script>").expect("data end");
    for external in ["http://", "https://", "src=", "href=", "@import", "url("] {
        assert!(
            !before.contains(external) && !after.contains(external),
            "the page refers to {external}"
        );
    }

    let dom = browse(&chromium, dir.path(), &["--dump-dom"], &url(&html));
    assert!(dom.contains(r#"data-rendered="true""#), "{dom}");
    for lane in ["react", "process"] {
        assert!(dom.contains(&format!(r#"data-lane="{lane}""#)), "{dom}");
    }
    assert!(
        dom.contains(
            r#"data-lane="tool_call:call_0_0" data-machine="tool_call" data-call="call_0_0" data-tool="calculator""#
        ),
        "{dom}"
    );
    let trace = std::fs::read_to_string(dir.path().join("t.jsonl")).expect("trace");
    let (states, calls) = states_and_calls(&trace);
    assert!(states.len() > 10, "{states:?}");
    for (lane, state) in &states {
        assert!(
            dom.contains(&format!(r#"data-bar="{lane}:{state}""#)),
            "no bar for {lane} {state}"
        );
    }
    assert_eq!(calls, BTreeSet::from(["call_0_0".to_string()]));
    for call in &calls {
        assert!(
            dom.contains(&format!(r#"data-span="tool_call:{call}""#)),
            "no span for {call}"
        );
    }
    // The first-chunk deadline of each model call, and the observable events.
    assert!(dom.contains(r#"data-timer="first_chunk""#), "{dom}");
    assert!(dom.contains(r#"data-kind="tool_start""#), "{dom}");

    let png = dir.path().join("t.png");
    browse(
        &chromium,
        dir.path(),
        &[
            &format!("--screenshot={}", png.display()),
            "--window-size=1400,900",
        ],
        &url(&html),
    );
    let bytes = std::fs::read(&png).expect("screenshot written");
    assert!(bytes.len() > 1000, "{} bytes", bytes.len());
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
}

#[test]
fn markup_in_a_trace_shows_as_text_and_never_runs() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    record(dir.path());
    // The calculator's result becomes markup that would run if the page parsed it as HTML.
    let evil = "</script><script>document.body.setAttribute('data-pwned','script')</script>\
                <img src=x onerror=document.body.setAttribute('data-pwned','img')><!--";
    let trace = std::fs::read_to_string(dir.path().join("t.jsonl")).expect("trace");
    let mut finished = None;
    let lines: Vec<String> = trace
        .lines()
        .map(|line| {
            let mut v: serde_json::Value = serde_json::from_str(line).expect("line");
            if v["kind"] == "input" && v["event"]["type"] == "tool_finished" {
                v["event"]["content"] = evil.into();
                finished = v["index"].as_u64();
            }
            v.to_string()
        })
        .collect();
    let finished = finished.expect("a tool_finished input");
    let name = "<img src=x onerror=document.body.setAttribute('data-pwned','name')>.jsonl";
    std::fs::write(dir.path().join(name), lines.join("\n") + "\n").expect("write");
    let view = agentloop(dir.path(), &["trace", "view", name, "-o", "evil.html"]);
    assert!(view.status.success(), "{}", stderr(&view));
    let page = std::fs::read_to_string(dir.path().join("evil.html")).expect("page");
    assert!(!page.contains("<img"), "markup reached the page unescaped");
    assert_eq!(
        page.matches("</script>").count(),
        2,
        "only the page's own scripts"
    );

    // Opened with the poisoned record selected: its JSON is in the detail pane, as text.
    let dom = browse(
        &chromium,
        dir.path(),
        &["--dump-dom"],
        &format!("{}#r{finished}", url(&dir.path().join("evil.html"))),
    );
    assert!(dom.contains(r#"data-rendered="true""#), "{dom}");
    assert!(!dom.contains("data-pwned="), "injected markup ran: {dom}");
    assert!(!dom.contains("<img"), "an img element was created: {dom}");
    assert!(
        dom.contains(&format!(r#"data-record="{finished}""#)),
        "the record was not selected: {dom}"
    );
    assert!(
        dom.contains("&lt;img src=x onerror=document.body.setAttribute('data-pwned','img')&gt;"),
        "the result does not show as text: {dom}"
    );
    assert!(
        dom.contains(
            "&lt;img src=x onerror=document.body.setAttribute('data-pwned','name')&gt;.jsonl"
        ),
        "the file name does not show as text: {dom}"
    );
}

#[test]
fn view_writes_next_to_the_trace_and_refuses_an_unwritable_page_with_exit_2() {
    // (An unreadable or unsupported trace: `cli_trace.rs`, with `show` and `diff`.)
    let dir = tempfile::tempdir().expect("tempdir");
    record(dir.path());
    let unwritable = agentloop(
        dir.path(),
        &["trace", "view", "t.jsonl", "-o", "no/such/dir/t.html"],
    );
    assert_eq!(unwritable.status.code(), Some(2));
    assert!(
        stderr(&unwritable).contains("no/such/dir/t.html"),
        "{}",
        stderr(&unwritable)
    );
    let default = agentloop(dir.path(), &["trace", "view", "t.jsonl"]);
    assert!(default.status.success(), "{}", stderr(&default));
    assert!(dir.path().join("t.html").is_file());
}
