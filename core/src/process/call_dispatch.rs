//! The tool-call lifecycle's dispatch, `core/src/generated/tool_call_dispatch.rs`, written by `cargo run -p agentloop-codegen` from
//! `statecharts/tool_call.toml`: `select` tries the rows of a call's state and its
//! superstates (innermost first) for an event in chart order, calling each row's guard in
//! [`Guards`], and returns the first whose guard holds; `act` runs that row's action in
//! [`Actions`]; `holds` and `expected` are the chart oracle's. The inner machine feeds a
//! call its events through `Calls::call_event` (`process/calls.rs`), which
//! moves the call along the chosen row, records the transition and checks the row's effects:
//! no hand-written function picks a tool call's row.

use crate::chart::{ToolCallEventKind, ToolCallGuard, ToolCallRow, ToolCallState};
use crate::process::call_actions::Actions;
use crate::process::call_guards::{Facts, Guards};
use crate::process::calls::Calls;

include!("../generated/tool_call_dispatch.rs");
