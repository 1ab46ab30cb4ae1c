//! What a holder and the renewal thread share about one lease
//! (`LeaseState`), and the wait for any of several leases to be lost
//! (`LostSignal`). A leaf: the lease lifecycle, the renewal thread, guards
//! and signals all read it, and it reads nothing of theirs.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use once_cell::sync::Lazy;

use crate::events::HandleEvent;
use crate::util::monotonic::{instant, nanos, now_nanos};

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
pub(crate) struct LeaseState {
    lost: AtomicBool,
    done: AtomicBool,
    /// Nanoseconds since the epoch (`monotonic`).
    expires: AtomicU64,
    /// Bumped by `extend`: renewals registered before it are retired and
    /// their late replies no longer move the expiry.
    generation: AtomicU64,
    /// Serialises expiry writers (renewal replies, `extend`) so that a
    /// stale renewal cannot undo an extension that shortened the lease.
    writing: Mutex<()>,
    /// Told once when the lease is lost (the event handler, the name).
    on_lost: Option<LostHook>,
    /// A detached permit: its loss is expected (released by id elsewhere),
    /// so it is not logged.
    quiet: AtomicBool,
}

impl fmt::Debug for LeaseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseState")
            .field("lost", &self.lost)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

/// Who to tell when a lease is lost: the event handler, the name.
pub(crate) type LostHook = (Arc<dyn HandleEvent>, Arc<[u8]>, &'static str);

/// Every waiter of every `LostSignal` sleeps on this one condition
/// variable: losses and releases are rare, so a shared wake-up costs less
/// than one per lease. Expiry by time is not announced; waiters wake at
/// the expiry they computed.
static CHANGED: Lazy<(Mutex<()>, Condvar)> = Lazy::new(|| (Mutex::new(()), Condvar::new()));

/// Threads inside `wait_lost`: with none (the usual case), a release or a
/// loss does not touch the shared mutex at all.
static WAITERS: AtomicUsize = AtomicUsize::new(0);

fn announce() {
    // Pairs with the fence in `wait_lost`: either a waiter that registered
    // is seen here, or it sees the state change before it sleeps.
    std::sync::atomic::fence(Ordering::SeqCst);
    if WAITERS.load(Ordering::SeqCst) == 0 {
        return;
    }
    let (lock, cv) = &*CHANGED;
    drop(crate::util::mutex::lock(lock));
    cv.notify_all();
}

impl LeaseState {
    pub(crate) fn new(expires: Instant, on_lost: Option<LostHook>) -> Arc<LeaseState> {
        Arc::new(LeaseState {
            lost: AtomicBool::new(false),
            done: AtomicBool::new(false),
            expires: AtomicU64::new(nanos(expires)),
            generation: AtomicU64::new(0),
            writing: Mutex::new(()),
            on_lost,
            quiet: AtomicBool::new(false),
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
        if now_nanos() >= self.expires.load(Ordering::Acquire) {
            self.mark_lost();
            return true;
        }
        false
    }

    /// How long the lease surely still runs (zero once lost or finished).
    pub(crate) fn expires_in(&self) -> Duration {
        if !self.is_held() {
            return Duration::ZERO;
        }
        let at = self.expires.load(Ordering::Acquire);
        Duration::from_nanos(at.saturating_sub(now_nanos()))
    }

    /// `!is_held()` without side effects (no marking, no announcing): safe
    /// to call while holding `CHANGED`.
    fn has_ended(&self) -> bool {
        self.done.load(Ordering::Acquire)
            || self.lost.load(Ordering::Acquire)
            || now_nanos() >= self.expires.load(Ordering::Acquire)
    }

    pub(crate) fn expires_at(&self) -> Instant {
        instant(self.expires.load(Ordering::Acquire))
    }

    pub(crate) fn mark_lost(&self) {
        if !self.lost.swap(true, Ordering::AcqRel) {
            // Not a loss to report: released, or a detached permit whose
            // end (released by id elsewhere) is expected.
            if !self.done.load(Ordering::Acquire) && !self.is_quiet() {
                crate::metrics::lease_lost();
                if let Some((handler, name, kind)) = &self.on_lost {
                    handler.handle_lease_lost(&crate::events::LeaseLostEvent { name, kind });
                }
            }
            announce();
        }
    }

    /// A renewal of generation `generation` sent at `sent` succeeded. If
    /// the old expiry had already passed, the holder may have been told the
    /// lease was lost; it stays lost (a lease never comes back).
    pub(crate) fn renewed(&self, sent: Instant, valid: Duration, generation: u64) {
        let _w = crate::util::mutex::lock(&self.writing);
        if !self.is_lost() && self.generation.load(Ordering::Acquire) == generation {
            self.expires
                .fetch_max(nanos(sent + valid), Ordering::AcqRel);
        }
    }

    /// An extension sent at `sent` set the lease to end `valid` later (or,
    /// `certain == false`, may have): the expiry becomes exactly that
    /// (at most that), and earlier renewals are retired: the caller
    /// registers the renewal that continues with the new lease.
    pub(crate) fn extended(&self, sent: Instant, valid: Duration, certain: bool) {
        let _w = crate::util::mutex::lock(&self.writing);
        let at = nanos(sent + valid);
        if certain {
            if !self.is_lost() {
                self.expires.store(at, Ordering::Release);
            }
        } else {
            self.expires.fetch_min(at, Ordering::AcqRel);
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        // A sooner end must wake `LostSignal` waiters sleeping until the
        // old one.
        announce();
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The holder released (or is releasing): stop renewing.
    pub(crate) fn finish(&self) {
        self.done.store(true, Ordering::Release);
        announce();
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Stops logging this lease's loss (a detached permit).
    pub(crate) fn quiet(&self) {
        self.quiet.store(true, Ordering::Release);
    }

    pub(crate) fn is_quiet(&self) -> bool {
        self.quiet.load(Ordering::Acquire)
    }
}

/// Waits until any of `states` is no longer held (lost or finished), or
/// `timeout` passes; returns whether one is no longer held.
pub(crate) fn wait_lost(states: &[Arc<LeaseState>], timeout: Duration) -> bool {
    struct Registered;
    impl Drop for Registered {
        fn drop(&mut self) {
            WAITERS.fetch_sub(1, Ordering::SeqCst);
        }
    }
    WAITERS.fetch_add(1, Ordering::SeqCst);
    let _registered = Registered;
    std::sync::atomic::fence(Ordering::SeqCst);
    let deadline = Instant::now().checked_add(timeout);
    let (lock, cv) = &*CHANGED;
    let mut guard = crate::util::mutex::lock(lock);
    loop {
        if states.iter().any(|s| s.has_ended()) {
            drop(guard);
            // Now record a loss by time (and tell the event handler).
            for s in states {
                let _ = s.is_held();
            }
            return true;
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return false;
        }
        // Wake at the earliest local expiry at the latest: nobody announces it.
        let expiry = states.iter().map(|s| s.expires_at()).min();
        let until = match (deadline, expiry) {
            (Some(d), Some(e)) => d.min(e),
            (Some(d), None) => d,
            (None, Some(e)) => e,
            (None, None) => now + Duration::from_secs(3600),
        };
        let wait = until
            .saturating_duration_since(now)
            .max(Duration::from_micros(100));
        guard = crate::util::mutex::wait_timeout(cv, guard, wait);
    }
}
