//! `rediss://` with certificate verification (feature `tls-rustls`).

mod common;

use std::time::Duration;

use redlease::Client;

#[test]
fn tls_with_verified_certificate() {
    let (mut server, certs, _dir, url) = common::tls_server(false);
    let ca = std::fs::read(&certs.ca_crt).unwrap();
    // Wait until the TLS port answers.
    let mut client = None;
    assert!(common::eventually(Duration::from_secs(10), || {
        client = Client::builder()
            .url(&url)
            .tls_root_cert(ca.clone())
            .build()
            .ok();
        client.is_some()
    }));
    let c = client.unwrap();
    let g = c.lock("tls").acquire().unwrap();
    assert!(g.is_held());
    let other = Client::builder()
        .url(&url)
        .tls_root_cert(ca.clone())
        .build()
        .unwrap();
    assert!(other.lock("tls").try_acquire().unwrap().is_none());
    drop(g);
    assert!(other
        .lock("tls")
        .acquire_timeout(Duration::from_secs(5))
        .unwrap()
        .is_some());
    // Verification is real: without our CA the server is not trusted.
    let err = Client::builder().url(&url).build().unwrap_err();
    assert_eq!(err.kind(), redlease::ErrorKind::Connection, "{err}");
    server.stop();
}

/// A server that authenticates clients by certificate
/// (`tls-auth-clients yes`): refused without one, served with one.
#[test]
fn client_certificates_for_servers_that_require_them() {
    let (mut server, certs, _dir, url) = common::tls_server(true);
    let ca = std::fs::read(&certs.ca_crt).unwrap();
    // The server's own certificate is signed by the CA: it serves as the
    // client's too.
    let cert = std::fs::read(&certs.redis_crt).unwrap();
    let key = std::fs::read(&certs.redis_key).unwrap();
    let with_cert = || {
        Client::builder()
            .url(&url)
            .tls_root_cert(ca.clone())
            .tls_client_cert(cert.clone(), key.clone())
            .build()
    };
    let mut client = None;
    assert!(common::eventually(Duration::from_secs(10), || {
        client = with_cert().ok();
        client.is_some()
    }));
    let c = client.unwrap();
    let g = c.lock("mtls").acquire().unwrap();
    assert!(g.is_held());
    g.release().unwrap();
    // Without a client certificate the server hangs up.
    let err = Client::builder()
        .url(&url)
        .tls_root_cert(ca.clone())
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), redlease::ErrorKind::Connection, "{err}");
    // The key never shows in Debug.
    let shown = format!(
        "{:?}",
        Client::builder().tls_client_cert(cert.clone(), key.clone())
    );
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    server.stop();
}
