//! The reentrant exclusive lock and its guard.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::Call;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::reentrancy::{self, Hold, HoldKey, Mode};
use crate::renewal;
use crate::scripts::{FAIR_ACQUIRE, FORCE_UNLOCK, LOCK_ACQUIRE, LOCK_EXTEND, LOCK_RELEASE};
use crate::wakeup::{deadline_after, waited, Attempt, Turns};

#[derive(Debug)]
struct Keys {
    lock: Arc<[u8]>,
    fence: Vec<u8>,
    /// Fair locks only: the waiter queue and its deadlines.
    queue: Vec<u8>,
    queue_deadlines: Vec<u8>,
}

/// A named, reentrant, distributed mutual-exclusion lock.
///
/// Made by [`Client::lock`]. Cheap to clone and `Send + Sync`: share it, or
/// make a new one from the name whenever convenient; all handles with the
/// same client and name are the same lock.
///
/// The owner is the pair (client, thread): a thread that holds the lock
/// re-enters it without a round trip and gets the same fencing token; another
/// thread, or another client, waits.
#[derive(Clone)]
pub struct Lock {
    client: Client,
    keys: std::result::Result<Arc<Keys>, Arc<str>>,
    lease: Option<Duration>,
    fair: bool,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Lock");
        match &self.keys {
            Ok(k) => d.field("key", &String::from_utf8_lossy(&k.lock)),
            Err(e) => d.field("invalid", e),
        };
        d.field("lease", &self.lease)
            .field("fair", &self.fair)
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(client: Client, name: &[u8], fair: bool) -> Lock {
        let keys = client
            .names(name)
            .map(|n| {
                Arc::new(Keys {
                    lock: n.key("").into(),
                    fence: n.key(":fence"),
                    queue: n.key(":queue"),
                    queue_deadlines: n.key(":queue:t"),
                })
            })
            .map_err(|e| Arc::from(e.to_string()));
        Lock {
            client,
            keys,
            lease: None,
            fair,
        }
    }

    /// Gives acquisitions through this handle a fixed lease of `lease` and no
    /// watchdog: the lock ends by itself after `lease`, even if the guard is
    /// still alive (then [`LockGuard::is_held`] turns false). Defaults to
    /// the client's watchdog timeout, renewed while the guard lives.
    pub fn lease(mut self, lease: Duration) -> Lock {
        self.lease = Some(lease);
        self
    }

    fn keys(&self) -> Result<&Arc<Keys>> {
        self.keys
            .as_ref()
            .map_err(|e| Error::invalid(e.to_string()))
    }

    fn hold_key(&self, keys: &Keys) -> HoldKey {
        HoldKey {
            client: self.client.id_u128(),
            mode: Mode::Exclusive,
            key: keys.lock.clone(),
        }
    }

    /// Waits until the lock is acquired (like `std::sync::Mutex::lock`).
    pub fn acquire(&self) -> Result<LockGuard> {
        self.acquire_until(None).and_then(waited)
    }

    /// Acquires the lock if it is free right now; never waits.
    pub fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.acquire_until(Some(Instant::now()))
    }

    /// Waits at most `timeout` for the lock; `None` when it timed out.
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.acquire_until(deadline_after(timeout))
    }

    fn acquire_until(&self, deadline: Option<Instant>) -> Result<Option<LockGuard>> {
        let keys = self.keys()?;
        let watchdog = self.lease.is_none();
        let lease = self.lease.unwrap_or(self.client.watchdog_timeout());
        let lease_ms = renewal::lease_millis(lease)?;
        let hold_key = self.hold_key(keys);
        if let Some(hold) = reentrancy::reenter(&hold_key) {
            return Ok(Some(self.guard(hold_key, hold)));
        }
        let token = self.client.new_token();
        let lease_arg = lease_ms.to_string();
        let backend = self.client.backend();
        let wakeup = self.client.wakeup();
        let queue_ttl = (wakeup.fallback() * 3 + Duration::from_secs(1))
            .as_millis()
            .to_string();
        let turns = if self.fair {
            Turns::Server
        } else {
            Turns::Local
        };
        let message = wakeup.message(&keys.lock);
        let lock_keys = [keys.lock.to_vec(), keys.fence.clone()];
        let acquire_args = [token.as_bytes().to_vec(), lease_arg.clone().into_bytes()];
        let undo_keys = [keys.lock.to_vec()];
        let undo_args = [
            token.as_bytes().to_vec(),
            wakeup.channel().to_vec(),
            message.clone(),
        ];
        let acquired = wakeup.acquire(&keys.lock, turns, deadline, || {
            let sent = Instant::now();
            let reply: Result<(i64, i64)> = if self.fair {
                backend.eval(
                    &FAIR_ACQUIRE,
                    &[&keys.lock, &keys.fence, &keys.queue, &keys.queue_deadlines],
                    &[token.as_bytes(), lease_arg.as_bytes(), queue_ttl.as_bytes()],
                )
            } else {
                backend.grant(
                    Call {
                        lua: &LOCK_ACQUIRE,
                        keys: &lock_keys,
                        args: &acquire_args,
                    },
                    Call {
                        lua: &LOCK_RELEASE,
                        keys: &undo_keys,
                        args: &undo_args,
                    },
                    lease,
                )
            };
            match reply {
                Ok((1, fence)) => {
                    backend.raise_fence(&keys.fence, fence);
                    Ok(Attempt::Acquired((fence as u64, sent)))
                }
                Ok((_, pttl)) => Ok(Attempt::busy_ms(pttl)),
                Err(e) => {
                    if e.is_ambiguous() {
                        // The script may have run: remove a lease we may
                        // hold but cannot know about, or it would block
                        // everyone until it expires.
                        let _ = self.release_in_redis(keys, &token);
                    }
                    Err(e)
                }
            }
        });
        if self.fair && !matches!(acquired, Ok(Some(_))) {
            wakeup.leave_queue(
                &keys.queue,
                &keys.queue_deadlines,
                token.as_bytes(),
                &keys.lock,
            );
        }
        let acquired = acquired?;
        let Some((fence, sent)) = acquired else {
            return Ok(None);
        };
        // On Redlock the lease is only as long as its slowest master's clock.
        let sent = sent.checked_sub(backend.drift(lease)).unwrap_or(sent);
        let state = renewal::start(
            backend,
            watchdog,
            sent,
            lease,
            &LOCK_EXTEND,
            vec![keys.lock.to_vec()],
            vec![token.as_bytes().to_vec(), lease_arg.into_bytes()],
        );
        let hold = reentrancy::begin(&hold_key, token, fence, state);
        Ok(Some(self.guard(hold_key, hold)))
    }

    fn guard(&self, hold_key: HoldKey, hold: Hold) -> LockGuard {
        LockGuard {
            lock: self.clone(),
            hold_key,
            hold,
            released: false,
            _not_send: PhantomData,
        }
    }

    /// Token-checked delete; `Ok(true)` if this token held the lock.
    fn release_in_redis(&self, keys: &Keys, token: &str) -> Result<bool> {
        let wakeup = self.client.wakeup();
        let released = self.client.backend().confirm(Call {
            lua: &LOCK_RELEASE,
            keys: &[keys.lock.to_vec()],
            args: &[
                token.as_bytes().to_vec(),
                wakeup.channel().to_vec(),
                wakeup.message(&keys.lock),
            ],
        })?;
        if released == 1 {
            wakeup.notify_local(&keys.lock);
        }
        Ok(released == 1)
    }

    /// Whether anyone holds the lock now (one round trip).
    pub fn is_locked(&self) -> Result<bool> {
        let keys = self.keys()?;
        self.client.backend().exists(&keys.lock)
    }

    /// How many times the current thread holds this lock (0 if not at all).
    pub fn hold_count(&self) -> usize {
        match &self.keys {
            Ok(keys) => reentrancy::depth(&self.hold_key(keys)),
            Err(_) => 0,
        }
    }

    /// Removes the lock whoever holds it and wakes waiters; returns whether
    /// a holder was removed. The holder learns it at its next renewal
    /// (`is_held()` turns false, `release()` fails with `LockLost`).
    pub fn force_unlock(&self) -> Result<bool> {
        let keys = self.keys()?;
        let wakeup = self.client.wakeup();
        let removed = self.client.backend().confirm(Call {
            lua: &FORCE_UNLOCK,
            keys: &[keys.lock.to_vec()],
            args: &[wakeup.channel().to_vec(), wakeup.message(&keys.lock)],
        })?;
        wakeup.notify_local(&keys.lock);
        Ok(removed == 1)
    }

    /// Runs `f` while holding the lock, waiting as long as needed; see
    /// [`Client::with_lock`].
    pub fn with<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        let guard = self.acquire()?;
        let value = f();
        guard.release()?;
        Ok(value)
    }
}

/// Proof that the current thread holds a [`Lock`]; releases it when dropped.
///
/// Not `Send`: the hold belongs to the thread that acquired it (its
/// reentrancy count lives in that thread).
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    lock: Lock,
    hold_key: HoldKey,
    hold: Hold,
    released: bool,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", &self.lock)
            .field("fencing_token", &self.hold.fence)
            .field("held", &self.is_held())
            .finish()
    }
}

impl LockGuard {
    /// The fencing token of this hold: strictly greater than that of every
    /// earlier hold of the same lock name; the same on re-entry. Pass it to
    /// the resources you write so they can reject a stale holder.
    pub fn fencing_token(&self) -> u64 {
        self.hold.fence
    }

    /// Whether the lease is still believed held, without a round trip: false
    /// once the renewal thread found it gone, or (fixed lease) once its
    /// deadline has passed.
    pub fn is_held(&self) -> bool {
        self.hold.lease.is_held()
    }

    /// Releases this level of the hold (the lock itself when it is the
    /// outermost). Fails with `LockLost` if the lease had been lost.
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        self.release_inner()
    }

    fn release_inner(&mut self) -> Result<()> {
        if !reentrancy::release_level(&self.hold_key, &self.hold)? {
            return Ok(()); // an inner level: the outer guard still holds it
        }
        let keys = self.lock.keys()?;
        // Tokens are unique per acquisition, so finding ours proves nobody
        // else held the lock in between, even if the renewal thread had
        // (conservatively) given the lease up during a connection outage.
        if self.lock.release_in_redis(keys, &self.hold.token)? {
            Ok(())
        } else {
            Err(Error::lost(
                "the lease was lost before release (expired, flushed, force-unlocked or taken over)",
            ))
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.released {
            if let Err(e) = self.release_inner() {
                log::warn!("redlease: releasing {:?} on drop: {e}", self.lock);
            }
        }
    }
}
