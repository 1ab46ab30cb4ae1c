//! The lease lifecycle every primitive plugs into: attempt, classify the
//! outcome, retry or clean up, register renewal, track re-entry, release.
//!
//! A primitive is its scripts' keys and arguments (a [`Spec`]) plus its
//! guard type; everything that decides what happens when a call's outcome
//! is uncertain lives here, once:
//!
//! - **not sent** (no connection): nothing ran, nothing to undo;
//! - **maybe executed**, connection broke at once: the grant is repeated
//!   with the same token, which every granting script answers by
//!   re-granting the same hold (counted once, same fence);
//! - **maybe executed**, reply late: the token-checked undo was written
//!   right behind the grant on the same connection (the server runs it
//!   after the grant, however late), and the next attempt uses a fresh
//!   token so that undo can never remove it;
//! - giving up after something was sent: queue entries and intents are
//!   withdrawn and this client's other waiters are woken.
//!
//! A release that loses its reply is repeated; finding nothing then is
//! `Ok` when the lease was still valid when the first release was sent
//! (the first one removed it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{Call, PreparedCall};
use crate::error::Result;
use crate::lease::context::Context;
use crate::protocol::lease_state::LeaseState;
use crate::protocol::popped::{popped_hold, PoppedHold};
use crate::protocol::scripts::Parts;
use crate::protocol::timing::look_after;
use crate::renewal;
use reentrancy::{Held, HoldKey};

mod acquisition;
pub(crate) mod context;
mod holding;
pub(crate) mod reentrancy;
mod spec;

use acquisition::attempt;
pub(crate) use holding::{guard_controls, release_all, Holding};
pub(crate) use spec::{Direct, PopAlone, Spec};

/// Checks a lease and returns it in whole milliseconds (at least 1).
pub(crate) fn lease_millis(lease: Duration) -> Result<u64> {
    renewal::lease_millis(lease)
}

/// How a thread that already holds a slot is treated when it asks again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reentry {
    /// Re-enter: same hold, no round trip.
    Allow,
    /// Refuse with `WouldDeadlock`, at once (work-stealing pools).
    Refuse,
}

impl Reentry {
    /// A handle's choice (`Some(false)`: `non_reentrant()`), else the client's.
    pub(crate) fn of(handle: Option<bool>, client: &Context) -> Reentry {
        if handle.unwrap_or(client.reentrant()) {
            Reentry::Allow
        } else {
            Reentry::Refuse
        }
    }
}

/// Acquires one hold: re-enters this thread's hold of `slot` if it has one
/// (or refuses, see [`Reentry`]), otherwise runs `spec`'s grant through the
/// waiting loop until granted, `deadline` passes (`Ok(None)`) or an error
/// ends it. `make` builds the spec for a token; it is called again if the
/// token has to change.
pub(crate) fn acquire(
    client: &Context,
    slot: Option<(&HoldKey, Reentry)>,
    deadline: Option<Instant>,
    make: impl Fn(&Arc<str>) -> Result<Spec>,
) -> Result<Option<Arc<Held>>> {
    let started = Instant::now();
    let mut about: Option<(&'static str, Arc<[u8]>)> = None;
    let outcome = attempt(client, slot, deadline, &make, &mut about);
    match (&outcome, &about) {
        // `about` is set once past re-entry: a re-entry is not an event.
        (Ok(Some(held)), Some(_)) => {
            crate::metrics::acquired(held.what, started.elapsed());
            if let Some(events) = client.events() {
                events.handle_acquired(&held.acquire_event(started.elapsed()));
            }
        }
        (Err(_), Some((what, name))) => {
            return outcome.map_err(|e| e.about(what, name));
        }
        _ => {}
    }
    outcome
}

/// What the server granted one acquisition.
pub(crate) struct Grant {
    pub(crate) token: Arc<str>,
    pub(crate) fence: i64,
    /// The lease was granted no earlier than this (the granting call was
    /// sent then)...
    pub(crate) at: Instant,
    /// ...and surely runs this long from then (see [`valid_for`]).
    pub(crate) valid: Duration,
}

/// The hold `grant` makes of `spec`: its lease state, its renewal, and
/// this thread's entry for a reentrant `slot`.
pub(crate) fn hold(
    client: &Context,
    spec: Spec,
    grant: Grant,
    slot: Option<&HoldKey>,
) -> Arc<Held> {
    hold_with(client, spec, grant, None, slot)
}

/// A grant taken by a pop from the open list (`spec` already
/// [`fenced`](Spec::fenced): the claim below names the fence). Its first lease is short
/// (`first`: [`POPPED_LEASE`] where the waiter's script took it, the
/// grant's own time left where the pop alone did; either way a process
/// frozen while blocked holds the name no longer), and it started at some
/// instant between `grant.at` (when the blocking call was sent, maybe a
/// minute ago) and now. A reply that came soon leaves most of it: the
/// renewal thread sets the full lease a third of the way through it, like
/// any renewal (claiming a lock the pop alone took), and off the handoff's
/// path (see `renewal::WHILE_BLOCKED`). After a long block (or with a fixed
/// lease, which nothing renews) one extension now, counted from its own
/// sending, sets the full lease before the guard is handed out; should it
/// fail, the short lease is all that is known (the guard may be lost at
/// once, never wrongly held).
fn taken_by_pop(
    client: &Context,
    spec: Spec,
    grant: Grant,
    first: Duration,
    slot: Option<&HoldKey>,
) -> Arc<Held> {
    let PoppedHold { first, claim_now } = popped_hold(
        grant.valid,
        first,
        client.backend().drift(first),
        grant.at.elapsed(),
        spec.watchdog,
    );
    if !claim_now {
        return hold_with(client, spec, grant, Some(first), slot);
    }
    let sent = Instant::now();
    match client.backend().confirm(&spec.extend.call()) {
        Ok(1) => hold(client, spec, Grant { at: sent, ..grant }, slot),
        _ => hold_with(client, spec, grant, Some(first), slot),
    }
}

/// [`hold`]; with `first`, the lease surely runs only that long from
/// `grant.at` until the renewal thread renews it, a third of the way
/// through.
fn hold_with(
    client: &Context,
    spec: Spec,
    grant: Grant,
    first: Option<Duration>,
    slot: Option<&HoldKey>,
) -> Arc<Held> {
    let Grant {
        token,
        fence,
        at,
        valid,
    } = grant;
    let hook = client
        .events()
        .map(|h| (h.clone(), spec.name.clone(), spec.what));
    let known = at + first.unwrap_or(valid);
    let state = LeaseState::new(known, hook);
    let Spec {
        what,
        name,
        wake,
        lease,
        watchdog,
        release,
        extend,
        look,
        grant,
        fence: counter,
        leave,
        undo,
        direct,
        ..
    } = spec;
    // What only the acquisition needed is freed off the critical path.
    crate::util::deferred::drop_later((grant, counter, leave, undo, direct));
    let extend = Arc::new(extend);
    if watchdog {
        // A short first lease is renewed a third of the way through it.
        let due = first.map(|first| at + first / 3);
        renewal::keep_alive(client.backend(), &state, known, valid, lease, &extend, due);
    }
    let held = Arc::new(Held {
        token,
        fence: fence.max(0) as u64,
        state,
        release,
        look,
        extend,
        watchdog,
        wake,
        what,
        name,
        acquired: at,
    });
    if let Some(slot) = slot {
        reentrancy::enter(slot.clone(), held.clone());
    }
    held
}

/// How long after it was sent a grant of `lease` surely still runs: whole
/// milliseconds less one (the server floors its clock to the millisecond
/// when it stores `floor(now_ms) + lease_ms`), less the drift allowed
/// between Redlock masters.
pub(crate) fn valid_for(client: &Context, lease: Duration) -> Result<Duration> {
    let ms = lease_millis(lease)?;
    Ok(Duration::from_millis(ms)
        .saturating_sub(Duration::from_millis(1) + client.backend().drift(lease)))
}

/// [`look_after_hand_over`] with the name's `look`: also after a
/// `force_unlock` that opened the name. Just after the claim window the
/// release gave its hand-over (`release`, see
/// [`Backend::hand_over_claim`](crate::backend::Backend::hand_over_claim)).
/// `settles`: the key and fence of a hold of the name one holder at a
/// time (a lock's, a write hold's), whose look a later such release of the
/// key by this client (a higher fence) ends
/// (`protocol::watch::OpeningLooks`): it held the name in between.
/// `replied`: when the release's reply was read, which the look is counted
/// from.
pub(crate) fn look_after_opening(
    client: &Context,
    look: Arc<PreparedCall>,
    release: &Call<'_>,
    settles: Option<(&[u8], u64)>,
    replied: Instant,
) {
    let backend = client.backend();
    let claim = backend.hand_over_claim(release);
    let state = renewal::watch_for(
        backend,
        look,
        replied + look_after(claim),
        crate::protocol::looks::NAME_LOOKS,
    );
    // Nobody finishes it but a later opening: its replies end it (see
    // lua/lock_watch.lua).
    let Some((key, fence)) = settles else {
        return;
    };
    let settled = match client.inner.opening_looks.lock() {
        Ok(mut looks) => looks.opened(key, fence, Arc::downgrade(&state), |l| l.strong_count() > 0),
        // A thread that panicked while holding it: keep every look.
        Err(_) => None,
    };
    if let Some(earlier) = settled.and_then(|l| l.upgrade()) {
        earlier.finish();
    }
}

/// Removes `keys` (a primitive's holds), whoever holds them, and wakes the
/// waiters of `wake`, here and in other clients: `true` if anything was
/// removed. Holders learn it at their next renewal.
pub(crate) fn force_remove(client: &Context, keys: &[Vec<u8>], wake: &[u8]) -> Result<bool> {
    let wakeup = client.wakeup();
    let removed = client.backend().confirm(&crate::backend::Call {
        lua: &crate::protocol::scripts::FORCE_UNLOCK,
        keys: Parts::Owned(keys),
        args: Parts::Owned(&[wakeup.channel(wake).to_vec(), wakeup.message(wake)]),
    })?;
    wakeup.notify_local(wake);
    Ok(removed == 1)
}
