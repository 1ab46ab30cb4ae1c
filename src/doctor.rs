//! [`Client::diagnose`]: whether every guarantee can hold on these servers,
//! checked as the application would meet them (same URL, TLS, user,
//! prefix). `redlease doctor` prints it.
//!
//! It writes only scratch names under the prefix (`redlease-doctor-<id>`)
//! and deletes them, and runs nothing that touches other applications'
//! state: no `SCRIPT FLUSH`, no `CONFIG SET`, no `FLUSH*`.

use std::fmt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{ConnectionLike, FromRedisValue, Value};

use crate::backend::Node;
use crate::{Client, ErrorKind};

/// How one check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum CheckStatus {
    /// Works as documented.
    Ok,
    /// Works, with a guarantee, or the speed, reduced (see the advice).
    Degraded,
    /// The library cannot work here until this is fixed.
    Refused,
}

impl CheckStatus {
    /// `Degraded` if `cond`, else `Ok`.
    fn degraded_if(cond: bool) -> CheckStatus {
        if cond {
            CheckStatus::Degraded
        } else {
            CheckStatus::Ok
        }
    }

    /// `ok`, `degraded` or `refused`.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Ok => "ok",
            CheckStatus::Degraded => "degraded",
            CheckStatus::Refused => "refused",
        }
    }
}

/// One line of a [`Diagnosis`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Check {
    /// What was checked, and where: `scripts 127.0.0.1:6379`.
    pub name: String,
    /// How it came out.
    pub status: CheckStatus,
    /// What was found.
    pub detail: String,
    /// What to do, when it is not `Ok`.
    pub advice: Option<String>,
}

/// Every check [`Client::diagnose`] ran, in order.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Diagnosis {
    /// The checks, in the order they ran.
    pub checks: Vec<Check>,
}

impl Diagnosis {
    /// The worst status of any check (`Ok` when there are none).
    pub fn status(&self) -> CheckStatus {
        self.checks
            .iter()
            .map(|c| c.status)
            .max()
            .unwrap_or(CheckStatus::Ok)
    }

    fn push(&mut self, name: String, status: CheckStatus, detail: String, advice: Option<&str>) {
        self.checks.push(Check {
            name,
            status,
            detail,
            advice: advice.map(str::to_owned),
        });
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<9} {}: {}",
            self.status.as_str(),
            self.name,
            self.detail
        )?;
        if let Some(a) = &self.advice {
            write!(f, " -- {a}")?;
        }
        Ok(())
    }
}

/// What to do when the server refuses blocking pops.
const BLOCKING_REFUSED: &str = "lock waiters fall back to release messages (slower hand-overs, \
     a look every fallback_poll): allow +blpop +blmove +lpop +rpush as the README's ACL line does";

/// The clock offset beyond which NTP is not keeping time here.
const CLOCK_SLACK: Duration = Duration::from_secs(1);
/// The median round trip beyond which every wait and renewal is slow.
const SLOW_ROUND_TRIP: Duration = Duration::from_millis(50);

/// A server error's code (`NOPERM`, `ERR`), or `None` for a value.
fn refused(v: &redis::RedisResult<Value>) -> Option<String> {
    match v {
        Ok(Value::ServerError(e)) => Some(format!("{} {}", e.code(), e.details().unwrap_or(""))),
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}

impl Client {
    /// Checks, as this application meets them, everything the library
    /// relies on: each master's kind and version, round trip and clock,
    /// eviction policy, scripts, pub/sub and replicas; then every
    /// primitive on a scratch name under the prefix (deleted afterwards),
    /// which exercises the ACL exactly as the application will, and
    /// whether waiters can block for direct grants. Bounded by the
    /// client's timeouts; never panics.
    ///
    /// ```no_run
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// let report = client.diagnose();
    /// for check in &report.checks {
    ///     println!("{check}");
    /// }
    /// assert_eq!(report.status(), redlease::CheckStatus::Ok);
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn diagnose(&self) -> Diagnosis {
        let mut d = Diagnosis::default();
        let backend = self.backend().clone();
        let scratch = format!("redlease-doctor-{}", uuid::Uuid::new_v4().simple());
        let mut offsets: Vec<(String, f64)> = Vec::new();
        let (mut masters, mut answered) = (0, 0);
        backend.each_master(&mut |node| {
            masters += 1;
            if check_master(self, node, &mut d, &mut offsets) {
                answered += 1;
            }
        });
        if masters == 0 {
            d.push(
                "masters".into(),
                CheckStatus::Refused,
                "no master could be found".into(),
                Some("check the URL, and that the cluster or Sentinels answer"),
            );
        }
        if backend.is_cluster() {
            let sharded = backend.sharded();
            d.push(
                "sharded pub/sub".into(),
                CheckStatus::Ok,
                if sharded {
                    "wake-ups go to the name's shard alone (SPUBLISH / SSUBSCRIBE)".into()
                } else {
                    "not available (Redis before 7.0, or refused): wake-ups use classic \
                     pub/sub, which every node of the cluster carries"
                        .into()
                },
                None,
            );
        }
        if offsets.len() > 1 {
            let min = offsets.iter().map(|o| o.1).fold(f64::INFINITY, f64::min);
            let max = offsets
                .iter()
                .map(|o| o.1)
                .fold(f64::NEG_INFINITY, f64::max);
            let spread = max - min;
            let ok = spread <= CLOCK_SLACK.as_secs_f64() * 1e3;
            d.push(
                "clock spread".into(),
                CheckStatus::degraded_if(!ok),
                format!("the masters' clocks differ by up to {spread:.0} ms"),
                (!ok).then_some(
                    "run NTP on every master: a master whose clock steps expires (or stretches) \
                     the leases it holds, and Redlock counts on its masters' clocks running alike",
                ),
            );
        }
        // A master that stopped answering would cost every primitive its
        // whole wait: said once instead (Redlock works on a majority).
        let enough = if backend.is_redlock() {
            answered > masters / 2
        } else {
            answered == masters
        };
        if enough {
            check_primitives(self, &scratch, &mut d);
            clean_up(self, &scratch, &mut d);
        } else {
            d.push(
                "primitives".into(),
                CheckStatus::Refused,
                "not checked: a master did not answer (see above)".into(),
                None,
            );
        }
        d
    }
}

/// Whether a failed command means the server stopped answering (rather
/// than refusing the command): the checks of that master end there.
fn stopped(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped()
}

/// The server, round trip, clock, eviction policy, scripts, pub/sub and
/// replicas of one master, on a connection of its own; whether it kept
/// answering.
fn check_master(
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
                    format!("server clock {offset:+.0} ms from this machine's"),
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
        let replication = redis::cmd("INFO")
            .arg("replication")
            .query::<String>(con)
            .ok();
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
            _ => (CheckStatus::Ok, None),
        };
        d.push(
            format!("replicas {addr}"),
            status,
            format!(
                "{} acknowledging{}{}",
                seen.map_or("unknown".to_string(), |k| k.to_string()),
                match want {
                    Some(n) => format!("; replica_ack wants {n}"),
                    None => String::new(),
                },
                match &wait_refused {
                    Some(w) => format!("; WAIT refused ({w})"),
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

/// Every primitive once on the scratch name, as the application would use
/// it: the ACL's key and command rules are met exactly where they matter.
fn check_primitives(client: &Client, scratch: &str, d: &mut Diagnosis) {
    let redlock = client.backend().is_redlock();
    let mut outcome = |what: &str, r: crate::Result<()>| match r {
        Ok(()) => d.push(
            what.into(),
            CheckStatus::Ok,
            "acquired and released".into(),
            None,
        ),
        Err(e) => {
            let text = e.to_string();
            let acl = e.kind() == ErrorKind::Auth
                || [
                    "NOPERM",
                    "NoPerm",
                    "no permissions",
                    "can't run this command",
                ]
                .iter()
                .any(|p| text.contains(p));
            d.push(
                what.into(),
                CheckStatus::Refused,
                e.to_string(),
                Some(if acl {
                    "the ACL refuses a command or key the library needs: use the README's ACL line \
                     for this prefix"
                } else {
                    "see the error; `redlease -v doctor` logs more"
                }),
            );
        }
    };
    let short = Duration::from_secs(5);
    outcome(
        "lock",
        (|| {
            let g = client
                .lock(format!("{scratch}-lock"))
                .acquire_timeout(short)?
                .ok_or_else(|| {
                    crate::Error::new(
                        ErrorKind::Server,
                        "a free scratch lock was not granted in 5 s",
                    )
                })?;
            g.release()
        })(),
    );
    if redlock {
        d.push(
            "read-write lock, semaphore, latch".into(),
            CheckStatus::Ok,
            "not checked: on Redlock only the exclusive lock is offered".into(),
            None,
        );
    } else {
        outcome(
            "read-write lock",
            (|| {
                let rw = client.rw_lock(format!("{scratch}-rw"));
                rw.read_timeout(short)?.map(|g| g.release()).transpose()?;
                rw.write_timeout(short)?.map(|g| g.release()).transpose()?;
                Ok(())
            })(),
        );
        outcome(
            "semaphore",
            (|| {
                let s = client.semaphore(format!("{scratch}-sem"), 2);
                s.acquire_timeout(short)?.map(|p| p.release()).transpose()?;
                s.force_release_all().map(|_| ())
            })(),
        );
        outcome(
            "latch",
            (|| {
                let l = client.count_down_latch(format!("{scratch}-latch"));
                l.try_set_count(1)?;
                l.count_down()?;
                l.wait_timeout(short).map(|_| ())
            })(),
        );
    }
    check_blocking(client, scratch, d);
}

/// A waiter on the scratch lock, held meanwhile: where grants go direct,
/// its wait blocks on the server (`BLMOVE`), and a refusal turns them off
/// for the client, which is what is reported.
fn check_blocking(client: &Client, scratch: &str, d: &mut Diagnosis) {
    let backend = client.backend();
    let name = format!("{scratch}-wait");
    if backend.is_redlock() || backend.replica_ack().is_some() {
        d.push(
            "blocking grants".into(),
            CheckStatus::Ok,
            "not used here by design: lock waiters wait for release messages (Redlock and \
             replica_ack cannot grant through a blocking pop)"
                .into(),
            None,
        );
        return;
    }
    if !backend.grants_directly() {
        d.push(
            "blocking grants".into(),
            CheckStatus::Degraded,
            "off: the server refused a blocking pop earlier".into(),
            Some(BLOCKING_REFUSED),
        );
        return;
    }
    let held = match client.lock(&name).try_acquire() {
        Ok(Some(g)) => g,
        other => {
            d.push(
                "blocking grants".into(),
                CheckStatus::Refused,
                match other {
                    Err(e) => format!("not checked: its scratch lock was refused: {e}"),
                    _ => "not checked: its scratch lock was not free".into(),
                },
                Some("see the error; `redlease -v doctor` logs more"),
            );
            return;
        }
    };
    let waiter = client.clone();
    let wait_name = name.clone();
    let waited = std::thread::spawn(move || {
        waiter
            .lock(&wait_name)
            .acquire_timeout(Duration::from_millis(300))
            .map(|g| g.map(|g| g.release()))
    })
    .join();
    let _ = held.release();
    match (waited, backend.grants_directly()) {
        (Ok(Ok(_)), true) => d.push(
            "blocking grants".into(),
            CheckStatus::Ok,
            "a waiter blocked on the server (BLMOVE) and was refused nothing".into(),
            None,
        ),
        (_, false) => d.push(
            "blocking grants".into(),
            CheckStatus::Degraded,
            "the server refused the blocking pop (BLMOVE or LPOP)".into(),
            Some(BLOCKING_REFUSED),
        ),
        (Ok(Err(e)), true) => d.push(
            "blocking grants".into(),
            CheckStatus::Refused,
            e.to_string(),
            Some("see the error; `redlease -v doctor` logs more"),
        ),
        (Err(_), true) => d.push(
            "blocking grants".into(),
            CheckStatus::Refused,
            "the waiting thread panicked".into(),
            Some("a bug in redlease: please report it"),
        ),
    }
}

/// `text` with glob's special characters escaped, for a `SCAN MATCH`
/// pattern that matches it literally.
fn glob_literal(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for &b in text {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}

/// How long the clean-up may scan each master.
const CLEAN_UP_FOR: Duration = Duration::from_secs(10);

/// Deletes whatever the checks left under the scratch name on every
/// master (`SCAN`, never `KEYS`), and says so. The pattern is the prefix
/// (escaped: a `[` in it must not widen the match to other keys) and the
/// scratch name's own hash tag. The fence floor is not the checks' to
/// delete: the application's first lock creates it anyway.
fn clean_up(client: &Client, scratch: &str, d: &mut Diagnosis) {
    let mut pattern = glob_literal(client.prefix());
    pattern.extend_from_slice(b"{");
    pattern.extend_from_slice(scratch.as_bytes());
    pattern.extend_from_slice(b"*");
    let mut left = 0usize;
    let mut failed: Option<String> = None;
    client.backend().each_master(&mut |node| {
        let mut con = match node.open_spare(node.connect_timeout()) {
            Ok(c) => c,
            Err(e) => {
                failed = Some(format!("{}: {e}", node.addr()));
                return;
            }
        };
        let until = Instant::now() + CLEAN_UP_FOR;
        let mut cursor = 0u64;
        loop {
            if Instant::now() >= until {
                failed = Some(format!(
                    "{}: the keyspace was not scanned to its end within {CLEAN_UP_FOR:?}",
                    node.addr()
                ));
                return;
            }
            let page = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query::<(u64, Vec<Vec<u8>>)>(&mut con);
            let (next, keys) = match page {
                Ok(p) => p,
                Err(e) => {
                    failed = Some(format!("{}: {e}", node.addr()));
                    return;
                }
            };
            for k in keys {
                left += 1;
                if let Err(e) = redis::cmd("DEL").arg(&k).query::<()>(&mut con) {
                    failed = Some(format!("{}: {e}", node.addr()));
                }
            }
            cursor = next;
            if cursor == 0 {
                return;
            }
        }
    });
    match failed {
        None => d.push(
            "clean-up".into(),
            CheckStatus::Ok,
            format!("nothing left under {scratch} ({left} key(s) deleted after the checks)"),
            None,
        ),
        Some(e) => d.push(
            "clean-up".into(),
            CheckStatus::Degraded,
            format!("could not make sure nothing is left under {scratch}: {e}"),
            Some("delete the keys whose names contain the scratch name by hand"),
        ),
    }
}
