//! Blocking on a server for a grant: a queued waiter's `BLMOVE` from its
//! name's open list with the commands pipelined behind it (the grant a
//! pop alone takes), a latch's blocking look, and the slots that bound
//! how many connections block at once.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redis::{FromRedisValue, Value};

use super::Node;
use crate::backend::{Answer, Args, Call};
use crate::error::{Error, ErrorKind, Result};
use crate::protocol::popped::{
    behind_pop, clock_us, pop_took_grant, script_behind_pop, waited, SERVER_CLOCK,
};
use crate::protocol::timing::POPPED_LEASE;

/// Where a queued waiter blocks for its grant (see
/// [`Node::grant_blocking`]).
pub(crate) struct Pop<'a> {
    /// The name's open list, which a hand-over pushes its fence onto...
    pub(crate) list: &'a [u8],
    /// ...and the waiter's own list, which the pop moves it into.
    pub(crate) into: &'a [u8],
    /// The lock key (or a read-write lock's writer key), where the pop
    /// alone is the grant (lua/queue.lua `held_by`); `None` where the
    /// granting script must run behind it (permits).
    pub(crate) holder: Option<&'a [u8]>,
    /// A fair lock's waiters that keep their turn waiting for messages:
    /// while there are any, the pop alone is no grant, and the script
    /// decides whose turn it is (lua/queue.lua `queue_take_open`).
    pub(crate) turns: Option<&'a [u8]>,
}

/// A queued waiter's request for a grant that blocks (see
/// [`Node::grant_blocking`]): where it blocks and for how long, the
/// granting script sent behind its pop (or after it), the undo written
/// behind a late reply, and the waiter's deadline.
pub(crate) struct BlockingGrant<'a> {
    pub(crate) pop: Pop<'a>,
    pub(crate) block: Duration,
    pub(crate) call: Call<'a>,
    pub(crate) undo: Call<'a>,
    pub(crate) deadline: Option<Instant>,
}

/// A look that blocks for an announcement (see [`Node::look_blocking`]):
/// the look, the list it blocks on and for how long, and the caller's
/// deadline.
pub(crate) struct BlockingLook<'a> {
    pub(crate) look: Call<'a>,
    pub(crate) list: &'a [u8],
    pub(crate) block: Duration,
    pub(crate) deadline: Option<Instant>,
}

/// What [`Node::grant_blocking`] came to.
#[derive(Debug)]
pub(crate) struct Blocked {
    /// The grant's answer.
    pub(crate) reply: Answer,
    /// The pop took a grant's wake-up.
    pub(crate) popped: bool,
    /// A grant taken by a pop has a first lease this short, from no
    /// earlier than this instant (a process frozen while it was blocked
    /// must not hold the name long); `None`: the full lease, from when the
    /// attempt was sent.
    pub(crate) short: Option<(Instant, Duration)>,
    /// The grant was made by a call of its own, sent at this instant after
    /// the block (on Cluster, once the slot moved under the block): its
    /// full lease counts from then, not from the block's sending.
    pub(crate) sent: Option<Instant>,
    /// The waiter was not blocked for the whole attempt (no connection to
    /// block on, the connection broke while blocked, the slot moved under
    /// the block): a fair waiter's place among the blocked is gone
    /// (`protocol::blocking::Place`).
    pub(crate) cut: bool,
    /// The server refused the pop itself (a Cluster redirection,
    /// `TRYAGAIN`): it never blocked, and blocking again at once would be
    /// refused again. (Read by the Cluster backend.)
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) refused: bool,
}

/// A connection's worth of blocking, returned when dropped.
struct BlockingSlot<'a>(&'a crossbeam_channel::Sender<()>);

impl Drop for BlockingSlot<'_> {
    fn drop(&mut self) {
        let _ = self.0.try_send(());
    }
}

impl Node {
    /// A slot to block a connection in, waiting at most `wait` for one.
    fn blocking_slot(&self, wait: Duration) -> Option<BlockingSlot<'_>> {
        self.blocking_slots
            .1
            .recv_timeout(wait)
            .ok()
            .map(|()| BlockingSlot(&self.blocking_slots.0))
    }

    /// Waits up to `block` for a grant on the name's open list
    /// (`BLMOVE` into the waiter's own list; see [`Pop`]). Two shapes:
    ///
    /// - With [`Pop::holder`] (a lock, a write hold), the pop alone is the grant
    ///   (lua/queue.lua `held_by`): behind it go only the own list's
    ///   expiry and a look at the lock key (`PTTL`, `GET`), which say
    ///   whether the popped fence is the open grant and how long it runs
    ///   (and for a fair lock `EXISTS` of [`Pop::turns`]: while a waiter
    ///   keeps its turn, the script decides).
    ///   Nothing else is on the handoff's path; the hold is claimed later,
    ///   by its first renewal (lua/lock_extend.lua). A pop that took
    ///   nothing (the block ran out), or a fence that is not the grant,
    ///   is followed by the script in a second round trip, as a look.
    /// - Otherwise (permits) the granting script is pipelined behind the pop: the
    ///   server runs it as soon as the pop returns (or times out), and it
    ///   finds on the own list what the pop took, so a granted waiter
    ///   learns it in the same reply.
    ///
    /// Either way no other thread is involved. Outcomes are those of
    /// [`Node::call`]: a late reply gets `undo` written behind it, and the
    /// connection is retired.
    pub(crate) fn grant_blocking(&self, grant: &BlockingGrant<'_>) -> Result<Blocked> {
        let BlockingGrant {
            pop,
            block,
            call,
            undo,
            deadline,
        } = grant;
        let (block, deadline) = (*block, *deadline);
        // The script behind the pop (not a lock's: its pop alone is the
        // grant, and the script follows only a pop that took nothing).
        let behind = script_behind_pop(pop.holder.is_some()).then(|| popped_args(call));
        let behind = behind.as_ref().map(|args| call.with_args(args));
        let (packed, count) = pop_pipeline(pop, block, behind.as_ref());
        let Some((replies, at)) =
            self.exchange_blocking(packed, count, block, deadline, Some(undo))?
        else {
            // Not blocked (no slot, or the connection broke while it was):
            // look once without blocking, which renews our entry; a grant
            // made to us meanwhile waits on our list or names our token.
            let args = popped_args(call);
            return self
                .after_pop(&call.with_args(&args), undo, deadline, false)
                .map(|b| Blocked { cut: true, ..b });
        };
        let mut replies = replies.into_iter();
        let before = clock_reading(replies.next());
        let pop = replies.next().unwrap_or(Value::Nil);
        // The server's clock says how long after the sending the pop was
        // served: the grant started no sooner (`protocol::popped::waited`,
        // never past what our own clock says passed).
        let at = at + waited(before, clock_reading(replies.next()), at.elapsed());
        // The pop refused at once (a Cluster slot being migrated answers
        // `ASK` for a list that is not there yet): never blocked.
        let refused = matches!(&pop, Value::ServerError(e) if e.code() != "NOPERM");
        let popped = self.pop_outcome(pop);
        if let Some(behind) = &behind {
            let reply = replies.next().unwrap_or(Value::Nil);
            return Ok(Blocked {
                short: popped.is_some().then_some((at, POPPED_LEASE)),
                cut: refused,
                refused,
                ..self.granted_by_pop(reply, behind, undo, deadline, popped.is_some())?
            });
        }
        let (_, ttl, value) = (replies.next(), replies.next(), replies.next());
        let in_turn = matches!(replies.next(), Some(Value::Int(n)) if n > 0);
        if let Some(granted) = popped_grant(popped.as_deref(), ttl, value, in_turn, at) {
            return Ok(granted);
        }
        // Nothing granted by the pop: the script says where we stand (and
        // renews our queue entry), reading and dropping whatever the pop
        // took.
        let args = popped_args(call);
        self.after_pop(&call.with_args(&args), undo, deadline, popped.is_some())
            .map(|b| Blocked {
                cut: refused,
                refused,
                ..b
            })
    }

    /// One blocking round trip, the step [`Node::grant_blocking`] and
    /// [`Node::look_blocking`] share: `packed` (`count` commands, a pop
    /// among them blocked at most `block`) on a spare connection of our
    /// own, read by `block` plus a response timeout; error replies stay
    /// values. Returns the replies (all `count` of them) and the instant
    /// just before the write. `Ok(None)`: not blocked, and the caller asks
    /// again without blocking: there was no slot (as many waiters as the
    /// pool size are blocked already: a waiter without one polls within a
    /// slice, however long it means to block), or the connection broke
    /// during the long read (or a signal interrupted it: socket reads with
    /// a timeout are never restarted after EINTR), and closing it ended
    /// the pop; the judge of attempts would count the blocked time as a
    /// slow failure rather than one that broke at once. A late reply
    /// retires the connection, with `undo` (a grant's) written behind it.
    fn exchange_blocking(
        &self,
        packed: Vec<u8>,
        count: usize,
        block: Duration,
        deadline: Option<Instant>,
        undo: Option<&Call<'_>>,
    ) -> Result<Option<(Vec<Value>, Instant)>> {
        let Some(_slot) = self.blocking_slot(block.min(crate::protocol::timing::GRANT_SLICE))
        else {
            return Ok(None);
        };
        let mut con = self.spare(deadline)?;
        let at = Instant::now();
        let until = at + block + self.timeouts.response;
        let replies = {
            // Registered while blocked: a Sentinel switch shuts it.
            let _blocked = con.blocking();
            con.exchange(&packed, count, until, self.timeouts.response)
        };
        // The pipeline (a kilobyte for a latch's look) is freed off the
        // path of the waiter just woken (see `deferred`).
        crate::util::deferred::drop_later(packed);
        let replies = match replies {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Err(self.fail(&mut con, e, undo.map(std::slice::from_ref)));
            }
            Err(e) => {
                self.failed(&mut con, &e);
                if e.is_io_error() {
                    drop(con);
                    return Ok(None);
                }
                return Err(e.into());
            }
        };
        self.idle_spare(con);
        if replies.len() != count {
            return Err(Error::new(
                ErrorKind::Server,
                "a blocking call got fewer replies than it sent commands",
            ));
        }
        Ok(Some((replies, at)))
    }

    /// A look that blocks until an announcement (a latch's opening): the
    /// script `look` (safe to repeat) and, right behind it on one
    /// connection, a pop of `list` back onto itself (`BLMOVE list list`),
    /// blocked at most `block`. The announcement is one element pushed
    /// there with a short life: each blocked connection takes it and puts
    /// it back, so one push wakes every waiter blocked on the list, in
    /// every client, in the same pass of the server's loop, and the list
    /// lapses by itself soon after (nothing is sent behind the pop: a
    /// `DEL` there ran before the woken waiter's reply was written, and
    /// made the latch's wake-up about 4 % slower). `look` makes sure an
    /// element is there when the event already happened, so the pop never
    /// blocks for an announcement made before it. The two go in one write
    /// of about a kilobyte, which the server reads whole: a pop that
    /// reached it after the list lapsed (a write the network split between
    /// the look and the pop, the opening in between) would block until
    /// the event's next look. `look` goes
    /// whole (`EVAL`): a server that lost its scripts still runs it, where
    /// an `EVALSHA` refused would leave the pop behind it blocked for
    /// nothing. Returns the look's reply and whether the pop took
    /// something. Without a connection to block on (as many are blocked as
    /// the pool holds), or after one broke while blocked, the look alone.
    pub(crate) fn look_blocking(&self, l: &BlockingLook<'_>) -> Result<(Value, bool)> {
        let (look, list, block, deadline) = (&l.look, l.list, l.block, l.deadline);
        let plain = || -> Result<(Value, bool)> { Ok((self.eval(look, deadline)?, false)) };
        let packed = redis::pipe()
            .add_command(look.command(true))
            .cmd("BLMOVE")
            .arg(list)
            .arg(list)
            .arg("LEFT")
            .arg("RIGHT")
            .arg(block_timeout(block))
            .get_packed_pipeline();
        let Some((replies, _)) = self.exchange_blocking(packed, 2, block, deadline, None)? else {
            return plain();
        };
        let mut replies = replies.into_iter();
        let (seen, pop) = (
            replies.next().unwrap_or(Value::Nil),
            replies.next().unwrap_or(Value::Nil),
        );
        let popped = self.pop_outcome(pop).is_some();
        match seen.extract_error() {
            Ok(v) => Ok((v, popped)),
            // Not allowed (an ACL without +eval or RPUSH): look plainly,
            // and wait for messages from now on.
            Err(e) if e.code() == Some("NOPERM") => {
                self.refuse_blocking("a look that blocks", e.detail().unwrap_or(""));
                plain()
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The pop's reply: the fence (or other word) it took, if any. A
    /// refused pop turns this node's waiters to release messages.
    fn pop_outcome(&self, pop: Value) -> Option<Vec<u8>> {
        match pop {
            Value::BulkString(b) => Some(b),
            Value::ServerError(e) => {
                if e.code() == "NOPERM" {
                    self.refuse_blocking("a blocking pop", e.details().unwrap_or(""));
                }
                None
            }
            _ => None,
        }
    }

    /// The script sent on its own after a pop (`call` says 'popped'): a
    /// grant it takes from our own list has the short first lease of one
    /// taken by a pop ([`POPPED_LEASE`]), from this sending.
    fn after_pop(
        &self,
        call: &Call<'_>,
        undo: &Call<'_>,
        deadline: Option<Instant>,
        popped: bool,
    ) -> Result<Blocked> {
        let at = Instant::now();
        match self.call(call, Some(undo), deadline) {
            Ok(reply) => Ok(Blocked {
                reply,
                popped,
                short: Some((at, POPPED_LEASE)),
                sent: None,
                cut: false,
                refused: false,
            }),
            // Reading what the pop took is not allowed (an ACL with BLMOVE
            // but without LPOP): wait for messages instead.
            Err(e) if e.server_code() == Some("NOPERM") => {
                self.refuse_blocking("LPOP behind BLMOVE", &e.to_string());
                Ok(Blocked {
                    reply: Answer::Busy(-1),
                    popped: false,
                    short: None,
                    sent: None,
                    cut: false,
                    refused: false,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// The server refuses `what`, which waiting on it needs: this node's
    /// waiters wait for release messages from now on.
    fn refuse_blocking(&self, what: &str, detail: &str) {
        if self.blocks() {
            log::warn!(
                "redlease: the server refuses {what} ({detail}); waiters fall back to release \
                 messages (slower). Allow +blpop +blmove +lpop +rpush, as the README's ACL \
                 line does"
            );
        }
        self.blocking_refused.store(true, Ordering::Relaxed);
    }

    /// What the script behind a pop answered. A refused `LPOP` turns this
    /// node's waiters to release messages.
    fn granted_by_pop(
        &self,
        reply: Value,
        call: &Call<'_>,
        undo: &Call<'_>,
        deadline: Option<Instant>,
        popped: bool,
    ) -> Result<Blocked> {
        match reply {
            // The script loads on an ordinary call; a grant the pop took
            // stays ours meanwhile (the lock names our token).
            Value::ServerError(e) if e.code() == "NOSCRIPT" => {
                self.after_pop(call, undo, deadline, popped)
            }
            // The pop was allowed, reading what it took is not (an ACL
            // with BLMOVE but without LPOP): wait for messages instead.
            Value::ServerError(e) if e.code() == "NOPERM" => {
                self.refuse_blocking("LPOP behind BLMOVE", e.details().unwrap_or(""));
                Ok(Blocked {
                    reply: Answer::Busy(-1),
                    popped: false,
                    short: None,
                    sent: None,
                    cut: false,
                    refused: false,
                })
            }
            Value::ServerError(e) => Err(redis::RedisError::from(e).into()),
            reply => Ok(Blocked {
                reply: Answer::from_redis_value(reply).map_err(redis::RedisError::from)?,
                popped,
                short: None,
                sent: None,
                cut: false,
                refused: false,
            }),
        }
    }
}

/// `call`'s arguments for a script sent behind a pop from the open list:
/// it is told so (its last argument, 'popped'), and so is any repeat of
/// it, since what the pop took waits on our own list until a script reads
/// it. Built only where such a script is sent: a lock's granted pop
/// sends none, and freeing the copy cost its handoff too.
fn popped_args(call: &Call<'_>) -> Args {
    let mut args: Args = call.args.iter().collect();
    args.push(b"popped");
    args
}

/// A blocking pop's timeout as the server reads it, in seconds: whole
/// milliseconds, rounded down (a pop never outlasts the wait it was sent
/// for, but by the server's clock tick, which it ends on anyway), and
/// never under 2 ms. A 0 blocks for ever, and so does `0.001` on Redis
/// 6.2, which truncates 0.001 × 1000 in long doubles (0.999…) to 0: a
/// wait whose block came out at a millisecond then ended with an error
/// at the read's limit, a response timeout late. Written from integers:
/// a float printed to three places cost about 1.8K instructions a block.
fn block_timeout(block: Duration) -> String {
    let ms = block.as_millis().max(2);
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// [`Node::grant_blocking`]'s pipeline, packed, and how many commands it
/// holds: the server's clock, the pop, the server's clock again
/// (`protocol::popped::SERVER_CLOCK`), and behind them the granting
/// script, or (with [`Pop::holder`]) the own list's expiry and a look at
/// the lock.
fn pop_pipeline(pop: &Pop<'_>, block: Duration, behind: Option<&Call<'_>>) -> (Vec<u8>, usize) {
    let mut pipe = redis::pipe();
    let timeout = block_timeout(block);
    pipe.cmd(SERVER_CLOCK)
        .cmd("BLMOVE")
        .arg(pop.list)
        .arg(pop.into)
        .arg("LEFT")
        .arg("RIGHT")
        .arg(timeout)
        .cmd(SERVER_CLOCK);
    let (packed, count) = match (pop.holder, behind) {
        (Some(holder), _) => {
            let cmds = behind_pop(pop.into, holder, pop.turns);
            for words in &cmds {
                let mut cmd = redis::Cmd::new();
                for w in words {
                    cmd.arg(w.as_ref());
                }
                pipe.add_command(cmd);
            }
            (pipe.get_packed_pipeline(), 1 + cmds.len())
        }
        (None, Some(call)) => {
            pipe.add_command(call.command(false));
            (pipe.get_packed_pipeline(), 2)
        }
        // Nothing behind: the pop alone (every shape without a holder
        // sends its script behind today).
        (None, None) => (pipe.get_packed_pipeline(), 1),
    };
    // The server's clock before the pop and right behind it.
    (packed, count + 2)
}

/// A `TIME` reply in microseconds (`None`: refused, or not a reading).
fn clock_reading(reply: Option<Value>) -> Option<i64> {
    match reply? {
        Value::Array(parts) => match parts.as_slice() {
            [Value::BulkString(s), Value::BulkString(us)] => clock_us(s, us),
            _ => None,
        },
        _ => None,
    }
}

/// The grant a pop alone took, as the protocol core decides it from the
/// replies behind the pop (`protocol::popped::pop_took_grant`), with the
/// time it has left from `at`.
fn popped_grant(
    popped: Option<&[u8]>,
    ttl: Option<Value>,
    value: Option<Value>,
    in_turn: bool,
    at: Instant,
) -> Option<Blocked> {
    let ttl = match ttl {
        Some(Value::Int(ms)) => Some(ms),
        _ => None,
    };
    let value = match &value {
        Some(Value::BulkString(v)) => Some(v.as_slice()),
        _ => None,
    };
    let (fence, left) = pop_took_grant(popped, ttl, value, in_turn)?;
    Some(Blocked {
        reply: Answer::Granted(fence),
        popped: true,
        short: Some((at, left)),
        sent: None,
        cut: false,
        refused: false,
    })
}

#[cfg(test)]
mod tests {
    use super::block_timeout;
    use std::time::Duration;

    #[test]
    fn a_block_timeout_is_whole_milliseconds_rounded_down_and_never_under_two() {
        // `0.001` blocks for ever on Redis 6.2 (see `block_timeout`).
        assert_eq!(block_timeout(Duration::ZERO), "0.002");
        assert_eq!(block_timeout(Duration::from_micros(999)), "0.002");
        assert_eq!(block_timeout(Duration::from_micros(1_999)), "0.002");
        assert_eq!(block_timeout(Duration::from_micros(2_999)), "0.002");
        assert_eq!(block_timeout(Duration::from_millis(3)), "0.003");
        assert_eq!(block_timeout(Duration::from_millis(250)), "0.250");
        assert_eq!(block_timeout(Duration::from_secs(60)), "60.000");
        assert_eq!(block_timeout(Duration::from_millis(75_042)), "75.042");
    }
}
