//! Several locks taken as one: all or nothing, without deadlock.

use std::fmt;
use std::time::{Duration, Instant};

use redis::{FromRedisValue, Value};

use crate::backend::{Answer, Backend, PreparedCall};
use crate::error::Result;
use crate::handles::core::waits;
use crate::handles::lock::{Lock, LockGuard};
use crate::lease::context::Context;
use crate::lease::reentrancy::HoldKey;
use crate::lease::Spec;
use crate::protocol::signal::LostSignal;

/// Several named locks acquired together (Redisson's `RedissonMultiLock`).
///
/// Made by [`Client::multi_lock`](crate::Client::multi_lock). Its names are plain locks: a multi-lock
/// over `["a", "b"]` and `client.lock("a")` exclude each other, and each
/// name keeps its own fencing token.
///
/// **All or nothing.** Where every name is free, they are all taken at
/// once: on one server in one script run (one round trip each way, the
/// release too), on Cluster in one pipeline per master, all masters at
/// once. Otherwise the locks are taken one by one in a canonical order (by
/// key), so two multi-locks over overlapping sets, in any order, never
/// deadlock: whoever gets the first shared name gets all of them in turn.
/// If an attempt fails — busy for `try_acquire`, the timeout passes, an
/// error — every name it had taken is released before it returns, so a
/// failed attempt leaves no name held. Duplicate names count once.
///
/// Works on every topology: the names may live in different Cluster slots
/// (each lock is one key with its own hash tag, no cross-slot script), and
/// on Redlock each name is its own quorum lock, taken one by one. What
/// does *not* hold there, nor when names are taken one by one, is
/// atomicity of the whole set *as seen by readers*: between the first and
/// the last grant, another client may observe some names held by this
/// multi-lock and others free. No holder ever gets a name another holds.
///
/// ```no_run
/// # let client = redlease::Client::open("redis://127.0.0.1:6379/")?;
/// let both = client.multi_lock(["account:1", "account:2"]);
/// let guard = both.acquire()?;
/// let [from, to] = guard.fencing_tokens()[..] else { unreachable!() };
/// // ... move money between the accounts, passing the tokens along ...
/// guard.release()?;
/// # let _ = (from, to);
/// # Ok::<(), redlease::Error>(())
/// ```
#[derive(Clone)]
pub struct MultiLock {
    /// The distinct locks in canonical (key) order.
    locks: Vec<Lock>,
    /// For each name as given, its index in `locks`.
    order: Vec<usize>,
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("locks", &self.locks)
            .finish()
    }
}

impl MultiLock {
    pub(crate) fn new<I, N>(client: &Context, names: I) -> MultiLock
    where
        I: IntoIterator<Item = N>,
        N: AsRef<[u8]>,
    {
        let given: Vec<Lock> = names
            .into_iter()
            .map(|n| Lock::new(client.clone(), n.as_ref(), false))
            .collect();
        let mut sorted: Vec<(Vec<u8>, usize)> = given
            .iter()
            .enumerate()
            .map(|(i, l)| (l.sort_key(), i))
            .collect();
        sorted.sort();
        sorted.dedup_by(|a, b| a.0 == b.0);
        let order = given
            .iter()
            .map(|l| {
                let k = l.sort_key();
                sorted.iter().position(|(s, _)| *s == k).unwrap_or(0)
            })
            .collect();
        let locks = sorted.iter().map(|(_, i)| given[*i].clone()).collect();
        MultiLock { locks, order }
    }

    /// Gives every name a fixed lease and no watchdog. Defaults to the
    /// client's watchdog timeout, renewed while the guard lives.
    pub fn lease(mut self, lease: Duration) -> MultiLock {
        self.locks = self.locks.into_iter().map(|l| l.lease(lease)).collect();
        self
    }

    waits!("every name" -> MultiLockGuard, acquire_until() => acquire, try_acquire, acquire_timeout);

    fn acquire_until(&self, deadline: Option<Instant>) -> Result<Option<MultiLockGuard>> {
        if self.locks.is_empty() {
            return Err(crate::error::Error::invalid(
                "a multi-lock needs at least one name",
            ));
        }
        match self.all_at_once(deadline)? {
            Together::All(all) => return Ok(Some(all)),
            // A try has its answer: no name was written, and the one by
            // one way would take (and give back) the names before it.
            Together::Held if deadline.is_some_and(|d| Instant::now() >= d) => return Ok(None),
            Together::Held | Together::OneByOne => {}
        }
        let mut guards = Vec::with_capacity(self.locks.len());
        for lock in &self.locks {
            // On `None` or an error, `guards` is dropped: every name taken
            // so far is released before we return.
            match lock.acquire_until(deadline)? {
                Some(g) => guards.push(g),
                None => return Ok(None),
            }
        }
        Ok(Some(MultiLockGuard {
            guards,
            order: self.order.clone(),
        }))
    }
}

/// What one try of every name at once came to.
enum Together {
    /// All granted.
    All(MultiLockGuard),
    /// Nothing granted: a name is held by a holder.
    Held,
    /// Nothing granted, or whatever was given back: the one-by-one way
    /// decides (a name open to its waiters or with a queue, an undecided
    /// outcome, a name this thread holds, a topology without it).
    OneByOne,
}

/// Each name's try: `Ok(fence)` granted; `Err(true)` surely refused
/// (busy); `Err(false)` undecided: it may have been granted.
type Granted = Vec<std::result::Result<i64, bool>>;

/// What the one script run came to: replies to go through, or the answer.
enum Run {
    Done(Result<Vec<Value>>, Granted),
    Then(Together),
}

impl MultiLock {
    /// Tries every name in one round trip, with one token, never queueing
    /// (see [`Together`]): where one server holds them all, in one script
    /// run (lua/lock_acquire_all.lua grants them all or none); on Cluster,
    /// each name's try in one pipeline per master, all masters at once,
    /// whatever was granted given back unless all were. Not on Redlock,
    /// nor with replica acknowledgements. The one-by-one way waits in
    /// canonical order and handles every uncertain outcome (and a name
    /// this thread holds already); before it, whatever an undecided run
    /// may have granted is released (one round trip, token-checked).
    fn all_at_once(&self, deadline: Option<Instant>) -> Result<Together> {
        let Some(first) = self.locks.first() else {
            return Ok(Together::OneByOne);
        };
        let client = first.client();
        let backend = client.backend();
        let one_server = backend.pipelines_grants();
        if self.locks.len() < 2 || !(one_server || backend.pipelines_grants_per_master()) {
            return Ok(Together::OneByOne);
        }
        let token = client.new_token();
        let mut specs = Vec::with_capacity(self.locks.len());
        for lock in &self.locks {
            match lock.try_spec(&token)? {
                Some(spec) => specs.push(spec),
                None => return Ok(Together::OneByOne),
            }
        }
        let at = Instant::now();
        let (replies, granted) = if one_server {
            match Self::in_one_run(backend, &specs) {
                Run::Done(replies, granted) => (replies, granted),
                Run::Then(next) => return Ok(next),
            }
        } else {
            Self::per_master(backend, &specs)
        };
        if granted.iter().all(|g| g.is_ok()) {
            let mut guards = Vec::with_capacity(specs.len());
            for ((spec, slot), (lock, fence)) in specs
                .into_iter()
                .zip(self.locks.iter().zip(granted.into_iter().flatten()))
            {
                let valid = crate::lease::valid_for(client, spec.lease)?;
                let what = spec.what;
                let grant = crate::lease::Grant {
                    token: token.clone(),
                    fence,
                    at,
                    valid,
                };
                let held = crate::lease::hold(client, spec, grant, Some(&slot));
                crate::metrics::acquired(what, at.elapsed());
                if let Some(events) = client.events() {
                    events.handle_acquired(&held.acquire_event(at.elapsed()));
                }
                guards.push(lock.guard(slot, held));
            }
            return Ok(Together::All(MultiLockGuard {
                guards,
                order: self.order.clone(),
            }));
        }
        // A master that failed or was late leaves its calls `Nil`.
        let unanswered = !one_server && matches!(&replies, Ok(v) if v.contains(&Value::Nil));
        match replies {
            // Late: the undo was written behind the grants; nothing to do
            // but report it, or wait the one-by-one way while time is left.
            Err(e) if e.is_undone() => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(e.maybe_ran());
                }
                return Ok(Together::OneByOne);
            }
            Err(e) if deadline.is_some_and(|d| Instant::now() >= d) => {
                self.give_back(client, &specs, &granted);
                return Err(e.maybe_ran());
            }
            _ => {}
        }
        // Give back what was (or may have been) granted, in one round
        // trip; a release that finds nothing is fine here.
        self.give_back(client, &specs, &granted);
        // A name surely busy (Cluster: its own try said so) answers a try.
        if granted.iter().any(|g| matches!(g, Err(true))) {
            return Ok(Together::Held);
        }
        // A master that did not answer (Cluster) answers a try too: the
        // one-by-one way would ask it again, past the try's deadline.
        if unanswered && deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(crate::error::Error::new(
                crate::ErrorKind::Connection,
                "a server did not answer a multi-lock's try in time",
            )
            .maybe_ran());
        }
        Ok(Together::OneByOne)
    }

    /// Every name in one script run (lua/lock_acquire_all.lua).
    fn in_one_run(backend: &Backend, specs: &[(Spec, HoldKey)]) -> Run {
        let grants: Vec<&PreparedCall> = specs.iter().map(|(spec, _)| &spec.grant).collect();
        let releases: Vec<&PreparedCall> = specs.iter().map(|(spec, _)| &spec.release).collect();
        let (Some(grant), Some(undo)) = (
            crate::handles::lock::grant_all(&grants),
            PreparedCall::together(&releases),
        ) else {
            return Run::Then(Together::OneByOne);
        };
        let replies = backend.grant_batch(&[grant.call()], &[undo.call()]);
        let granted = match replies.as_ref().map(|r| r.first()) {
            Ok(Some(Value::Array(fences))) if fences.len() == specs.len() => fences
                .iter()
                .map(|f| match f {
                    Value::Int(fence) => Ok(*fence),
                    _ => Err(false),
                })
                .collect(),
            // Not all free: the script wrote nothing.
            Ok(Some(Value::Int(0))) => return Run::Then(Together::Held),
            Ok(Some(Value::Int(-1))) => return Run::Then(Together::OneByOne),
            _ => vec![Err(false); specs.len()],
        };
        Run::Done(replies, granted)
    }

    /// Each name its own try (lua/lock_acquire.lua), one pipeline per
    /// master, all masters at once (Cluster: each name its own slot).
    fn per_master(backend: &Backend, specs: &[(Spec, HoldKey)]) -> (Result<Vec<Value>>, Granted) {
        let calls: Vec<_> = specs.iter().map(|(spec, _)| spec.grant.call()).collect();
        let undo: Vec<_> = specs.iter().map(|(spec, _)| spec.release.call()).collect();
        let replies = backend.grant_batch(&calls, &undo);
        let granted = match &replies {
            Ok(values) if values.len() == specs.len() => values
                .iter()
                .map(|v| match Answer::from_redis_value(v.clone()) {
                    Ok(Answer::Granted(fence)) => Ok(fence),
                    Ok(Answer::Busy(_)) => Err(true),
                    Err(_) => Err(false),
                })
                .collect(),
            _ => vec![Err(false); specs.len()],
        };
        (replies, granted)
    }

    /// Releases, in one round trip, every name not surely refused.
    fn give_back(
        &self,
        client: &Context,
        specs: &[(crate::lease::Spec, crate::lease::reentrancy::HoldKey)],
        granted: &[std::result::Result<i64, bool>],
    ) {
        let backend = client.backend();
        let undo: Vec<_> = specs
            .iter()
            .zip(granted)
            .filter(|(_, g)| !matches!(g, Err(true)))
            .map(|((spec, _), _)| spec.release.call())
            .collect();
        if !undo.is_empty() {
            let _ = backend.eval_batch(&undo, backend.timeouts().response);
        }
    }
}

/// Proof that this thread holds every name of a [`MultiLock`]; releases
/// them all when dropped. Not `Send`, like every guard.
#[must_use = "the locks are released as soon as the guard is dropped"]
pub struct MultiLockGuard {
    guards: Vec<LockGuard>,
    order: Vec<usize>,
}

impl fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("fencing_tokens", &self.fencing_tokens())
            .field("held", &self.is_held())
            .finish()
    }
}

impl Drop for MultiLockGuard {
    fn drop(&mut self) {
        // Released already (`release`) costs nothing: each hold knows.
        if let Err(e) = self.release_all() {
            log::warn!("redlease: releasing a multi-lock on drop: {e}");
        }
    }
}

impl MultiLockGuard {
    /// Each name's fencing token, in the order the names were given.
    pub fn fencing_tokens(&self) -> Vec<u64> {
        self.order
            .iter()
            .map(|&i| self.guards.get(i).map_or(0, |g| g.fencing_token()))
            .collect()
    }

    /// Whether every name's lease is still believed held (no round trip).
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(|g| g.is_held())
    }

    /// A signal that fires once any name's hold ends; see [`LostSignal`].
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal::new(
            self.guards
                .iter()
                .map(|g| g.holding().state().clone())
                .collect(),
        )
    }

    /// How long every name's lease surely still runs (the shortest).
    pub fn expires_in(&self) -> Duration {
        self.guards
            .iter()
            .map(|g| g.expires_in())
            .min()
            .unwrap_or_default()
    }

    /// Makes every name's lease end `lease` from now (one round trip per
    /// name); the first error is returned after trying them all.
    pub fn extend(&self, lease: Duration) -> Result<()> {
        let mut first = Ok(());
        for g in &self.guards {
            if let Err(e) = g.extend(lease) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// Releases every name (all of them, even if one fails); the first
    /// error is returned, `LockLost` if a lease had been lost. On one
    /// server, one round trip for all.
    pub fn release(mut self) -> Result<()> {
        self.release_all()
    }

    fn release_all(&mut self) -> Result<()> {
        let Some(client) = self.guards.first().map(|g| g.client().clone()) else {
            return Ok(());
        };
        // In reverse order of acquisition, as nested guards would.
        let holdings = self
            .guards
            .iter_mut()
            .rev()
            .map(|g| g.holding_mut())
            .collect();
        crate::lease::release_all(&client, holdings)
    }
}
