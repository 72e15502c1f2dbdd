//! The TLS configuration every HTTPS client of the crate uses (the providers' and the MCP
//! client's, one reqwest): rustls with the ring provider and the webpki roots, TLS 1.2 and 1.3.
//! Built once per client; no platform certificate store is read, so a client starts the same
//! on every host.

use std::sync::Arc;

/// A rustls client configuration with the ring provider and the webpki roots; without the
/// roots when `roots` is false (a client that only speaks plain `http://`: reqwest built with
/// rustls wants a TLS configuration either way, and an empty root store trusts no server).
pub(crate) fn client_config(roots: bool) -> Result<rustls::ClientConfig, String> {
    let mut store = rustls::RootCertStore::empty();
    if roots {
        store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(store)
    .with_no_client_auth();
    Ok(tls)
}
