//! The count-down latch: wait until N things have happened, across
//! threads, clients and processes.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{BlockingLook, Call};
use crate::error::{Error, ErrorKind, Result};
use crate::lease::context::Context;
use crate::protocol::keys as schema;
use crate::protocol::scripts::{millis, Parts, LATCH_COUNT_DOWN, LATCH_LOOK, LATCH_SET};
use crate::protocol::timing::{OPENING_LIFE, ROOM_CHUNK, ROOM_ENTRY};
use crate::wakeup::{blocks_now, deadline_after, waited, Attempt, Turns};

/// A named distributed count-down latch (Redisson's `RCountDownLatch`).
///
/// Made by [`Client::count_down_latch`](crate::Client::count_down_latch). A coordinator sets a count with
/// [`try_set_count`](CountDownLatch::try_set_count); workers call
/// [`count_down`](CountDownLatch::count_down); whoever [`wait`](CountDownLatch::wait)s
/// is woken by the last count-down, without polling: a client's waiters
/// of a latch block on the server in one pop (one connection per client
/// and latch, whatever the number of threads), which the opening serves
/// in every client at once. On Redis Cluster, where the server refuses
/// blocking pops (an ACL without them) or replica acknowledgements are
/// configured, and for waits under a second (a blocked pop times out in
/// steps of the server's 100 ms clock tick), they wait for a release
/// message instead (on Cluster over the name's shard channel, which one
/// subscription per master carries for all of a client's latches).
/// Cheap to clone and `Send + Sync`.
///
/// Life cycle: the latch exists while its count is above zero. The last
/// count-down removes its key, so a finished latch leaves nothing in
/// Redis (the opening's announcement to blocked waiters lapses by itself
/// within a second),
/// `count()` is 0 and waits return at once; `try_set_count` then
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
    client: Context,
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
    pub(crate) fn new(client: Context, name: &[u8]) -> CountDownLatch {
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
                keys: Parts::Owned(&[key.to_vec()]),
                args: Parts::Owned(&[count.to_string().into_bytes(), round.as_bytes().to_vec()]),
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
        // Never repeated: a second run would count down twice. The reply
        // is the round when this call opened the latch, else the count
        // left (lua/latch_count_down.lua).
        let reply: redis::Value = self
            .client
            .backend()
            .once(&Call {
                lua: &LATCH_COUNT_DOWN,
                keys: Parts::Owned(&[key.to_vec(), waiters_key(key), blocked_key(key)]),
                args: Parts::Owned(&[
                    wakeup.channel(key).to_vec(),
                    wakeup.message(key),
                    millis(OPENING_LIFE),
                ]),
            })
            .map_err(|e| e.about("latch", name))?;
        match reply {
            redis::Value::BulkString(round) => wakeup.notify_local(&round_key(key, &round)),
            redis::Value::Int(_) => {}
            _ => {
                return Err(Error::new(
                    ErrorKind::Server,
                    "a latch's count-down got a reply that is neither a round nor a count",
                )
                .about("latch", name))
            }
        }
        Ok(())
    }

    /// The current count (0 when open or never set). One round trip.
    pub fn count(&self) -> Result<u64> {
        let (key, name) = self.key()?;
        Ok(self
            .read(key, None, None)
            .map_err(|e| e.about("latch", name))?
            .map_or(0, |(n, _)| n))
    }

    /// The count and round, `None` when the latch has no count. A
    /// waiter (`waiter`: its token) is registered while the latch is
    /// closed, for one entry lifetime (lua/latch_look.lua). A waiter's
    /// read waits for a connection no longer than its `deadline` allows
    /// (see `Backend::eval_by`).
    fn read(
        &self,
        key: &[u8],
        waiter: Option<&str>,
        deadline: Option<Instant>,
    ) -> Result<Option<(u64, Vec<u8>)>> {
        let backend = self.client.backend();
        let v: Option<Vec<u8>> = match waiter {
            None => backend.query_by(redis::cmd("GET").arg(key), deadline)?,
            Some(token) => {
                let life = self
                    .client
                    .wakeup()
                    .entry_life(true)
                    .as_millis()
                    .to_string();
                backend.eval_by(
                    &Call::borrowed(
                        &LATCH_LOOK,
                        &[key, &waiters_key(key)],
                        &[token.as_bytes(), life.as_bytes()],
                    ),
                    deadline,
                )?
            }
        };
        parse(v)
    }

    /// A look that blocks up to `block` for the opening of `round`
    /// (`Backend::look_blocking`): whether it opened (the pop took its
    /// announcement, or the look found the latch without this round's
    /// count). The waiter is registered meanwhile, for a chunk and room.
    fn look_blocking(
        &self,
        key: &[u8],
        token: &str,
        round: &[u8],
        block: Duration,
        deadline: Option<Instant>,
    ) -> Result<bool> {
        let list = opening_key(key, round);
        let keys = [key.to_vec(), blocked_key(key), list.clone()];
        let args = [
            token.as_bytes().to_vec(),
            millis(ROOM_ENTRY),
            round.to_vec(),
            millis(OPENING_LIFE),
        ];
        let look = Call {
            lua: &LATCH_LOOK,
            keys: Parts::Owned(&keys),
            args: Parts::Owned(&args),
        };
        let backend = self.client.backend();
        let (seen, popped) = backend.look_blocking(&BlockingLook {
            look,
            list: &list,
            block,
            deadline,
        })?;
        // Freed off the path of a waiter just woken (see `deferred`).
        crate::util::deferred::drop_later((keys, args, list));
        if popped {
            self.client.wakeup().delivered_directly();
            return Ok(true);
        }
        let seen = match seen {
            redis::Value::Nil => None,
            redis::Value::BulkString(v) => Some(v),
            _ => {
                return Err(Error::new(
                    ErrorKind::Server,
                    "a latch look answered neither the latch's value nor nil",
                ))
            }
        };
        Ok(!matches!(parse(seen)?, Some((_, r)) if r == round))
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
        let backend = self.client.backend();
        // Whether this waiter blocks on the server (see below). Not on
        // Cluster: there one shard subscription per master serves all of a
        // client's latches, with no connection held per latch (issue 10's
        // fan-out). Nor for a short wait, or the end of a long one (see
        // `blocks_now`, the rule the waiting loop asks too): it registers
        // for the message then.
        let blocks = || blocks_now(backend, None, deadline) && !backend.is_cluster();
        // A waiter that waits for messages is registered while it waits:
        // the opening is published only then. One that blocks registers
        // when it blocks (its look, behind which it pops).
        let token = self.client.new_token();
        let waiter = |blocking: bool| (!blocking).then_some(&*token);
        let round = match self
            .client
            .wakeup()
            .look(deadline, || self.read(key, waiter(blocks()), deadline))
            .map_err(|e| e.about("latch", name))?
        {
            // The deadline passed while the server could not be reached.
            None => return Ok(None),
            Some(None) => return Ok(Some(())),
            Some(Some((_, round))) => round,
        };
        // Wait on this round's opening. Where the server lets waiters block,
        // the client's first waiter blocks there (`direct`), in a look with a
        // pop of the round's opening list behind it: the opening pushes an
        // element there for each waiter so blocked, which wakes them in
        // every client at once, with no message and no other thread; the
        // client's other waiters of the round queue behind its first
        // locally, and each looks once when it leaves. Otherwise the
        // opening's message is the answer (no re-read, so a waiter returns
        // one message after the last count-down), and without one (a lost
        // message, a reconnect nudge, the fallback poll) the latch is read
        // again: gone, or another round, means this round opened.
        let signalled = std::cell::Cell::new(false);
        let opened = self
            .client
            .wakeup()
            .acquire(
                crate::wakeup::Wait {
                    key: &round_key(key, &round),
                    turns: Turns::Local(0),
                    deadline,
                    jump: false,
                    // Its read of the round just now was the first look.
                    looked: true,
                    direct: blocks().then_some(ROOM_CHUNK),
                    place: None,
                    signalled: Some(&signalled),
                    patient: true,
                    // A latch's opening is no hand-over.
                    watch: None,
                },
                |block| {
                    if signalled.get() {
                        return Ok(Attempt::Acquired(()));
                    }
                    let open = match block {
                        Some(block) => self.look_blocking(key, &token, &round, block, deadline)?,
                        None => {
                            let seen = self.read(key, waiter(blocks()), deadline)?;
                            !matches!(seen, Some((_, r)) if r == round)
                        }
                    };
                    Ok(if open {
                        Attempt::Acquired(())
                    } else {
                        Attempt::Busy(None)
                    })
                },
            )
            .map_err(|e| e.about("latch", name));
        if let Ok(None) = opened {
            // Out of time: one last look. A blocked waiter learns of the
            // opening from its pop, which the server times out in steps of
            // its clock tick (100 ms): an opening in that step, or one
            // whose announcement this waiter never got, is still seen.
            // Past the deadline, these calls wait for a connection one
            // response timeout at most (see `Backend::eval_by`).
            match self.read(key, None, deadline) {
                Ok(seen) if !matches!(&seen, Some((_, r)) if *r == round) => return Ok(Some(())),
                Ok(_) => {}
                // Not answering: the registration lapses by itself.
                Err(_) => return opened,
            }
        }
        if !matches!(opened, Ok(Some(()))) {
            // Gave up: no longer waiting (else the entry lapses by itself).
            for set in [waiters_key(key), blocked_key(key)] {
                let zrem = redis::cmd("ZREM").arg(set).arg(&*token).clone();
                if backend.query_by::<i64>(&zrem, deadline).is_err() {
                    break;
                }
            }
        }
        opened
    }
}

/// The latch's value as its count and round, `None` when it has no count.
fn parse(v: Option<Vec<u8>>) -> Result<Option<(u64, Vec<u8>)>> {
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
    // Digits only, as the scripts read it (`%d+`): `u64`'s parser would
    // also take a sign ("+1:x"), which the scripts call foreign.
    if colon == 0 || !v[..colon].iter().all(u8::is_ascii_digit) {
        return Err(foreign());
    }
    let n = std::str::from_utf8(&v[..colon])
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
        .ok_or_else(foreign)?;
    if colon + 1 == v.len() {
        return Err(foreign());
    }
    Ok(Some((n, v[colon + 1..].to_vec())))
}

/// The latch's waiters that wait for its opening's message
/// (lua/latch_look.lua), in the latch's hash tag.
fn waiters_key(key: &[u8]) -> Vec<u8> {
    [key, b":w"].concat()
}

/// The latch's waiters blocked on its opening list (lua/latch_look.lua).
fn blocked_key(key: &[u8]) -> Vec<u8> {
    [key, b":b"].concat()
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

/// The list a round's opening is announced on to blocked waiters
/// (lua/latch_count_down.lua): `<latch key>#<round>:open`.
fn opening_key(key: &[u8], round: &[u8]) -> Vec<u8> {
    [&round_key(key, round)[..], b":open"].concat()
}
