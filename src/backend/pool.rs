//! A node's pooled connections: the r2d2 pool and its manager, and `Con`,
//! a connection that we can retire (not only the socket), with the reads
//! and writes a node's calls are made of.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

#[cfg(feature = "sentinel")]
use crate::error::DEPOSED;

use super::source::Source;
use super::wire::Wire;
use super::{Call, Timeouts};

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
        .error_handler(Box::new(ThrottledErrors::default()))
        .build_unchecked(manager)
}

/// r2d2 logs every failed connection attempt at ERROR (hundreds in one
/// outage); callers already get each failure as an `Error`. This logs one
/// warning per minute at most, with how many were folded into it.
#[derive(Debug, Default)]
struct ThrottledErrors {
    last: std::sync::Mutex<Option<Instant>>,
    folded: AtomicU64,
}

impl<E: std::fmt::Display> r2d2::HandleError<E> for ThrottledErrors {
    fn handle_error(&self, error: E) {
        let mut last = crate::util::mutex::lock(&self.last);
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(60)) {
            self.folded.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(Instant::now());
        let folded = self.folded.swap(0, Ordering::Relaxed);
        let text = crate::error::without_script_hash(&error.to_string());
        if folded > 0 {
            log::warn!("redlease: cannot open a connection: {text} ({folded} more failures in the last minute)");
        } else {
            log::warn!("redlease: cannot open a connection: {text}");
        }
    }
}

/// A pooled connection that can be retired by us, not only by the socket:
/// after a failover the old master may still accept connections but answer
/// writes with `READONLY`, and a connection whose reply is late must not
/// serve the next caller (it would wait behind the stalled command).
pub(crate) struct Con {
    pub(super) inner: Wire,
    pub(super) broken: bool,
    /// The node's generation when this connection was opened (see
    /// `Node::generation`).
    pub(super) generation: u64,
    /// Sentinel: what tells that its server was deposed.
    deposal: Option<Deposal>,
}

/// What a connection to the Sentinels' master checks before it carries a
/// call and before a reply counts: that the Sentinels have not named
/// another master since it opened (as this client heard them, see
/// `sentinel::Named`). A deposed master that was stopped through the
/// failover comes back still acting as master, granting and renewing,
/// until the Sentinels reconfigure it; nothing it answers may count.
#[cfg(feature = "sentinel")]
pub(crate) struct Deposal {
    named: std::sync::Arc<super::sentinel::Named>,
    /// The server this connection went to (`host:port`, as the Sentinel
    /// named it).
    addr: String,
    /// `named`'s epoch when `addr` was last found to be the named master.
    epoch: u64,
}

#[cfg(not(feature = "sentinel"))]
pub(crate) enum Deposal {}

impl Deposal {
    #[cfg(feature = "sentinel")]
    pub(super) fn new(
        named: &std::sync::Arc<super::sentinel::Named>,
        addr: String,
        epoch: u64,
    ) -> Deposal {
        Deposal {
            named: named.clone(),
            addr,
            epoch,
        }
    }

    /// Whether the Sentinels named another master than this connection's
    /// server since it was last checked. One atomic load while nothing
    /// changed.
    fn deposed(&mut self) -> bool {
        #[cfg(feature = "sentinel")]
        {
            let now = self.named.epoch();
            if now == self.epoch {
                return false;
            }
            match self.named.addr() {
                Some(named) if named != self.addr => true,
                _ => {
                    self.epoch = now;
                    false
                }
            }
        }
        #[cfg(not(feature = "sentinel"))]
        match *self {}
    }

    /// The error a deposed server's reply becomes: the call did not run on
    /// the master of record.
    fn error(&self) -> redis::RedisError {
        #[cfg(feature = "sentinel")]
        {
            redis::make_extension_error(
                DEPOSED.to_owned(),
                Some(format!(
                    "{} is no longer the master the Sentinels name",
                    self.addr
                )),
            )
        }
        #[cfg(not(feature = "sentinel"))]
        match *self {}
    }
}

/// A connection registered as blocked in a call (see [`Con::blocking`]),
/// until dropped.
#[cfg(feature = "sentinel")]
pub(super) struct Blocking(#[allow(dead_code)] Option<super::sentinel::BlockedCall>);
#[cfg(not(feature = "sentinel"))]
pub(super) struct Blocking;

impl Con {
    /// A new connection with read and write timeouts set to `response`:
    /// how the pool and the spares both open theirs.
    pub(super) fn open(
        source: &Source,
        timeouts: &Timeouts,
        connect: Duration,
        generation: u64,
    ) -> redis::RedisResult<Con> {
        let (client, deposal) = source.target()?;
        let inner = Wire::open(&client, &timeouts.tls, connect, timeouts.response)?;
        Ok(Con {
            inner,
            broken: false,
            generation,
            deposal,
        })
    }

    /// Whether this connection's server was deposed by a failover (see
    /// [`Deposal`]); such a connection is retired.
    pub(super) fn deposed(&mut self) -> bool {
        let deposed = self.deposal.as_mut().is_some_and(Deposal::deposed);
        self.broken |= deposed;
        deposed
    }

    /// Sentinel: registers this connection as blocked in a call until the
    /// guard is dropped, so that a switch of master ends the call at once
    /// (see `sentinel::Named::blocking`).
    pub(super) fn blocking(&self) -> Blocking {
        #[cfg(feature = "sentinel")]
        {
            Blocking(
                self.deposal
                    .as_ref()
                    .and_then(|d| Some(d.named.blocking(&d.addr, self.inner.interrupter()?))),
            )
        }
        #[cfg(not(feature = "sentinel"))]
        Blocking
    }

    /// `replies`, unless they came from a deposed server: then an error
    /// that says the call did not run on the master (and the connection is
    /// retired).
    fn counted<T>(&mut self, replies: redis::RedisResult<T>) -> redis::RedisResult<T> {
        if let (Ok(_), Some(deposal)) = (&replies, self.deposal.as_mut()) {
            if deposal.deposed() {
                self.broken = true;
                return Err(deposal.error());
            }
        }
        replies
    }

    /// Writes `packed` (`count` commands) and reads their replies (see
    /// [`Con::replies`]).
    pub(super) fn exchange(
        &mut self,
        packed: &[u8],
        count: usize,
        until: Instant,
        response: Duration,
    ) -> redis::RedisResult<Vec<Value>> {
        self.inner.send_packed_command(packed)?;
        self.replies(count, until, response)
    }

    /// Reads `count` replies, all due by `until`; error replies are values.
    /// Stops at the first failure: redis-rs's own pipeline reading goes on
    /// after a timeout, waiting a whole timeout for each remaining reply —
    /// minutes for a renewal batch on a stalled server, during which every
    /// other lease of that batch's backend goes unrenewed. The read timeout
    /// is back to `response` afterwards.
    pub(super) fn replies(
        &mut self,
        count: usize,
        until: Instant,
        response: Duration,
    ) -> redis::RedisResult<Vec<Value>> {
        let mut out = Vec::with_capacity(count);
        let mut result = Ok(());
        while out.len() < count {
            let left = until.saturating_duration_since(Instant::now());
            let _ = self
                .inner
                .set_read_timeout(Some(left.max(Duration::from_millis(1))));
            match self.inner.recv_response() {
                // RESP3 pushes are not replies.
                Ok(Value::Push { .. }) => {}
                Ok(v) => out.push(v),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let _ = self.inner.set_read_timeout(Some(response));
        self.counted(result.map(|()| out))
    }

    /// Writes `calls` (undos) without waiting for their replies, in one
    /// write: each distinct script loaded once (`SCRIPT LOAD`), then an
    /// `EVALSHA` per call. The server runs them after everything sent
    /// before on this connection, even once we have closed it, provided it
    /// reads them before its replies to the earlier requests reach our
    /// closed socket (whose reset discards what it has not read yet):
    /// hence as few bytes as possible, not a self-contained `EVAL` per
    /// call. Redis 6.2 reads 16 KiB at a time, and three `EVAL`s of the
    /// release script behind a late multi-lock grant did not fit: two
    /// locks stayed held until their leases ran out.
    pub(super) fn send_undo(&mut self, calls: &[Call<'_>]) {
        let (pipe, _) = batch(calls);
        let _ = self.inner.send_packed_command(&pipe.get_packed_pipeline());
    }
}

impl redis::ConnectionLike for Con {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<Value> {
        let reply = self.inner.req_packed_command(cmd);
        self.counted(reply)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<Value>> {
        let replies = self.inner.req_packed_commands(cmd, offset, count);
        self.counted(replies)
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
    pub(super) source: Arc<Source>,
    pub(super) timeouts: Timeouts,
    pub(super) generation: Arc<AtomicU64>,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Con;
    type Error = redis::RedisError;

    fn connect(&self) -> Result<Con, redis::RedisError> {
        let generation = self.generation.load(Ordering::Acquire);
        Con::open(
            &self.source,
            &self.timeouts,
            self.timeouts.connect,
            generation,
        )
    }

    fn is_valid(&self, con: &mut Con) -> Result<(), redis::RedisError> {
        redis::cmd("PING").query::<()>(con)
    }

    fn has_broken(&self, con: &mut Con) -> bool {
        !redis::ConnectionLike::is_open(con)
    }
}

/// Many calls as one pipeline, each script loaded in front (a renewal
/// batch must not fail on `NOSCRIPT` after a restart); also how many of its
/// replies are those loads, which come first.
pub(crate) fn batch(calls: &[Call<'_>]) -> (redis::Pipeline, usize) {
    let mut pipe = redis::pipe();
    let mut loaded: Vec<&str> = Vec::new();
    for call in calls {
        let hash = call.lua.script.get_hash();
        if !loaded.contains(&hash) {
            loaded.push(hash);
            pipe.cmd("SCRIPT").arg("LOAD").arg(call.lua.code);
        }
    }
    for call in calls {
        pipe.add_command(call.command(false));
    }
    (pipe, loaded.len())
}
