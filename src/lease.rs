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

use crate::backend::Script;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::reentrancy::{self, Held, HoldKey};
use crate::renewal;
use crate::wakeup::{Attempt, Turns};

/// What a primitive supplies for one acquisition, built for one token.
pub(crate) struct Spec {
    /// The key this name's waiters wait on (and its release messages name).
    pub(crate) wake: Arc<[u8]>,
    pub(crate) turns: Turns,
    /// Try at once even if this client has waiters queued for `wake`.
    pub(crate) jump: bool,
    pub(crate) lease: Duration,
    /// Renewed by the watchdog (or a fixed lease).
    pub(crate) watchdog: bool,
    /// `{1, fence}` granted / `{0, wait_ms}` busy; re-grants to the same token.
    pub(crate) grant: Script,
    /// The fencing counter `grant` draws from (Redlock agrees on it).
    pub(crate) fence: Option<Vec<u8>>,
    /// Token-checked release: `1` released (and published), `0` not ours.
    pub(crate) release: Script,
    /// Token-checked extension; its last argument is the lease in ms.
    pub(crate) extend: Script,
    /// Withdraws what a waiting attempt leaves besides a hold (a fair-queue
    /// entry, a writer's intent), after giving up.
    pub(crate) leave: Option<Script>,
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
    pub(crate) fn of(handle: Option<bool>, client: &Client) -> Reentry {
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
    client: &Client,
    slot: Option<(&HoldKey, Reentry)>,
    deadline: Option<Instant>,
    make: impl Fn(&Arc<str>) -> Result<Spec>,
) -> Result<Option<Arc<Held>>> {
    let backend = client.backend();
    let (slot, reentry) = match slot {
        Some((s, r)) => (Some(s), r),
        None => (None, Reentry::Allow),
    };
    if let Some(slot) = slot {
        if reentry == Reentry::Refuse && reentrancy::depth(slot) > 0 {
            return Err(Error::new(
                crate::error::ErrorKind::WouldDeadlock,
                "this thread already holds this name and the handle is not reentrant \
                 (in a work-stealing pool another task may be running on this thread)",
            ));
        }
        if let Some(held) = reentrancy::reenter(slot) {
            return Ok(Some(held));
        }
        // A hold of ours known lost may still sit in Redis, unrenewed
        // (renewal gave up during an outage): remove it, token-checked, or
        // this thread would wait for its own key.
        if let Some(stale) = reentrancy::peek(slot) {
            let _ = backend.confirm(&stale.release.call());
        }
    }
    let mut token = client.new_token();
    let mut spec = make(&token)?;
    let lease_ms = lease_millis(spec.lease)?;
    let wakeup = client.wakeup();
    // The server stores `floor(now_ms) + lease_ms`: the lease may end up to
    // 1 ms before `sent + lease_ms`; on Redlock, masters' clocks drift.
    let valid = Duration::from_millis(lease_ms)
        .saturating_sub(Duration::from_millis(1) + backend.drift(spec.lease));
    let wake = spec.wake.clone();
    let (turns, jump) = (spec.turns, spec.jump);

    // What the attempts left behind, for the clean-up if we give up.
    let mut ambiguous = false; // the last attempt may have granted, undecided
    let mut late = false; // the last attempt's reply was late (server stalled)
    let mut sent: Vec<Spec> = Vec::new(); // specs whose grant reached the server
    let mut reached = false; // the current spec's grant reached the server

    let acquired = wakeup.acquire(&wake, turns, deadline, jump, || {
        let at = Instant::now();
        let reply = backend.grant(
            &spec.grant.call(),
            &spec.release.call(),
            spec.lease,
            spec.fence.as_deref(),
            deadline,
        );
        match reply {
            Ok((1, fence)) => Ok(Attempt::Acquired((fence, at))),
            Ok((_, wait)) => {
                (ambiguous, late, reached) = (false, false, true);
                Ok(Attempt::busy_ms(wait))
            }
            Err(e) => {
                ambiguous = e.is_ambiguous();
                late = e.is_undone();
                reached |= !e.is_unsent();
                if e.is_undone() {
                    // Its undo is queued behind it: never grant this token
                    // again, or the undo could remove the new hold.
                    let fresh = client.new_token();
                    let next = make(&fresh)?;
                    sent.push(std::mem::replace(&mut spec, next));
                    token = fresh;
                    (ambiguous, reached) = (false, false);
                }
                Err(e)
            }
        }
    });
    match acquired {
        Ok(Some((fence, at))) => {
            // Earlier tokens (replaced after a late reply) may have left
            // queue entries or intents.
            clean_up(client, &sent, false, false);
            let state = renewal::start(
                backend,
                spec.watchdog,
                at + valid,
                valid,
                spec.lease,
                spec.extend.lua,
                spec.extend.keys,
                spec.extend.args,
            );
            let held = Arc::new(Held {
                token,
                fence: fence.max(0) as u64,
                state,
                release: spec.release,
                wake,
            });
            if let Some(slot) = slot {
                reentrancy::enter(slot.clone(), held.clone());
            }
            Ok(Some(held))
        }
        other => {
            if reached {
                sent.push(spec);
            }
            clean_up(client, &sent, ambiguous, late);
            other.map(|_| None)
        }
    }
}

/// After giving up (or after a grant made with a later token): withdraws
/// queue entries and intents of every token that reached the server,
/// releases a hold the last attempt may have made (`ambiguous`), and wakes
/// this client's other waiters. Skipped when the server is stalled
/// (`late`): each call would wait another response timeout, the undo of
/// the late grant is already queued behind it, and queue entries and
/// intents lapse by themselves.
fn clean_up(client: &Client, sent: &[Spec], ambiguous: bool, late: bool) {
    if sent.is_empty() || late {
        return;
    }
    let backend = client.backend();
    if let (true, Some(last)) = (ambiguous, sent.last()) {
        let _ = backend.confirm(&last.release.call());
    }
    for spec in sent {
        if let Some(leave) = &spec.leave {
            let c = leave.call();
            let keys: Vec<&[u8]> = c.keys.iter().map(|k| k.as_slice()).collect();
            let args: Vec<&[u8]> = c.args.iter().map(|a| a.as_slice()).collect();
            let _: Result<redis::Value> = backend.eval(c.lua, &keys, &args);
        }
    }
    if let Some(spec) = sent.last() {
        client.wakeup().notify_local(&spec.wake);
    }
}

/// A guard's share of a hold: releases one level when told or dropped.
pub(crate) struct Holding {
    client: Client,
    slot: Option<HoldKey>,
    held: Arc<Held>,
    done: bool,
}

impl Holding {
    pub(crate) fn new(client: Client, slot: Option<HoldKey>, held: Arc<Held>) -> Holding {
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

    /// Releases this level of the hold; the outermost level releases it in
    /// Redis. `LockLost` if the lease had been lost.
    pub(crate) fn release(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(());
        }
        let outermost = match &self.slot {
            Some(slot) => reentrancy::leave(slot, &self.held.token),
            None => true,
        };
        if !outermost {
            if self.held.state.is_lost() {
                return Err(Error::lost("the lease was lost while it was held"));
            }
            return Ok(()); // an inner level: the outer guard still holds it
        }
        self.held.state.finish();
        release(&self.client, &self.held)
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            log::warn!(
                "redlease: releasing {:?} on drop: {e}",
                String::from_utf8_lossy(&self.held.wake)
            );
        }
    }
}

/// The outermost release of a hold in Redis.
///
/// Tokens are unique per acquisition, so finding ours proves nobody else
/// held it in between, even if renewal had (conservatively) given the lease
/// up during an outage. A release whose connection broke is repeated;
/// finding nothing then is `Ok` when the lease was still valid when the
/// first release was sent, because that first release is what removed it.
fn release(client: &Client, held: &Held) -> Result<()> {
    let backend = client.backend();
    let response = backend.timeouts().response;
    let valid_when_sent = !held.state.is_lost();
    let mut repeated = false;
    for _ in 0..3 {
        let at = Instant::now();
        match backend.confirm(&held.release.call()) {
            Ok(1) => {
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
                if (e.is_ambiguous() && at.elapsed() < response / 2)
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
