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

use crate::backend::PreparedCall;
use crate::error::{Error, Result};
use crate::lease::context::Context;
use crate::protocol::lease_state::LeaseState;
use crate::protocol::scripts::Parts;
use crate::protocol::signal::LostSignal;
use crate::protocol::timing::NAME_LOOK_AFTER;
use crate::renewal;
use crate::wakeup::Turns;
use reentrancy::{Held, HoldKey};

mod acquisition;
pub(crate) mod context;
pub(crate) mod reentrancy;

use acquisition::attempt;

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
/// `into` until its deadline (see [`ROOM_CHUNK`]). For a lock (`alone`)
/// the pop alone is the grant, claimed later by the hold's first renewal;
/// otherwise `grant` is pipelined behind, so the script runs as soon as the
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
    /// turn to any later waiter blocked (see `Wait::keeps_blocking`).
    pub(crate) ordered: bool,
}

/// A lock's waiter holds the lock from its pop alone (see
/// `Node::grant_blocking`), and proves it by the fence it popped until its
/// first renewal claims it (lua/queue.lua `held_by`): `holder` is the lock
/// key, looked at behind the pop, and the hold's fence goes in as its
/// release's argument `release_arg` and its extension's `extend_arg`
/// (where the spec has an empty placeholder).
pub(crate) struct PopAlone {
    pub(crate) holder: Vec<u8>,
    pub(crate) release_arg: usize,
    pub(crate) extend_arg: usize,
}

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
    // Whole milliseconds less one, as `valid_for` counts a lease.
    let first = grant
        .valid
        .min(first.saturating_sub(Duration::from_millis(1) + client.backend().drift(first)));
    if spec.watchdog && grant.at.elapsed() < first / 3 {
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

/// A guard's share of a hold: releases one level when told or dropped.
pub(crate) struct Holding {
    client: Context,
    slot: Option<HoldKey>,
    held: Arc<Held>,
    done: bool,
}

impl Holding {
    pub(crate) fn new(client: Context, slot: Option<HoldKey>, held: Arc<Held>) -> Holding {
        Holding {
            client,
            slot,
            held,
            done: false,
        }
    }

    pub(crate) fn held(&self) -> &Held {
        &self.held
    }

    /// Whether the lease is still believed held (no round trip).
    pub(crate) fn is_held(&self) -> bool {
        self.held.state.is_held()
    }

    pub(crate) fn lost_signal(&self) -> LostSignal {
        LostSignal::new(vec![self.held.state.clone()])
    }

    pub(crate) fn state(&self) -> &Arc<LeaseState> {
        &self.held.state
    }

    pub(crate) fn expires_in(&self) -> Duration {
        self.held.state.expires_in()
    }

    /// Makes the lease end `lease` from now (one round trip). A watchdog
    /// lease keeps being renewed, with `lease` from now on; a fixed lease
    /// simply ends then. `LockLost` if it was already lost.
    pub(crate) fn extend(&self, lease: Duration) -> Result<()> {
        let held = &self.held;
        extend(&self.client, held, lease).map_err(|e| e.about(held.what, &held.name))
    }

    /// Stops tracking the hold without releasing it: it stays in Redis
    /// (renewed while the client lives, if it has a watchdog) until
    /// released by token or its lease ends. For holds without re-entry.
    pub(crate) fn detach(mut self) -> Arc<Held> {
        self.done = true;
        self.held.state.quiet();
        self.held.clone()
    }

    /// Releases this level of the hold; the outermost level releases it in
    /// Redis. `LockLost` if the lease had been lost.
    pub(crate) fn release(&mut self) -> Result<()> {
        match self.release_locally() {
            Some(decided) => decided,
            None => {
                let released = release(&self.client, &self.held, false);
                self.released(released)
            }
        }
    }

    /// The part of a release decided here: `Some` when no call is needed
    /// (released before, an inner level, known lost), `None` when the hold
    /// must be released in Redis (its lease state is finished already).
    fn release_locally(&mut self) -> Option<Result<()>> {
        if std::mem::replace(&mut self.done, true) {
            return Some(Ok(()));
        }
        let held = &self.held;
        let outermost = match &self.slot {
            Some(slot) => reentrancy::leave(slot, &held.token),
            None => true,
        };
        if !outermost {
            if held.state.is_lost() {
                return Some(Err(Error::lost("the lease was lost while it was held")
                    .about(held.what, &held.name)));
            }
            return Some(Ok(())); // an inner level: the outer guard still holds it
        }
        // Known lost: say so at once, without waiting on the network (a
        // server that stopped answering is the usual reason). The key has
        // expired on the server, or was removed, or (a renewal that ran
        // but whose reply was lost) ends by itself within one lease.
        if held.state.is_lost() {
            held.state.finish();
            return Some(Err(Error::lost(
                "the lease was lost while it was held (expired unrenewed, taken over, force-unlocked or flushed)",
            )
            .about(held.what, &held.name)));
        }
        held.state.finish();
        None
    }

    /// Reports the outcome of the release in Redis.
    fn released(&self, released: Result<()>) -> Result<()> {
        let held = &self.held;
        let released = released.map_err(|e| e.about(held.what, &held.name));
        if released.is_ok() {
            crate::metrics::released(held.what, held.acquired.elapsed());
            if let Some(events) = self.client.events() {
                events.handle_released(&crate::events::ReleaseEvent {
                    name: &held.name,
                    kind: held.what,
                    held: held.acquired.elapsed(),
                });
            }
        }
        released
    }
}

/// Releases several holds on one server in one round trip (a multi-lock's
/// names): each as [`Holding::release`] decides, the calls pipelined.
/// A hold whose pipelined release did not decide (an error reply, the
/// batch's reply lost) is released on its own, as a repeat: finding
/// nothing then is `Ok`, since the pipelined release may have removed it.
/// Returns the first error, after releasing them all.
pub(crate) fn release_all(client: &Context, holdings: Vec<&mut Holding>) -> Result<()> {
    let mut first = Ok(());
    let mut keep = |r: Result<()>| {
        if let (Err(e), true) = (r, first.is_ok()) {
            first = Err(e);
        }
    };
    let mut remote: Vec<&mut Holding> = Vec::new();
    for h in holdings {
        match h.release_locally() {
            Some(decided) => keep(decided),
            None => remote.push(h),
        }
    }
    let backend = client.backend();
    // One server: one pipeline (one script run where the names' releases
    // go together); Cluster: one pipeline per master, all at once.
    let attempted =
        remote.len() > 1 && (backend.pipelines_grants() || backend.pipelines_grants_per_master());
    let replies = if attempted {
        let prepared: Vec<&PreparedCall> = remote.iter().map(|h| &h.held.release).collect();
        match PreparedCall::together(&prepared) {
            // One script run for all (a multi-lock's names on one server):
            // its array of codes, or its one error for each of them.
            Some(all) => backend
                .eval_batch(&[all.call()], backend.timeouts().response)
                .ok()
                .and_then(|mut r| r.pop())
                .map(|reply| match reply {
                    redis::Value::Array(codes) => codes,
                    other => vec![other; remote.len()],
                }),
            None => {
                let calls: Vec<_> = prepared.iter().map(|c| c.call()).collect();
                backend.eval_batch(&calls, backend.timeouts().response).ok()
            }
        }
    } else {
        None
    };
    let batched = replies.as_ref().is_some_and(|r| r.len() == remote.len());
    for (i, h) in remote.into_iter().enumerate() {
        let reply = replies.as_ref().filter(|_| batched).map(|r| &r[i]);
        let released = match reply {
            Some(redis::Value::Int(n @ (1 | 2))) => {
                if *n == 2 {
                    look_after_hand_over(client, &h.held);
                }
                client.wakeup().notify_local(&h.held.wake);
                Ok(())
            }
            Some(redis::Value::Int(0)) => Err(Error::lost(
                "the lease was lost before release (expired, flushed, force-unlocked or taken over)",
            )),
            // Its script was missing: it did not run.
            Some(redis::Value::ServerError(e)) if e.code() == "NOSCRIPT" => {
                release(client, &h.held, false)
            }
            // Undecided, or sent in a batch whose replies were lost.
            Some(_) => release(client, &h.held, true),
            // The batch may have run before its replies were lost.
            None => release(client, &h.held, attempted),
        };
        keep(h.released(released));
    }
    first
}

/// One extension of a hold (see [`Holding::extend`]).
fn extend(client: &Context, held: &Held, lease: Duration) -> Result<()> {
    let ms = lease_millis(lease)?;
    if !held.state.is_held() {
        return Err(Error::lost("the lease was already lost"));
    }
    let backend = client.backend();
    // The renewal from now on: the new lease, never shortening (so a
    // renewal sent before this call but run after it cannot undo it).
    let mut renew = PreparedCall::clone(&held.extend);
    renew.args.set_last(ms.to_string().as_bytes());
    // This call sets the lease exactly, shorter or longer.
    let mut exact = renew.clone();
    exact.args.push(b"exact");
    let renew = Arc::new(renew);
    let valid =
        Duration::from_millis(ms).saturating_sub(Duration::from_millis(1) + backend.drift(lease));
    let before = held.state.expires_at();
    let sent = Instant::now();
    match backend.confirm(&exact.call()) {
        Ok(1) => {
            held.state.extended(sent, valid, true);
            if let Some(look) = &held.look {
                // The lease may be shorter now: should the key go without a
                // release, a look at its new end opens it to the waiters.
                drop(renewal::watch_for(
                    backend,
                    look.clone(),
                    sent + valid,
                    crate::protocol::looks::NAME_LOOKS,
                ));
            } else if sent + valid < before {
                // Shorter: waiters that wait for messages (readers) look
                // seldom, at the end they saw; tell them to look now.
                let wakeup = client.wakeup();
                let told: Result<redis::Value> = backend.eval(
                    &crate::protocol::scripts::WAKE,
                    &[&held.wake],
                    &[&wakeup.channel(&held.wake), &wakeup.message(&held.wake)],
                );
                if let Err(e) = told {
                    log::debug!("redlease: could not tell waiters of a shortened lease: {e}");
                }
            }
            if held.watchdog {
                renewal::keep_alive(
                    backend,
                    &held.state,
                    sent + valid,
                    valid,
                    lease,
                    &renew,
                    None,
                );
            }
            if held.state.is_lost() {
                return Err(Error::lost("the lease ran out while it was being extended"));
            }
            Ok(())
        }
        Ok(0) => {
            held.state.mark_lost();
            Err(Error::lost(
                "the lease was lost before the extension (expired, flushed, force-unlocked or taken over)",
            ))
        }
        other => {
            // It may have run: the lease may now end `lease` from `sent`,
            // possibly sooner than before. Believe the sooner end, and renew
            // with the new lease counted from that sooner end (at once if it
            // is already due), so a lease that kept its old length does not
            // lapse waiting for the new period.
            held.state.extended(sent, valid, false);
            if held.watchdog {
                let ends = held.state.expires_at();
                renewal::keep_alive(backend, &held.state, ends, valid, lease, &renew, None);
            }
            Err(match other {
                Err(e) => e,
                _ => Error::new(
                    crate::error::ErrorKind::Connection,
                    "the extension's outcome is undecided; the lease may now end sooner",
                ),
            })
        }
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            log::warn!("redlease: releasing on drop: {e}");
        }
    }
}

/// After a release opened the name to its waiters: one look at the name
/// just after the claim window (see lua/lock_watch.lua), so that a grant
/// popped by a process frozen right after (or whose script never ran)
/// still reaches the next waiter. A lock's grant taken by a pop alone has
/// lapsed by then unless claimed, and the queue outlives it by another
/// claim window (lua/queue.lua hand_on); a grant its taker's script took
/// (a short first lease of twice the claim) is looked at again when it
/// would end.
fn look_after_hand_over(client: &Context, held: &Held) {
    if let Some(look) = &held.look {
        look_after_opening(client, look.clone());
    }
}

/// [`look_after_hand_over`] with the name's `look`: also after a
/// `force_unlock` that opened the name.
pub(crate) fn look_after_opening(client: &Context, look: Arc<PreparedCall>) {
    let state = renewal::watch_for(
        client.backend(),
        look,
        Instant::now() + NAME_LOOK_AFTER,
        crate::protocol::looks::NAME_LOOKS,
    );
    // Nobody finishes it: its replies end it (see lua/lock_watch.lua).
    drop(state);
}

/// The outermost release of a hold in Redis (`repeated`: a release of it
/// may have run already).
///
/// Tokens are unique per acquisition, so finding ours proves nobody else
/// held it in between, even if renewal had (conservatively) given the lease
/// up during an outage. A release whose connection broke is repeated;
/// finding nothing then is `Ok` when the lease was still valid when the
/// first release was sent, because that first release is what removed it.
fn release(client: &Context, held: &Held, repeated: bool) -> Result<()> {
    let backend = client.backend();
    let response = backend.timeouts().response;
    let valid_when_sent = !held.state.is_lost();
    let mut repeated = repeated;
    for _ in 0..3 {
        let at = Instant::now();
        match backend.confirm(&held.release.call()) {
            Ok(n @ (1 | 2)) => {
                if n == 2 {
                    look_after_hand_over(client, held);
                }
                client.wakeup().notify_local(&held.wake);
                return Ok(());
            }
            Ok(_) if repeated && valid_when_sent => {
                client.wakeup().notify_local(&held.wake);
                return Ok(());
            }
            Ok(_) => {
                return Err(Error::lost(
                    "the lease was lost before release (expired, flushed, force-unlocked or taken over)",
                ))
            }
            // Broke at once: it may have run; ask again. (Redlock: too few
            // masters answered to decide; asking again is as safe.)
            Err(e)
                if e.broke_at_once(at.elapsed(), response)
                    || e.kind() == crate::error::ErrorKind::QuorumNotReached =>
            {
                repeated = true
            }
            Err(e) => return Err(e),
        }
    }
    Err(Error::new(
        crate::error::ErrorKind::Connection,
        "the release's connection broke three times; the lease ends by itself",
    ))
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

/// Makes a guard `!Send` under a name that compile errors show ("within
/// `ThreadBound` ... within `LockGuard`"): a hold belongs to the thread
/// that took it, whose re-entry count lives in that thread.
#[derive(Default)]
pub(crate) struct ThreadBound(std::marker::PhantomData<*const ()>);

/// The lease controls every guard has, over its `inner: Holding`.
macro_rules! lease_controls {
    () => {
        /// A signal that fires once this hold ends (lost or released),
        /// checked without a round trip: hand it to the threads doing the
        /// guarded work. See [`LostSignal`](crate::LostSignal).
        pub fn lost_signal(&self) -> crate::LostSignal {
            self.inner.lost_signal()
        }

        /// How long the lease surely still runs, from the conservative local
        /// estimate (no round trip); zero once lost. With a watchdog this is
        /// at most the lease, renewed every third of it.
        pub fn expires_in(&self) -> std::time::Duration {
            self.inner.expires_in()
        }

        /// Makes the lease end `lease` from now (one round trip). With a
        /// watchdog, renewal continues with `lease` from now on; with a fixed
        /// lease, the hold simply ends then. Fails with `LockLost` if the
        /// lease was already lost. If the reply is lost, the lease is then
        /// believed to end at the sooner of the old end and `lease` from now.
        pub fn extend(&self, lease: std::time::Duration) -> crate::Result<()> {
            self.inner.extend(lease)
        }
    };
}
pub(crate) use lease_controls;
