//! The lock's scripts' arguments (lua/lock_acquire.lua, lock_release.lua,
//! lock_watch.lua, lock_extend.lua), by name: a struct per script whose
//! `argv` puts them in the order of the script's header. The handles
//! (`handles/lock.rs`) send them; the model checker (`check/`) runs the
//! scripts with the same arguments, made by the same code
//! (`redlease::__protocol::lock`).

use std::time::Duration;

use super::{Arg, Args};

/// Where and how a hand-over is announced (lua/queue.lua `announce`): the
/// wake-up channel and message, and whether every waiter of the name
/// queues (`queued`: then only waiters that wait for messages are told).
pub struct Announce<'a> {
    /// Borrowed from the client's wake-up (the same for most names).
    pub channel: std::borrow::Cow<'a, [u8]>,
    /// The wake-up message (`<client id>:<key>`).
    pub message: Vec<u8>,
    /// Every waiter of the name queues: only waiters that wait for messages are told.
    pub queued: bool,
}

/// Its three arguments, in the scripts' order.
impl Arg for Announce<'_> {
    fn push_to(&self, args: &mut Args) {
        args.push(&self.channel);
        args.push(&self.message);
        args.push_word(self.queued, "queued");
    }
}

script_args! {
/// lua/lock_acquire.lua's arguments, by name (its header says what each
/// does); `argv` puts them in the script's order.
pub struct AcquireArgs<'a> {
    /// The owner token.
    pub token: &'a [u8],
    /// The lease in milliseconds, as the server reads it.
    pub lease_ms: &'a [u8],
    /// How long the queue entry lives without a renewal; zero: no entry (a
    /// try).
    pub queue_ttl: Duration,
    /// What the name's grants are named after (lua/queue.lua).
    pub grant_prefix: &'a [u8],
    /// How long a hand-over waits to be taken (`GRANT_CLAIM`).
    pub claim: Duration,
    /// Where and how a hand-over is announced.
    pub announce: &'a Announce<'a>,
    /// How the waiter waits.
    pub waits: Waits,
    /// How long a hand-over made by this call waits to be taken (the name
    /// found free with a live waiter ahead): `claim`, or longer right
    /// after a Cluster slot moved (`hand_over_claim`; the backend sets it,
    /// see `Lua::claim_arg`).
    pub hand_over: Duration,
}
}

/// How a lock's waiter waits for its grant (lua/lock_acquire.lua `ARGV[9]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waits {
    /// A plain lock's waiter blocked in `BLMOVE` from the open list
    /// (`'block'`).
    Blocking,
    /// A plain lock's waiter that waits for release messages (in its last
    /// second): it may take an open hand-over whoever is older.
    Messages,
    /// A fair lock's waiter blocked in `BLMOVE` (`'turn block'`): a grant
    /// not taken by its pop it takes only as the oldest.
    FairBlocking,
    /// A fair lock's waiter that waits for messages (`'turn'`): its place
    /// among the blocked was lost (`protocol::blocking::Place`), and it
    /// keeps its turn: a hand-over is kept for it once it is the oldest
    /// (lua/queue.lua `offer`).
    FairMessages,
}

impl Arg for Waits {
    fn push_to(&self, args: &mut Args) {
        args.push(match self {
            Waits::Blocking => b"block".as_slice(),
            Waits::Messages => b"",
            Waits::FairBlocking => b"turn block",
            Waits::FairMessages => b"turn",
        });
    }
}

/// Where `AcquireArgs::argv` puts what lua/lock_acquire_all.lua takes of
/// it: the token...
pub const ACQUIRE_TOKEN: usize = 0;
/// ...the lease...
pub const ACQUIRE_LEASE: usize = 1;
/// ...and the grant prefix.
pub const ACQUIRE_PREFIX: usize = 3;
/// lua/lock_acquire.lua's keys before the fence floor (the last).
pub const ACQUIRE_KEYS: usize = 4;

/// lua/lock_release.lua's arguments, by name.
pub struct ReleaseArgs<'a> {
    /// The holder's token (a waiter's, with `leave`; none with `force`).
    pub token: &'a [u8],
    /// Where and how a hand-over is announced.
    pub announce: &'a Announce<'a>,
    /// What the name's grants are named after (lua/queue.lua).
    pub grant_prefix: &'a [u8],
    /// How long a hand-over waits to be taken (`GRANT_CLAIM`).
    pub claim: Duration,
    /// End the lease whoever holds it (`force_unlock`).
    pub force: bool,
    /// Leave the fencing counter to lapse by itself (Redlock: the masters
    /// keep agreeing on it).
    pub keep: bool,
    /// A waiter gives up: its queue entry is withdrawn, and a grant it
    /// took meanwhile handed on.
    pub leave: bool,
}

impl ReleaseArgs<'_> {
    pub(crate) fn argv(&self) -> Args {
        let wake = (&*self.announce.channel, &*self.announce.message);
        let mut a = Args::release_head(self.token, wake, self.grant_prefix, self.claim);
        a.push_word(self.force, "force");
        a.push_word(self.keep, "keep");
        a.push_word(self.announce.queued, "queued");
        a.push_word(self.leave, "leave");
        // The hold's fence, put in by the hold (see `RELEASE_FENCE`).
        a.push(b"");
        a
    }
}

/// Where a hold's fence goes in lua/lock_release.lua's arguments (`ARGV[10]`)
/// and lua/lock_extend.lua's (`ARGV[4]`): a hold taken by a pop alone is
/// proved by it until claimed (see `lease::PopAlone`).
pub const RELEASE_FENCE: usize = 9;
/// See [`RELEASE_FENCE`].
pub const EXTEND_FENCE: usize = 3;

script_args! {
/// lua/lock_watch.lua's arguments, by name.
pub struct WatchArgs<'a> {
    /// The blocked waiter's token, or empty for a look at the name alone.
    pub waiter: &'a [u8],
    /// The waiter's queue entry lifetime.
    pub entry: Duration,
    /// What the name's grants are named after (lua/queue.lua).
    pub grant_prefix: &'a [u8],
    /// How long a hand-over waits to be taken (`GRANT_CLAIM`): what the
    /// look's rules read.
    pub claim: Duration,
    /// Where and how a hand-over is announced.
    pub announce: &'a Announce<'a>,
    /// How long a hand-over made by this look waits to be taken: `claim`,
    /// or longer right after a Cluster slot moved (as
    /// `AcquireArgs::hand_over`).
    pub hand_over: Duration,
}
}

/// lua/lock_extend.lua's arguments, by name (the keys differ with
/// `claiming`: see `handles::core::claiming_extend`).
pub struct ExtendArgs<'a> {
    /// The owner token.
    pub token: &'a [u8],
    /// A hold a blocking pop may have taken: the first extension claims
    /// it, withdrawing the queue entry (the grant prefix and the blocked
    /// waiters' queue entry life).
    pub claiming: Option<(&'a [u8], Duration)>,
    /// The lease in milliseconds, as the server reads it.
    pub lease_ms: &'a [u8],
}

impl ExtendArgs<'_> {
    pub(crate) fn argv(&self) -> Args {
        let mut a = Args::new();
        a.push(self.token);
        match self.claiming {
            Some((prefix, entry)) => {
                a.push(prefix);
                a.push_millis(entry);
            }
            None => {
                a.push(b"");
                a.push(b"0");
            }
        }
        // The hold's fence, put in by the hold (see `EXTEND_FENCE`).
        a.push(b"");
        a.push(self.lease_ms);
        a
    }
}

parts!(ReleaseArgs, ExtendArgs);
