//! Model clients: the offline scripted model, and (issue 3) real providers over HTTP.

pub mod scripted;
