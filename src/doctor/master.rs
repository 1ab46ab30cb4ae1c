//! The checks of one master: server, round trip, clock, eviction policy,
//! scripts, pub/sub and replicas.

use std::fmt;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use redis::{ConnectionLike, FromRedisValue, Value};

use super::{refused, CheckStatus, Diagnosis, CLOCK_SLACK, SLOW_ROUND_TRIP};
use crate::backend::Node;
use crate::{Client, ErrorKind};

/// Whether a failed command means the server stopped answering (rather
/// than refusing the command): the checks of that master end there.
fn stopped(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped()
}

/// The server, round trip, clock, eviction policy, scripts, pub/sub and
/// replicas of one master, on a connection of its own; whether it kept
/// answering.
pub(super) fn check_master(
    client: &Client,
    node: &Node,
    d: &mut Diagnosis,
    offsets: &mut Vec<(String, f64)>,
) -> bool {
    let master = Master::new(client, node);
    let Some(mut con) = master.connect(d) else {
        return false;
    };
    let con: &mut dyn ConnectionLike = &mut con;
    master.server(con, d);
    let answered = master.round_trip(con, d)
        && master.clock(con, d, offsets)
        && master.eviction(con, d)
        && master.scripts(con, d);
    if answered {
        master.pubsub(con, d);
        master.replicas(con, d);
    }
    answered
}

/// One master under [`check_master`]: each check is a method, and those
/// that return `bool` say whether the server kept answering (its other
/// checks are not run once it stopped).
struct Master<'a> {
    client: &'a Client,
    node: &'a Node,
    addr: String,
    /// How a master that stops answering counts: a Redlock quorum
    /// survives one.
    down_status: CheckStatus,
    down_advice: &'static str,
}

impl<'a> Master<'a> {
    fn new(client: &'a Client, node: &'a Node) -> Master<'a> {
        let redlock = client.backend().is_redlock();
        Master {
            client,
            node,
            addr: node.addr(),
            down_status: if redlock {
                CheckStatus::Degraded
            } else {
                CheckStatus::Refused
            },
            down_advice: if redlock {
                "a Redlock master down: the others still form a majority, but one more loss stops every acquisition"
            } else {
                "the server does not answer in time: check its load (SLOWLOG, latency) and the network"
            },
        }
    }

    /// `what` could not be checked: the server stopped answering.
    fn gone(&self, d: &mut Diagnosis, what: &str, e: &dyn fmt::Display) {
        d.push(
            format!("{what} {}", self.addr),
            self.down_status,
            format!("the server stopped answering ({e}); its other checks were not run"),
            Some(self.down_advice),
        );
    }

    fn connect(&self, d: &mut Diagnosis) -> Option<impl ConnectionLike> {
        let addr = &self.addr;
        let redlock = self.client.backend().is_redlock();
        match self.node.open_spare(self.node.connect_timeout()) {
            Ok(c) => Some(c),
            Err(e) => {
                let auth = e.kind() == ErrorKind::Auth;
                d.push(
                    format!("connect {addr}"),
                    if auth { CheckStatus::Refused } else { self.down_status },
                    e.to_string(),
                    Some(if auth {
                        "check the user name and password (--password-file), and the ACL"
                    } else if redlock {
                        self.down_advice
                    } else {
                        "check that the server runs, the port, TLS (rediss:// and --tls-ca) and firewalls"
                    }),
                );
                None
            }
        }
    }

    /// The server's kind and version.
    fn server(&self, con: &mut dyn ConnectionLike, d: &mut Diagnosis) {
        let addr = &self.addr;
        match crate::backend::identify(con) {
            Some(id) => {
                let old = version_below(&id, (6, 2));
                d.push(
                    format!("server {addr}"),
                    CheckStatus::degraded_if(old),
                    id,
                    old.then_some(
                        "redlease is tested on Redis 6.2 and later and on Valkey; \
                         blocking grants need BLMOVE (6.2)",
                    ),
                );
            }
            None => d.push(
                format!("server {addr}"),
                CheckStatus::Ok,
                "kind and version not visible (HELLO and INFO refused)".into(),
                None,
            ),
        }
    }

    fn round_trip(&self, con: &mut dyn ConnectionLike, d: &mut Diagnosis) -> bool {
        let addr = &self.addr;
        // Round trip: the median of five PINGs.
        let mut trips = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            if redis::cmd("PING").query::<Value>(con).is_err() {
                break;
            }
            trips.push(t.elapsed());
        }
        trips.sort();
        if let Some(median) = trips.get(trips.len() / 2) {
            let slow = *median > SLOW_ROUND_TRIP;
            d.push(
                format!("round trip {addr}"),
                CheckStatus::degraded_if(slow),
                format!(
                    "median {:.2} ms, worst {:.2} ms of {}",
                    median.as_secs_f64() * 1e3,
                    trips.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
                    trips.len()
                ),
                slow.then_some("every acquisition, release and renewal costs a round trip: put the client near the server"),
            );
        } else {
            self.gone(d, "round trip", &"PING got no answer in time");
            return false;
        }
        true
    }

    fn clock(
        &self,
        con: &mut dyn ConnectionLike,
        d: &mut Diagnosis,
        offsets: &mut Vec<(String, f64)>,
    ) -> bool {
        let addr = &self.addr;
        // Clock offset: TIME against the middle of the round trip.
        let before = SystemTime::now();
        let time = redis::cmd("TIME").query::<(u64, u64)>(con);
        let after = SystemTime::now();
        match time {
            Ok((s, us)) => {
                let mid = |t: SystemTime| {
                    t.duration_since(UNIX_EPOCH)
                        .map(|d| d.as_secs_f64() * 1e3)
                        .unwrap_or(0.0)
                };
                let local = (mid(before) + mid(after)) / 2.0;
                let offset = s as f64 * 1e3 + us as f64 / 1e3 - local;
                offsets.push((self.addr.clone(), offset));
                let far = offset.abs() > CLOCK_SLACK.as_secs_f64() * 1e3;
                d.push(
                    format!("clock {addr}"),
                    CheckStatus::degraded_if(far),
                    // Rounded first: "-0 ms" said a sign that was not there.
                    match offset.round() as i64 {
                        0 => "server clock within 1 ms of this machine's".to_string(),
                        ms => format!("server clock {ms:+} ms from this machine's"),
                    },
                    far.then_some(
                        "leases are timed by the server's clock, so an offset alone is harmless, but \
                         it says NTP does not keep time here: a step would expire or stretch every lease",
                    ),
                );
            }
            Err(e) if stopped(&e) => {
                self.gone(d, "clock", &e);
                return false;
            }
            Err(e) => d.push(
                format!("clock {addr}"),
                CheckStatus::Ok,
                format!("not read ({e})"),
                None,
            ),
        }
        true
    }

    fn eviction(&self, con: &mut dyn ConnectionLike, d: &mut Diagnosis) -> bool {
        let addr = &self.addr;
        // Eviction: a lock key evicted is a lease silently ended.
        // An array on RESP2, a map on RESP3.
        let policy = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query::<Value>(con)
            .map(|v| match v {
                Value::Array(items) => items
                    .get(1)
                    .and_then(|v| String::from_redis_value(v.clone()).ok()),
                Value::Map(pairs) => pairs
                    .into_iter()
                    .next()
                    .and_then(|(_, v)| String::from_redis_value(v).ok()),
                _ => None,
            });
        match policy {
            Err(e) if stopped(&e) => {
                self.gone(d, "eviction", &e);
                return false;
            }
            Ok(Some(policy)) => {
                let evicts = policy.starts_with("allkeys-") || policy.starts_with("volatile-");
                d.push(
                    format!("eviction {addr}"),
                    CheckStatus::degraded_if(evicts),
                    format!("maxmemory-policy {policy}"),
                    evicts.then_some(
                        "under memory pressure Redis may evict lock keys, ending leases unseen until \
                         the next renewal: use noeviction (or a server of its own for locks)",
                    ),
                );
            }
            _ => d.push(
                format!("eviction {addr}"),
                CheckStatus::Ok,
                "policy not visible (CONFIG refused); it should be noeviction".into(),
                None,
            ),
        }
        true
    }

    fn scripts(&self, con: &mut dyn ConnectionLike, d: &mut Diagnosis) -> bool {
        let addr = &self.addr;
        // Scripts: every primitive is a script.
        let loaded = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg("return 1")
            .query::<String>(con);
        let ran = loaded
            .as_ref()
            .map(|sha| redis::cmd("EVALSHA").arg(sha).arg(0).query::<Value>(con));
        let hung = match (&loaded, &ran) {
            (Err(e), _) | (Ok(_), Ok(Err(e))) if stopped(e) => Some(e.to_string()),
            _ => None,
        };
        if let Some(e) = hung {
            self.gone(d, "scripts", &e);
            return false;
        }
        match (&loaded, ran) {
            (Ok(_), Ok(Ok(Value::Int(1)))) => d.push(
                format!("scripts {addr}"),
                CheckStatus::Ok,
                "SCRIPT LOAD and EVALSHA".into(),
                None,
            ),
            (Err(e), _) => d.push(
                format!("scripts {addr}"),
                CheckStatus::Refused,
                format!("SCRIPT LOAD refused: {e}"),
                Some(
                    "every primitive is a Lua script, and renewals and multi-locks load theirs in \
                     their pipelines: allow +script|load +evalsha +eval",
                ),
            ),
            (Ok(_), other) => d.push(
                format!("scripts {addr}"),
                CheckStatus::Refused,
                format!("EVALSHA failed: {other:?}"),
                Some("every primitive is a Lua script: allow +evalsha +eval"),
            ),
        }
        true
    }

    fn pubsub(&self, con: &mut dyn ConnectionLike, d: &mut Diagnosis) {
        let addr = &self.addr;
        // Pub/sub: a publish to a channel under the prefix nobody listens on,
        // then a subscription on a connection that is closed afterwards.
        let mut channel = self.client.prefix().to_vec();
        channel.extend_from_slice(b"redlease:wake-doctor");
        let published = redis::cmd("PUBLISH")
            .arg(&channel)
            .arg("doctor")
            .query::<Value>(con);
        // On RESP3 the confirmation comes as a push, which a plain call does
        // not read: not tried there.
        let sub_refused = if self.node.resp3() {
            None
        } else {
            let subscribed = self
                .node
                .open_spare(self.node.connect_timeout())
                .map(|mut sub| {
                    // Dropped after: a subscribed connection must not serve calls.
                    redis::cmd("SUBSCRIBE")
                        .arg(&channel)
                        .query::<Value>(&mut sub)
                });
            match &subscribed {
                Ok(r) => refused(r),
                Err(e) => Some(e.to_string()),
            }
        };
        match (refused(&published), sub_refused) {
            (None, None) => d.push(
                format!("pub/sub {addr}"),
                CheckStatus::Ok,
                if self.node.resp3() {
                    "PUBLISH (SUBSCRIBE not tried on a RESP3 connection)".into()
                } else {
                    "PUBLISH and SUBSCRIBE".into()
                },
                None,
            ),
            (p, s) => d.push(
                format!("pub/sub {addr}"),
                CheckStatus::Degraded,
                format!(
                    "refused: {}",
                    [
                        p.map(|p| format!("PUBLISH ({p})")),
                        s.map(|s| format!("SUBSCRIBE ({s})"))
                    ]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(", ")
                ),
                Some(
                    "read-lock, semaphore and latch waiters then look again only every fallback_poll: \
                     allow +publish +subscribe and the channels &<prefix>redlease:wake*",
                ),
            ),
        }
    }

    /// Replicas, for replica_ack: how many the master sees, and whether
    /// `WAIT` answers.
    fn replicas(&self, con: &mut dyn ConnectionLike, d: &mut Diagnosis) {
        let addr = &self.addr;
        // Replicas, for replica_ack: how many the master sees, and whether
        // WAIT answers.
        let info = redis::cmd("INFO").arg("replication").query::<String>(con);
        let info_failed = info
            .as_ref()
            .err()
            .map(|e| crate::error::without_script_hash(&e.to_string()));
        let replication = info.ok();
        // Each replica as the master sees it (`slave0:ip=..,port=..,state=
        // online,offset=..,lag=1`): a failover promotes one of these, and a
        // lease it has not received yet is lost with the old master.
        for line in replication.iter().flat_map(|i| i.lines()) {
            let Some((_, fields)) = line
                .trim()
                .split_once(':')
                .filter(|(k, _)| k.starts_with("slave") && k[5..].parse::<u32>().is_ok())
            else {
                continue;
            };
            let field = |name: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                    .unwrap_or("?")
            };
            let (state, lag) = (field("state"), field("lag"));
            let behind = state != "online" || lag.parse::<u64>().map_or(true, |l| l > 1);
            d.push(
                format!("replica {}:{} of {addr}", field("ip"), field("port")),
                CheckStatus::degraded_if(behind),
                format!("{state}, {lag} s behind"),
                behind.then_some(
                    "a replica that lags loses the leases it has not received if it is promoted: \
                     check the link and the replica's load (replica_ack waits for replicas)",
                ),
            );
        }
        let replicas = replication.as_deref().and_then(|info| {
            info.lines().find_map(|l| {
                l.trim()
                    .strip_prefix("connected_slaves:")?
                    .parse::<u32>()
                    .ok()
            })
        });
        let waited = redis::cmd("WAIT")
            .arg(replicas.unwrap_or(0))
            .arg(100)
            .query::<Value>(con);
        let want = self.client.backend().replica_ack();
        let seen = match (&waited, replicas) {
            (Ok(Value::Int(n)), _) => Some(*n as u32),
            (_, r) => r,
        };
        let wait_refused = refused(&waited);
        let (status, advice) = match (want, seen, &wait_refused) {
            (Some(_), _, Some(_)) => (
                CheckStatus::Refused,
                Some("replica_ack needs WAIT: allow +wait, or turn replica_ack off"),
            ),
            (Some(n), Some(k), None) if k < n => (
                CheckStatus::Refused,
                Some("replica_ack wants more replicas than acknowledge: every grant would fail"),
            ),
            // Not checked is not passed: a flood in answer to INFO, or a
            // WAIT that failed, showed as `ok`.
            (_, None, _) | (None, _, Some(_)) => (
                CheckStatus::Degraded,
                Some("the replicas could not be checked: see why above, and run doctor again"),
            ),
            _ => (CheckStatus::Ok, None),
        };
        d.push(
            format!("replicas {addr}"),
            status,
            format!(
                "{} acknowledging{}{}{}",
                seen.map_or("unknown".to_string(), |k| k.to_string()),
                match want {
                    Some(n) => format!("; replica_ack wants {n}"),
                    None => String::new(),
                },
                match &wait_refused {
                    Some(w) => format!("; WAIT refused ({w})"),
                    None => String::new(),
                },
                match &info_failed {
                    Some(e) => format!("; INFO failed ({e})"),
                    None => String::new(),
                }
            ),
            advice,
        );
    }
}

/// Whether `id` (`Redis 6.0.9`) is a Redis older than `min`; Valkey is
/// never older than Redis 7.2.
fn version_below(id: &str, min: (u32, u32)) -> bool {
    let Some(v) = id.strip_prefix("Redis ") else {
        return false;
    };
    let mut n = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (n.next().unwrap_or(0), n.next().unwrap_or(0)) < min
}
