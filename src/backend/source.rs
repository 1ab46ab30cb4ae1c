//! Where a node's connections come from: its URL (checked for settings
//! that would turn certificate checks off), or the Sentinels' master.

use super::Timeouts;
use crate::error::{Error, Result};

/// Refuses a URL that turns certificate checks off (`#insecure`): redis-rs
/// honours it when any crate of the build enables its insecure TLS feature,
/// and redlease promises verified TLS.
///
/// Decided on the URL as redis-rs parses it (which drops whitespace
/// around it and tabs or newlines inside, `#insecure ` included), and on
/// the text as well (any spelling of the fragment), never on the text
/// alone.
pub(crate) fn refuse_insecure(url: &str) -> Result<()> {
    use redis::IntoConnectionInfo;
    let parsed = url.into_connection_info().is_ok_and(|info| {
        matches!(
            info.addr(),
            redis::ConnectionAddr::TcpTls { insecure: true, .. }
        )
    });
    let written = url.rsplit_once('#').is_some_and(|(_, fragment)| {
        let f: String = fragment.chars().filter(|c| !c.is_whitespace()).collect();
        f.eq_ignore_ascii_case("insecure")
    });
    if parsed || written {
        return Err(Error::invalid(format!(
            "redis URL {:?} asks for TLS without certificate checks (#insecure), which redlease refuses; give the CA with tls_root_cert instead",
            crate::error::redact_url(url)
        )));
    }
    Ok(())
}

/// [`open_client`], with a bad URL reported as an invalid argument.
pub(crate) fn client_for(url: &str, timeouts: &Timeouts) -> Result<redis::Client> {
    refuse_insecure(url)?;
    open_client(url, timeouts).map_err(|e| {
        let shown = crate::error::redact_url(url);
        match crate::error::url_trouble(url) {
            // The reason says it all: redis-rs's "Redis URL did not parse -
            // InvalidClientConfig" behind it said nothing more.
            Some(why) => Error::invalid(format!("cannot use redis URL {shown:?}: {why}")),
            None => Error::invalid(format!("cannot use redis URL {shown:?}")).with_source(e),
        }
    })
}

/// A client for one URL; with TLS, verifying the server's certificate
/// against the configured roots or the system's.
pub(crate) fn open_client(url: &str, timeouts: &Timeouts) -> redis::RedisResult<redis::Client> {
    #[cfg(feature = "tls-rustls")]
    if let Some(certs) = timeouts.tls.certificates() {
        // rustls needs a process-wide crypto provider; installing one twice
        // is harmless (the second call just reports the first).
        let _ = rustls::crypto::ring::default_provider().install_default();
        return redis::Client::build_with_tls(url, certs);
    }
    #[cfg(feature = "tls-rustls")]
    let _ = rustls::crypto::ring::default_provider().install_default();
    let _ = timeouts;
    redis::Client::open(url)
}

/// Where a node's connections go: a fixed address, or whichever server the
/// Sentinels currently name as master (asked again for every new
/// connection, so the pool follows the master across a failover).
pub(crate) enum Source {
    Url(redis::Client),
    #[cfg(feature = "sentinel")]
    Sentinel(super::sentinel::Sentinels),
}

impl Source {
    /// A client for the server connections go to now.
    pub(super) fn client(&self) -> redis::RedisResult<redis::Client> {
        self.target().map(|(client, _)| client)
    }

    /// A client for the server connections go to now; for the Sentinels'
    /// master, with what a connection to it watches for its deposition
    /// (see `pool::Deposal`).
    pub(super) fn target(
        &self,
    ) -> redis::RedisResult<(redis::Client, Option<super::pool::Deposal>)> {
        match self {
            Source::Url(c) => Ok((c.clone(), None)),
            #[cfg(feature = "sentinel")]
            Source::Sentinel(s) => {
                // The count first: a switch heard while we connect makes
                // the connection check its server at its first use.
                let epoch = s.named().epoch();
                let (client, addr) = s.master()?;
                Ok((
                    client,
                    Some(super::pool::Deposal::new(s.named(), addr, epoch)),
                ))
            }
        }
    }
}
