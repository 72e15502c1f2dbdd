//! decode (in progress).
