//! Where commands go: one pooled Redis server (fixed or behind Sentinels),
//! a Redis Cluster, or a Redlock quorum of independent masters.
//!
//! The backend speaks scripts, keys and arguments only; it knows nothing of
//! locks. Scripts that *grant* reply a fence or a wait ([`Answer`]); scripts
//! that *confirm* (release, extend) reply `1` or `0`. On one server those
//! replies pass through; on Redlock they are votes, combined by majority,
//! so a primitive written against these calls works on every topology.
//!
//! Every failed call is classified (see [`Error::is_unsent`] and
//! [`Error::is_ambiguous`]); deciding whether to repeat it is the lease
//! lifecycle's job (`lease/`), which knows that every granting script
//! re-grants the same hold to the same token.

mod call;
#[cfg(feature = "cluster")]
mod cluster;
mod fan_out;
mod node;
mod pool;
mod redlock;
#[cfg(feature = "sentinel")]
mod sentinel;
mod settings;
mod slots;
mod source;
mod wire;

use std::time::{Duration, Instant};

use redis::{FromRedisValue, Value};

use std::sync::Arc;

use crate::error::{redact_url, Error, ErrorKind, Result};
pub(crate) use crate::protocol::scripts::Args;

pub(crate) use crate::protocol::answer::Answer;
pub(crate) use call::{Call, GrantCall, Joined, JoinedArgs, PreparedCall};
pub(crate) use node::{identify, Blocked, BlockingGrant, BlockingLook, Node, Pop};
pub(crate) use pool::Manager;
use redlock::Redlock;
pub(crate) use settings::{Timeouts, Tls};
pub(crate) use wire::Wire;

enum Kind {
    Single(Box<Node>),
    #[cfg(feature = "cluster")]
    Cluster(Box<cluster::ClusterLeader>),
    Redlock(Redlock),
}

/// The servers a client talks to.
pub(crate) struct Backend {
    kind: Kind,
    timeouts: Timeouts,
    /// Make grants wait for this many replicas (one leader only).
    replica_ack: Option<(u32, Duration)>,
    /// Where the servers are, passwords redacted: every error says it.
    place: Arc<str>,
    /// The topology's name, for `Client::capabilities`.
    shape: &'static str,
}

/// See [`Backend::fence_floor`].
pub(crate) fn fence_floor(counter: &[u8], cluster: bool) -> Vec<u8> {
    let open = counter.iter().position(|&b| b == b'{').unwrap_or(0);
    let mut floor = counter[..open].to_vec();
    if cluster {
        floor.push(b'{');
        floor.extend_from_slice(slots::slot_tag(slots::key_slot(counter)).as_bytes());
        floor.push(b'}');
    }
    floor.extend_from_slice(crate::protocol::keys::FENCE_FLOOR.as_bytes());
    floor
}

/// `urls` redacted and joined, for error messages.
fn places(urls: &[String]) -> String {
    urls.iter()
        .map(|u| redact_url(u))
        .collect::<Vec<_>>()
        .join(", ")
}

fn unsupported() -> Error {
    Error::new(
        ErrorKind::Unsupported,
        "this operation needs a single leader (one server, Sentinel or Cluster); \
         on Redlock only the exclusive lock is supported",
    )
}

impl Backend {
    pub(crate) fn single(url: &str, pool_size: u32, timeouts: Timeouts) -> Result<Backend> {
        let node = Node::open(url, pool_size, timeouts.clone(), false)?;
        Ok(Backend {
            kind: Kind::Single(Box::new(node)),
            timeouts,
            replica_ack: None,
            place: redact_url(url).into(),

            shape: "single server",
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
        if urls.is_empty() {
            return Err(Error::invalid("Sentinel needs at least one sentinel URL"));
        }
        let mut infos = Vec::with_capacity(urls.len());
        for u in urls {
            source::refuse_insecure(u)?;
            let info =
                redis::IntoConnectionInfo::into_connection_info(u.as_str()).map_err(|e| {
                    let why =
                        crate::error::url_trouble(u).map_or(String::new(), |t| format!(": {t}"));
                    Error::invalid(format!("cannot use sentinel URL {:?}{why}", redact_url(u)))
                        .with_source(e)
                })?;
            infos.push(info);
        }
        // The builder takes one set of Sentinel credentials for all.
        let auth = |i: &redis::ConnectionInfo| {
            let r = i.redis_settings();
            (
                r.username().map(String::from),
                r.password().map(String::from),
            )
        };
        let (user, pass) = auth(&infos[0]);
        if infos
            .iter()
            .any(|i| auth(i) != (user.clone(), pass.clone()))
        {
            return Err(Error::invalid(
                "all sentinel URLs must carry the same username and password",
            ));
        }
        let tls =
            |i: &redis::ConnectionInfo| matches!(i.addr(), redis::ConnectionAddr::TcpTls { .. });
        let secure = tls(&infos[0]);
        if infos.iter().any(|i| tls(i) != secure) {
            return Err(Error::invalid(
                "sentinel URLs must be all rediss:// or all redis://",
            ));
        }
        let mut settings = redis::RedisConnectionInfo::default();
        if let Some((user, pass)) = master_auth {
            if let Some(user) = user {
                settings = settings.set_username(user);
            }
            settings = settings.set_password(pass);
        }
        let sentinels = sentinel::Sentinels::new(infos, master, settings, secure, timeouts.clone())
            .map_err(|e| Error::invalid("invalid Sentinel configuration").with_source(e))?;
        let source = source::Source::Sentinel(sentinels);
        Ok(Backend {
            kind: Kind::Single(Box::new(Node::with_source(
                source,
                pool_size,
                timeouts.clone(),
                false,
            ))),
            timeouts,
            replica_ack: None,
            place: format!("Sentinel master {master:?} via {}", places(urls)).into(),

            shape: "Sentinel",
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
            place: format!("Redlock masters {}", places(urls)).into(),

            shape: "Redlock",
        })
    }

    #[cfg(feature = "cluster")]
    pub(crate) fn cluster(urls: &[String], pool_size: u32, timeouts: Timeouts) -> Result<Backend> {
        let leader = cluster::ClusterLeader::open(urls, pool_size, timeouts.clone())?;
        Ok(Backend {
            kind: Kind::Cluster(Box::new(leader)),
            timeouts,
            replica_ack: None,
            place: format!("Cluster via {}", places(urls)).into(),

            shape: "Cluster",
        })
    }

    /// Checks that the servers answer (a majority, on Redlock), warning
    /// about eviction policies on the way.
    pub(crate) fn check(&self) -> Result<()> {
        let place = &self.place;
        (match &self.kind {
            Kind::Single(node) => node.check(),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.check(),
            Kind::Redlock(r) => r.check(),
        })
        .map_err(|e| e.at(place))
    }

    /// The fence floor for the fencing counter `counter` (lua/fence.lua):
    /// `<prefix>redlease:fence-floor`, one per server; on Cluster one per
    /// slot, `<prefix>{<tag>}redlease:fence-floor` with a tag in the
    /// counter's slot, so that a script may touch both. The prefix is what
    /// comes before the counter's `{` (a key prefix has none).
    pub(crate) fn fence_floor(&self, counter: &[u8]) -> Vec<u8> {
        fence_floor(counter, self.is_cluster())
    }

    /// A pooled connection to the one server (or the Sentinels' master),
    /// for the application's own commands.
    pub(crate) fn lend(&self) -> Result<r2d2::PooledConnection<Manager>> {
        match &self.kind {
            Kind::Single(node) => node.lend().map_err(|e| e.at(&self.place)),
            _ => Err(Error::new(
                ErrorKind::Unsupported,
                "a pooled connection is lent on one server or Sentinel only: on Cluster and \
                 Redlock a command's server depends on its keys (use a client of your own there)",
            )),
        }
    }

    /// The topology: `single server`, `Sentinel`, `Cluster` or `Redlock`.
    pub(crate) fn shape(&self) -> &'static str {
        self.shape
    }

    /// The replicas every grant waits for, if any (see `replica_ack`).
    pub(crate) fn replica_ack(&self) -> Option<u32> {
        self.replica_ack.map(|(n, _)| n)
    }

    /// Calls `f` with every master: the server, the Sentinels' master,
    /// each Cluster master in the current slot map, each Redlock master.
    pub(crate) fn each_master(&self, f: &mut dyn FnMut(&Node)) {
        match &self.kind {
            Kind::Single(node) => f(node),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => {
                for node in c.masters_now() {
                    f(&node);
                }
            }
            Kind::Redlock(r) => r.nodes().iter().for_each(f),
        }
    }

    /// What the servers say they are (`Redis 7.0.15`), as learned when the
    /// client was built; each different answer once.
    pub(crate) fn identities(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut add = |id: Option<&str>| {
            if let Some(id) = id {
                if !out.iter().any(|o| o == id) {
                    out.push(id.to_owned());
                }
            }
        };
        match &self.kind {
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => add(c.identity()),
            _ => self.each_master(&mut |n| add(n.identity())),
        }
        out
    }

    /// Whether this backend is a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        match &self.kind {
            #[cfg(feature = "cluster")]
            Kind::Cluster(_) => true,
            _ => false,
        }
    }

    /// Several grants in one pipeline (a multi-lock's names), at most one
    /// response timeout: a late batch gets `undo` (`undo[i]` undoes
    /// `calls[i]`) written behind it on the same connection (see
    /// `Node::eval_batch_undone`). One server
    /// ([`Backend::pipelines_grants`]), or one pipeline per master, all at
    /// once, on Cluster ([`Backend::pipelines_grants_per_master`]).
    pub(crate) fn grant_batch(&self, calls: &[Call<'_>], undo: &[Call<'_>]) -> Result<Vec<Value>> {
        let place = &self.place;
        (match &self.kind {
            Kind::Single(node) => {
                node.eval_batch_undone(calls, self.timeouts().response, Some(undo))
            }
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.grant_batch(calls, undo),
            _ => Err(unsupported()),
        })
        .map_err(|e| e.at(place))
    }

    /// Whether several grants (or releases) may go to the server in one
    /// pipeline: one server, no replica acknowledgements to wait for.
    pub(crate) fn pipelines_grants(&self) -> bool {
        matches!(self.kind, Kind::Single(_)) && self.replica_ack.is_none()
    }

    /// Whether several grants may go as one pipeline per master, all
    /// masters at once ([`Backend::grant_batch`]): on Cluster, without
    /// replica acknowledgements.
    pub(crate) fn pipelines_grants_per_master(&self) -> bool {
        self.is_cluster() && self.replica_ack.is_none()
    }

    /// The claim window the release `call` gave its hand-over, sent now
    /// (`protocol::timing::hand_over_claim`): longer on Cluster for a
    /// script that names it (`Lua::claim_arg`) right after the name's slot
    /// was seen moving.
    #[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
    pub(crate) fn hand_over_claim(&self, call: &Call<'_>) -> Duration {
        let settled = match &self.kind {
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.settled_claim(call),
            _ => None,
        };
        settled.unwrap_or(crate::protocol::timing::GRANT_CLAIM)
    }

    pub(crate) fn is_redlock(&self) -> bool {
        matches!(self.kind, Kind::Redlock(_))
    }

    /// Whether wake-ups go over sharded pub/sub: on a Redis 7 Cluster
    /// reached over plain TCP (see `ClusterLeader::sharded`).
    pub(crate) fn sharded(&self) -> bool {
        match &self.kind {
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.sharded(),
            _ => false,
        }
    }

    /// Decides whether wake-ups on channels under `base` go over sharded
    /// pub/sub (see `ClusterLeader::detect_sharding`).
    pub(crate) fn detect_sharding(&self, base: &[u8]) {
        #[cfg(feature = "cluster")]
        if let Kind::Cluster(c) = &self.kind {
            c.detect_sharding(base);
        }
        let _ = base;
    }

    /// Where `key`'s shard channel is subscribed: the address of the
    /// master serving its slot, if known now.
    pub(crate) fn shard_master(&self, key: &[u8]) -> Option<Arc<str>> {
        match &self.kind {
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.shard_master(key),
            _ => {
                let _ = key;
                None
            }
        }
    }

    /// A subscriber connection to the master at `addr`, opened within
    /// `connect` (and the connect timeout): a reader and a writer on one
    /// socket (see `Wire::split`).
    pub(crate) fn shard_link(
        &self,
        addr: &str,
        connect: Duration,
    ) -> Result<(Wire, std::net::TcpStream)> {
        match &self.kind {
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.shard_link(addr, connect),
            _ => {
                let _ = connect;
                Err(Error::new(
                    ErrorKind::Unsupported,
                    format!("sharded wake-ups need Redis Cluster ({addr})"),
                ))
            }
        }
    }

    /// A shard channel moved: the slot map is read again before the next
    /// subscription.
    pub(crate) fn shard_moved(&self) {
        #[cfg(feature = "cluster")]
        if let Kind::Cluster(c) = &self.kind {
            c.shard_moved();
        }
    }

    /// The master at `addr` did not answer a subscriber connection: the
    /// slot map is read again, asking it last.
    pub(crate) fn shard_failed(&self, addr: &str) {
        #[cfg(feature = "cluster")]
        if let Kind::Cluster(c) = &self.kind {
            c.shard_failed(addr);
        }
        let _ = addr;
    }

    /// Runs one script on the key's leader, tried again on a fresh
    /// connection if the first was found dropped: only for scripts that
    /// are harmless to repeat (reads, clean-ups). Not on Redlock.
    pub(crate) fn eval<T: FromRedisValue>(&self, call: &Call<'_>) -> Result<T> {
        self.eval_by(call, None)
    }

    /// [`Backend::eval`] for a caller with a deadline (a waiter's look):
    /// on one server its wait for a connection ends with the deadline and
    /// one response timeout, as a grant's does, not after a whole connect
    /// timeout. On Cluster every call is bounded by one response timeout.
    pub(crate) fn eval_by<T: FromRedisValue>(
        &self,
        call: &Call<'_>,
        deadline: Option<Instant>,
    ) -> Result<T> {
        let place = &self.place;
        (match &self.kind {
            Kind::Single(node) => node.eval(call, deadline),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.eval(call),
            Kind::Redlock(_) => Err(unsupported()),
        })
        .map_err(|e| e.at(place))
    }

    /// Runs one plain command on the leader (not on Redlock).
    pub(crate) fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        self.query_by(cmd, None)
    }

    /// [`Backend::query`] for a caller with a deadline (see
    /// [`Backend::eval_by`]).
    pub(crate) fn query_by<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        deadline: Option<Instant>,
    ) -> Result<T> {
        let place = &self.place;
        (match &self.kind {
            Kind::Single(node) => node.query(cmd, deadline),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.query(cmd),
            Kind::Redlock(_) => Err(unsupported()),
        })
        .map_err(|e| e.at(place))
    }

    /// Runs a granting script once (see [`GrantCall`]): a fence or a wait
    /// ([`Answer`]).
    pub(crate) fn grant(&self, g: &GrantCall<'_>) -> Result<Answer> {
        let place = &self.place;
        let (call, undo, deadline) = (&g.call, g.undo, g.deadline);
        (match (&self.kind, self.replica_ack) {
            (Kind::Redlock(r), _) => r.grant(g),
            (Kind::Single(node), Some((replicas, timeout))) => {
                node.grant_acked(call, undo, replicas, timeout, deadline)
            }
            (Kind::Single(node), None) => node.call(call, Some(undo), deadline),
            #[cfg(feature = "cluster")]
            (Kind::Cluster(c), _) => c.grant(call, undo, deadline),
        })
        .map_err(|e| e.at(place))
    }

    /// Whether waiters can block on the server for a direct grant (one
    /// leader per name whose connection we own: a single server, the
    /// Sentinels' master, or a Cluster master found in our own slot map;
    /// and no replica acknowledgement to wait for after a grant).
    pub(crate) fn grants_directly(&self) -> bool {
        match &self.kind {
            Kind::Single(node) => self.replica_ack.is_none() && node.blocks(),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => self.replica_ack.is_none() && c.grants_directly(),
            Kind::Redlock(_) => false,
        }
    }

    /// [`Backend::grant`] for a queued waiter: first blocks up to `block`
    /// for a grant pushed onto the name's open list, which the pop alone
    /// takes (a lock) or the script run in the same round trip does (see
    /// `Node::grant_blocking`). Only where [`Backend::grants_directly`].
    pub(crate) fn grant_blocking(&self, grant: &BlockingGrant<'_>) -> Result<Blocked> {
        let place = &self.place;
        (match &self.kind {
            Kind::Single(node) if self.replica_ack.is_none() => node.grant_blocking(grant),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) if self.replica_ack.is_none() => c.grant_blocking(grant),
            _ => Err(unsupported()),
        })
        .map_err(|e| e.at(place))
    }

    /// A look that blocks up to `block` for an announcement pushed onto
    /// `list` (a latch's opening; see `Node::look_blocking`): the look's
    /// reply, and whether the pop took the announcement. Only on one
    /// server (or the Sentinels' master), where
    /// [`Backend::grants_directly`]: a latch on Cluster waits on its shard
    /// channel (see `CountDownLatch`).
    pub(crate) fn look_blocking(&self, look: &BlockingLook<'_>) -> Result<(Value, bool)> {
        let place = &self.place;
        (match &self.kind {
            Kind::Single(node) if self.replica_ack.is_none() => node.look_blocking(look),
            _ => Err(unsupported()),
        })
        .map_err(|e| e.at(place))
    }

    /// Runs a script once on the key's leader (never repeated: for scripts
    /// that are not safe to run twice). Not on Redlock.
    pub(crate) fn once<T: FromRedisValue>(&self, call: &Call<'_>) -> Result<T> {
        let place = &self.place;
        (match &self.kind {
            Kind::Single(node) => node.call(call, None, None),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.once(call),
            Kind::Redlock(_) => Err(unsupported()),
        })
        .map_err(|e| e.at(place))
    }

    /// Runs a confirming script once (`1` done, `0` not ours); on Redlock
    /// by majority.
    pub(crate) fn confirm(&self, call: &Call<'_>) -> Result<i64> {
        let place = &self.place;
        (match &self.kind {
            Kind::Redlock(r) => r.confirm(call),
            Kind::Single(node) => node.call(call, None, None),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.once(call),
        })
        .map_err(|e| e.at(place))
    }

    /// Whether `key` exists (on a majority, on Redlock).
    pub(crate) fn exists(&self, key: &[u8]) -> Result<bool> {
        let place = &self.place;
        (match &self.kind {
            Kind::Redlock(r) => Ok(r.exists(key)),
            _ => self.query(redis::cmd("EXISTS").arg(key)),
        })
        .map_err(|e| e.at(place))
    }

    /// Many confirming calls in one round trip per server (renewal), waiting
    /// at most `limit`. Each reply is `Int(1)` (confirmed), `Int(0)`
    /// (denied), or anything else (undecided: retry later).
    pub(crate) fn eval_batch(&self, calls: &[Call<'_>], limit: Duration) -> Result<Vec<Value>> {
        let place = &self.place;
        (match &self.kind {
            Kind::Single(node) => node.eval_batch(calls, limit),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.eval_batch(calls, limit),
            Kind::Redlock(r) => Ok(r.eval_batch(calls, limit)),
        })
        .map_err(|e| e.at(place))
    }

    /// The wake-up subscriber's connection: redlease's own on every
    /// topology (plain TCP and TLS), whose every value is bounded in time
    /// and size; redis-rs's only for Unix sockets and RESP3 URLs. On
    /// Redlock the first master that answers (releases publish on every
    /// master); on Cluster the first seed (classic pub/sub reaches every
    /// node).
    pub(crate) fn subscriber(&self) -> Result<Wire> {
        let t = self.timeouts.connect;
        let place = &self.place;
        (match &self.kind {
            Kind::Single(node) => node.subscriber(t),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.subscriber(t),
            Kind::Redlock(r) => r.subscriber(t),
        })
        .map_err(|e| e.at(place))
    }

    pub(crate) fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// What a lease loses to clock drift between independent masters
    /// (zero with a single leader), at acquisition and at every renewal.
    pub(crate) fn drift(&self, lease: Duration) -> Duration {
        match self.kind {
            Kind::Redlock(_) => crate::protocol::quorum::drift(lease),
            _ => Duration::ZERO,
        }
    }
}
