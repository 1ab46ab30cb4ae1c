//! The client: the handle every primitive is made from, and how names
//! become keys. Its configuration is `builder.rs`.

pub(crate) mod builder;
pub(crate) mod capabilities;
pub(crate) mod connection;
pub(crate) mod inspect;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::backend::Backend;
use crate::client::builder::ClientBuilder;
use crate::error::Result;
use crate::handles::latch::CountDownLatch;
use crate::handles::lock::Lock;
use crate::handles::multilock::MultiLock;
use crate::handles::rwlock::RwLock;
use crate::handles::semaphore::Semaphore;
use crate::lease::context::Context;
use crate::protocol::keys::Names;

/// A handle to Redis from which locks are made.
///
/// `Client` is cheap to clone (an `Arc` inside) and can be shared across
/// threads. Clones are the same owner: a thread re-enters a lock it holds
/// through any clone. Two clients built separately are two owners, exactly
/// like two processes.
#[derive(Clone)]
pub struct Client {
    /// What the handles it makes share with it.
    pub(crate) cx: Context,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.cx.inner.id)
            .field(
                "prefix",
                &String::from_utf8_lossy(&self.cx.inner.config.prefix),
            )
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to one Redis server with default settings.
    ///
    /// ```no_run
    /// let client = redlease::Client::open("redis://127.0.0.1:6379/")?;
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn open(url: impl AsRef<str>) -> Result<Client> {
        Client::builder().url(url).build()
    }

    /// Starts configuring a client.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// This client's id: part of every token it writes, and what
    /// `redlease status` shows as the holder.
    pub fn id(&self) -> Uuid {
        self.cx.inner.id
    }

    /// The watchdog timeout: the lease of every lock without a fixed lease.
    pub fn watchdog_timeout(&self) -> Duration {
        self.cx.inner.config.watchdog
    }

    /// A reentrant exclusive lock named `name`.
    ///
    /// Names are any non-empty bytes up to 8 KiB; an invalid name is reported
    /// by the first operation on the lock.
    pub fn lock(&self, name: impl AsRef<[u8]>) -> Lock {
        Lock::new(self.cx.clone(), name.as_ref(), false)
    }

    /// A reentrant exclusive lock that is granted in FIFO order of arrival.
    ///
    /// Same API as [`Client::lock`]. Waiters queue in Redis (with deadlines
    /// from the server's clock); one that gives up leaves the queue, one that
    /// dies is dropped from it after a few fallback periods, so neither
    /// stalls the others. Costs a little more per acquisition than `lock`.
    pub fn fair_lock(&self, name: impl AsRef<[u8]>) -> Lock {
        Lock::new(self.cx.clone(), name.as_ref(), true)
    }

    /// A distributed read-write lock named `name`; see [`RwLock`].
    pub fn rw_lock(&self, name: impl AsRef<[u8]>) -> RwLock {
        RwLock::new(self.cx.clone(), name.as_ref())
    }

    /// A semaphore named `name` with `permits` permits; see [`Semaphore`].
    /// A count of 0 is reported by the first operation.
    pub fn semaphore(&self, name: impl AsRef<[u8]>, permits: u32) -> Semaphore {
        Semaphore::new(self.cx.clone(), name.as_ref(), permits, false)
    }

    /// A semaphore that grants permits in FIFO order of arrival. Waiters
    /// queue in Redis with server-time deadlines: one that gives up leaves,
    /// one that dies is dropped, so neither stalls the queue.
    pub fn fair_semaphore(&self, name: impl AsRef<[u8]>, permits: u32) -> Semaphore {
        Semaphore::new(self.cx.clone(), name.as_ref(), permits, true)
    }

    /// The locks `names` taken together, all or nothing; see [`MultiLock`].
    pub fn multi_lock<I, N>(&self, names: I) -> MultiLock
    where
        I: IntoIterator<Item = N>,
        N: AsRef<[u8]>,
    {
        MultiLock::new(&self.cx, names)
    }

    /// A count-down latch named `name`; see [`CountDownLatch`].
    pub fn count_down_latch(&self, name: impl AsRef<[u8]>) -> CountDownLatch {
        CountDownLatch::new(self.cx.clone(), name.as_ref())
    }

    /// Runs `f` while holding the lock `name` (waiting as long as needed).
    ///
    /// The lock is released when `f` returns or panics (the panic then
    /// continues). If the lease was lost while `f` ran, the result is an
    /// error of kind [`ErrorKind::LockLost`](crate::ErrorKind::LockLost): `f` completed, but another
    /// holder may have run concurrently for part of it.
    ///
    /// To keep `f`'s value even when the lease was lost, hold the guard
    /// yourself; its [`lost_signal`](crate::LockGuard::lost_signal) lets
    /// long work stop early:
    ///
    /// ```no_run
    /// # let client = redlease::Client::open("redis://127.0.0.1:6379/")?;
    /// let guard = client.lock("report").acquire()?;
    /// let lost = guard.lost_signal();
    /// let value = (0..10).take_while(|_| !lost.is_lost()).count();
    /// let exclusive = guard.release().is_ok(); // false: someone else may have run too
    /// # let _ = (value, exclusive);
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn with_lock<T>(&self, name: impl AsRef<[u8]>, f: impl FnOnce() -> T) -> Result<T> {
        self.lock(name).with(f)
    }

    /// Wake-ups the subscriber delivered to this client's waiters so far.
    #[doc(hidden)]
    pub fn wakeups_delivered(&self) -> u64 {
        self.cx.inner.wakeup.delivered()
    }

    pub(crate) fn backend(&self) -> &Arc<Backend> {
        self.cx.backend()
    }

    /// The key prefix (namespace).
    pub(crate) fn prefix(&self) -> &[u8] {
        self.cx.prefix()
    }

    /// Builds the keys of one primitive: `<prefix>{<escaped name>}<suffix>`.
    pub(crate) fn names(&self, name: &[u8]) -> Result<Names> {
        self.cx.names(name)
    }
}
