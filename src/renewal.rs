//! The one renewal ("watchdog") thread of the process.
//!
//! Holders register a lease: which backend, which extend script with which
//! keys and arguments, how long the lease is. Every third of the lease the
//! thread hands the leases that are due to their backend's I/O worker,
//! which pipelines them, so one thread keeps tens of thousands of leases
//! alive with a few round trips. Each backend has its own I/O worker: a
//! stalled server delays only its own leases, never another server's. A reply of `0` means the token is gone: the lease is marked
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

/// What a holder and the renewal thread share about one lease.
///
/// `expires` is a conservative local estimate of when the lease ends on the
/// server: the instant the acquiring (or last successful renewing) command
/// was *sent*, plus the lease in whole milliseconds, less one millisecond
/// (the server floors its clock to the millisecond when it stores an
/// expiry) and, on Redlock, less the drift allowed between masters. The
/// server applied it later, so the real expiry is never earlier. Once that instant passes without a renewal —
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
    fn renewed(&self, sent: Instant, valid: Duration) {
        if !self.is_lost() {
            self.expires
                .fetch_max(to_nanos(sent + valid), Ordering::AcqRel);
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
    /// The lease granted on the server at each renewal (sets the period).
    pub(crate) lease: Duration,
    /// How long after a renewal is *sent* the lease surely still runs on
    /// the server: the lease in whole milliseconds, less one millisecond
    /// (the server floors its clock to the millisecond) and, on Redlock,
    /// less the clock drift allowed between masters.
    pub(crate) valid: Duration,
    /// When the lease ends on the server at the earliest, as far as the
    /// holder knows.
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
        .spawn(move || Scheduler::new(rx).run());
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
    // Pairs with the fence in `Scheduler::run`: either the scheduler sees
    // this registration before parking, or we see its plan and unpark it.
    std::sync::atomic::fence(Ordering::SeqCst);
    if nanos_since(shared.epoch, due) < shared.planned.load(Ordering::SeqCst) {
        wake_scheduler();
    }
}

fn wake_scheduler() {
    if let Some(t) = &SHARED.thread {
        t.unpark();
    }
}

/// The first renewal is due a third of the lease after the acquisition.
fn first_due(renewal: &Renewal) -> Instant {
    let acquired = renewal
        .expires
        .checked_sub(renewal.valid)
        .unwrap_or_else(Instant::now);
    acquired + renewal.lease / 3
}

struct Entry {
    renewal: Renewal,
    due: Instant,
}

/// What an I/O worker reports back: the entries it carried, the instant
/// the batch was sent, and the replies (or the batch's error).
struct Done {
    worker: usize,
    entries: Vec<Entry>,
    sent: Instant,
    replies: crate::error::Result<Vec<Value>>,
}

/// The I/O thread of one backend: renewal calls to one server (or one
/// Redlock quorum) never wait behind another server's stall.
struct IoWorker {
    backend: Weak<Backend>,
    tx: Sender<(Arc<Backend>, Vec<Entry>)>,
    busy: bool,
    /// Due entries waiting for the worker to finish its current batch.
    pending: Vec<Entry>,
}

/// The one scheduling thread: keeps the due times, hands due leases to the
/// I/O worker of their backend, and applies the outcomes.
struct Scheduler {
    rx: Receiver<Renewal>,
    done_tx: Sender<Done>,
    done_rx: Receiver<Done>,
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    entries: HashMap<u64, Entry>,
    next_id: u64,
    workers: HashMap<usize, IoWorker>,
    next_worker: usize,
}

impl Scheduler {
    fn new(rx: Receiver<Renewal>) -> Scheduler {
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        Scheduler {
            rx,
            done_tx,
            done_rx,
            heap: BinaryHeap::new(),
            entries: HashMap::new(),
            next_id: 0,
            workers: HashMap::new(),
            next_worker: 0,
        }
    }

    fn run(mut self) {
        let shared = &*SHARED;
        loop {
            while let Ok(renewal) = self.rx.try_recv() {
                // Counted from the acquisition, not from when we look: the
                // scheduler may have slept through the registration.
                let due = first_due(&renewal);
                self.push(Entry { renewal, due });
            }
            while let Ok(done) = self.done_rx.try_recv() {
                self.apply(done);
            }
            let now = Instant::now();
            let batch = self.take_due(now);
            if !batch.is_empty() {
                self.dispatch(batch);
                continue;
            }
            self.expire_pending(now);
            let next = self.heap.peek().map(|Reverse((due, _))| *due);
            // Publish the plan before the last look at the channels, so a
            // registration or result sent meanwhile is seen or unparks us.
            let planned = next.map_or(u64::MAX, |d| nanos_since(shared.epoch, d));
            shared.planned.store(planned, Ordering::SeqCst);
            std::sync::atomic::fence(Ordering::SeqCst);
            if !self.rx.is_empty() || !self.done_rx.is_empty() {
                continue;
            }
            // A stalled worker's pending entries are checked at least every
            // 100 ms, so their loss is reported when their lease runs out.
            let cap = if self.workers.values().any(|w| !w.pending.is_empty()) {
                Duration::from_millis(100)
            } else {
                Duration::from_secs(3600)
            };
            match next {
                Some(due) => std::thread::park_timeout(due.saturating_duration_since(now).min(cap)),
                None => std::thread::park_timeout(cap),
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

    /// Hands due entries to their backend's I/O worker (or queues them
    /// behind its current batch).
    fn dispatch(&mut self, batch: Vec<Entry>) {
        for entry in batch {
            let Some(backend) = entry.renewal.backend.upgrade() else {
                continue; // the client is gone, and with it every guard
            };
            let id = self.worker_for(&backend);
            if let Some(w) = self.workers.get_mut(&id) {
                w.pending.push(entry);
            }
        }
        let ids: Vec<usize> = self.workers.keys().copied().collect();
        for id in ids {
            self.kick(id);
        }
    }

    /// The worker of `backend`, started if needed. Workers are matched by
    /// identity of the live backend, never by a possibly reused address.
    fn worker_for(&mut self, backend: &Arc<Backend>) -> usize {
        self.workers
            .retain(|_, w| w.busy || w.backend.strong_count() > 0);
        if let Some((id, _)) = self.workers.iter().find(|(_, w)| {
            w.backend
                .upgrade()
                .is_some_and(|b| Arc::ptr_eq(&b, backend))
        }) {
            return *id;
        }
        let id = self.next_worker;
        self.next_worker += 1;
        let (tx, rx) = crossbeam_channel::unbounded::<(Arc<Backend>, Vec<Entry>)>();
        let done = self.done_tx.clone();
        let spawned = std::thread::Builder::new()
            .name("redlease-renew-io".into())
            .spawn(move || io_worker(id, rx, done));
        if let Err(e) = spawned {
            log::error!("redlease: cannot start a renewal I/O thread: {e}");
        }
        self.workers.insert(
            id,
            IoWorker {
                backend: Arc::downgrade(backend),
                tx,
                busy: false,
                pending: Vec::new(),
            },
        );
        id
    }

    /// Sends a worker its pending entries if it is idle.
    fn kick(&mut self, id: usize) {
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        if w.busy || w.pending.is_empty() {
            return;
        }
        let entries = std::mem::take(&mut w.pending);
        let Some(backend) = w.backend.upgrade() else {
            return;
        };
        match w.tx.send((backend, entries)) {
            Ok(()) => w.busy = true,
            Err(crossbeam_channel::SendError((_, entries))) => {
                // The thread could not be started: nothing renews these.
                let now = Instant::now();
                for e in entries {
                    self.retry(e, now);
                }
            }
        }
    }

    /// Entries queued behind a stalled worker whose lease has run out are
    /// lost: report it now rather than when the stall ends.
    fn expire_pending(&mut self, now: Instant) {
        for w in self.workers.values_mut() {
            w.pending.retain(|e| {
                if now >= e.renewal.expires && !e.renewal.state.is_done() {
                    log::warn!(
                        "redlease: lease of {:?} expired while its server did not answer",
                        String::from_utf8_lossy(e.renewal.keys.first().map_or(&[][..], |k| k))
                    );
                    e.renewal.state.mark_lost();
                    return false;
                }
                !e.renewal.state.is_done()
            });
        }
    }

    fn apply(&mut self, done: Done) {
        if let Some(w) = self.workers.get_mut(&done.worker) {
            w.busy = false;
        }
        let now = Instant::now();
        match done.replies {
            Ok(values) if values.len() == done.entries.len() => {
                for (mut entry, value) in done.entries.into_iter().zip(values) {
                    match value {
                        Value::Int(1) => {
                            let r = &mut entry.renewal;
                            r.state.renewed(done.sent, r.valid);
                            r.expires = r.expires.max(done.sent + r.valid);
                            entry.due = done.sent + r.lease / 3;
                            self.push(entry);
                        }
                        Value::Int(0) => {
                            if !entry.renewal.state.is_done() {
                                log::warn!(
                                    "redlease: lease of {:?} was lost (renewal found another owner or no key)",
                                    String::from_utf8_lossy(entry.renewal.keys.first().map_or(&[][..], |k| k))
                                );
                                entry.renewal.state.mark_lost();
                            }
                        }
                        // Undecided (a refused write, an error reply to this
                        // one call, no Redlock majority): retry this one.
                        _ => self.retry(entry, now),
                    }
                }
            }
            other => {
                if let Err(e) = &other {
                    log::warn!("redlease: lease renewal failed, will retry: {e}");
                }
                for entry in done.entries {
                    self.retry(entry, now);
                }
            }
        }
        self.kick(done.worker);
    }

    /// Tries again soon (not in a tight loop), unless the lease has already
    /// run out on the server, in which case it is lost.
    fn retry(&mut self, mut entry: Entry, now: Instant) {
        if entry.renewal.state.is_done() {
            return;
        }
        if now >= entry.renewal.expires {
            log::warn!(
                "redlease: lease of {:?} expired while its server was unreachable",
                String::from_utf8_lossy(entry.renewal.keys.first().map_or(&[][..], |k| k))
            );
            entry.renewal.state.mark_lost();
        } else {
            let wait =
                (entry.renewal.lease / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
            entry.due = (now + wait).min(entry.renewal.expires);
            self.push(entry);
        }
    }
}

/// How many calls go into one pipeline: large enough to make 10,000 leases a
/// handful of round trips, small enough to keep one reply under a few MB.
const BATCH: usize = 2_000;

/// One backend's renewal I/O. Each pipeline waits at most until the
/// earliest lease it carries would end: a late answer is no use after that.
fn io_worker(id: usize, rx: Receiver<(Arc<Backend>, Vec<Entry>)>, done: Sender<Done>) {
    // An idle worker exits; the scheduler starts a new one when needed.
    while let Ok((backend, mut entries)) = rx.recv_timeout(Duration::from_secs(60)) {
        while !entries.is_empty() {
            let tail = entries.split_off(entries.len().min(BATCH));
            let chunk = std::mem::replace(&mut entries, tail);
            let sent = Instant::now();
            let limit = chunk
                .iter()
                .map(|e| e.renewal.expires.saturating_duration_since(sent))
                .min()
                .unwrap_or_default()
                .min(backend.timeouts().response);
            let calls: Vec<Call<'_>> = chunk
                .iter()
                .map(|e| Call {
                    lua: e.renewal.lua,
                    keys: &e.renewal.keys,
                    args: &e.renewal.args,
                })
                .collect();
            let replies = backend.eval_batch(&calls, limit);
            drop(calls);
            let report = Done {
                worker: id,
                entries: chunk,
                sent,
                replies,
            };
            if done.send(report).is_err() {
                return;
            }
            wake_scheduler();
        }
        // The last report freed the worker; more entries arrive as a new job.
    }
}

/// The lease state of a fresh acquisition: a watchdog lease is handed to
/// the renewal thread (renewed with `lua`, `keys`, `args`); a fixed lease
/// just ends at `expires`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn start(
    backend: &Arc<Backend>,
    watchdog: bool,
    expires: Instant,
    valid: Duration,
    lease: Duration,
    lua: &'static Lua,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
) -> Arc<LeaseState> {
    let state = LeaseState::new(expires);
    if !watchdog {
        return state;
    }
    register(Renewal {
        backend: Arc::downgrade(backend),
        lua,
        keys,
        args,
        lease,
        valid,
        expires,
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
