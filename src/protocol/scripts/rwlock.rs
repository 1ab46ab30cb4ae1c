//! The read-write lock's scripts' arguments (lua/rw_read_acquire.lua,
//! rw_write_acquire.lua, rw_read_release.lua, rw_write_release.lua,
//! rw_watch.lua), by name: a struct per script whose `argv` puts them in
//! the order of the script's header. The handles (`handles/rwlock.rs`)
//! send them.

use std::time::Duration;

use super::{Arg, Args};

/// Where a hand-over of the write hold goes (lua/rw_grant.lua `rw_open`):
/// the writers' grant prefix and claim window, and the wake-up channel and
/// message for those that wait for messages (and for waiting readers).
pub(crate) struct Open<'a> {
    pub(crate) grant_prefix: &'a [u8],
    pub(crate) claim: Duration,
    pub(crate) channel: Vec<u8>,
    pub(crate) message: Vec<u8>,
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
pub(crate) struct ReadAcquireArgs<'a> {
    pub(crate) token: &'a [u8],
    pub(crate) lease_ms: &'a [u8],
    /// This thread's own write token (a downgrade), or empty.
    pub(crate) own_write: &'a [u8],
    /// How long the waiting entry lives without a retry; zero: none (a try).
    pub(crate) waiting: Duration,
    pub(crate) open: &'a Open<'a>,
}
}

script_args! {
/// lua/rw_write_acquire.lua's arguments, by name.
pub(crate) struct WriteAcquireArgs<'a> {
    pub(crate) token: &'a [u8],
    pub(crate) lease_ms: &'a [u8],
    /// How long the queue entry lives without a renewal; zero: no entry (a
    /// try).
    pub(crate) queue_ttl: Duration,
    pub(crate) open: &'a Open<'a>,
    /// The writer blocks in `BLMOVE` from the open list (else it waits for
    /// messages).
    pub(crate) blocks: bool = "block",
}
}

/// lua/rw_read_release.lua's and lua/rw_write_release.lua's arguments, by
/// name.
pub(crate) struct ReleaseArgs<'a> {
    pub(crate) token: &'a [u8],
    pub(crate) open: &'a Open<'a>,
    /// A waiter gives up: its entry is withdrawn (and a writer's grant
    /// taken meanwhile handed on).
    pub(crate) leave: bool,
}

impl ReleaseArgs<'_> {
    pub(crate) fn argv(&self) -> Args {
        let wake = (&*self.open.channel, &*self.open.message);
        let mut a = Args::release_head(self.token, wake, self.open.grant_prefix, self.open.claim);
        a.push_word(self.leave, "leave");
        a
    }
}

script_args! {
/// lua/rw_watch.lua's arguments, by name.
pub(crate) struct WatchArgs<'a> {
    /// The blocked writer's token, or empty for a look at the name alone.
    pub(crate) writer: &'a [u8],
    /// The writer's queue entry lifetime.
    pub(crate) entry: Duration,
    pub(crate) open: &'a Open<'a>,
}
}
