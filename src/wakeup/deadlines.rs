//! When a waiter blocks on the server and for how long, so that every
//! wait ends at its deadline to the millisecond.

use std::time::{Duration, Instant};

use crate::backend::Backend;
use crate::error::{ErrorKind, Result};

/// Whether a wait with this deadline is still long enough to block on the
/// server: the server times a blocked pop out in steps of its clock tick
/// (100 ms at the default `hz 10`), so a 5 ms wait blocked there lasted up
/// to 100 ms. A wait shorter than [`SHORT_WAIT`] waits for a message, which
/// wakes it as soon and keeps its deadline to the millisecond; so does the
/// last [`SHORT_WAIT`] of a longer one (its blocks end before: see
/// [`block_for`]). Asked again as the wait goes on, by the waiting loop and
/// by the waiter's attempts, which say in their queue entry that they wait
/// for messages (`Direct::by_message`, the latch's message registration)
/// once it is `false`: time only moves on, so both sides agree from then on.
/// Not asked for a waiter that keeps blocking ([`Wait::keeps_blocking`]).
pub(crate) fn worth_blocking(deadline: Option<Instant>) -> bool {
    deadline.is_none_or(|d| d.saturating_duration_since(Instant::now()) >= SHORT_WAIT)
}

/// Whether a waiter that can block for a direct grant does so now: the
/// server grants directly (an old ACL may refuse it meanwhile), and the
/// waiter keeps blocking or its deadline is far enough
/// ([`worth_blocking`]). The waiting loop and the waiter's attempts (the
/// queue entry they write) both ask this, so they agree.
pub(crate) fn blocks_now(
    backend: &Backend,
    keeps_blocking: bool,
    deadline: Option<Instant>,
) -> bool {
    backend.grants_directly() && (keeps_blocking || worth_blocking(deadline))
}

/// See [`worth_blocking`].
pub(super) const SHORT_WAIT: Duration = Duration::from_secs(1);

/// How long the next direct-grant round trip blocks: a slice, cut to end
/// `tail` before the deadline ([`SHORT_WAIT`]: the server may time it out
/// up to a clock tick late, and the rest of the wait is spent on messages,
/// see [`worth_blocking`]; zero for a waiter that keeps blocking); `None`
/// when under a millisecond is left to block.
pub(super) fn block_for(
    slice: Duration,
    deadline: Option<Instant>,
    tail: Duration,
) -> Option<Duration> {
    let left = deadline.map(|d| {
        d.saturating_duration_since(Instant::now())
            .saturating_sub(tail)
    });
    let b = left.map_or(slice, |l| l.min(slice));
    (b >= Duration::from_millis(1)).then_some(b)
}

/// The result of a wait without deadline: it ends with the hold or an
/// error, never with a timeout. Should that ever break, it is an error, not
/// a panic in the caller's thread.
pub(crate) fn waited<T>(r: Option<T>) -> Result<T> {
    r.ok_or_else(|| {
        crate::error::Error::new(
            ErrorKind::Server,
            "internal: a wait without deadline ended without the hold",
        )
    })
}

/// The instant `d` from now, or `None` (wait forever) if that overflows.
pub(crate) fn deadline_after(d: Duration) -> Option<Instant> {
    Instant::now().checked_add(d)
}
