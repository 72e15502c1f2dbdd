//! The cache of pure tools' results (R-TOOL-6): a tool that declares itself pure
//! (same arguments, same result, no side effects) is not run again for an identical call
//! (same name, same canonical arguments) later in the session; the tool-call chart's row
//! `commit_cached` answers it from here and emits `tool_cache_hit`.
//!
//! The cache is data of the run, rebuilt from the session history the run starts with and
//! filled as steps complete, so a replay of the trace takes the same rows. It is bounded by
//! entries and bytes; the oldest entries leave first.

use std::collections::{BTreeMap, VecDeque};

use crate::message::{Message, ToolCall, ToolResult, ToolStatus};

/// A cached result: the call that produced it and its content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cached {
    /// The id of the call whose result this is.
    pub tool_call_id: String,
    /// The result's content.
    pub content: String,
}

/// The key of a call: its tool name and canonical arguments.
type Key = (String, String);

/// Results of pure tools' completed calls, oldest first (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct ToolCache {
    entries: BTreeMap<Key, Cached>,
    order: VecDeque<Key>,
    bytes: usize,
}

impl ToolCache {
    /// At most this many results are kept.
    pub const MAX_ENTRIES: usize = 256;
    /// At most this many bytes of content are kept.
    pub const MAX_BYTES: usize = 4 << 20;

    fn key(call: &ToolCall) -> Key {
        (call.name.clone(), call.arguments.to_string())
    }

    /// The cached result of an identical earlier call, if any.
    pub fn get(&self, call: &ToolCall) -> Option<&Cached> {
        if self.entries.is_empty() {
            return None;
        }
        self.entries.get(&Self::key(call))
    }

    /// Number of cached results.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Caches `result` of `call` when it completed and is not larger than the cache; the
    /// oldest entries leave to keep the bounds. A newer result of the same call replaces the
    /// older one.
    pub fn insert(&mut self, call: &ToolCall, result: &ToolResult) {
        if result.status != ToolStatus::Completed
            || call.invalid_arguments.is_some()
            || result.content.len() > Self::MAX_BYTES
        {
            return;
        }
        let key = Self::key(call);
        if let Some(old) = self.entries.remove(&key) {
            self.bytes -= old.content.len();
            self.order.retain(|k| *k != key);
        }
        self.bytes += result.content.len();
        self.entries.insert(
            key.clone(),
            Cached {
                tool_call_id: call.id.clone(),
                content: result.content.clone(),
            },
        );
        self.order.push_back(key);
        while self.entries.len() > Self::MAX_ENTRIES || self.bytes > Self::MAX_BYTES {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(old) = self.entries.remove(&oldest) {
                self.bytes -= old.content.len();
            }
        }
    }

    /// Caches the completed results of the calls of pure tools (those `is_pure` names, e.g.
    /// `|tool| step.is_pure(tool)` with a [`StepConfig`](crate::process::StepConfig)) found in
    /// `messages` (a session history: each call's result follows its assistant message).
    pub fn fill_from(&mut self, is_pure: impl Fn(&str) -> bool, messages: &[Message]) {
        let mut calls: BTreeMap<&str, &ToolCall> = BTreeMap::new();
        for m in messages {
            match m {
                Message::Assistant(a) => {
                    calls.clear();
                    for c in a.tool_calls.iter().filter(|c| is_pure(&c.name)) {
                        calls.insert(c.id.as_str(), c);
                    }
                }
                Message::Tool(r) => {
                    if let Some(call) = calls.get(r.tool_call_id.as_str()) {
                        self.insert(call, r);
                    }
                }
                _ => {}
            }
        }
    }
}
