//! Everything the command prints goes through here, for two reasons:
//!
//! - **Text for a person is neutralized.** A model's answer, a tool's name, a `<title>` or
//!   `<status>`, an MCP server's description, a stored session: none of it may drive the
//!   terminal (an OSC 52 clipboard write, a title change, a cursor move that hides a line).
//!   [`text`] (and [`line`], for text that must stay on one line) writes ESC and the other C0
//!   and C1 control characters visibly, as `\x1b` or `\u{9b}`; newlines and tabs stay.
//!   Machine output (JSON) is not rewritten: JSON escapes the C0 controls itself, and
//!   [`json`] escapes what it does not (DEL and the C1 controls), so the value is unchanged.
//! - **A closed pipe ends the process quietly** (`agentloop trace schema | head -1`): Rust
//!   ignores SIGPIPE, so a write fails with `EPIPE` and `println!` would panic. Here the
//!   process ends as a Unix filter does, killed by SIGPIPE (status 141 in a shell), with
//!   nothing on stderr. Another write error (a full disk) is reported once, exit code 2.
//!
//! Input files are read as regular files with a size cap ([`INPUT_LIMIT`],
//! [`SMALL_INPUT_LIMIT`]; `regular_file`): a FIFO or `/dev/zero` is refused at once.

use std::borrow::Cow;
use std::io::Write;

/// The most bytes of a small input file: `--tool-rules`, `--output-schema` (1 MiB).
pub(crate) const SMALL_INPUT_LIMIT: u64 = 1 << 20;

/// The most bytes of a larger input file: `--script`, a capture for `decode`, a
/// conversation for `trace import` (64 MiB). Traces have no limit: they are read a line at
/// a time (and `trace view` streams them).
pub(crate) const INPUT_LIMIT: u64 = 64 << 20;

/// `s` with every control character but newline, tab and the carriage return of a `\r\n`
/// written visibly (`\x1b`, `\x07`, `\u{9b}`): safe to print for a person.
pub(crate) fn text(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// [`text`] that also writes newlines, tabs and carriage returns visibly (`\n`, `\t`,
/// `\r`): for a status line, a list entry, anything that must stay on one line.
pub(crate) fn line(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

/// Whether `c` is printed as an escape: a C0 control, DEL or a C1 control; newline and tab
/// too when `one_line`.
fn unsafe_char(c: char, one_line: bool) -> bool {
    match c {
        '\n' | '\t' => one_line,
        c => c.is_control(),
    }
}

fn escape(s: &str, one_line: bool) -> Cow<'_, str> {
    if !s.chars().any(|c| unsafe_char(c, one_line)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if !one_line && chars.peek() == Some(&'\n') => out.push('\r'),
            '\n' if one_line => out.push_str("\\n"),
            '\t' if one_line => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if unsafe_char(c, one_line) => {
                let n = u32::from(c);
                if n < 0x80 {
                    out.push_str(&format!("\\x{n:02x}"));
                } else {
                    out.push_str(&format!("\\u{{{n:x}}}"));
                }
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// JSON text with DEL and the C1 controls (which JSON leaves raw) written as `\u` escapes:
/// the same JSON value, nothing a terminal acts on. These characters can only occur inside
/// JSON strings, where the escape means the same character.
pub(crate) fn json(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| ('\u{7f}'..='\u{9f}').contains(&c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if ('\u{7f}'..='\u{9f}').contains(&c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Which stream a write went to.
#[derive(Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

/// Writes `s` as it is to stdout and flushes (see the module docs for errors). For text that
/// is already safe: machine output through [`json`], or lines built from [`text`] pieces and
/// the program's own escape sequences (colors, the status line).
pub(crate) fn stdout_raw(s: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        write_failed(Stream::Stdout, &e);
    }
}

/// [`stdout_raw`] for stderr.
pub(crate) fn stderr_raw(s: &str) {
    let mut err = std::io::stderr().lock();
    if let Err(e) = err.write_all(s.as_bytes()).and_then(|()| err.flush()) {
        write_failed(Stream::Stderr, &e);
    }
}

/// Ends the process after a failed write (see the module docs).
fn write_failed(stream: Stream, e: &std::io::Error) -> ! {
    if e.kind() != std::io::ErrorKind::BrokenPipe {
        if let Stream::Stdout = stream {
            let _ = writeln!(std::io::stderr(), "error: writing to stdout: {e}");
        }
        std::process::exit(2);
    }
    #[cfg(unix)]
    {
        // SAFETY: resetting SIGPIPE to its default action and raising it only ends the
        // process the way a write to a closed pipe ends a C program; no handler runs.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::raise(libc::SIGPIPE);
        }
    }
    std::process::exit(141)
}

/// Prints to stdout for a person: the formatted text through [`text`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::stdout_raw(&$crate::out::text(&format!($($arg)*)))
    };
}

/// [`out!`] with a newline.
macro_rules! outln {
    () => {
        $crate::out::stdout_raw("\n")
    };
    ($($arg:tt)*) => {
        $crate::out::stdout_raw(&format!("{}\n", $crate::out::text(&format!($($arg)*))))
    };
}

/// Prints a line to stderr for a person: the formatted text through [`text`].
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::out::stderr_raw(&format!("{}\n", $crate::out::text(&format!($($arg)*))))
    };
}

pub(crate) use {errln, out, outln};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_escapes_controls_and_keeps_newlines_and_tabs() {
        assert_eq!(text("plain\ttext\nnext"), "plain\ttext\nnext");
        assert!(matches!(text("plain"), Cow::Borrowed(_)));
        // OSC 52 (a clipboard write), a title change, CSI as the C1 character, DEL.
        assert_eq!(
            text("\x1b]52;c;ZXZpbA==\x07 x"),
            "\\x1b]52;c;ZXZpbA==\\x07 x"
        );
        assert_eq!(text("a\u{9b}2Jb\u{7f}"), "a\\u{9b}2Jb\\x7f");
        assert_eq!(text("dos\r\nline\rover"), "dos\r\nline\\rover");
    }

    #[test]
    fn line_also_escapes_newlines_tabs_and_returns() {
        assert_eq!(line("a\nb\tc\r\n"), "a\\nb\\tc\\r\\n");
        assert_eq!(line("é ünïcode ✓"), "é ünïcode ✓");
    }

    #[test]
    fn json_escapes_what_json_leaves_raw_and_keeps_the_value() {
        let value = serde_json::json!({"name": "a\u{1b}b\u{9b}c\u{7f}d", "ok": "é"});
        let s = serde_json::to_string(&value).unwrap();
        let safe = json(&s);
        assert!(!safe.chars().any(char::is_control), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value);
    }
}
