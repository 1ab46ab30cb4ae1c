//! The rustls settings of our TLS connections, as redis-rs would make them.

use std::sync::Arc;

use redis::{RedisError, RedisResult};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::super::Tls;

pub(super) fn refused(what: &'static str, e: impl std::fmt::Display) -> RedisError {
    RedisError::from((redis::ErrorKind::InvalidClientConfig, what, e.to_string()))
}

/// Built once per client (loading the system's roots reads many
/// files) and shared by its connections.
pub(super) fn config(tls: &Tls) -> RedisResult<Arc<rustls::ClientConfig>> {
    match tls.rustls.get_or_init(|| build(tls).map(Arc::new)) {
        Ok(config) => Ok(config.clone()),
        Err(e) => Err(refused("unusable TLS settings", e)),
    }
}

/// The given root (else the system's), and the client certificate.
fn build(tls: &Tls) -> Result<rustls::ClientConfig, String> {
    // rustls needs a process-wide crypto provider; installing one twice
    // is harmless (the second call just reports the first).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    match &tls.root {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| format!("root certificate: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("root certificate: {e}"))?;
            }
        }
        None => {
            // A system certificate that cannot be read is skipped (one
            // good root is all verification needs); redis-rs would
            // refuse to connect at all.
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    match &tls.client {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("client certificate: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("client key: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client certificate: {e}"))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}
