//! One Redis server (fixed, or the master the Sentinels name): its pool,
//! spare connections for blocking calls, a circuit breaker, `WAIT` acks.
//! Every topology is made of nodes.
//!
//! This is where a call's outcome is classified (see the fault model in
//! GUARANTEES.md): a call that never got a connection is *not sent*
//! ([`Error::is_unsent`]); a call whose reply was lost or late *may have
//! run*; a reply is *executed*. Nothing here retries a script: only the
//! caller knows whether running it twice is harmless.

mod blocking;
mod checkout;
mod identity;

pub(crate) use blocking::{Blocked, BlockingGrant, BlockingLook, Pop};
pub(crate) use identity::{identify, warn_if_evicting};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{FromRedisValue, Value};

use super::pool::{pool, Con, Manager};
use super::source::{client_for, Source};
use super::wire::Wire;
use super::{Answer, Call, Timeouts};
use crate::error::{Error, ErrorKind, Result};

/// A request written to a node whose replies are still to be read (see
/// [`Node::send`]).
pub(crate) struct Sent<'a> {
    node: &'a Node,
    con: Con,
    count: usize,
    until: Instant,
}

impl Sent<'_> {
    /// Reads the replies; error replies are values. When they do not all
    /// arrive in time and `undo` is given, it is written behind them before
    /// the connection is retired, as [`Node::call`] does: the server runs
    /// it after the late request, however late.
    pub(crate) fn recv(mut self, undo: Option<&[Call<'_>]>) -> Result<Vec<Value>> {
        let response = self.node.timeouts.response;
        match self.con.replies(self.count, self.until, response) {
            Ok(out) => {
                self.node.idle_spare(self.con);
                Ok(out)
            }
            Err(e) => {
                if e.is_timeout() {
                    // A Redlock master that stalls is skipped for a while
                    // rather than costing every call a timeout.
                    self.node.mark_down();
                }
                Err(self.node.fail(&mut self.con, e, undo))
            }
        }
    }
}

/// One server and its pool.
pub(crate) struct Node {
    pool: r2d2::Pool<Manager>,
    source: Arc<Source>,
    timeouts: Timeouts,
    /// Bumped when a connection is found dropped: after a server restart
    /// every pooled connection is stale, and each would cost a failed call.
    /// Connections opened before the bump are discarded at checkout.
    generation: Arc<AtomicU64>,
    /// Redlock only: after a failed connection attempt the master is skipped
    /// (an immediate missing vote) until this instant, in ns since the
    /// epoch (`monotonic`), so that a dead master costs one timeout per
    /// window, not per call.
    down_until: Option<AtomicU64>,
    /// Idle connections outside the pool ("spares"), for two uses the pool
    /// serves badly: waiters blocked on their grant (see
    /// [`Node::grant_blocking`]; a blocked waiter must never keep a holder
    /// of the same client from its release), and Redlock's fan-out (see
    /// [`Node::send`]; opened directly, a refused master is known at once,
    /// where the pool would wait out its timeout).
    spares: std::sync::Mutex<Vec<Con>>,
    /// The server refused `BLPOP` (an ACL from before direct grants):
    /// waiters wait for release messages instead.
    blocking_refused: std::sync::atomic::AtomicBool,
    /// One token per connection a waiter may block on at once (the pool
    /// size): a fair lock with a thousand waiting threads must not open a
    /// thousand connections. See [`Node::blocking_slot`].
    blocking_slots: (
        crossbeam_channel::Sender<()>,
        crossbeam_channel::Receiver<()>,
    ),
    /// Scripts this server is believed to have (loaded by a batch here):
    /// a batch loads only the others, so that a pipeline of looks or
    /// renewals is its calls alone. A `NOSCRIPT` reply (a restart, `SCRIPT
    /// FLUSH`) forgets the script: that call stays undecided and is sent
    /// again, with the script loaded in front.
    scripts: std::sync::Mutex<Vec<&'static str>>,
    /// What the server says it is (`Redis 7.0.15`), learned by
    /// [`Node::check`] when the client is built, for
    /// `Client::capabilities`.
    identity: std::sync::OnceLock<String>,
}

/// Whether a failed call leaves its connection unusable (it is then
/// retired rather than returned to the pool).
fn breaks_connection(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.code() == Some("READONLY")
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
        let source = Arc::new(source);
        let generation = Arc::new(AtomicU64::new(0));
        let manager = Manager {
            source: source.clone(),
            timeouts: timeouts.clone(),
            generation: generation.clone(),
        };
        let pool = pool(manager, pool_size, &timeouts);
        let blocking_slots = crossbeam_channel::bounded(pool_size.max(1) as usize);
        for _ in 0..pool_size.max(1) {
            let _ = blocking_slots.0.try_send(());
        }
        Node {
            pool,
            source,
            timeouts,
            generation,
            down_until: breaker.then(|| AtomicU64::new(0)),
            spares: std::sync::Mutex::new(Vec::new()),
            blocking_refused: std::sync::atomic::AtomicBool::new(false),
            blocking_slots,
            scripts: std::sync::Mutex::new(Vec::new()),
            identity: std::sync::OnceLock::new(),
        }
    }

    /// A call on `con` failed with `e`: notes it ([`Node::failed`]) and,
    /// when the reply is late and `undo` is given (the undo of a grant),
    /// writes `undo` behind the late request before the connection is
    /// retired: the server runs it right after, however late, so a grant
    /// that ran late is undone rather than left behind, and the error says
    /// so (`is_undone`). Every grant's late reply goes through here.
    fn fail(&self, con: &mut Con, e: redis::RedisError, undo: Option<&[Call<'_>]>) -> Error {
        self.failed(con, &e);
        match undo {
            Some(undo) if e.is_timeout() => {
                con.send_undo(undo);
                Error::from(e).undone()
            }
            _ => e.into(),
        }
    }

    /// Notes a failed call: retires its connection and, if the server
    /// dropped it, every connection opened before it.
    fn failed(&self, con: &mut Con, e: &redis::RedisError) {
        if breaks_connection(e) {
            con.broken = true;
        }
        if e.is_connection_dropped() {
            self.generation
                .fetch_max(con.generation + 1, Ordering::AcqRel);
        }
    }

    /// Runs one script once. When its reply does not arrive in time and
    /// `on_timeout` is given, that call (the undo of a grant) is written on
    /// the same connection before it is retired: the server runs it right
    /// after the late script, so a grant that ran late is undone rather
    /// than left behind.
    pub(crate) fn call<T: FromRedisValue>(
        &self,
        call: &Call<'_>,
        on_timeout: Option<&Call<'_>>,
        deadline: Option<Instant>,
    ) -> Result<T> {
        let mut con = self.conn(deadline)?;
        match call.lua.invoke::<T>(&mut *con, call.keys, call.args) {
            Ok(v) => Ok(v),
            Err(e) => Err(self.fail(&mut con, e, on_timeout.map(std::slice::from_ref))),
        }
    }

    /// A script call that is harmless to repeat (a read, or a clean-up):
    /// tried once more on a fresh connection if the first was found dropped
    /// (every pooled connection is stale after a server restart).
    /// A connection is waited for as [`Node::conn`] says for `deadline`.
    pub(crate) fn eval<T: FromRedisValue>(
        &self,
        call: &Call<'_>,
        deadline: Option<Instant>,
    ) -> Result<T> {
        let mut last = None;
        for _ in 0..2 {
            let mut con = self.conn(deadline)?;
            match call.lua.invoke(&mut *con, call.keys, call.args) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    self.failed(&mut con, &e);
                    let again = e.is_connection_dropped() || e.code() == Some("READONLY");
                    last = Some(e);
                    if !again {
                        break;
                    }
                }
            }
        }
        Err(last.map_or_else(
            || Error::new(ErrorKind::Connection, "no attempt made"),
            Error::from,
        ))
    }

    /// How long a reply may take.
    pub(crate) fn response_timeout(&self) -> Duration {
        self.timeouts.response
    }

    /// Writes `cmds` (packed, `count` commands) on `con`, a spare
    /// connection of this node, and returns without waiting for the
    /// replies: with [`Sent::recv`], one thread talks to several masters at
    /// once (Redlock), each server working while the others do, with no
    /// thread per master. The replies are due within `limit` of now (by
    /// default the response timeout).
    pub(crate) fn send(
        &self,
        mut con: Con,
        cmds: &[u8],
        count: usize,
        limit: Option<Duration>,
    ) -> Result<Sent<'_>> {
        let limit = limit.unwrap_or(self.timeouts.response);
        let until = Instant::now() + limit.max(Duration::from_millis(1));
        if let Err(e) = con.inner.send_packed_command(cmds) {
            self.failed(&mut con, &e);
            return Err(e.into());
        }
        Ok(Sent {
            node: self,
            con,
            count,
            until,
        })
    }

    /// A pipeline of `calls` as the server reads it, with `SCRIPT LOAD` in
    /// front for each script not believed loaded here (see
    /// `Node::scripts`), and how many loads. Each call is packed straight
    /// into the buffer (`Lua::packed`): a redis-rs pipeline copied every
    /// key and argument into a `Cmd` of its own first, which showed as a
    /// tenth of a multi-lock's client time.
    pub(crate) fn batch(&self, calls: &[Call<'_>]) -> (Vec<u8>, usize) {
        let known = crate::util::mutex::lock(&self.scripts);
        let mut packed = Vec::new();
        let mut loads: Vec<&str> = Vec::new();
        for call in calls {
            let hash = call.lua.script.get_hash();
            if !known.contains(&hash) && !loads.contains(&hash) {
                loads.push(hash);
                packed.extend_from_slice(
                    &redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(call.lua.code)
                        .get_packed_command(),
                );
            }
        }
        for call in calls {
            call.lua.pack_into(&mut packed, call.keys, call.args);
        }
        (packed, loads.len())
    }

    /// Notes which scripts of `calls` the server has, from their replies.
    pub(crate) fn loaded(&self, calls: &[Call<'_>], replies: Vec<Value>) -> Vec<Value> {
        let mut known = crate::util::mutex::lock(&self.scripts);
        for (call, reply) in calls.iter().zip(&replies) {
            let hash = call.lua.script.get_hash();
            let missing = matches!(reply, Value::ServerError(e) if e.code() == "NOSCRIPT");
            if missing {
                known.retain(|h| *h != hash);
            } else if !known.contains(&hash) {
                known.push(hash);
            }
        }
        replies
    }

    /// The server's address, as the application named it (or as the
    /// Sentinels or the slot map gave it).
    pub(crate) fn addr(&self) -> String {
        match self.source.client() {
            Ok(c) => c.get_connection_info().addr().to_string(),
            Err(_) => "(unknown address)".into(),
        }
    }

    /// Whether this node's connections speak RESP3 (`?protocol=resp3`).
    pub(crate) fn resp3(&self) -> bool {
        self.source.client().is_ok_and(|c| {
            c.get_connection_info().redis_settings().protocol() != redis::ProtocolVersion::RESP2
        })
    }

    /// What the server said it is when the client was built (`Redis
    /// 7.0.15`, `Valkey 9.1.2`), if it said.
    pub(crate) fn identity(&self) -> Option<&str> {
        self.identity.get().map(String::as_str)
    }

    /// Whether waiters may block on the server for their grant.
    pub(crate) fn blocks(&self) -> bool {
        !self.blocking_refused.load(Ordering::Relaxed)
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
        deadline: Option<Instant>,
    ) -> Result<Answer> {
        let mut con = self.conn(deadline)?;
        let reply: Answer = match call.lua.invoke(&mut *con, call.keys, call.args) {
            Ok(r) => r,
            Err(e) => return Err(self.fail(&mut con, e, Some(std::slice::from_ref(undo)))),
        };
        if !matches!(reply, Answer::Granted(_)) {
            return Ok(reply);
        }
        // WAIT answers after at most `timeout` (at least 1 ms: `build`
        // refuses less, since `WAIT n 0` blocks forever); read its answer
        // for that long plus the response timeout.
        let ms = (timeout.as_millis() as u64).max(1);
        let _ = con
            .inner
            .set_read_timeout(Some(timeout + self.timeouts.response));
        let acked: redis::RedisResult<i64> =
            redis::cmd("WAIT").arg(replicas).arg(ms).query(&mut *con);
        let _ = con.inner.set_read_timeout(Some(self.timeouts.response));
        match acked {
            Ok(n) if n >= i64::from(replicas) => Ok(reply),
            Ok(n) => {
                // WAIT answered: the connection is in step; undo and say
                // what the undo found.
                let undone = undo.lua.invoke::<i64>(&mut *con, undo.keys, undo.args);
                let outcome = match undone {
                    Ok(1) => "released it".to_owned(),
                    Ok(_) => "it was already gone".to_owned(),
                    Err(e) => {
                        self.failed(&mut con, &e);
                        format!("releasing it failed ({e}); it ends with its lease")
                    }
                };
                Err(Error::new(
                    ErrorKind::QuorumNotReached,
                    format!("{n} of {replicas} replicas confirmed the acquisition within {timeout:?}; {outcome}"),
                ))
            }
            Err(e) => {
                // No answer: the undo goes right behind the WAIT on the same
                // connection (the server runs it after), which is retired.
                self.failed(&mut con, &e);
                con.send_undo(std::slice::from_ref(undo));
                Err(Error::new(
                    ErrorKind::QuorumNotReached,
                    "the replicas' confirmation did not arrive; a release was sent but not confirmed (the lease ends by itself at the latest)",
                )
                .with_source(Error::from(e)))
            }
        }
    }

    /// Many calls in one pipeline (renewal), waiting at most `limit` for the
    /// replies. Each reply stands alone: an error reply to one call (e.g.
    /// OOM) is that call's `Value::ServerError`, not a failed batch.
    pub(crate) fn eval_batch(&self, calls: &[Call<'_>], limit: Duration) -> Result<Vec<Value>> {
        self.eval_batch_undone(calls, limit, None)
    }

    /// [`Node::eval_batch`] of grants: if the replies are late, `undo` (one
    /// token-checked release per grant) is written right behind them on the
    /// same connection, which is then retired, so grants that run late are
    /// undone right after (as [`Node::call`] does for one grant); the error
    /// then says so (`is_undone`).
    pub(crate) fn eval_batch_undone(
        &self,
        calls: &[Call<'_>],
        limit: Duration,
        undo: Option<&[Call<'_>]>,
    ) -> Result<Vec<Value>> {
        let (packed, loads) = self.batch(calls);
        let limit = limit.max(Duration::from_millis(1));
        let mut con = self.conn(Some(
            Instant::now() + limit.saturating_sub(self.timeouts.response),
        ))?;
        let until = Instant::now() + limit.min(self.timeouts.response);
        let mut replies =
            match con.exchange(&packed, loads + calls.len(), until, self.timeouts.response) {
                // The script loads come first; their replies are not the calls'.
                Ok(replies) => self.loaded(calls, replies.into_iter().skip(loads).collect()),
                Err(e) => return Err(self.fail(&mut con, e, undo)),
            };
        // Scripts the server lost (a restart, `SCRIPT FLUSH`): those calls
        // did not run; send them again now, their scripts loaded in front.
        let missing: Vec<usize> = (0..replies.len())
            .filter(|&i| matches!(&replies[i], Value::ServerError(e) if e.code() == "NOSCRIPT"))
            .collect();
        if !missing.is_empty() {
            let again: Vec<Call<'_>> = missing.iter().map(|&i| calls[i]).collect();
            let (packed, loads) = self.batch(&again);
            match con.exchange(&packed, loads + again.len(), until, self.timeouts.response) {
                Ok(r) => {
                    let r = self.loaded(&again, r.into_iter().skip(loads).collect());
                    for (&i, v) in missing.iter().zip(r) {
                        replies[i] = v;
                    }
                }
                // Those stay undecided (they may run late); the others'
                // replies stand.
                Err(e) => {
                    self.failed(&mut con, &e);
                    for &i in &missing {
                        replies[i] = Value::Nil;
                    }
                }
            }
        }
        Ok(replies)
    }

    /// One command; a connection is waited for as [`Node::conn`] says for
    /// `deadline`.
    pub(crate) fn query<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        deadline: Option<Instant>,
    ) -> Result<T> {
        let mut con = self.conn(deadline)?;
        cmd.query(&mut *con).map_err(|e| {
            self.failed(&mut con, &e);
            e.into()
        })
    }

    /// Answers a PING, and warns when the server may evict lock keys.
    /// Connects once, outside the pool, so that a refused connection or a
    /// wrong password is reported at once and precisely (the pool would
    /// retry until its timeout and report a timeout). On our own
    /// connection, as every call: a reply is bounded whole by the response
    /// timeout, not each read (a PONG dribbled a byte at a time took
    /// `build()` 10.5 s with 2 s timeouts).
    pub(crate) fn check(&self) -> Result<()> {
        let mut con = self.open_spare(self.timeouts.connect)?;
        let pinged = redis::cmd("PING").query::<()>(&mut con);
        if let Err(e) = pinged {
            self.failed(&mut con, &e);
            return Err(e.into());
        }
        warn_if_evicting(&mut con);
        if let Some(id) = identify(&mut con) {
            let _ = self.identity.set(id);
        }
        drop(con);
        // Warm the pool: the first lock call should not pay for a connect.
        drop(self.conn(None)?);
        Ok(())
    }

    /// A connection of its own for a subscriber, opened within `timeout`:
    /// ours (each value read capped and bounded, see `Wire::next_push`)
    /// for plain TCP and TLS, redis-rs's for the rest.
    pub(crate) fn subscriber(&self, timeout: Duration) -> Result<Wire> {
        let client = self.source.client()?;
        Ok(Wire::open(
            &client,
            &self.timeouts.tls,
            timeout,
            self.timeouts.response,
        )?)
    }
}
