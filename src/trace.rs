//! Traces (R-TRACE): a recorded run, written to and read from a file, and replayed offline.
//!
//! A run records its trace when asked ([`Agent::run_with`](crate::runtime::Agent::run_with)'s
//! `record`, [`RunOutput::trace`](crate::runtime::RunOutput::trace)); this module writes and
//! reads trace files ([`write`](fn@write), [`load`], [`read`]) and replays a trace against the
//! machines ([`replay`]). A trace's records (the events fed to the machines, the effects they
//! answered, the transitions they took) are the machines' vocabulary: they are documented, with
//! the file format, in [`agentloop_core::trace`], and `agentloop-trace-tools` renders, diffs,
//! imports and replays traces under a changed configuration.
//!
//! # Example
//!
//! Record a run's trace and replay it offline: the recorded model responses and tool results
//! are fed back to the machines, and [`replay`] returns `None` when every effect matches.
//!
//! ```
//! use agentloop::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let agent = Agent::builder().model(ScriptedModel::demo()).builtin_tools().build();
//! let out = agent
//!     .run_with("session-1", vec![Message::user("What is 6*7?")], None, true)
//!     .await?;
//! let trace = out.trace.expect("recorded");
//! assert!(agentloop::trace::replay(&trace).is_none());
//! # Ok(())
//! # }
//! ```

use std::io::{Read as _, Write};
use std::path::Path;

use agentloop_core::trace::{TraceEncoder, TraceLimits, TraceRecord};
// The machines' vocabulary, documented by the core with the file format.
#[doc(no_inline)]
pub use agentloop_core::trace::{replay, Divergence, Trace, TraceError};

/// The lines of the trace file at `path`, read within [`TraceLimits::DEFAULT`] (at most one
/// line past a limit is read; the reader reports it as `TraceError::TooLarge`).
fn lines_of(path: &Path) -> Result<impl Iterator<Item = std::io::Result<String>>, TraceError> {
    let f = std::fs::File::open(path).map_err(|e| TraceError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    let limits = TraceLimits::DEFAULT;
    let f = std::io::BufReader::new(f.take(limits.file_bytes.saturating_add(2)));
    Ok(crate::store::regular_file::capped_lines(
        f,
        limits.line_bytes,
    ))
}

/// Reads a trace file of a version this build replays, within the default [`TraceLimits`] (a
/// larger one is `TraceError::TooLarge`).
pub fn load(path: &Path) -> Result<Trace, TraceError> {
    Trace::from_lines(lines_of(path)?, &path.display().to_string())
}

/// Reads a trace file of any version this crate ever wrote (to show, diff or view it), within
/// the default limits as [`load`].
pub fn read(path: &Path) -> Result<Trace, TraceError> {
    Trace::read_lines(lines_of(path)?, &path.display().to_string())
}

/// Writes `trace` to `path` (synced before returning), each request's messages once
/// ([`TraceEncoder`]).
pub fn write(trace: &Trace, path: &Path) -> Result<(), TraceError> {
    let io = |e: std::io::Error| TraceError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    // Line by line: a long trace is not held a second time as one string.
    let f = std::fs::File::create(path).map_err(io)?;
    let mut w = std::io::BufWriter::new(f);
    let mut encoder = TraceEncoder::new();
    let mut line = Vec::new();
    let header = TraceRecord::Header(Box::new(trace.header.clone()));
    for record in std::iter::once(&header).chain(&trace.records) {
        line.clear();
        encoder
            .encode(record, &mut line)
            .map_err(|e| io(e.into()))?;
        w.write_all(&line).map_err(io)?;
    }
    let f = w.into_inner().map_err(|e| io(e.into_error()))?;
    f.sync_all().map_err(io)
}
