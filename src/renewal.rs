//! The one renewal ("watchdog") thread of the process.
//!
//! Holders register a lease: which backend, which extend script with which
//! keys and arguments, how long the lease is. Every third of the lease the
//! thread re-runs the script for all leases that are due, pipelined per
//! backend, so one thread keeps tens of thousands of leases alive with a few
//! round trips. A reply of `0` means the token is gone: the lease is marked
//! lost, which the holder sees without a round trip. Connection errors are
//! retried until the lease would have expired on the server, then the lease
//! is marked lost too.
//!
//! The thread holds only `Weak` references to backends, so it never keeps a
//! client alive; leases of a dropped backend are forgotten.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use once_cell::sync::Lazy;
use redis::Value;

use crate::backend::{Backend, Call};
use crate::scripts::Lua;

/// How many calls go into one pipeline: large enough to make 10,000 leases a
/// handful of round trips, small enough to keep one reply under a few MB.
const BATCH: usize = 2_000;

/// What a holder and the renewal thread share about one lease.
///
/// `expires` is a conservative local estimate of when the lease ends on the
/// server: the instant the acquiring (or last successful renewing) command
/// was *sent*, plus the lease. The server applied it later, so the real
/// expiry is never earlier. Once that instant passes without a renewal —
/// the process was paused, or the server unreachable — the lease counts as
/// lost at once, without waiting for the renewal thread to find out.
#[derive(Debug)]
pub(crate) struct LeaseState {
    lost: AtomicBool,
    done: AtomicBool,
    /// Nanoseconds since `EPOCH`.
    expires: AtomicU64,
}

static EPOCH: Lazy<Instant> = Lazy::new(Instant::now);

fn to_nanos(t: Instant) -> u64 {
    t.saturating_duration_since(*EPOCH).as_nanos() as u64
}

impl LeaseState {
    pub(crate) fn new(expires: Instant) -> Arc<LeaseState> {
        Arc::new(LeaseState {
            lost: AtomicBool::new(false),
            done: AtomicBool::new(false),
            expires: AtomicU64::new(to_nanos(expires)),
        })
    }

    /// Whether the lease is still believed held; no round trip.
    pub(crate) fn is_held(&self) -> bool {
        !self.done.load(Ordering::Acquire) && !self.is_lost()
    }

    /// Lost: the renewal thread found it gone, or its expiry passed unrenewed.
    /// Monotonic: once true, it stays true.
    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return true;
        }
        if to_nanos(Instant::now()) >= self.expires.load(Ordering::Acquire) {
            self.lost.store(true, Ordering::Release);
            return true;
        }
        false
    }

    pub(crate) fn mark_lost(&self) {
        self.lost.store(true, Ordering::Release);
    }

    /// A renewal sent at `sent` succeeded. If the old expiry had already
    /// passed, the holder may have been told the lease was lost; it stays
    /// lost (a lease never comes back).
    fn renewed(&self, sent: Instant, lease: Duration) {
        if !self.is_lost() {
            self.expires
                .fetch_max(to_nanos(sent + lease), Ordering::AcqRel);
        }
    }

    /// The holder released (or is releasing): stop renewing.
    pub(crate) fn finish(&self) {
        self.done.store(true, Ordering::Release);
    }

    fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
}

/// One lease to keep alive.
pub(crate) struct Renewal {
    pub(crate) backend: Weak<Backend>,
    pub(crate) lua: &'static Lua,
    pub(crate) keys: Vec<Vec<u8>>,
    pub(crate) args: Vec<Vec<u8>>,
    pub(crate) lease: Duration,
    /// When the lease ends on the server at the earliest, as far as the
    /// holder knows (the instant the acquire was sent, plus the lease).
    pub(crate) expires: Instant,
    pub(crate) state: Arc<LeaseState>,
}

struct Shared {
    tx: Sender<Renewal>,
    /// `None` if the OS refused a thread: leases are then never renewed and
    /// each is reported lost when its lease runs out (never a panic).
    thread: Option<Thread>,
    /// When the thread plans to wake next, in ns since `epoch`; registrations
    /// due earlier unpark it, the rest wait without waking it.
    planned: AtomicU64,
    epoch: Instant,
}

static SHARED: Lazy<Shared> = Lazy::new(|| {
    let (tx, rx) = crossbeam_channel::unbounded();
    let epoch = Instant::now();
    let handle = std::thread::Builder::new()
        .name("redlease-renew".into())
        .spawn(move || Worker::new(rx).run());
    let thread = match handle {
        Ok(h) => Some(h.thread().clone()),
        Err(e) => {
            log::error!(
                "redlease: cannot start the renewal thread ({e}); leases will not be renewed"
            );
            None
        }
    };
    Shared {
        tx,
        thread,
        planned: AtomicU64::new(0),
        epoch,
    }
});

fn nanos_since(epoch: Instant, t: Instant) -> u64 {
    t.saturating_duration_since(epoch).as_nanos() as u64
}

/// Hands a lease to the renewal thread. It is renewed every third of its
/// lease until its state is finished or lost.
pub(crate) fn register(renewal: Renewal) {
    let shared = &*SHARED;
    let due = first_due(&renewal);
    if shared.tx.send(renewal).is_err() {
        log::error!("redlease: the renewal thread is gone; lease will not be renewed");
        return;
    }
    // Pairs with the fence in `Worker::run`: either the worker sees this
    // registration before parking, or we see its plan and unpark it.
    std::sync::atomic::fence(Ordering::SeqCst);
    if nanos_since(shared.epoch, due) < shared.planned.load(Ordering::SeqCst) {
        if let Some(t) = &shared.thread {
            t.unpark();
        }
    }
}

/// The first renewal is due a third of the lease after the acquisition.
fn first_due(renewal: &Renewal) -> Instant {
    let acquired = renewal
        .expires
        .checked_sub(renewal.lease)
        .unwrap_or_else(Instant::now);
    acquired + renewal.lease / 3
}

struct Entry {
    renewal: Renewal,
    due: Instant,
}

struct Worker {
    rx: Receiver<Renewal>,
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    entries: HashMap<u64, Entry>,
    next_id: u64,
}

impl Worker {
    fn new(rx: Receiver<Renewal>) -> Worker {
        Worker {
            rx,
            heap: BinaryHeap::new(),
            entries: HashMap::new(),
            next_id: 0,
        }
    }

    fn run(mut self) {
        let shared = &*SHARED;
        loop {
            while let Ok(renewal) = self.rx.try_recv() {
                // Counted from the acquisition, not from when we look: the
                // worker may have slept through the registration.
                let due = first_due(&renewal);
                self.push(Entry { renewal, due });
            }
            let now = Instant::now();
            let batch = self.take_due(now);
            if !batch.is_empty() {
                self.renew(batch);
                continue;
            }
            let next = self.heap.peek().map(|Reverse((due, _))| *due);
            // Publish the plan before the last look at the channel, so a
            // registration sent meanwhile either is seen or unparks us.
            let planned = next.map_or(u64::MAX, |d| nanos_since(shared.epoch, d));
            shared.planned.store(planned, Ordering::SeqCst);
            std::sync::atomic::fence(Ordering::SeqCst);
            if !self.rx.is_empty() {
                continue;
            }
            match next {
                Some(due) => std::thread::park_timeout(due.saturating_duration_since(now)),
                None => std::thread::park(),
            }
            shared.planned.store(0, Ordering::SeqCst);
        }
    }

    fn push(&mut self, entry: Entry) {
        let id = self.next_id;
        self.next_id += 1;
        self.heap.push(Reverse((entry.due, id)));
        self.entries.insert(id, entry);
    }

    /// Everything due now, or due within a tenth of its period (so that
    /// leases taken close together are renewed in one batch).
    fn take_due(&mut self, now: Instant) -> Vec<Entry> {
        let mut out = Vec::new();
        while let Some(Reverse((due, id))) = self.heap.peek().copied() {
            let Some(entry) = self.entries.get(&id) else {
                self.heap.pop();
                continue;
            };
            if due > now + entry.renewal.lease / 30 {
                break;
            }
            self.heap.pop();
            if let Some(entry) = self.entries.remove(&id) {
                if !entry.renewal.state.is_done() && !entry.renewal.state.is_lost() {
                    out.push(entry);
                }
            }
        }
        out
    }

    fn renew(&mut self, batch: Vec<Entry>) {
        // Group by live backend: one pipeline per server. Upgrading first
        // matters: a dropped backend's address may be reused by a new one,
        // so grouping by the weak pointer alone could mix the two.
        let mut groups: HashMap<*const Backend, (Arc<Backend>, Vec<Entry>)> = HashMap::new();
        for entry in batch {
            let Some(backend) = entry.renewal.backend.upgrade() else {
                continue; // the client is gone, and with it every guard
            };
            groups
                .entry(Arc::as_ptr(&backend))
                .or_insert_with(|| (backend, Vec::new()))
                .1
                .push(entry);
        }
        for (_, (backend, mut rest)) in groups {
            while !rest.is_empty() {
                let tail = rest.split_off(rest.len().min(BATCH));
                let chunk = std::mem::replace(&mut rest, tail);
                self.renew_chunk(&backend, chunk);
            }
        }
    }

    fn renew_chunk(&mut self, backend: &Backend, chunk: Vec<Entry>) {
        let calls: Vec<Call<'_>> = chunk
            .iter()
            .map(|e| Call {
                lua: e.renewal.lua,
                keys: &e.renewal.keys,
                args: &e.renewal.args,
            })
            .collect();
        let sent = Instant::now();
        let replies = backend.eval_batch(&calls);
        drop(calls);
        match replies {
            Ok(values) if values.len() == chunk.len() => {
                let now = Instant::now();
                for (mut entry, value) in chunk.into_iter().zip(values) {
                    match value {
                        Value::Int(1) => {
                            entry.renewal.state.renewed(sent, entry.renewal.lease);
                            entry.renewal.expires = sent + entry.renewal.lease;
                            entry.due = sent + entry.renewal.lease / 3;
                            self.push(entry);
                        }
                        Value::Int(_) => {
                            if !entry.renewal.state.is_done() {
                                log::warn!("redlease: a lease was lost (renewal found another owner or no key)");
                                entry.renewal.state.mark_lost();
                            }
                        }
                        // Undecided (a Redlock quorum could not be reached):
                        // retry like a connection error.
                        _ => self.retry(entry, now),
                    }
                }
            }
            other => {
                if let Err(e) = &other {
                    log::warn!("redlease: lease renewal failed, will retry: {e}");
                }
                let now = Instant::now();
                for entry in chunk {
                    self.retry(entry, now);
                }
            }
        }
    }

    /// Tries again soon (not in a tight loop), unless the lease has already
    /// run out on the server, in which case it is lost.
    fn retry(&mut self, mut entry: Entry, now: Instant) {
        if now >= entry.renewal.expires {
            log::warn!("redlease: a lease expired while its server was unreachable");
            entry.renewal.state.mark_lost();
        } else {
            let wait =
                (entry.renewal.lease / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
            entry.due = (now + wait).min(entry.renewal.expires);
            self.push(entry);
        }
    }
}

/// The lease state of a fresh acquisition: a watchdog lease is handed to
/// the renewal thread (renewed with `lua`, `keys`, `args`); a fixed lease
/// just ends at `sent + lease`.
pub(crate) fn start(
    backend: &Arc<Backend>,
    watchdog: bool,
    sent: Instant,
    lease: Duration,
    lua: &'static Lua,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
) -> Arc<LeaseState> {
    let state = LeaseState::new(sent + lease);
    if !watchdog {
        return state;
    }
    register(Renewal {
        backend: Arc::downgrade(backend),
        lua,
        keys,
        args,
        lease,
        expires: sent + lease,
        state: state.clone(),
    });
    state
}

/// Longest lease accepted: a year. Longer ones would overflow `Instant`
/// arithmetic on some platforms and are a bug rather than an intent.
pub(crate) const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// Checks a lease and returns it in whole milliseconds (at least 1).
pub(crate) fn lease_millis(lease: Duration) -> crate::error::Result<u64> {
    if lease.is_zero() {
        return Err(crate::error::Error::invalid(
            "a lease must be greater than zero",
        ));
    }
    if lease > MAX_LEASE {
        return Err(crate::error::Error::invalid(
            "a lease must be at most a year",
        ));
    }
    Ok((lease.as_millis() as u64).max(1))
}
