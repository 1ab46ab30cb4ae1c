//! The read-write lock's scripts' arguments (lua/rw_read_acquire.lua,
//! rw_write_acquire.lua, rw_read_release.lua, rw_write_release.lua,
//! rw_watch.lua), by name: a struct per script whose `argv` puts them in
//! the order of the script's header. The handles (`handles/rwlock.rs`)
//! send them; the model checker (`check/`) runs the scripts with the same
//! arguments, made by the same code (`redlease::__protocol::rwlock`).

use std::time::Duration;

use super::{Arg, Args};

/// Where a hand-over of the write hold goes (lua/rw_grant.lua `rw_open`):
/// the writers' grant prefix and claim window, and the wake-up channel and
/// message for those that wait for messages (and for waiting readers).
pub struct Open<'a> {
    /// What the writers' grants are named after.
    pub grant_prefix: &'a [u8],
    /// How long a hand-over waits to be taken (`GRANT_CLAIM`).
    pub claim: Duration,
    /// The wake-up channel.
    pub channel: Vec<u8>,
    /// The wake-up message (`<client id>:<key>`).
    pub message: Vec<u8>,
}

/// As the acquire and watch scripts take it: grant prefix, claim window,
/// wake-up channel and message.
impl Arg for Open<'_> {
    fn push_to(&self, a: &mut Args) {
        a.push(self.grant_prefix);
        a.push_millis(self.claim);
        a.push(&self.channel);
        a.push(&self.message);
    }
}

script_args! {
/// lua/rw_read_acquire.lua's arguments, by name (its header says what each
/// does); `argv` puts them in the script's order.
pub struct ReadAcquireArgs<'a> {
    /// The reader token.
    pub token: &'a [u8],
    /// The lease in milliseconds, as the server reads it.
    pub lease_ms: &'a [u8],
    /// This thread's own write token (a downgrade), or empty.
    pub own_write: &'a [u8],
    /// How long the waiting entry lives without a retry; zero: none (a try).
    pub waiting: Duration,
    /// Where a hand-over made here goes.
    pub open: &'a Open<'a>,
    /// The fence of this thread's own write hold (a downgrade), or empty:
    /// a write hold its pop took, not claimed yet, is proved by it.
    pub own_fence: &'a [u8],
}
}

script_args! {
/// lua/rw_write_acquire.lua's arguments, by name.
pub struct WriteAcquireArgs<'a> {
    /// The writer token.
    pub token: &'a [u8],
    /// The lease in milliseconds, as the server reads it.
    pub lease_ms: &'a [u8],
    /// How long the queue entry lives without a renewal; zero: no entry (a
    /// try).
    pub queue_ttl: Duration,
    /// Where a hand-over made here goes.
    pub open: &'a Open<'a>,
    /// The writer blocks in `BLMOVE` from the open list (else it waits for
    /// messages).
    pub blocks: bool = "block",
}
}

/// lua/rw_read_release.lua's and lua/rw_write_release.lua's arguments, by
/// name.
pub struct ReleaseArgs<'a> {
    /// The holder's (or waiter's) token.
    pub token: &'a [u8],
    /// Where a hand-over made here goes.
    pub open: &'a Open<'a>,
    /// A waiter gives up: its entry is withdrawn (and a writer's grant
    /// taken meanwhile handed on).
    pub leave: bool,
}

impl ReleaseArgs<'_> {
    pub(crate) fn argv(&self) -> Args {
        let wake = (&*self.open.channel, &*self.open.message);
        let mut a = Args::release_head(self.token, wake, self.open.grant_prefix, self.open.claim);
        a.push_word(self.leave, "leave");
        // A write hold's fence, put in by the hold (see `RELEASE_FENCE`;
        // lua/rw_read_release.lua reads no further than `leave`).
        a.push(b"");
        a
    }
}

/// Where a write hold's fence goes in lua/rw_write_release.lua's arguments
/// (`ARGV[7]`): a hold a writer's pop alone took is proved by it until its
/// first renewal claims it (lua/lock_extend.lua, as a lock's; see
/// `lease::PopAlone`).
pub const RELEASE_FENCE: usize = 6;

script_args! {
/// lua/rw_watch.lua's arguments, by name.
pub struct WatchArgs<'a> {
    /// The blocked writer's token, or empty for a look at the name alone.
    pub writer: &'a [u8],
    /// The writer's queue entry lifetime.
    pub entry: Duration,
    /// Where a hand-over made here goes.
    pub open: &'a Open<'a>,
}
}

parts!(ReleaseArgs);
