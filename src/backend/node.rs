//! One Redis server (fixed, or the master the Sentinels name): its pool,
//! spare connections for blocking calls, a circuit breaker, `WAIT` acks.
//! Every topology is made of nodes.
//!
//! This is where a call's outcome is classified (see the fault model in
//! GUARANTEES.md): a call that never got a connection is *not sent*
//! ([`Error::is_unsent`]); a call whose reply was lost or late *may have
//! run*; a reply is *executed*. Nothing here retries a script: only the
//! caller knows whether running it twice is harmless.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{FromRedisValue, Value};

use super::pool::{pool, Con, Manager};
use super::source::{client_for, Source};
use super::wire::Wire;
use super::{Answer, Args, Call, Timeouts};
use crate::error::{Error, ErrorKind, Result};
use crate::protocol::timing::POPPED_LEASE;
use crate::util::monotonic::now_nanos;

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

/// Where a queued waiter blocks for its grant (see
/// [`Node::grant_blocking`]).
pub(crate) struct Pop<'a> {
    /// The name's open list, which a hand-over pushes its fence onto...
    pub(crate) list: &'a [u8],
    /// ...and the waiter's own list, which the pop moves it into.
    pub(crate) into: &'a [u8],
    /// The lock key, where the pop alone is the grant (lua/queue.lua
    /// `held_by`); `None` where the granting script must run behind it.
    pub(crate) holder: Option<&'a [u8]>,
}

/// What [`Node::grant_blocking`] came to.
#[derive(Debug)]
pub(crate) struct Blocked {
    /// The grant's answer.
    pub(crate) reply: Answer,
    /// The pop took a grant's wake-up.
    pub(crate) popped: bool,
    /// A grant taken by a pop has a first lease this short, from no
    /// earlier than this instant (a process frozen while it was blocked
    /// must not hold the name long); `None`: the full lease, from when the
    /// attempt was sent.
    pub(crate) short: Option<(Instant, Duration)>,
    /// The grant was made by a call of its own, sent at this instant after
    /// the block (on Cluster, once the slot moved under the block): its
    /// full lease counts from then, not from the block's sending.
    pub(crate) sent: Option<Instant>,
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

/// A connection's worth of blocking, returned when dropped.
struct BlockingSlot<'a>(&'a crossbeam_channel::Sender<()>);

impl Drop for BlockingSlot<'_> {
    fn drop(&mut self) {
        let _ = self.0.try_send(());
    }
}

/// How many idle spare connections a node keeps.
const IDLE_SPARES: usize = 32;

/// How long a checkout waits before a connect error is taken as the
/// answer (see `Node::conn`): what a refused connection costs a call.
/// Only a connect that *failed* ends the wait here: one still under way
/// (a distant server) goes on to the connect timeout, so this can be
/// short. Was 50 ms, which every call against a server that is gone
/// paid.
const QUICK_CHECKOUT: Duration = Duration::from_millis(5);

/// How long a Redlock master that could not be reached is skipped.
const DOWN_FOR: Duration = Duration::from_millis(500);

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

    /// A slot to block a connection in, waiting at most `wait` for one.
    fn blocking_slot(&self, wait: Duration) -> Option<BlockingSlot<'_>> {
        self.blocking_slots
            .1
            .recv_timeout(wait)
            .ok()
            .map(|()| BlockingSlot(&self.blocking_slots.0))
    }

    /// A pooled connection, or a *not sent* error.
    ///
    /// An unreachable server fails within the connect timeout (capped by
    /// the caller's deadline plus one response timeout); only a busy pool —
    /// the server answers, every connection is in use — waits up to the pool
    /// timeout.
    fn conn(&self, deadline: Option<Instant>) -> Result<r2d2::PooledConnection<Manager>> {
        self.check_down()?;
        let start = Instant::now();
        let cap = deadline.map(|d| d.saturating_duration_since(start) + self.timeouts.response);
        let first = self
            .timeouts
            .connect
            .min(self.timeouts.pool)
            .min(cap.unwrap_or(Duration::MAX));
        for _ in 0..=self.pool.max_size() {
            // A refused connection is an answer: given at once, not after
            // the connect timeout that r2d2 spends retrying it. r2d2 keeps
            // its last connect error until a timeout takes it, so an error
            // found here is confirmed by a connection of our own (which,
            // should the server be back, serves as a spare).
            let quick = first.min(QUICK_CHECKOUT).max(Duration::from_millis(1));
            let rest = || {
                first
                    .saturating_sub(start.elapsed())
                    .max(Duration::from_millis(1))
            };
            let got = match self.pool.get_timeout(quick) {
                Ok(c) => Ok(c),
                // No connection yet, and r2d2 failed to connect or has room
                // to: ask once ourselves. On a busy machine r2d2 may not
                // have tried yet, and it retries a refused connection until
                // the connect timeout (a newcomer saw 2 s against a server
                // that was gone).
                Err(e)
                    if e.to_string().contains(": ")
                        || self.pool.state().connections < self.pool.max_size() =>
                {
                    if let Some(refused) = self.refusal(rest()) {
                        self.mark_down();
                        return Err(refused);
                    }
                    self.pool.get_timeout(rest())
                }
                Err(_) => self.pool.get_timeout(rest()),
            };
            let got = match got {
                Ok(c) => Ok(c),
                Err(e) if e.to_string().contains(": ") => Err(e), // could not connect
                // Room in the pool, yet no connection within the connect
                // timeout: the server cannot be reached (r2d2 backs off
                // between attempts, so its last error may be missing).
                Err(e) if self.pool.state().connections < self.pool.max_size() => {
                    let e = Error::new(
                        ErrorKind::Connection,
                        "could not connect to redis within the connect timeout",
                    )
                    .with_source(e)
                    .unsent();
                    self.mark_down();
                    return Err(e);
                }
                Err(_) => {
                    // Every connection is busy: wait for one, up to the pool
                    // timeout in all.
                    let rest = self
                        .timeouts
                        .pool
                        .min(cap.unwrap_or(Duration::MAX))
                        .saturating_sub(start.elapsed());
                    self.pool.get_timeout(rest.max(Duration::from_millis(1)))
                }
            };
            let mut con = got.map_err(|e| {
                let e = Error::from(e).unsent();
                if e.kind() == ErrorKind::Connection {
                    self.mark_down();
                }
                e
            })?;
            // Opened before a connection was found dropped, or to a master
            // the Sentinels have since replaced: retired.
            if con.generation >= self.generation.load(Ordering::Acquire) && !con.deposed() {
                return Ok(con);
            }
            con.broken = true;
        }
        Err(Error::new(ErrorKind::Pool, "no fresh pooled connection").unsent())
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
        lua: &crate::protocol::scripts::Lua,
        keys: &[&[u8]],
        args: &[&[u8]],
        deadline: Option<Instant>,
    ) -> Result<T> {
        let mut last = None;
        for _ in 0..2 {
            let mut con = self.conn(deadline)?;
            match lua.invoke(&mut *con, keys, args) {
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

    /// A spare connection: an idle one opened since the last drop was
    /// noticed, or a new one, opened within the connect timeout and, like
    /// a pooled one, by the caller's deadline plus the response timeout. A
    /// Redlock master that cannot be reached is skipped for a while, as in
    /// [`Node::conn`].
    fn spare(&self, deadline: Option<Instant>) -> Result<Con> {
        if let Some(con) = self.idle()? {
            return Ok(con);
        }
        let cap =
            deadline.map(|d| d.saturating_duration_since(Instant::now()) + self.timeouts.response);
        self.open_spare(self.timeouts.connect.min(cap.unwrap_or(Duration::MAX)))
    }

    /// An idle spare connection opened since the last drop was noticed, if
    /// any; an error if this Redlock master is being skipped.
    pub(crate) fn idle(&self) -> Result<Option<Con>> {
        self.check_down()?;
        let current = self.generation.load(Ordering::Acquire);
        let mut stash = crate::util::mutex::lock(&self.spares);
        stash.retain_mut(|c| c.generation >= current && !c.deposed());
        Ok(stash.pop())
    }

    /// A new spare connection, opened within `connect`.
    pub(crate) fn open_spare(&self, connect: Duration) -> Result<Con> {
        let generation = self.generation.load(Ordering::Acquire);
        let connect = connect.max(Duration::from_millis(1));
        Con::open(&self.source, &self.timeouts, connect, generation).map_err(|e| {
            self.mark_down();
            Error::from(e).unsent()
        })
    }

    /// How long a connection may take to open.
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.timeouts.connect
    }

    /// A pooled connection for the application's own commands (see
    /// `Client::connection`), waited for as any call's.
    pub(crate) fn lend(&self) -> Result<r2d2::PooledConnection<Manager>> {
        self.conn(None)
    }

    /// Why a connection of our own, opened within `connect` (what is left
    /// of the checkout's time: a paused server must not hold a call past
    /// its deadline here), is refused (or fails) now, if it is; one that
    /// opens is kept as a spare.
    fn refusal(&self, connect: Duration) -> Option<Error> {
        match self.open_spare(connect) {
            Ok(con) => {
                self.idle_spare(con);
                None
            }
            Err(e) => Some(e),
        }
    }

    fn idle_spare(&self, con: Con) {
        if con.broken {
            return;
        }
        let mut stash = crate::util::mutex::lock(&self.spares);
        if stash.len() < IDLE_SPARES {
            stash.push(con);
        }
    }

    /// How long a reply may take.
    pub(crate) fn response_timeout(&self) -> Duration {
        self.timeouts.response
    }

    /// Redlock: a master that could not be reached a moment ago is skipped
    /// (an immediate missing vote).
    fn check_down(&self) -> Result<()> {
        match &self.down_until {
            Some(down) if now_nanos() < down.load(Ordering::Relaxed) => Err(Error::new(
                ErrorKind::Connection,
                "master skipped: it could not be reached a moment ago",
            )
            .unsent()),
            _ => Ok(()),
        }
    }

    /// Redlock: skip this master for a while (see `down_until`).
    fn mark_down(&self) {
        if let Some(down) = &self.down_until {
            down.store(now_nanos() + DOWN_FOR.as_nanos() as u64, Ordering::Relaxed);
        }
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

    /// Waits up to `block` for a grant on the name's open list
    /// (`BLMOVE` into the waiter's own list; see [`Pop`]). Two shapes:
    ///
    /// - With [`Pop::holder`] (the lock), the pop alone is the grant
    ///   (lua/queue.lua `held_by`): behind it go only the own list's
    ///   expiry and a look at the lock key (`PTTL`, `GET`), which say
    ///   whether the popped fence is the open grant and how long it runs.
    ///   Nothing else is on the handoff's path; the hold is claimed later,
    ///   by its first renewal (lua/lock_extend.lua). A pop that took
    ///   nothing (the block ran out), or a fence that is not the grant,
    ///   is followed by the script in a second round trip, as a look.
    /// - Otherwise the granting script is pipelined behind the pop: the
    ///   server runs it as soon as the pop returns (or times out), and it
    ///   finds on the own list what the pop took, so a granted waiter
    ///   learns it in the same reply.
    ///
    /// Either way no other thread is involved. Outcomes are those of
    /// [`Node::call`]: a late reply gets `undo` written behind it, and the
    /// connection is retired.
    pub(crate) fn grant_blocking(
        &self,
        pop: &Pop<'_>,
        block: Duration,
        call: &Call<'_>,
        undo: &Call<'_>,
        deadline: Option<Instant>,
    ) -> Result<Blocked> {
        // The script behind the pop (not a lock's: its pop alone is the
        // grant, and the script follows only a pop that took nothing).
        let behind = pop.holder.is_none().then(|| popped_args(call));
        let behind = behind.as_ref().map(|args| call.with_args(args));
        let (packed, count) = pop_pipeline(pop, block, behind.as_ref());
        let Some((replies, at)) =
            self.exchange_blocking(packed, count, block, deadline, Some(undo))?
        else {
            // Not blocked (no slot, or the connection broke while it was):
            // look once without blocking, which renews our entry; a grant
            // made to us meanwhile waits on our list or names our token.
            let args = popped_args(call);
            return self.after_pop(&call.with_args(&args), undo, deadline, false);
        };
        let mut replies = replies.into_iter();
        let popped = self.pop_outcome(replies.next().unwrap_or(Value::Nil));
        if let Some(behind) = &behind {
            let reply = replies.next().unwrap_or(Value::Nil);
            return Ok(Blocked {
                short: popped.is_some().then_some((at, POPPED_LEASE)),
                ..self.granted_by_pop(reply, behind, undo, deadline, popped.is_some())?
            });
        }
        let (_, ttl, value) = (replies.next(), replies.next(), replies.next());
        if let Some(granted) = popped_grant(popped.as_deref(), ttl, value, at) {
            return Ok(granted);
        }
        // Nothing granted by the pop: the script says where we stand (and
        // renews our queue entry), reading and dropping whatever the pop
        // took.
        let args = popped_args(call);
        self.after_pop(&call.with_args(&args), undo, deadline, popped.is_some())
    }

    /// One blocking round trip, the step [`Node::grant_blocking`] and
    /// [`Node::look_blocking`] share: `packed` (`count` commands, a pop
    /// among them blocked at most `block`) on a spare connection of our
    /// own, read by `block` plus a response timeout; error replies stay
    /// values. Returns the replies (all `count` of them) and the instant
    /// just before the write. `Ok(None)`: not blocked, and the caller asks
    /// again without blocking: there was no slot (as many waiters as the
    /// pool size are blocked already: a waiter without one polls within a
    /// slice, however long it means to block), or the connection broke
    /// during the long read (or a signal interrupted it: socket reads with
    /// a timeout are never restarted after EINTR), and closing it ended
    /// the pop; the judge of attempts would count the blocked time as a
    /// slow failure rather than one that broke at once. A late reply
    /// retires the connection, with `undo` (a grant's) written behind it.
    fn exchange_blocking(
        &self,
        packed: Vec<u8>,
        count: usize,
        block: Duration,
        deadline: Option<Instant>,
        undo: Option<&Call<'_>>,
    ) -> Result<Option<(Vec<Value>, Instant)>> {
        let Some(_slot) = self.blocking_slot(block.min(crate::protocol::timing::GRANT_SLICE))
        else {
            return Ok(None);
        };
        let mut con = self.spare(deadline)?;
        let at = Instant::now();
        let until = at + block + self.timeouts.response;
        let replies = {
            // Registered while blocked: a Sentinel switch shuts it.
            let _blocked = con.blocking();
            con.exchange(&packed, count, until, self.timeouts.response)
        };
        // The pipeline (a kilobyte for a latch's look) is freed off the
        // path of the waiter just woken (see `deferred`).
        crate::util::deferred::drop_later(packed);
        let replies = match replies {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Err(self.fail(&mut con, e, undo.map(std::slice::from_ref)));
            }
            Err(e) => {
                self.failed(&mut con, &e);
                if e.is_io_error() {
                    drop(con);
                    return Ok(None);
                }
                return Err(e.into());
            }
        };
        self.idle_spare(con);
        if replies.len() != count {
            return Err(Error::new(
                ErrorKind::Server,
                "a blocking call got fewer replies than it sent commands",
            ));
        }
        Ok(Some((replies, at)))
    }

    /// A look that blocks until an announcement (a latch's opening): the
    /// script `look` (safe to repeat) and, right behind it on one
    /// connection, a pop of `list` back onto itself (`BLMOVE list list`),
    /// blocked at most `block`. The announcement is one element pushed
    /// there with a short life: each blocked connection takes it and puts
    /// it back, so one push wakes every waiter blocked on the list, in
    /// every client, in the same pass of the server's loop, and the list
    /// lapses by itself soon after (nothing is sent behind the pop: a
    /// `DEL` there ran before the woken waiter's reply was written, and
    /// made the latch's wake-up about 4 % slower). `look` makes sure an
    /// element is there when the event already happened, so the pop never
    /// blocks for an announcement made before it. The two go in one write
    /// of about a kilobyte, which the server reads whole: a pop that
    /// reached it after the list lapsed (a write the network split between
    /// the look and the pop, the opening in between) would block until
    /// the event's next look. `look` goes
    /// whole (`EVAL`): a server that lost its scripts still runs it, where
    /// an `EVALSHA` refused would leave the pop behind it blocked for
    /// nothing. Returns the look's reply and whether the pop took
    /// something. Without a connection to block on (as many are blocked as
    /// the pool holds), or after one broke while blocked, the look alone.
    pub(crate) fn look_blocking(
        &self,
        look: &Call<'_>,
        list: &[u8],
        block: Duration,
        deadline: Option<Instant>,
    ) -> Result<(Value, bool)> {
        let plain = || -> Result<(Value, bool)> {
            let keys: Vec<&[u8]> = look.keys.iter().collect();
            let args: Vec<&[u8]> = look.args.iter().collect();
            Ok((self.eval(look.lua, &keys, &args, deadline)?, false))
        };
        let packed = redis::pipe()
            .add_command(look.command(true))
            .cmd("BLMOVE")
            .arg(list)
            .arg(list)
            .arg("LEFT")
            .arg("RIGHT")
            .arg(block_timeout(block))
            .get_packed_pipeline();
        let Some((replies, _)) = self.exchange_blocking(packed, 2, block, deadline, None)? else {
            return plain();
        };
        let mut replies = replies.into_iter();
        let (seen, pop) = (
            replies.next().unwrap_or(Value::Nil),
            replies.next().unwrap_or(Value::Nil),
        );
        let popped = self.pop_outcome(pop).is_some();
        match seen.extract_error() {
            Ok(v) => Ok((v, popped)),
            // Not allowed (an ACL without +eval or RPUSH): look plainly,
            // and wait for messages from now on.
            Err(e) if e.code() == Some("NOPERM") => {
                self.refuse_blocking("a look that blocks", e.detail().unwrap_or(""));
                plain()
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The pop's reply: the fence (or other word) it took, if any. A
    /// refused pop turns this node's waiters to release messages.
    fn pop_outcome(&self, pop: Value) -> Option<Vec<u8>> {
        match pop {
            Value::BulkString(b) => Some(b),
            Value::ServerError(e) => {
                if e.code() == "NOPERM" {
                    self.refuse_blocking("a blocking pop", e.details().unwrap_or(""));
                }
                None
            }
            _ => None,
        }
    }

    /// The script sent on its own after a pop (`call` says 'popped'): a
    /// grant it takes from our own list has the short first lease of one
    /// taken by a pop ([`POPPED_LEASE`]), from this sending.
    fn after_pop(
        &self,
        call: &Call<'_>,
        undo: &Call<'_>,
        deadline: Option<Instant>,
        popped: bool,
    ) -> Result<Blocked> {
        let at = Instant::now();
        match self.call(call, Some(undo), deadline) {
            Ok(reply) => Ok(Blocked {
                reply,
                popped,
                short: Some((at, POPPED_LEASE)),
                sent: None,
            }),
            // Reading what the pop took is not allowed (an ACL with BLMOVE
            // but without LPOP): wait for messages instead.
            Err(e) if e.server_code() == Some("NOPERM") => {
                self.refuse_blocking("LPOP behind BLMOVE", &e.to_string());
                Ok(Blocked {
                    reply: Answer::Busy(-1),
                    popped: false,
                    short: None,
                    sent: None,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// The server refuses `what`, which waiting on it needs: this node's
    /// waiters wait for release messages from now on.
    fn refuse_blocking(&self, what: &str, detail: &str) {
        if self.blocks() {
            log::warn!(
                "redlease: the server refuses {what} ({detail}); waiters fall back to release \
                 messages (slower). Allow +blpop +blmove +lpop +rpush, as the README's ACL \
                 line does"
            );
        }
        self.blocking_refused.store(true, Ordering::Relaxed);
    }

    /// What the script behind a pop answered. A refused `LPOP` turns this
    /// node's waiters to release messages.
    fn granted_by_pop(
        &self,
        reply: Value,
        call: &Call<'_>,
        undo: &Call<'_>,
        deadline: Option<Instant>,
        popped: bool,
    ) -> Result<Blocked> {
        match reply {
            // The script loads on an ordinary call; a grant the pop took
            // stays ours meanwhile (the lock names our token).
            Value::ServerError(e) if e.code() == "NOSCRIPT" => {
                self.after_pop(call, undo, deadline, popped)
            }
            // The pop was allowed, reading what it took is not (an ACL
            // with BLMOVE but without LPOP): wait for messages instead.
            Value::ServerError(e) if e.code() == "NOPERM" => {
                self.refuse_blocking("LPOP behind BLMOVE", e.details().unwrap_or(""));
                Ok(Blocked {
                    reply: Answer::Busy(-1),
                    popped: false,
                    short: None,
                    sent: None,
                })
            }
            Value::ServerError(e) => Err(redis::RedisError::from(e).into()),
            reply => Ok(Blocked {
                reply: Answer::from_redis_value(reply).map_err(redis::RedisError::from)?,
                popped,
                short: None,
                sent: None,
            }),
        }
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

/// Logs a warning when the server's `maxmemory-policy` may evict keys:
/// every lease key has a TTL, so `volatile-*` policies evict them too.
/// The server's product and version (`Redis 7.0.15`, `Valkey 9.1.2`), from
/// `HELLO` (no protocol switch) or else `INFO server`; `None` if an ACL
/// refuses both (nothing depends on it: it is shown, not used).
pub(crate) fn identify(con: &mut dyn redis::ConnectionLike) -> Option<String> {
    let hello = redis::cmd("HELLO").query::<Value>(con).map(|v| match v {
        Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        Value::Array(items) => items,
        _ => Vec::new(),
    });
    if let Ok(items) = hello {
        let text = |v: &Value| match v {
            Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        };
        let mut product = None;
        let mut version = None;
        for pair in items.chunks(2) {
            if let [k, v] = pair {
                match text(k).as_deref() {
                    Some("server") => product = text(v),
                    Some("version") => version = text(v),
                    _ => {}
                }
            }
        }
        if let (Some(p), Some(v)) = (product, version) {
            return Some(format!("{} {}", titled(&plain(&p)), plain(&v)));
        }
    }
    let info: String = redis::cmd("INFO").arg("server").query(con).ok()?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_owned)
    };
    // Valkey also reports a `redis_version` (7.2.4) for old clients.
    match (field("valkey_version"), field("redis_version")) {
        (Some(v), _) => Some(format!("Valkey {}", plain(&v))),
        (None, Some(v)) => Some(format!("Redis {}", plain(&v))),
        _ => None,
    }
}

/// What a server says of itself, made safe to print anywhere: at most 32
/// characters of those a name or version is written with (`7.0.15`,
/// `8.0.0-rc1+build`), each other one a `?`. A hostile server's version
/// with a newline and terminal escapes forged `doctor` lines, cleared the
/// screen and set the terminal's title.
fn plain(said: &str) -> String {
    said.chars()
        .take(32)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '_' | '~') {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// `redis` → `Redis`, `valkey` → `Valkey`.
fn titled(product: &str) -> String {
    let mut c = product.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

pub(crate) fn warn_if_evicting(con: &mut dyn redis::ConnectionLike) {
    // CONFIG may be forbidden (ACL, managed services): then we cannot tell.
    // (Pairs in an array on RESP2, a map on RESP3: a map reads either.)
    if let Ok(v) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query::<std::collections::HashMap<String, String>>(con)
    {
        if let Some(policy) = v.get("maxmemory-policy") {
            if policy.starts_with("allkeys-") || policy.starts_with("volatile-") {
                log::warn!(
                    "redlease: maxmemory-policy is {policy}: Redis may evict lock keys under \
                     memory pressure, silently ending leases; use noeviction"
                );
            }
        }
    }
}

/// `call`'s arguments for a script sent behind a pop from the open list:
/// it is told so (its last argument, 'popped'), and so is any repeat of
/// it, since what the pop took waits on our own list until a script reads
/// it. Built only where such a script is sent: a lock's granted pop
/// sends none, and freeing the copy cost its handoff too.
fn popped_args(call: &Call<'_>) -> Args {
    let mut args: Args = call.args.iter().collect();
    args.push(b"popped");
    args
}

/// A blocking pop's timeout as the server reads it, in seconds: whole
/// milliseconds, rounded down (a pop never outlasts the wait it was sent
/// for, but by the server's clock tick, which it ends on anyway), and
/// never under 2 ms. A 0 blocks for ever, and so does `0.001` on Redis
/// 6.2, which truncates 0.001 × 1000 in long doubles (0.999…) to 0: a
/// wait whose block came out at a millisecond then ended with an error
/// at the read's limit, a response timeout late. Written from integers:
/// a float printed to three places cost about 1.8K instructions a block.
fn block_timeout(block: Duration) -> String {
    let ms = block.as_millis().max(2);
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// [`Node::grant_blocking`]'s pipeline, packed, and how many commands it
/// holds: the pop, and behind it the granting script, or (with
/// [`Pop::holder`]) the own list's expiry and a look at the lock.
fn pop_pipeline(pop: &Pop<'_>, block: Duration, behind: Option<&Call<'_>>) -> (Vec<u8>, usize) {
    let mut pipe = redis::pipe();
    let timeout = block_timeout(block);
    pipe.cmd("BLMOVE")
        .arg(pop.list)
        .arg(pop.into)
        .arg("LEFT")
        .arg("RIGHT")
        .arg(timeout);
    match (pop.holder, behind) {
        (Some(holder), _) => {
            // A grant popped and never claimed (the process died) is gone
            // with its own list; the `PTTL` comes before the `GET`, so a
            // value still the grant's proves the time left is its.
            pipe.cmd("PEXPIRE")
                .arg(pop.into)
                .arg(crate::protocol::timing::GRANT_CLAIM.as_millis() as u64 * 2);
            pipe.cmd("PTTL").arg(holder);
            pipe.cmd("GET").arg(holder);
            (pipe.get_packed_pipeline(), 4)
        }
        (None, Some(call)) => {
            pipe.add_command(call.command(false));
            (pipe.get_packed_pipeline(), 2)
        }
        // Nothing behind: the pop alone (every shape without a holder
        // sends its script behind today).
        (None, None) => (pipe.get_packed_pipeline(), 1),
    }
}

/// The grant a pop alone took: the fence it `popped`, if the lock's value
/// (read after its `ttl`) is that fence's open grant (`rl:grant#<fence>`,
/// written once per fence), with the time it has left from `at`.
fn popped_grant(
    popped: Option<&[u8]>,
    ttl: Option<Value>,
    value: Option<Value>,
    at: Instant,
) -> Option<Blocked> {
    let (Some(fence), Some(Value::Int(ms)), Some(Value::BulkString(v))) = (popped, ttl, value)
    else {
        return None;
    };
    if ms <= 0 || v.strip_prefix(b"rl:grant#") != Some(fence) {
        return None;
    }
    Some(Blocked {
        reply: Answer::Granted(std::str::from_utf8(fence).ok()?.parse::<i64>().ok()?),
        popped: true,
        short: Some((at, Duration::from_millis(ms as u64))),
        sent: None,
    })
}

#[cfg(test)]
mod tests {
    use super::block_timeout;
    use std::time::Duration;

    #[test]
    fn a_block_timeout_is_whole_milliseconds_rounded_down_and_never_under_two() {
        // `0.001` blocks for ever on Redis 6.2 (see `block_timeout`).
        assert_eq!(block_timeout(Duration::ZERO), "0.002");
        assert_eq!(block_timeout(Duration::from_micros(999)), "0.002");
        assert_eq!(block_timeout(Duration::from_micros(1_999)), "0.002");
        assert_eq!(block_timeout(Duration::from_micros(2_999)), "0.002");
        assert_eq!(block_timeout(Duration::from_millis(3)), "0.003");
        assert_eq!(block_timeout(Duration::from_millis(250)), "0.250");
        assert_eq!(block_timeout(Duration::from_secs(60)), "60.000");
        assert_eq!(block_timeout(Duration::from_millis(75_042)), "75.042");
    }
}
