//! agentloop-trace-tools: tools over the traces [agentloop](https://docs.rs/agentloop) records.
//!
//! A trace (see [`agentloop_core::trace`]) is a versioned JSON Lines record of one run: its
//! header, every input event, every transition and every effect. The core reads, writes and
//! replays traces; this crate turns them into something else:
//!
//! * [`transcript`]: a trace read back as what happened (`agentloop trace show`), and the
//!   compact, stable form snapshot tests compare;
//! * [`trace_diff`]: two traces compared (`agentloop trace diff`), volatile fields normalized;
//! * [`whatif`]: the recorded inputs replayed against a *changed* configuration
//!   (`agentloop replay T --set max_steps=2`), reporting where behaviour first differs;
//! * [`export`]: traces as tables — one row per run, step, tool call or record
//!   (`agentloop trace export`, the Python package's DataFrames);
//! * [`export_inspect`]: traces as an Inspect AI eval log, one sample per trace
//!   (`agentloop trace export --format inspect`);
//! * [`export_otlp`]: traces as OpenTelemetry GenAI spans in OTLP/JSON
//!   (`agentloop trace export --format otlp`, `agentloop run --otlp-endpoint URL`);
//! * [`import`]: an OpenAI chat-completions conversation recorded elsewhere, turned into a
//!   trace by feeding it to fresh machines (`agentloop trace import`);
//! * [`import_inspect`]: an Inspect AI eval log (`.eval` or `.json`), one trace per sample,
//!   through the same import;
//! * [`import_otel`]: OpenTelemetry GenAI spans (OTLP JSON), one trace per OpenTelemetry trace
//!   id, through the same import.
//!
//! Like the core, everything here is pure: no IO, clock or async runtime. The caller reads the
//! files and writes the results.
//!
//! ```
//! use agentloop_trace_tools::import::{openai_chat, ImportOptions};
//! use agentloop_trace_tools::transcript::Transcript;
//!
//! let conversation = serde_json::json!([
//!     {"role": "user", "content": "hi"},
//!     {"role": "assistant", "content": "Hello!"}
//! ]);
//! let imported = openai_chat(&conversation, &ImportOptions::default())?;
//! assert_eq!(agentloop_core::trace::replay(&imported.trace), None);
//! let transcript = Transcript::from_trace(&imported.trace);
//! assert_eq!(transcript.summary.final_text.as_deref(), Some("Hello!"));
//! # Ok::<(), agentloop_trace_tools::import::ImportError>(())
//! ```
#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![forbid(unsafe_code)]

pub mod export;
pub mod export_inspect;
pub mod export_otlp;
pub mod import;
pub mod import_inspect;
pub mod import_otel;
pub mod trace_diff;
pub mod transcript;
pub mod whatif;
mod zip_read;
