//! Model clients: the offline scripted model, and (issue 3) real providers over HTTP.

pub mod anthropic;
pub mod classify;
pub mod decode;
pub mod fuzz;
pub mod http;
pub mod openai;
pub mod scripted;
pub mod sse;
