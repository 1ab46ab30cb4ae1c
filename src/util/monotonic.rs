//! Instants kept in atomics: nanoseconds since one process-wide epoch, so
//! that a lease's expiry or a master's "down until" can be read and moved
//! without a lock.

use std::time::{Duration, Instant};

use once_cell::sync::Lazy;

static EPOCH: Lazy<Instant> = Lazy::new(Instant::now);

/// `t` as nanoseconds since the epoch (0 for an instant before it).
pub(crate) fn nanos(t: Instant) -> u64 {
    t.saturating_duration_since(*EPOCH).as_nanos() as u64
}

/// Now, as nanoseconds since the epoch.
pub(crate) fn now_nanos() -> u64 {
    nanos(Instant::now())
}

/// The instant `nanos` after the epoch.
pub(crate) fn instant(nanos: u64) -> Instant {
    *EPOCH + Duration::from_nanos(nanos)
}
