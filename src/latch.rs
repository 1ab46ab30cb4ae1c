//! The count-down latch: wait until N things have happened, across
//! threads, clients and processes.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::Call;
use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::keys as schema;
use crate::scripts::{LATCH_COUNT_DOWN, LATCH_LOOK, LATCH_SET};
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
            .map(|n| (n.key(schema::LATCH).into(), n.name().clone()))
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
    /// set. A count of 0 is an `InvalidArgument` error. If the reply is
    /// lost, the error [`is_ambiguous`](crate::Error::is_ambiguous): the
    /// count may or may not be set (it is never set twice).
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
        // A fresh id per round: the opening message names its round, so a
        // late message of an earlier round cannot open this one.
        let round = self.client.new_token();
        // Never repeated: if the round opened between a lost reply and a
        // repeat, the repeat would set it again. A lost reply is an error
        // whose outcome is unknown (`count()` tells).
        let set: i64 = self
            .client
            .backend()
            .once(&Call {
                lua: &LATCH_SET,
                keys: &[key.to_vec()],
                args: &[count.to_string().into_bytes(), round.as_bytes().to_vec()],
            })
            .map_err(|e| e.about("latch", name))?;
        Ok(set == 1)
    }

    /// Counts down by one; the last count-down opens the latch and wakes
    /// every waiter, in every client. Does nothing if the latch has no
    /// count.
    pub fn count_down(&self) -> Result<()> {
        let (key, name) = self.key()?;
        let wakeup = self.client.wakeup();
        // Never repeated: a second run would count down twice.
        let (left, round): (i64, Vec<u8>) = self
            .client
            .backend()
            .once(&Call {
                lua: &LATCH_COUNT_DOWN,
                keys: &[key.to_vec(), waiters_key(key)],
                args: &[wakeup.channel(key).to_vec(), wakeup.message(key)],
            })
            .map_err(|e| e.about("latch", name))?;
        if left == 0 && !round.is_empty() {
            wakeup.notify_local(&round_key(key, &round));
        }
        Ok(())
    }

    /// The current count (0 when open or never set). One round trip.
    pub fn count(&self) -> Result<u64> {
        let (key, name) = self.key()?;
        Ok(self
            .read(key, None)
            .map_err(|e| e.about("latch", name))?
            .map_or(0, |(n, _)| n))
    }

    /// The count and round, `None` when the latch has no count. A
    /// waiter (`waiter`: its token) is registered while the latch is
    /// closed, for one entry lifetime (lua/latch_look.lua).
    fn read(&self, key: &[u8], waiter: Option<&str>) -> Result<Option<(u64, Vec<u8>)>> {
        let backend = self.client.backend();
        let v: Option<Vec<u8>> = match waiter {
            None => backend.query(redis::cmd("GET").arg(key))?,
            Some(token) => {
                let life = self
                    .client
                    .wakeup()
                    .entry_life(true)
                    .as_millis()
                    .to_string();
                backend.eval(
                    &LATCH_LOOK,
                    &[key, &waiters_key(key)],
                    &[token.as_bytes(), life.as_bytes()],
                )?
            }
        };
        let Some(v) = v else {
            return Ok(None);
        };
        let foreign = || {
            Error::new(
                ErrorKind::WrongType,
                "the latch key holds a value that was not written by redlease",
            )
        };
        let colon = v.iter().position(|&b| b == b':').ok_or_else(foreign)?;
        let n = std::str::from_utf8(&v[..colon])
            .ok()
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(foreign)?;
        if colon + 1 == v.len() {
            return Err(foreign());
        }
        Ok(Some((n, v[colon + 1..].to_vec())))
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
        // Registered while waiting: the opening is published only then.
        let token = self.client.new_token();
        let waiter = Some(&*token);
        let round = match self.read(key, waiter).map_err(|e| e.about("latch", name))? {
            None => return Ok(Some(())),
            Some((_, round)) => round,
        };
        // Wait on this round's opening: its announcement is the answer (no
        // re-read, so a waiter returns one message after the last
        // count-down). Every waiter is woken (`Turns::Server`). Without an
        // announcement (a lost message, a reconnect nudge, the fallback
        // poll) the latch is read again: gone, or another round, means
        // this round opened.
        let signalled = std::cell::Cell::new(false);
        let opened = self
            .client
            .wakeup()
            .acquire(
                crate::wakeup::Wait {
                    key: &round_key(key, &round),
                    turns: Turns::Server,
                    deadline,
                    jump: false,
                    direct: None,
                    signalled: Some(&signalled),
                    patient: true,
                },
                |_| {
                    if signalled.get() {
                        return Ok(Attempt::Acquired(()));
                    }
                    Ok(match self.read(key, waiter)? {
                        Some((_, r)) if r == round => Attempt::Busy(None),
                        _ => Attempt::Acquired(()),
                    })
                },
            )
            .map_err(|e| e.about("latch", name));
        if !matches!(opened, Ok(Some(()))) {
            // Gave up: no longer waiting (else the entry lapses by itself).
            let _: Result<i64> = self
                .client
                .backend()
                .query(redis::cmd("ZREM").arg(waiters_key(key)).arg(&*token));
        }
        opened
    }
}

/// The latch's waiters (lua/latch_look.lua), in the latch's hash tag.
fn waiters_key(key: &[u8]) -> Vec<u8> {
    [key, b":w"].concat()
}

/// The key a round's waiters wait on: `<latch key>#<round>`, which is what
/// the opening message names.
fn round_key(key: &[u8], round: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1 + round.len());
    k.extend_from_slice(key);
    k.push(b'#');
    k.extend_from_slice(round);
    k
}
