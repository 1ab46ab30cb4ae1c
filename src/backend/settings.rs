//! What every connection of a backend is opened with: its timeouts and
//! its TLS settings.

use std::time::Duration;

/// Connection settings shared by pooled and dedicated connections.
#[derive(Clone, Debug)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) response: Duration,
    pub(crate) pool: Duration,
    #[cfg_attr(not(feature = "tls-rustls"), allow(dead_code))]
    pub(crate) tls: Tls,
}

/// Certificates for `rediss://`, on every topology.
#[derive(Clone, Default)]
#[cfg_attr(not(feature = "tls-rustls"), allow(dead_code))]
pub(crate) struct Tls {
    /// Trust these PEM root certificates instead of the system's (the
    /// server certificate is verified either way).
    pub(crate) root: Option<Vec<u8>>,
    /// Present this PEM certificate and key (servers with
    /// `tls-auth-clients yes`).
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
    /// Our connections' rustls settings, made from the above at the first
    /// TLS connection and shared by every copy of these settings.
    #[cfg(feature = "tls-rustls")]
    pub(crate) rustls: std::sync::Arc<
        std::sync::OnceLock<std::result::Result<std::sync::Arc<rustls::ClientConfig>, String>>,
    >,
}

/// The key never appears, nor the certificates' bytes.
impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("root", &self.root.as_ref().map(|r| r.len()))
            .field("client", &self.client.as_ref().map(|_| "***"))
            .finish()
    }
}

impl Tls {
    /// The certificates to hand redis-rs, if any were given.
    #[cfg(feature = "tls-rustls")]
    pub(crate) fn certificates(&self) -> Option<redis::TlsCertificates> {
        if self.root.is_none() && self.client.is_none() {
            return None;
        }
        Some(redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.root.clone(),
        })
    }
}
