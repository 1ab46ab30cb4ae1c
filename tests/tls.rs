//! `rediss://` with certificate verification (feature `tls-rustls`).

mod common;

use std::time::{Duration, Instant};

use redlease::Client;

#[test]
fn tls_with_verified_certificate() {
    if !common::needs_tls("tls_with_verified_certificate") {
        return;
    }
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
    if !common::needs_tls("client_certificates_for_servers_that_require_them") {
        return;
    }
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

/// Issue 15, item 8, over TLS: a link that dribbles the server's bytes, one
/// every 100 ms (each read within the 1 s response timeout), held a call for
/// as many timeouts as its reply had bytes. Our TLS connections end a call
/// at its deadline, as plain ones do.
#[test]
fn a_dribbling_tls_link_cannot_hold_a_call_past_its_deadline() {
    if !common::needs_tls("a_dribbling_tls_link_cannot_hold_a_call_past_its_deadline") {
        return;
    }
    let (mut server, certs, _dir, url) = common::tls_server(false);
    let ca = std::fs::read(&certs.ca_crt).unwrap();
    let port: u16 = url
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let proxy = common::proxy::Proxy::start(port);
    let through = format!("rediss://127.0.0.1:{}/", proxy.port());
    let mut client = None;
    assert!(common::eventually(Duration::from_secs(10), || {
        client = Client::builder()
            .url(&through)
            .tls_root_cert(ca.clone())
            .response_timeout(Duration::from_secs(1))
            .outage_tolerance(Duration::from_secs(1))
            .build()
            .ok();
        client.is_some()
    }));
    let c = client.unwrap();
    let lock = c.lock("drip");
    lock.try_acquire().unwrap().unwrap().release().unwrap();

    proxy.set_dribble(Some(Duration::from_millis(100)));
    let t = Instant::now();
    let got = lock.try_acquire();
    let took = t.elapsed();
    proxy.set_dribble(None);
    println!("FIGURES dribbling TLS link: try_acquire {took:?} -> {got:?}");
    assert!(
        took < Duration::from_millis(3_500),
        "try_acquire took {took:?}: {got:?}"
    );
    match got {
        Ok(Some(guard)) => guard.release().unwrap(),
        Ok(None) => panic!("nobody else holds the lock"),
        Err(e) => assert_eq!(e.kind(), redlease::ErrorKind::Connection, "{e:?}"),
    }
    // Whatever ran late was undone or released: the name is free again.
    assert!(common::eventually(Duration::from_secs(3), || lock
        .try_acquire()
        .is_ok_and(|g| g.is_some())));
    server.stop();
}
