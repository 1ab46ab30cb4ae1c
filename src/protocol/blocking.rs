//! When a waiter blocks on the server for a direct grant, and for how
//! long, so that every wait ends at its deadline to the millisecond: rules
//! given the deadline and the time, and a fair waiter's place among the
//! blocked.

use std::cell::Cell;
use std::ops::Sub;
use std::time::Duration;

use crate::protocol::timing::span;

/// A fair lock's waiter's turn is its place among the blocked: its pop
/// alone takes the grant, with no script to look at the queue, and Redis
/// serves the connection blocked longest. The place lasts while the waiter
/// stays blocked. Once a block is cut short (a Cluster redirection, a
/// connection broken or late, direct grants paused or refused, no
/// connection to block on), the place is gone: a waiter that blocked
/// again would be served after every later one already blocked (after a
/// slot move, whichever blocked again first was granted first). So from
/// then on it waits for messages, never blocking again; its queue entry
/// keeps its arrival and says so, and a hand-over keeps the grant for it
/// once it is the oldest (lua/queue.lua `offer`).
#[derive(Debug, Default)]
pub(crate) struct Place {
    lost: Cell<bool>,
}

impl Place {
    /// Whether the waiter still has its place among the blocked.
    pub(crate) fn held(&self) -> bool {
        !self.lost.get()
    }

    /// The waiter's block was cut short, or it could not block: its place
    /// is gone for the rest of its wait.
    pub(crate) fn lose(&self) {
        self.lost.set(true);
    }
}

/// Whether a fair waiter still has its place among the blocked (`Place`)
/// after a round trip that blocked: only if it had it and the block was
/// not `cut` short (an error, a broken connection, a slot moved under it,
/// no connection to block on). Once lost, never regained within the wait.
pub fn keeps_place(held: bool, cut: bool) -> bool {
    held && !cut
}

/// Whether a waiter blocks on the server for a direct grant now: its
/// server grants directly (`direct`; an old ACL may refuse it meanwhile,
/// a Cluster redirection pause it), and either its turn is its place
/// among the blocked and it still has it (`place`: `Some(held)`; a place
/// this says `false` for is lost, and the caller records it:
/// `Place::lose`), or it keeps no place and its deadline is far enough
/// ([`worth_blocking`]). The waiting loop and the waiter's attempts (the
/// queue entry they write) both ask this, so they agree.
pub fn blocks_now<T>(direct: bool, place: Option<bool>, deadline: Option<T>, now: T) -> bool
where
    T: Copy + PartialOrd + Sub<Output = Duration>,
{
    match place {
        Some(held) => direct && held,
        None => direct && worth_blocking(deadline, now),
    }
}

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
/// Not asked for a waiter whose turn is its `Place` (`Wait::place`).
pub fn worth_blocking<T>(deadline: Option<T>, now: T) -> bool
where
    T: Copy + PartialOrd + Sub<Output = Duration>,
{
    deadline.is_none_or(|d| span(now, d) >= SHORT_WAIT)
}

/// The last part of a wait, spent waiting for messages rather than
/// blocked on the server (see `worth_blocking`).
pub const SHORT_WAIT: Duration = Duration::from_secs(1);

/// How long before its deadline a waiter's blocks end: a waiter that
/// keeps a place among the blocked blocks to its deadline (waiting for
/// messages would give its place up); any other spends its last
/// [`SHORT_WAIT`] on messages (see [`worth_blocking`]).
pub fn block_tail(keeps_place: bool) -> Duration {
    if keeps_place {
        Duration::ZERO
    } else {
        SHORT_WAIT
    }
}

/// How long the next direct-grant round trip blocks: a slice, cut to end
/// `tail` before the deadline ([`SHORT_WAIT`]: the server may time it out
/// up to a clock tick late, and the rest of the wait is spent on messages,
/// see [`worth_blocking`]; zero for a waiter that keeps blocking); `None`
/// when under a millisecond is left to block.
pub fn block_for<T>(
    slice: Duration,
    deadline: Option<T>,
    tail: Duration,
    now: T,
) -> Option<Duration>
where
    T: Copy + PartialOrd + Sub<Output = Duration>,
{
    let left = deadline.map(|d| span(now, d).saturating_sub(tail));
    let b = left.map_or(slice, |l| l.min(slice));
    (b >= Duration::from_millis(1)).then_some(b)
}

#[cfg(test)]
mod tests {
    use super::{block_for, blocks_now, keeps_place, worth_blocking, Place, SHORT_WAIT};
    use std::time::{Duration, Instant};

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_wait_blocks_until_its_last_second_and_then_waits_for_messages() {
        let now = Instant::now();
        assert!(worth_blocking(None, now));
        assert!(worth_blocking(Some(now + SHORT_WAIT), now));
        assert!(!worth_blocking(Some(now + SHORT_WAIT - MS), now));
        assert!(!worth_blocking(Some(now), now + MS));
    }

    #[test]
    fn a_place_once_lost_stays_lost() {
        let place = Place::default();
        assert!(place.held());
        place.lose();
        assert!(!place.held());
    }

    #[test]
    fn a_waiter_with_a_place_blocks_while_it_has_it_and_its_server_grants_directly() {
        let now = Instant::now();
        let near = Some(now + MS);
        // A place outweighs a near deadline; a server that stopped
        // granting directly outweighs both.
        assert!(blocks_now(true, Some(true), near, now));
        assert!(!blocks_now(true, Some(false), None, now));
        assert!(!blocks_now(false, Some(true), None, now));
        // Without a place, the deadline decides.
        assert!(blocks_now(true, None, None, now));
        assert!(!blocks_now(true, None, near, now));
        assert!(!blocks_now(false, None, None, now));
        assert!(keeps_place(true, false));
        assert!(!keeps_place(true, true));
        assert!(!keeps_place(false, false));
    }

    #[test]
    fn a_block_is_a_slice_ending_its_tail_before_the_deadline() {
        let now = Instant::now();
        let slice = Duration::from_secs(60);
        assert_eq!(block_for(slice, None, SHORT_WAIT, now), Some(slice));
        let deadline = now + Duration::from_millis(2500);
        assert_eq!(
            block_for(slice, Some(deadline), SHORT_WAIT, now),
            Some(Duration::from_millis(1500))
        );
        // Under a millisecond left to block: none.
        assert_eq!(
            block_for(slice, Some(now + SHORT_WAIT), SHORT_WAIT, now),
            None
        );
        // A waiter that keeps blocking (no tail) blocks to its deadline.
        assert_eq!(
            block_for(slice, Some(now + 5 * MS), Duration::ZERO, now),
            Some(5 * MS)
        );
    }
}
