//! The count-down latch: wait until N things have happened, across
//! threads, clients and processes.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::Call;
use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::scripts::{LATCH_COUNT_DOWN, LATCH_SET};
use crate::wakeup::{deadline_after, waited, Attempt, Turns};

/// A named distributed count-down latch (Redisson's `RCountDownLatch`).
///
/// Made by [`Client::count_down_latch`]. A coordinator sets a count with
/// [`try_set_count`](CountDownLatch::try_set_count); workers call
/// [`count_down`](CountDownLatch::count_down); whoever [`wait`](CountDownLatch::wait)s
/// is woken by the last count-down (a release message, no polling; the
/// client's fallback poll covers a lost message). Cheap to clone and
/// `Send + Sync`.
///
/// Life cycle: the latch exists while its count is above zero. The last
/// count-down removes its key, so a finished latch leaves nothing in
/// Redis, `count()` is 0 and waits return at once; `try_set_count` then
/// starts a new round. A latch whose count never reaches zero does **not**
/// expire: it stays (one small key) until counted down; waiters with a
/// timeout give up on their own. Counting down a latch with no count does
/// nothing.
///
/// Works on one server, Sentinel and Cluster (its key carries the name's
/// hash tag); on Redlock it is [`ErrorKind::Unsupported`]: a count needs
/// one authoritative copy.
///
/// ```no_run
/// # let client = redlease::Client::open("redis://127.0.0.1:6379/")?;
/// let gate = client.count_down_latch("deploy-42");
/// gate.try_set_count(3)?;            // the coordinator
/// // ... three workers, anywhere, each call gate.count_down()? when done ...
/// if gate.wait_timeout(std::time::Duration::from_secs(600))? {
///     println!("all three are done");
/// }
/// # Ok::<(), redlease::Error>(())
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    client: Client,
    key: std::result::Result<Keyed, Arc<str>>,
}

/// The latch's key and its name as given.
type Keyed = (Arc<[u8]>, Arc<[u8]>);

impl fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("CountDownLatch");
        match &self.key {
            Ok((key, _)) => d.field("key", &String::from_utf8_lossy(key)),
            Err(e) => d.field("invalid", e),
        };
        d.finish()
    }
}

impl CountDownLatch {
    pub(crate) fn new(client: Client, name: &[u8]) -> CountDownLatch {
        let key = client
            .names(name)
            .map(|n| (n.key(":latch").into(), n.name().clone()))
            .map_err(|e| Arc::from(e.message()));
        CountDownLatch { client, key }
    }

    /// The latch's key and name, or the error for a bad name or topology.
    fn key(&self) -> Result<(&[u8], &[u8])> {
        let (key, name) = self
            .key
            .as_ref()
            .map_err(|e| Error::invalid(e.to_string()))?;
        if self.client.backend().is_redlock() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "a count-down latch needs a single leader (one server, Sentinel or Cluster)",
            )
            .about("latch", name));
        }
        Ok((key, name))
    }

    /// Sets the count to `count` if the latch has none (it is new or its
    /// last round finished): `true` if set, `false` if a count was already
    /// set. A count of 0 is an `InvalidArgument` error.
    pub fn try_set_count(&self, count: u64) -> Result<bool> {
        let (key, name) = self.key()?;
        if count == 0 {
            return Err(Error::invalid("a latch count must be at least 1").about("latch", name));
        }
        if count > i64::MAX as u64 {
            return Err(
                Error::invalid("a latch count must fit in a signed 64-bit integer")
                    .about("latch", name),
            );
        }
        let set: i64 = self
            .client
            .backend()
            .eval(&LATCH_SET, &[key], &[count.to_string().as_bytes()])
            .map_err(|e| e.about("latch", name))?;
        Ok(set == 1)
    }

    /// Counts down by one; the last count-down opens the latch and wakes
    /// every waiter, in every client. Does nothing if the latch has no
    /// count.
    pub fn count_down(&self) -> Result<()> {
        let (key, name) = self.key()?;
        let wakeup = self.client.wakeup();
        let left = self
            .client
            .backend()
            .confirm(&Call {
                lua: &LATCH_COUNT_DOWN,
                keys: &[key.to_vec()],
                args: &[wakeup.channel().to_vec(), wakeup.message(key)],
            })
            .map_err(|e| e.about("latch", name))?;
        if left == 0 {
            wakeup.notify_local(key);
        }
        Ok(())
    }

    /// The current count (0 when open or never set). One round trip.
    pub fn count(&self) -> Result<u64> {
        let (key, name) = self.key()?;
        self.read(key).map_err(|e| e.about("latch", name))
    }

    fn read(&self, key: &[u8]) -> Result<u64> {
        let v: Option<String> = self.client.backend().query(redis::cmd("GET").arg(key))?;
        match v {
            None => Ok(0),
            Some(v) => v.parse::<u64>().map_err(|_| {
                Error::new(
                    ErrorKind::WrongType,
                    "the latch key holds a value that was not written by redlease",
                )
            }),
        }
    }

    /// Waits until the count reaches zero.
    pub fn wait(&self) -> Result<()> {
        self.wait_until(None).and_then(waited)
    }

    /// Waits at most `timeout` for the count to reach zero: `true` if it
    /// did, `false` on timeout.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<bool> {
        Ok(self.wait_until(deadline_after(timeout))?.is_some())
    }

    fn wait_until(&self, deadline: Option<Instant>) -> Result<Option<()>> {
        let (key, name) = self.key()?;
        // Every waiter looks on every wake-up (`Turns::Server`): the latch
        // opens for all of them at once.
        self.client
            .wakeup()
            .acquire(key, Turns::Server, deadline, false, || {
                Ok(match self.read(key)? {
                    0 => Attempt::Acquired(()),
                    _ => Attempt::Busy(None),
                })
            })
            .map_err(|e| e.about("latch", name))
    }
}
