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
}

/// Opens connections with timeouts, so that no command can hang forever.
pub(crate) struct Manager {
    client: redis::Client,
    timeouts: Timeouts,
}

impl r2d2::ManageConnection for Manager {
    type Connection = redis::Connection;
    type Error = redis::RedisError;

    fn connect(&self) -> Result<redis::Connection, redis::RedisError> {
        let con = self
            .client
            .get_connection_with_timeout(self.timeouts.connect)?;
        con.set_read_timeout(Some(self.timeouts.response))?;
        con.set_write_timeout(Some(self.timeouts.response))?;
        Ok(con)
    }

    fn is_valid(&self, con: &mut redis::Connection) -> Result<(), redis::RedisError> {
        redis::cmd("PING").query::<()>(con)
    }

    fn has_broken(&self, con: &mut redis::Connection) -> bool {
        !redis::ConnectionLike::is_open(con)
    }
}

/// One server and its pool.
pub(crate) struct Node {
    pool: r2d2::Pool<Manager>,
    client: redis::Client,
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
        let client = redis::Client::open(url)
            .map_err(|e| Error::invalid(format!("cannot use redis URL {url:?}")).with_source(e))?;
        let manager = Manager {
            client: client.clone(),
            timeouts: timeouts.clone(),
        };
        // No test on checkout: a PING per checkout would double the round
        // trips of every acquire. Broken connections are noticed by
        // `has_broken` and replaced.
        let pool = r2d2::Pool::builder()
            .max_size(pool_size)
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(timeouts.pool)
            .build_unchecked(manager);
        Ok(Node {
            pool,
            client,
            timeouts,
            down_until: breaker.then(|| AtomicU64::new(0)),
        })
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
        let mut inv = lua.script.prepare_invoke();
        for k in keys {
            inv.key(*k);
        }
        for a in args {
            inv.arg(*a);
        }
        let mut con = self.conn()?;
        match inv.invoke(&mut *con) {
            Err(e) if e.is_connection_dropped() => {
                drop(con);
                let mut con = self.conn()?;
                Ok(inv.invoke(&mut *con)?)
            }
            r => Ok(r?),
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
        Ok(self.client.get_connection_with_timeout(timeout)?)
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
        })
    }

    pub(crate) fn redlock(urls: &[String], pool_size: u32, timeouts: Timeouts) -> Result<Backend> {
        let nodes = urls
            .iter()
            .map(|u| Node::open(u, pool_size, timeouts.clone(), true))
            .collect::<Result<Vec<_>>>()?;
        Ok(Backend {
            kind: Kind::Redlock(Redlock::new(nodes)?),
            timeouts,
        })
    }

    #[cfg(feature = "cluster")]
    pub(crate) fn cluster(urls: &[String], pool_size: u32, timeouts: Timeouts) -> Result<Backend> {
        let leader = crate::cluster::ClusterLeader::open(urls, pool_size, timeouts.clone())?;
        Ok(Backend {
            kind: Kind::Cluster(Box::new(leader)),
            timeouts,
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
        match &self.kind {
            Kind::Redlock(r) => r.grant(call, undo, lease),
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
