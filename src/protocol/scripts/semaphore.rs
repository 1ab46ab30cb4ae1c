//! The semaphores' scripts' arguments (lua/sem_acquire.lua,
//! sem_release.lua, sem_watch.lua, sem_force_release.lua), by name: a
//! struct per script whose `argv` puts them in the order of the script's
//! header. The handles (`handles/semaphore.rs`) send them; the model
//! checker (`check/`) runs the scripts with the same arguments, made by
//! the same code (`redlease::__protocol::semaphore`).

use std::time::Duration;

use super::{Arg, Args};

/// Where an offer of permits goes (lua/sem_grant.lua `sem_offer`): the
/// grant prefix and claim window, the wake-up channel and message for
/// waiters that wait for messages, and the handle's permit count (used
/// when none is stored) and mode.
pub struct Offer<'a> {
    /// What the name's grants are named after (lua/sem_grant.lua).
    pub grant_prefix: &'a [u8],
    /// How long an offer waits to be taken (`GRANT_CLAIM`).
    pub claim: Duration,
    /// The wake-up channel.
    pub channel: Vec<u8>,
    /// The wake-up message (`<client id>:<key>`).
    pub message: Vec<u8>,
    /// The handle's permit count.
    pub permits: u32,
    /// A fair semaphore.
    pub fair: bool,
}

impl Offer<'_> {
    /// lua/sem_force_release.lua's arguments.
    pub(crate) fn force_release_argv(&self) -> Args {
        let mut a = Args::new();
        self.push_for_release(&mut a);
        a
    }

    /// The offer as the acquire and watch scripts take it: grant prefix,
    /// claim window, wake-up channel and message.
    pub(crate) fn push_offer(&self, a: &mut Args) {
        a.push(self.grant_prefix);
        a.push_millis(self.claim);
        a.push(&self.channel);
        a.push(&self.message);
    }

    /// The offer as the release scripts take it: channel and message first,
    /// then the grant prefix, claim window, permit count and mode.
    pub(crate) fn push_for_release(&self, a: &mut Args) {
        a.push(&self.channel);
        a.push(&self.message);
        a.push(self.grant_prefix);
        a.push_millis(self.claim);
        self.push_count(a);
    }

    /// The handle's permit count and mode.
    pub(crate) fn push_count(&self, a: &mut Args) {
        a.push_number(self.permits);
        a.push(mode(self.fair));
    }
}

/// A fair semaphore's mode argument: '1' fair, '0' not.
pub fn mode(fair: bool) -> &'static [u8] {
    if fair {
        b"1"
    } else {
        b"0"
    }
}

/// lua/sem_acquire.lua's arguments, by name (its header says what each
/// does); `argv` puts them in the script's order.
pub struct AcquireArgs<'a> {
    /// `<k>:<token>`.
    pub member: &'a [u8],
    /// The lease in milliseconds, as the server reads it.
    pub lease_ms: &'a [u8],
    /// Permits wanted.
    pub k: u32,
    /// How long the waiter's entry lives without a renewal; zero: none (a
    /// try).
    pub entry: Duration,
    /// The waiter blocks in `BLMOVE` from the open list (else it waits for
    /// messages).
    pub blocks: bool,
    /// Where an offer of permits goes.
    pub offer: &'a Offer<'a>,
}

impl AcquireArgs<'_> {
    pub(crate) fn argv(&self) -> Args {
        let mut a = Args::new();
        a.push(self.member);
        a.push(self.lease_ms);
        a.push_number(self.offer.permits);
        a.push_number(self.k);
        a.push(mode(self.offer.fair));
        a.push_millis(self.entry);
        a.push_word(self.blocks, "block");
        self.offer.push_offer(&mut a);
        a
    }
}

/// lua/sem_release.lua's arguments, by name.
pub struct ReleaseArgs<'a> {
    /// `<k>:<token>`.
    pub member: &'a [u8],
    /// Where an offer of permits goes.
    pub offer: &'a Offer<'a>,
    /// A waiter gives up: its entries go, and permits offered to it
    /// meanwhile are offered on.
    pub leave: bool,
}

impl ReleaseArgs<'_> {
    pub(crate) fn argv(&self) -> Args {
        let mut a = Args::new();
        a.push(self.member);
        self.offer.push_for_release(&mut a);
        a.push_word(self.leave, "leave");
        a
    }
}

script_args! {
/// lua/sem_watch.lua's arguments, by name.
pub struct WatchArgs<'a> {
    /// The blocked waiter's member, or empty for a look at the name alone.
    pub waiter: &'a [u8],
    /// The waiter's entry lifetime.
    pub entry: Duration,
    /// Where an offer of permits goes, and the handle's count and mode.
    pub offer: &'a Offer<'a>,
}
}

/// As the watch script takes it: the offer, then the count and mode.
impl Arg for Offer<'_> {
    fn push_to(&self, a: &mut Args) {
        self.push_offer(a);
        self.push_count(a);
    }
}

parts!(AcquireArgs, ReleaseArgs);
