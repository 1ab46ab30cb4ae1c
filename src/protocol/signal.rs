//! The lost-lease signal: what a worker thread checks without a round trip.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::protocol::lease_state::{self, LeaseState};

/// Tells whether the lease a guard holds is still held, from any thread.
///
/// Got from a guard's `lost_signal()`; `Clone + Send + Sync + 'static`, so
/// hand it to the worker threads doing the guarded work and have them stop
/// when it fires. Costs no round trip: it reads what the renewal thread
/// found out and the guard's conservative local expiry.
///
/// It fires once the hold ends for any reason: the lease was lost
/// (expired unrenewed, taken over, force-unlocked, flushed) **or** the
/// guard released it. A multi-lock's signal fires when any of its names
/// does.
///
/// ```no_run
/// # let client = redlease::Client::open("redis://127.0.0.1:6379/")?;
/// let guard = client.lock("reindex").acquire()?;
/// let lost = guard.lost_signal();
/// let worker = std::thread::spawn(move || {
///     for chunk in 0..1_000 {
///         if lost.is_lost() {
///             return Err(chunk); // stop: someone else may hold it now
///         }
///         // ... work on chunk ...
///     }
///     Ok(())
/// });
/// let outcome = worker.join().expect("worker panicked");
/// guard.release()?;
/// # let _ = outcome;
/// # Ok::<(), redlease::Error>(())
/// ```
#[derive(Clone)]
pub struct LostSignal {
    states: Arc<[Arc<LeaseState>]>,
}

impl LostSignal {
    pub(crate) fn new(states: Vec<Arc<LeaseState>>) -> LostSignal {
        LostSignal {
            states: states.into(),
        }
    }

    /// Whether the hold has ended (lost or released). No round trip.
    pub fn is_lost(&self) -> bool {
        self.states.iter().any(|s| !s.is_held())
    }

    /// How long the lease surely still runs, from the conservative local
    /// estimate (no round trip); zero once the hold has ended. A worker
    /// that needs time to stop cleanly starts stopping once this falls
    /// below that time (with a watchdog it stays above two thirds of the
    /// lease while renewals succeed). Of a multi-lock, its soonest end.
    pub fn expires_in(&self) -> Duration {
        self.states
            .iter()
            .map(|s| s.expires_in())
            .min()
            .unwrap_or(Duration::ZERO)
    }

    /// Waits at most `timeout` for the hold to end: `true` as soon as it
    /// has (at once if it already had), `false` if it is still held when
    /// `timeout` passes. Woken by the renewal thread's finding, by a
    /// release, and by the local expiry itself; no polling.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        lease_state::wait_lost(&self.states, timeout)
    }
}

impl fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LostSignal")
            .field("lost", &self.is_lost())
            .finish()
    }
}
