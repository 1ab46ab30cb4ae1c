//! Deadlines as the waiting loop and the handles use them: whether a
//! waiter blocks on the server now (the rule is `protocol/blocking.rs`,
//! asked with the backend's ability and the time), a deadline from a
//! timeout, and the end of a wait without one.

use std::time::{Duration, Instant};

use crate::backend::Backend;
use crate::error::{ErrorKind, Result};
use crate::protocol::blocking::{worth_blocking, Place};

/// Whether a waiter that can block for a direct grant does so now: the
/// server grants directly (an old ACL may refuse it meanwhile, a Cluster
/// redirection pause it), and the waiter whose turn is its `place` among
/// the blocked still has it (a server that does not grant directly now
/// takes it: see [`Place`]), or the deadline of one without is far enough
/// ([`worth_blocking`]). The waiting loop and the waiter's attempts (the
/// queue entry they write) both ask this, so they agree.
pub(crate) fn blocks_now(
    backend: &Backend,
    place: Option<&Place>,
    deadline: Option<Instant>,
) -> bool {
    let direct = backend.grants_directly();
    match place {
        Some(place) => {
            if !direct {
                place.lose();
            }
            place.held()
        }
        None => direct && worth_blocking(deadline, Instant::now()),
    }
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
