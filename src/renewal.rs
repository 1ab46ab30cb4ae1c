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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use once_cell::sync::Lazy;
use redis::Value;

use crate::backend::{Backend, Call, PreparedCall};
use crate::protocol::lease_state::LeaseState;
use crate::protocol::looks::{look_runs_at, next_look, LOOK_PERIOD, WAITER_LOOKS};
use crate::protocol::renewal::{renewed, retry, Renewed};
use crate::util::monotonic::nanos;

/// One lease to keep alive.
pub(crate) struct Renewal {
    pub(crate) backend: Weak<Backend>,
    /// The extend script, shared with the hold (no copy per lease).
    pub(crate) script: Arc<PreparedCall>,
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
    /// The state's generation when registered (see `LeaseState::extended`).
    pub(crate) generation: u64,
    /// When the first look, or a lease's first renewal, is due, if not as
    /// [`first_due`] counts it.
    pub(crate) first: Option<Instant>,
    /// A look at a lock ([`watch`]) rather than a lease: each reply says
    /// when the next one is.
    pub(crate) look: bool,
    /// How many more looks this one may make (see [`NAME_LOOKS`]).
    pub(crate) looks_left: u32,
}

impl Renewal {
    /// No longer to be renewed: released, or replaced after an `extend`.
    fn retired(&self) -> bool {
        self.state.is_done() || self.state.generation() != self.generation
    }

    /// How long before it is due this may go with a batch at hand: a
    /// lease's renewal or a waiter's look, a thirtieth of its period; a look
    /// at a name alone, never. Such a look is due just after the claim
    /// window of the grant it is for, and stops at a grant it finds
    /// (lua/lock_watch.lua: a later one, under contention). Taken early, it
    /// found its own grant in its last milliseconds and stopped: a frozen
    /// popper's grant then lapsed with nobody looking, and the next waiter
    /// waited 4.6 s for its own look.
    fn early(&self) -> Duration {
        if self.look && self.looks_left != WAITER_LOOKS {
            Duration::ZERO
        } else {
            self.lease / 30
        }
    }

    fn name(&self) -> String {
        // The name as the user gave it, not the key (`"job"`, not
        // `"{job}"`): what the CLI and the errors say.
        let key = self.script.keys.first().map_or(&[][..], |k| k);
        String::from_utf8_lossy(&crate::protocol::keys::name_of_key(key)).into_owned()
    }
}

struct Shared {
    tx: Sender<Renewal>,
    /// `None` if the OS refused a thread: leases are then never renewed and
    /// each is reported lost when its lease runs out (never a panic).
    thread: Option<Thread>,
    /// When the thread plans to wake next, in ns since the epoch
    /// (`monotonic`), or 0 while it is awake; registrations due earlier
    /// unpark it, the rest wait without waking it.
    planned: AtomicU64,
}

static SHARED: Lazy<Shared> = Lazy::new(|| {
    let (tx, rx) = crossbeam_channel::unbounded();
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
    }
});

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
    // Also wake it every so many registrations, so that it takes them in
    // and sweeps the released ones even while nothing is due (a long
    // watchdog): otherwise they pile up in the channel.
    if nanos(due) < shared.planned.load(Ordering::SeqCst) || shared.tx.len() >= SWEEP_MIN {
        wake_scheduler();
    }
}

fn wake_scheduler() {
    if let Some(t) = &SHARED.thread {
        t.unpark();
    }
}

/// Threads of this process blocked on a server for a grant (see
/// [`blocking`]).
static BLOCKED: AtomicUsize = AtomicUsize::new(0);

/// While a thread of this process blocks for a grant, the scheduler wakes
/// at least this often. A lock taken by a pop is first renewed a third of
/// its short first lease after the pop was sent (see `lease::taken_by_pop`),
/// so with the scheduler awake by then, the new holder registers its lease
/// without waking anyone. Unparking the scheduler there cost the handoff
/// about 20 µs (a tenth of it) on a 2-core machine, and its at-once renewal
/// competed with the new holder for the CPU. Costs the process up to ten
/// empty wake-ups a second while it waits; nothing is sent.
const WHILE_BLOCKED: Duration = Duration::from_millis(100);

/// Marks this thread as blocked on a server for a grant until the returned
/// guard is dropped (see [`WHILE_BLOCKED`]).
pub(crate) fn blocking() -> Blocking {
    BLOCKED.fetch_add(1, Ordering::SeqCst);
    // Pairs with the fence in `Scheduler::run`: either it sees us blocked
    // before parking, or we see its plan and unpark it.
    std::sync::atomic::fence(Ordering::SeqCst);
    let by = nanos(Instant::now() + WHILE_BLOCKED);
    if SHARED.planned.load(Ordering::SeqCst) > by {
        wake_scheduler();
    }
    Blocking(())
}

/// See [`blocking`].
pub(crate) struct Blocking(());

impl Drop for Blocking {
    fn drop(&mut self) {
        BLOCKED.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The first renewal is due a third of the lease after the acquisition,
/// unless the registration says when (a short first lease: a third of the
/// way through it).
///
/// Counted back from when the lease surely ends, so a hold that surely
/// runs less than its full lease for now is due that much sooner, at once
/// when it is shorter than two thirds of the lease; so is one whose start
/// cannot be counted back.
fn first_due(renewal: &Renewal) -> Instant {
    if let Some(at) = renewal.first {
        return at;
    }
    renewal
        .expires
        .checked_sub(renewal.valid)
        .map_or_else(Instant::now, |acquired| acquired + renewal.lease / 3)
}

struct Entry {
    renewal: Renewal,
    due: Instant,
    /// Its last call was undecided and it waits to be retried: never taken
    /// early (see [`Renewal::early`]). A retry due within that margin (the
    /// last tenth of a lease, where the wait is half of what is left) was
    /// taken at once with the batch at hand, and again after its reply: a
    /// renewal the server kept refusing (`TRYAGAIN` while its slot was
    /// being migrated) was sent every 120 µs, 333–406 times in 2 s for one
    /// lease of 900 ms.
    retrying: bool,
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
    /// The last batch failed as a whole (warned once until it works again).
    failing: bool,
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
    /// When `entries` reaches this size, released leases are swept out, so
    /// memory follows the leases held, not the acquisition rate times the
    /// watchdog (a released lease would otherwise wait for its due time).
    sweep_at: usize,
}

/// The smallest sweep threshold.
const SWEEP_MIN: usize = 1024;

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
            sweep_at: SWEEP_MIN,
        }
    }

    fn run(mut self) {
        let shared = &*SHARED;
        loop {
            crate::util::deferred::empty();
            while let Ok(renewal) = self.rx.try_recv() {
                // Counted from the acquisition, not from when we look: the
                // scheduler may have slept through the registration.
                let due = first_due(&renewal);
                self.push(Entry {
                    renewal,
                    due,
                    retrying: false,
                });
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
            // A stalled worker's pending entries are checked at least every
            // 100 ms, so their loss is reported when their lease runs out.
            let mut cap = if self.workers.values().any(|w| !w.pending.is_empty()) {
                Duration::from_millis(100)
            } else {
                Duration::from_secs(3600)
            };
            let blocked = BLOCKED.load(Ordering::SeqCst) > 0;
            if blocked {
                cap = cap.min(WHILE_BLOCKED);
            }
            let wake = next.map_or(now + cap, |due| due.min(now + cap));
            // Publish the plan before the last look at the channels and at
            // the blocked threads, so a registration, result or blocking
            // thread that came meanwhile is seen or unparks us.
            shared.planned.store(nanos(wake), Ordering::SeqCst);
            std::sync::atomic::fence(Ordering::SeqCst);
            if !self.rx.is_empty() || !self.done_rx.is_empty() {
                continue;
            }
            if !blocked && BLOCKED.load(Ordering::SeqCst) > 0 {
                continue;
            }
            std::thread::park_timeout(wake.saturating_duration_since(now));
            shared.planned.store(0, Ordering::SeqCst);
        }
    }

    fn push(&mut self, entry: Entry) {
        let id = self.next_id;
        self.next_id += 1;
        self.heap.push(Reverse((entry.due, id)));
        self.entries.insert(id, entry);
        if self.entries.len() >= self.sweep_at {
            self.sweep();
        }
    }

    /// Drops released and replaced leases now rather than at their due
    /// time; amortised O(1) per registration (the threshold doubles with
    /// what stays).
    fn sweep(&mut self) {
        self.entries.retain(|_, e| !e.renewal.retired());
        self.heap = self
            .entries
            .iter()
            .map(|(id, e)| Reverse((e.due, *id)))
            .collect();
        self.heap.shrink_to_fit();
        self.entries.shrink_to(self.entries.len() * 2);
        self.sweep_at = (self.entries.len() * 2).max(SWEEP_MIN);
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
            let early = if entry.retrying {
                Duration::ZERO
            } else {
                entry.renewal.early()
            };
            if due > now + early {
                break;
            }
            self.heap.pop();
            if let Some(entry) = self.entries.remove(&id) {
                if entry.renewal.retired() {
                    continue;
                }
                if entry.renewal.state.is_lost() {
                    // Its local expiry passed before this renewal came due
                    // (a retry is due at the expiry at the latest): a loss
                    // like one a reply shows, warned about by name. Dropped
                    // silently, a lease whose server was unreachable ended
                    // with no warning at all.
                    if !entry.renewal.look {
                        lost(&entry.renewal, "expired while its server was unreachable");
                    }
                    continue;
                }
                out.push(entry);
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
                failing: false,
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
                if now >= e.renewal.expires && !e.renewal.retired() {
                    lost(&e.renewal, "expired while its server did not answer");
                    return false;
                }
                !e.renewal.retired()
            });
        }
    }

    fn apply(&mut self, done: Done) {
        let now = Instant::now();
        let failed = match &done.replies {
            Ok(values) => values.len() != done.entries.len(),
            Err(_) => true,
        };
        if let Some(w) = self.workers.get_mut(&done.worker) {
            w.busy = false;
            // One warning per outage of a server, not one per attempt.
            if failed && !w.failing {
                if let Err(e) = &done.replies {
                    log::warn!(
                        "redlease: lease renewal failed, retrying until each lease runs out: {e}"
                    );
                }
            } else if !failed && w.failing {
                log::info!("redlease: lease renewal works again");
            }
            w.failing = failed;
        }
        match done.replies {
            Ok(values) if values.len() == done.entries.len() => {
                for (mut entry, value) in done.entries.into_iter().zip(values) {
                    if entry.renewal.retired() {
                        continue; // released, or extended since it was sent
                    }
                    if entry.renewal.look {
                        match value {
                            // Look again when the holder's lease (or the
                            // claim of a hand-over made by this look) ends.
                            Value::Int(ms) => {
                                let r = &mut entry.renewal;
                                let Some((after, left)) = next_look(ms, r.looks_left) else {
                                    continue; // the waiter holds it, or no looks left
                                };
                                r.looks_left = left;
                                entry.due = done.sent + after;
                                entry.retrying = false;
                                self.push(entry);
                            }
                            _ => self.retry(entry, now),
                        }
                        continue;
                    }
                    let reply = match value {
                        Value::Int(n) => Some(n),
                        _ => None,
                    };
                    let r = &mut entry.renewal;
                    match renewed(reply, done.sent, now, r.expires, r.lease, r.valid) {
                        Renewed::Extended { until, next } => {
                            crate::metrics::renewals("ok", 1);
                            r.state.renewed(done.sent, r.valid, r.generation);
                            r.expires = r.expires.max(until);
                            entry.due = next;
                            entry.retrying = false;
                            self.push(entry);
                        }
                        Renewed::Lost => {
                            crate::metrics::renewals("lost", 1);
                            lost(
                                &entry.renewal,
                                "was lost (renewal found another owner or no key)",
                            )
                        }
                        // Undecided (a refused write, an error reply to this
                        // one call, no Redlock majority): retry this one.
                        Renewed::Retry { .. } | Renewed::Expired => self.retry(entry, now),
                    }
                }
            }
            _ => {
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
        if entry.renewal.retired() {
            return;
        }
        crate::metrics::renewals("retry", 1);
        match retry(now, entry.renewal.expires, entry.renewal.lease) {
            Renewed::Retry { at } => {
                entry.due = at;
                entry.retrying = true;
                self.push(entry);
            }
            _ => lost(&entry.renewal, "expired while its server was unreachable"),
        }
    }
}

/// Marks a lease lost, with a warning naming it (unless its loss is
/// expected: a detached permit released by id).
fn lost(renewal: &Renewal, why: &str) {
    if !renewal.state.is_quiet() {
        log::warn!("redlease: lease of {:?} {why}", renewal.name());
    }
    renewal.state.mark_lost();
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
            let calls: Vec<Call<'_>> = chunk.iter().map(|e| e.renewal.script.call()).collect();
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

/// Keeps `state`'s lease alive with `extend` (whose last argument is the
/// lease in ms) until the holder finishes it, or until an `extend` retires
/// this registration. `expires` is when the lease ends at the earliest now;
/// `first`, when it is first renewed, if not as [`first_due`] says.
pub(crate) fn keep_alive(
    backend: &Arc<Backend>,
    state: &Arc<LeaseState>,
    expires: Instant,
    valid: Duration,
    lease: Duration,
    extend: &Arc<PreparedCall>,
    first: Option<Instant>,
) {
    register(Renewal {
        backend: Arc::downgrade(backend),
        script: extend.clone(),
        lease,
        valid,
        expires,
        state: state.clone(),
        generation: state.generation(),
        first,
        look: false,
        looks_left: 0,
    });
}

/// Has the renewal thread run `look` (lua/lock_watch.lua, whose reply is
/// how many milliseconds until the next look is useful) from `first` on,
/// in its pipelines, until the returned state is finished: a waiter blocked
/// on the server cannot look itself without leaving its place.
pub(crate) fn watch(
    backend: &Arc<Backend>,
    look: Arc<PreparedCall>,
    first: Instant,
) -> Arc<LeaseState> {
    watch_for(backend, look, first, WAITER_LOOKS)
}

/// [`watch`], for at most `looks` looks.
pub(crate) fn watch_for(
    backend: &Arc<Backend>,
    look: Arc<PreparedCall>,
    first: Instant,
    looks: u32,
) -> Arc<LeaseState> {
    // Never lost by time: a look is not a lease.
    let never = Instant::now() + MAX_LEASE;
    let state = LeaseState::new(never, None);
    register(Renewal {
        backend: Arc::downgrade(backend),
        script: look,
        lease: LOOK_PERIOD,
        valid: LOOK_PERIOD,
        expires: never,
        state: state.clone(),
        generation: 0,
        first: Some(look_runs_at(first, Instant::now())),
        look: true,
        looks_left: looks,
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
