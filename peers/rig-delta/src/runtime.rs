//! The clients' tokio runtime: by default exactly what `#[tokio::main]` builds (multi-thread,
//! one worker per CPU, IO and time drivers); `PEER_RUNTIME=current-thread` builds what
//! `#[tokio::main(flavor = "current_thread")]` would, for the informational comparison.

pub fn build() -> std::io::Result<tokio::runtime::Runtime> {
    match std::env::var("PEER_RUNTIME").as_deref() {
        Ok("current-thread") => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Ok("multi-thread") | Err(_) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
        Ok(other) => Err(std::io::Error::other(format!(
            "PEER_RUNTIME={other}: expected multi-thread or current-thread"
        ))),
    }
}
