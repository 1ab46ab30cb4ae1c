//! Our mutexes, locked whatever a panicking thread left behind.
//!
//! A panic inside one of redlease's critical sections cannot leave the
//! data half-changed in a way that matters: each one guards a cache (a slot
//! map, spare connections, scripts known loaded), a clock reading or a
//! wake-up condition that the next user checks or rebuilds anyway. Turning
//! poison into a second panic would take down a caller that never
//! panicked, so every lock goes through here instead.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Locks `m`, poisoned or not.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits on `cv` at most `timeout`, poisoned or not; whether it timed out
/// is not needed by any caller (each checks its condition again).
pub(crate) fn wait_timeout<'a, T>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> MutexGuard<'a, T> {
    cv.wait_timeout(guard, timeout)
        .unwrap_or_else(|p| p.into_inner())
        .0
}
