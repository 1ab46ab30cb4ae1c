//! A guard's share of a hold (`Holding`): whether it is still held, its
//! extension, its release (repeated when a reply is lost), a multi-lock's
//! names released in one script run, and the controls every guard has.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::context::Context;
use super::reentrancy::{self, Held, HoldKey};
use super::{lease_millis, look_after_opening};
use crate::backend::{Call, PreparedCall};
use crate::error::{Error, Result};
use crate::protocol::lease_state::LeaseState;
use crate::protocol::signal::LostSignal;
use crate::renewal;

/// A guard's share of a hold: releases one level when told or dropped.
pub(crate) struct Holding {
    client: Context,
    slot: Option<HoldKey>,
    held: Arc<Held>,
    done: bool,
    /// Every guard is made over a `Holding`, so this makes them all `!Send`.
    _not_send: ThreadBound,
}

impl Holding {
    pub(crate) fn new(client: Context, slot: Option<HoldKey>, held: Arc<Held>) -> Holding {
        Holding {
            client,
            slot,
            held,
            done: false,
            _not_send: ThreadBound::default(),
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
                let until = Instant::now() + self.client.wakeup().outage_tolerance();
                let released = release(&self.client, &self.held, false, until);
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
    // Releases refused for now are asked again until one deadline for
    // them all (each its own lease's end at most).
    let until = Instant::now() + client.wakeup().outage_tolerance();
    // One server: one pipeline (one script run where the names' releases
    // go together); Cluster: one pipeline per master, all at once.
    let attempted =
        remote.len() > 1 && (backend.pipelines_grants() || backend.pipelines_grants_per_master());
    // Whether the batch, failed whole, surely did not run (then each is
    // released on its own as a first release, not a repeat).
    let mut unsent = false;
    let mut sent = |r: Result<Vec<redis::Value>>| r.map_err(|e| unsent = e.is_unsent()).ok();
    let replies = if attempted {
        let prepared: Vec<&PreparedCall> = remote.iter().map(|h| &h.held.release).collect();
        match PreparedCall::together(&prepared) {
            // One script run for all (a multi-lock's names on one server):
            // its array of codes, or its one error for each of them.
            Some(all) => sent(backend.eval_batch(&[all.call()], backend.timeouts().response))
                .and_then(|mut r| r.pop())
                .map(|reply| match reply {
                    redis::Value::Array(codes) => codes,
                    other => vec![other; remote.len()],
                }),
            None => {
                let calls: Vec<_> = prepared.iter().map(|c| c.call()).collect();
                sent(backend.eval_batch(&calls, backend.timeouts().response))
            }
        }
    } else {
        None
    };
    // Each name's look is counted from here, not from when its turn in
    // the loop below comes: the event handlers of the names before it run
    // first, and a look put off by a slow one found the queue lapsed (a
    // review: a handler sleeping 0.5 s left the next live waiter to its
    // own look, 4.8 s).
    let replied = Instant::now();
    let batched = replies.as_ref().is_some_and(|r| r.len() == remote.len());
    for (i, h) in remote.into_iter().enumerate() {
        let reply = replies.as_ref().filter(|_| batched).map(|r| &r[i]);
        let released = match reply {
            Some(redis::Value::Int(n @ (1 | 2))) => {
                if *n == 2 {
                    look_after_hand_over(client, &h.held, replied);
                }
                client.wakeup().notify_local(&h.held.wake);
                Ok(())
            }
            Some(redis::Value::Int(0)) => Err(Error::lost(
                "the lease was lost before release (expired, flushed, force-unlocked or taken over)",
            )),
            // Refused: its script was missing, or the server would not run
            // it for now (busy, loading, a slot in migration): it did not
            // run, and finding nothing later is no proof it was released
            // (a release of a name force-unlocked meanwhile said `Ok`).
            Some(redis::Value::ServerError(e)) if not_run(e.code()) => {
                release(client, &h.held, false, until)
            }
            // Undecided, or sent in a batch whose replies were lost.
            Some(_) => release(client, &h.held, true, until),
            // The batch may have run before its replies were lost.
            None => release(client, &h.held, attempted && !unsent, until),
        };
        keep(h.released(released));
    }
    first
}

/// Whether a server's error reply to a script says it did not run.
fn not_run(code: &str) -> bool {
    code == "NOSCRIPT" || crate::error::not_run_for_now(code)
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
                let told: Result<redis::Value> = backend.eval(&Call::borrowed(
                    &crate::protocol::scripts::WAKE,
                    &[&held.wake],
                    &[&*wakeup.channel(&held.wake), &wakeup.message(&held.wake)],
                ));
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
fn look_after_hand_over(client: &Context, held: &Held, replied: Instant) {
    if let Some(look) = &held.look {
        // Only a lock's and a write hold's grants draw a fence: one holder
        // at a time, so this client's later release of the name (a higher
        // fence) settles this one's hand-over (permits' offers run side by
        // side).
        let settles = (held.fence > 0).then_some((&*held.wake, held.fence));
        look_after_opening(client, look.clone(), &held.release.call(), settles, replied);
    }
}

/// The outermost release of a hold in Redis (`repeated`: a release of it
/// may have run already).
///
/// Tokens are unique per acquisition, so finding ours proves nobody else
/// held it in between, even if renewal had (conservatively) given the lease
/// up during an outage. A release whose connection broke is repeated;
/// finding nothing then is `Ok` when the lease was still valid when the
/// first release was sent, because that first release is what removed it.
///
/// A release the server refused for now (nothing ran: a Cluster slot whose
/// keys have moved but which is not handed over yet answers `TRYAGAIN`; a
/// cluster without quorum, a server loading) is asked again, with short
/// waits, while the lease would still run and until `until` (the client's
/// outage tolerance from the release's start, one for every name of a
/// multi-lock): past the lease's end the name is free anyway. It used to
/// fail at once, leaving the name held for the rest of the lease.
fn release(client: &Context, held: &Held, repeated: bool, until: Instant) -> Result<()> {
    let backend = client.backend();
    let response = backend.timeouts().response;
    let valid_when_sent = !held.state.is_lost();
    let refusals_until = held.state.expires_at().min(until);
    let mut pause = Duration::from_millis(10);
    let mut repeated = repeated;
    let mut broke = 0;
    while broke < 3 {
        let at = Instant::now();
        match backend.confirm(&held.release.call()) {
            Ok(n @ (1 | 2)) => {
                if n == 2 {
                    look_after_hand_over(client, held, Instant::now());
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
                repeated = true;
                broke += 1;
            }
            Err(e) if e.is_refused_for_now() && at + pause < refusals_until => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Err(e) => return Err(e),
        }
    }
    Err(Error::new(
        crate::error::ErrorKind::Connection,
        "the release's connection broke three times; the lease ends by itself",
    ))
}

/// Makes a guard `!Send` under a name that compile errors show ("within
/// `ThreadBound` ... within `LockGuard`"): a hold belongs to the thread
/// that took it, whose re-entry count lives in that thread.
#[derive(Default)]
pub(crate) struct ThreadBound(std::marker::PhantomData<*const ()>);

/// The controls every guard has, over its `inner: Holding` (the one guard
/// core; a guard adds only what is its own: a fencing token, a count, a
/// note). `$what` names what is held, for the docs.
macro_rules! guard_controls {
    ($what:literal) => {
        #[doc = concat!("Whether ", $what, " is still believed held, without a round trip: false")]
        /// once the renewal thread found the lease gone, or once its
        /// conservative local expiry passed without a renewal (a fixed
        /// lease's deadline, or a pause).
        pub fn is_held(&self) -> bool {
            self.inner.is_held()
        }

        #[doc = concat!("Releases ", $what, " (one level of a re-entered hold; in Redis at the outermost).")]
        /// Fails with `LockLost` if the lease had been lost.
        pub fn release(mut self) -> crate::Result<()> {
            self.inner.release()
        }

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

pub(crate) use guard_controls;
