//! The grant protocol's windows: how long a hand-over waits to be taken,
//! how long a waiter blocks, and when a waiter first looks at a name. The
//! Lua scripts are given these values as arguments; the model checker
//! (`check/`) explores the scripts with the same values.

use std::time::Duration;

/// How long a waiter that finds no connection to block on waits before it
/// looks without blocking.
pub const GRANT_SLICE: Duration = Duration::from_millis(250);

/// How long a waiter stays blocked in one `BLMOVE` when its wait has no
/// deadline sooner: it sends nothing in between (its queue entry lives
/// [`ROOM_ENTRY`], renewed at each block), and it keeps its place among the
/// blocked waiters all that time.
pub const ROOM_CHUNK: Duration = Duration::from_secs(60);

/// The queue entry life of a waiter blocked in the open list: a chunk and
/// room for the next round trip. A waiter that dies keeps its entry that
/// long, yet never stalls the name for more than one claim window: a
/// release opens the name to the blocked (the dead are not among them),
/// and a hand-over nobody took purges the queue.
pub const ROOM_ENTRY: Duration = Duration::from_secs(75);

/// How long a hand-over waits on the open list for a blocked waiter to
/// take it before it lapses (nobody was blocked: every waiter died, or was
/// between two round trips); the queue is then purged.
pub const GRANT_CLAIM: Duration = Duration::from_millis(500);

/// How long a hand-over (a release's, or a look's or a newcomer's that
/// opens the name) waits to be taken when the name's slot was just seen
/// moving between Cluster masters (see [`hand_over_claim`]).
/// Redis redirects a client blocked on a slot that left its master only
/// from its clients cron, which visits every client within a second at
/// the default `hz 10` (server.c `clientsCron`: clients/hz per run): a
/// waiter blocked there since before the move hears of it up to a second
/// after the slot was handed over, and loses its place if the hand-over
/// lapsed untaken meanwhile (lua/queue.lua `queue_untaken` drops the
/// waiters that block). Twice that second: a dead waiter costs that much
/// only right after a move.
pub const SETTLING_CLAIM: Duration = Duration::from_secs(2);

/// How long after a client last saw a name's slot moving (a `MOVED`,
/// `ASK` or `TRYAGAIN` reply, or its slot map read again with the slot on
/// another master) its hand-overs of names in that slot (releases, looks,
/// acquisitions) are made with [`SETTLING_CLAIM`]: the waiters blocked on the old master are
/// redirected within a second of the slot being handed over, which is no
/// earlier than that sighting.
pub const MOVE_SETTLING: Duration = Duration::from_secs(2);

/// The claim window a hand-over is given: [`GRANT_CLAIM`], or
/// [`SETTLING_CLAIM`] when the name's slot was seen moving within
/// [`MOVE_SETTLING`] (`moved_ago`).
pub fn hand_over_claim(moved_ago: Option<Duration>) -> Duration {
    match moved_ago {
        Some(ago) if ago < MOVE_SETTLING => SETTLING_CLAIM,
        _ => GRANT_CLAIM,
    }
}

/// When a release that opened the name looks at it again: just after its
/// hand-over's claim window (`claim`, see [`hand_over_claim`]).
pub fn look_after(claim: Duration) -> Duration {
    claim * 11 / 10
}

/// The short first lease a waiter gets when its script takes an open
/// grant its pop took (lua/queue.lua `queue_take_open`): twice the claim
/// window.
pub const POPPED_LEASE: Duration = Duration::from_millis(GRANT_CLAIM.as_millis() as u64 * 2);

/// When a waiter that blocks looks at the name first, counted from the
/// sending of the attempt that found it busy for `wait` ms, `taken` after
/// that sending (its reply was read then): when the holder's lease would
/// end. A reply read later than a hand-over's claim window (the process
/// froze, the reply was delayed) is stale: a release may have opened the
/// name meanwhile and, with nobody blocked to take it, the grant lapsed;
/// only a look finds that, so it looks at once. Found by the model checker
/// (`check/`, "waiter frozen across a hand-over").
pub fn first_look(taken: Duration, wait: i64) -> Duration {
    if taken >= GRANT_CLAIM {
        return taken;
    }
    Duration::from_millis(wait.max(0) as u64)
}

/// When a release that opened the name to its waiters looks at it again
/// (its first look, before the renewal thread's margin): once the claim
/// window of its hand-over has passed.
pub const NAME_LOOK_AFTER: Duration =
    Duration::from_millis(GRANT_CLAIM.as_millis() as u64 * 11 / 10);

/// How long a round's opening list lives (lua/latch_count_down.lua): every
/// waiter blocked on it is served as soon as the push is made, so it only
/// needs to outlast a waiter's look and the pop sent right behind it (see
/// `Node::look_blocking`). Nobody removes it: it lapses by itself, soon,
/// whether the waiters it was pushed for woke or died.
pub const OPENING_LIFE: Duration = Duration::from_millis(500);

/// The longest a waiter that waits for messages goes without trying again
/// (`ClientBuilder::fallback_poll`'s default): a lost message costs at
/// most this.
pub const FALLBACK_POLL: Duration = Duration::from_secs(2);

/// How long a waiter rides out an outage (`ClientBuilder::outage_tolerance`'s
/// default; `protocol::tries::ride_out`).
pub const OUTAGE_TOLERANCE: Duration = Duration::from_secs(10);

/// The time from `from` to `to` on any clock (an `Instant`, the model
/// checker's milliseconds), none when `to` is not later: what is left of a
/// wait, how long an outage has lasted.
pub(crate) fn span<T>(from: T, to: T) -> Duration
where
    T: Copy + PartialOrd + std::ops::Sub<Output = Duration>,
{
    if to > from {
        to - from
    } else {
        Duration::ZERO
    }
}
