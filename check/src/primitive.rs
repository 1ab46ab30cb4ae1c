//! What a primitive tells the waiter model (`waiters/`): its scripts
//! with the library's arguments, how many names an acquisition takes, and
//! its properties. `semaphore.rs`, `rwlock.rs` and `multilock.rs` each
//! implement it.

use std::fmt::Debug;
use std::hash::Hash;

use crate::keyspace::Keyspace;
use crate::server::Server;
use crate::waiters::WaitModel;

/// One script run: the file, its keys and its arguments.
pub struct Script {
    pub file: &'static str,
    pub keys: Vec<Vec<u8>>,
    pub args: Vec<Vec<u8>>,
}

/// How a waiter of a primitive that grants directly blocks on the server
/// (`Node::grant_blocking`): it pops from `open` into `own`, and `grant`
/// runs right behind the pop, or, where the pop alone is the grant
/// (`alone`: the lock), only after a pop that took none, in a round trip
/// of its own; the renewal thread's looks for it run `watch`.
pub struct Direct {
    pub open: Vec<u8>,
    pub own: Vec<u8>,
    /// The acquire script of a waiter that blocks (`'block'`), with
    /// `'popped'` when it is sent behind a pop (or after one).
    pub grant: Script,
    /// The look for this blocked waiter (lua/sem_watch.lua with its member).
    pub watch: Script,
    /// The pop alone is the grant (the library's `PopAlone`).
    pub alone: Option<Alone>,
}

/// A waiter whose pop alone is the grant (the library's `PopAlone`): behind
/// the pop go only the reads `protocol::popped::behind_pop` makes of the
/// holder key, which say whether the popped fence is the open grant
/// (`pop_took_grant`). The hold puts its fence in its release's and its
/// renewals' arguments, at these places (a grant its pop took is its hold
/// until its first renewal claims it).
pub struct Alone {
    pub holder: Vec<u8>,
    pub release_arg: usize,
    pub extend_arg: usize,
}

/// A holder as the checks see it: client, what it holds, its token, its
/// fence (0: none).
pub type Holder<M> = (usize, M, u8, i64);

/// Where a waiter is served in arrival order: its name's queue and holder
/// keys, and its token as the server names it (see
/// [`Primitive::arrival`]).
pub struct Arrival {
    pub queue: Vec<u8>,
    pub holder: Vec<u8>,
    pub token: Vec<u8>,
    /// The holder key is a sorted set of the holders' tokens (a
    /// semaphore's permits); else a string `<token>#<fence>`.
    pub set: bool,
    /// Where waiters block on the server too: the sorted set of those it
    /// knows wait for messages (the others are between round trips, or
    /// blocked).
    pub told: Option<Vec<u8>>,
}

impl Arrival {
    /// What the holder key says of holders now: for a set, whether this
    /// waiter's token is in it; for a string, its value.
    pub fn held(&self, keys: &crate::keyspace::Keyspace) -> Option<Vec<u8>> {
        if self.set {
            keys.rank(&self.holder, &self.token)
                .map(|_| self.token.clone())
        } else {
            keys.string(&self.holder).map(<[u8]>::to_vec)
        }
    }

    /// Whether `held` (what [`held`](Self::held) read) names this waiter.
    pub fn names(&self, held: Option<&[u8]>) -> bool {
        held.is_some_and(|v| {
            if self.set {
                v == self.token
            } else {
                v.starts_with(&self.token) && v.get(self.token.len()) == Some(&b'#')
            }
        })
    }
}

/// What a primitive says to the waiter model: its scripts with the
/// library's arguments, and its properties.
pub trait Primitive: Sized {
    /// What a client asks for (the semaphore: a permit; the read-write
    /// lock: a read or the write hold).
    type Mode: Copy + Debug + PartialEq + Eq + Hash;
    /// Tags the quiescence verdicts this primitive memoizes.
    const TAG: u8;
    /// The acquire script of client `i`'s token `t` (`queue`: the waiter
    /// registers; a try does not).
    fn acquire(
        &self,
        m: &WaitModel<Self>,
        i: usize,
        mode: Self::Mode,
        t: u8,
        queue: bool,
    ) -> Script;
    /// The release (`leave`: a waiter gives up, its entry withdrawn).
    fn release(
        &self,
        m: &WaitModel<Self>,
        i: usize,
        mode: Self::Mode,
        t: u8,
        leave: bool,
    ) -> Script;
    /// The renewal thread's renewal to `lease_ms` (replies 1 when renewed);
    /// `exact`: the guard's `extend`, which may shorten it; `claiming`: of
    /// a hold whose pop alone may have taken its grant, in the form that
    /// claims it ([`Alone`]; the hold's fence is put in after).
    #[allow(clippy::too_many_arguments)]
    fn extend(
        &self,
        m: &WaitModel<Self>,
        i: usize,
        mode: Self::Mode,
        t: u8,
        lease_ms: i64,
        exact: bool,
        claiming: bool,
    ) -> Script;
    /// The renewal thread's look at the name alone (`mode`: what its
    /// client asked of it).
    fn look(&self, m: &WaitModel<Self>, i: usize, mode: Self::Mode) -> Script;
    /// A waiter whose registration only decides whether a release
    /// publishes (`Wait::patient`): it polls at most every 30 s.
    fn patient(&self, mode: Self::Mode) -> bool;
    /// The claim window its releases give their hand-overs (offers): a
    /// Cluster client's is longer right after it saw the name's slot move
    /// (`protocol::timing::hand_over_claim`); the liveness bound is this
    /// + 1 s.
    fn hand_over_claim(&self) -> std::time::Duration {
        redlease::__protocol::GRANT_CLAIM
    }
    /// Whether a hold of `mode` has one holder at a time (a lock, a write
    /// hold): the library's release of one draws a fence, and a later one
    /// by the same client settles its looks (`looks::after_opening`).
    fn exclusive(&self, _mode: Self::Mode) -> bool {
        false
    }
    /// Exclusion, and that every holder (valid in its own view) is known
    /// to the server.
    fn holders(&self, keys: &Keyspace, holders: &[Holder<Self::Mode>]) -> Result<(), String>;
    /// The fence the server names now for each name (0: none; none may
    /// ever go down).
    fn fences_on_server(&self, keys: &Keyspace) -> Vec<i64>;
    /// How many names an acquisition of `mode` takes, one after another
    /// in this order (a multi-lock's canonical order).
    fn names(&self, _mode: Self::Mode) -> u8 {
        1
    }
    /// What is asked of name `k` (the acquisition's own mode when it takes
    /// one name).
    fn at(&self, mode: Self::Mode, _k: u8) -> Self::Mode {
        mode
    }
    /// Every name at once, one token, never queueing (a multi-lock's
    /// first try): the script, if the primitive has one.
    fn acquire_all(
        &self,
        _m: &WaitModel<Self>,
        _i: usize,
        _mode: Self::Mode,
        _t: u8,
    ) -> Option<Script> {
        None
    }
    /// Which of the primitive's names (the index of `fences_on_server`) a
    /// hold of `mode` is of.
    fn name_of(&self, _mode: Self::Mode) -> u8 {
        0
    }
    /// Where client `i`'s token `t`, asking `mode`, is served in arrival
    /// order (a lock's queue, lua/queue.lua), if the primitive promises
    /// that order.
    fn arrival(&self, _mode: Self::Mode, _i: usize, _t: u8) -> Option<Arrival> {
        None
    }
    /// Whether a release of `key` (what a message announces:
    /// `protocol::delivery::heard`) is of what a waiter of `mode` waits on.
    fn wakes(&self, _key: &[u8], _mode: Self::Mode) -> bool {
        true
    }
    /// Whether a waiter asking `mode` blocks on a server that grants
    /// directly (else it waits for messages there too).
    fn blocks(&self, _mode: Self::Mode) -> bool {
        true
    }
    /// How client `i`'s token `t`, asking `mode`, blocks on the server
    /// (`popped`: its script is sent behind a pop), if the primitive's
    /// waiters can.
    fn direct(
        &self,
        _m: &WaitModel<Self>,
        _i: usize,
        _mode: Self::Mode,
        _t: u8,
        _popped: bool,
    ) -> Option<Direct> {
        None
    }
    /// Whether what is free on the server now fits every one of these
    /// requests (the bounded liveness check: a name free for every live
    /// waiter goes to one within the claim + 1 s).
    fn fits(&self, _keys: &Keyspace, _modes: &[Self::Mode]) -> bool {
        false
    }
    /// Once nobody holds or waits: a try succeeds within the claim + 1 s
    /// of the last lease's end, and every key but the fence floor lapses.
    fn quiet(
        &self,
        m: &WaitModel<Self>,
        server: &mut Server,
        keys: &Keyspace,
    ) -> Result<(), String>;
}
