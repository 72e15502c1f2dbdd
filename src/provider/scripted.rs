//! The offline scripted model (placeholder: being implemented).
