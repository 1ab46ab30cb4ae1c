//! The client: the handle every primitive is made from, and how names
//! become keys. Its configuration is `builder.rs`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::backend::Backend;
use crate::builder::ClientBuilder;
use crate::error::{Error, Result};
use crate::events::{HandleEvent, Handler};
use crate::latch::CountDownLatch;
use crate::lock::Lock;
use crate::multilock::MultiLock;
use crate::rwlock::RwLock;
use crate::semaphore::Semaphore;
use crate::wakeup::Wakeup;

/// Longest accepted primitive name, in bytes.
pub const MAX_NAME_LEN: usize = 8 * 1024;

/// A handle to Redis from which locks are made.
///
/// `Client` is cheap to clone (an `Arc` inside) and can be shared across
/// threads. Clones are the same owner: a thread re-enters a lock it holds
/// through any clone. Two clients built separately are two owners, exactly
/// like two processes.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) id: Uuid,
    pub(crate) config: Config,
    pub(crate) backend: Arc<Backend>,
    pub(crate) wakeup: Wakeup,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        self.wakeup.shutdown();
    }
}

/// Validated settings of a client.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) prefix: Vec<u8>,
    pub(crate) watchdog: Duration,
    pub(crate) reentrant: bool,
    pub(crate) events: Option<Handler>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.inner.id)
            .field(
                "prefix",
                &String::from_utf8_lossy(&self.inner.config.prefix),
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
        self.inner.id
    }

    /// The watchdog timeout: the lease of every lock without a fixed lease.
    pub fn watchdog_timeout(&self) -> Duration {
        self.inner.config.watchdog
    }

    /// Whether handles made by this client re-enter a hold their thread
    /// already has (see [`ClientBuilder::reentrant`]).
    pub(crate) fn reentrant(&self) -> bool {
        self.inner.config.reentrant
    }

    /// A reentrant exclusive lock named `name`.
    ///
    /// Names are any non-empty bytes up to 8 KiB; an invalid name is reported
    /// by the first operation on the lock.
    pub fn lock(&self, name: impl AsRef<[u8]>) -> Lock {
        Lock::new(self.clone(), name.as_ref(), false)
    }

    /// A reentrant exclusive lock that is granted in FIFO order of arrival.
    ///
    /// Same API as [`Client::lock`]. Waiters queue in Redis (with deadlines
    /// from the server's clock); one that gives up leaves the queue, one that
    /// dies is dropped from it after a few fallback periods, so neither
    /// stalls the others. Costs a little more per acquisition than `lock`.
    pub fn fair_lock(&self, name: impl AsRef<[u8]>) -> Lock {
        Lock::new(self.clone(), name.as_ref(), true)
    }

    /// A distributed read-write lock named `name`; see [`RwLock`].
    pub fn rw_lock(&self, name: impl AsRef<[u8]>) -> RwLock {
        RwLock::new(self.clone(), name.as_ref())
    }

    /// A semaphore named `name` with `permits` permits; see [`Semaphore`].
    /// A count of 0 is reported by the first operation.
    pub fn semaphore(&self, name: impl AsRef<[u8]>, permits: u32) -> Semaphore {
        Semaphore::new(self.clone(), name.as_ref(), permits, false)
    }

    /// A semaphore that grants permits in FIFO order of arrival. Waiters
    /// queue in Redis with server-time deadlines: one that gives up leaves,
    /// one that dies is dropped, so neither stalls the queue.
    pub fn fair_semaphore(&self, name: impl AsRef<[u8]>, permits: u32) -> Semaphore {
        Semaphore::new(self.clone(), name.as_ref(), permits, true)
    }

    /// The locks `names` taken together, all or nothing; see [`MultiLock`].
    pub fn multi_lock<I, N>(&self, names: I) -> MultiLock
    where
        I: IntoIterator<Item = N>,
        N: AsRef<[u8]>,
    {
        MultiLock::new(self, names)
    }

    /// A count-down latch named `name`; see [`CountDownLatch`].
    pub fn count_down_latch(&self, name: impl AsRef<[u8]>) -> CountDownLatch {
        CountDownLatch::new(self.clone(), name.as_ref())
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
        self.inner.wakeup.delivered()
    }

    pub(crate) fn backend(&self) -> &Arc<Backend> {
        &self.inner.backend
    }

    pub(crate) fn wakeup(&self) -> &Wakeup {
        &self.inner.wakeup
    }

    /// The event handler, if the client has one.
    pub(crate) fn events(&self) -> Option<&Arc<dyn HandleEvent>> {
        self.inner.config.events.as_ref().map(|h| &h.0)
    }

    pub(crate) fn id_u128(&self) -> u128 {
        self.inner.id.as_u128()
    }

    /// A fresh owner token: `rl:<client id>:<random>`, 122 random bits from
    /// the OS generator.
    pub(crate) fn new_token(&self) -> Arc<str> {
        format!("rl:{}:{}", self.inner.id.simple(), Uuid::new_v4().simple()).into()
    }

    /// The key prefix (namespace).
    pub(crate) fn prefix(&self) -> &[u8] {
        &self.inner.config.prefix
    }

    /// Builds the keys of one primitive: `<prefix>{<escaped name>}<suffix>`.
    pub(crate) fn names(&self, name: &[u8]) -> Result<Names> {
        Names::new(&self.inner.config.prefix, name)
    }
}

/// The keys of one named primitive. All share the hash tag `{name}` so that
/// one script may touch them all, also on Redis Cluster.
#[derive(Clone, Debug)]
pub(crate) struct Names {
    base: Vec<u8>,
    name: Arc<[u8]>,
}

impl Names {
    fn new(prefix: &[u8], name: &[u8]) -> Result<Names> {
        if name.is_empty() {
            return Err(Error::invalid("a name must not be empty"));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(Error::invalid(format!(
                "a name must be at most {MAX_NAME_LEN} bytes, got {}",
                name.len()
            )));
        }
        let mut base = Vec::with_capacity(prefix.len() + name.len() + 2);
        base.extend_from_slice(prefix);
        base.push(b'{');
        base.extend_from_slice(&escape_name(name));
        base.push(b'}');
        Ok(Names {
            base,
            name: name.into(),
        })
    }

    /// The name as the user gave it.
    pub(crate) fn name(&self) -> &Arc<[u8]> {
        &self.name
    }

    /// `<prefix>{name}` followed by `suffix`.
    pub(crate) fn key(&self, suffix: &str) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.base.len() + suffix.len());
        k.extend_from_slice(&self.base);
        k.extend_from_slice(suffix.as_bytes());
        k
    }
}

/// The name inside a key's hash tag, as the user gave it: what
/// [`escape_name`] made of it, undone.
pub(crate) fn unescape_name(escaped: &[u8]) -> Vec<u8> {
    let mut name = Vec::with_capacity(escaped.len());
    let mut i = 0;
    while i < escaped.len() {
        match &escaped[i..] {
            [b'%', b'7', b'B', ..] => {
                name.push(b'{');
                i += 3;
            }
            [b'%', b'7', b'D', ..] => {
                name.push(b'}');
                i += 3;
            }
            [b'%', b'2', b'5', ..] => {
                name.push(b'%');
                i += 3;
            }
            [b, ..] => {
                name.push(*b);
                i += 1;
            }
            [] => break,
        }
    }
    name
}

/// The user's name of a primitive from one of its keys
/// (`<prefix>{<escaped name>}<suffix>`); the key itself if it has no tag.
pub(crate) fn name_of_key(key: &[u8]) -> Vec<u8> {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .map(|close| &rest[..close])
    });
    match tagged {
        Some(escaped) => unescape_name(escaped),
        None => key.to_vec(),
    }
}

/// Braces inside the hash tag would end it early (or make it empty, which
/// disables hash tags), so they and the escape byte itself are %-encoded.
pub(crate) fn escape_name(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len());
    for &b in name {
        match b {
            b'{' => out.extend_from_slice(b"%7B"),
            b'}' => out.extend_from_slice(b"%7D"),
            b'%' => out.extend_from_slice(b"%25"),
            _ => out.push(b),
        }
    }
    out
}
