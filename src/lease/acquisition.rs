//! One acquisition past re-entry: `attempt` checks re-entry, then drives
//! an [`Acquisition`] through the waiting loop (`Wakeup::acquire`), and
//! cleans up what its attempts left on the server when it gives up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{hold, taken_by_pop, valid_for, Grant, Reentry, Spec};
use crate::backend::{Answer, Blocked, BlockingGrant, Pop};
use crate::error::{Error, Result};
use crate::lease::context::Context;
use crate::lease::reentrancy::{self, Held, HoldKey};
use crate::protocol::blocking::{keeps_place, Place};
use crate::protocol::clean_up::{goes_on, undos, Failure, Left, Undo};
use crate::protocol::lease_state::LeaseState;
use crate::protocol::looks::{watch_on_busy, watches_hand_overs};
use crate::protocol::timing::{NAME_LOOK_AFTER, ROOM_CHUNK};
use crate::renewal;
use crate::wakeup::{blocks_now, Attempt};

pub(super) fn attempt(
    client: &Context,
    slot: Option<(&HoldKey, Reentry)>,
    deadline: Option<Instant>,
    make: &dyn Fn(&Arc<str>) -> Result<Spec>,
    about: &mut Option<(&'static str, Arc<[u8]>)>,
) -> Result<Option<Arc<Held>>> {
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
            let _ = client.backend().confirm(&stale.release.call());
        }
    }
    let place = Place::default();
    let mut acquisition = Acquisition::new(client, make, deadline, &place)?;
    *about = Some((acquisition.spec.what, acquisition.spec.name.clone()));
    let valid = valid_for(client, acquisition.spec.lease)?;
    let spec = &acquisition.spec;
    let wake = spec.wake.clone();
    let wait = crate::wakeup::Wait {
        key: &wake,
        turns: spec.turns,
        deadline,
        jump: spec.jump,
        looked: false,
        direct: match &spec.direct {
            Some(_) if client.backend().grants_directly() => Some(ROOM_CHUNK),
            _ => None,
        },
        place: acquisition.place,
        signalled: None,
        patient: spec.patient,
        // Looks at the name when a hand-over names its client
        // (`wakeup::watch`).
        watch: match (&spec.direct, &spec.look) {
            (direct, Some(look)) if watches_hand_overs(direct.is_some(), spec.patient) => {
                Some(crate::wakeup::OnHandOver {
                    look: look.clone(),
                    after: NAME_LOOK_AFTER,
                })
            }
            _ => None,
        },
    };
    let outcome = client
        .wakeup()
        .acquire(wait, |block| acquisition.step(block));
    acquisition.finish(outcome, valid, slot)
}

/// What a granting round trip returned: the fence, the instant before it
/// was sent (the lease started after it), and, for a grant taken from the
/// open list, its short first lease (see [`taken_by_pop`]).
type Granted = (i64, Instant, Option<Duration>);

/// One acquisition past re-entry, as a state machine the waiting loop
/// drives: each round trip is [`step`](Self::step) (send, then
/// [`on_busy`](Self::on_busy) or [`on_error`](Self::on_error)), and
/// [`finish`](Self::finish) turns the loop's outcome into a hold, or
/// cleans up what the attempts left on the server.
struct Acquisition<'a> {
    client: &'a Context,
    make: &'a dyn Fn(&Arc<str>) -> Result<Spec>,
    deadline: Option<Instant>,
    /// The current token and the spec built for it. A late reply retires
    /// both (see [`on_error`](Self::on_error)).
    token: Arc<str>,
    spec: Spec,
    /// The renewal thread's looks for this waiter while it is blocked (see
    /// `Direct::watch`), for the current token.
    watching: Option<Arc<LeaseState>>,
    /// A fair waiter's place among the blocked (see [`Place`]); `None`
    /// where the turn is not that place.
    place: Option<&'a Place>,
    /// What the attempts with the current token left for the clean-up.
    left: Left,
    /// Retired specs whose grants reached the server: their queue entries
    /// are withdrawn at the end.
    sent: Vec<Spec>,
}

impl<'a> Acquisition<'a> {
    fn new(
        client: &'a Context,
        make: &'a dyn Fn(&Arc<str>) -> Result<Spec>,
        deadline: Option<Instant>,
        place: &'a Place,
    ) -> Result<Acquisition<'a>> {
        let token = client.new_token();
        let spec = make(&token)?;
        let ordered = spec.direct.as_ref().is_some_and(|d| d.ordered);
        Ok(Acquisition {
            place: ordered.then_some(place),
            client,
            make,
            deadline,
            token,
            spec,
            watching: None,
            left: Left::default(),
            sent: Vec::new(),
        })
    }

    /// One round trip: blocking on the open list for `block` where the
    /// waiting loop says so, else one grant.
    fn step(&mut self, block: Option<Duration>) -> Result<Attempt<Granted>> {
        // A lease granted in this round trip started after this instant.
        let at = Instant::now();
        let sent = self.send(block);
        // A block cut short (an error, a broken connection, a slot moved
        // under it) takes a fair waiter's place among the blocked, and so
        // does a server that stopped granting directly (`blocks_now`).
        // It waits for messages from then on: the renewal thread's looks
        // for a blocked waiter end (its look would queue it again as one
        // that blocks, and a hand-over would then go onto the open list,
        // for a later waiter that blocks to pop). So do a waiter's whose
        // server refused the blocking pop (an ACL without it): its looks
        // kept queueing it as one that blocks, and each made an offer
        // that told every waiter to look (60-140 commands a second each
        // on a semaphore whose free permits fit nobody).
        if let (Some(place), Some(_)) = (self.place, block) {
            if !keeps_place(place.held(), sent.as_ref().map_or(true, |b| b.cut)) {
                place.lose();
            }
        }
        let refused = !self.client.backend().grants_directly();
        if self.place.is_some_and(|p| !p.held()) || refused {
            if let Some(w) = self.watching.take() {
                w.finish();
            }
        }
        match sent {
            Ok(Blocked {
                reply: Answer::Granted(fence),
                short,
                sent,
                ..
            }) => Ok(Attempt::Acquired(match (short, sent) {
                (Some((from, first)), _) => (fence, from.max(at), Some(first)),
                // Granted by a call of its own after the block (on Cluster,
                // a plain grant once the slot moved under the block): the
                // full lease from its sending. Counted from the block's
                // sending instead, it needed an extension, and one refused
                // in the slot's last moves lost the guard at once.
                (None, Some(sent)) => (fence, sent.max(at), None),
                // Granted by the script behind a pop that timed out: its
                // lease counts from before the block, maybe long ago, and
                // the guard was lost at once. One extension sets it from
                // now (see `taken_by_pop`).
                (None, None) if block.is_some() && at.elapsed() >= self.spec.lease / 3 => {
                    (fence, at, Some(self.spec.lease))
                }
                (None, None) => (fence, at, None),
            })),
            Ok(Blocked {
                reply: Answer::Busy(wait),
                ..
            }) => Ok(self.on_busy(at, wait)),
            Err(e) => Err(self.on_error(e)?),
        }
    }

    fn send(&self, block: Option<Duration>) -> Result<Blocked> {
        let backend = self.client.backend();
        let spec = &self.spec;
        let undo = spec.undo.as_deref().unwrap_or(&spec.release).call();
        match (block, &spec.direct) {
            (Some(block), Some(d)) => {
                // A grant may come with the pop: keep the renewal thread
                // awake for it (see `renewal::blocking`).
                let _blocked = renewal::blocking();
                let blocked = backend.grant_blocking(&BlockingGrant {
                    pop: Pop {
                        list: &d.list,
                        into: &d.into,
                        holder: d.alone.as_ref().map(|a| a.holder.as_slice()),
                        turns: d.alone.as_ref().and_then(|a| a.turns.as_deref()),
                    },
                    block,
                    call: spec.grant.call(),
                    undo,
                    deadline: self.deadline,
                })?;
                if blocked.popped {
                    self.client.wakeup().delivered_directly();
                }
                Ok(blocked)
            }
            (_, direct) => {
                // A waiter that no longer blocks (the server refused it, or
                // its deadline is near: see `worth_blocking`) says so in its
                // queue entry: its grant then comes with a message.
                let grant = match direct {
                    Some(d) if !self.blocks() => &d.by_message,
                    _ => &spec.grant,
                };
                let reply = backend.grant(&crate::backend::GrantCall {
                    call: grant.call(),
                    undo: &undo,
                    lease: spec.lease,
                    fence: spec.fence.as_deref(),
                    deadline: self.deadline,
                })?;
                Ok(Blocked {
                    reply,
                    popped: false,
                    short: None,
                    sent: None,
                    cut: false,
                    refused: false,
                })
            }
        }
    }

    /// Whether this waiter blocks on the server for its grant now, as the
    /// waiting loop decides it (`Wakeup::acquire`).
    fn blocks(&self) -> bool {
        blocks_now(self.client.backend(), self.place, self.deadline)
    }

    /// Busy for `wait` ms: the grant was decided, and a waiter that blocks
    /// on the server is looked after by the renewal thread from when the
    /// holder's lease would end.
    fn on_busy(&mut self, at: Instant, wait: i64) -> Attempt<Granted> {
        self.left.replied();
        let backend = self.client.backend();
        let look = self.spec.direct.as_ref().and_then(|d| d.watch.as_ref());
        // Asked on every busy reply, look or not: a fair waiter's place is
        // lost the moment its server stops granting directly (`blocks_now`).
        let blocks = self.blocks();
        if let Some(look) = look {
            let watching = self.watching.is_some();
            if let Some(first) = watch_on_busy(watching, blocks, at, Instant::now(), wait) {
                self.watching = Some(renewal::watch(backend, Arc::new(look.clone()), first));
            }
        }
        Attempt::busy_ms(wait)
    }

    /// Notes what a failed round trip may have left, and returns the error
    /// for the waiting loop to judge. A late reply retires the token: its
    /// undo is queued behind it, and could remove a new hold made with it.
    fn on_error(&mut self, e: Error) -> Result<Error> {
        let failure = Failure {
            ambiguous: e.is_ambiguous(),
            unsent: e.is_unsent(),
            undone: e.is_undone(),
        };
        if self.left.failed(failure) {
            let fresh = self.client.new_token();
            let next = (self.make)(&fresh)?;
            self.sent.push(std::mem::replace(&mut self.spec, next));
            self.token = fresh;
            if let Some(w) = self.watching.take() {
                w.finish();
            }
        }
        Ok(e)
    }

    /// The hold, if granted; otherwise the clean-up of what the attempts
    /// left, and the outcome with "maybe ran" where a grant may stand.
    fn finish(
        mut self,
        outcome: Result<Option<Granted>>,
        valid: Duration,
        slot: Option<&HoldKey>,
    ) -> Result<Option<Arc<Held>>> {
        if let Some(w) = self.watching.take() {
            w.finish();
        }
        let client = self.client;
        match outcome {
            Ok(Some((fence, at, first))) => {
                // Earlier tokens (replaced after a late reply) may have left
                // queue entries.
                clean_up(client, &self.sent, false, false);
                let grant = Grant {
                    token: self.token,
                    fence,
                    at,
                    valid,
                };
                // Its release and extension name its fence (a pop alone
                // took it, or may have): the claim below relies on it.
                let spec = self.spec.fenced(fence);
                Ok(Some(match first {
                    Some(first) => taken_by_pop(client, spec, grant, first, slot),
                    None => hold(client, spec, grant, slot),
                }))
            }
            other => {
                if self.left.reached {
                    self.sent.push(self.spec);
                }
                clean_up(client, &self.sent, self.left.ambiguous, self.left.late);
                // An attempt may have granted: the caller must not read "not
                // sent" in the last repeat's error (it is released, token-
                // checked, if the server could be reached, else it ends with
                // its lease).
                let ambiguous = self.left.ambiguous;
                other
                    .map(|_| None)
                    .map_err(|e| if ambiguous { e.maybe_ran() } else { e })
            }
        }
    }
}

/// After giving up (or after a grant made with a later token): makes the
/// clean-up calls `protocol::clean_up` decides (a hold the last attempt may
/// have made, the queue entries and intents of every token that reached
/// the server), until one cannot reach the server, and wakes this client's
/// other waiters.
fn clean_up(client: &Context, sent: &[Spec], ambiguous: bool, late: bool) {
    let Some(last) = sent.last() else {
        return;
    };
    let backend = client.backend();
    let leaves = |n: usize| sent.get(n).is_some_and(|s| s.leave.is_some());
    for undo in undos(sent.len(), leaves, ambiguous, late) {
        let failed = match undo {
            Undo::ReleaseLast => backend.confirm(&last.release.call()).err(),
            Undo::Leave(n) => match sent.get(n).and_then(|s| s.leave.as_ref()) {
                Some(leave) => backend.eval::<redis::Value>(&leave.call()).err(),
                None => None,
            },
        };
        if !goes_on(failed.map(|e| e.kind())) {
            break;
        }
    }
    client.wakeup().notify_local(&last.wake);
}
