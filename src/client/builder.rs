//! [`ClientBuilder`]: a client's settings, their checks, and the backend
//! of the chosen topology.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::backend::{Backend, Timeouts};
use crate::client::Client;
use crate::error::{redact_url, Error, Result};
use crate::events::{HandleEvent, Handler};
use crate::lease::context::{Config, Context, ContextInner};
use crate::wakeup::Wakeup;

/// Largest accepted pool: far beyond what one process needs against one
/// server, far below what would exhaust memory or file descriptors.
const MAX_POOL_SIZE: u32 = 4096;

/// Which servers a client talks to.
#[derive(Clone, Default)]
enum Topology {
    #[default]
    Unset,
    Standalone(String),
    Redlock(Vec<String>),
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Cluster(Vec<String>),
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    Sentinel(Vec<String>, String),
}

impl Topology {
    /// Every URL it names (for Sentinel, the sentinels').
    fn urls(&self) -> Vec<&str> {
        match self {
            Topology::Unset => Vec::new(),
            Topology::Standalone(u) => vec![u.as_str()],
            Topology::Redlock(u) | Topology::Cluster(u) | Topology::Sentinel(u, _) => {
                u.iter().map(String::as_str).collect()
            }
        }
    }
}

/// Whether `url` asks for TLS (`rediss://`, or a URL redis-rs reads as
/// TLS).
fn is_tls_url(url: &str) -> bool {
    use redis::IntoConnectionInfo;
    let scheme = url.trim_start().split("://").next().unwrap_or("");
    scheme.eq_ignore_ascii_case("rediss")
        || scheme.eq_ignore_ascii_case("valkeys")
        || url
            .into_connection_info()
            .is_ok_and(|i| matches!(i.addr(), redis::ConnectionAddr::TcpTls { .. }))
}

impl fmt::Debug for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let urls = |u: &[String]| -> Vec<String> { u.iter().map(|u| redact_url(u)).collect() };
        match self {
            Topology::Unset => f.write_str("Unset"),
            Topology::Standalone(u) => f.debug_tuple("Standalone").field(&redact_url(u)).finish(),
            Topology::Redlock(u) => f.debug_tuple("Redlock").field(&urls(u)).finish(),
            Topology::Cluster(u) => f.debug_tuple("Cluster").field(&urls(u)).finish(),
            Topology::Sentinel(u, m) => f.debug_tuple("Sentinel").field(&urls(u)).field(m).finish(),
        }
    }
}

/// Configures and builds a [`Client`].
///
/// ```no_run
/// use std::time::Duration;
/// let client = redlease::Client::builder()
///     .url("redis://127.0.0.1:6379/")
///     .pool_size(16)
///     .key_prefix("myapp:")
///     .watchdog_timeout(Duration::from_secs(30))
///     .build()?;
/// # Ok::<(), redlease::Error>(())
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until .build() is called"]
pub struct ClientBuilder {
    topology: Topology,
    pool_size: u32,
    prefix: String,
    watchdog: Duration,
    connect_timeout: Duration,
    response_timeout: Duration,
    pool_timeout: Duration,
    fallback_poll: Duration,
    node_timeout: Duration,
    master_auth: Option<(Option<String>, String)>,
    replica_ack: Option<(u32, Duration)>,
    outage_tolerance: Duration,
    tls: crate::backend::Tls,
    reentrant: bool,
    events: Option<Handler>,
}

/// Passwords never appear: URLs are redacted, credentials shown as `***`.
impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("topology", &self.topology)
            .field("pool_size", &self.pool_size)
            .field("prefix", &self.prefix)
            .field("watchdog", &self.watchdog)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("pool_timeout", &self.pool_timeout)
            .field("fallback_poll", &self.fallback_poll)
            .field("node_timeout", &self.node_timeout)
            .field(
                "master_auth",
                &self.master_auth.as_ref().map(|(user, _)| (user, "***")),
            )
            .field("replica_ack", &self.replica_ack)
            .field("outage_tolerance", &self.outage_tolerance)
            .field("tls_root", &self.tls.root.as_ref().map(|r| r.len()))
            .field("tls_client_cert", &self.tls.client.as_ref().map(|_| "***"))
            .field("reentrant", &self.reentrant)
            .finish_non_exhaustive()
    }
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            topology: Topology::Unset,
            pool_size: 16,
            prefix: String::new(),
            watchdog: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            pool_timeout: Duration::from_secs(5),
            fallback_poll: crate::protocol::timing::FALLBACK_POLL,
            node_timeout: Duration::from_millis(250),
            master_auth: None,
            replica_ack: None,
            outage_tolerance: crate::protocol::timing::OUTAGE_TOLERANCE,
            tls: crate::backend::Tls::default(),
            reentrant: true,
            events: None,
        }
    }
}

impl ClientBuilder {
    /// One Redis server, e.g. `redis://127.0.0.1:6379/0` or
    /// `redis://user:pass@host:6379/`. Required (unless another topology is
    /// chosen).
    pub fn url(mut self, url: impl AsRef<str>) -> Self {
        self.topology = Topology::Standalone(url.as_ref().to_owned());
        self
    }

    /// Redlock over independent masters (odd count, usually 3 or 5): every
    /// acquisition, renewal and release needs a majority. Only the exclusive
    /// lock is available ([`Client::lock`], not fair); the other primitives
    /// return [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    /// Use `node_timeout` to bound the wait for one master.
    pub fn redlock<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.topology =
            Topology::Redlock(urls.into_iter().map(|u| u.as_ref().to_owned()).collect());
        self
    }

    /// A Redis Cluster, found through any of its nodes (seed URLs). Every
    /// primitive works: all keys of one share the hash tag `{name}`.
    /// Requires the `cluster` feature; without it `build` fails with
    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    pub fn cluster<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.topology =
            Topology::Cluster(urls.into_iter().map(|u| u.as_ref().to_owned()).collect());
        self
    }

    /// The master that the Sentinels at `urls` know as `master`. The pool
    /// follows the master across failover (every new connection asks the
    /// Sentinels; connections to a demoted master are retired on
    /// `READONLY`). Credentials for the Sentinels go in their URLs; for the
    /// master use [`ClientBuilder::master_credentials`]. Requires the
    /// `sentinel` feature.
    pub fn sentinel<I, S>(mut self, urls: I, master: impl AsRef<str>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.topology = Topology::Sentinel(
            urls.into_iter().map(|u| u.as_ref().to_owned()).collect(),
            master.as_ref().to_owned(),
        );
        self
    }

    /// Sentinel: username (ACL) and password for the master. Defaults to none.
    pub fn master_credentials(
        mut self,
        username: Option<&str>,
        password: impl Into<String>,
    ) -> Self {
        self.master_auth = Some((username.map(str::to_owned), password.into()));
        self
    }

    /// Makes every acquisition wait (`WAIT`) until `replicas` replicas have
    /// its write, at most `timeout`; if fewer confirm, the acquisition is
    /// released and fails with [`ErrorKind::QuorumNotReached`](crate::ErrorKind::QuorumNotReached).
    /// This narrows, but does not close, the window in which a failover
    /// loses a lock: replication stays asynchronous, a replica that
    /// confirmed may not be the one promoted, and renewals are not waited
    /// for. One server or Sentinel only. `timeout` must be at least 1 ms
    /// and shorter than the watchdog timeout. Defaults to off.
    pub fn replica_ack(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_ack = Some((replicas, timeout));
        self
    }

    /// For `rediss://` URLs: trust this PEM-encoded root certificate (your
    /// CA) when verifying the server, instead of the system's roots. The
    /// server's certificate is always verified. Requires the `tls-rustls`
    /// feature. Defaults to the system's roots.
    pub fn tls_root_cert(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root = Some(pem.into());
        self
    }

    /// For `rediss://` URLs: present this PEM-encoded client certificate
    /// and its private key, for servers that authenticate clients by
    /// certificate (`tls-auth-clients yes`). On every topology. Requires
    /// the `tls-rustls` feature. Defaults to no client certificate.
    pub fn tls_client_cert(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// How long a thread that is *waiting* for a lock keeps retrying through
    /// connection errors (a server restart, a Sentinel failover) before the
    /// error is returned; the caller's own deadline always wins. A first
    /// `try_*` calls report connection errors at once.
    /// Defaults to 10 s.
    pub fn outage_tolerance(mut self, d: Duration) -> Self {
        self.outage_tolerance = d;
        self
    }

    /// Redlock: how long one master may take to connect or answer before its
    /// vote counts as missing; keep it much smaller than the lease. Defaults
    /// to 250 ms.
    pub fn node_timeout(mut self, d: Duration) -> Self {
        self.node_timeout = d;
        self
    }

    /// Whether a thread that holds a lock (or a read or write hold) may take
    /// it again: re-entry costs no round trip and shares the hold. With
    /// `false`, a second acquisition on a thread that already holds the name
    /// fails at once with [`ErrorKind::WouldDeadlock`](crate::ErrorKind::WouldDeadlock),
    /// no round trip, the first hold untouched — what a work-stealing pool
    /// (rayon) needs, where an unrelated task may run on a thread that waits
    /// inside a critical section (see the crate docs). Per handle:
    /// [`Lock::non_reentrant`](crate::Lock::non_reentrant). Defaults to `true`.
    pub fn reentrant(mut self, reentrant: bool) -> Self {
        self.reentrant = reentrant;
        self
    }

    /// Calls `handler` on acquisitions, releases and lost leases of every
    /// primitive of this client; see [`HandleEvent`](crate::HandleEvent).
    /// Defaults to none.
    pub fn event_handler(mut self, handler: impl HandleEvent) -> Self {
        self.events = Some(Handler(Arc::new(handler)));
        self
    }

    /// Maximum pooled connections, 1 to 4096. Defaults to 16.
    pub fn pool_size(mut self, n: u32) -> Self {
        self.pool_size = n;
        self
    }

    /// Prefix for every key and channel this client writes, e.g. `"myapp:"`.
    /// Must not contain `{` or `}` (the library places its own hash tag).
    /// Defaults to none.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Lease of every lock taken without a fixed lease; the renewal thread
    /// extends it every third of this while the guard lives. Defaults to 30 s.
    pub fn watchdog_timeout(mut self, d: Duration) -> Self {
        self.watchdog = d;
        self
    }

    /// Longest wait for a new TCP connection. Defaults to 2 s.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// Longest wait for any reply; after it the outcome is unknown and the
    /// call fails with [`ErrorKind::Connection`](crate::ErrorKind::Connection).
    /// It bounds the whole call, not each socket read, so a server that
    /// dribbles its reply cannot stretch a call. Defaults to 2 s.
    pub fn response_timeout(mut self, d: Duration) -> Self {
        self.response_timeout = d;
        self
    }

    /// Longest wait for a free pooled connection. Defaults to 5 s.
    pub fn pool_timeout(mut self, d: Duration) -> Self {
        self.pool_timeout = d;
        self
    }

    /// Longest a waiter sleeps between retries when no release message
    /// arrives (it covers messages lost while the subscriber reconnects).
    /// Defaults to 2 s.
    pub fn fallback_poll(mut self, d: Duration) -> Self {
        self.fallback_poll = d;
        self
    }

    /// Validates the settings and connects (one connection, to fail fast on
    /// a wrong address or password).
    pub fn build(self) -> Result<Client> {
        self.validate()?;
        let backend = Arc::new(self.backend()?);
        check_server(&backend)?;
        let id = Uuid::new_v4();
        let prefix = self.prefix.into_bytes();
        let mut channel = prefix.clone();
        channel.extend_from_slice(crate::protocol::keys::WAKE_CHANNEL.as_bytes());
        backend.detect_sharding(&channel);
        let wakeup = Wakeup::new(
            backend.clone(),
            channel,
            id.simple().to_string(),
            self.fallback_poll,
            self.outage_tolerance,
        );
        let client = Client {
            cx: Context {
                inner: Arc::new(ContextInner {
                    id,
                    config: Config {
                        prefix,
                        watchdog: self.watchdog,
                        reentrant: self.reentrant,
                        events: self.events,
                    },
                    backend,
                    wakeup,
                    opening_looks: Default::default(),
                }),
            },
        };
        // One line that says which way this client's waiters will wait.
        log::info!("redlease: client ready: {}", client.capabilities());
        Ok(client)
    }

    /// The settings' own checks, before anything connects.
    fn validate(&self) -> Result<()> {
        for (what, d) in [
            ("watchdog_timeout", self.watchdog),
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
            ("pool_timeout", self.pool_timeout),
            ("fallback_poll", self.fallback_poll),
            ("node_timeout", self.node_timeout),
        ] {
            if d.is_zero() {
                return Err(Error::invalid(format!("{what} must be greater than zero")));
            }
            if d > Duration::from_secs(365 * 24 * 3600) {
                return Err(Error::invalid(format!("{what} must be at most a year")));
            }
        }
        if self.watchdog < Duration::from_millis(30) {
            return Err(Error::invalid(
                "watchdog_timeout must be at least 30 ms (it is renewed every third)",
            ));
        }
        if self.pool_size == 0 || self.pool_size > MAX_POOL_SIZE {
            return Err(Error::invalid(format!(
                "pool_size must be between 1 and {MAX_POOL_SIZE}"
            )));
        }
        if self.prefix.contains(['{', '}']) {
            return Err(Error::invalid(
                "key_prefix must not contain '{' or '}' (the library adds its own hash tag)",
            ));
        }
        match self.replica_ack {
            Some((0, _)) => return Err(Error::invalid("replica_ack needs at least one replica")),
            // `WAIT n 0` would block forever; waiting longer than the lease
            // would outlive what it protects.
            Some((_, t)) if t < Duration::from_millis(1) || t >= self.watchdog => {
                return Err(Error::invalid(
                    "replica_ack's timeout must be at least 1 ms and shorter than the watchdog timeout",
                ))
            }
            _ => {}
        }
        self.validate_tls()
    }

    fn validate_tls(&self) -> Result<()> {
        if self.tls.root.is_none() && self.tls.client.is_none() {
            return Ok(());
        }
        if cfg!(not(feature = "tls-rustls")) {
            return Err(Error::new(
                crate::ErrorKind::Unsupported,
                "TLS support needs the `tls-rustls` feature of redlease",
            ));
        }
        // TLS settings that cannot apply are an error on every topology:
        // Sentinel with plain URLs connected in clear text and sent the
        // master's password to its plain port.
        if let Some(plain) = self.topology.urls().iter().find(|u| !is_tls_url(u)) {
            return Err(Error::invalid(format!(
                "tls_root_cert and tls_client_cert need rediss:// URLs, and {:?} is not one",
                redact_url(plain)
            )));
        }
        Ok(())
    }

    /// The backend of the topology, with `replica_ack` applied.
    fn backend(&self) -> Result<Backend> {
        let timeouts = Timeouts {
            connect: self.connect_timeout,
            response: self.response_timeout,
            pool: self.pool_timeout,
            tls: self.tls.clone(),
        };
        let backend = match &self.topology {
            Topology::Unset => {
                return Err(Error::invalid("no Redis URL given: call .url(...)"));
            }
            Topology::Standalone(url) => Backend::single(url, self.pool_size, timeouts)?,
            Topology::Redlock(urls) => {
                let per_node = Timeouts {
                    connect: self.node_timeout,
                    response: self.node_timeout,
                    pool: self.node_timeout,
                    tls: self.tls.clone(),
                };
                Backend::redlock(urls, self.pool_size, per_node)?
            }
            #[cfg(feature = "cluster")]
            Topology::Cluster(urls) => Backend::cluster(urls, self.pool_size, timeouts)?,
            #[cfg(not(feature = "cluster"))]
            Topology::Cluster(_) => {
                return Err(Error::new(
                    crate::ErrorKind::Unsupported,
                    "Redis Cluster support needs the `cluster` feature of redlease",
                ));
            }
            #[cfg(feature = "sentinel")]
            Topology::Sentinel(urls, master) => Backend::sentinel(
                urls,
                master,
                self.master_auth.clone(),
                self.pool_size,
                timeouts,
            )?,
            #[cfg(not(feature = "sentinel"))]
            Topology::Sentinel(..) => {
                return Err(Error::new(
                    crate::ErrorKind::Unsupported,
                    "Sentinel support needs the `sentinel` feature of redlease",
                ));
            }
        };
        match self.replica_ack {
            Some((n, t)) => backend.with_replica_ack(n, t),
            None => Ok(backend),
        }
    }
}

/// Connects once (to a majority, on Redlock), and warns when a server may
/// evict lock keys.
fn check_server(backend: &Backend) -> Result<()> {
    backend.check()
}
