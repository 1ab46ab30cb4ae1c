//! Where commands go: one pooled Redis server, a Redis Cluster, or a
//! Redlock quorum of independent masters.
//!
//! The backend speaks scripts, keys and arguments only; it knows nothing of
//! locks. Scripts that *grant* reply `{1, value}` or `{0, wait_ms}`; scripts
//! that *confirm* (release, extend) reply `1` or `0`. On one server those
//! replies pass through; on Redlock they are votes, combined here by
//! majority, so a primitive written against these calls works on both.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use once_cell::sync::Lazy;

use redis::{FromRedisValue, Value};

use crate::error::{Error, ErrorKind, Result};
use crate::redlock::Redlock;
use crate::scripts::Lua;

/// Connection settings shared by pooled and dedicated connections.
#[derive(Clone, Debug)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) response: Duration,
    pub(crate) pool: Duration,
    /// `rediss://`: trust these PEM root certificates instead of the
    /// system's (the server certificate is verified either way).
    #[cfg_attr(not(feature = "tls-rustls"), allow(dead_code))]
    pub(crate) tls_root: Option<Vec<u8>>,
}

/// A lazily filled pool: connections open on demand. No test on checkout:
/// a PING per checkout would double the round trips of every acquire;
/// broken connections are noticed by `has_broken` and replaced.
pub(crate) fn pool<M: r2d2::ManageConnection>(
    manager: M,
    pool_size: u32,
    timeouts: &Timeouts,
) -> r2d2::Pool<M> {
    r2d2::Pool::builder()
        .max_size(pool_size)
        .min_idle(Some(0))
        .test_on_check_out(false)
        .connection_timeout(timeouts.pool)
        .build_unchecked(manager)
}

/// [`open_client`], with a bad URL reported as an invalid argument.
pub(crate) fn client_for(url: &str, timeouts: &Timeouts) -> Result<redis::Client> {
    open_client(url, timeouts)
        .map_err(|e| Error::invalid(format!("cannot use redis URL {url:?}")).with_source(e))
}

/// A client for one URL; with TLS, verifying the server's certificate
/// against the configured roots or the system's.
pub(crate) fn open_client(url: &str, timeouts: &Timeouts) -> redis::RedisResult<redis::Client> {
    #[cfg(feature = "tls-rustls")]
    if let Some(root) = &timeouts.tls_root {
        // rustls needs a process-wide crypto provider; installing one twice
        // is harmless (the second call just reports the first).
        let _ = rustls::crypto::ring::default_provider().install_default();
        return redis::Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(root.clone()),
            },
        );
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
    Sentinel(std::sync::Mutex<redis::sentinel::SentinelClient>),
}

impl Source {
    fn client(&self) -> redis::RedisResult<redis::Client> {
        match self {
            Source::Url(c) => Ok(c.clone()),
            #[cfg(feature = "sentinel")]
            Source::Sentinel(s) => s.lock().unwrap_or_else(|p| p.into_inner()).get_client(),
        }
    }
}

/// A pooled connection that can be retired by us, not only by the socket:
/// after a failover the old master may still accept connections but answer
/// writes with `READONLY`.
pub(crate) struct Con {
    inner: redis::Connection,
    broken: bool,
}

impl redis::ConnectionLike for Con {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<Value> {
        self.inner.req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<Value>> {
        self.inner.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.inner.check_connection()
    }

    fn is_open(&self) -> bool {
        !self.broken && self.inner.is_open()
    }
}

/// Opens connections with timeouts, so that no command can hang forever.
pub(crate) struct Manager {
    source: std::sync::Arc<Source>,
    timeouts: Timeouts,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Con;
    type Error = redis::RedisError;

    fn connect(&self) -> Result<Con, redis::RedisError> {
        let inner = self
            .source
            .client()?
            .get_connection_with_timeout(self.timeouts.connect)?;
        inner.set_read_timeout(Some(self.timeouts.response))?;
        inner.set_write_timeout(Some(self.timeouts.response))?;
        Ok(Con {
            inner,
            broken: false,
        })
    }

    fn is_valid(&self, con: &mut Con) -> Result<(), redis::RedisError> {
        redis::cmd("PING").query::<()>(con)
    }

    fn has_broken(&self, con: &mut Con) -> bool {
        !redis::ConnectionLike::is_open(con)
    }
}

/// Whether a failed call certainly did not run and may simply be repeated
/// on a fresh connection: a connection found dropped (after a restart every
/// pooled connection is stale) or a demoted master (`READONLY`).
fn retryable(e: &redis::RedisError) -> bool {
    e.is_connection_dropped() || e.code() == Some("READONLY")
}

/// One server and its pool.
pub(crate) struct Node {
    pool: r2d2::Pool<Manager>,
    source: std::sync::Arc<Source>,
    timeouts: Timeouts,
    /// Redlock only: after a failed connection attempt the master is skipped
    /// (an immediate missing vote) until this instant, in ns since `EPOCH`,
    /// so that a dead master costs one timeout per second, not per call.
    down_until: Option<AtomicU64>,
}

/// How long a Redlock master that could not be reached is skipped.
const DOWN_FOR: Duration = Duration::from_millis(500);

static EPOCH: Lazy<Instant> = Lazy::new(Instant::now);

fn now_nanos() -> u64 {
    EPOCH.elapsed().as_nanos() as u64
}

/// One script call of a batch: the script, its keys and its arguments.
pub(crate) struct Call<'a> {
    pub(crate) lua: &'static Lua,
    pub(crate) keys: &'a [Vec<u8>],
    pub(crate) args: &'a [Vec<u8>],
}

impl Node {
    pub(crate) fn open(
        url: &str,
        pool_size: u32,
        timeouts: Timeouts,
        breaker: bool,
    ) -> Result<Node> {
        let client = client_for(url, &timeouts)?;
        Ok(Node::with_source(
            Source::Url(client),
            pool_size,
            timeouts,
            breaker,
        ))
    }

    pub(crate) fn with_source(
        source: Source,
        pool_size: u32,
        timeouts: Timeouts,
        breaker: bool,
    ) -> Node {
        let source = std::sync::Arc::new(source);
        let manager = Manager {
            source: source.clone(),
            timeouts: timeouts.clone(),
        };
        let pool = pool(manager, pool_size, &timeouts);
        Node {
            pool,
            source,
            timeouts,
            down_until: breaker.then(|| AtomicU64::new(0)),
        }
    }

    fn conn(&self) -> Result<r2d2::PooledConnection<Manager>> {
        if let Some(down) = &self.down_until {
            if now_nanos() < down.load(Ordering::Relaxed) {
                return Err(Error::new(
                    ErrorKind::Connection,
                    "master skipped: it could not be reached a moment ago",
                ));
            }
        }
        self.pool.get().map_err(|e| {
            let e = Error::from(e);
            if e.kind() == ErrorKind::Connection {
                if let Some(down) = &self.down_until {
                    down.store(now_nanos() + DOWN_FOR.as_nanos() as u64, Ordering::Relaxed);
                }
            }
            e
        })
    }

    /// Runs a script; a connection found dropped (e.g. after a server
    /// restart, every pooled connection is stale) is replaced and the call
    /// tried once more. Scripts are written to be safe to repeat.
    pub(crate) fn eval<T: FromRedisValue>(
        &self,
        lua: &Lua,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<T> {
        let inv = lua.call(keys, args);
        let mut con = self.conn()?;
        match inv.invoke(&mut *con) {
            Err(e) if retryable(&e) => {
                con.broken = true;
                drop(con);
                let mut con = self.conn()?;
                Ok(inv.invoke(&mut *con)?)
            }
            r => Ok(r?),
        }
    }

    /// A granting script followed, on the same connection, by `WAIT` for
    /// `replicas` replicas (at most `timeout`). If fewer confirm, `undo`
    /// runs and the grant fails: a failover now would likely lose it.
    pub(crate) fn grant_acked(
        &self,
        call: &Call<'_>,
        undo: &Call<'_>,
        replicas: u32,
        timeout: Duration,
    ) -> Result<(i64, i64)> {
        let mut con = self.conn()?;
        let inv = call.lua.call(call.keys, call.args);
        let reply: (i64, i64) = match inv.invoke(&mut *con) {
            Err(e) if retryable(&e) => {
                con.broken = true;
                drop(con);
                con = self.conn()?;
                inv.invoke(&mut *con)?
            }
            r => r?,
        };
        if reply.0 != 1 {
            return Ok(reply);
        }
        let acked: Result<i64> = redis::cmd("WAIT")
            .arg(replicas)
            .arg(timeout.as_millis() as u64)
            .query(&mut *con)
            .map_err(Error::from);
        match acked {
            Ok(n) if n >= i64::from(replicas) => Ok(reply),
            other => {
                let _ = undo
                    .lua
                    .call(undo.keys, undo.args)
                    .invoke::<Value>(&mut *con);
                let e = Error::new(
                    ErrorKind::QuorumNotReached,
                    format!(
                        "{} of {replicas} replicas confirmed the acquisition within {timeout:?}; released it",
                        other.as_ref().map_or(0, |n| *n)
                    ),
                );
                Err(match other {
                    Err(src) => e.with_source(src),
                    Ok(_) => e,
                })
            }
        }
    }

    pub(crate) fn eval_batch(&self, calls: &[Call<'_>]) -> Result<Vec<Value>> {
        let mut pipe = redis::pipe();
        let mut loaded: Vec<&str> = Vec::new();
        for call in calls {
            let hash = call.lua.script.get_hash();
            if !loaded.contains(&hash) {
                loaded.push(hash);
                pipe.cmd("SCRIPT").arg("LOAD").arg(call.lua.code).ignore();
            }
        }
        for call in calls {
            let cmd = pipe
                .cmd("EVALSHA")
                .arg(call.lua.script.get_hash())
                .arg(call.keys.len());
            for k in call.keys {
                cmd.arg(k.as_slice());
            }
            for a in call.args {
                cmd.arg(a.as_slice());
            }
        }
        // Renewal serves every backend of the process from one thread: a
        // server that is down must cost it one short wait, not the pool's.
        if self.down_until.is_some() {
            self.conn()?; // honour (and update) the skip window
        }
        let mut con = self
            .pool
            .get_timeout(self.timeouts.connect.min(self.timeouts.pool))?;
        Ok(pipe.query(&mut *con)?)
    }

    pub(crate) fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut con = self.conn()?;
        Ok(cmd.query(&mut *con)?)
    }

    /// Answers a PING, and warns when the server may evict lock keys.
    pub(crate) fn check(&self) -> Result<()> {
        let mut con = self.conn()?;
        redis::cmd("PING").query::<()>(&mut *con)?;
        warn_if_evicting(&mut *con);
        Ok(())
    }

    pub(crate) fn dedicated(&self, timeout: Duration) -> Result<redis::Connection> {
        Ok(self.source.client()?.get_connection_with_timeout(timeout)?)
    }
}

/// Logs a warning when the server's `maxmemory-policy` may evict keys:
/// every lease key has a TTL, so `volatile-*` policies evict them too.
pub(crate) fn warn_if_evicting(con: &mut dyn redis::ConnectionLike) {
    // CONFIG may be forbidden (ACL, managed services): then we cannot tell.
    if let Ok(v) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query::<Vec<String>>(con)
    {
        if let Some(policy) = v.get(1) {
            if policy.starts_with("allkeys-") || policy.starts_with("volatile-") {
                log::warn!(
                    "redlease: maxmemory-policy is {policy}: Redis may evict lock keys under \
                     memory pressure, silently ending leases; use noeviction"
                );
            }
        }
    }
}
enum Kind {
    Single(Box<Node>),
    #[cfg(feature = "cluster")]
    Cluster(Box<crate::cluster::ClusterLeader>),
    Redlock(Redlock),
}

/// The servers a client talks to.
pub(crate) struct Backend {
    kind: Kind,
    timeouts: Timeouts,
    /// Make grants wait for this many replicas (one leader only).
    replica_ack: Option<(u32, Duration)>,
}

fn unsupported() -> Error {
    Error::new(
        ErrorKind::Unsupported,
        "this operation needs a single leader (one server, Sentinel or Cluster); \
         on Redlock only the exclusive lock is supported",
    )
}

fn slices(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(|x| x.as_slice()).collect()
}

impl Backend {
    pub(crate) fn single(url: &str, pool_size: u32, timeouts: Timeouts) -> Result<Backend> {
        let node = Node::open(url, pool_size, timeouts.clone(), false)?;
        Ok(Backend {
            kind: Kind::Single(Box::new(node)),
            timeouts,
            replica_ack: None,
        })
    }

    /// The master a set of Sentinels names; re-resolved for every new
    /// connection. `master_auth` is (username, password) for the master and
    /// its replicas; Sentinel credentials go in the Sentinel URLs.
    #[cfg(feature = "sentinel")]
    pub(crate) fn sentinel(
        urls: &[String],
        master: &str,
        master_auth: Option<(Option<String>, String)>,
        pool_size: u32,
        timeouts: Timeouts,
    ) -> Result<Backend> {
        use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
        if urls.is_empty() {
            return Err(Error::invalid("Sentinel needs at least one sentinel URL"));
        }
        let infos = urls
            .iter()
            .map(|u| {
                redis::IntoConnectionInfo::into_connection_info(u.as_str()).map_err(|e| {
                    Error::invalid(format!("cannot use sentinel URL {u:?}")).with_source(e)
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut redis_info = redis::RedisConnectionInfo::default();
        if let Some((user, pass)) = master_auth {
            if let Some(user) = user {
                redis_info = redis_info.set_username(user);
            }
            redis_info = redis_info.set_password(pass);
        }
        let node_info = SentinelNodeConnectionInfo::default().set_redis_connection_info(redis_info);
        let client = SentinelClient::build(
            infos,
            String::from(master),
            Some(node_info),
            SentinelServerType::Master,
        )
        .map_err(|e| Error::invalid("invalid Sentinel configuration").with_source(e))?;
        let source = Source::Sentinel(std::sync::Mutex::new(client));
        Ok(Backend {
            kind: Kind::Single(Box::new(Node::with_source(
                source,
                pool_size,
                timeouts.clone(),
                false,
            ))),
            timeouts,
            replica_ack: None,
        })
    }

    /// Makes every grant wait for `replicas` replicas (see
    /// `Node::grant_acked`). Only with a single leader.
    pub(crate) fn with_replica_ack(mut self, replicas: u32, timeout: Duration) -> Result<Backend> {
        if !matches!(self.kind, Kind::Single(_)) {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "replica_ack works with one server or Sentinel, not with Cluster or Redlock",
            ));
        }
        self.replica_ack = Some((replicas, timeout));
        Ok(self)
    }

    pub(crate) fn redlock(urls: &[String], pool_size: u32, timeouts: Timeouts) -> Result<Backend> {
        let nodes = urls
            .iter()
            .map(|u| Node::open(u, pool_size, timeouts.clone(), true))
            .collect::<Result<Vec<_>>>()?;
        Ok(Backend {
            kind: Kind::Redlock(Redlock::new(nodes)?),
            timeouts,
            replica_ack: None,
        })
    }

    #[cfg(feature = "cluster")]
    pub(crate) fn cluster(urls: &[String], pool_size: u32, timeouts: Timeouts) -> Result<Backend> {
        let leader = crate::cluster::ClusterLeader::open(urls, pool_size, timeouts.clone())?;
        Ok(Backend {
            kind: Kind::Cluster(Box::new(leader)),
            timeouts,
            replica_ack: None,
        })
    }

    /// Checks that the servers answer (a majority, on Redlock), warning
    /// about eviction policies on the way.
    pub(crate) fn check(&self) -> Result<()> {
        match &self.kind {
            Kind::Single(node) => node.check(),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.check(),
            Kind::Redlock(r) => r.check(),
        }
    }

    /// Whether this backend has one authoritative server per key (so that
    /// every primitive is available).
    pub(crate) fn is_cluster(&self) -> bool {
        match &self.kind {
            #[cfg(feature = "cluster")]
            Kind::Cluster(_) => true,
            _ => false,
        }
    }

    /// Runs one script on the key's leader (EVALSHA, loading it on
    /// NOSCRIPT). Not available on Redlock, where no server is authoritative.
    pub(crate) fn eval<T: FromRedisValue>(
        &self,
        lua: &Lua,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<T> {
        match &self.kind {
            Kind::Single(node) => node.eval(lua, keys, args),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.eval(lua, keys, args),
            Kind::Redlock(_) => Err(unsupported()),
        }
    }

    /// Runs one plain command on the leader (not on Redlock).
    pub(crate) fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        match &self.kind {
            Kind::Single(node) => node.query(cmd),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.query(cmd),
            Kind::Redlock(_) => Err(unsupported()),
        }
    }

    /// Runs a granting script: `{1, value}` or `{0, wait_ms}`. On Redlock a
    /// majority decides and `undo` cleans up a failed attempt; see
    /// [`Redlock::grant`].
    pub(crate) fn grant(
        &self,
        call: Call<'_>,
        undo: Call<'_>,
        lease: Duration,
    ) -> Result<(i64, i64)> {
        match (&self.kind, self.replica_ack) {
            (Kind::Redlock(r), _) => r.grant(call, undo, lease),
            (Kind::Single(node), Some((replicas, timeout))) => {
                node.grant_acked(&call, &undo, replicas, timeout)
            }
            _ => self.eval(call.lua, &slices(call.keys), &slices(call.args)),
        }
    }

    /// Redlock: agree on the fence just handed out. A no-op elsewhere.
    pub(crate) fn raise_fence(&self, key: &[u8], fence: i64) {
        if let Kind::Redlock(r) = &self.kind {
            r.raise_fence(key, fence);
        }
    }

    /// Runs a confirming script (`1` done, `0` not ours); on Redlock by
    /// majority.
    pub(crate) fn confirm(&self, call: Call<'_>) -> Result<i64> {
        match &self.kind {
            Kind::Redlock(r) => r.confirm(call),
            _ => self.eval(call.lua, &slices(call.keys), &slices(call.args)),
        }
    }

    /// Whether `key` exists (on a majority, on Redlock).
    pub(crate) fn exists(&self, key: &[u8]) -> Result<bool> {
        match &self.kind {
            Kind::Redlock(r) => Ok(r.exists(key)),
            _ => self.query(redis::cmd("EXISTS").arg(key)),
        }
    }

    /// Many confirming calls in one round trip per server (renewal). Each
    /// reply is `Int(1)` (confirmed), `Int(0)` (denied), or anything else
    /// (undecided: retry later).
    pub(crate) fn eval_batch(&self, calls: &[Call<'_>]) -> Result<Vec<Value>> {
        match &self.kind {
            Kind::Single(node) => node.eval_batch(calls),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.eval_batch(calls),
            Kind::Redlock(r) => Ok(r.eval_batch(calls)),
        }
    }

    /// A dedicated connection outside the pools (for the wake-up subscriber).
    pub(crate) fn dedicated(&self) -> Result<redis::Connection> {
        let t = self.timeouts.connect;
        match &self.kind {
            Kind::Single(node) => node.dedicated(t),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.dedicated(t),
            Kind::Redlock(r) => r.dedicated(t),
        }
    }

    pub(crate) fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// Extra margin a lease loses to clock drift between independent
    /// masters (zero with a single leader).
    pub(crate) fn drift(&self, lease: Duration) -> Duration {
        match self.kind {
            Kind::Redlock(_) => lease / 100 + Duration::from_millis(2),
            _ => Duration::ZERO,
        }
    }
}
