//! The reentrant exclusive lock and its guard.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{Joined, JoinedArgs, PreparedCall};
use crate::error::{Error, Result};
use crate::handles::core::{claiming_extend, settings, waits, Ask, Core};
use crate::lease::context::Context;
use crate::lease::reentrancy::{self, HoldKey, Mode};
use crate::lease::{self, guard_controls, Direct, Holding, PopAlone, Spec};
use crate::protocol::keys as schema;
use crate::protocol::scripts::lock::{
    AcquireArgs, Announce, ReleaseArgs, Waits, WatchArgs, ACQUIRE_KEYS, ACQUIRE_LEASE,
    ACQUIRE_PREFIX, ACQUIRE_TOKEN, EXTEND_FENCE, RELEASE_FENCE,
};
use crate::protocol::scripts::{
    Parts, LOCK_ACQUIRE, LOCK_ACQUIRE_ALL, LOCK_NOTE, LOCK_RELEASE, LOCK_WATCH,
};
use crate::wakeup::Turns;

struct Keys {
    lock: Arc<[u8]>,
    fence: Vec<u8>,
    /// The holder's note (`LockGuard::annotate`).
    note: Vec<u8>,
    /// Prefix of a waiter's grant list (the waiter's token follows).
    grant_prefix: Vec<u8>,
    /// The keys of lua/lock_acquire.lua, lua/lock_release.lua and
    /// lua/lock_watch.lua (the lock, its fencing counter, its waiter queue
    /// and the queue's deadlines: lua/queue.lua, its fence floor), made
    /// once: every call of an acquisition shares them (see
    /// `PreparedCall::keys`).
    scripted: Arc<[Vec<u8>]>,
    /// lua/lock_extend.lua's keys: the lock alone, or (a hold a pop may
    /// have taken, claimed at its first extension) with the queue and its
    /// deadlines; made once, as `scripted`.
    extended: Arc<[Vec<u8>]>,
    extended_claiming: Arc<[Vec<u8>]>,
}

/// One call that grants a multi-lock's names on one server, all or
/// nothing (lua/lock_acquire_all.lua), from their grants as tries for one
/// token (`Lock::try_spec`): one script run instead of one per name.
/// `None` when the grants do not share the token and the fence floor.
pub(crate) fn grant_all<'a>(grants: &[&'a PreparedCall]) -> Option<Joined<'a>> {
    let first = grants.first()?;
    let token = first.args.get(ACQUIRE_TOKEN)?;
    let floor = first.keys.get(ACQUIRE_KEYS)?;
    let mut keys: Vec<&[u8]> = Vec::with_capacity(grants.len() * ACQUIRE_KEYS + 1);
    let mut args: Vec<&[u8]> = Vec::with_capacity(grants.len() * 2 + 1);
    args.push(token);
    for g in grants {
        if g.keys.len() != ACQUIRE_KEYS + 1
            || g.keys.get(ACQUIRE_KEYS) != Some(floor)
            || g.args.get(ACQUIRE_TOKEN) != Some(token)
        {
            return None;
        }
        keys.extend(g.keys[..ACQUIRE_KEYS].iter().map(Vec::as_slice));
        args.push(g.args.get(ACQUIRE_LEASE)?);
        args.push(g.args.get(ACQUIRE_PREFIX)?);
    }
    keys.push(floor);
    Some(Joined {
        lua: &LOCK_ACQUIRE_ALL,
        keys,
        args: JoinedArgs::Picked(args),
    })
}

/// A named, reentrant, distributed mutual-exclusion lock.
///
/// Made by [`Client::lock`](crate::Client::lock). Cheap to clone and `Send + Sync`: share it, or
/// make a new one from the name whenever convenient; all handles with the
/// same client and name are the same lock.
///
/// The owner is the pair (client, thread): a thread that holds the lock
/// re-enters it without a round trip and gets the same fencing token; another
/// thread, or another client, waits.
#[derive(Clone)]
pub struct Lock {
    core: Core<Keys>,
    fair: bool,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Lock");
        self.core.debug(&mut d, |k| &k.lock);
        d.field("fair", &self.fair).finish()
    }
}

impl Lock {
    pub(crate) fn new(client: Context, name: &[u8], fair: bool) -> Lock {
        let core = Core::new(client, name, |client, n| {
            let (lock, fence, queue, queue_deadlines) = (
                n.key(schema::LOCK),
                n.key(schema::FENCE),
                n.key(schema::QUEUE),
                n.key(schema::QUEUE_DEADLINES),
            );
            let floor = client.backend().fence_floor(&fence);
            Keys {
                scripted: Arc::from([
                    lock.clone(),
                    fence.clone(),
                    queue.clone(),
                    queue_deadlines.clone(),
                    // The fence floor of the counter's server or slot
                    // (lua/fence.lua).
                    floor,
                ]),
                extended: Arc::from([lock.clone()]),
                extended_claiming: Arc::from([lock.clone(), queue, queue_deadlines]),
                lock: lock.into(),
                fence,
                note: n.key(schema::NOTE),
                grant_prefix: n.key(schema::GRANT),
            }
        });
        Lock { core, fair }
    }

    settings!(Lock, "holds", "the lock and asks again");

    fn hold_key(&self, keys: &Keys) -> HoldKey {
        HoldKey {
            client: self.core.client.id_u128(),
            mode: Mode::Exclusive,
            key: keys.lock.clone(),
        }
    }

    waits!("the lock" -> LockGuard, acquire_until() => acquire, try_acquire, acquire_timeout);

    /// What a multi-lock needs to try this name in a pipeline with its
    /// other names (one round trip for all): the grant of `token` that
    /// never queues, the lease, and the thread's slot; `None` when this
    /// thread holds the name already (re-entry goes the usual way).
    pub(crate) fn try_spec(&self, token: &str) -> Result<Option<(Spec, HoldKey)>> {
        let keys = self.core.keys()?;
        let slot = self.hold_key(keys);
        if reentrancy::depth(&slot) > 0 {
            return Ok(None);
        }
        let ask = Ask {
            waits: false,
            ..self.core.ask(None)?
        };
        Ok(Some((self.spec(keys, token, &ask), slot)))
    }

    /// The guard of a hold this lock's name got outside `acquire_until`.
    pub(crate) fn guard(&self, slot: HoldKey, held: Arc<reentrancy::Held>) -> LockGuard {
        LockGuard {
            lock: self.clone(),
            inner: Holding::new(self.core.client.clone(), Some(slot), held),
        }
    }

    pub(crate) fn client(&self) -> &Context {
        &self.core.client
    }

    /// What multi-locks order names by: the key (an invalid name sorts
    /// first and reports its error when acquired).
    pub(crate) fn sort_key(&self) -> Vec<u8> {
        match self.core.keys_or_invalid() {
            Ok(k) => k.lock.to_vec(),
            Err(e) => e.as_bytes().to_vec(),
        }
    }

    pub(crate) fn acquire_until(&self, deadline: Option<Instant>) -> Result<Option<LockGuard>> {
        let keys = self.core.keys()?;
        let ask = self.core.ask(deadline)?;
        if self.fair && self.core.client.backend().is_redlock() {
            return Err(Error::new(
                crate::ErrorKind::Unsupported,
                "the fair lock needs a single leader; on Redlock use the plain lock",
            ));
        }
        let slot = self.hold_key(keys);
        let held = self.core.acquire(Some(&slot), deadline, |token| {
            Ok(self.spec(keys, token, &ask))
        })?;
        Ok(held.map(|held| self.guard(slot, held)))
    }

    /// The scripts of one acquisition by `token`. Plain and fair locks
    /// share them: waiters queue in Redis and a release hands the lock to
    /// the oldest live one. They differ in who queues: every waiting
    /// thread of a fair lock, only the first waiting thread per client of a
    /// plain one (the others wait behind it locally, which is cheaper).
    fn spec(&self, keys: &Keys, token: &str, ask: &Ask) -> Spec {
        let (lease, lease_arg, waits) = (ask.lease, ask.lease_ms.as_str(), ask.waits);
        let backend = self.core.client.backend();
        let t = token.as_bytes().to_vec();
        let ms = lease_arg.as_bytes().to_vec();
        // On Redlock each master would keep its own queue, and their heads
        // could differ: waiters there do not queue, and retry on messages.
        let queues = waits && !backend.is_redlock();
        let blocks = queues && backend.grants_directly();
        let queue_ttl = self.core.queue_entry(queues, blocks);
        let announce = self.announce(keys);
        let release = |leave: bool| {
            let args = ReleaseArgs {
                token: &t,
                announce: &announce,
                grant_prefix: &keys.grant_prefix,
                claim: crate::protocol::timing::GRANT_CLAIM,
                force: false,
                keep: backend.is_redlock(),
                leave,
            };
            PreparedCall::new(&LOCK_RELEASE, keys.scripted.clone(), args.argv())
        };
        let leave = queues.then(|| Arc::new(release(true)));
        // A fair lock's waiter takes a grant only in its turn, and keeps
        // it while it waits for messages.
        let (blocking, by_message) = if self.fair {
            (Waits::FairBlocking, Waits::FairMessages)
        } else {
            (Waits::Blocking, Waits::Messages)
        };
        let grant = |queue_ttl: Duration, waits: Waits| {
            let args = AcquireArgs {
                token: &t,
                lease_ms: &ms,
                queue_ttl,
                grant_prefix: &keys.grant_prefix,
                claim: crate::protocol::timing::GRANT_CLAIM,
                announce: &announce,
                waits,
                hand_over: crate::protocol::timing::GRANT_CLAIM,
            };
            PreparedCall::new(&LOCK_ACQUIRE, keys.scripted.clone(), args.argv())
        };
        // The renewal thread's look at the lock (lua/lock_watch.lua): for
        // this waiter while it is blocked, and (no token) for the name once
        // a hold of it is released to waiters or shortened, however it was
        // taken. Where waiters block at all.
        let look = |waiter: &[u8]| self.look(keys, &announce, waiter);
        let name_look = (!backend.is_redlock() && backend.grants_directly())
            .then(|| self.core.name_look(|| look(b"")));
        // Waiters block on the name's open list, moving what they pop into
        // their own (lua/queue.lua hand_on).
        let direct = blocks.then(|| Direct {
            list: schema::open_list(&keys.grant_prefix),
            into: [keys.grant_prefix.as_slice(), &t].concat(),
            // The pop alone takes the lock: the hold's first renewal
            // claims it (the extend below).
            alone: Some(PopAlone {
                holder: keys.lock.to_vec(),
                turns: self.fair.then(|| schema::turns(&keys.grant_prefix)),
                release_arg: RELEASE_FENCE,
                extend_arg: EXTEND_FENCE,
            }),
            watch: Some(look(&t)),
            by_message: grant(self.core.queue_entry(true, false), by_message),
            ordered: self.fair,
        });
        Spec {
            what: if self.fair { "fair lock" } else { "lock" },
            name: self.core.name.clone(),
            wake: keys.lock.clone(),
            turns: Turns::fair(self.fair),
            jump: false,
            patient: false,
            lease,
            watchdog: self.core.lease.is_none(),
            grant: grant(queue_ttl, if blocks { blocking } else { by_message }),
            fence: Some(keys.fence.clone()),
            // Giving up, and undoing a late grant, withdraw the queue
            // entry too, and hand on a grant that came meanwhile.
            undo: leave.clone(),
            leave,
            release: release(false),
            extend: self.extend(keys, &t, ms.clone(), blocks.then_some(queue_ttl)),
            direct,
            look: name_look,
        }
    }

    /// The renewal thread's look at the lock (lua/lock_watch.lua), for the
    /// blocked `waiter`, or (empty) for the name alone.
    fn look(&self, keys: &Keys, announce: &Announce<'_>, waiter: &[u8]) -> PreparedCall {
        let args = WatchArgs {
            waiter,
            entry: crate::protocol::timing::ROOM_ENTRY,
            grant_prefix: &keys.grant_prefix,
            claim: crate::protocol::timing::GRANT_CLAIM,
            announce,
            hand_over: crate::protocol::timing::GRANT_CLAIM,
        };
        PreparedCall::new(&LOCK_WATCH, keys.scripted.clone(), args.argv())
    }

    /// lua/lock_extend.lua for `token`'s hold of `lease_ms`. Where it may
    /// have been taken by a blocking pop alone (`claim`: the blocked
    /// waiters' queue entry life), the first extension also claims it; the
    /// hold puts its fence in (see `EXTEND_FENCE`).
    fn extend(
        &self,
        keys: &Keys,
        token: &[u8],
        lease_ms: Vec<u8>,
        claim: Option<Duration>,
    ) -> PreparedCall {
        let on = match claim {
            Some(_) => keys.extended_claiming.clone(),
            None => keys.extended.clone(),
        };
        let claiming = claim.map(|entry| (keys.grant_prefix.as_slice(), entry));
        claiming_extend(on, token, &lease_ms, claiming)
    }

    /// Where and how a hand-over of this lock is announced: every waiter
    /// queues (all but Redlock), so a release publishes only for a granted
    /// waiter that waits for messages.
    fn announce(&self, keys: &Keys) -> Announce<'_> {
        let wakeup = self.core.client.wakeup();
        Announce {
            channel: wakeup.channel(&keys.lock),
            message: wakeup.message(&keys.lock),
            queued: !self.core.client.backend().is_redlock(),
        }
    }

    /// Whether anyone holds the lock now (one round trip).
    pub fn is_locked(&self) -> Result<bool> {
        let keys = self.core.keys()?;
        self.core.client.backend().exists(&keys.lock)
    }

    /// How many times the current thread holds this lock (0 if not at all).
    pub fn hold_count(&self) -> usize {
        match self.core.keys_or_invalid() {
            Ok(keys) => reentrancy::depth(&self.hold_key(keys)),
            Err(_) => 0,
        }
    }

    /// Removes the lock whoever holds it and wakes waiters; returns whether
    /// a holder was removed. The holder learns it at its next renewal
    /// (`is_held()` turns false, `release()` fails with `LockLost`).
    pub fn force_unlock(&self) -> Result<bool> {
        let keys = self.core.keys()?;
        // The release script, whoever holds it: the next waiter is granted.
        let announce = self.announce(keys);
        let args = ReleaseArgs {
            token: b"",
            announce: &announce,
            grant_prefix: &keys.grant_prefix,
            claim: crate::protocol::timing::GRANT_CLAIM,
            force: true,
            keep: self.core.client.backend().is_redlock(),
            leave: false,
        };
        let release = crate::backend::Call {
            lua: &LOCK_RELEASE,
            keys: Parts::Owned(&keys.scripted),
            args: Parts::Encoded(&args.argv()),
        };
        let removed = self.core.confirm(&release, "lock")?;
        let backend = self.core.client.backend();
        if removed == 2 && !backend.is_redlock() && backend.grants_directly() {
            // Opened to the waiters: should the blocked one whose pop takes
            // it be frozen or gone, a look just after the claim window
            // hands it on, as after a release.
            let look = self.core.name_look(|| self.look(keys, &announce, b""));
            lease::look_after_opening(&self.core.client, look, &release, None, Instant::now());
        }
        self.core.client.wakeup().notify_local(&keys.lock);
        Ok(removed >= 1)
    }

    /// Runs `f` while holding the lock, waiting as long as needed; see
    /// [`Client::with_lock`](crate::Client::with_lock).
    pub fn with<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        let guard = self.acquire()?;
        let value = f();
        guard.release()?;
        Ok(value)
    }

    /// Runs `f` while holding the lock if it is free right now: `None`
    /// (and `f` not run) when it is busy. Like [`Lock::with`], a lease lost
    /// while `f` ran is an error of kind `LockLost`.
    pub fn try_with<T>(&self, f: impl FnOnce() -> T) -> Result<Option<T>> {
        run_under(self.try_acquire()?, f)
    }

    /// Runs `f` while holding the lock, waiting at most `timeout` for it:
    /// `None` (and `f` not run) when it timed out.
    pub fn with_timeout<T>(&self, timeout: Duration, f: impl FnOnce() -> T) -> Result<Option<T>> {
        run_under(self.acquire_timeout(timeout)?, f)
    }

    /// Whether the current thread holds this lock through this client, with
    /// its lease still believed held (no round trip).
    pub fn is_held_by_current_thread(&self) -> bool {
        match self.core.keys_or_invalid() {
            Ok(keys) => reentrancy::peek(&self.hold_key(keys)).is_some_and(|h| h.state.is_held()),
            Err(_) => false,
        }
    }
}

/// Runs `f` under `guard` if there is one, then releases it.
fn run_under<T>(guard: Option<LockGuard>, f: impl FnOnce() -> T) -> Result<Option<T>> {
    match guard {
        Some(guard) => {
            let value = f();
            guard.release()?;
            Ok(Some(value))
        }
        None => Ok(None),
    }
}

/// Proof that the current thread holds a [`Lock`]; releases it when dropped.
///
/// Not `Send`: the hold belongs to the thread that acquired it (its
/// reentrancy count lives in that thread). Moving it to another thread
/// does not compile; the error names `LockGuard` and its `ThreadBound`
/// marker. Hand the thread a [`LostSignal`](crate::LostSignal) instead.
///
/// ```compile_fail
/// # let client = redlease::Client::open("redis://127.0.0.1:6379/")?;
/// let guard = client.lock("x").acquire()?;
/// std::thread::spawn(move || drop(guard)); // error: `*const ()` cannot be sent ... within `ThreadBound`
/// # Ok::<(), redlease::Error>(())
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    lock: Lock,
    inner: Holding,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", &self.lock)
            .field("fencing_token", &self.fencing_token())
            .field("held", &self.is_held())
            .finish()
    }
}

impl LockGuard {
    /// The fencing token of this hold: strictly greater than that of every
    /// earlier hold of the same lock name; the same on re-entry. Pass it to
    /// the resources you write so they can reject a stale holder.
    pub fn fencing_token(&self) -> u64 {
        self.inner.held().fence
    }

    /// Stores a short note about this holder beside the lock — host, pid,
    /// since when, a job id — shown by [`Client::inspect`](crate::Client::inspect) (`note`) and
    /// `redlease status`. One round trip when called, nothing otherwise: the
    /// lock itself never writes it. The note lives until the lease's
    /// current end; call again after renewals to keep it (the CLI does).
    /// Returns whether it was stored (`false`: no longer held). At most
    /// 1 KiB.
    pub fn annotate(&self, note: &str) -> Result<bool> {
        let keys = self.lock.core.keys()?;
        if note.len() > 1024 {
            return Err(Error::invalid("a holder note must be at most 1 KiB")
                .about("lock", &self.lock.core.name));
        }
        let fence = self.inner.held().fence.to_string();
        let (lock_keys, args) = (
            [&*keys.lock, &keys.note],
            [
                self.inner.held().token.as_bytes(),
                note.as_bytes(),
                fence.as_bytes(),
            ],
        );
        let store = crate::backend::Call::borrowed(&LOCK_NOTE, &lock_keys, &args);
        let stored = self.lock.core.confirm(&store, "lock")?;
        Ok(stored == 1)
    }

    pub(crate) fn holding(&self) -> &Holding {
        &self.inner
    }

    pub(crate) fn holding_mut(&mut self) -> &mut Holding {
        &mut self.inner
    }

    pub(crate) fn client(&self) -> &Context {
        &self.lock.core.client
    }

    guard_controls!("the lock");
}
