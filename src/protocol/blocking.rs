//! When a waiter blocks on the server for a direct grant, and for how
//! long, so that every wait ends at its deadline to the millisecond: rules
//! given the deadline and the time, and a fair waiter's place among the
//! blocked.

use std::cell::Cell;
use std::time::{Duration, Instant};

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
/// Not asked for a waiter whose turn is its [`Place`] (`Wait::place`).
pub(crate) fn worth_blocking(deadline: Option<Instant>, now: Instant) -> bool {
    deadline.is_none_or(|d| d.saturating_duration_since(now) >= SHORT_WAIT)
}

/// The last part of a wait, spent waiting for messages rather than
/// blocked on the server (see `worth_blocking`).
pub const SHORT_WAIT: Duration = Duration::from_secs(1);

/// How long the next direct-grant round trip blocks: a slice, cut to end
/// `tail` before the deadline ([`SHORT_WAIT`]: the server may time it out
/// up to a clock tick late, and the rest of the wait is spent on messages,
/// see [`worth_blocking`]; zero for a waiter that keeps blocking); `None`
/// when under a millisecond is left to block.
pub(crate) fn block_for(
    slice: Duration,
    deadline: Option<Instant>,
    tail: Duration,
    now: Instant,
) -> Option<Duration> {
    let left = deadline.map(|d| d.saturating_duration_since(now).saturating_sub(tail));
    let b = left.map_or(slice, |l| l.min(slice));
    (b >= Duration::from_millis(1)).then_some(b)
}

#[cfg(test)]
mod tests {
    use super::{block_for, worth_blocking, Place, SHORT_WAIT};
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
