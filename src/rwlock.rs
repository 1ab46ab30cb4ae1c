//! The distributed read-write lock and its guards.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::reentrancy::{self, Hold, HoldKey, Mode};
use crate::renewal;
use crate::scripts::{
    LOCK_EXTEND, LOCK_RELEASE, RW_READ_ACQUIRE, RW_READ_RELEASE, RW_WRITE_ACQUIRE, ZSET_EXTEND,
};
use crate::wakeup::{deadline_after, waited, Attempt, Turns};

#[derive(Debug)]
struct Keys {
    writer: Arc<[u8]>,
    readers: Vec<u8>,
    intent: Vec<u8>,
    fence: Vec<u8>,
}

/// A named distributed read-write lock: many readers or one writer.
///
/// Made by [`Client::rw_lock`]. Every holder has its own lease (readers are
/// members of a sorted set scored by their expiry in server time), so one
/// reader's release or crash never ends another's hold. A waiting writer
/// stops new readers from entering (through an intent that expires if the
/// writer dies), so readers cannot starve writers.
///
/// Reads and writes are reentrant per thread. A thread holding the write
/// lock may also take the read lock (a downgrade: release the write guard
/// afterwards and keep reading). A thread holding only a read lock that asks
/// for the write lock gets [`ErrorKind::WouldDeadlock`] instead of waiting
/// forever.
#[derive(Clone)]
pub struct RwLock {
    client: Client,
    keys: std::result::Result<Arc<Keys>, Arc<str>>,
    lease: Option<Duration>,
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("RwLock");
        match &self.keys {
            Ok(k) => d.field("key", &String::from_utf8_lossy(&k.writer)),
            Err(e) => d.field("invalid", e),
        };
        d.field("lease", &self.lease).finish()
    }
}

impl RwLock {
    pub(crate) fn new(client: Client, name: &[u8]) -> RwLock {
        let keys = client
            .names(name)
            .map(|n| {
                Arc::new(Keys {
                    writer: n.key(":rw:w").into(),
                    readers: n.key(":rw:r"),
                    intent: n.key(":rw:i"),
                    fence: n.key(":fence"),
                })
            })
            .map_err(|e| Arc::from(e.to_string()));
        RwLock {
            client,
            keys,
            lease: None,
        }
    }

    /// Gives holds taken through this handle a fixed lease and no watchdog.
    /// Defaults to the client's watchdog timeout, renewed while a guard lives.
    pub fn lease(mut self, lease: Duration) -> RwLock {
        self.lease = Some(lease);
        self
    }

    fn keys(&self) -> Result<&Arc<Keys>> {
        self.keys
            .as_ref()
            .map_err(|e| Error::invalid(e.to_string()))
    }

    fn hold_key(&self, keys: &Keys, mode: Mode) -> HoldKey {
        HoldKey {
            client: self.client.id_u128(),
            mode,
            key: keys.writer.clone(),
        }
    }

    /// Waits for a read hold.
    pub fn read(&self) -> Result<ReadGuard> {
        self.read_until(None).and_then(waited)
    }

    /// Takes a read hold if one is available now.
    pub fn try_read(&self) -> Result<Option<ReadGuard>> {
        self.read_until(Some(Instant::now()))
    }

    /// Waits at most `timeout` for a read hold.
    pub fn read_timeout(&self, timeout: Duration) -> Result<Option<ReadGuard>> {
        self.read_until(deadline_after(timeout))
    }

    /// Waits for the write hold.
    pub fn write(&self) -> Result<WriteGuard> {
        self.write_until(None).and_then(waited)
    }

    /// Takes the write hold if it is available now.
    pub fn try_write(&self) -> Result<Option<WriteGuard>> {
        self.write_until(Some(Instant::now()))
    }

    /// Waits at most `timeout` for the write hold.
    pub fn write_timeout(&self, timeout: Duration) -> Result<Option<WriteGuard>> {
        self.write_until(deadline_after(timeout))
    }

    /// This thread's read depth and write depth.
    pub fn hold_counts(&self) -> (usize, usize) {
        match &self.keys {
            Ok(k) => (
                reentrancy::depth(&self.hold_key(k, Mode::Read)),
                reentrancy::depth(&self.hold_key(k, Mode::Write)),
            ),
            Err(_) => (0, 0),
        }
    }

    /// Whether anyone holds the write lock, and how many readers there are
    /// (readers whose lease ended are not counted). One round trip.
    pub fn state(&self) -> Result<(bool, usize)> {
        let keys = self.keys()?;
        let (writer, readers): (bool, usize) = self.client.backend().eval(
            &crate::scripts::RW_STATE,
            &[&keys.writer, &keys.readers],
            &[],
        )?;
        Ok((writer, readers))
    }

    fn lease_of(&self) -> Result<(bool, Duration, String)> {
        let lease = self.lease.unwrap_or(self.client.watchdog_timeout());
        let ms = renewal::lease_millis(lease)?;
        Ok((self.lease.is_none(), lease, ms.to_string()))
    }

    fn read_until(&self, deadline: Option<Instant>) -> Result<Option<ReadGuard>> {
        let keys = self.keys()?;
        let (watchdog, lease, lease_arg) = self.lease_of()?;
        let hold_key = self.hold_key(keys, Mode::Read);
        if let Some(hold) = reentrancy::reenter(&hold_key) {
            return Ok(Some(ReadGuard::new(self.clone(), hold_key, hold)));
        }
        let own_write = reentrancy::peek(&self.hold_key(keys, Mode::Write))
            .filter(|h| !h.lease.is_lost())
            .map(|h| h.token);
        let own_write = own_write.as_deref().unwrap_or("");
        let token = self.client.new_token();
        let backend = self.client.backend();
        let attempt = || -> Result<Attempt<Instant>> {
            let sent = Instant::now();
            let (ok, wait): (i64, i64) = backend.eval(
                &RW_READ_ACQUIRE,
                &[&keys.writer, &keys.readers, &keys.intent],
                &[token.as_bytes(), lease_arg.as_bytes(), own_write.as_bytes()],
            )?;
            Ok(if ok == 1 {
                Attempt::Acquired(sent)
            } else {
                Attempt::busy_ms(wait)
            })
        };
        // A downgrade must not queue behind this client's other waiters:
        // they wait for our write lock, so we would wait for ourselves. The
        // script grants it at once while our write lease is live.
        let direct = if own_write.is_empty() {
            None
        } else {
            match attempt()? {
                Attempt::Acquired(sent) => Some(sent),
                Attempt::Busy(_) => None,
            }
        };
        let acquired = match direct {
            Some(sent) => Some(sent),
            None => self
                .client
                .wakeup()
                .acquire(&keys.writer, Turns::Local, deadline, attempt)?,
        };
        let Some(sent) = acquired else {
            return Ok(None);
        };
        let state = renewal::start(
            backend,
            watchdog,
            sent,
            lease,
            &ZSET_EXTEND,
            vec![keys.readers.clone()],
            vec![token.as_bytes().to_vec(), lease_arg.into_bytes()],
        );
        let hold = reentrancy::begin(&hold_key, token, 0, state);
        Ok(Some(ReadGuard::new(self.clone(), hold_key, hold)))
    }

    fn write_until(&self, deadline: Option<Instant>) -> Result<Option<WriteGuard>> {
        let keys = self.keys()?;
        let (watchdog, lease, lease_arg) = self.lease_of()?;
        let hold_key = self.hold_key(keys, Mode::Write);
        if let Some(hold) = reentrancy::reenter(&hold_key) {
            return Ok(Some(WriteGuard::new(self.clone(), hold_key, hold)));
        }
        if reentrancy::depth(&self.hold_key(keys, Mode::Read)) > 0 {
            return Err(Error::new(
                ErrorKind::WouldDeadlock,
                "this thread holds a read lock; asking for the write lock would wait for \
                 itself (release the read guard first)",
            ));
        }
        let token = self.client.new_token();
        let backend = self.client.backend();
        let wakeup = self.client.wakeup();
        let intent_ttl = (wakeup.fallback() * 3 + Duration::from_secs(1))
            .as_millis()
            .to_string();
        let acquired = wakeup.acquire(&keys.writer, Turns::Local, deadline, || {
            let sent = Instant::now();
            let (ok, value): (i64, i64) = backend.eval(
                &RW_WRITE_ACQUIRE,
                &[&keys.writer, &keys.readers, &keys.intent, &keys.fence],
                &[
                    token.as_bytes(),
                    lease_arg.as_bytes(),
                    intent_ttl.as_bytes(),
                ],
            )?;
            Ok(if ok == 1 {
                Attempt::Acquired((value as u64, sent))
            } else {
                Attempt::busy_ms(value)
            })
        });
        if !matches!(acquired, Ok(Some(_))) {
            // Withdraw our intent so readers need not wait for it to lapse;
            // a failed acquire may also have set the writer key itself.
            for key in [&keys.intent[..], &keys.writer[..]] {
                let _: Result<i64> = backend.eval(
                    &LOCK_RELEASE,
                    &[key],
                    &[
                        token.as_bytes(),
                        wakeup.channel(),
                        &wakeup.message(&keys.writer),
                    ],
                );
            }
        }
        let Some((fence, sent)) = acquired? else {
            return Ok(None);
        };
        let state = renewal::start(
            backend,
            watchdog,
            sent,
            lease,
            &LOCK_EXTEND,
            vec![keys.writer.to_vec()],
            vec![token.as_bytes().to_vec(), lease_arg.into_bytes()],
        );
        let hold = reentrancy::begin(&hold_key, token, fence, state);
        Ok(Some(WriteGuard::new(self.clone(), hold_key, hold)))
    }

    fn release(&self, mode: Mode, token: &str) -> Result<()> {
        let keys = self.keys()?;
        let wakeup = self.client.wakeup();
        let message = wakeup.message(&keys.writer);
        let args: [&[u8]; 3] = [token.as_bytes(), wakeup.channel(), &message];
        let released: i64 = match mode {
            Mode::Read => self
                .client
                .backend()
                .eval(&RW_READ_RELEASE, &[&keys.readers], &args)?,
            _ => self
                .client
                .backend()
                .eval(&LOCK_RELEASE, &[&keys.writer], &args)?,
        };
        if released == 1 {
            wakeup.notify_local(&keys.writer);
            Ok(())
        } else {
            Err(Error::lost(
                "the lease was lost before release (expired, flushed or force-unlocked)",
            ))
        }
    }
}

macro_rules! rw_guard {
    ($name:ident, $what:literal) => {
        #[doc = concat!("Proof that this thread holds ", $what, " of an [`RwLock`]; released when dropped.")]
        ///
        /// Not `Send`: the hold belongs to the thread that acquired it.
        #[must_use = "the hold is released as soon as the guard is dropped"]
        pub struct $name {
            lock: RwLock,
            hold_key: HoldKey,
            hold: Hold,
            released: bool,
            _not_send: PhantomData<*const ()>,
        }

        impl $name {
            fn new(lock: RwLock, hold_key: HoldKey, hold: Hold) -> $name {
                $name {
                    lock,
                    hold_key,
                    hold,
                    released: false,
                    _not_send: PhantomData,
                }
            }

            /// Whether the lease is still believed held (no round trip).
            pub fn is_held(&self) -> bool {
                self.hold.lease.is_held()
            }

            /// Releases this level of the hold; `LockLost` if the lease had
            /// been lost.
            pub fn release(mut self) -> Result<()> {
                self.released = true;
                self.release_inner()
            }

            fn release_inner(&mut self) -> Result<()> {
                if !reentrancy::release_level(&self.hold_key, &self.hold)? {
                    return Ok(());
                }
                self.lock.release(self.hold_key.mode, &self.hold.token)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("lock", &self.lock)
                    .field("held", &self.is_held())
                    .finish()
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                if !self.released {
                    if let Err(e) = self.release_inner() {
                        log::warn!("redlease: releasing {:?} on drop: {e}", self.lock);
                    }
                }
            }
        }
    };
}

rw_guard!(ReadGuard, "a read hold");
rw_guard!(WriteGuard, "the write hold");

impl WriteGuard {
    /// The fencing token of this write hold (strictly increasing per name,
    /// shared with [`Client::lock`] of the same name).
    pub fn fencing_token(&self) -> u64 {
        self.hold.fence
    }
}
