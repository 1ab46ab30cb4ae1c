//! When a look at a name is made: the rule a look's reply is read by, and
//! its margins. A look is a watch script (lua/lock_watch.lua,
//! sem_watch.lua, rw_watch.lua) that the renewal thread runs for a waiter
//! blocked on the server, or after a release that opened the name; the
//! model checker drives this same rule.

use std::ops::{Add, Sub};
use std::time::Duration;

use crate::protocol::timing::first_look;

/// What a look's reply (lua/lock_watch.lua, sem_watch.lua, rw_watch.lua:
/// milliseconds until looking again is useful, or 0 when the waiter holds
/// it or nothing is left to look after) means for a look with
/// `looks_left`: `None` when it looks no more, else when it looks next
/// (from the sending of this look) and how many looks it has left then.
/// The model checker drives this same rule.
pub fn next_look(reply_ms: i64, looks_left: u32) -> Option<(Duration, u32)> {
    if reply_ms <= 0 {
        return None;
    }
    let next = Duration::from_millis(reply_ms as u64);
    let mut left = looks_left;
    // What it found is about to end (within a thirtieth of the look's
    // period, such as a grant found in its last moments): looking at its
    // end again is no new look.
    if next > LOOK_PERIOD / 30 + LOOK_MARGIN {
        if left <= 1 {
            return None;
        }
        left -= 1;
    }
    Some(((next + LOOK_MARGIN).min(LOOK_MAX), left))
}

/// When a look asked for at `first` runs, asked at `now`: a
/// [`LOOK_MARGIN`] after it (the expiry it waits for is the server's),
/// and never more than [`LOOK_MAX`] from now. Generic over the clock so
/// that the model checker's virtual milliseconds go through it too.
pub fn look_runs_at<T>(first: T, now: T) -> T
where
    T: Ord + std::ops::Add<Duration, Output = T>,
{
    (first + LOOK_MARGIN).min(now + LOOK_MAX)
}

/// Whether a busy reply starts the renewal thread's looks for a waiter,
/// and when the first is asked for: only for a waiter that blocks on the
/// server now (`blocks`), once per acquisition (`watching`: it has them
/// already; a token retired after a late reply ends them, and its
/// successor starts its own), counted from the attempt's send `sent`
/// with its reply read at `now` ([`first_look`]).
pub fn watch_on_busy<T>(watching: bool, blocks: bool, sent: T, now: T, wait: i64) -> Option<T>
where
    T: Copy + Add<Duration, Output = T> + Sub<Output = Duration>,
{
    (!watching && blocks).then(|| sent + first_look(now - sent, wait))
}

/// Whether a waiting acquisition watches hand-overs (looks at the name
/// when one names its client, `wakeup::Watches`): one that blocks on the
/// server (`blocks`), whose taker may freeze or die before it claims, and
/// a patient one (a read-write lock's reader: it takes no hand-over, but a
/// writer that takes one and dies holds it back unannounced). Only where
/// the server grants directly and the client's channel is its own (not a
/// sharded Cluster): the callers ask that.
pub fn watches_hand_overs(blocks: bool, patient: bool) -> bool {
    blocks || patient
}

/// How long after the holder's lease ends a waiter's look is made: the
/// expiry is the server's, and a look a little late costs less than one
/// that comes too early and must be made again.
pub const LOOK_MARGIN: Duration = Duration::from_millis(20);

/// The longest time between two looks of one waiter: a lock key can go
/// without a release (`FLUSHALL`, `DEL`, eviction, a failover without it),
/// and only a look sees it. A look at a held lock is two commands.
pub const LOOK_MAX: Duration = Duration::from_secs(5);

/// A blocked waiter's looks: as many as it needs while it waits.
pub const WAITER_LOOKS: u32 = u32::MAX;

/// How many looks a look at a name alone makes at most (after a release
/// that opened the name, a shortened lease, a forced unlock): its first,
/// and one when what it found would end (a taker's short first lease, or a
/// hand-over it made itself). Each release under contention starts one, and
/// each found the name held by the next short-lived holder, and looked
/// again, for as long as the contention lasted: looks piled up (4 clients
/// taking turns: 10,000 scripts a second in the first second, 42,000 in the
/// sixth). A blocked waiter's own looks (every 5 s at most) are the rest.
pub const NAME_LOOKS: u32 = 2;

/// What stands for a look's lease in the scheduler: a waiter's look due
/// within a thirtieth of it (100 ms) is taken with the batch at hand (see
/// `Renewal::early`), and one whose
/// batch failed is tried again after a tenth (300 ms).
pub const LOOK_PERIOD: Duration = Duration::from_secs(3);

#[cfg(test)]
mod tests {
    use super::watches_hand_overs;

    /// A waiter that blocks and a reader watch hand-overs; a writer or a
    /// lock waiter waiting for messages (an ACL without blocking commands)
    /// takes its grant by message and has no taker ahead to watch for.
    #[test]
    fn blocked_waiters_and_readers_watch_hand_overs() {
        assert!(watches_hand_overs(true, false));
        assert!(watches_hand_overs(false, true));
        assert!(!watches_hand_overs(false, false));
    }
}
