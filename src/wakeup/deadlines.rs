//! Deadlines as the waiting loop and the handles use them: whether a
//! waiter blocks on the server now (the rule is `protocol/blocking.rs`,
//! asked with the backend's ability and the time), a deadline from a
//! timeout, and the end of a wait without one.

use std::time::{Duration, Instant};

use crate::backend::Backend;
use crate::error::{ErrorKind, Result};
use crate::protocol::blocking::{self, Place};

/// Whether a waiter that can block for a direct grant does so now, by the
/// rule of `protocol::blocking::blocks_now`, asked with the backend's
/// ability and the time: a waiter whose turn is its `place` among the
/// blocked loses it for good when it does not (a server that stopped
/// granting directly takes it: see [`Place`]).
pub(crate) fn blocks_now(
    backend: &Backend,
    place: Option<&Place>,
    deadline: Option<Instant>,
) -> bool {
    let direct = backend.grants_directly();
    let blocks = blocking::blocks_now(direct, place.map(Place::held), deadline, Instant::now());
    if let (Some(place), false) = (place, blocks) {
        place.lose();
    }
    blocks
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
