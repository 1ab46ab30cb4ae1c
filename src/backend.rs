//! Where commands go: one pooled Redis server, or a Redlock quorum of
//! independent masters.
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
use crate::scripts::{Lua, FENCE_RAISE};

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
    fn open(url: &str, pool_size: u32, timeouts: Timeouts, breaker: bool) -> Result<Node> {
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
    fn eval<T: FromRedisValue>(&self, lua: &Lua, keys: &[&[u8]], args: &[&[u8]]) -> Result<T> {
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

    fn eval_batch(&self, calls: &[Call<'_>]) -> Result<Vec<Value>> {
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
}

enum Kind {
    Single(Box<Node>),
    /// Independent masters; a majority decides.
    Redlock(Vec<Node>),
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

/// Runs `f` on every node at once; results in node order.
fn on_all<T: Send>(nodes: &[Node], f: impl Fn(&Node) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let handles: Vec<_> = nodes[1..].iter().map(|n| s.spawn(|| f(n))).collect();
        let mut out = vec![f(&nodes[0])];
        for h in handles {
            // A node call never panics (errors are values); if one did, the
            // panic is propagated rather than turned into a silent vote.
            out.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        out
    })
}

impl Backend {
    pub(crate) fn single(url: &str, pool_size: u32, timeouts: Timeouts) -> Result<Backend> {
        Ok(Backend {
            kind: Kind::Single(Box::new(Node::open(
                url,
                pool_size,
                timeouts.clone(),
                false,
            )?)),
            timeouts,
        })
    }

    pub(crate) fn redlock(urls: &[String], pool_size: u32, timeouts: Timeouts) -> Result<Backend> {
        if urls.is_empty() {
            return Err(Error::invalid("Redlock needs at least one master URL"));
        }
        let nodes = urls
            .iter()
            .map(|u| Node::open(u, pool_size, timeouts.clone(), true))
            .collect::<Result<Vec<_>>>()?;
        Ok(Backend {
            kind: Kind::Redlock(nodes),
            timeouts,
        })
    }

    fn quorum(n: usize) -> usize {
        n / 2 + 1
    }

    /// Checks that the servers answer (a majority, on Redlock) and returns a
    /// connection to one of them for further checks.
    pub(crate) fn check(&self) -> Result<Vec<r2d2::PooledConnection<Manager>>> {
        match &self.kind {
            Kind::Single(node) => Ok(vec![node.conn()?]),
            Kind::Redlock(nodes) => {
                let results = on_all(nodes, |n| -> Result<_> {
                    let mut con = n.conn()?;
                    redis::cmd("PING").query::<()>(&mut *con)?;
                    Ok(con)
                });
                let mut ok = Vec::new();
                let mut last_err = None;
                for r in results {
                    match r {
                        Ok(c) => ok.push(c),
                        Err(e) => last_err = Some(e),
                    }
                }
                if ok.len() < Self::quorum(nodes.len()) {
                    let e = Error::new(
                        ErrorKind::QuorumNotReached,
                        format!(
                            "only {} of {} Redlock masters answered",
                            ok.len(),
                            nodes.len()
                        ),
                    );
                    return Err(match last_err {
                        Some(src) => e.with_source(src),
                        None => e,
                    });
                }
                Ok(ok)
            }
        }
    }

    /// Runs one script on the leader (EVALSHA, loading it on NOSCRIPT).
    /// Not available on Redlock, where no single server is authoritative.
    pub(crate) fn eval<T: FromRedisValue>(
        &self,
        lua: &Lua,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<T> {
        match &self.kind {
            Kind::Single(node) => node.eval(lua, keys, args),
            Kind::Redlock(_) => Err(unsupported()),
        }
    }

    /// Runs one plain command on the leader (not on Redlock).
    pub(crate) fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        match &self.kind {
            Kind::Single(node) => {
                let mut con = node.conn()?;
                Ok(cmd.query(&mut *con)?)
            }
            Kind::Redlock(_) => Err(unsupported()),
        }
    }

    /// Runs a granting script: `{1, value}` or `{0, wait_ms}`.
    ///
    /// On Redlock it runs on every master in parallel; it grants only with a
    /// majority of grants *and* time left on the lease (lease − elapsed −
    /// drift, drift = 1 % of the lease + 2 ms); the value is the largest of
    /// the granted values. Otherwise `undo` runs on every master (also those
    /// that seemed to fail: their reply may have been lost) and the wait is
    /// the shortest reported by a refusing master, or a short jittered
    /// pause when the votes split. An erroring master is one missing vote.
    pub(crate) fn grant(
        &self,
        call: Call<'_>,
        undo: Call<'_>,
        lease: Duration,
    ) -> Result<(i64, i64)> {
        let nodes = match &self.kind {
            Kind::Single(node) => {
                let keys: Vec<&[u8]> = call.keys.iter().map(|k| k.as_slice()).collect();
                let args: Vec<&[u8]> = call.args.iter().map(|a| a.as_slice()).collect();
                return node.eval(call.lua, &keys, &args);
            }
            Kind::Redlock(nodes) => nodes,
        };
        let start = Instant::now();
        let keys: Vec<&[u8]> = call.keys.iter().map(|k| k.as_slice()).collect();
        let args: Vec<&[u8]> = call.args.iter().map(|a| a.as_slice()).collect();
        let votes = on_all(nodes, |n| n.eval::<(i64, i64)>(call.lua, &keys, &args));
        let elapsed = start.elapsed();
        let mut grants = 0;
        let mut best = 0;
        let mut wait: Option<i64> = None;
        let mut errors = 0;
        let mut last_err = None;
        for v in votes {
            match v {
                Ok((1, value)) => {
                    grants += 1;
                    best = best.max(value);
                }
                Ok((_, ms)) if ms > 0 => wait = Some(wait.map_or(ms, |w: i64| w.min(ms))),
                Ok(_) => {}
                Err(e) => {
                    // A definite refusal (foreign data) is the caller's
                    // error; anything else is one missing vote.
                    if e.kind() == ErrorKind::WrongType {
                        last_err = Some(e);
                        break;
                    }
                    errors += 1;
                    last_err = Some(e);
                }
            }
        }
        let drift = lease / 100 + Duration::from_millis(2);
        let valid = lease
            .checked_sub(elapsed + drift)
            .is_some_and(|v| !v.is_zero());
        let q = Self::quorum(nodes.len());
        if grants >= q
            && valid
            && last_err
                .as_ref()
                .is_none_or(|e| e.kind() != ErrorKind::WrongType)
        {
            return Ok((1, best));
        }
        self.undo(nodes, &undo);
        if last_err
            .as_ref()
            .is_some_and(|e| e.kind() == ErrorKind::WrongType)
        {
            return Err(last_err.expect("checked above"));
        }
        if errors > nodes.len() - q {
            // Too many masters unreachable for any majority: report it
            // instead of waiting forever on an impossible quorum.
            let e = Error::new(
                ErrorKind::QuorumNotReached,
                format!(
                    "{errors} of {} Redlock masters failed; a majority is {q}",
                    nodes.len()
                ),
            );
            return Err(match last_err {
                Some(src) => e.with_source(src),
                None => e,
            });
        }
        // Split votes: retry soon, jittered so contenders fall out of step.
        let jitter = 5 + (uuid::Uuid::new_v4().as_u128() % 45) as i64;
        Ok((0, wait.map_or(jitter, |w| w.min(jitter.max(w / 4)))))
    }

    fn undo(&self, nodes: &[Node], undo: &Call<'_>) {
        let keys: Vec<&[u8]> = undo.keys.iter().map(|k| k.as_slice()).collect();
        let args: Vec<&[u8]> = undo.args.iter().map(|a| a.as_slice()).collect();
        on_all(nodes, |n| {
            let _ = n.eval::<Value>(undo.lua, &keys, &args);
        });
    }

    /// Redlock: masters count fences independently, so after a grant the
    /// counters of the granting masters are raised to the fence handed out.
    /// Any later majority shares a master with this one and so draws a
    /// larger fence. A no-op on one server.
    pub(crate) fn raise_fence(&self, key: &[u8], fence: i64) {
        if let Kind::Redlock(nodes) = &self.kind {
            let f = fence.to_string();
            on_all(nodes, |n| {
                let _ = n.eval::<i64>(&FENCE_RAISE, &[key], &[f.as_bytes()]);
            });
        }
    }

    /// Runs a confirming script (`1` done, `0` not ours). On Redlock: `1`
    /// when a majority confirms, `0` when so many masters deny that no
    /// majority can still hold it, otherwise `QuorumNotReached`.
    pub(crate) fn confirm(&self, call: Call<'_>) -> Result<i64> {
        let keys: Vec<&[u8]> = call.keys.iter().map(|k| k.as_slice()).collect();
        let args: Vec<&[u8]> = call.args.iter().map(|a| a.as_slice()).collect();
        match &self.kind {
            Kind::Single(node) => node.eval(call.lua, &keys, &args),
            Kind::Redlock(nodes) => {
                let votes = on_all(nodes, |n| n.eval::<i64>(call.lua, &keys, &args));
                combine(nodes.len(), votes.iter().map(|v| v.as_ref().ok().copied())).ok_or_else(
                    || {
                        Error::new(
                            ErrorKind::QuorumNotReached,
                            "too few Redlock masters answered to decide",
                        )
                    },
                )
            }
        }
    }

    /// Whether `key` exists (on a majority, on Redlock).
    pub(crate) fn exists(&self, key: &[u8]) -> Result<bool> {
        match &self.kind {
            Kind::Single(_) => self.query(redis::cmd("EXISTS").arg(key)),
            Kind::Redlock(nodes) => {
                let votes = on_all(nodes, |n| -> Result<i64> {
                    let mut con = n.conn()?;
                    Ok(redis::cmd("EXISTS").arg(key).query(&mut *con)?)
                });
                let yes = votes.iter().filter(|v| matches!(v, Ok(1))).count();
                Ok(yes >= Self::quorum(nodes.len()))
            }
        }
    }

    /// Many confirming calls in one round trip per server (renewal). Each
    /// reply is `Int(1)` (confirmed), `Int(0)` (denied), or `Nil`
    /// (undecided: retry later).
    pub(crate) fn eval_batch(&self, calls: &[Call<'_>]) -> Result<Vec<Value>> {
        match &self.kind {
            Kind::Single(node) => node.eval_batch(calls),
            Kind::Redlock(nodes) => {
                let per_node = on_all(nodes, |n| n.eval_batch(calls).ok());
                Ok((0..calls.len())
                    .map(|i| {
                        let votes = per_node.iter().map(|r| match r.as_ref().map(|v| &v[i]) {
                            Some(Value::Int(x)) => Some(*x),
                            _ => None,
                        });
                        match combine(nodes.len(), votes) {
                            Some(x) => Value::Int(x),
                            None => Value::Nil,
                        }
                    })
                    .collect())
            }
        }
    }

    /// A dedicated connection outside the pools (for the wake-up subscriber):
    /// on Redlock, to the first master that answers (releases publish on
    /// every master).
    pub(crate) fn dedicated(&self) -> Result<redis::Connection> {
        let nodes: &[Node] = match &self.kind {
            Kind::Single(node) => std::slice::from_ref(node),
            Kind::Redlock(nodes) => nodes,
        };
        let mut last = None;
        for n in nodes {
            match n.client.get_connection_with_timeout(self.timeouts.connect) {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.map_or_else(|| Error::invalid("no servers configured"), Error::from))
    }

    pub(crate) fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// Extra margin a lease loses to clock drift between independent
    /// masters (zero on one server).
    pub(crate) fn drift(&self, lease: Duration) -> Duration {
        match self.kind {
            Kind::Single(_) => Duration::ZERO,
            Kind::Redlock(_) => lease / 100 + Duration::from_millis(2),
        }
    }
}

/// Majority decision over 1/0 votes (`None` = no answer).
fn combine(n: usize, votes: impl Iterator<Item = Option<i64>>) -> Option<i64> {
    let q = Backend::quorum(n);
    let (mut yes, mut no) = (0, 0);
    for v in votes {
        match v {
            Some(1) => yes += 1,
            Some(_) => no += 1,
            None => {}
        }
    }
    if yes >= q {
        Some(1)
    } else if no > n - q {
        Some(0)
    } else {
        None
    }
}
