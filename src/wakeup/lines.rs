//! A client's local lines: its threads that wait for the same key queue
//! in arrival order, and only the head of each line tries the server, so
//! a thread that releases and asks again queues behind the threads of its
//! own client already waiting instead of winning every race against their
//! wake-up.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use super::Shared;
use crate::protocol::delivery::{announced, InLine};
use crate::util::mutex::lock;

/// A waiting thread's wake-up slot: `true` = a release (or other event)
/// of its key was announced, `false` = a nudge to look again (a reconnect,
/// a turn passed on).
pub(super) struct Waiter {
    tx: Sender<bool>,
    pub(super) rx: Receiver<bool>,
    /// The local line it waits in (see [`Turns::Local`]).
    line: u32,
    /// It tried the server before it joined its line (two threads of a
    /// client can both get there first): it may be queued in Redis, and a
    /// grant made to it lapses unless it hears of it, so it hears every
    /// announcement of its key, not only as its line's head.
    tried: bool,
}

impl Waiter {
    pub(super) fn new(line: u32, tried: bool) -> Arc<Waiter> {
        // Capacity 1: wake-ups coalesce, and a wake-up sent between a failed
        // attempt and the wait is kept, so it is never missed.
        let (tx, rx) = crossbeam_channel::bounded(1);
        Arc::new(Waiter {
            tx,
            rx,
            line,
            tried,
        })
    }

    pub(super) fn wake(&self) {
        let _ = self.tx.try_send(false);
    }

    pub(super) fn signal(&self) {
        let _ = self.tx.try_send(true);
    }
}

/// How the waiters of one key take turns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Turns {
    /// Local FIFO lines: only the head of each line retries in Redis. One
    /// line for exclusive primitives; a plain semaphore has one per permit
    /// count, since a request that fits may pass one that does not (the
    /// server lets it), and a thread must not wait behind a larger request
    /// of its own client while the permits it asks for are free.
    Local(u32),
    /// Every waiter retries on each wake-up; Redis decides the order (fair
    /// primitives keep their own queue there).
    Server,
}

impl Turns {
    /// Server-ordered for fair primitives (their queue is in Redis), local
    /// FIFO otherwise.
    pub(crate) fn fair(fair: bool) -> Turns {
        if fair {
            Turns::Server
        } else {
            Turns::Local(0)
        }
    }
}

pub(super) type Queues = HashMap<(Vec<u8>, bool), VecDeque<Arc<Waiter>>>;

impl InLine for Arc<Waiter> {
    fn line(&self) -> u32 {
        self.line
    }
    fn tried(&self) -> bool {
        self.tried
    }
}

/// A place in a key's local queue; leaving it wakes the next waiter.
pub(super) struct Membership<'a> {
    shared: &'a Shared,
    key: (Vec<u8>, bool),
    waiter: Arc<Waiter>,
}

impl<'a> Membership<'a> {
    pub(super) fn join(
        shared: &'a Shared,
        key: &[u8],
        server: bool,
        waiter: Arc<Waiter>,
    ) -> Membership<'a> {
        let key = (key.to_vec(), server);
        lock(&shared.queues)
            .entry(key.clone())
            .or_default()
            .push_back(waiter.clone());
        Membership {
            shared,
            key,
            waiter,
        }
    }
}

impl Drop for Membership<'_> {
    fn drop(&mut self) {
        let mut queues = lock(&self.shared.queues);
        let mut emptied = None;
        if let Some(q) = queues.get_mut(&self.key) {
            q.retain(|w| !Arc::ptr_eq(w, &self.waiter));
            if q.is_empty() {
                emptied = queues.remove_entry(&self.key);
            } else if !self.key.1 {
                // The next in our line is its head now.
                if let Some(next) = q.iter().find(|w| w.line == self.waiter.line) {
                    next.wake();
                }
            }
        }
        drop(queues);
        // A waiter that got the name leaves here on its way to returning
        // the guard: its line and channel are freed off that path.
        let key = std::mem::take(&mut self.key.0);
        crate::util::deferred::drop_later((emptied, key, self.waiter.clone()));
    }
}
impl Shared {
    /// Whether a waiter of ours waits in `line` of `key`.
    pub(super) fn has_queue(&self, key: &[u8], line: u32) -> bool {
        lock(&self.queues)
            .get(&(key.to_vec(), false))
            .is_some_and(|q| q.iter().any(|w| w.line == line))
    }

    pub(super) fn is_head(&self, key: &[u8], waiter: &Arc<Waiter>) -> bool {
        lock(&self.queues)
            .get(&(key.to_vec(), false))
            .and_then(|q| q.iter().find(|w| w.line == waiter.line))
            .is_some_and(|h| Arc::ptr_eq(h, waiter))
    }

    /// Wakes the local heads of `key`, every waiter of it that tried the
    /// server first, and every server-ordered waiter.
    pub(super) fn notify(&self, key: &[u8]) {
        let queues = lock(&self.queues);
        if queues.is_empty() {
            // Nobody in this client waits (most releases): no key to build.
            return;
        }
        let mut k = (key.to_vec(), false);
        for w in queues.get(&k).into_iter().flat_map(announced) {
            w.signal();
        }
        k.1 = true;
        for w in queues.get(&k).into_iter().flatten() {
            w.signal();
        }
    }

    pub(super) fn notify_all(&self) {
        for ((_, server), q) in lock(&self.queues).iter() {
            if *server {
                q.iter().for_each(|w| w.wake());
            } else {
                announced(q).for_each(|w| w.wake());
            }
        }
    }
}
