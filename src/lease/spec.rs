//! What a handle describes for one acquisition: its scripts' calls for
//! one token (`Spec`), how its waiter blocks for a direct grant
//! (`Direct`), and how a hold taken by a pop alone proves itself
//! (`PopAlone`).

use std::sync::Arc;
use std::time::Duration;

use crate::backend::PreparedCall;
use crate::wakeup::Turns;

/// What a primitive supplies for one acquisition, built for one token.
pub(crate) struct Spec {
    /// What kind of primitive (`"lock"`, `"semaphore"`, ...) and its name
    /// as the user gave it: for messages and events.
    pub(crate) what: &'static str,
    pub(crate) name: Arc<[u8]>,
    /// The key this name's waiters wait on (and its release messages name).
    pub(crate) wake: Arc<[u8]>,
    pub(crate) turns: Turns,
    /// Try at once even if this client has waiters queued for `wake`.
    pub(crate) jump: bool,
    /// Its waiters' registration only decides whether a release publishes
    /// (see `wakeup::Wait::patient`): they look seldom.
    pub(crate) patient: bool,
    pub(crate) lease: Duration,
    /// Renewed by the watchdog (or a fixed lease).
    pub(crate) watchdog: bool,
    /// A fence granted or a wait ([`Answer`](crate::backend::Answer));
    /// re-grants to the same token.
    pub(crate) grant: PreparedCall,
    /// The fencing counter `grant` draws from (Redlock agrees on it).
    pub(crate) fence: Option<Vec<u8>>,
    /// Token-checked release: `1` released (and published), `0` not ours.
    pub(crate) release: PreparedCall,
    /// Token-checked extension; its last argument is the lease in ms.
    pub(crate) extend: PreparedCall,
    /// Withdraws what a waiting attempt leaves besides a hold (a fair-queue
    /// entry, a writer's intent), after giving up.
    pub(crate) leave: Option<Arc<PreparedCall>>,
    /// What is written behind a grant whose reply is late, to run after
    /// it whatever it did; `None`: `release`. A lock's waiter leaves its
    /// queue with it too, or its entry would sit at the head until it
    /// lapsed, and a release would grant it to a token nobody uses.
    /// Mostly `leave` itself, shared.
    pub(crate) undo: Option<Arc<PreparedCall>>,
    /// Direct grant, where the backend allows it (see [`Direct`]).
    pub(crate) direct: Option<Direct>,
    /// A lock's look at its name alone (see `Held::look`).
    pub(crate) look: Option<Arc<PreparedCall>>,
}

impl Spec {
    /// This spec for the hold granted with `fence`: where its waiters hold
    /// from a pop alone, its release and extension name the fence (see
    /// [`PopAlone`]), however this hold was granted: a fence names one
    /// grant of one holder.
    pub(crate) fn fenced(mut self, fence: i64) -> Spec {
        if let Some(alone) = self.direct.as_ref().and_then(|d| d.alone.as_ref()) {
            let f = fence.max(0).to_string().into_bytes();
            self.release.args.set(alone.release_arg, &f);
            self.extend.args.set(alone.extend_arg, &f);
        }
        self
    }
}

/// How a queued waiter learns of its grant without a message: it blocks in
/// `BLMOVE` from the name's shared open list `list` into its own list
/// `into` until its deadline (see [`ROOM_CHUNK`]). For a lock or a write
/// hold (`alone`) the pop alone is the grant, claimed later by the hold's
/// first renewal; otherwise (permits) `grant` is pipelined behind, so the script runs as soon as the
/// pop does and finds on `into` what the pop took (see
/// `Node::grant_blocking`). A release (of a lock, a write hold, permits) puts
/// what it hands on onto the open list, and Redis serves the connection
/// blocked longest: a dead waiter (no connection) is never chosen, and an
/// idle waiter sends nothing. `watch` is the look the renewal thread takes
/// for it meanwhile (a holder whose lease ran out with nobody releasing).
/// Should the server refuse the blocking pop (an old ACL), the waiter falls
/// back to messages, and its attempts use `by_message`: the same script,
/// with an entry saying it needs a message when granted.
pub(crate) struct Direct {
    pub(crate) list: Vec<u8>,
    pub(crate) into: Vec<u8>,
    pub(crate) alone: Option<PopAlone>,
    pub(crate) watch: Option<PreparedCall>,
    pub(crate) by_message: PreparedCall,
    /// Its waiters' turns are their places among the blocked (a fair
    /// lock: a pop alone takes the grant, with no script behind it to
    /// look at the queue), so a waiter blocks until its deadline however
    /// near it is: one that waited for messages instead would lose its
    /// turn to any later waiter blocked (see `Wait::place`).
    pub(crate) ordered: bool,
}

/// A lock's waiter (or a read-write lock's writer) holds the lock from its
/// pop alone (see `Node::grant_blocking`), and proves it by the fence it
/// popped until its first renewal claims it (lua/queue.lua `held_by`):
/// `holder` is the lock (writer) key, looked at behind the pop, and the hold's fence goes in as its
/// release's argument `release_arg` and its extension's `extend_arg`
/// (where the spec has an empty placeholder). A fair lock's pop is the
/// grant only while no waiter keeps its turn waiting for messages
/// (`turns`, read behind the pop too): else its script decides.
pub(crate) struct PopAlone {
    pub(crate) holder: Vec<u8>,
    pub(crate) turns: Option<Vec<u8>>,
    pub(crate) release_arg: usize,
    pub(crate) extend_arg: usize,
}
