//! Sharded pub/sub on Cluster: whether wake-ups go over `SPUBLISH` and
//! shard channels (decided once, when the client is built, alike for every
//! client of one deployment), and the masters the shard subscriber links
//! reach.

use std::sync::Arc;
use std::time::Duration;

use super::super::wire::Wire;
use super::{redirected, ClusterLeader};
use crate::error::{Error, ErrorKind, Result};

/// What a `SPUBLISH` probe's reply says about sharded pub/sub: `Some(true)`
/// when the server knows the command and lets us use it (it ran, or was
/// redirected), `Some(false)` when it refuses it (unknown command, ACL),
/// `None` when it could not answer now.
fn sharding_answer(reply: &redis::RedisResult<i64>) -> Option<bool> {
    let e = match reply {
        Ok(_) => return Some(true),
        Err(e) => e,
    };
    match e.code() {
        Some(code) if redirected(code) => Some(true),
        Some("NOPERM") => Some(false),
        Some("ERR") if e.detail().is_some_and(|d| d.contains("unknown command")) => Some(false),
        _ => None,
    }
}

impl ClusterLeader {
    /// Decides whether wake-ups go over sharded pub/sub: where the servers
    /// take a `SPUBLISH` on a shard channel under `base` (Redis 7, and an
    /// ACL that allows it), and a subscriber connection can be ours on
    /// plain TCP, one thread reading it while others subscribe on it (see
    /// `Wire::split`). Otherwise classic pub/sub, as before. Every client
    /// of one deployment (same servers, same ACL) must decide alike, so
    /// that publishers and subscribers agree: only a definite answer
    /// counts. The probe goes to each seed in turn until one gives one: the
    /// command ran, or was redirected (`MOVED`, `ASK`, `CLUSTERDOWN`,
    /// `TRYAGAIN` come after the command and ACL checks), or was refused
    /// (unknown command, `NOPERM`); a seed that cannot answer now (down,
    /// slow, loading, paused) decides nothing. If none answers within a
    /// few rounds, Redis 7 is assumed, with a warning. The probe message
    /// has no subscriber and, being sharded, crosses no bus.
    pub(crate) fn detect_sharding(&self, base: &[u8]) {
        let plain = self.seeds.iter().all(|s| {
            let info = s.get_connection_info();
            matches!(info.addr(), redis::ConnectionAddr::Tcp(..))
                && !info.redis_settings().protocol().supports_resp3()
        });
        let decided = if plain {
            self.probe_sharding(&[base, b":{redlease}"].concat())
        } else {
            false
        };
        self.sharded
            .store(decided, std::sync::atomic::Ordering::Relaxed);
    }

    fn probe_sharding(&self, channel: &[u8]) -> bool {
        let t = &self.masters.timeouts;
        for round in 0..3 {
            if round > 0 {
                std::thread::sleep(Duration::from_millis(100 * round));
            }
            for seed in &self.seeds {
                let Ok(mut con) = seed.get_connection_with_timeout(t.connect) else {
                    continue;
                };
                if con.set_read_timeout(Some(t.response)).is_err()
                    || con.set_write_timeout(Some(t.response)).is_err()
                {
                    continue;
                }
                let reply = redis::cmd("SPUBLISH")
                    .arg(channel)
                    .arg("")
                    .query::<i64>(&mut con);
                if let Some(sharded) = sharding_answer(&reply) {
                    return sharded;
                }
            }
        }
        log::warn!(
            "redlease: no cluster node answered whether it takes SPUBLISH; assuming Redis 7 \
             (sharded wake-ups)"
        );
        true
    }

    /// Whether wake-ups go over sharded pub/sub (`SPUBLISH` to a channel
    /// in the name's slot, `SSUBSCRIBE` on its master): a release then
    /// reaches the clients waiting on that name through that master alone,
    /// where a classic `PUBLISH` is broadcast to every node of the cluster.
    pub(crate) fn sharded(&self) -> bool {
        self.sharded.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The address of the master serving `key`'s slot, in our slot map
    /// (read first if stale, at most once a second): where its shard
    /// channel is subscribed.
    pub(crate) fn shard_master(&self, key: &[u8]) -> Option<Arc<str>> {
        self.masters.addr_of(key)
    }

    /// A subscriber connection to the master at `addr`, opened within
    /// `connect` (and the connect timeout), split into its reader and a
    /// writer (see [`Wire::split`]).
    pub(crate) fn shard_link(
        &self,
        addr: &str,
        connect: Duration,
    ) -> Result<(Wire, std::net::TcpStream)> {
        let t = &self.masters.timeouts;
        let client = self.masters.client_at(addr);
        let wire = Wire::open(&client, &t.tls, connect.min(t.connect), t.response)?;
        wire.split(t.response).ok_or_else(|| {
            Error::new(
                ErrorKind::Unsupported,
                "sharded wake-ups need a plain TCP connection",
            )
        })
    }

    /// The master at `addr` did not answer a subscriber connection: the
    /// slot map is to be read again, asking it last.
    pub(crate) fn shard_failed(&self, addr: &str) {
        let node = {
            let state = crate::util::mutex::lock(&self.masters.state);
            state.nodes.get(addr).cloned()
        };
        match node {
            Some(node) => self.masters.suspect(&node),
            None => self.shard_moved(),
        }
    }

    /// A shard channel moved: the slot map is to be read again.
    pub(crate) fn shard_moved(&self) {
        crate::util::mutex::lock(&self.masters.state).stale = true;
    }
}
