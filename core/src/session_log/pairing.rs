//! The pairing check and repair of a message history a port returned (R-IDEM-7): a custom
//! context manager's history at the start of a run, a compactor's output. The session log has
//! its own repair ([`repair`](fn@super::repair)); a history a port built never passed through
//! it, so the react machine runs this one on it before any model request.

use crate::entry::{ContextSource, Repair};
use crate::message::{Message, ToolResult, ToolStatus};

/// `messages` made well paired, and what was repaired (one `session_repaired` event each).
///
/// A provider takes a tool result only in the block of tool messages right after the
/// assistant message that made the call, once. So, as the session log's repair does:
///
/// - a tool result that answers no call of the assistant message before its block (an orphan,
///   or a second result for a call) is dropped ([`Repair::ContextResultDropped`]);
/// - a call without a result in that block gets an [`ToolStatus::OutcomeUnknown`] error
///   result there ([`Repair::ContextResultFilled`]). The call is kept rather than dropped, like
///   the log repair's filled result: the assistant turn is what the model said, and whether
///   the call ran is not known, so the model is told so instead of the turn being rewritten.
///
/// Each block's results are put in call order. A well-paired history comes back unchanged
/// with no repairs.
pub fn pair_messages(messages: &[Message], source: ContextSource) -> (Vec<Message>, Vec<Repair>) {
    let mut out = Vec::with_capacity(messages.len());
    let mut repairs = Vec::new();
    let dropped = |index, r: &ToolResult| Repair::ContextResultDropped {
        index,
        source,
        tool_call_id: r.tool_call_id.clone(),
    };
    let mut i = 0;
    while let Some(message) = messages.get(i) {
        match message {
            Message::Assistant(a) => {
                let owner = i;
                out.push(message.clone());
                i += 1;
                let mut block: Vec<Option<&ToolResult>> = vec![None; a.tool_calls.len()];
                while let Some(Message::Tool(r)) = messages.get(i) {
                    match a.tool_calls.iter().position(|c| c.id == r.tool_call_id) {
                        Some(p) if block[p].is_none() => block[p] = Some(r),
                        _ => repairs.push(dropped(i, r)),
                    }
                    i += 1;
                }
                for (call, result) in a.tool_calls.iter().zip(block) {
                    match result {
                        Some(r) => out.push(Message::Tool(r.clone())),
                        None => {
                            repairs.push(Repair::ContextResultFilled {
                                index: owner,
                                source,
                                tool_call_id: call.id.clone(),
                                name: call.name.clone(),
                            });
                            out.push(Message::Tool(ToolResult {
                                tool_call_id: call.id.clone(),
                                name: call.name.clone(),
                                content: format!(
                                    "outcome unknown: the context this step was given had no \
                                     result for `{}` (call {}); it was not run again. Check \
                                     its effects before retrying.",
                                    call.name, call.id
                                ),
                                status: ToolStatus::OutcomeUnknown,
                            }));
                        }
                    }
                }
            }
            Message::Tool(r) => {
                repairs.push(dropped(i, r));
                i += 1;
            }
            _ => {
                out.push(message.clone());
                i += 1;
            }
        }
    }
    (out, repairs)
}
