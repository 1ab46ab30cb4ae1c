//! Getting a connection to a node: the pool's checkout (a refused
//! connection is answered in a few milliseconds, a busy pool waits), the
//! spares kept for blocking calls and fan-outs, and Redlock's circuit
//! breaker for a master that could not be reached.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Node;
use crate::backend::pool::{Con, Manager};
use crate::error::{Error, ErrorKind, Result};
use crate::util::monotonic::now_nanos;

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

impl Node {
    /// A pooled connection, or a *not sent* error.
    ///
    /// An unreachable server fails within the connect timeout (capped by
    /// the caller's deadline plus one response timeout); only a busy pool —
    /// the server answers, every connection is in use — waits up to the pool
    /// timeout.
    pub(super) fn conn(
        &self,
        deadline: Option<Instant>,
    ) -> Result<r2d2::PooledConnection<Manager>> {
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

    /// A spare connection: an idle one opened since the last drop was
    /// noticed, or a new one, opened within the connect timeout and, like
    /// a pooled one, by the caller's deadline plus the response timeout. A
    /// Redlock master that cannot be reached is skipped for a while, as in
    /// [`Node::conn`].
    pub(super) fn spare(&self, deadline: Option<Instant>) -> Result<Con> {
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
    pub(super) fn refusal(&self, connect: Duration) -> Option<Error> {
        match self.open_spare(connect) {
            Ok(con) => {
                self.idle_spare(con);
                None
            }
            Err(e) => Some(e),
        }
    }

    pub(super) fn idle_spare(&self, con: Con) {
        if con.broken {
            return;
        }
        let mut stash = crate::util::mutex::lock(&self.spares);
        if stash.len() < IDLE_SPARES {
            stash.push(con);
        }
    }

    /// Redlock: a master that could not be reached a moment ago is skipped
    /// (an immediate missing vote).
    pub(super) fn check_down(&self) -> Result<()> {
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
    pub(super) fn mark_down(&self) {
        if let Some(down) = &self.down_until {
            down.store(now_nanos() + DOWN_FOR.as_nanos() as u64, Ordering::Relaxed);
        }
    }
}
