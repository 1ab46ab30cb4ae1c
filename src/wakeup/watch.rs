//! Hand-over watches: who looks at a name after a hand-over when its
//! releasing process is gone.
//!
//! A release that opens a name to its blocked waiters (lua/queue.lua
//! `hand_on`) gives it to whichever waiter Redis serves; if that waiter's
//! process froze, died or lost its release, the grant lapses unclaimed
//! after the claim window, and only a look opens the name again. The
//! releasing process makes one (`lease::look_after_hand_over`), but a
//! process that exits right after its release (a cron job, `redlease
//! run`) takes that look with it. So the hand-over also names the clients
//! of the three oldest waiters in line (lua/queue.lua `hand_on_watchers`:
//! one per client, passing over a waiter whose pop took an earlier grant),
//! each on its own channel (`<client channel>:<client id>`, subscribed by
//! `subscriber.rs` next to the client channel) with `@<client id>:<key>`,
//! and each client named makes the same look at the name once the claim
//! window has passed. A client named again for the same key before its
//! look is due (contention: a hand-over every few milliseconds) moves that
//! look rather than adding one, so each client makes at most one per quiet
//! spell of a name.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::backend::{Backend, PreparedCall};
use crate::protocol::watch::NamedLooks;
use crate::renewal;
use crate::util::mutex::lock;

/// What a blocked waiter's client does when a hand-over names it: `look`
/// at the name alone (lua/lock_watch.lua, rw_watch.lua with no waiter),
/// `after` the hand-over (past its claim window).
#[derive(Clone)]
pub(crate) struct OnHandOver {
    pub(crate) look: Arc<PreparedCall>,
    pub(crate) after: Duration,
}

struct Watch {
    on: OnHandOver,
    /// Blocked waiters of this client on the key.
    waiters: usize,
}

/// The keys this client's blocked waiters wait on, what a hand-over
/// naming the client makes it do, and the looks it asked for.
pub(super) struct Watches {
    backend: Weak<Backend>,
    keys: Mutex<Keys>,
}

#[derive(Default)]
struct Keys {
    waiting: HashMap<Vec<u8>, Watch>,
    /// The look the last naming for a key asked for, and when it is due:
    /// kept past the waits (under contention each acquisition is a wait
    /// of its own), so that a later naming moves it rather than adds one.
    /// The subscriber thread, awake anyway to read the messages, hands it
    /// to the renewal thread when it is due (see [`Watches::run_due`]):
    /// registering each naming's look there woke that thread once per
    /// hand-over under contention.
    pending: NamedLooks<OnHandOver>,
}

impl Watches {
    pub(super) fn new(backend: &Arc<Backend>) -> Watches {
        Watches {
            backend: Arc::downgrade(backend),
            keys: Mutex::new(Keys::default()),
        }
    }

    /// A waiter of `key` blocks on the server until the returned guard is
    /// dropped.
    pub(super) fn join<'a>(&'a self, key: &[u8], on: &OnHandOver) -> Watching<'a> {
        lock(&self.keys)
            .waiting
            .entry(key.to_vec())
            .or_insert_with(|| Watch {
                on: on.clone(),
                waiters: 0,
            })
            .waiters += 1;
        Watching {
            watches: self,
            key: key.to_vec(),
        }
    }

    /// A hand-over named this client a watcher of `key`: the look, if a
    /// waiter of ours blocks on `key`.
    pub(super) fn named(&self, key: &[u8]) {
        let mut keys = lock(&self.keys);
        let Some(on) = keys.waiting.get(key).map(|w| w.on.clone()) else {
            return;
        };
        let due = Instant::now() + on.after;
        keys.pending.named(key, on, due);
    }

    /// The subscriber starts listening (first, or again after a broken
    /// connection): a naming sent before then was not heard. A client's
    /// subscriber starts once its first wait's first attempt finds the
    /// name busy, and a hand-over made while that attempt's busy reply is
    /// on its way may name the client and be taken by a newcomer that
    /// dies (5.3 s for the write lock before this:
    /// `rwlock_waiting.rs::…_on_a_first_wait`). So every key a blocked
    /// waiter of ours waits on gets the look such a naming would have
    /// asked for: one look a key, at a subscriber's (re)start only.
    pub(super) fn listening(&self) {
        let now = Instant::now();
        let mut keys = lock(&self.keys);
        let Keys { waiting, pending } = &mut *keys;
        for (key, w) in waiting.iter() {
            pending.maybe_named(key, w.on.clone(), now + w.on.after);
        }
    }

    /// Hands the looks due by now to the renewal thread; when the next
    /// one is due, if any.
    pub(super) fn run_due(&self) -> Option<Instant> {
        let now = Instant::now();
        let (due, next) = lock(&self.keys).pending.take_due(now);
        if due.is_empty() {
            return next;
        }
        let Some(backend) = self.backend.upgrade() else {
            return next;
        };
        for on in due {
            // Nobody finishes it: its replies end it (NAME_LOOKS at most).
            drop(renewal::watch_for(
                &backend,
                on.look,
                now,
                crate::protocol::looks::NAME_LOOKS,
            ));
        }
        next
    }
}

/// A blocked waiter's registration (see [`Watches::join`]).
pub(super) struct Watching<'a> {
    watches: &'a Watches,
    key: Vec<u8>,
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        let mut keys = lock(&self.watches.keys);
        if let Some(w) = keys.waiting.get_mut(&self.key) {
            w.waiters -= 1;
            // A look already scheduled (in `pending`) still runs: it is the
            // one the hand-over asked of this client, whether or not our
            // waiter took that grant.
            if w.waiters == 0 {
                let gone = keys.waiting.remove(&self.key);
                drop(keys);
                crate::util::deferred::drop_later(gone.map(|w| w.on));
            }
        }
    }
}
