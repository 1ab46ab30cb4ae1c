//! Expiring, owned, optionally fair counting semaphores.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{Call, PreparedCall};
use crate::error::{Error, Result};
use crate::handles::core::{settings, waits, Ask, Core};
use crate::lease::context::Context;
use crate::lease::{self, guard_controls, Direct, Holding, Spec};
use crate::protocol::keys as schema;
use crate::protocol::scripts::semaphore::{mode, AcquireArgs, Offer, ReleaseArgs, WatchArgs};
use crate::protocol::scripts::{
    millis, Parts, SEM_ACQUIRE, SEM_FORCE_RELEASE, SEM_RELEASE, SEM_RESIZE, SEM_STATE, SEM_WATCH,
    ZSET_EXTEND,
};
use crate::wakeup::Turns;

#[derive(Debug)]
struct Keys {
    permits: Arc<[u8]>,
    count: Vec<u8>,
    /// Prefix of a waiter's grant list (its member follows).
    grant_prefix: Vec<u8>,
    /// The keys of lua/sem_acquire.lua, sem_release.lua and the others
    /// that hand permits on (sem_grant.lua), made once: an acquisition's
    /// calls share them (see `PreparedCall::keys`).
    scripted: Arc<[Vec<u8>]>,
}

impl Keys {
    fn new(n: crate::protocol::keys::Names) -> Keys {
        let (permits, count, queue, queue_deadlines) = (
            n.key(schema::SEM),
            n.key(schema::SEM_COUNT),
            n.key(schema::SEM_QUEUE),
            n.key(schema::SEM_QUEUE_DEADLINES),
        );
        Keys {
            // Its waiter queue and the queue's deadlines go only here.
            scripted: Arc::from([permits.clone(), count.clone(), queue, queue_deadlines]),
            permits: permits.into(),
            count,
            grant_prefix: n.key(schema::SEM_GRANT),
        }
    }

    /// The shared keys of the scripts (see the field).
    fn scripted(&self) -> Arc<[Vec<u8>]> {
        self.scripted.clone()
    }
}

/// A named distributed semaphore with `permits` permits.
///
/// Made by [`Client::semaphore`](crate::Client::semaphore) or [`Client::fair_semaphore`](crate::Client::fair_semaphore). Permits are
/// owned and expiring: each is a member of a sorted set scored by its expiry
/// in the server's time, renewed by the renewal thread while its [`Permit`]
/// lives, and reclaimed by the next acquirer once a crashed holder's lease
/// has ended. Only the holder can return a permit. No client clock is
/// involved, so clock skew between machines cannot steal permits.
///
/// A plain semaphore serves a request that fits before an earlier one that
/// does not, whichever client either comes from (the threads of one client
/// asking for the same number of permits take turns in arrival order); a
/// fair semaphore serves every request in arrival order.
///
/// All handles of one name must agree on the permit count while permits are
/// held; a handle with another count gets [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument).
/// Use [`Semaphore::resize`] to change it.
#[derive(Clone)]
pub struct Semaphore {
    core: Core<Keys>,
    permits: u32,
    fair: bool,
    /// Made by [`Semaphore::resize`]: its count is the latest word, and an
    /// acquisition that finds another count (set, while the semaphore was
    /// idle, by a handle that never heard of the resize) puts it back.
    resized: bool,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Semaphore");
        self.core.debug(&mut d, |k| &k.permits);
        d.field("permits", &self.permits)
            .field("fair", &self.fair)
            .finish()
    }
}

impl Semaphore {
    pub(crate) fn new(client: Context, name: &[u8], permits: u32, fair: bool) -> Semaphore {
        let core = Core::new(client, name, |_, n| Keys::new(n));
        Semaphore {
            core,
            permits,
            fair,
            resized: false,
        }
    }

    settings!(Semaphore, "permits");

    /// The permit count this handle uses.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Runs `f` holding one permit (waiting as long as needed), then
    /// returns it. A lease lost while `f` ran is an error of kind `LockLost`.
    pub fn with_permit<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        let permit = self.acquire()?;
        let value = f();
        permit.release()?;
        Ok(value)
    }

    waits!("one permit" -> Permit, acquire_until(1,) => acquire, try_acquire, acquire_timeout);

    waits!("`k` permits at once (all or nothing; `1 <= k <= permits`)" -> Permit,
        acquire_until(k,) => acquire_many, try_acquire_many, acquire_many_timeout; k: u32);

    /// Permits free right now (one round trip; holders whose lease ended
    /// are not counted).
    pub fn available(&self) -> Result<u32> {
        let (used, stored) = self.state()?;
        let n = if stored >= 0 {
            stored as u64
        } else {
            self.permits as u64
        };
        Ok(n.saturating_sub(used) as u32)
    }

    fn state(&self) -> Result<(u64, i64)> {
        let keys = self.core.keys()?;
        self.core.client.backend().eval(&Call::borrowed(
            &SEM_STATE,
            &[&keys.permits, &keys.count],
            &[],
        ))
    }

    /// Changes the permit count to `permits` for everyone: holders keep
    /// their permits, new acquisitions see the new count (waiters are woken
    /// to look). Returns a handle with the new count; handles still using
    /// the old count get an error while permits are held.
    ///
    /// An idle semaphore (no permit held) keeps no count on the server —
    /// nothing is left per name — so the first acquisition sets it. If a
    /// handle that never heard of the resize is first, the returned handle
    /// puts its count back at its next acquisition (the resize is the
    /// latest word), and the stale handle is the one told of the mismatch
    /// from then on.
    pub fn resize(&self, permits: u32) -> Result<Semaphore> {
        if permits == 0 {
            return Err(Error::invalid("a semaphore needs at least one permit"));
        }
        self.store_count(permits)?;
        let mut s = self.clone();
        s.permits = permits;
        s.resized = true;
        Ok(s)
    }

    /// Sets the count to `permits` on the server (while permits are held:
    /// an idle semaphore keeps no count) and wakes the waiters.
    fn store_count(&self, permits: u32) -> Result<()> {
        let keys = self.core.keys()?;
        let wakeup = self.core.client.wakeup();
        let scripted = keys.scripted();
        let offer = self.offer(keys);
        let _: i64 = self.core.client.backend().eval(&Call {
            lua: &SEM_RESIZE,
            keys: Parts::Owned(&scripted),
            args: Parts::Borrowed(&[
                permits.to_string().as_bytes(),
                &offer.channel,
                &offer.message,
                offer.grant_prefix,
                &millis(offer.claim),
                mode(offer.fair),
            ]),
        })?;
        wakeup.notify_local(&keys.permits);
        Ok(())
    }

    /// Returns a permit detached with [`Permit::detach`], from any thread,
    /// client or process: `true` if it was still held and is now free,
    /// `false` if it was not held (already released, expired, removed, or
    /// never taken from this semaphore). Waiters are woken.
    pub fn release_id(&self, id: &PermitId) -> Result<bool> {
        let keys = self.core.keys()?;
        let wakeup = self.core.client.wakeup();
        let args = ReleaseArgs {
            member: id.member.as_bytes(),
            offer: &self.offer(keys),
            leave: false,
        };
        let release = Call {
            lua: &SEM_RELEASE,
            keys: Parts::Owned(&keys.scripted()),
            args: Parts::Encoded(&args.argv()),
        };
        let released = self.core.confirm(&release, "semaphore")?;
        wakeup.notify_local(&keys.permits);
        Ok(released >= 1)
    }

    /// Removes every permit, whoever holds it, and wakes waiters; returns
    /// how many holders (permit guards or detached ids, whatever their
    /// count) were removed. Holders learn it at their next renewal
    /// (`is_held()` turns false, `release()` fails with `LockLost`).
    pub fn force_release_all(&self) -> Result<u32> {
        let keys = self.core.keys()?;
        let wakeup = self.core.client.wakeup();
        let release = Call {
            lua: &SEM_FORCE_RELEASE,
            keys: Parts::Owned(&keys.scripted()),
            args: Parts::Encoded(&self.offer(keys).force_release_argv()),
        };
        let removed = self.core.confirm(&release, "semaphore")?;
        let backend = self.core.client.backend();
        if removed > 0 && backend.grants_directly() {
            // Offered to the waiters: should the blocked one whose pop takes
            // the offer be frozen or gone, a look just after the claim
            // window hands it on, as after a release.
            let look = self
                .core
                .name_look(|| self.watch(keys, &self.offer(keys), b""));
            lease::look_after_opening(&self.core.client, look, &release, None, Instant::now());
        }
        wakeup.notify_local(&keys.permits);
        Ok(removed.clamp(0, u32::MAX as i64) as u32)
    }

    /// The renewal thread's look at the semaphore (lua/sem_watch.lua): for
    /// a `waiter` while it is blocked, and (none) for the name once a
    /// release or a forced release offered its permits to the waiters.
    fn watch(&self, keys: &Keys, offer: &Offer<'_>, waiter: &[u8]) -> PreparedCall {
        let args = WatchArgs {
            waiter,
            entry: crate::protocol::timing::ROOM_ENTRY,
            offer,
        };
        PreparedCall::new(&SEM_WATCH, keys.scripted(), args.argv())
    }

    /// Where an offer of this semaphore's permits goes (lua/sem_grant.lua).
    fn offer<'a>(&self, keys: &'a Keys) -> Offer<'a> {
        let wakeup = self.core.client.wakeup();
        Offer {
            grant_prefix: &keys.grant_prefix,
            claim: crate::protocol::timing::GRANT_CLAIM,
            channel: wakeup.channel(&keys.permits).to_vec(),
            message: wakeup.message(&keys.permits),
            permits: self.permits,
            fair: self.fair,
        }
    }

    fn acquire_until(&self, k: u32, deadline: Option<Instant>) -> Result<Option<Permit>> {
        let keys = self.core.keys()?;
        self.check(k)?;
        let ask = self.core.ask(deadline)?;
        let attempt = || {
            self.core
                .acquire(None, deadline, |token| Ok(self.spec(keys, k, token, &ask)))
        };
        let held = match attempt() {
            // A resized handle meets the count a stale handle set while the
            // semaphore was idle (an idle semaphore keeps no count): the
            // resize is the latest word, so it is put back, and the stale
            // handle is the one told of the mismatch from then on.
            Err(e) if self.resized && e.is_count_mismatch() => {
                self.store_count(self.permits)?;
                attempt()?
            }
            held => held?,
        };
        Ok(held.map(|held| Permit {
            semaphore: self.clone(),
            count: k,
            inner: Holding::new(self.core.client.clone(), None, held),
        }))
    }

    /// Whether `k` permits can be asked of this semaphore, here.
    fn check(&self, k: u32) -> Result<()> {
        if self.permits == 0 {
            return Err(Error::invalid("a semaphore needs at least one permit"));
        }
        if k == 0 || k > self.permits {
            return Err(Error::invalid(format!(
                "cannot take {k} permits of a semaphore with {}",
                self.permits
            )));
        }
        if self.core.client.backend().is_redlock() {
            return Err(Error::new(
                crate::ErrorKind::Unsupported,
                "semaphores need a single leader (one server, Sentinel or Cluster)",
            ));
        }
        Ok(())
    }

    /// What an acquisition of `k` permits with `token` sends (see
    /// `lease::Spec`).
    fn spec(&self, keys: &Keys, k: u32, token: &str, ask: &Ask) -> Spec {
        let (lease, lease_arg, waits) = (ask.lease, ask.lease_ms.as_str(), ask.waits);
        let backend = self.core.client.backend();
        let blocks = waits && backend.grants_directly();
        let entry = |blocks: bool| self.core.queue_entry(waits, blocks);
        let offer = self.offer(keys);
        let member = format!("{k}:{token}").into_bytes();
        let ms = lease_arg.as_bytes().to_vec();
        let grant = |blocks: bool| {
            let args = AcquireArgs {
                member: &member,
                lease_ms: &ms,
                k,
                entry: entry(blocks),
                blocks,
                offer: &offer,
            };
            PreparedCall::new(&SEM_ACQUIRE, keys.scripted(), args.argv())
        };
        let release = |leave: bool| {
            let args = ReleaseArgs {
                member: &member,
                offer: &offer,
                leave,
            };
            PreparedCall::new(&SEM_RELEASE, keys.scripted(), args.argv())
        };
        let leave = Arc::new(release(true));
        let look = |waiter: &[u8]| self.watch(keys, &offer, waiter);
        // Waiters block on the name's open list, moving what they pop
        // into their own (lua/sem_grant.lua sem_offer).
        let own = [keys.grant_prefix.as_slice(), &member].concat();
        Spec {
            what: "semaphore",
            name: self.core.name.clone(),
            wake: keys.permits.clone(),
            turns: if self.fair {
                Turns::Server
            } else {
                Turns::Local(k)
            },
            jump: false,
            patient: false,
            lease,
            watchdog: self.core.lease.is_none(),
            grant: grant(blocks),
            fence: None,
            release: release(false),
            extend: PreparedCall::new(
                &ZSET_EXTEND,
                vec![keys.permits.to_vec(), keys.count.clone()],
                [&member, &ms].into_iter().collect(),
            ),
            // Giving up, and undoing a late grant, withdraw the
            // waiter's entry and hand on permits granted meanwhile.
            undo: waits.then(|| leave.clone()),
            leave: Some(leave),
            direct: blocks.then(|| Direct {
                list: schema::open_list(&keys.grant_prefix),
                into: own,
                // Its script takes the grant, right behind the pop.
                alone: None,
                watch: Some(look(&member)),
                by_message: grant(false),
                // A fair semaphore's script behind the pop keeps the queue's
                // order with waiters that wait for messages among the blocked
                // (lua/sem_acquire.lua); a plain one promises no order.
                ordered: false,
            }),
            look: backend
                .grants_directly()
                .then(|| self.core.name_look(|| look(b""))),
        }
    }
}

/// Permits held from a [`Semaphore`]; returned when dropped.
///
/// Not `Send`, like every guard of this crate.
#[must_use = "the permits are returned as soon as the guard is dropped"]
pub struct Permit {
    semaphore: Semaphore,
    count: u32,
    inner: Holding,
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("semaphore", &self.semaphore)
            .field("count", &self.count)
            .field("held", &self.is_held())
            .finish()
    }
}

impl Permit {
    /// How many permits this guard holds.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The id this permit would have once detached (see
    /// [`Permit::detach`]); [`Semaphore::release_id`] with it returns the
    /// permit from anywhere, after which this guard's `release()` reports
    /// `LockLost`.
    pub fn id(&self) -> PermitId {
        PermitId {
            member: format!("{}:{}", self.count, self.inner.held().token),
        }
    }

    /// Hands the permits over to an id: the guard goes away without
    /// returning them, and whoever has the id returns them with
    /// [`Semaphore::release_id`] — from another thread, client or process.
    ///
    /// A detached permit with a watchdog keeps being renewed while the
    /// client that acquired it lives (any clone of it), until it is
    /// released by id; when that client is dropped or its process ends,
    /// the permit ends one lease later. A permit with a fixed lease ends
    /// at its lease as usual.
    pub fn detach(self) -> PermitId {
        let held = self.inner.detach();
        PermitId {
            member: format!("{}:{}", self.count, held.token),
        }
    }

    guard_controls!("the permits");
}

/// The id of a detached [`Permit`]: give it to whoever should return the
/// permits ([`Semaphore::release_id`]), in this process or another.
///
/// `Display` and `FromStr` round-trip it through text (a queue message, a
/// database row, an environment variable); it carries no secret beyond
/// being unguessable.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PermitId {
    /// The permit's member in the semaphore's sorted set: `<k>:<token>`.
    member: String,
}

impl fmt::Display for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.member)
    }
}

impl fmt::Debug for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PermitId({})", self.member)
    }
}

impl std::str::FromStr for PermitId {
    type Err = Error;

    /// Parses `<count>:rl:<32 hex>:<32 hex>`, the form `Display` writes.
    fn from_str(s: &str) -> Result<PermitId> {
        let bad = || {
            Error::invalid(format!(
                "not a permit id (expected <count>:rl:<client>:<random>): {:?}",
                s.chars().take(100).collect::<String>()
            ))
        };
        let mut parts = s.split(':');
        let count = parts.next().ok_or_else(bad)?;
        let rl = parts.next().ok_or_else(bad)?;
        let client = parts.next().ok_or_else(bad)?;
        let random = parts.next().ok_or_else(bad)?;
        let hex32 = |p: &str| p.len() == 32 && p.bytes().all(|b| b.is_ascii_hexdigit());
        let count_ok = count.parse::<u32>().is_ok_and(|k| k > 0) && !count.starts_with('0');
        if parts.next().is_some() || !count_ok || rl != "rl" || !hex32(client) || !hex32(random) {
            return Err(bad());
        }
        Ok(PermitId {
            member: s.to_owned(),
        })
    }
}
