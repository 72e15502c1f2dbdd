//! Anthropic Messages (in progress).
