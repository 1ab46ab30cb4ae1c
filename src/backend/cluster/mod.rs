//! Redis Cluster: commands are routed by key slot (MOVED/ASK handled by the
//! `redis` cluster connection). Every key of one primitive shares the hash
//! tag `{name}`, so each script touches one slot and never sees CROSSSLOT.
//!
//! Grants and renewal batches are the exception: they go to each master on
//! its own connection, through our own slot map (see [`Masters`]). A grant
//! needs its undo written behind a late reply on the same connection,
//! which the cluster connection gives no hold on; and the cluster
//! connection reads a pipeline's replies node after node and fails it
//! whole when one node fails, so one stalled master cost every lease on
//! the healthy ones.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection};
use redis::{FromRedisValue, Value};

use super::fan_out::{fan_out, Request};
use super::node::warn_if_evicting;
use super::pool::pool;
use super::source::client_for;
use super::wire::{with_tls, within, Wire};
use super::{Answer, Blocked, BlockingGrant, Call, Node, Timeouts};
use crate::error::{Error, ErrorKind, Result};
use crate::protocol::scripts::Parts;
use crate::protocol::timing::hand_over_claim;

mod masters;
mod settling;
mod sharding;

use masters::{Masters, SlotMap};

/// A pooled cluster connection, plus plain clients for the seed nodes (the
/// wake-up subscriber connects to one of them: `PUBLISH` reaches every node
/// of a cluster).
pub(crate) struct ClusterLeader {
    pool: r2d2::Pool<Routed>,
    seeds: Vec<redis::Client>,
    response: Duration,
    masters: Masters,
    /// Direct grants (a waiter blocked on its master for its grant, see
    /// [`ClusterLeader::grant_blocking`]) are off until then: the slot map
    /// was stale or a master failed, and waiters wait for messages, which
    /// the cluster connection's own routing delivers, until the map is
    /// read again.
    direct_off_until: Mutex<Option<Instant>>,
    /// A master refused `BLPOP` (an ACL without it): messages for good.
    blocking_refused: std::sync::atomic::AtomicBool,
    /// Our TLS settings for the cluster connection's nodes, if they speak
    /// TLS (see [`with_tls`]).
    node_tls: Option<super::Tls>,
    /// Wake-ups go over sharded pub/sub (see [`ClusterLeader::sharded`]).
    sharded: std::sync::atomic::AtomicBool,
    /// What a node said it is (`Redis 7.0.15`), for `Client::capabilities`.
    identity: std::sync::OnceLock<String>,
}

/// How long direct grants stay off after a redirection or a failed master
/// (the slot map is read again at most once per [`REREAD_AFTER`]).
const DIRECT_OFF_FOR: Duration = Duration::from_secs(2);

/// Whether an error code says the command went to the wrong node, or to
/// a cluster in flux: it did not run there.
fn redirected(code: &str) -> bool {
    matches!(code, "MOVED" | "ASK" | "CLUSTERDOWN" | "TRYAGAIN")
}

/// Whether the cluster refused a command for now (a slot being migrated
/// with its keys split, a cluster without a quorum): nothing ran, and
/// waiters ride it out like an outage; the cluster connection would only
/// sleep and retry inside the caller's deadline.
fn refused_for_now(code: &str) -> bool {
    matches!(code, "CLUSTERDOWN" | "TRYAGAIN")
}

/// How many `MOVED` redirections one call follows (see
/// `ClusterLeader::following_moves`).
const MOVES: usize = 2;

/// A redirection still after [`MOVES`]: the slot keeps moving (a
/// resharding, nodes whose views disagree). Nothing ran; waiters ride it
/// out like an outage.
fn kept_moving(e: Error) -> Error {
    Error::new(
        ErrorKind::Connection,
        "the name's slot kept moving between masters; the script did not run",
    )
    .with_source(e)
    .unsent()
}

/// An `ASK`: the name's slot is being migrated and its keys are not on
/// the old master (a slot where the library has no key yet, or whose keys
/// moved already; a slot's fence floor stays once one of its names was
/// granted, and then the old master answers `TRYAGAIN` instead).
/// Nothing ran, and following it would run nothing either: the importing
/// master refuses a script whose keys it does not all have (`TRYAGAIN`),
/// and every granting script names keys that do not exist yet (a queue,
/// a counter). A refusal for now, not sent, that waiters ride out until
/// the slot has moved (then its `MOVED` is followed). Through the cluster
/// connection it was `Err(Server)`: an `acquire` gave up at once during a
/// resharding.
fn migrating(e: Error) -> Error {
    Error::new(
        ErrorKind::Connection,
        "this name's slot is being migrated between masters; the script did not run",
    )
    .with_source(e)
    .unsent()
}

/// A master's part of a batch: its packed pipeline, how many script loads
/// and calls it holds, and the undos of its calls.
type MasterPart<'a> = (Vec<u8>, usize, usize, Option<Vec<Call<'a>>>);

impl ClusterLeader {
    pub(crate) fn open(
        urls: &[String],
        pool_size: u32,
        timeouts: Timeouts,
    ) -> Result<ClusterLeader> {
        if urls.is_empty() {
            return Err(Error::invalid("a cluster needs at least one seed URL"));
        }
        let seeds = urls
            .iter()
            .map(|u| client_for(u, &timeouts))
            .collect::<Result<Vec<_>>>()?;
        // redis-rs retries a failed call itself (following redirects,
        // reconnecting, sleeping through TRYAGAIN), 16 times with sleeps
        // of up to seconds by default; every routed call here has one
        // deadline (see `routed`), so its retries are few and quick.
        let builder = ClusterClientBuilder::new(urls.iter().map(|u| u.as_str()))
            .connection_timeout(timeouts.connect)
            .response_timeout(timeouts.response)
            .retries(6)
            .min_retry_wait(5)
            .max_retry_wait(50);
        #[cfg(feature = "tls-rustls")]
        let builder = match timeouts.tls.certificates() {
            Some(certs) => builder.certs(certs),
            None => builder,
        };
        let client = builder
            .build()
            .map_err(|e| Error::invalid("invalid cluster configuration").with_source(e))?;
        let node_tls = seeds
            .first()
            .is_some_and(|s| {
                matches!(
                    s.get_connection_info().addr(),
                    redis::ConnectionAddr::TcpTls { .. }
                )
            })
            .then(|| timeouts.tls.clone());
        let pool = pool(Routed(client, node_tls.clone()), pool_size, &timeouts);
        let masters = Masters {
            seeds: seeds.clone(),
            timeouts: timeouts.clone(),
            pool_size,
            state: Mutex::new(SlotMap::default()),
            settling: Default::default(),
        };
        Ok(ClusterLeader {
            pool,
            seeds,
            response: timeouts.response,
            masters,
            direct_off_until: Mutex::new(None),
            blocking_refused: std::sync::atomic::AtomicBool::new(false),
            node_tls,
            sharded: std::sync::atomic::AtomicBool::new(false),
            identity: std::sync::OnceLock::new(),
        })
    }

    /// What a node of the cluster said it is when the client was built.
    pub(crate) fn identity(&self) -> Option<&str> {
        self.identity.get().map(String::as_str)
    }

    /// The masters of the slot map as it is now (read first if unknown).
    pub(crate) fn masters_now(&self) -> Vec<Arc<Node>> {
        self.masters.current().nodes.values().cloned().collect()
    }

    /// Whether waiters may block on their master for a direct grant now.
    pub(crate) fn grants_directly(&self) -> bool {
        if self
            .blocking_refused
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return false;
        }
        let off = crate::util::mutex::lock(&self.direct_off_until);
        off.is_none_or(|until| Instant::now() >= until)
    }

    /// Direct grants off for a while, and the slot map to be read again.
    fn direct_off(&self) {
        crate::util::mutex::lock(&self.masters.state).stale = true;
        let mut off = crate::util::mutex::lock(&self.direct_off_until);
        *off = Some(Instant::now() + DIRECT_OFF_FOR);
    }

    /// A queued waiter's attempt, blocking first for a grant pushed onto
    /// `list` (see `Node::grant_blocking`), on the connection of the
    /// master that serves the name's slot in our own slot map: the
    /// cluster connection cannot block on one node. Where that map is
    /// unknown or stale, or the master redirects us (a failover, a slot
    /// migration: the command did not run there), the script goes through
    /// the cluster connection instead, without blocking, and direct grants
    /// pause (see [`ClusterLeader::grants_directly`]): waiters then wait
    /// for messages, and their next attempts say so in their queue entries.
    pub(crate) fn grant_blocking(&self, grant: &BlockingGrant<'_>) -> Result<Blocked> {
        let (call, undo, deadline) = (&grant.call, &grant.undo, grant.deadline);
        // Not blocked, nothing popped: the script's plain answer, granted
        // over our own connection as any grant is. Its lease counts from
        // its own sending: after a block the slot moved under, that may be
        // long after the block was sent.
        let plain = || {
            let sent = Instant::now();
            Ok(Blocked {
                reply: self.grant(call, undo, deadline)?,
                popped: false,
                short: None,
                sent: Some(sent),
                cut: true,
                refused: false,
            })
        };
        let Some(node) = call.keys.first().and_then(|k| self.masters.master_of(k)) else {
            self.direct_off();
            return plain();
        };
        let outcome = node.grant_blocking(grant);
        // A pop the master refused (`ASK` while the slot migrates): direct
        // grants pause, as after a redirected call; blocking again at once
        // would be refused again, round trip after round trip.
        if outcome.as_ref().is_ok_and(|b| b.refused) {
            self.masters
                .settling
                .saw_code(call.keys.first(), Some("ASK"));
            self.direct_off();
        }
        if !node.blocks() {
            self.blocking_refused
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        self.on_master(&node, call.keys.first(), outcome, |_| plain())
    }

    /// What a call made over our connection to `node` comes to. A slot
    /// that moved (`MOVED`, `ASK`: nothing ran there) is the caller's
    /// `redirected` to follow, given the redirection. A refusal
    /// for now (`TRYAGAIN`, `CLUSTERDOWN`) is returned: not sent, waiters
    /// ride it out, where the cluster connection would sleep through it
    /// past the caller's deadline. Any other failure is returned too, and
    /// the master is suspected (see [`ClusterLeader::master_failed`]):
    /// trying it again through the cluster connection would meet the same
    /// master. Direct waiting pauses after any of these. A redirection or
    /// refusal for `key` is noted as its slot moving (see `settling`;
    /// `None`: noted where the call was sent).
    fn on_master<T>(
        &self,
        node: &Arc<Node>,
        key: Option<&[u8]>,
        outcome: Result<T>,
        redirected: impl FnOnce(Error) -> Result<T>,
    ) -> Result<T> {
        // (Calls through `send` were noted there already.)
        if let (Err(e), Some(key)) = (&outcome, key) {
            self.masters.settling.saw_code(Some(key), e.server_code());
        }
        match outcome {
            Err(e) if matches!(e.server_code(), Some("MOVED" | "ASK")) => {
                self.direct_off();
                redirected(e)
            }
            Err(e) => {
                if e.server_code().is_none() {
                    self.master_failed(node);
                } else if e.server_code().is_some_and(refused_for_now) {
                    self.direct_off();
                }
                Err(e)
            }
            ok => ok,
        }
    }

    /// A call to `node` failed without a reply (late, broken, unreachable):
    /// it may have been replaced. The slot map is read again, asking it
    /// last, and direct waiting pauses meanwhile.
    fn master_failed(&self, node: &Arc<Node>) {
        self.masters.suspect(node);
        self.direct_off();
    }

    /// Runs a granting script on its key's master over our own connection
    /// to it, so that a late reply gets `undo` written behind it on the
    /// same connection, as on one server: the cluster connection gives no
    /// such hold on its connections. The master is the one our slot map
    /// last named for the key, even while the map is stale (see
    /// [`Masters::last_known`]): a grant that went through the cluster
    /// connection whenever the map was stale (after any failed call) left
    /// its late grant in place, holding the name for a whole lease. A
    /// `MOVED` (nothing ran) is followed to the master it names (see
    /// [`ClusterLeader::following_moves`]); an `ASK` (a slot being
    /// migrated) is a refusal for now (see [`migrating`]), so no grant
    /// goes anywhere without its undo. Other failures are the judge of
    /// attempts' to ride out (see [`ClusterLeader::on_master`]).
    pub(crate) fn grant(
        &self,
        call: &Call<'_>,
        undo: &Call<'_>,
        deadline: Option<Instant>,
    ) -> Result<Answer> {
        // Even while direct waiting is paused (`direct_off`): a grant over
        // our connection is what gets a late reply undone.
        let node = self.master_for_grant(call)?;
        let (node, outcome) = self.following_moves(node, call, Some(undo), deadline);
        self.on_master(&node, None, outcome, |e| {
            Err(if e.server_code() == Some("ASK") {
                migrating(e)
            } else {
                kept_moving(e)
            })
        })
    }

    /// `call` on `node` over our own connection, and where it answers
    /// `MOVED` (nothing ran: the slot has another master), on the master
    /// the redirection names, as the cluster connection would, up to
    /// [`MOVES`] times: the slot map is not read again on the way (it is
    /// marked stale, and read again at most once a second), since a node
    /// whose view lags could name the old master again, and reading it
    /// asks the known masters one after another, a stalled one for a
    /// whole response timeout. Returns the last node asked and its
    /// outcome (a redirection still, after as many).
    fn following_moves<T: FromRedisValue>(
        &self,
        mut node: Arc<Node>,
        call: &Call<'_>,
        undo: Option<&Call<'_>>,
        deadline: Option<Instant>,
    ) -> (Arc<Node>, Result<T>) {
        for _ in 0..MOVES {
            let outcome = self.send(&node, call, undo, deadline);
            let to = match &outcome {
                Err(e) if e.server_code() == Some("MOVED") => e.redirected_to(),
                _ => None,
            };
            let Some(to) = to else {
                return (node, outcome);
            };
            self.direct_off();
            node = self.masters.node_for(to, &node);
        }
        let outcome = self.send(&node, call, undo, deadline);
        (node, outcome)
    }

    /// `call` on `node` over our own connection, as it goes now (see
    /// [`ClusterLeader::settled_args`]), noting a reply that says its slot
    /// is moving.
    fn send<T: FromRedisValue>(
        &self,
        node: &Node,
        call: &Call<'_>,
        undo: Option<&Call<'_>>,
        deadline: Option<Instant>,
    ) -> Result<T> {
        let settled = self.settled_args(call);
        let outcome = match &settled {
            Some(args) => node.call(&call.with_parts(Parts::Owned(args)), undo, deadline),
            None => node.call(call, undo, deadline),
        };
        if let Err(e) = &outcome {
            self.masters
                .settling
                .saw_code(call.keys.first(), e.server_code());
        }
        outcome
    }

    /// The claim window a hand-over `call` may make (a release, a look, an
    /// acquisition: `Lua::claim_arg`) gives it when sent now, if not the
    /// usual one: longer when its slot was seen moving lately
    /// (`protocol::timing::hand_over_claim`), since Redis redirects the
    /// waiters blocked at the old master only up to a second later (see
    /// `settling`). `None` for any other call, and usually.
    pub(crate) fn settled_claim(&self, call: &Call<'_>) -> Option<Duration> {
        call.lua.claim_arg?;
        let ago = self.masters.settling.moved_ago(call.keys.first()?)?;
        Some(hand_over_claim(Some(ago)))
    }

    /// The arguments `call` goes with instead of its own, if any (see
    /// [`ClusterLeader::settled_claim`]).
    fn settled_args(&self, call: &Call<'_>) -> Option<Vec<Vec<u8>>> {
        call.lua.with_claim(call.args, self.settled_claim(call)?)
    }

    /// The master our slot map last named for a grant's key, or a *not
    /// sent* error.
    fn master_for_grant(&self, call: &Call<'_>) -> Result<Arc<Node>> {
        call.keys
            .first()
            .and_then(|key| self.masters.last_known(key))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Connection,
                    "no master of this name's slot could be found in the cluster's slot map",
                )
                .unsent()
            })
    }

    /// Runs a script at most once, on its key's master over our own
    /// connection: never through the cluster connection, which sends a
    /// call again after its connection dropped (a latch would count down
    /// twice; a release run twice finds its own work done and reports the
    /// lease lost). A slot that moved is followed to the master its
    /// `MOVED` names; a master that cannot be reached has the map read
    /// again and the call made once more; a slot being migrated (`ASK`) is
    /// a *not sent* error.
    pub(crate) fn once<T: FromRedisValue>(&self, call: &Call<'_>) -> Result<T> {
        let Some(key) = call.keys.first() else {
            return Err(Error::invalid("a script without keys cannot be routed"));
        };
        let mut last = None;
        for _ in 0..2 {
            let Some(node) = self.masters.master_of(key).or_else(|| {
                self.masters.refresh();
                self.masters.master_of(key)
            }) else {
                break;
            };
            // A `MOVED` is followed to the master it names.
            let (node, outcome) = self.following_moves(node, call, None, None);
            match outcome {
                Err(e) if e.is_unsent() => {
                    // Not run: this master could not be reached (a
                    // failover may have replaced it). Read the map again.
                    self.master_failed(&node);
                    self.masters.refresh();
                    last = Some(e.unsent());
                }
                Err(e) if e.server_code() == Some("MOVED") => return Err(kept_moving(e)),
                Err(e) if e.server_code() == Some("ASK") => return Err(migrating(e)),
                Err(e) => {
                    // Late or broken: it may have run, so it is not sent
                    // again; the map is read again, asking this one last.
                    if e.server_code().is_none() {
                        self.master_failed(&node);
                    }
                    return Err(e);
                }
                ok => return ok,
            }
        }
        Err(last.unwrap_or_else(|| {
            Error::new(
                ErrorKind::Connection,
                "no master of this name's slot could be found in the cluster's slot map",
            )
            .unsent()
        }))
    }

    /// A pooled cluster connection, or a *not sent* error.
    fn conn(&self) -> Result<r2d2::PooledConnection<Routed>> {
        self.pool.get().map_err(|e| Error::from(e).unsent())
    }

    /// Runs `f` on a pooled cluster connection, due within one response
    /// timeout in all: the cluster connection's own retries (it re-sends a
    /// failed call, reconnects, re-reads the slot map, up to 6 times)
    /// share that one deadline rather than each having a timeout.
    fn routed<T>(
        &self,
        f: impl FnOnce(&mut ClusterConnection<Wire>) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let mut con = self.conn()?;
        let until = Instant::now() + self.response;
        let tls = self.node_tls.as_ref();
        Ok(with_tls(tls, || within(until, || f(&mut con)))?)
    }

    pub(crate) fn check(&self) -> Result<()> {
        self.routed(|con| redis::cmd("PING").query::<()>(con))?;
        if let Ok(Some(id)) = self.routed(|con| Ok(super::node::identify(con))) {
            let _ = self.identity.set(id);
        }
        for seed in &self.seeds {
            if let Ok(mut c) = seed.get_connection_with_timeout(Duration::from_secs(1)) {
                warn_if_evicting(&mut c);
            }
        }
        // Renewal's slot map, read now: reading it later could meet a
        // stalled seed on the renewal thread.
        self.masters.refresh();
        Ok(())
    }

    pub(crate) fn eval<T: FromRedisValue>(&self, call: &Call<'_>) -> Result<T> {
        // A hand-over sent this way (a waiter that gives up hands on a
        // grant its pop took) gets the longer window right after a move,
        // as one sent through `send` does.
        let settled = self.settled_args(call);
        let settled_call = settled.as_ref().map(|a| call.with_parts(Parts::Owned(a)));
        let call = settled_call.as_ref().unwrap_or(call);
        // On the key's master over our own connection, as grants go: the
        // cluster connection keeps routing to a master that stopped
        // answering (a timeout is no redirect), so after a failover its
        // calls kept failing until it read the slots again, while our map
        // is read again within a second. These scripts are harmless to
        // repeat: the cluster connection takes them where our map is
        // stale, or the master redirects. Where it still meets `ASK` (a
        // script whose keys are split by a migration: the importing master
        // refuses it too), it is refused for now, not a server error.
        let routed = || {
            self.routed(|con| call.lua.call(call.keys, call.args).invoke(con))
                .map_err(|e| match e.server_code() {
                    Some("ASK") => migrating(e),
                    _ => e,
                })
        };
        let Some(node) = call.keys.first().and_then(|k| self.masters.master_of(k)) else {
            return routed();
        };
        // Within one response timeout, a new connection's setup included,
        // as through the cluster connection.
        let until = Instant::now() + self.response;
        let outcome = within(until, || node.eval(call, Some(Instant::now())));
        self.on_master(&node, call.keys.first(), outcome, |_| routed())
    }

    pub(crate) fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        self.routed(|con| cmd.query(con))
    }

    /// Renewal: each master's calls as one pipeline on that master's own
    /// connection, all masters at once (see [`fan_out`]), each read waiting
    /// at most `limit` (the earliest lease in the batch: a late answer is
    /// no use after that). A master that fails or is late leaves its own
    /// calls undecided (`Nil`, retried), never the others'. Scripts are
    /// loaded in front of each pipeline, as on one server.
    ///
    /// An error only when no master answered.
    pub(crate) fn eval_batch(&self, calls: &[Call<'_>], limit: Duration) -> Result<Vec<Value>> {
        self.on_masters(calls, limit, None)
    }

    /// Grants (a multi-lock's names) as [`ClusterLeader::eval_batch`] sends
    /// them: one pipeline per master, all masters at once, within one
    /// response timeout. `undo[i]` undoes `calls[i]`: a master whose
    /// replies are late gets its own calls' undos written behind them on
    /// the same connection (the server runs them after the grants, however
    /// late), and its calls are undecided (`Nil`).
    pub(crate) fn grant_batch(&self, calls: &[Call<'_>], undo: &[Call<'_>]) -> Result<Vec<Value>> {
        self.on_masters(calls, self.response, Some(undo))
    }

    /// One pipeline per master ([`fan_out`]): each master's calls,
    /// packed after the script loads in front, and their undos.
    fn on_masters(
        &self,
        calls: &[Call<'_>],
        limit: Duration,
        undo: Option<&[Call<'_>]>,
    ) -> Result<Vec<Value>> {
        let limit = limit.clamp(Duration::from_millis(1), self.response);
        // Releases and looks whose slots were seen moving lately go with
        // their longer claim windows (see `settled_args`): rare, so the
        // calls are only copied then. (A batch of renewals alone, the
        // usual one, has nothing that hands over: nothing is collected.)
        let settled: Vec<Option<Vec<Vec<u8>>>> = if calls.iter().any(|c| c.lua.claim_arg.is_some())
        {
            calls.iter().map(|c| self.settled_args(c)).collect()
        } else {
            Vec::new()
        };
        let resettled: Vec<Call<'_>>;
        let calls = if settled.iter().any(Option::is_some) {
            resettled = calls
                .iter()
                .zip(&settled)
                .map(|(c, s)| s.as_ref().map_or(*c, |a| c.with_parts(Parts::Owned(a))))
                .collect();
            &resettled[..]
        } else {
            calls
        };
        let groups = self.masters.route(calls);
        let packed: Vec<MasterPart<'_>> = groups
            .iter()
            .map(|(node, idx)| {
                let part: Vec<Call<'_>> = idx.iter().map(|&i| calls[i]).collect();
                let (packed, loads) = node.batch(&part);
                let undo = undo.map(|u| idx.iter().filter_map(|&i| u.get(i).copied()).collect());
                (packed, loads, part.len(), undo)
            })
            .collect();
        let requests: Vec<Request<'_>> = groups
            .iter()
            .zip(&packed)
            .map(|((node, _), (cmds, loads, n, undo))| {
                (&**node, &cmds[..], loads + n, undo.as_deref())
            })
            .collect();
        let replies = fan_out(&requests, Some(limit));
        let mut out = vec![Value::Nil; calls.len()];
        let (mut stale, mut answered, mut failure) = (false, Vec::new(), None);
        for (((node, idx), (_, loads, _, _)), reply) in groups.iter().zip(&packed).zip(replies) {
            match reply {
                Ok(values) => {
                    answered.push(node.clone());
                    // The script loads come first; their replies are not
                    // the calls'.
                    let part: Vec<Call<'_>> = idx.iter().map(|&i| calls[i]).collect();
                    let values = node.loaded(&part, values.into_iter().skip(*loads).collect());
                    for (&i, v) in idx.iter().zip(values) {
                        if let Value::ServerError(e) = &v {
                            stale |= redirected(e.code());
                            self.masters
                                .settling
                                .saw_code(calls[i].keys.first(), Some(e.code()));
                        }
                        out[i] = v;
                    }
                }
                Err(e) => {
                    // A failed master may have been replaced by its replica.
                    stale = true;
                    failure = Some(e);
                }
            }
        }
        let none_answered = answered.is_empty();
        if stale || groups.iter().map(|(_, idx)| idx.len()).sum::<usize>() < calls.len() {
            self.masters.mark_stale(answered);
        }
        match failure {
            Some(e) if none_answered => Err(e),
            _ if groups.is_empty() && !calls.is_empty() => Err(Error::new(
                ErrorKind::Connection,
                "no cluster master could be reached to read the slot map",
            )
            .unsent()),
            _ => Ok(out),
        }
    }

    /// The classic subscriber's connection (ours, bounded in time and
    /// size, see `Wire::open`) to the first seed that answers.
    pub(crate) fn subscriber(&self, timeout: Duration) -> Result<Wire> {
        let mut last = None;
        for seed in &self.seeds {
            match Wire::open(seed, &self.masters.timeouts.tls, timeout, self.response) {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(Error::from(e)),
            }
        }
        Err(last.unwrap_or_else(|| Error::invalid("no cluster seeds")))
    }
}

/// Opens cluster connections whose node connections are ours
/// ([`Wire`]): every routed call's reply is due within the response
/// timeout in all, not per socket read.
pub(crate) struct Routed(ClusterClient, Option<super::Tls>);

impl r2d2::ManageConnection for Routed {
    type Connection = ClusterConnection<Wire>;
    type Error = redis::RedisError;

    fn connect(&self) -> redis::RedisResult<ClusterConnection<Wire>> {
        with_tls(self.1.as_ref(), || self.0.get_generic_connection::<Wire>())
    }

    fn is_valid(&self, con: &mut ClusterConnection<Wire>) -> redis::RedisResult<()> {
        redis::cmd("PING").query::<()>(con)
    }

    fn has_broken(&self, con: &mut ClusterConnection<Wire>) -> bool {
        !redis::ConnectionLike::is_open(con)
    }
}
